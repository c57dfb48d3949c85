//! One typed call per Slurm operation of `slurm.sh`, run on the login node through the control
//! script's `sh` verb (parameters as data, replies framed by the call's nonce).

use std::time::Duration;

use crate::error::{Error, ErrorCode, Hint, Result};
use crate::remote::Call;
use crate::remote::Remote;

const SCRIPT: &str = include_str!("slurm.sh");

/// One call of `slurm.sh`: its stdout, or `slurm_unavailable` when the login node could not run
/// it at all.
async fn call(
    t: &Remote,
    op: &str,
    params: &[(&str, String)],
    data: Option<&[u8]>,
    limit: Duration,
) -> Result<String> {
    let mut c = Call::new("sh")
        .param("RR_SCRIPT", SCRIPT)
        .param("OP", op)
        .limit(limit);
    for (name, value) in params {
        c = c.param(name, value.clone());
    }
    if let Some(data) = data {
        c = c.data(data);
    }
    let out = c.run(t).await?;
    if out.status.code() != Some(0) {
        return Err(Error::new(
            ErrorCode::RemoteError,
            format!(
                "the Slurm operation {op} failed on {} (status {:?}): {}",
                t.describe(),
                out.status,
                crate::util::printable_excerpt(&out.stderr, 400).trim()
            ),
        ));
    }
    Ok(out.stdout_lossy())
}

fn words(args: &[String]) -> String {
    args.join("\n")
}

/// What `alloc` and `alloc_wait` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocReply {
    Granted(String),
    /// Still waiting: the job id (once salloc printed it), its state and Slurm's reason.
    Pending {
        job: Option<String>,
        state: Option<String>,
        reason: Option<String>,
    },
    /// salloc ended without a grant: its exit status, the job (if any) and what it said.
    Failed {
        status: String,
        job: Option<String>,
        said: String,
    },
}

fn parse_alloc(out: &str) -> Result<AllocReply> {
    let mut lines = out.lines();
    while let Some(line) = lines.next() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("@granted") => match f.next() {
                Some(job) => return Ok(AllocReply::Granted(job.to_string())),
                None => {
                    return Err(Error::new(
                        ErrorCode::RemoteError,
                        "salloc said it granted an allocation but printed no job id; check \
                         the login node's Slurm client (salloc --no-shell by hand)",
                    ));
                }
            },
            Some("@pending") => {
                let job = f.next().filter(|j| *j != "-").map(str::to_string);
                let state = f.next().map(str::to_string);
                let reason = f.collect::<Vec<_>>().join(" ");
                return Ok(AllocReply::Pending {
                    job,
                    state,
                    reason: (!reason.is_empty()).then_some(reason),
                });
            }
            Some("@failed") => {
                let status = f.next().unwrap_or("unknown").to_string();
                let job = f.next().map(str::to_string);
                let said: Vec<&str> = lines.collect();
                return Ok(AllocReply::Failed {
                    status,
                    job,
                    said: said.join("\n"),
                });
            }
            _ => {}
        }
    }
    Err(Error::new(
        ErrorCode::RemoteError,
        format!("the Slurm allocation step gave no answer: {out:?}"),
    ))
}

/// Start `salloc --no-shell` in `dir` (a directory of the session's, on the login node) and
/// wait up to `wait` for the grant. `immediate` is salloc's own bound on a pending allocation
/// (`--immediate`), so a job is never left pending when the engine is gone.
pub async fn alloc_start(
    t: &Remote,
    dir: &str,
    name: &str,
    args: &[String],
    immediate: Duration,
    wait: Duration,
) -> Result<AllocReply> {
    let mut all = args.to_vec();
    all.push(format!("--immediate={}", immediate.as_secs().max(1)));
    let out = call(
        t,
        "alloc",
        &[
            ("DIR", dir.to_string()),
            ("NAME", name.to_string()),
            ("ARGS", words(&all)),
            ("WAIT", wait.as_secs().to_string()),
        ],
        None,
        wait + Duration::from_secs(30),
    )
    .await?;
    parse_alloc(&out)
}

/// Wait up to `wait` more for the allocation started in `dir`.
pub async fn alloc_wait(t: &Remote, dir: &str, wait: Duration) -> Result<AllocReply> {
    let out = call(
        t,
        "alloc_wait",
        &[
            ("DIR", dir.to_string()),
            ("WAIT", wait.as_secs().to_string()),
        ],
        None,
        wait + Duration::from_secs(30),
    )
    .await?;
    parse_alloc(&out)
}

/// End a pending salloc started in `dir` (if any) and cancel `job` (if known).
pub async fn cancel(t: &Remote, dir: Option<&str>, job: Option<&str>) -> Result<()> {
    call(
        t,
        "cancel",
        &[
            ("DIR", dir.unwrap_or("/nonexistent").to_string()),
            ("JOB", job.unwrap_or("-").to_string()),
        ],
        None,
        Duration::from_secs(30),
    )
    .await?;
    Ok(())
}

/// A job as `squeue` (or accounting) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub job_id: String,
    /// `PENDING`, `RUNNING`, `COMPLETING`, `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, ...
    pub state: String,
    /// Slurm's reason (`None` is Slurm's word for none).
    pub reason: Option<String>,
    /// The exit code (`N` of `N:S`), once the job ended.
    pub exit_code: Option<i32>,
    /// The signal (`S` of `N:S`) when one ended it.
    pub signal: Option<i32>,
    /// Read from accounting (`sacct`), not from the controller's memory (`squeue`).
    pub from_accounting: bool,
}

impl JobInfo {
    /// Whether the job is over (every state but pending, running, suspended, configuring,
    /// completing, ...).
    pub fn is_finished(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "SUSPENDED"
                | "CONFIGURING"
                | "COMPLETING"
                | "REQUEUED"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESV_DEL_HOLD"
        )
    }

    /// `STATE (reason REASON)`, for messages.
    pub fn describe(&self) -> String {
        match &self.reason {
            Some(r) if r != "None" => format!("{} (reason {r})", self.state),
            _ => self.state.clone(),
        }
    }
}

fn parse_query(out: &str) -> Vec<JobInfo> {
    let mut jobs = Vec::new();
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("@job ") {
            let f: Vec<&str> = rest.split('|').map(str::trim).collect();
            if f.len() < 4 {
                continue;
            }
            let raw: Option<i32> = f[3].parse().ok();
            let ended = !matches!(f[1], "PENDING" | "RUNNING" | "COMPLETING");
            jobs.push(JobInfo {
                job_id: f[0].to_string(),
                state: f[1].to_string(),
                reason: Some(f[2].to_string()).filter(|r| !r.is_empty()),
                // squeue's exit_code is the wait status: code in the high byte, signal low.
                exit_code: raw.filter(|_| ended).map(|w| (w >> 8) & 0xff),
                signal: raw.filter(|_| ended).map(|w| w & 0x7f).filter(|s| *s != 0),
                from_accounting: false,
            });
        } else if let Some(rest) = line.strip_prefix("@acct ") {
            let f: Vec<&str> = rest.split('|').map(str::trim).collect();
            if f.len() < 3 {
                continue;
            }
            let (code, sig) = f[2].split_once(':').unwrap_or((f[2], "0"));
            // sacct says "CANCELLED by 1002"; the state is the first word.
            let state = f[1].split_whitespace().next().unwrap_or("").to_string();
            jobs.push(JobInfo {
                job_id: f[0].to_string(),
                state,
                reason: None,
                exit_code: code.parse().ok(),
                signal: sig.parse().ok().filter(|s: &i32| *s != 0),
                from_accounting: true,
            });
        }
    }
    jobs
}

/// State, reason and exit code of `jobs`, in one `squeue` call (and one `sacct` for those
/// squeue no longer knows). A job neither knows is absent from the answer.
pub async fn query(t: &Remote, jobs: &[String]) -> Result<Vec<JobInfo>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let out = call(
        t,
        "query",
        &[("JOBS", jobs.join(","))],
        None,
        Duration::from_secs(30),
    )
    .await?;
    Ok(parse_query(&out))
}

/// Submit `script` as a batch job: written to `dir/job.sh` (its output to `dir/stdout` and
/// `dir/stderr`), run in `cwd`. Returns the job id.
pub async fn submit(
    t: &Remote,
    dir: &str,
    name: &str,
    cwd: &str,
    args: &[String],
    script: &str,
) -> Result<String> {
    let out = call(
        t,
        "submit",
        &[
            ("DIR", dir.to_string()),
            ("NAME", name.to_string()),
            ("CWD", cwd.to_string()),
            ("ARGS", words(args)),
        ],
        Some(script.as_bytes()),
        Duration::from_secs(60),
    )
    .await?;
    let mut lines = out.lines();
    while let Some(line) = lines.next() {
        if let Some(job) = line.strip_prefix("@submitted ") {
            return Ok(job.trim().to_string());
        }
        if line.starts_with("@failed") {
            let said: Vec<&str> = lines.collect();
            return Err(rejected("sbatch", &said.join("\n")));
        }
    }
    Err(Error::new(
        ErrorCode::RemoteError,
        format!("sbatch gave no answer: {out:?}"),
    ))
}

/// Slurm refused a request: `slurm_unavailable` when its commands are missing or cannot reach
/// the controller, else `slurm_rejected`.
pub fn rejected(tool: &str, said: &str) -> Error {
    let said = said.trim();
    let unavailable = said.contains("not found")
        || said.contains("Unable to contact slurm controller")
        || said.contains("Could not establish a configuration source")
        || said.contains("Zero Bytes were transmitted");
    if unavailable {
        Error::new(
            ErrorCode::SlurmUnavailable,
            format!(
                "{tool} could not reach Slurm on the login node: {said}; check that Slurm's \
                 commands answer there (SLURM_CONF, the controller)"
            ),
        )
        .with_hint(Hint::CheckSlurm { machine_id: None })
    } else {
        Error::new(
            ErrorCode::SlurmRejected,
            format!(
                "Slurm refused the request ({tool}): {said}; fix the Slurm arguments (the \
                 machine's, or this call's) and try again"
            ),
        )
    }
}

/// What `machine doctor` learns about Slurm on the login node.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// `(tool, path)`; the path is `None` when the tool is missing.
    pub tools: Vec<(String, Option<String>)>,
    /// `PARTITION|AVAIL|TIMELIMIT|NODES|STATE` lines of sinfo.
    pub partitions: Vec<String>,
    /// What sinfo said when it failed.
    pub sinfo_error: Option<String>,
    /// `None` when squeue answered, else what it said.
    pub squeue_error: Option<String>,
    /// `None` when sacct answered, else what it said (no accounting is not fatal).
    pub sacct_error: Option<String>,
}

pub async fn probe(t: &Remote) -> Result<Probe> {
    let out = call(t, "probe", &[], None, Duration::from_secs(30)).await?;
    let mut p = Probe::default();
    let mut lines = out.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("@tool ") {
            let (tool, path) = rest.split_once(' ').unwrap_or((rest, "-"));
            p.tools
                .push((tool.to_string(), (path != "-").then(|| path.to_string())));
        } else if let Some(rest) = line.strip_prefix("@partition ") {
            p.partitions.push(rest.to_string());
        } else if line == "@sinfo_failed" {
            let mut said = Vec::new();
            while let Some(l) = lines.next_if(|l| !l.starts_with('@')) {
                said.push(l);
            }
            p.sinfo_error = Some(said.join(" "));
        } else if let Some(rest) = line.strip_prefix("@squeue ") {
            p.squeue_error = (rest != "ok").then(|| rest.to_string());
        } else if let Some(rest) = line.strip_prefix("@sacct ") {
            p.sacct_error = (rest != "ok").then(|| rest.to_string());
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_replies() {
        assert_eq!(
            parse_alloc("@granted 12\n").unwrap(),
            AllocReply::Granted("12".into())
        );
        assert_eq!(
            parse_alloc("@pending 13 PENDING Resources\n").unwrap(),
            AllocReply::Pending {
                job: Some("13".into()),
                state: Some("PENDING".into()),
                reason: Some("Resources".into())
            }
        );
        match parse_alloc("@failed 1\nsalloc: error: invalid partition\n").unwrap() {
            AllocReply::Failed { status, said, .. } => {
                assert_eq!(status, "1");
                assert!(said.contains("invalid partition"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn query_lines() {
        let jobs = parse_query(
            "@job 3|FAILED|NonZeroExitCode|1280\n@job 4|RUNNING|None|0\n@acct 5|CANCELLED by 7|0:15\n",
        );
        assert_eq!(jobs[0].exit_code, Some(5));
        assert!(jobs[0].is_finished());
        assert_eq!(jobs[1].exit_code, None);
        assert!(!jobs[1].is_finished());
        assert_eq!(jobs[2].state, "CANCELLED");
        assert_eq!(jobs[2].signal, Some(15));
    }
}

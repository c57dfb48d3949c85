//! A machine scheduled by Slurm (docs/slurm.md), end to end: the real OpenSSH test bed is the
//! login node, and the real Slurm bed (`scripts/slurm-bed.sh`: munge, slurmctld, two slurmd on
//! this host) places the work. Sessions run in allocations (shell state, exact exit codes,
//! `SLURM_JOB_ID`), destroy releases the allocation, an allocation cancelled from outside makes
//! the session lost with Slurm's reason, a pending allocation is given up (and cancelled) on
//! `--timeout`, `run once` is a batch job with its exit code and artifacts.
//!
//! The bed is started (idempotently) by the first test that needs it. When Slurm is not
//! installed and cannot be (not root, no package registry), each test says so and skips.

mod common;
mod session_bed;

use std::process::Command;
use std::time::{Duration, Instant};

use remote_runner_testkit::slurm::{job_state, wait_for_job_state as wait_for_state};
use serde_json::Value;
use session_bed::Bed;

fn slurm_session(bed: &Bed, extra: &[&str]) -> (String, String) {
    let work = bed.work_str();
    let mut args = vec![
        "session",
        "create",
        "--machine",
        "bed",
        "--cwd",
        &work,
        "--json",
    ];
    args.extend_from_slice(extra);
    let r = bed.run(&args);
    assert_eq!(r.code, 0, "session create failed: {r:?}");
    let v = r.json();
    let job = v["slurm_job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no slurm_job_id in {v}"))
        .to_string();
    (v["session_id"].as_str().unwrap().to_string(), job)
}

fn stdout_of(bed: &Bed, session: &str, cmd: &str) -> (i64, String) {
    let r = bed.exec(session, cmd, &[]);
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|_| panic!("exec {cmd:?} gave no record: {r:?}"));
    (
        v["exit_code"].as_i64().unwrap_or(-1),
        v["stdout"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn the_machine_record_keeps_the_scheduler_and_refuses_bad_args() {
    let Some(bed) = Bed::slurm() else { return };
    let v = bed.json(&["machine", "show", "bed"]);
    assert_eq!(v["scheduler"]["kind"], "slurm", "{v}");
    assert_eq!(v["scheduler"]["args"], serde_json::json!(["--time=10"]));
    // Options the engine sets itself, unbalanced quotes, and --slurm-args without Slurm.
    let r = bed.run(&[
        "machine",
        "configure-scheduler",
        "bed",
        "--scheduler",
        "slurm",
        "--slurm-args",
        "--job-name=x",
        "--json",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(r.error()["code"], "invalid_argument");
    // The same options in the forms Slurm also accepts: short with the value attached, in a
    // cluster, abbreviated; and a word that would end Slurm's options. Refused on the stored
    // machine and per call, before anything reaches the login node.
    for args in [
        "-o/tmp/x",
        "-D/",
        "-Jx",
        "-vJx",
        "--outp=/tmp/x",
        "--chd=/",
        "--job=x",
        "--no-sh",
        "--time=5 job.sh",
    ] {
        let r = bed.run(&[
            "machine",
            "configure-scheduler",
            "bed",
            "--scheduler",
            "slurm",
            "--slurm-args",
            args,
            "--json",
        ]);
        assert_eq!(r.code, 2, "{args}: {r:?}");
        assert_eq!(r.error()["code"], "invalid_argument", "{args}");
        let r = bed.run(&[
            "session",
            "create",
            "--machine",
            "bed",
            "--slurm-args",
            args,
            "--json",
        ]);
        assert_eq!(r.code, 2, "{args}: {r:?}");
        assert_eq!(r.error()["code"], "invalid_argument", "{args}");
    }
    let v = bed.json(&["machine", "show", "bed"]);
    assert_eq!(v["scheduler"]["args"], serde_json::json!(["--time=10"]));
    let r = bed.run(&[
        "session",
        "create",
        "--machine",
        "local",
        "--slurm-args",
        "--time=5",
        "--json",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("configure-scheduler"), "{r:?}");
}

#[test]
fn doctor_checks_slurm_and_reports_the_partitions() {
    let Some(bed) = Bed::slurm() else { return };
    let r = bed.run(&["machine", "doctor", "bed", "--json"]);
    assert_eq!(r.code, 0, "doctor failed: {r:?}");
    let v = r.json();
    let slurm = &v["slurm"];
    for tool in [
        "sinfo", "salloc", "srun", "sbatch", "squeue", "sacct", "scancel",
    ] {
        assert!(slurm["tools"][tool].is_string(), "{tool} not found: {v}");
    }
    let parts = slurm["partitions"].as_array().expect("partitions");
    let debug = parts
        .iter()
        .find(|p| p["partition"] == "debug")
        .unwrap_or_else(|| panic!("no debug partition in {v}"));
    assert_eq!(debug["default"], true);
    // The bed has no accounting: reported, not a failure.
    assert_eq!(slurm["accounting"], false);
    let human = bed.run(&["machine", "doctor", "bed"]);
    assert!(human.stdout.contains("slurm partitions"), "{human:?}");
}

#[test]
fn a_session_runs_in_an_allocation_and_destroy_releases_it() {
    let Some(bed) = Bed::slurm() else { return };
    let (session, job) = slurm_session(&bed, &["--slurm-args", "--ntasks=1 --comment 'two words'"]);
    assert_eq!(job_state(&job), "RUNNING");
    // Each --slurm-args word reaches salloc as one argument, quotes and spaces kept.
    let comment = Command::new("squeue")
        .args(["-h", "-j", &job, "-o", "%k"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&comment.stdout).trim(), "two words");
    let (code, out) = stdout_of(&bed, &session, "echo \"$SLURM_JOB_ID $SLURMD_NODENAME\"");
    assert_eq!(code, 0);
    let mut words = out.split_whitespace();
    assert_eq!(words.next(), Some(job.as_str()), "{out:?}");
    assert!(
        matches!(words.next(), Some("n1" | "n2")),
        "not on a node: {out:?}"
    );
    // The node is another host as far as processes go (the bed's nodes have a PID namespace
    // and a /tmp of their own): nothing of the session lives in the login node's.
    let (_, ns) = stdout_of(&bed, &session, "readlink /proc/$$/ns/pid");
    let here = std::fs::read_link("/proc/self/ns/pid").unwrap();
    assert_ne!(
        ns.trim(),
        here.to_str().unwrap(),
        "the shell runs on the login node"
    );
    // Shell state persists, exit codes are exact, every byte comes back.
    assert_eq!(stdout_of(&bed, &session, "cd /tmp && export RR_X=42").0, 0);
    let (_, out) = stdout_of(&bed, &session, "echo \"$RR_X $(pwd)\"");
    assert_eq!(out, "42 /tmp\n");
    assert_eq!(stdout_of(&bed, &session, "sh -c 'exit 7'").0, 7);
    let (_, out) = stdout_of(&bed, &session, "printf 'a\\0b\\n'; printf 'no newline'");
    assert_eq!(out, "a\u{0}b\nno newline");
    // A background command in the allocation, stopped by the engine.
    let bg = bed
        .exec(&session, "sleep 300", &["--mode", "background"])
        .json();
    let cmd = bg["command_id"].as_str().unwrap().to_string();
    let stopped = bed.json(&[
        "session",
        "command",
        "stop",
        "--session",
        &session,
        "--command-id",
        &cmd,
    ]);
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    // Typed input reaches the shell on the node; the transcript has it.
    bed.json(&[
        "session",
        "send",
        "--session",
        &session,
        "--input",
        "echo typed-$SLURM_JOB_ID",
    ]);
    let want = format!("typed-{job}");
    session_bed::eventually("the typed line's output", || {
        let r = bed.json(&["session", "read", "--session", &session]);
        r["text"].as_str().unwrap().contains(&want).then_some(())
    });
    // A command that ends the shell: its code, and the session goes on in the allocation.
    let r = bed.exec(&session, "exit 4", &[]);
    assert_eq!(r.json()["exit_code"], 4, "{r:?}");
    let (_, out) = stdout_of(&bed, &session, "echo $SLURM_JOB_ID $RR_X");
    assert_eq!(out, format!("{job} 42\n"));
    let d = bed.json(&["session", "destroy", "--session", &session]);
    assert_eq!(d["status"], "destroyed");
    assert_eq!(d["slurm_job_id"], job.as_str());
    let state = wait_for_state(&job, |s| s != "RUNNING" && s != "COMPLETING");
    assert!(
        state.is_empty() || state == "CANCELLED",
        "job {job} is {state} after destroy"
    );
}

#[test]
fn an_allocation_cancelled_from_outside_makes_the_session_lost_with_slurms_reason() {
    let Some(bed) = Bed::slurm() else { return };
    let (session, job) = slurm_session(&bed, &[]);
    assert_eq!(stdout_of(&bed, &session, "true").0, 0);
    let out = Command::new("scancel").arg(&job).output().expect("scancel");
    assert!(out.status.success(), "{out:?}");
    wait_for_state(&job, |s| s == "CANCELLED" || s.is_empty());
    let r = session_bed::eventually("the session to be lost", || {
        let r = bed.exec(&session, "echo still here", &[]);
        (r.code != 0).then_some(r)
    });
    assert_eq!(r.code, 9, "{r:?}");
    let e = r.error();
    assert_eq!(e["code"], "slurm_job_ended", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("Slurm job {job}")) && msg.contains("CANCELLED"),
        "{msg}"
    );
    let v = bed.json(&["session", "show", "--session", &session]);
    assert_eq!(v["status"], "lost");
    assert!(
        v["status_message"].as_str().unwrap().contains("CANCELLED"),
        "{v}"
    );
    // Later calls say the same, typed.
    let r = bed.exec(&session, "true", &[]);
    assert_eq!(r.error()["code"], "slurm_job_ended", "{r:?}");
    // Destroying a lost session is fine (nothing left to release).
    bed.json(&["session", "destroy", "--session", &session]);
}

#[test]
fn a_pending_allocation_is_given_up_and_cancelled_on_timeout() {
    let Some(bed) = Bed::slurm() else { return };
    let work = bed.work_str();
    let started = Instant::now();
    // Without --json, so that the pending job is reported on stderr as it waits.
    let r = bed.run(&[
        "--timeout",
        "4",
        "session",
        "create",
        "--machine",
        "bed",
        "--cwd",
        &work,
        "--slurm-args",
        "--begin=now+1hour",
    ]);
    let took = started.elapsed();
    assert_eq!(r.code, 6, "{r:?}");
    assert!(
        r.stderr.contains("[slurm_allocation_timeout]")
            || r.stderr.contains("slurm_allocation_timeout"),
        "{r:?}"
    );
    let msg = r.stderr.as_str();
    assert!(
        msg.contains("BeginTime") && msg.contains("cancelled"),
        "{msg}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // The pending state was reported while waiting, with the job id.
    assert!(
        r.stderr.contains("PENDING (reason BeginTime)"),
        "{}",
        r.stderr
    );
    let job: String = msg
        .split("Slurm job ")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let state = wait_for_state(&job, |s| s != "PENDING");
    assert!(
        state.is_empty() || state == "CANCELLED",
        "job {job} is {state}"
    );
    // No session record is left active.
    let list = bed.json(&["session", "list"]);
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] != "active"),
        "{list}"
    );
}

#[test]
fn run_once_is_a_batch_job_with_its_exit_code_and_artifacts() {
    let Some(bed) = Bed::slurm() else { return };
    let input = bed.sb.path().join("in.txt");
    std::fs::write(&input, "from the laptop\n").unwrap();
    let artifact = bed.sb.path().join("out.txt");
    let input_pair = format!("{}={}", input.display(), bed.at("in.txt"));
    let artifact_pair = format!("{}={}", bed.at("out.txt"), artifact.display());
    let work = bed.work_str();
    let r = bed.run(&[
        "run",
        "once",
        "--machine",
        "bed",
        "--cwd",
        &work,
        "--input",
        &input_pair,
        "--cmd",
        "tr a-z A-Z < in.txt > out.txt; echo \"job $SLURM_JOB_ID\"; echo oops >&2; exit 3",
        "--artifact",
        &artifact_pair,
        "--exit-code",
        "--json",
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    let m = r.json();
    assert_eq!(m["status"], "failed", "{m}");
    assert_eq!(m["exit_code"], 3);
    assert!(m["session_id"].is_null(), "a batch run has no session: {m}");
    let job = m["slurm"]["job_id"].as_str().expect("job id").to_string();
    assert_eq!(m["slurm"]["exit_code"], 3);
    assert_eq!(m["slurm"]["exit_source"], "exit_file");
    assert_eq!(m["slurm"]["stdout_excerpt"], format!("job {job}\n"));
    assert_eq!(m["slurm"]["stderr_excerpt"], "oops\n");
    assert_eq!(m["inputs"][0]["status"], "succeeded");
    assert_eq!(m["artifacts"][0]["status"], "succeeded", "{m}");
    assert_eq!(
        std::fs::read_to_string(&artifact).unwrap(),
        "FROM THE LAPTOP\n"
    );
    let on_disk: Value = serde_json::from_str(
        &std::fs::read_to_string(m["manifest_file"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(on_disk["slurm"]["job_id"], job.as_str());
    // Slurm agrees about the exit code (while it still knows the job).
    let state = wait_for_state(&job, |s| s != "RUNNING" && s != "COMPLETING");
    assert!(state == "FAILED" || state.is_empty(), "{state}");
    // A command that succeeds.
    let ok = bed.json(&[
        "run",
        "once",
        "--machine",
        "bed",
        "--cmd",
        "echo fine",
        "--slurm-args",
        "--ntasks=1",
    ]);
    assert_eq!(ok["status"], "succeeded", "{ok}");
    assert_eq!(ok["exit_code"], 0);
}

/// A batch job's output copied home has the output cap of a command's (issue 28), and says
/// so: past the cap the manifest keeps the true size, `stdout_capped`, and an excerpt ending with
/// a note naming the remote file with the rest; the local copy holds the cap, as holes when the
/// output is zeros.
#[test]
fn run_once_output_past_the_cap_is_counted_and_said() {
    use std::os::unix::fs::MetadataExt;
    let Some(bed) = Bed::slurm() else { return };
    let work = bed.work_str();
    let mut cmd = bed.command(&[
        "run",
        "once",
        "--machine",
        "bed",
        "--cwd",
        &work,
        "--cmd",
        "head -c 5000 /dev/zero; echo short >&2",
        "--json",
    ]);
    cmd.env("REMOTE_RUNNER_OUTPUT_CAP", "1K");
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 0, "{r:?}");
    let m = r.json();
    let b = &m["slurm"];
    assert_eq!(b["stdout_bytes"], 5000, "{b}");
    assert_eq!(b["stdout_capped"], true, "{b}");
    assert_eq!(b["stderr_bytes"], 6, "{b}");
    assert_eq!(b["stderr_capped"], false, "{b}");
    assert_eq!(b["stderr_excerpt"], "short\n");
    let excerpt = b["stdout_excerpt"].as_str().unwrap();
    assert!(
        excerpt.contains("[stdout: 5000 bytes in all; only the first 1024 are kept here"),
        "{excerpt:?}"
    );
    let copy = std::fs::metadata(b["stdout_local"].as_str().unwrap()).unwrap();
    assert_eq!(copy.len(), 1024);
    assert_eq!(copy.blocks(), 0, "zeros are kept as a hole");
}

#[test]
fn run_once_past_its_timeout_cancels_the_job() {
    let Some(bed) = Bed::slurm() else { return };
    let started = Instant::now();
    let r = bed.run(&[
        "--timeout",
        "3",
        "run",
        "once",
        "--machine",
        "bed",
        "--cmd",
        "sleep 120",
        "--json",
    ]);
    assert_eq!(r.code, 6, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let m = r.json();
    assert_eq!(m["status"], "timed_out", "{m}");
    assert_eq!(m["error"]["code"], "timeout", "{m}");
    // Slurm's word right after scancel: CANCELLED, or COMPLETING while the step is killed.
    assert!(
        m["slurm"]["state"] == "CANCELLED" || m["slurm"]["state"] == "COMPLETING",
        "{m}"
    );
    assert!(
        m["slurm"]["stderr_excerpt"]
            .as_str()
            .unwrap()
            .contains("CANCELLED"),
        "{m}"
    );
    let job = m["slurm"]["job_id"].as_str().unwrap().to_string();
    let state = wait_for_state(&job, |s| s != "RUNNING" && s != "COMPLETING");
    assert!(state.is_empty() || state == "CANCELLED", "{state}");
}

/// The scale figures of docs/slurm.md: `SLURM_SCALE=50 cargo test -p remote-runner --test slurm
/// -- --ignored --nocapture scale`. N sessions as allocations (created 8 at a time, one command
/// each, destroyed), then N batch runs at once; prints the wall times.
#[test]
#[ignore = "a measurement (minutes on 2 cores), not a check; see docs/slurm.md"]
fn scale() {
    let Some(bed) = Bed::slurm() else { return };
    let n: usize = std::env::var("SLURM_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let par = 8;
    let timed = |what: &str, f: &(dyn Fn(usize) -> Duration + Sync)| {
        let start = Instant::now();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut each: Vec<Duration> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..par)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            if i >= n {
                                return mine;
                            }
                            mine.push(f(i));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        each.sort();
        eprintln!(
            "SCALE {what}: {n} in {:.1} s ({par} at a time); each p50 {:.2} s, max {:.2} s",
            start.elapsed().as_secs_f64(),
            each[n / 2].as_secs_f64(),
            each[n - 1].as_secs_f64()
        );
    };
    let sessions = std::sync::Mutex::new(vec![(String::new(), String::new()); n]);
    timed("session create (allocation + shell)", &|i| {
        let t = Instant::now();
        let s = slurm_session(&bed, &[]);
        sessions.lock().unwrap()[i] = s;
        t.elapsed()
    });
    let running = Command::new("squeue")
        .args([
            "-h",
            "-t",
            "running",
            "-u",
            remote_runner_testkit::TEST_USER,
        ])
        .output()
        .unwrap();
    eprintln!(
        "SCALE allocations running at once: {}",
        String::from_utf8_lossy(&running.stdout).lines().count()
    );
    timed("session exec (one command each)", &|i| {
        let t = Instant::now();
        let (session, job) = sessions.lock().unwrap()[i].clone();
        let (code, out) = stdout_of(&bed, &session, "echo $SLURM_JOB_ID");
        assert_eq!((code, out.trim()), (0, job.as_str()));
        t.elapsed()
    });
    timed("session destroy (scancel)", &|i| {
        let t = Instant::now();
        let session = sessions.lock().unwrap()[i].0.clone();
        bed.json(&["session", "destroy", "--session", &session]);
        t.elapsed()
    });
    timed("run once (sbatch, follow, exit code)", &|_| {
        let t = Instant::now();
        let m = bed.json(&["run", "once", "--machine", "bed", "--cmd", "exit 0"]);
        assert_eq!(m["status"], "succeeded", "{m}");
        t.elapsed()
    });
}

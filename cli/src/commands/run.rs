//! `remote-runner run ...`: session + inputs + command + artifacts + manifest in one call.
//!
//! Arguments follow the contract; each handler is one engine call plus a [`Report`] whose JSON is
//! the run manifest (or the list of summaries). The run's outcome is a field of the manifest; the
//! exit code follows it (`exit.rs`): 0 succeeded, 1 failed (or the command's own status with
//! `--exit-code`), `timeout` for timed_out, `cancelled` for cancelled.

use clap::{Args, Subcommand};
use remote_runner_engine::engine::run::{RunManifest, RunRequest, RunStatus, RunTransfer};
use remote_runner_engine::engine::split_slurm_args;
use remote_runner_engine::{Error, ErrorCode, Result};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::exit;
use crate::output::{Block, Cell, Output, Report, Tone, relative_time, to_json};

pub const GROUP_EXAMPLES: &str = "\
Examples:
  remote-runner run once --machine local --cwd /tmp --cmd 'echo hi > out.txt' \\
      --artifact /tmp/out.txt=./out.txt --json
  remote-runner run list --json";

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Create a session, upload inputs, run, download artifacts, save a manifest
    #[command(
        after_help = "Examples:\n  remote-runner run once --machine lab-gpu-01 --cwd /home/ely/project \\\n      --input ./input.json=/home/ely/project/input.json \\\n      --cmd 'python3 train.py --input input.json --output output.txt' \\\n      --artifact /home/ely/project/output.txt=./output.txt --json"
    )]
    Once(OnceArgs),
    /// List recorded runs
    #[command(after_help = "Examples:\n  remote-runner run list --json")]
    List,
    /// Show a run manifest
    #[command(after_help = "Examples:\n  remote-runner run show run_abc123 --json")]
    Show(ShowArgs),
}

/// `A=B`: the first `=` splits (so Windows paths with `:` still work).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPair {
    pub from: String,
    pub to: String,
}

fn parse_pair(s: &str) -> Result<PathPair, Error> {
    match s.split_once('=') {
        Some((from, to)) if !from.is_empty() && !to.is_empty() => Ok(PathPair {
            from: from.to_string(),
            to: to.to_string(),
        }),
        _ => Err(Error::invalid(format!(
            "{s:?} is not SOURCE=DESTINATION; write both paths joined by '='"
        ))),
    }
}

#[derive(Debug, Args)]
pub struct OnceArgs {
    /// Machine to run on (`local` is this host; see `remote-runner machine list`)
    #[arg(long, value_name = "MACHINE_ID")]
    pub machine: String,
    /// Working directory [default: the machine's default cwd]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Upload LOCAL to REMOTE before the command (repeat)
    #[arg(long = "input", value_name = "LOCAL=REMOTE", value_parser = parse_pair)]
    pub inputs: Vec<PathPair>,
    /// The command line to run
    #[arg(long, value_name = "COMMAND")]
    pub cmd: String,
    /// Download REMOTE to LOCAL after the command (repeat)
    #[arg(long = "artifact", value_name = "REMOTE=LOCAL", value_parser = parse_pair)]
    pub artifacts: Vec<PathPair>,
    /// Leave the created session running
    #[arg(long)]
    pub keep_session: bool,
    /// Exit with the command's own exit status instead of 1 when it fails
    #[arg(long)]
    pub exit_code: bool,
    /// Hash both ends of every input and artifact transfer (sha256)
    #[arg(long)]
    pub verify: bool,
    /// On a Slurm machine: sbatch arguments added to the machine's defaults, as one
    /// shell-quoted string, e.g. "--time=10 --mem=4G"; options only: those remote-runner sets
    /// (job name, output, error, chdir, ...) are refused in any form Slurm accepts
    /// (docs/slurm.md)
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub slurm_args: Option<String>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
}

pub async fn run(ctx: &Context, command: RunCommand) -> Result<Report> {
    match command {
        RunCommand::Once(args) => once(ctx, args).await,
        RunCommand::List => list(ctx),
        RunCommand::Show(args) => show(ctx, args),
    }
}

/// Ctrl-C (SIGINT) while a long call runs: the first one cancels `token()` (the engine stops
/// the remote command and records the outcome), a second one exits at once with 130.
pub struct Interrupt {
    token: CancellationToken,
    watcher: tokio::task::JoinHandle<()>,
}

impl Interrupt {
    pub fn watch(out: Output) -> Interrupt {
        let token = CancellationToken::new();
        let cancel = token.clone();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            out.note("interrupted: stopping the remote work and saving the record (Ctrl-C again to quit at once)");
            cancel.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        });
        Interrupt { token, watcher }
    }

    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

async fn once(ctx: &Context, args: OnceArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let machine = wired.machine(&args.machine)?;
    let request = RunRequest {
        machine,
        cwd: args.cwd,
        inputs: args.inputs.into_iter().map(|p| (p.from, p.to)).collect(),
        command: args.cmd,
        artifacts: args.artifacts.into_iter().map(|p| (p.from, p.to)).collect(),
        keep_session: args.keep_session,
        timeout: ctx.timeout,
        verify: args.verify,
        slurm_args: match &args.slurm_args {
            Some(text) => split_slurm_args(text)?,
            None => Vec::new(),
        },
    };
    let interrupt = Interrupt::watch(ctx.out);
    let manifest = wired.engine.run_once(request, interrupt.token()).await?;
    let code = exit_code(&manifest, args.exit_code);
    Ok(Report::new(to_json(&manifest)?)
        .human(render_manifest(&manifest))
        .exit_code(code))
}

fn list(ctx: &Context) -> Result<Report> {
    let wired = ctx.engine()?;
    let runs = wired.engine.run_list()?;
    let rows = runs
        .iter()
        .map(|r| {
            vec![
                Cell::new(&r.run_id, Tone::Bold),
                Cell::plain(&r.machine_id),
                status_cell(r.status),
                r.exit_code
                    .map(|c| Cell::plain(c.to_string()))
                    .unwrap_or_else(|| Cell::new("-", Tone::Dim)),
                Cell::plain(relative_time(&r.started_at)),
                Cell::plain(r.command.lines().next().unwrap_or("")),
            ]
        })
        .collect();
    let human = vec![Block::Table {
        headers: vec!["RUN", "MACHINE", "STATUS", "EXIT", "STARTED", "COMMAND"],
        rows,
        empty:
            "No runs yet. Start one with: remote-runner run once --machine local --cmd 'echo hi'"
                .to_string(),
    }];
    let json = json!({"runs": to_json(&runs)?, "summary": {"run_count": runs.len()}});
    Ok(Report::new(json).human(human))
}

fn show(ctx: &Context, args: ShowArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let manifest = wired.engine.run_show(&args.run_id)?;
    Ok(Report::new(to_json(&manifest)?).human(render_manifest(&manifest)))
}

fn exit_code(m: &RunManifest, passthrough: bool) -> u8 {
    match m.status {
        RunStatus::Succeeded => exit::SUCCESS,
        RunStatus::TimedOut => exit::for_error(ErrorCode::Timeout),
        RunStatus::Cancelled => exit::for_error(ErrorCode::Cancelled),
        // `failed`, `running`, and any status newer than this CLI: not a success.
        _ => match exit::for_remote_status(m.exit_code, None, passthrough) {
            exit::SUCCESS => exit::WORK_FAILED,
            code => code,
        },
    }
}

fn status_cell(status: RunStatus) -> Cell {
    let tone = match status {
        RunStatus::Succeeded => Tone::Good,
        RunStatus::Running => Tone::Warn,
        _ => Tone::Bad,
    };
    Cell::new(status.as_str(), tone)
}

fn render_manifest(m: &RunManifest) -> Vec<Block> {
    let mut fields = vec![
        ("run", Cell::new(&m.run_id, Tone::Bold)),
        ("status", status_cell(m.status)),
        ("machine", Cell::plain(&m.machine_id)),
        (
            "session",
            Cell::plain(m.session_id.as_deref().unwrap_or("-")),
        ),
        ("cwd", Cell::plain(&m.cwd)),
        (
            "command",
            Cell::plain(m.command.lines().next().unwrap_or("")),
        ),
        (
            "exit code",
            Cell::plain(m.exit_code.map(|c| c.to_string()).unwrap_or("-".into())),
        ),
        ("started", Cell::plain(relative_time(&m.started_at))),
    ];
    if let Some(err) = &m.error {
        let message = crate::hint::with_hint(&err.message, err.hint.as_ref());
        fields.push(("error", Cell::new(message, Tone::Bad)));
    }
    if let Some(log) = m.command_result.as_ref().map(|c| &c.log_file_local) {
        fields.push(("command log", Cell::plain(log)));
    }
    fields.push(("manifest", Cell::plain(&m.manifest_file)));
    let mut blocks = vec![Block::Fields(fields)];
    let transfers = |kind: &'static str, list: &[RunTransfer]| {
        list.iter()
            .map(|t| {
                let tone = if t.status == "succeeded" {
                    Tone::Good
                } else {
                    Tone::Bad
                };
                vec![
                    Cell::plain(kind),
                    Cell::new(&t.status, tone),
                    Cell::plain(t.bytes.to_string()),
                    Cell::plain(&t.remote),
                    Cell::plain(&t.local),
                ]
            })
            .collect::<Vec<_>>()
    };
    let mut rows = transfers("input", &m.inputs);
    rows.extend(transfers("artifact", &m.artifacts));
    if !rows.is_empty() {
        blocks.push(Block::Table {
            headers: vec!["KIND", "STATUS", "BYTES", "REMOTE", "LOCAL"],
            rows,
            empty: String::new(),
        });
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_on_the_first_equals_sign() {
        let p = parse_pair("./in.json=C:/x/in.json").unwrap();
        assert_eq!(
            (p.from.as_str(), p.to.as_str()),
            ("./in.json", "C:/x/in.json")
        );
        assert!(parse_pair("no-delimiter").is_err());
        assert!(parse_pair("=x").is_err());
        assert!(parse_pair("x=").is_err());
    }
}

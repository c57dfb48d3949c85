//! `remote-runner file ...`: transfers through SFTP (or the local filesystem for `local`).
//!
//! Arguments follow the contract; each handler is one engine call plus a [`Report`] whose JSON
//! is the transfer record (or listing). A progress bar goes to stderr on a terminal.

pub mod progress;

use std::path::Path;
use std::sync::Arc;

use clap::{Args, Subcommand};
use remote_runner_engine::engine::transfer::{
    FileListing, TransferDirection, TransferOptions, TransferRecord, TransferStatus,
};
use remote_runner_engine::machine::LOCAL_MACHINE_ID;
use remote_runner_engine::{Error, ErrorCode, Result};
use serde_json::json;

use self::progress::{ProgressBar, bytes};
use crate::commands::run::Interrupt;
use crate::context::{Context, Wired};
use crate::output::{Block, Cell, Report, Tone, relative_time, to_json};

pub const GROUP_EXAMPLES: &str = "\
Examples:
  remote-runner file put --session sess_abc123 --local ./input.txt \\
      --remote /home/ely/project/input.txt --json
  remote-runner file get --session sess_abc123 --remote /home/ely/project/output.txt \\
      --local ./output.txt --json";

#[derive(Debug, Subcommand)]
pub enum FileCommand {
    /// Upload a local file or directory
    #[command(
        after_help = "Examples:\n  remote-runner file put --session sess_abc123 --local ./input.txt \\\n      --remote /home/ely/project/input.txt --json"
    )]
    Put(TransferArgs),
    /// Download a remote file or directory
    #[command(
        after_help = "Examples:\n  remote-runner file get --session sess_abc123 --remote /home/ely/project/output.txt \\\n      --local ./output.txt --json"
    )]
    Get(TransferArgs),
    /// List remote file metadata
    #[command(
        after_help = "Examples:\n  remote-runner file list --session sess_abc123 --remote /home/ely/project --json"
    )]
    List(ListArgs),
    /// Show recorded transfers
    #[command(
        after_help = "Examples:\n  remote-runner file history --json\n  remote-runner file history --session sess_abc123 --json"
    )]
    History(HistoryArgs),
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Session id (sess_...; see `remote-runner session list`)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    /// Path on this host
    #[arg(long, value_name = "PATH")]
    pub local: String,
    /// Path on the machine (as commands see it; path maps are applied)
    #[arg(long, value_name = "PATH")]
    pub remote: String,
    /// Hash both ends after the copy (sha256) and fail with `verify_mismatch` if they differ
    #[arg(long)]
    pub verify: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Session id (sess_...; see `remote-runner session list`)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    #[arg(long, value_name = "PATH")]
    pub remote: String,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only transfers of this session
    #[arg(long, value_name = "SESSION_ID")]
    pub session: Option<String>,
}

pub async fn run(ctx: &Context, command: FileCommand) -> Result<Report> {
    match command {
        FileCommand::Put(args) => put(ctx, args).await,
        FileCommand::Get(args) => get(ctx, args).await,
        FileCommand::List(args) => list(ctx, args).await,
        FileCommand::History(args) => history(ctx, args),
    }
}

pub async fn put(ctx: &Context, args: TransferArgs) -> Result<Report> {
    transfer(ctx, args, true).await
}

pub async fn get(ctx: &Context, args: TransferArgs) -> Result<Report> {
    transfer(ctx, args, false).await
}

/// From this size on, a single file goes over a connection of the CLI's own rather than through
/// the machine's keeper: relaying through the keeper's socket cost about 0.8 s per GiB, a new
/// connection about 90 ms (measured on the benchmark sshd).
const OWN_CONNECTION_FROM: u64 = 128 << 20;

/// The engine a transfer runs on: the usual one (through the machine's keeper), or, for one
/// file of at least [`OWN_CONNECTION_FROM`] bytes on an SSH machine, an engine holding its own
/// connection, when that connects without asking anything.
async fn transfer_engine(ctx: &Context, args: &TransferArgs, upload: bool) -> Result<Arc<Wired>> {
    let wired = ctx.engine()?;
    let size = if upload {
        std::fs::metadata(&args.local)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map(|m| m.len())
    } else {
        match wired.engine.file_list(&args.session, &args.remote).await {
            Ok(listing) if listing.kind == "file" => listing.entries.first().map(|e| e.size),
            _ => None,
        }
    };
    if size.is_none_or(|n| n < OWN_CONNECTION_FROM) {
        return Ok(wired);
    }
    let Ok(session) = wired.engine.session_show(&args.session) else {
        return Ok(wired);
    };
    if session.machine_id == LOCAL_MACHINE_ID || session.slurm_job_id.is_some() {
        return Ok(wired);
    }
    let Some(own) = ctx.engine_for_bulk()? else {
        return Ok(wired);
    };
    Ok(match own.engine.host(&session.machine_id).await {
        Ok(_) => Arc::new(own),
        Err(e) => {
            tracing::debug!("a connection of its own failed ({e}); the keeper's is used");
            wired
        }
    })
}

async fn transfer(ctx: &Context, args: TransferArgs, upload: bool) -> Result<Report> {
    let wired = transfer_engine(ctx, &args, upload).await?;
    let bar = ProgressBar::for_terminal(ctx.out.json);
    // Ctrl-C stops the transfer cleanly: nothing is left under the final name.
    let interrupt = Interrupt::watch(ctx.out);
    let options = TransferOptions {
        verify: args.verify,
        progress: bar.as_ref().map(ProgressBar::callback),
        cancel: interrupt.token(),
    };
    // `--timeout` bounds the transfer: when it runs out the transfer is cancelled the same clean
    // way (recorded `cancelled`, nothing under the final name) and the call fails with `timeout`.
    let deadline = ctx.timeout.map(|limit| {
        let cancel = interrupt.token();
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            cancel.cancel();
        })
    });
    let local = Path::new(&args.local);
    let result = if upload {
        wired
            .engine
            .file_put(&args.session, local, &args.remote, options)
            .await
    } else {
        wired
            .engine
            .file_get(&args.session, &args.remote, local, options)
            .await
    };
    if let Some(bar) = &bar {
        bar.finish();
    }
    let timed_out = deadline
        .as_ref()
        .is_some_and(tokio::task::JoinHandle::is_finished);
    if let Some(timer) = deadline {
        timer.abort();
    }
    let rec = result.map_err(|e| match (e.code, ctx.timeout) {
        (ErrorCode::Cancelled, Some(limit)) if timed_out => Error::new(
            ErrorCode::Timeout,
            format!(
                "the transfer did not finish within {} s (--timeout) and was cancelled; nothing \
                 was left under the final name. Retry with a larger --timeout. ({})",
                limit.as_secs(),
                e.message
            ),
        ),
        _ => e,
    })?;
    let report = Report::new(to_json(&rec)?).human(render_transfer(&rec));
    // Entries were skipped: the work ran and its result says not all of it was done.
    Ok(if rec.status == TransferStatus::Partial {
        report.failed()
    } else {
        report
    })
}

pub async fn list(ctx: &Context, args: ListArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let listing = wired.engine.file_list(&args.session, &args.remote).await?;
    Ok(Report::new(to_json(&listing)?).human(render_listing(&listing)))
}

pub fn history(ctx: &Context, args: HistoryArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let transfers = wired.engine.transfer_history(args.session.as_deref())?;
    let json = json!({
        "transfers": to_json(&transfers)?,
        "summary": {"transfer_count": transfers.len()},
    });
    Ok(Report::new(json).human(render_history(&transfers)))
}

fn status_cell(status: TransferStatus) -> Cell {
    let tone = match status {
        TransferStatus::Succeeded => Tone::Good,
        TransferStatus::Running | TransferStatus::Partial => Tone::Warn,
        _ => Tone::Bad,
    };
    Cell::new(status.as_str(), tone)
}

fn direction(rec: &TransferRecord) -> &'static str {
    match rec.direction {
        TransferDirection::Put => "put",
        TransferDirection::Get => "get",
    }
}

/// `put`/`get` result: what moved where, how much, its hash.
pub fn render_transfer(rec: &TransferRecord) -> Vec<Block> {
    let mut fields = vec![
        ("transfer", Cell::new(&rec.transfer_id, Tone::Bold)),
        ("direction", Cell::plain(direction(rec))),
        ("source", Cell::plain(&rec.source)),
        ("destination", Cell::plain(&rec.destination)),
        ("status", status_cell(rec.status)),
        (
            "size",
            Cell::plain(format!(
                "{} ({} bytes) in {} file(s)",
                bytes(rec.bytes as f64),
                rec.bytes,
                rec.files
            )),
        ),
    ];
    if let Some(sha) = &rec.sha256 {
        fields.push(("sha256", Cell::plain(sha)));
    }
    if let Some(verified) = rec.verified {
        fields.push(("verified", Cell::check(verified)));
    }
    if !rec.skipped.is_empty() {
        fields.push((
            "skipped",
            Cell::new(
                format!("{} entries, not written (below)", rec.skipped.len()),
                Tone::Warn,
            ),
        ));
    }
    let mut blocks = vec![Block::Fields(fields)];
    if !rec.skipped.is_empty() {
        blocks.push(Block::Table {
            headers: vec!["SKIPPED", "WHY"],
            rows: rec
                .skipped
                .iter()
                .map(|s| vec![Cell::plain(&s.path), Cell::plain(&s.reason)])
                .collect(),
            empty: String::new(),
        });
    }
    blocks
}

fn render_listing(listing: &FileListing) -> Vec<Block> {
    let rows = listing
        .entries
        .iter()
        .map(|e| {
            vec![
                Cell::plain(&e.mode),
                Cell::plain(&e.kind),
                Cell::plain(e.size.to_string()),
                Cell::plain(relative_time(&e.mtime)),
                Cell::new(&e.name, Tone::Bold),
            ]
        })
        .collect();
    vec![Block::Table {
        headers: vec!["MODE", "TYPE", "SIZE", "MODIFIED", "NAME"],
        rows,
        empty: format!("{} is empty.", listing.path),
    }]
}

fn render_history(transfers: &[TransferRecord]) -> Vec<Block> {
    let rows = transfers
        .iter()
        .map(|t| {
            vec![
                Cell::new(&t.transfer_id, Tone::Bold),
                Cell::plain(direction(t)),
                status_cell(t.status),
                Cell::plain(bytes(t.bytes as f64)),
                Cell::plain(relative_time(&t.started_at)),
                Cell::plain(format!("{} -> {}", t.source, t.destination)),
            ]
        })
        .collect();
    vec![Block::Table {
        headers: vec!["TRANSFER", "DIR", "STATUS", "SIZE", "STARTED", "PATHS"],
        rows,
        empty: "No transfers recorded.".to_string(),
    }]
}

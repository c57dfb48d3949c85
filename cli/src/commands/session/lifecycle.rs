//! `session create | list | show | send | read | logs | destroy`.

use std::io::IsTerminal;

use remote_runner_engine::Result;
use remote_runner_engine::engine::CreateOptions;
use remote_runner_engine::engine::DestroyOptions;
use remote_runner_engine::engine::send::DEFAULT_SEND_TIMEOUT;
use remote_runner_engine::engine::session::MAX_READ;
use remote_runner_engine::engine::split_slurm_args;
use remote_runner_engine::engine::{SendEnd, SendRequest};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Time `session create` on a Slurm machine gets past `--timeout` to start the shell once the
/// allocation is granted.
const SLURM_START_SLACK: Duration = Duration::from_secs(60);

/// Time `session send` gets past its wait's bound before the call itself is given up.
const SEND_SLACK: Duration = Duration::from_secs(5);

use super::{CreateArgs, DestroyArgs, ListArgs, ReadArgs, SendArgs, SessionArg, render};
use crate::context::Context;
use crate::output::{Block, Cell, Report, Tone, neutralize, to_json};
use crate::timeout::{self, Scope};

pub async fn create(ctx: &Context, args: CreateArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let machine = wired.machine(&args.machine)?;
    let out = ctx.out;
    let opts = CreateOptions {
        slurm_args: match &args.slurm_args {
            Some(text) => split_slurm_args(text)?,
            None => Vec::new(),
        },
        allocation_bound: ctx.timeout,
        // With --json stderr holds only the error object; a person sees the pending job.
        progress: (!out.json).then(|| Arc::new(move |line: &str| out.note(line)) as _),
    };
    let call = wired
        .engine
        .create_session_with(&machine, args.cwd.as_deref(), &opts);
    // On a Slurm machine --timeout bounds the wait for the allocation (the engine cancels a
    // job still pending); starting the shell in it then gets a little more.
    let bound = match machine.scheduler.slurm_args() {
        Some(_) => ctx.timeout.map(|t| t + SLURM_START_SLACK),
        None => ctx.timeout,
    };
    let rec = timeout::bounded(Scope::Whole, bound, call).await?;
    let mut human = render::session(&rec);
    human.push(Block::Line(Cell::new(
        format!(
            "Run a command: remote-runner session exec --session {} --cmd 'ls -la'",
            rec.session_id
        ),
        Tone::Dim,
    )));
    Ok(Report::new(to_json(&rec)?).human(human))
}

pub fn list(ctx: &Context, args: ListArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    if let Some(machine) = &args.machine {
        wired.machine(machine)?;
    }
    let sessions: Vec<_> = wired
        .engine
        .session_list()?
        .into_iter()
        .filter(|s| args.machine.as_ref().is_none_or(|m| &s.machine_id == m))
        .collect();
    let active = sessions
        .iter()
        .filter(|s| s.status == remote_runner_engine::engine::SessionStatus::Active)
        .count();
    let json = json!({
        "sessions": to_json(&sessions)?,
        "summary": {"session_count": sessions.len(), "active_count": active},
    });
    Ok(Report::new(json).human(render::session_table(&sessions)))
}

/// The record with its last command as the machine reports it now (see `command list`).
pub async fn show(ctx: &Context, args: SessionArg) -> Result<Report> {
    let wired = ctx.engine()?;
    let freshness = wired
        .engine
        .refresh_commands(&args.session, ctx.refresh_bound())
        .await?;
    let rec = wired.engine.session_show(&args.session)?;
    let mut json = to_json(&rec)?;
    render::mark_freshness(ctx, &mut json, &freshness);
    Ok(Report::new(json).human(render::session(&rec)))
}

pub async fn send(ctx: &Context, args: SendArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let req = SendRequest {
        input: args.input.clone(),
        keys: args.key.clone(),
        enter: !args.no_enter && args.key.is_empty(),
        wait_for: args.wait_for.clone(),
        quiet: args.quiet.map(Duration::from_millis),
        timeout: ctx.timeout.unwrap_or(DEFAULT_SEND_TIMEOUT),
        command_id: args.command_id.clone(),
    };
    // The wait ends at the timeout with what came (`timed_out`); a machine that stops answering
    // altogether ends the call a little later with the error `timeout`.
    let bound = req.timeout + SEND_SLACK;
    let sent = timeout::bounded(
        Scope::Whole,
        Some(bound),
        wired.engine.session_send(&args.session, req),
    )
    .await?;
    let code = if sent.timed_out {
        crate::exit::for_error(remote_runner_engine::ErrorCode::Timeout)
    } else {
        crate::exit::SUCCESS
    };
    if !ctx.out.json {
        let why = match sent.ended_by {
            SendEnd::Matched => "the output matched --wait-for".to_string(),
            SendEnd::Quiet => "the output went quiet".to_string(),
            SendEnd::WaitingInput => "the program waits for input".to_string(),
            SendEnd::Ended => format!(
                "the command ended ({})",
                sent.status.map(|s| s.as_str()).unwrap_or("ended")
            ),
            SendEnd::TimedOut => "the wait ran out (--timeout); the program goes on".to_string(),
            other => format!("the wait ended ({other:?})"),
        };
        ctx.out.note(&format!(
            "sent {} bytes{}{} to {}; {why}",
            sent.bytes_sent,
            if sent.enter { " and Enter" } else { "" },
            if sent.keys.is_empty() {
                String::new()
            } else {
                format!(" and keys {}", sent.keys.join(" "))
            },
            sent.session_id,
        ));
    }
    let text = if std::io::stdout().is_terminal() {
        neutralize(&sent.output)
    } else {
        sent.output.clone()
    };
    Ok(Report::new(to_json(&sent)?)
        .human(vec![Block::Raw(text)])
        .exit_code(code))
}

/// Human mode prints the transcript text; on a terminal every control sequence is made visible
/// so remote output cannot act on the reader's terminal. The cursor for the next read goes to
/// stderr.
pub async fn read(ctx: &Context, args: ReadArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let chunk = wired
        .engine
        .read(&args.session, args.since, MAX_READ)
        .await?;
    let text = if std::io::stdout().is_terminal() {
        neutralize(&chunk.text)
    } else {
        chunk.text.clone()
    };
    if !ctx.out.json {
        let more = if chunk.more { " (more available)" } else { "" };
        ctx.out.note(&format!(
            "read {} bytes{more}; next: remote-runner session read --session {} --since {}",
            chunk.bytes, chunk.session_id, chunk.cursor
        ));
    }
    Ok(Report::new(to_json(&chunk)?).human(vec![Block::Raw(text)]))
}

/// Log metadata with statuses refreshed from the machine (see `command list`).
pub async fn logs(ctx: &Context, args: SessionArg) -> Result<Report> {
    let wired = ctx.engine()?;
    let freshness = wired
        .engine
        .refresh_commands(&args.session, ctx.refresh_bound())
        .await?;
    let logs = wired.engine.logs(&args.session)?;
    let mut json = json!({
        "session_id": args.session,
        "logs": to_json(&logs)?,
        "summary": {"command_count": logs.len()},
    });
    render::mark_freshness(ctx, &mut json, &freshness);
    Ok(Report::new(json).human(render::log_table(&logs)))
}

pub async fn destroy(ctx: &Context, args: DestroyArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let opts = DestroyOptions {
        force: args.force,
        keep_remote_state: args.keep_remote_state,
    };
    let result = wired.engine.destroy_with(&args.session, opts).await?;
    let mut fields = vec![
        ("session", Cell::new(&result.session_id, Tone::Bold)),
        ("status", render::session_status(result.status)),
        ("logs kept in", Cell::plain(&result.log_dir_local)),
        ("transcript", Cell::plain(&result.transcript_file_local)),
    ];
    if !result.stopped_commands.is_empty() {
        fields.push((
            "stopped commands",
            Cell::plain(result.stopped_commands.join(", ")),
        ));
    }
    let mut human = vec![Block::Fields(fields)];
    if let Some(warning) = &result.warning {
        human.push(Block::Line(Cell::new(
            format!("warning: marked destroyed here only; {warning}"),
            Tone::Warn,
        )));
    }
    Ok(Report::new(to_json(&result)?).human(human))
}

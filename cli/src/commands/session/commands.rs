//! `session exec` and `session command list | show | result | wait | stop`.
//!
//! The JSON is the command record. In human mode `exec` prints the command's own stdout and
//! stderr byte for byte on the matching stream, and a one-line status on stderr when stderr is a
//! terminal. The exit code follows the policy in `exit.rs`: a wait that ran out is `timeout`
//! (the record still goes to stdout, with `status: running` and `wait_timed_out: true`).

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::Duration;

use remote_runner_engine::engine::{
    CommandMode, CommandRecord, CommandStatus, ExecRequest, output,
};
use remote_runner_engine::{Error, ErrorCode, Result};
use serde_json::json;

use super::{CommandRef, ExecArgs, ExecMode, SessionArg, render};
use crate::context::Context;
use crate::exit;
use crate::output::{Block, Cell, Report, Tone, neutralize, to_json};

/// Without `--timeout`, `command wait` waits in rounds of this length until the command ends.
const WAIT_ROUND: Duration = Duration::from_secs(3600);

pub async fn exec(ctx: &Context, args: ExecArgs) -> Result<Report> {
    let wired = ctx.engine()?;
    let request = ExecRequest {
        mode: match args.mode {
            ExecMode::Wait => CommandMode::Wait,
            ExecMode::Background => CommandMode::Background,
        },
        cwd: args.cwd.clone(),
        timeout: ctx.timeout,
        env: Vec::new(),
        stdin: args.stdin,
    };
    let text = command_text(&args)?;
    let rec = wired.engine.exec(&args.session, &text, request).await?;
    let code = exit_code(&rec, args.exit_code);
    let json = to_json(&rec)?;
    if ctx.out.json {
        return Ok(Report::new(json).exit_code(code));
    }
    if rec.mode == CommandMode::Background {
        let mut human = render::command(&rec);
        human.push(follow_hint(&rec));
        return Ok(Report::new(json).human(human).exit_code(code));
    }
    print_output(&rec, wired.engine.options().output_cap);
    status_line(ctx, &rec);
    // The output is the rendering; nothing more goes to stdout.
    Ok(Report::new(json)
        .human(vec![Block::Raw(String::new())])
        .exit_code(code))
}

/// The command text: `--cmd TEXT`, `--cmd -` (stdin to EOF) or `--cmd-file PATH`. Reading it
/// here rather than from an argument lifts the kernel's per-argument limit (128 KiB).
fn command_text(args: &ExecArgs) -> Result<String> {
    let (bytes, from) = match (&args.cmd, &args.cmd_file) {
        (Some(cmd), _) if cmd != "-" => return Ok(cmd.clone()),
        (Some(_), _) => {
            if std::io::stdin().is_terminal() {
                return Err(Error::invalid(
                    "--cmd - reads the command text from stdin, but stdin is a terminal; pipe \
                     the text in (`... --cmd - < script.sh`) or use --cmd-file PATH",
                ));
            }
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| Error::io("cannot read the command text from stdin", &e))?;
            (buf, "stdin".to_string())
        }
        (None, Some(path)) => {
            let buf = std::fs::read(path).map_err(|e| {
                Error::io(
                    format!("cannot read --cmd-file {}; check the path", path.display()),
                    &e,
                )
            })?;
            (buf, path.display().to_string())
        }
        (None, None) => {
            return Err(Error::invalid(
                "give the command: --cmd TEXT, --cmd - (stdin) or --cmd-file PATH",
            ));
        }
    };
    String::from_utf8(bytes).map_err(|_| {
        Error::invalid(format!(
            "the command text from {from} is not UTF-8; save it as UTF-8 text"
        ))
    })
}

/// The records as the machine reports them now (running ones refreshed, bounded); marked
/// stale, with the reason, when the machine could not be reached.
pub async fn list(ctx: &Context, args: SessionArg) -> Result<Report> {
    let wired = ctx.engine()?;
    let freshness = wired
        .engine
        .refresh_commands(&args.session, ctx.refresh_bound())
        .await?;
    let commands = wired.engine.command_list(&args.session)?;
    let mut json = json!({
        "session_id": args.session,
        "commands": to_json(&commands)?,
        "summary": {"command_count": commands.len()},
    });
    render::mark_freshness(ctx, &mut json, &freshness);
    Ok(Report::new(json).human(render::command_table(&commands)))
}

pub async fn show(ctx: &Context, args: CommandRef) -> Result<Report> {
    let wired = ctx.engine()?;
    let rec = wired
        .engine
        .command_show(&args.session, &args.command_id)
        .await?;
    record_report(&rec, 0)
}

/// `--timeout` bounds the wait (exit code `timeout` when it runs out; the command goes on).
pub async fn wait(ctx: &Context, args: CommandRef) -> Result<Report> {
    let wired = ctx.engine()?;
    let rec = match ctx.timeout {
        Some(limit) => {
            wired
                .engine
                .command_wait(&args.session, &args.command_id, limit)
                .await?
        }
        None => loop {
            let rec = wired
                .engine
                .command_wait(&args.session, &args.command_id, WAIT_ROUND)
                .await?;
            // A command waiting for input is reported at once: nothing ends it but `send`.
            if rec.status.is_final() || rec.status == CommandStatus::WaitingInput {
                break rec;
            }
        },
    };
    let code = if rec.wait_timed_out || rec.status == CommandStatus::WaitingInput {
        exit::for_error(ErrorCode::Timeout)
    } else {
        0
    };
    record_report(&rec, code)
}

/// A command that had already ended is returned unchanged with `already_finished: true`.
pub async fn stop(ctx: &Context, args: CommandRef) -> Result<Report> {
    let wired = ctx.engine()?;
    let outcome = wired
        .engine
        .command_stop_outcome(&args.session, &args.command_id)
        .await?;
    let rec = &outcome.record;
    let mut report = record_report(rec, 0)?;
    report.json["already_finished"] = json!(outcome.already_finished);
    if outcome.already_finished {
        let exit = rec
            .exit_code
            .map(|c| format!(", exit {c}"))
            .unwrap_or_default();
        report.human.insert(
            0,
            Block::Line(Cell::new(
                format!(
                    "Command {} had already finished ({}{exit}); nothing was stopped.",
                    rec.command_id,
                    rec.status.as_str()
                ),
                Tone::Warn,
            )),
        );
    }
    Ok(report)
}

/// The record, and in human mode its fields plus the output excerpts (control sequences made
/// visible on a terminal).
fn record_report(rec: &CommandRecord, code: u8) -> Result<Report> {
    let mut human = render::command(rec);
    let tty = std::io::stdout().is_terminal();
    for (name, text, truncated, file) in [
        (
            "stdout",
            &rec.stdout,
            rec.stdout_truncated,
            &rec.stdout_file_local,
        ),
        (
            "stderr",
            &rec.stderr,
            rec.stderr_truncated,
            &rec.stderr_file_local,
        ),
    ] {
        if text.is_empty() {
            continue;
        }
        let note = if truncated {
            format!(" (excerpt; all of it in {file})")
        } else {
            String::new()
        };
        human.push(Block::Line(Cell::new(
            format!("--- {name}{note}"),
            Tone::Dim,
        )));
        let mut body = if tty { neutralize(text) } else { text.clone() };
        if !body.ends_with('\n') {
            body.push('\n');
        }
        human.push(Block::Raw(body));
    }
    if !rec.status.is_final() {
        human.push(follow_hint(rec));
    }
    Ok(Report::new(to_json(rec)?).human(human).exit_code(code))
}

fn follow_hint(rec: &CommandRecord) -> Block {
    Block::Line(Cell::new(
        format!(
            "Follow it with: remote-runner session command wait --session {} --command-id {}",
            rec.session_id, rec.command_id
        ),
        Tone::Dim,
    ))
}

/// The exit code for a command record: 0 on success or while a background command runs,
/// `timeout` when the wait ran out, else 1 (or the command's own status with `--exit-code`).
fn exit_code(rec: &CommandRecord, passthrough: bool) -> u8 {
    match rec.status {
        CommandStatus::Running if rec.mode == CommandMode::Background => exit::SUCCESS,
        // The wait ended before the command, which goes on (waiting for `session send`).
        CommandStatus::Running if rec.wait_timed_out => exit::for_error(ErrorCode::Timeout),
        CommandStatus::WaitingInput => exit::for_error(ErrorCode::Timeout),
        CommandStatus::Running | CommandStatus::Completed => exit::SUCCESS,
        // Every ended status but `completed`, and any status newer than this CLI.
        _ => {
            let code = exit::for_remote_status(rec.exit_code, None, passthrough);
            if code == exit::SUCCESS {
                exit::WORK_FAILED
            } else {
                code
            }
        }
    }
}

/// The command's output, byte for byte, on the matching stream: the local copy when it is
/// complete (streamed in chunks, never held whole in memory), else the record's excerpt. A
/// stream longer than the output cap has only its first part kept here: that part is printed,
/// then a note on stderr says how much there was and where the rest is.
fn print_output(rec: &CommandRecord, cap: u64) {
    let print = |file: &str, bytes: u64, excerpt: &str, out: &mut dyn Write| {
        let kept = bytes.min(cap);
        let _ = match std::fs::File::open(Path::new(file)) {
            Ok(mut f) if f.metadata().is_ok_and(|m| m.len() == kept) => {
                std::io::copy(&mut f, out).map(|_| ())
            }
            _ => out.write_all(excerpt.as_bytes()),
        }
        .and_then(|()| out.flush());
    };
    print(
        &rec.stdout_file_local,
        rec.stdout_bytes,
        &rec.stdout,
        &mut std::io::stdout().lock(),
    );
    print(
        &rec.stderr_file_local,
        rec.stderr_bytes,
        &rec.stderr,
        &mut std::io::stderr().lock(),
    );
    for (name, capped, total, remote) in [
        (
            "stdout",
            rec.stdout_capped,
            rec.stdout_bytes,
            &rec.remote_stdout_file,
        ),
        (
            "stderr",
            rec.stderr_capped,
            rec.stderr_bytes,
            &rec.remote_stderr_file,
        ),
    ] {
        if capped {
            let note = output::capped_note(name, total, total.min(cap), remote);
            let _ = writeln!(std::io::stderr().lock(), "{}", neutralize(&note));
        }
    }
}

/// `✓ completed · exit 0 · 120 ms · cmd_...` on stderr (stdout holds the command's own
/// output). Into a pipe or file only when there is something to do next (a wait that ran out, a
/// stopped or lost command): a plain success or failure is told by the exit code, and the
/// command's own stderr stays byte for byte.
fn status_line(ctx: &Context, rec: &CommandRecord) {
    let needs_telling = !matches!(rec.status, CommandStatus::Completed | CommandStatus::Failed);
    if !std::io::stderr().is_terminal() && !needs_telling {
        return;
    }
    let took = rec
        .duration_ms
        .map(|ms| format!(" · {ms} ms"))
        .unwrap_or_default();
    let exit = rec
        .exit_code
        .map(|code| format!(" · exit {code}"))
        .unwrap_or_default();
    let cell = match rec.status {
        CommandStatus::Running => Cell::new(
            format!(
                "… still running after the --timeout wait; the command goes on. Follow it with: \
                 remote-runner session command wait --session {} --command-id {}",
                rec.session_id, rec.command_id
            ),
            Tone::Warn,
        ),
        CommandStatus::WaitingInput => Cell::new(
            format!(
                "… waits for input ({:?}); answer with: remote-runner session send --session {} \
                 --input TEXT",
                rec.last_line.as_deref().unwrap_or(""),
                rec.session_id
            ),
            Tone::Warn,
        ),
        CommandStatus::Completed => Cell::new(
            format!("✓ completed{exit}{took} · {}", rec.command_id),
            Tone::Good,
        ),
        status => Cell::new(
            format!("✗ {}{exit}{took} · {}", status.as_str(), rec.command_id),
            Tone::Bad,
        ),
    };
    ctx.out.status(&cell);
}

//! Human renderings of sessions and commands (the JSON is the records themselves).

use remote_runner_engine::engine::{
    CommandRecord, CommandStatus, Freshness, LogEntry, SessionRecord, SessionStatus,
};

use crate::context::Context;

use crate::output::{Block, Cell, Tone, relative_time};

pub fn session_status(status: SessionStatus) -> Cell {
    let tone = match status {
        SessionStatus::Active => Tone::Good,
        SessionStatus::Lost => Tone::Bad,
        SessionStatus::Destroyed => Tone::Dim,
        _ => Tone::Warn,
    };
    Cell::new(status.as_str(), tone)
}

pub fn command_status(status: CommandStatus) -> Cell {
    let tone = match status {
        CommandStatus::Completed => Tone::Good,
        CommandStatus::Running | CommandStatus::WaitingInput => Tone::Warn,
        CommandStatus::Failed | CommandStatus::Lost | CommandStatus::TimedOut => Tone::Bad,
        CommandStatus::Stopped => Tone::Dim,
        _ => Tone::Warn,
    };
    Cell::new(status.as_str(), tone)
}

fn opt(value: Option<impl ToString>) -> Cell {
    match value {
        Some(v) => Cell::plain(v.to_string()),
        None => Cell::new("-", Tone::Dim),
    }
}

/// One line of a command for tables: the first line of its text, shortened.
fn short_command(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    let mut short: String = first.chars().take(60).collect();
    if short.len() < first.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

pub fn session(rec: &SessionRecord) -> Vec<Block> {
    let mut fields = vec![
        ("session", Cell::new(&rec.session_id, Tone::Bold)),
        ("machine", Cell::plain(&rec.machine_id)),
        ("cwd", Cell::plain(&rec.cwd)),
        ("status", session_status(rec.status)),
        ("created", Cell::plain(relative_time(&rec.created_at))),
        ("commands", Cell::plain(rec.command_count.to_string())),
    ];
    if let Some(job) = &rec.slurm_job_id {
        fields.push(("slurm job", Cell::plain(job)));
    }
    if let Some(last) = &rec.last_command {
        fields.push(("last command", Cell::plain(short_command(last))));
        fields.push(("last exit code", opt(rec.last_exit_code)));
    }
    if let Some(why) = &rec.status_message {
        fields.push(("status message", Cell::plain(why)));
    }
    fields.push(("logs", Cell::plain(&rec.log_dir_local)));
    fields.push(("transcript", Cell::plain(&rec.transcript_file_local)));
    vec![Block::Fields(fields)]
}

pub fn session_table(sessions: &[SessionRecord]) -> Vec<Block> {
    let rows = sessions
        .iter()
        .map(|s| {
            vec![
                Cell::new(&s.session_id, Tone::Bold),
                Cell::plain(&s.machine_id),
                Cell::plain(&s.cwd),
                session_status(s.status),
                Cell::plain(s.command_count.to_string()),
                Cell::plain(relative_time(&s.created_at)),
            ]
        })
        .collect();
    vec![Block::Table {
        headers: vec!["SESSION", "MACHINE", "CWD", "STATUS", "COMMANDS", "CREATED"],
        rows,
        empty: "No sessions. Start one with: remote-runner session create --machine local"
            .to_string(),
    }]
}

pub fn command(rec: &CommandRecord) -> Vec<Block> {
    let mut fields = vec![
        ("command id", Cell::new(&rec.command_id, Tone::Bold)),
        ("session", Cell::plain(&rec.session_id)),
        ("command", Cell::plain(short_command(&rec.command))),
        ("mode", Cell::plain(rec.mode.as_str())),
        ("status", command_status(rec.status)),
        ("exit code", opt(rec.exit_code)),
        ("started", opt(rec.started_at.as_deref().map(relative_time))),
        (
            "duration",
            opt(rec.duration_ms.map(|ms| format!("{ms} ms"))),
        ),
        (
            "output",
            Cell::plain(format!(
                "{} bytes stdout, {} bytes stderr",
                rec.stdout_bytes, rec.stderr_bytes
            )),
        ),
        ("log", Cell::plain(&rec.log_file_local)),
    ];
    if let Some(pid) = rec.pid {
        fields.push(("process group", Cell::plain(pid.to_string())));
    }
    if let Some(err) = &rec.error {
        fields.push(("error", Cell::new(err, Tone::Bad)));
    }
    vec![Block::Fields(fields)]
}

pub fn command_table(commands: &[CommandRecord]) -> Vec<Block> {
    let rows = commands
        .iter()
        .map(|c| {
            vec![
                Cell::plain(c.seq.to_string()),
                Cell::new(&c.command_id, Tone::Bold),
                command_status(c.status),
                opt(c.exit_code),
                opt(c.started_at.as_deref().map(relative_time)),
                Cell::plain(short_command(&c.command)),
            ]
        })
        .collect();
    vec![Block::Table {
        headers: vec!["SEQ", "COMMAND ID", "STATUS", "EXIT", "STARTED", "COMMAND"],
        rows,
        empty: "No commands yet.".to_string(),
    }]
}

pub fn log_table(logs: &[LogEntry]) -> Vec<Block> {
    let rows = logs
        .iter()
        .map(|l| {
            vec![
                Cell::plain(l.seq.to_string()),
                Cell::new(&l.command_id, Tone::Bold),
                command_status(l.status),
                opt(l.exit_code),
                Cell::plain(&l.log_file_local),
            ]
        })
        .collect();
    vec![Block::Table {
        headers: vec!["SEQ", "COMMAND ID", "STATUS", "EXIT", "LOG"],
        rows,
        empty: "No command logs yet.".to_string(),
    }]
}

/// `stale` and `stale_reason` on a listing's JSON; in human mode the reason is a note on
/// stderr, so a person knows the statuses may be old.
pub fn mark_freshness(ctx: &Context, json: &mut serde_json::Value, freshness: &Freshness) {
    let reason = freshness.stale_reason();
    json["stale"] = serde_json::json!(reason.is_some());
    json["stale_reason"] = serde_json::json!(reason);
    if let Some(why) = reason
        && !ctx.out.json
    {
        ctx.out.note(why);
    }
}

//! `machine doctor`: is the machine reachable, trusted, logged into, and ready for sessions?
//!
//! The probes are the engine's (`Machines::doctor`); this renders its report. The report is a
//! result, not an error: it goes to stdout, and a failed check makes the exit code 1 (see
//! `exit.rs`). Each problem comes with what to do about it.

use remote_runner_engine::engine::DoctorOptions;
use remote_runner_engine::engine::doctor::{DoctorReport, SessionTools};
use remote_runner_engine::{Error, ErrorCode, Result};
use serde_json::{Value, json};

use crate::context::Context;
use crate::output::{Block, Cell, Report, Tone};

pub async fn run(ctx: &Context, machine_id: &str) -> Result<Report> {
    let machines = ctx.machines()?;
    let options = DoctorOptions {
        passphrase: ctx.passphrase(),
        connect_timeout: ctx.timeout,
    };
    let mut report = machines.doctor(machine_id, &options).await?;
    let id = report.machine_id.clone();
    if report
        .errors
        .iter()
        .any(|e| e.code == ErrorCode::HostKeyUnknown)
    {
        report.errors = report
            .errors
            .into_iter()
            .map(|e| with_concrete_fix(e, &id))
            .collect();
    }
    let out = Report::new(to_json(&report)).human(to_human(&report));
    Ok(if report.all_ok() { out } else { out.failed() })
}

/// The report in the contract's shape plus host key, tmux and (SSH) connection details.
fn to_json(r: &DoctorReport) -> Value {
    let mut v = json!({
        "machine_id": r.machine_id,
        "reachable": r.reachable,
        "auth_ok": r.auth_ok,
        "default_cwd_ok": r.default_cwd_ok,
        "checked_at": r.checked_at,
        "errors": r.errors.iter().map(Error::to_json).collect::<Vec<_>>(),
        "host_key": r.host_key.as_ref().map(|hk| json!({
            "status": hk.status,
            "fingerprint": hk.fingerprint,
        })),
        "tmux": {
            "found": if r.skipped("tmux").is_some() { Value::Null } else { json!(r.tmux_found) },
            "version": r.tmux_version,
        },
        "skipped": r.skipped.iter()
            .map(|s| (s.check.to_string(), json!(s.why)))
            .collect::<serde_json::Map<_, _>>(),
    });
    let Some(obj) = v.as_object_mut() else {
        return v;
    };
    if let Some(target) = &r.target {
        obj.insert("target".into(), json!(target));
    }
    if let Some(auth) = &r.auth {
        obj.insert(
            "auth".into(),
            json!({ "offered": auth.offered, "tried": auth.tried, "used": auth.used }),
        );
    }
    match &r.session_tools {
        Some(SessionTools::Found {
            login_shell,
            tmux_path,
            bash_path,
            bash_version,
            state_root,
            tmux_min,
            bash_min,
        }) => {
            obj.insert(
                "session_tools".into(),
                json!({
                    "login_shell": login_shell,
                    "tmux_path": tmux_path,
                    "bash_path": bash_path,
                    "bash_version": bash_version,
                    "state_root": state_root,
                    "tmux_min": tmux_min,
                    "bash_min": bash_min,
                }),
            );
        }
        Some(SessionTools::NotChecked { why }) => {
            obj.insert(
                "session_tools".into(),
                json!({ "checked": false, "why": why }),
            );
        }
        None => {}
    }
    if let Some(slurm) = &r.slurm {
        let partitions: Vec<Value> = slurm
            .partitions
            .iter()
            .map(|p| {
                json!({
                    "partition": p.partition,
                    "default": p.default,
                    "avail": p.avail,
                    "time_limit": p.time_limit,
                    "nodes": p.nodes,
                    "state": p.state,
                })
            })
            .collect();
        let tools: serde_json::Map<String, Value> = slurm
            .tools
            .iter()
            .map(|(n, p)| (n.clone(), json!(p)))
            .collect();
        obj.insert(
            "slurm".into(),
            json!({
                "tools": tools,
                "partitions": partitions,
                "accounting": slurm.accounting,
                "accounting_note": slurm.accounting_note,
            }),
        );
    }
    v
}

fn to_human(r: &DoctorReport) -> Vec<Block> {
    let mut fields = vec![("machine", Cell::new(r.machine_id.clone(), Tone::Bold))];
    if let Some(target) = &r.target {
        fields.push(("target", Cell::plain(target.clone())));
    }
    fields.push(("reachable", Cell::check(r.reachable)));
    if let Some(hk) = &r.host_key {
        let tone = if hk.status == "known" {
            Tone::Good
        } else {
            Tone::Bad
        };
        let text = match &hk.fingerprint {
            Some(fp) => format!("{} ({fp})", hk.status),
            None => hk.status.clone(),
        };
        fields.push(("host key", Cell::new(text, tone)));
    }
    let used = r.auth.as_ref().and_then(|a| a.used.as_deref());
    let auth_cell = match (r.auth_ok, used) {
        (true, Some(method)) => Cell::new(format!("yes ({method})"), Tone::Good),
        (ok, _) => Cell::check(ok),
    };
    fields.push(("auth ok", or_skipped(r, "auth", auth_cell)));
    fields.push((
        "default cwd ok",
        or_skipped(r, "default_cwd", Cell::check(r.default_cwd_ok)),
    ));
    let tmux = match (&r.tmux_version, r.tmux_found) {
        (Some(v), true) => Cell::new(v.clone(), Tone::Good),
        (None, true) => Cell::new("found", Tone::Good),
        (_, false) => Cell::new("not found", Tone::Bad),
    };
    fields.push(("tmux", or_skipped(r, "tmux", tmux)));
    if let Some(slurm) = &r.slurm {
        let parts: Vec<String> = slurm
            .partitions
            .iter()
            .map(|p| {
                format!(
                    "{} ({} nodes {})",
                    p.partition.as_deref().unwrap_or("?"),
                    p.nodes
                        .map_or_else(|| "null".to_string(), |n| n.to_string()),
                    p.state.as_deref().unwrap_or("?")
                )
            })
            .collect();
        fields.push(("slurm partitions", Cell::plain(parts.join(", "))));
        let acct = if slurm.accounting {
            "sacct answers"
        } else {
            "no accounting (exit codes from squeue and remote-runner's exit file)"
        };
        fields.push(("slurm accounting", Cell::plain(acct)));
    }
    let mut blocks = vec![Block::Fields(fields)];
    for e in &r.errors {
        blocks.push(Block::Line(Cell::new(
            format!("  - {} [{}]", crate::hint::message(e), e.code),
            Tone::Bad,
        )));
    }
    if r.all_ok() {
        blocks.push(Block::Line(Cell::new("All checks passed.", Tone::Good)));
    }
    blocks
}

/// A check that did not run reads `skipped (why)`, not as a failure.
fn or_skipped(r: &DoctorReport, check: &str, ran: Cell) -> Cell {
    match r.skipped(check) {
        Some(why) => Cell::plain(format!("skipped ({why})")),
        None => ran,
    }
}

/// An unknown host key's message gets the exact command that trusts it for this machine.
fn with_concrete_fix(mut err: Error, machine_id: &str) -> Error {
    if err.code == ErrorCode::HostKeyUnknown {
        err.message.push_str(&format!(
            ". For this machine, once the fingerprint is verified: {}",
            crate::hint::accept_new_command(machine_id)
        ));
        err.hint = None; // the concrete command replaces the general one
    }
    err
}

//! What a resumed state is allowed to name: only a session this provider created, for the same
//! BotMux session, on the machine it is configured for.
//!
//! `providerState` comes back from the host, which stores it; the host is trusted to route it,
//! but the state itself proves nothing (any JSON with the right keys looks the same). So when
//! the provider creates a session it writes a binding, `<state dir>/provider/bindings/<engine
//! session id>.json`, naming the BotMux `sessionId` and the machine. `resume` adopts or destroys
//! a session only when the binding says it is this chat's session on this machine. Sessions the
//! CLI made have no binding, so a state naming one is refused and nothing is touched.

use std::path::{Path, PathBuf};

use remote_runner_protocol::{ResumeCommand, State};
use serde::{Deserialize, Serialize};

use super::failure::Unbound;
use super::shared::SessionRef;
use remote_runner_engine::error::{Error, Result};

/// The record written next to a session this provider created.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    /// BotMux `sessionId` from the `start` or `resume` that created the session.
    pub botmux_session_id: String,
    /// Engine machine id the session runs on.
    pub machine_id: String,
    /// Engine session id.
    pub session_id: String,
}

/// Where bindings live.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("provider").join("bindings")
}

/// Engine session ids are `[A-Za-z0-9_-]`; anything else (a path, say) is never a file name.
fn file_name_ok(session_id: &str) -> bool {
    !session_id.is_empty()
        && session_id.len() <= 128
        && session_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Record that `session` was created for BotMux session `botmux_session_id`.
pub fn record(state_dir: &Path, session: &SessionRef, botmux_session_id: &str) -> Result<()> {
    if !file_name_ok(&session.session_id) {
        return Err(Error::internal(format!(
            "engine session id {:?} cannot name a binding file",
            session.session_id
        )));
    }
    let dir = dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    let binding = Binding {
        botmux_session_id: botmux_session_id.to_string(),
        machine_id: session.machine_id.clone(),
        session_id: session.session_id.clone(),
    };
    let bytes = serde_json::to_vec_pretty(&binding)
        .map_err(|e| Error::internal(format!("binding to JSON: {e}")))?;
    let path = dir.join(format!("{}.json", session.session_id));
    let tmp = dir.join(format!(".{}.json.tmp", session.session_id));
    write_private(&tmp, &bytes).map_err(|e| io_error(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io_error(&path, e))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::new(
        remote_runner_engine::error::ErrorCode::Io,
        format!(
            "cannot write the session binding {}: {e}; check that the state directory is writable",
            path.display()
        ),
    )
}

fn read(state_dir: &Path, session_id: &str) -> Option<Binding> {
    if !file_name_ok(session_id) {
        return None;
    }
    let bytes = std::fs::read(dir(state_dir).join(format!("{session_id}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The session a resumed state names, once it is proven to be this chat's session on this
/// machine; `Ok(None)` when the state names no session (nothing to adopt or destroy).
pub fn check(
    state_dir: &Path,
    machine_id: &str,
    c: &ResumeCommand,
) -> std::result::Result<Option<SessionRef>, Unbound> {
    let Some(named) = named_session(&c.state)? else {
        return Ok(None);
    };
    if named.machine_id != machine_id {
        return Err(Unbound::ForeignMachine {
            named: named.machine_id,
            ours: machine_id.to_string(),
        });
    }
    let session_id = named.session_id.clone();
    match read(state_dir, &named.session_id) {
        None => Err(Unbound::NoBinding { session_id }),
        Some(b) if b.botmux_session_id != c.session_id => Err(Unbound::OtherChat {
            session_id,
            chat: c.session_id.clone(),
        }),
        Some(b) if b.machine_id != machine_id || b.session_id != named.session_id => {
            Err(Unbound::OtherMachine { session_id })
        }
        Some(_) => Ok(Some(named)),
    }
}

/// The session a state's `providerState` names: both `sessionId` and `machineId` strings, or
/// neither key.
fn named_session(state: &State) -> std::result::Result<Option<SessionRef>, Unbound> {
    let Some(ps) = state.provider_state.as_ref() else {
        return Ok(None);
    };
    let session_id = ps.get("sessionId");
    let machine_id = ps.get("machineId");
    if session_id.is_none() && machine_id.is_none() {
        return Ok(None);
    }
    match (
        session_id.and_then(|v| v.as_str()),
        machine_id.and_then(|v| v.as_str()),
    ) {
        (Some(s), Some(m)) if file_name_ok(s) => Ok(Some(SessionRef {
            session_id: s.to_string(),
            machine_id: m.to_string(),
        })),
        _ => Err(Unbound::Malformed),
    }
}

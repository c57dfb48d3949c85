//! The v3 commands over the engine.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use remote_runner_engine::ErrorCode;
use remote_runner_engine::connect::MachineConnector;
use remote_runner_engine::engine::transfer::TransferOptions;
use remote_runner_engine::engine::{CommandStatus, Engine, ExecRequest, SessionStatus};
use remote_runner_engine::machine::Machine;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh::config::{SshConfigSource, machine_from_alias};
use remote_runner_engine::ssh::{ConnectOptions, PassphraseSource};
use remote_runner_engine::store::{self, Store};
use remote_runner_engine::transport::{ExecOptions, shell_quote};
use serde_json::{Value, json};

use crate::error::{
    DESTROYED, LOG_WRITE, NO_MOUNT, Result, SSH, STATE, SYNC, SeedError, TIMEOUT, TMUX, UNMOUNT,
};
use crate::state::{self, Locked, MetaCommand, MetaSession, Mount, Pending, Session};
use crate::sync;
use crate::{tree, wrapper};

#[derive(Debug)]
pub struct Ctx {
    pub state_dir: PathBuf,
}

/// An engine wired to one machine, and that machine's transport.
struct Wired {
    engine: Engine,
    connector: Arc<MachineConnector>,
    machine: Machine,
}

impl Wired {
    async fn transport(&self) -> Result<Arc<Remote>> {
        use remote_runner_engine::engine::Connector;
        self.connector
            .connect(&self.machine.machine_id)
            .await
            .map_err(|e| {
                SeedError::engine(
                    e,
                    &format!("connecting to {}", self.machine.machine_id),
                    (SSH, "ssh_connection_failed"),
                )
            })
    }
}

/// Now as `2026-04-07T10:30:00Z` and as seconds since the epoch.
fn now() -> (String, i64) {
    let t = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    (t.format(&fmt).unwrap_or_default(), t.unix_timestamp())
}

fn today() -> String {
    let fmt = time::macros::format_description!("[year][month][day]");
    time::OffsetDateTime::now_utc()
        .format(&fmt)
        .unwrap_or_default()
}

impl Ctx {
    /// The machine for `--machine`: a machine registered with `remote-runner machine add`, or
    /// an ssh_config `Host` alias.
    fn machine(&self, machine_id: &str) -> Result<Machine> {
        let st = Store::open(&self.state_dir)
            .map_err(|e| SeedError::engine(e, "opening the state dir", (STATE, "state_error")))?;
        match store::machines::resolve(&st, machine_id) {
            Ok(m) => Ok(m),
            Err(e) if e.code == ErrorCode::UnknownMachine => {
                match machine_from_alias(machine_id, &SshConfigSource::Default) {
                    Ok(Some(m)) => Ok(m),
                    Ok(None) => Err(SeedError::new(
                        SSH,
                        "ssh_connection_failed",
                        format!(
                            "{}; or add a `Host {machine_id}` entry to your ssh_config",
                            e.message
                        ),
                    )),
                    Err(e) => Err(SeedError::engine(
                        e,
                        "reading ssh_config",
                        (SSH, "ssh_connection_failed"),
                    )),
                }
            }
            Err(e) => Err(SeedError::engine(
                e,
                &format!("looking up machine {machine_id}"),
                (STATE, "state_error"),
            )),
        }
    }

    fn wire(&self, machine_id: &str, connect_timeout: Option<Duration>) -> Result<Wired> {
        let machine = self.machine(machine_id)?;
        let mut options = ConnectOptions {
            passphrase: if std::io::stdin().is_terminal() {
                PassphraseSource::Tty
            } else {
                PassphraseSource::Never
            },
            ..ConnectOptions::default()
        };
        if let Some(t) = connect_timeout {
            options.connect_timeout = Some(t);
        }
        let connector = Arc::new(
            MachineConnector::new(self.state_dir.clone(), options).with_machine(machine.clone()),
        );
        let engine = Engine::new(&self.state_dir, connector.clone()).map_err(|e| {
            SeedError::engine(e, "opening the engine state", (STATE, "state_error"))
        })?;
        Ok(Wired {
            engine,
            connector,
            machine,
        })
    }
}

fn metadata_json(m: &Mount) -> Value {
    json!({
        "mount_id": m.mount_id,
        "machine": m.machine,
        "local_path": m.local_path,
        "remote_path": m.remote_path,
        "mounted_at": m.mounted_at,
        "sessions": m.meta_sessions.iter().map(|s| json!({
            "session_id": s.session_id,
            "session_name": s.session_name,
            "created_at": s.created_at,
            "commands": s.commands.iter().map(|c| json!({
                "index": c.index,
                "cmd": c.cmd,
                "log_file": c.log_file,
                "exit_code": c.exit_code,
                "executed_at": c.executed_at,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Rewrite `<local>/metadata.json`.
fn write_metadata(m: &Mount) -> Result<()> {
    let path = Path::new(&m.local_path).join("metadata.json");
    let text = serde_json::to_vec_pretty(&metadata_json(m)).unwrap_or_default();
    state::write_atomic(&path, &text).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!(
                "cannot write {}: {e}; check local disk space and permissions",
                path.display()
            ),
        )
    })
}

fn session_count(st: &state::State, mount_id: &str) -> usize {
    st.sessions
        .iter()
        .filter(|s| s.mount_id == mount_id)
        .count()
}

fn mount_json(m: &Mount, sessions: usize) -> Value {
    json!({
        "mount_id": m.mount_id,
        "machine": m.machine,
        "local_path": m.local_path,
        "remote_path": m.remote_path,
        "status": "mounted",
        "mounted_at": m.mounted_at,
        "session_count": sessions,
    })
}

/// `seed-runner status`.
pub async fn status(ctx: &Ctx) -> Result<Value> {
    refresh_pending_all(ctx).await;
    let live: Vec<Session> = state::lock(&ctx.state_dir)?
        .state
        .sessions
        .iter()
        .filter(|s| s.pending.is_none())
        .cloned()
        .collect();
    let mut wired = Default::default();
    let mut unreachable = std::collections::BTreeSet::new();
    for s in &live {
        if check_alive(ctx, s, &mut wired).await.is_some() {
            unreachable.insert(s.session_id.clone());
        }
    }
    let locked = state::lock(&ctx.state_dir)?;
    let st = &locked.state;
    let mounts: Vec<Value> = st
        .mounts
        .iter()
        .map(|m| mount_json(m, session_count(st, &m.mount_id)))
        .collect();
    let sessions: Vec<Value> = st
        .sessions
        .iter()
        .map(|s| {
            json!({
                "session_id": s.session_id,
                "session_name": s.session_name,
                "machine": s.machine,
                "mount_id": s.mount_id,
                "status": if unreachable.contains(&s.session_id) {
                    "error"
                } else {
                    local_status(ctx, s)
                },
                "busy": s.pending.is_some(),
                "command_count": s.command_count,
                "created_at": s.created_at,
            })
        })
        .collect();
    Ok(json!({
        "mounts": mounts,
        "sessions": sessions,
        "summary": {
            "mount_count": st.mounts.len(),
            "session_count": st.sessions.len(),
        },
    }))
}

/// The session's status from local records: `error` when its engine session is gone or the
/// machine could not be reached again after a drop, `busy` while a command has not been seen
/// to end, `timeout` past its own timeout.
fn local_status(ctx: &Ctx, s: &Session) -> &'static str {
    if let Ok(engine_rec) =
        Store::open(&ctx.state_dir).and_then(|st| store::sessions::get(&st, &s.engine_session_id))
        && engine_rec.is_none_or(|r| r.status != SessionStatus::Active)
    {
        return "error";
    }
    if s.error.is_some() {
        return "error";
    }
    if s.pending.is_some() {
        return "busy";
    }
    let (_, now) = now();
    if now.saturating_sub(s.created_unix) as u64 > s.timeout_seconds {
        return "timeout";
    }
    "active"
}

/// `<local-dir>` as an absolute path without `.`, `..` or symlinks in the part that exists
/// (it need not exist yet), and the directories `mount create` would have to make for it.
fn resolve_local(local_dir: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    let fail = |e: std::io::Error| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!("cannot resolve {}: {e}", local_dir.display()),
        )
    };
    let abs = std::path::absolute(local_dir).map_err(fail)?;
    let mut existing = abs.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
            break;
        };
        rest.push(name);
        existing.pop();
    }
    let mut path = std::fs::canonicalize(&existing).map_err(fail)?;
    let mut missing = Vec::new();
    for name in rest.into_iter().rev() {
        if name == ".." {
            path.pop();
        } else if name != "." {
            path.push(name);
            missing.push(path.clone());
        }
    }
    Ok((path, missing))
}

/// Whether one of two absolute paths is the other or inside it.
fn overlaps(a: &str, b: &str) -> bool {
    let (a, b) = (Path::new(a), Path::new(b));
    a.starts_with(b) || b.starts_with(a)
}

/// A live mount that shares the local dir, or the remote dir on the same machine, with a new
/// one (the same dir or one inside the other): its `--cleanup` would delete the other's work.
fn conflict(st: &state::State, machine_id: &str, local: &str, remote: Option<&str>) -> Result<()> {
    for m in &st.mounts {
        let what = if overlaps(&m.local_path, local) {
            format!("local dir {}", m.local_path)
        } else if m.machine == machine_id
            && let Some(r) = remote
            && overlaps(&m.remote_path, r)
        {
            format!("remote dir {} on {}", m.remote_path, m.machine)
        } else {
            continue;
        };
        return Err(SeedError::new(
            SYNC,
            "mount_conflict",
            format!(
                "mount {} already uses the {what}; reuse mount {} (sessions can share it), \
                 destroy it first, or pick another --local-dir / --remote-dir",
                m.mount_id, m.mount_id
            ),
        ));
    }
    Ok(())
}

/// `mount create`: nothing is created, locally or remotely, unless it succeeds.
pub async fn mount_create(
    ctx: &Ctx,
    machine_id: &str,
    local_dir: &Path,
    remote_dir: &str,
    timeout: u64,
) -> Result<Value> {
    let (local, missing) = resolve_local(local_dir)?;
    let local = local.to_string_lossy().into_owned();
    conflict(
        &state::lock(&ctx.state_dir)?.state,
        machine_id,
        &local,
        None,
    )?;
    let bound = Duration::from_secs(timeout.max(1));
    let wired = ctx.wire(machine_id, Some(bound))?;
    let prepared = match tokio::time::timeout(bound, prepare_remote_dir(&wired, remote_dir)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(SeedError::new(
                SSH,
                "ssh_connection_failed",
                format!(
                    "mount create on {machine_id} did not finish within {timeout} s; check that \
                     the machine is online, or pass a larger --timeout"
                ),
            ));
        }
    };
    let made = async {
        let mut locked = state::lock(&ctx.state_dir)?;
        conflict(&locked.state, machine_id, &local, Some(&prepared.path))?;
        let logs = Path::new(&local).join("artifacts").join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| {
            SeedError::new(
                LOG_WRITE,
                "log_write_failed",
                format!(
                    "cannot create {}: {e}; check the path and its permissions",
                    logs.display()
                ),
            )
        })?;
        let (at, _) = now();
        let mount = Mount {
            mount_id: locked.state.next_id("mnt", &today()),
            machine: machine_id.to_string(),
            local_path: local.clone(),
            remote_path: prepared.path.clone(),
            mounted_at: at,
            log_counters: Default::default(),
            meta_sessions: Vec::new(),
        };
        write_metadata(&mount)?;
        locked.state.mounts.push(mount.clone());
        locked.save()?;
        Ok(mount)
    }
    .await;
    let mount = match made {
        Ok(m) => m,
        Err(e) => {
            // Take back what this create made: the local dirs, then the remote ones.
            let root = Path::new(&local);
            let _ = std::fs::remove_dir(root.join("artifacts").join("logs"));
            let _ = std::fs::remove_dir(root.join("artifacts"));
            for dir in missing.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
            if let Some(top) = &prepared.created
                && let Ok(t) = wired.transport().await
            {
                let _ = t
                    .exec(
                        &format!("rm -rf -- {}", shell_quote(top)),
                        ExecOptions::default(),
                    )
                    .await;
            }
            return Err(e);
        }
    };
    Ok(json!({
        "mount_id": mount.mount_id,
        "machine": mount.machine,
        "local_path": mount.local_path,
        "remote_path": mount.remote_path,
        "status": "mounted",
        "mounted_at": mount.mounted_at,
    }))
}

/// The remote work dir as `mount create` made it.
struct Prepared {
    /// Absolute path.
    path: String,
    /// The topmost directory this call created (removed again when the create fails).
    created: Option<String>,
}

/// Create the remote work dir and its `artifacts/` (`~` is the login user's home).
/// `mkdir -p` of a mount's (absolute) remote work dir, nothing in it.
async fn remake_bare_dir(wired: &Wired, remote_path: &str) -> Result<()> {
    let t = wired.transport().await?;
    let out = t
        .exec(
            &format!("mkdir -p -- {}", shell_quote(remote_path)),
            ExecOptions::default(),
        )
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                &format!("making the remote work dir {remote_path} again"),
                (SYNC, "remote_dir_missing"),
            )
        })?;
    if !out.status.success() {
        return Err(SeedError::new(
            SYNC,
            "remote_dir_missing",
            format!(
                "the remote work dir {remote_path} on {} is gone and cannot be made again: {}; \
                 check its parent's permissions, or destroy the mount and create another",
                wired.machine.machine_id,
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(())
}

async fn prepare_remote_dir(wired: &Wired, remote_dir: &str) -> Result<Prepared> {
    let t = wired.transport().await?;
    let target = if remote_dir == "~" {
        "\"$HOME\"".to_string()
    } else if let Some(rest) = remote_dir.strip_prefix("~/") {
        format!("\"$HOME\"/{}", shell_quote(rest))
    } else if remote_dir.starts_with('/') {
        shell_quote(remote_dir)
    } else {
        format!("\"$HOME\"/{}", shell_quote(remote_dir))
    };
    let out = t
        .exec(&make_dir_script(&target), ExecOptions::default())
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                &format!("creating {remote_dir} on {}", wired.machine.machine_id),
                (SYNC, "mount_failed"),
            )
        })?;
    let text = out.stdout_lossy();
    let mut lines = text.lines();
    let path = lines.next().unwrap_or_default().to_string();
    let created = lines
        .next()
        .filter(|l| l.starts_with('/'))
        .map(str::to_string);
    if !out.status.success() || !path.starts_with('/') {
        return Err(SeedError::new(
            SYNC,
            "mount_failed",
            format!(
                "cannot create the remote work dir {remote_dir} on {}: {}; check its path and \
                 permissions, or pass another --remote-dir",
                wired.machine.machine_id,
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(Prepared { path, created })
}

/// The remote script (`make_dir.sh`) that makes `target` (a shell word) and its `artifacts/`.
fn make_dir_script(target: &str) -> String {
    format!("d={target}\n{}", include_str!("make_dir.sh"))
}

/// `mount status`: `error` when the machine cannot be reached or the remote work dir is gone
/// (the next `session exec` makes it again).
pub async fn mount_status(ctx: &Ctx, mount_id: &str) -> Result<Value> {
    let (m, sessions) = {
        let locked = state::lock(&ctx.state_dir)?;
        let m = locked.state.mount(mount_id)?.clone();
        (m, session_count(&locked.state, mount_id))
    };
    let mut out = mount_json(&m, sessions);
    if let Err(e) = check_remote_dir(ctx, &m).await {
        out["status"] = json!("error");
        out["status_message"] = json!(e.message);
    }
    Ok(out)
}

/// Whether the mount's remote work dir is there (one call on the machine).
async fn check_remote_dir(ctx: &Ctx, m: &Mount) -> Result<()> {
    let wired = ctx.wire(&m.machine, None)?;
    let t = wired.transport().await?;
    match t.stat(&m.remote_path).await {
        Ok(Some(st)) if st.kind == remote_runner_engine::transport::FileKind::Dir => Ok(()),
        Ok(_) => Err(SeedError::new(
            SYNC,
            "remote_dir_missing",
            format!(
                "the remote work dir {} is gone on {}; the next `session exec` makes it again \
                 and sends the local files",
                m.remote_path, m.machine
            ),
        )),
        Err(e) => Err(SeedError::engine(
            e,
            &format!("checking {} on {}", m.remote_path, m.machine),
            (SYNC, "mount_failed"),
        )),
    }
}

/// `mount destroy`: its sessions are destroyed too; local logs and artifacts stay.
pub async fn mount_destroy(ctx: &Ctx, mount_id: &str, cleanup: bool) -> Result<Value> {
    let mount = state::lock(&ctx.state_dir)?.state.mount(mount_id)?.clone();
    let mut warnings = Vec::new();
    let session_ids: Vec<String> = state::lock(&ctx.state_dir)?
        .state
        .sessions
        .iter()
        .filter(|s| s.mount_id == mount_id)
        .map(|s| s.session_id.clone())
        .collect();
    for sid in session_ids {
        match session_destroy(ctx, &sid).await {
            Ok(out) => {
                if let Some(w) = out["warning"].as_str() {
                    warnings.push(format!("session {sid}: {w}"));
                }
            }
            Err(e) => warnings.push(format!("session {sid}: {}", e.message)),
        }
    }
    if cleanup {
        let removed = async {
            let wired = ctx.wire(&mount.machine, None)?;
            let t = wired.transport().await?;
            let out = t
                .exec(
                    &format!("rm -rf -- {}", shell_quote(&mount.remote_path)),
                    ExecOptions::default(),
                )
                .await
                .map_err(|e| {
                    SeedError::engine(e, "removing the remote dir", (UNMOUNT, "unmount_failed"))
                })?;
            if out.status.success() {
                Ok(())
            } else {
                Err(SeedError::new(
                    UNMOUNT,
                    "unmount_failed",
                    out.stderr_lossy().trim().to_string(),
                ))
            }
        }
        .await;
        if let Err(e) = removed {
            warnings.push(format!(
                "error {}: cannot remove {} on {}: {}",
                UNMOUNT, mount.remote_path, mount.machine, e.message
            ));
        }
    }
    let mut locked = state::lock(&ctx.state_dir)?;
    if let Ok(m) = locked.state.mount(mount_id) {
        let _ = write_metadata(m);
    }
    locked.state.mounts.retain(|m| m.mount_id != mount_id);
    locked.save()?;
    state::remove_manifest(&ctx.state_dir, mount_id);
    let (at, _) = now();
    let mut out = json!({
        "mount_id": mount_id,
        "status": "unmounted",
        "unmounted_at": at,
        "artifacts_preserved": true,
        "artifacts_location": mount.local_path,
    });
    if !warnings.is_empty() {
        out["warning"] = json!(warnings.join("; "));
    }
    Ok(out)
}

/// `session create`.
pub async fn session_create(
    ctx: &Ctx,
    machine_id: &str,
    mount_id: &str,
    name: &str,
    timeout: u64,
) -> Result<Value> {
    let mount = state::lock(&ctx.state_dir)?.state.mount(mount_id)?.clone();
    if mount.machine != machine_id {
        return Err(SeedError::new(
            NO_MOUNT,
            "mount_machine_mismatch",
            format!(
                "mount {mount_id} is on machine {}, not {machine_id}; pass --machine {} or \
                 create a mount on {machine_id}",
                mount.machine, mount.machine
            ),
        ));
    }
    let log_dir = Path::new(&mount.local_path)
        .join("artifacts")
        .join("logs")
        .join(name);
    std::fs::create_dir_all(&log_dir).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!(
                "cannot create {}: {e}; check local disk space and permissions",
                log_dir.display()
            ),
        )
    })?;
    let wired = ctx.wire(machine_id, None)?;
    let create = || {
        wired
            .engine
            .create_session(&wired.machine, Some(&mount.remote_path))
    };
    let rec = match create().await {
        Err(e) if e.code == ErrorCode::RemoteNotFound => {
            // The remote work dir is gone (the mount says `error`): make it again, bare, so
            // that the first exec finds it without `artifacts/` and sends every input, as
            // after any loss of the work dir.
            remake_bare_dir(&wired, &mount.remote_path).await?;
            create().await
        }
        other => other,
    };
    let rec = rec.map_err(|e| {
        SeedError::engine(
            e,
            &format!("creating the tmux session on {machine_id}"),
            (TMUX, "tmux_failed"),
        )
    })?;
    // The spec's `tmux_session` name, as a real tmux session: one grouped with the engine's
    // (same window and pane) on the engine's socket. An id whose name another state dir uses
    // on that machine is skipped, so names never clash there.
    let mut session_id = None;
    for _ in 0..50 {
        let id = {
            let mut locked = state::lock(&ctx.state_dir)?;
            let id = locked.state.next_id("sess", &today());
            locked.save()?;
            id
        };
        match name_tmux_session(&wired, &rec, &id).await {
            Ok(true) => {
                session_id = Some(id);
                break;
            }
            Ok(false) => continue,
            Err(e) => {
                let _ = wired.engine.destroy(&rec.session_id).await;
                return Err(e);
            }
        }
    }
    let Some(session_id) = session_id else {
        let _ = wired.engine.destroy(&rec.session_id).await;
        return Err(SeedError::new(
            TMUX,
            "tmux_failed",
            "no free seed_<session_id> tmux session name on the machine; remove stale ones \
             (`tmux -L remote-runner ls`)",
        ));
    };
    let mut locked = state::lock(&ctx.state_dir)?;
    let (at, unix) = now();
    let session = Session {
        session_id: session_id.clone(),
        session_name: name.to_string(),
        machine: machine_id.to_string(),
        mount_id: mount_id.to_string(),
        engine_session_id: rec.session_id.clone(),
        created_at: at,
        created_unix: unix,
        timeout_seconds: timeout,
        command_count: 0,
        last_command: None,
        last_exit_code: None,
        last_executed_at: None,
        pending: None,
        error: None,
    };
    let Ok(m) = locked.state.mount_mut(mount_id) else {
        // The mount went away meanwhile: do not leave the shell behind.
        drop(locked);
        let _ = unname_tmux_session(&wired, &rec, &session_id).await;
        let _ = wired.engine.destroy(&rec.session_id).await;
        return Err(state::no_mount(mount_id));
    };
    m.meta_sessions.push(MetaSession {
        session_id: session.session_id.clone(),
        session_name: name.to_string(),
        created_at: session.created_at.clone(),
        commands: Vec::new(),
    });
    let m = m.clone();
    locked.state.sessions.push(session.clone());
    locked.save()?;
    drop(locked);
    write_metadata(&m)?;
    Ok(json!({
        "session_id": session.session_id,
        "session_name": session.session_name,
        "machine": session.machine,
        "mount_id": session.mount_id,
        "local_mount_point": mount.local_path,
        "remote_work_dir": mount.remote_path,
        "status": "ready",
        "tmux_session": tmux_name(&session.session_id),
        "created_at": session.created_at,
    }))
}

/// The tmux session `seed_<session_id>`, grouped with the engine's session on its socket: the
/// same pane, so `tmux -L <socket> attach -t seed_<id>` shows the commands as they run.
fn tmux_name(session_id: &str) -> String {
    format!("seed_{session_id}")
}

/// `Ok(false)`: the name is taken. Not on a Slurm machine: the session's tmux server runs on
/// a compute node that this connection to the login node does not reach.
async fn name_tmux_session(
    wired: &Wired,
    rec: &remote_runner_engine::records::session::SessionRecord,
    session_id: &str,
) -> Result<bool> {
    if rec.slurm_job_id.is_some() {
        return Ok(true);
    }
    let t = wired.transport().await?;
    let script = format!(
        "{tmux} -L {sock} new-session -d -s {name} -t {target}",
        tmux = shell_quote(&rec.tmux_path),
        sock = shell_quote(&rec.tmux_socket),
        name = shell_quote(&tmux_name(session_id)),
        target = shell_quote(&format!("={}", rec.tmux_session)),
    );
    let out = t
        .exec(&script, ExecOptions::default())
        .await
        .map_err(|e| SeedError::engine(e, "naming the tmux session", (TMUX, "tmux_failed")))?;
    if !out.status.success() {
        if out.stderr_lossy().contains("duplicate session") {
            return Ok(false);
        }
        return Err(SeedError::new(
            TMUX,
            "tmux_failed",
            format!(
                "cannot create tmux session {}: {}; check tmux on the remote machine",
                tmux_name(session_id),
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(true)
}

/// Remove the `seed_<id>` name (before the engine ends its session: a grouped session would
/// keep the pane alive). Returns the pid of the pane's first process: the id of the terminal
/// session its commands (and their `&` jobs) run in.
async fn unname_tmux_session(
    wired: &Wired,
    rec: &remote_runner_engine::records::session::SessionRecord,
    session_id: &str,
) -> Option<u32> {
    if rec.slurm_job_id.is_some() {
        return None;
    }
    let t = wired.transport().await.ok()?;
    // Only the name in this session's group: once the session is gone, another state dir may
    // have taken the same name for its own session.
    let script = format!(
        "{tmux} -L {sock} list-panes -t {engine} -F '#{{pane_pid}}' 2>/dev/null | head -n 1; \
         if {tmux} -L {sock} list-sessions -F '#{{session_name}} #{{session_group}}' \
         2>/dev/null | grep -qxF -- {line}; then {tmux} -L {sock} kill-session -t {name}; \
         fi; true",
        tmux = shell_quote(&rec.tmux_path),
        sock = shell_quote(&rec.tmux_socket),
        engine = shell_quote(&format!("={}", rec.tmux_session)),
        line = shell_quote(&format!("{} {}", tmux_name(session_id), rec.tmux_session)),
        name = shell_quote(&format!("={}", tmux_name(session_id))),
    );
    let out = t.exec(&script, ExecOptions::default()).await.ok()?;
    out.stdout_lossy().trim().parse().ok()
}

/// After the tmux session is gone: hang up what is left of its terminal session. Jobs that
/// commands started with `&` run in the wrapper's subshell, outside the shell's job table, so
/// the shell's own hang-up does not reach them; closing a tmux pane ends them, and so does this
/// (a job that ignores SIGHUP, such as one under `nohup`, goes on, as it would there).
async fn hang_up(wired: &Wired, terminal_session: u32) {
    if let Ok(t) = wired.transport().await {
        let script = format!("pkill -HUP -s {terminal_session} -u \"$(id -u)\" 2>/dev/null; true");
        let _ = t.exec(&script, ExecOptions::default()).await;
    }
}

fn destroyed(session_id: &str) -> SeedError {
    SeedError::new(
        DESTROYED,
        "session_destroyed",
        format!(
            "session {session_id} was destroyed; create a new session with `seed-runner \
             session create`"
        ),
    )
}

fn busy(session_id: &str) -> SeedError {
    SeedError::new(
        TIMEOUT,
        "session_busy",
        format!(
            "session {session_id} is busy: an earlier command has not ended yet (`seed-runner \
             session status --session {session_id}` says when it is active again); new commands \
             are refused, not queued"
        ),
    )
}

fn remote_log_dir(mount: &Mount, name: &str) -> String {
    format!("{}/logs/{name}", mount.remote_path)
}

fn local_log_dir(mount: &Mount, name: &str) -> PathBuf {
    Path::new(&mount.local_path)
        .join("artifacts")
        .join("logs")
        .join(name)
}

/// Fetch a command's log as it is now (partial while the command runs).
async fn fetch_log(
    wired: &Wired,
    session: &Session,
    mount: &Mount,
    log_filename: &str,
) -> Result<()> {
    let local_dir = local_log_dir(mount, &session.session_name);
    std::fs::create_dir_all(&local_dir).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!(
                "cannot create {}: {e}; check local disk space and permissions",
                local_dir.display()
            ),
        )
    })?;
    let remote_log = format!(
        "{}/{log_filename}",
        remote_log_dir(mount, &session.session_name)
    );
    wired
        .engine
        .file_get(
            &session.engine_session_id,
            &remote_log,
            &local_dir.join(log_filename),
            TransferOptions::default(),
        )
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                &format!("fetching the log {remote_log} (check local disk space and permissions)"),
                (LOG_WRITE, "log_write_failed"),
            )
        })?;
    Ok(())
}

/// Fetch a command's log and the remote artifacts; beside the log fetch, find the inputs the
/// command deleted or changed (`sent`: the files sent just before it; `None`: unknown), so that
/// the next sync sends them again. Returns a warning naming the artifacts that were not
/// fetched, and why.
async fn bring_back(
    ctx: &Ctx,
    wired: &Wired,
    session: &Session,
    mount: &Mount,
    log_filename: &str,
    sent: Option<&BTreeSet<String>>,
) -> Result<Option<String>> {
    let transport = wired.transport().await?;
    let inputs = {
        let (_lock, manifest) = state::lock_manifest(&ctx.state_dir, &mount.mount_id)?;
        tree::inputs(&manifest, sent)
    };
    let stamp = format!("logs/{}/.seed_start", session.session_name);
    let (log, changed) = tokio::join!(
        fetch_log(wired, session, mount, log_filename),
        tree::changed(&transport, &mount.remote_path, &stamp, inputs)
    );
    log?;
    let (_lock, mut manifest) = state::lock_manifest(&ctx.state_dir, &mount.mount_id)?;
    if let Ok(changed) = changed {
        tree::forget(&mut manifest, &changed);
    }
    let fetched = sync::download_artifacts(
        &wired.engine,
        &session.engine_session_id,
        &transport,
        Path::new(&mount.local_path),
        &mount.remote_path,
        &mut manifest,
    )
    .await;
    state::save_manifest(&ctx.state_dir, &mount.mount_id, &manifest)?;
    let skipped = fetched?.skipped;
    Ok((!skipped.is_empty()).then(|| {
        let each: Vec<String> = skipped
            .iter()
            .map(|(rel, why)| format!("artifacts/{rel:?}: {why}"))
            .collect();
        format!("artifacts not fetched: {}", each.join("; "))
    }))
}

/// [`bring_back`], on a fresh connection again when the link drops (3 attempts in all, as
/// the spec's reconnects).
async fn bring_back_retried(
    ctx: &Ctx,
    wired: &Wired,
    session: &Session,
    mount: &Mount,
    log_filename: &str,
    sent: Option<&BTreeSet<String>>,
) -> Result<Option<String>> {
    let mut last = match bring_back(ctx, wired, session, mount, log_filename, sent).await {
        Err(e) if e.code == SSH => e,
        other => return other,
    };
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let fresh = ctx.wire(&session.machine, None)?;
        last = match bring_back(ctx, &fresh, session, mount, log_filename, sent).await {
            Err(e) if e.code == SSH => e,
            other => return other,
        };
    }
    Err(last)
}

/// The exit code on the log's last line (`$ exit_code: N`).
fn exit_code_from_log(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let last = text.lines().rev().find(|l| !l.is_empty())?;
    last.rsplit_once("$ exit_code: ")?.1.trim().parse().ok()
}

/// Record the end of a command in the state and metadata.json.
fn record_end(
    locked: &mut Locked,
    session_id: &str,
    pending: &Pending,
    exit_code: Option<i32>,
) -> Result<()> {
    let s = locked.state.session_mut(session_id)?;
    s.pending = None;
    s.error = None;
    s.last_exit_code = exit_code;
    let mount_id = s.mount_id.clone();
    if let Ok(m) = locked.state.mount_mut(&mount_id) {
        if let Some(ms) = m
            .meta_sessions
            .iter_mut()
            .find(|ms| ms.session_id == session_id)
            && let Some(c) = ms.commands.iter_mut().find(|c| c.index == pending.index)
        {
            c.exit_code = exit_code;
        }
        let m = m.clone();
        write_metadata(&m)?;
    }
    locked.save()
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The engine command a pending exec started, found by its log path in the wrapper text, when
/// the exec ended (killed, link dropped) before it could note the command's id.
fn find_engine_command(ctx: &Ctx, session: &Session, mount: &Mount, p: &Pending) -> Option<String> {
    let st = Store::open(&ctx.state_dir).ok()?;
    let rec = store::commands::last(&st, &session.engine_session_id).ok()??;
    let log = format!(
        "__seed_log={}",
        shell_quote(&format!(
            "{}/{}",
            remote_log_dir(mount, &session.session_name),
            p.log_filename
        ))
    );
    rec.command.contains(&log).then_some(rec.command_id)
}

/// If the session has a pending command that has ended (its exec process gone and the engine
/// says so), bring its log and the artifacts back and record its end. One still running has its
/// partial log fetched (and the artifacts too with `products`). Returns whether it is still
/// pending.
async fn refresh_pending(
    ctx: &Ctx,
    session_id: &str,
    products: bool,
    notes: &mut Vec<String>,
) -> Result<bool> {
    let (session, mount) = {
        let locked = state::lock(&ctx.state_dir)?;
        let s = locked.state.session(session_id)?.clone();
        let m = locked.state.mount(&s.mount_id)?.clone();
        (s, m)
    };
    let Some(pending) = session.pending.clone() else {
        return Ok(false);
    };
    if pid_alive(pending.pid) && pending.pid != std::process::id() {
        return Ok(true);
    }
    let wired = ctx.wire(&session.machine, None)?;
    let command_id = pending
        .engine_command_id
        .clone()
        .or_else(|| find_engine_command(ctx, &session, &mount, &pending));
    let engine_exit = match &command_id {
        None => None, // the exec died before the engine had the command
        Some(cid) => {
            let rec = match wired
                .engine
                .command_show(&session.engine_session_id, cid)
                .await
            {
                Ok(rec) => Some(rec),
                // The session is gone with its command: nothing more will come.
                Err(e)
                    if e.code == ErrorCode::SessionLost || e.code == ErrorCode::UnknownSession =>
                {
                    None
                }
                Err(e) => {
                    return Err(SeedError::engine(
                        e,
                        "checking the running command",
                        (TMUX, "tmux_failed"),
                    ));
                }
            };
            let Some(rec) = rec else {
                let mut locked = state::lock(&ctx.state_dir)?;
                if let Ok(s) = locked.state.session(session_id)
                    && s.pending.as_ref().is_some_and(|p| p.index == pending.index)
                {
                    record_end(&mut locked, session_id, &pending, None)?;
                }
                return Ok(false);
            };
            if !rec.status.is_final() {
                let fetched = if products {
                    bring_back(ctx, &wired, &session, &mount, &pending.log_filename, None).await
                } else {
                    fetch_log(&wired, &session, &mount, &pending.log_filename)
                        .await
                        .map(|()| None)
                };
                note(notes, &pending.log_filename, fetched);
                if pending.engine_command_id.is_none() {
                    let mut locked = state::lock(&ctx.state_dir)?;
                    if let Ok(s) = locked.state.session_mut(session_id)
                        && let Some(p) = s.pending.as_mut().filter(|p| p.index == pending.index)
                    {
                        p.engine_command_id = Some(cid.clone());
                        locked.save()?;
                    }
                }
                return Ok(true);
            }
            Some(rec.exit_code)
        }
    };
    // It ended: bring its log and the artifacts back (best effort: a failure here must not
    // leave the session busy for ever), and record its exit code.
    let exit_code = match engine_exit {
        None => None,
        Some(engine_code) => {
            let fetched =
                bring_back_retried(ctx, &wired, &session, &mount, &pending.log_filename, None)
                    .await;
            let fetched_log = fetched.is_ok();
            note(notes, &pending.log_filename, fetched);
            if fetched_log {
                exit_code_from_log(
                    &local_log_dir(&mount, &session.session_name).join(&pending.log_filename),
                )
                .or(engine_code)
            } else {
                engine_code
            }
        }
    };
    let mut locked = state::lock(&ctx.state_dir)?;
    let still = locked
        .state
        .session(session_id)?
        .pending
        .as_ref()
        .is_some_and(|p| p.index == pending.index);
    if still {
        record_end(&mut locked, session_id, &pending, exit_code)?;
    }
    Ok(false)
}

/// A pending command's fetch, as a note for the answer: the artifacts it could not fetch, or
/// why nothing came back.
fn note(notes: &mut Vec<String>, log_filename: &str, fetched: Result<Option<String>>) {
    match fetched {
        Ok(None) => {}
        Ok(Some(w)) => notes.push(format!("{log_filename}: {w}")),
        Err(e) => notes.push(format!(
            "{log_filename}: its log and artifacts could not be fetched: error {}: {}",
            e.code, e.message
        )),
    }
}

async fn refresh_pending_all(ctx: &Ctx) {
    let ids: Vec<String> = match state::lock(&ctx.state_dir) {
        Ok(l) => l
            .state
            .sessions
            .iter()
            .filter(|s| s.pending.is_some())
            .map(|s| s.session_id.clone())
            .collect(),
        Err(_) => return,
    };
    for id in ids {
        let _ = refresh_pending(ctx, &id, false, &mut Vec::new()).await;
    }
}

/// `session exec`.
pub async fn session_exec(
    ctx: &Ctx,
    session_id: &str,
    command: &str,
    timeout: u64,
) -> Result<Value> {
    {
        let locked = state::lock(&ctx.state_dir)?;
        if locked.state.was_destroyed(session_id) {
            return Err(destroyed(session_id));
        }
        locked.state.session(session_id)?;
    }
    if refresh_pending(ctx, session_id, false, &mut Vec::new()).await? {
        return Err(busy(session_id));
    }
    // Claim the session and a log number.
    let mut locked = state::lock(&ctx.state_dir)?;
    let session = locked.state.session(session_id)?.clone();
    if session.pending.is_some() {
        return Err(busy(session_id));
    }
    match local_status(ctx, &session) {
        "timeout" => {
            return Err(SeedError::new(
                TIMEOUT,
                "session_timeout",
                format!(
                    "session {session_id} passed its timeout of {} s; destroy it and create a \
                     new one (with a larger --timeout if needed)",
                    session.timeout_seconds
                ),
            ));
        }
        "error" if session.error.is_none() => {
            return Err(SeedError::new(
                TMUX,
                "session_error",
                format!(
                    "the tmux session behind {session_id} is gone; destroy it and create a new \
                     one"
                ),
            ));
        }
        _ => {}
    }
    let (executed_at, _) = now();
    let mount = locked.state.mount_mut(&session.mount_id)?;
    // A number whose log is already here (a mount re-created on the same directory starts
    // counting again) is passed over: a command's log is never overwritten by a later one.
    let logs_here = local_log_dir(mount, &session.session_name);
    let counter = mount
        .log_counters
        .entry(session.session_name.clone())
        .or_insert(0);
    *counter += 1;
    while logs_here.join(format!("cmd_{:03}.log", *counter)).exists() {
        *counter += 1;
    }
    let index = *counter;
    let log_filename = format!("cmd_{index:03}.log");
    if let Some(ms) = mount
        .meta_sessions
        .iter_mut()
        .find(|ms| ms.session_id == session_id)
    {
        ms.commands.push(MetaCommand {
            index,
            cmd: command.to_string(),
            log_file: log_filename.clone(),
            exit_code: None,
            executed_at: executed_at.clone(),
        });
    }
    let mount = mount.clone();
    let pending = Pending {
        index,
        command: command.to_string(),
        log_filename: log_filename.clone(),
        executed_at: executed_at.clone(),
        pid: std::process::id(),
        engine_command_id: None,
    };
    {
        let s = locked.state.session_mut(session_id)?;
        s.pending = Some(pending.clone());
        s.command_count += 1;
        s.last_command = Some(command.to_string());
        s.last_executed_at = Some(executed_at.clone());
        s.last_exit_code = None;
    }
    locked.save()?;
    drop(locked);
    let _ = write_metadata(&mount);

    let outcome = run_exec(ctx, &session, &mount, &pending, timeout).await;
    let mut locked = state::lock(&ctx.state_dir)?;
    match outcome {
        Ok(Ran::Ended {
            exit_code,
            duration_ms,
            warning,
        }) => {
            record_end(&mut locked, session_id, &pending, Some(exit_code))?;
            let remote_log = format!(
                "{}/{log_filename}",
                remote_log_dir(&mount, &session.session_name)
            );
            let mut out = json!({
                "session_id": session_id,
                "session_name": session.session_name,
                "command": command,
                "exit_code": exit_code,
                "log_file_local": local_log_dir(&mount, &session.session_name)
                    .join(&log_filename)
                    .to_string_lossy(),
                "log_file_remote": remote_log,
                "log_filename": log_filename,
                "executed_at": executed_at,
                "duration_ms": duration_ms,
            });
            if let Some(w) = warning {
                out["warning"] = json!(w);
            }
            Ok(out)
        }
        Ok(Ran::TimedOut { engine_command_id }) => {
            if let Ok(s) = locked.state.session_mut(session_id)
                && let Some(p) = s.pending.as_mut()
            {
                p.engine_command_id = Some(engine_command_id);
            }
            locked.save()?;
            Err(SeedError::new(
                TIMEOUT,
                "command_timeout",
                format!(
                    "the command did not end within {timeout} s; it keeps running and session \
                     {session_id} stays busy until it ends. Its partial log is in \
                     {log_filename} (refreshed by `session status`; the rest comes back once \
                     it ends, on the next `session status`, `session exec` or `session \
                     destroy`). A command that waits for input waits for ever: type it in \
                     `tmux -L {socket} attach -t {tmux}`, or destroy the session. Pass a \
                     larger --timeout next time",
                    socket = remote_runner_engine::tmux::DEFAULT_SOCKET,
                    tmux = tmux_name(session_id),
                ),
            ))
        }
        Err((e, Failed::Unknown(command_id))) => {
            // The command may run, or have ended with its log not fetched: the session stays
            // busy with it, and the next call that reaches the machine finishes the job.
            if let Ok(s) = locked.state.session_mut(session_id) {
                if let Some(p) = s.pending.as_mut() {
                    p.engine_command_id = command_id;
                }
                if e.code == SSH {
                    s.error = Some(e.message.clone());
                }
            }
            locked.save()?;
            Err(SeedError::new(
                e.code,
                e.name,
                format!(
                    "{}; the command's log and exit code come back on the next `session \
                     status`, `session exec` or `session destroy` that reaches the machine",
                    e.message
                ),
            ))
        }
        Err((e, failed)) => {
            // Nothing runs now: free the session. A command that ended is recorded with its
            // exit code; one that never started leaves no trace (its log number is given back
            // when no other command took the next one).
            if let Failed::Ended(exit_code) = failed {
                record_end(&mut locked, session_id, &pending, exit_code)?;
                return Err(e);
            }
            if let Ok(s) = locked.state.session_mut(session_id) {
                s.pending = None;
                s.command_count = s.command_count.saturating_sub(1);
                s.last_command = session.last_command.clone();
                s.last_exit_code = session.last_exit_code;
                s.last_executed_at = session.last_executed_at.clone();
            }
            if let Ok(m) = locked.state.mount_mut(&session.mount_id) {
                if let Some(n) = m.log_counters.get_mut(&session.session_name)
                    && *n == index
                {
                    *n -= 1;
                }
                if let Some(ms) = m
                    .meta_sessions
                    .iter_mut()
                    .find(|ms| ms.session_id == session_id)
                {
                    ms.commands.retain(|c| c.index != index);
                }
                let m = m.clone();
                let _ = write_metadata(&m);
            }
            locked.save()?;
            Err(e)
        }
    }
}

enum Ran {
    Ended {
        exit_code: i32,
        duration_ms: u64,
        /// Artifacts that were not fetched.
        warning: Option<String>,
    },
    TimedOut {
        engine_command_id: String,
    },
}

/// How far a failed exec got.
enum Failed {
    /// Nothing ran.
    NotStarted,
    /// The command ended (with this exit code, when it has one); the session is free.
    Ended(Option<i32>),
    /// The command may run or have ended unseen (the link dropped): its engine command, when
    /// known.
    Unknown(Option<String>),
}

/// Send the local changes up. A remote work dir that is gone (or was remade by someone else:
/// no `artifacts/` in it) is made again and gets every file.
async fn sync_up(
    ctx: &Ctx,
    wired: &Wired,
    transport: &Arc<Remote>,
    session: &Session,
    mount: &Mount,
    remake: bool,
) -> Result<BTreeSet<String>> {
    let (_lock, mut manifest) = state::lock_manifest(&ctx.state_dir, &mount.mount_id)?;
    if remake {
        remake_remote_dir(transport, mount).await?;
        manifest = state::Manifest::default();
    }
    let local = Path::new(&mount.local_path);
    let up = async {
        tree::upload(transport, local, &mount.remote_path, &mut manifest).await?;
        sync::upload(
            &wired.engine,
            &session.engine_session_id,
            transport,
            local,
            &mount.remote_path,
            &mut manifest,
        )
        .await
    }
    .await;
    state::save_manifest(&ctx.state_dir, &mount.mount_id, &manifest)?;
    up.map(|stats| stats.uploaded.into_iter().collect())
}

async fn remake_remote_dir(transport: &Arc<Remote>, mount: &Mount) -> Result<()> {
    let out = transport
        .exec(
            &make_dir_script(&shell_quote(&mount.remote_path)),
            ExecOptions::default(),
        )
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                "making the remote work dir again",
                (SYNC, "mount_failed"),
            )
        })?;
    if !out.status.success() {
        return Err(SeedError::new(
            SYNC,
            "mount_failed",
            format!(
                "the remote work dir {} is gone and cannot be made again: {}; check its parent \
                 and permissions, or destroy the mount and create another",
                mount.remote_path,
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(())
}

fn is_link(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ConnectionLost | ErrorCode::ConnectionFailed | ErrorCode::Timeout
    )
}

/// Sync up, run, bring back. The error says how far it got.
async fn run_exec(
    ctx: &Ctx,
    session: &Session,
    mount: &Mount,
    pending: &Pending,
    timeout: u64,
) -> std::result::Result<Ran, (SeedError, Failed)> {
    let not_started = |e: SeedError| (e, Failed::NotStarted);
    let wired = ctx.wire(&session.machine, None).map_err(not_started)?;
    let transport = wired.transport().await.map_err(not_started)?;
    let mut sent = match sync_up(ctx, &wired, &transport, session, mount, false).await {
        Ok(sent) => sent,
        // A sync that fails because the work dir is gone: make it again, send everything.
        Err(e) => match transport.stat(&mount.remote_path).await {
            Ok(None) => sync_up(ctx, &wired, &transport, session, mount, true)
                .await
                .map_err(not_started)?,
            _ => return Err(not_started(e)),
        },
    };
    let log_dir = remote_log_dir(mount, &session.session_name);
    let script = wrapper::script(
        &pending.command,
        &mount.remote_path,
        &log_dir,
        &format!("{log_dir}/{}", pending.log_filename),
    );
    let started = Instant::now();
    let mut remade = false;
    let rec = loop {
        let req = ExecRequest::wait().with_timeout(Duration::from_secs(timeout.max(1)));
        let rec = match wired
            .engine
            .exec(&session.engine_session_id, &script, req)
            .await
        {
            Ok(rec) => rec,
            Err(e) if e.code == ErrorCode::Busy => {
                return Err((busy(&session.session_id), Failed::NotStarted));
            }
            Err(e) if is_link(e.code) => {
                let cid = find_engine_command(ctx, session, mount, pending);
                return Err((
                    SeedError::engine(e, "running the command", (SSH, "ssh_connection_failed")),
                    Failed::Unknown(cid),
                ));
            }
            Err(e) => {
                return Err((
                    SeedError::engine(e, "running the command", (TMUX, "exec_failed")),
                    Failed::NotStarted,
                ));
            }
        };
        let missing = rec.status.is_final()
            && rec.exit_code == Some(wrapper::NOT_RUN)
            && rec.stdout.contains(wrapper::WORKDIR_MISSING);
        if !missing {
            break rec;
        }
        if remade {
            return Err((
                SeedError::new(
                    SYNC,
                    "remote_dir_missing",
                    format!(
                        "the remote work dir {} keeps disappearing; check what removes it",
                        mount.remote_path
                    ),
                ),
                Failed::NotStarted,
            ));
        }
        // The work dir is gone (nothing ran): make it again with every file, then run.
        remade = true;
        sent = sync_up(ctx, &wired, &transport, session, mount, true)
            .await
            .map_err(not_started)?;
    };
    if !rec.status.is_final() {
        // The partial log now (the agent's first look after a timeout).
        let _ = fetch_log(&wired, session, mount, &pending.log_filename).await;
        return Ok(Ran::TimedOut {
            engine_command_id: rec.command_id,
        });
    }
    let Some(exit_code) = rec.exit_code.filter(|_| rec.status != CommandStatus::Lost) else {
        return Err((
            SeedError::new(
                TMUX,
                "session_error",
                format!(
                    "the command ended the session shell ({}); destroy the session and create a \
                     new one",
                    rec.error.unwrap_or_else(|| rec.status.as_str().to_string())
                ),
            ),
            Failed::Ended(rec.exit_code),
        ));
    };
    let duration_ms = rec
        .duration_ms
        .unwrap_or_else(|| started.elapsed().as_millis() as u64);
    let warning = match bring_back_retried(
        ctx,
        &wired,
        session,
        mount,
        &pending.log_filename,
        Some(&sent),
    )
    .await
    {
        Ok(warning) => warning,
        Err(e) => {
            let failed = if e.code == SSH {
                Failed::Unknown(Some(rec.command_id.clone()))
            } else {
                Failed::Ended(Some(exit_code))
            };
            return Err((e, failed));
        }
    };
    Ok(Ran::Ended {
        exit_code,
        duration_ms,
        warning,
    })
}

/// `session status`: a live look at the machine (a tmux session that died is `error` now, not
/// at the next exec).
pub async fn session_status(ctx: &Ctx, session_id: &str) -> Result<Value> {
    let unreachable = match refresh_pending(ctx, session_id, false, &mut Vec::new()).await {
        Ok(true) => None,
        Ok(false) => {
            let s = state::lock(&ctx.state_dir)?
                .state
                .session(session_id)?
                .clone();
            check_alive(ctx, &s, &mut Default::default()).await
        }
        Err(e) if e.code == SSH => Some(e.message),
        Err(e) if e.code == STATE || e.code == crate::error::NO_SESSION => return Err(e),
        Err(_) => None,
    };
    let locked = state::lock(&ctx.state_dir)?;
    let s = locked.state.session(session_id)?;
    let m = locked.state.mount(&s.mount_id)?;
    let (_, now) = now();
    let status = if unreachable.is_some() {
        "error"
    } else {
        local_status(ctx, s)
    };
    Ok(json!({
        "session_id": s.session_id,
        "session_name": s.session_name,
        "status": status,
        "machine": s.machine,
        "mount_id": s.mount_id,
        "local_mount_point": m.local_path,
        "remote_work_dir": m.remote_path,
        "created_at": s.created_at,
        "last_command": s.last_command,
        "last_exit_code": s.last_exit_code,
        "last_executed_at": s.last_executed_at,
        "command_count": s.command_count,
        "elapsed_seconds": now.saturating_sub(s.created_unix),
        "timeout_seconds": s.timeout_seconds,
    }))
}

/// Whether the session's tmux session lives (the engine marks it lost when not); `Some(why)`
/// when the machine cannot be reached. `wired` keeps one connection per machine.
async fn check_alive(
    ctx: &Ctx,
    s: &Session,
    wired: &mut std::collections::BTreeMap<String, Wired>,
) -> Option<String> {
    if !wired.contains_key(&s.machine) {
        match ctx.wire(&s.machine, None) {
            Ok(w) => {
                wired.insert(s.machine.clone(), w);
            }
            Err(e) => return Some(e.message),
        }
    }
    let w = wired.get(&s.machine)?;
    match w.engine.check_alive(&s.engine_session_id).await {
        Ok(true) => None,
        Ok(false) => {
            // The engine's tmux session is gone; the `seed_` name may still hold the pane (a
            // grouped session keeps the window): end it too, so no shell lingers.
            if let Ok(rec) = w.engine.session_show(&s.engine_session_id) {
                let _ = unname_tmux_session(w, &rec, &s.session_id).await;
            }
            None
        }
        Err(e) if e.code == ErrorCode::SessionLost || e.code == ErrorCode::UnknownSession => None,
        Err(e) => Some(e.message),
    }
}

/// `session destroy`: the tmux session goes; logs stay; the mount stays.
pub async fn session_destroy(ctx: &Ctx, session_id: &str) -> Result<Value> {
    let (session, mount) = {
        let locked = state::lock(&ctx.state_dir)?;
        if locked.state.was_destroyed(session_id) {
            return Err(destroyed(session_id));
        }
        let s = locked.state.session(session_id)?.clone();
        let m = locked.state.mount(&s.mount_id).ok().cloned();
        (s, m)
    };
    // A command that timed out: its log and products (and its exit code, if it ended) come
    // back before its shell goes; what could not is named in the warning (a `mount destroy
    // --cleanup` next removes the remote copy).
    let mut notes = Vec::new();
    if session.pending.is_some()
        && let Err(e) = refresh_pending(ctx, session_id, true, &mut notes).await
    {
        notes.push(format!(
            "the pending command's log and artifacts could not be fetched: error {}: {}",
            e.code, e.message
        ));
    }
    let gone = async {
        let wired = ctx.wire(&session.machine, None)?;
        let terminal = match wired.engine.session_show(&session.engine_session_id) {
            Ok(rec) => unname_tmux_session(&wired, &rec, session_id).await,
            Err(_) => None,
        };
        let ended = match wired.engine.destroy(&session.engine_session_id).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == ErrorCode::UnknownSession => Ok(()),
            Err(e) => Err(e),
        };
        if ended.is_ok()
            && let Some(sid) = terminal
        {
            hang_up(&wired, sid).await;
        }
        match ended {
            Ok(()) => Ok(()),
            Err(e) => {
                // Unreachable machine: the session is marked destroyed here all the same.
                let _ = wired
                    .engine
                    .destroy_forced(&session.engine_session_id)
                    .await;
                Err(SeedError::engine(
                    e,
                    "destroying the tmux session (its shell may still run there)",
                    (TMUX, "tmux_failed"),
                ))
            }
        }
    }
    .await;
    if let Err(e) = gone {
        notes.push(format!("error {}: {}", e.code, e.message));
    }
    let warning = (!notes.is_empty()).then(|| notes.join("; "));
    let mut locked = state::lock(&ctx.state_dir)?;
    locked.state.sessions.retain(|s| s.session_id != session_id);
    locked.state.destroyed_sessions.push(session_id.to_string());
    locked.save()?;
    let (at, _) = now();
    let logs = mount
        .map(|m| {
            local_log_dir(&m, &session.session_name)
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let mut out = json!({
        "session_id": session_id,
        "session_name": session.session_name,
        "status": "destroyed",
        "destroyed_at": at,
        "logs_preserved": true,
        "logs_location": logs,
    });
    if let Some(w) = warning {
        out["warning"] = json!(w);
    }
    Ok(out)
}

//! The v3 commands over the engine.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use remote_runner_provider::ErrorCode;
use remote_runner_provider::connect::MachineConnector;
use remote_runner_provider::engine::transfer::TransferOptions;
use remote_runner_provider::engine::{CommandStatus, Engine, ExecRequest, SessionStatus};
use remote_runner_provider::machine::Machine;
use remote_runner_provider::ssh::config::{SshConfigSource, machine_from_alias};
use remote_runner_provider::ssh::{ConnectOptions, PassphraseSource};
use remote_runner_provider::store::{self, Store};
use remote_runner_provider::transport::{ExecOptions, Transport, shell_quote};
use serde_json::{Value, json};

use crate::error::{
    DESTROYED, LOG_WRITE, NO_MOUNT, Result, SSH, STATE, SYNC, SeedError, TIMEOUT, TMUX, UNMOUNT,
};
use crate::state::{self, Locked, MetaCommand, MetaSession, Mount, Pending, Session};
use crate::sync;

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
    async fn transport(&self) -> Result<Arc<dyn Transport>> {
        use remote_runner_provider::engine::Connector;
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
                "status": local_status(ctx, s),
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

/// The session's status from local records only: `error` when its engine session is gone,
/// `busy` while a command has not been seen to end, `timeout` past its own timeout.
fn local_status(ctx: &Ctx, s: &Session) -> &'static str {
    if let Ok(engine_rec) =
        Store::open(&ctx.state_dir).and_then(|st| store::sessions::get(&st, &s.engine_session_id))
        && engine_rec.is_none_or(|r| r.status != SessionStatus::Active)
    {
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

/// `mount create`.
pub async fn mount_create(
    ctx: &Ctx,
    machine_id: &str,
    local_dir: &Path,
    remote_dir: &str,
    timeout: u64,
) -> Result<Value> {
    std::fs::create_dir_all(local_dir.join("artifacts").join("logs")).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!(
                "cannot create {}/artifacts/logs: {e}; check the path and its permissions",
                local_dir.display()
            ),
        )
    })?;
    let local = std::fs::canonicalize(local_dir).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!("cannot resolve {}: {e}", local_dir.display()),
        )
    })?;
    let bound = Duration::from_secs(timeout.max(1));
    let wired = ctx.wire(machine_id, Some(bound))?;
    let remote = match tokio::time::timeout(bound, prepare_remote_dir(&wired, remote_dir)).await {
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
    let mut locked = state::lock(&ctx.state_dir)?;
    let (at, _) = now();
    let mount = Mount {
        mount_id: locked.state.next_id("mnt", &today()),
        machine: machine_id.to_string(),
        local_path: local.to_string_lossy().into_owned(),
        remote_path: remote,
        mounted_at: at,
        log_counters: Default::default(),
        meta_sessions: Vec::new(),
    };
    write_metadata(&mount)?;
    locked.state.mounts.push(mount.clone());
    locked.save()?;
    Ok(json!({
        "mount_id": mount.mount_id,
        "machine": mount.machine,
        "local_path": mount.local_path,
        "remote_path": mount.remote_path,
        "status": "mounted",
        "mounted_at": mount.mounted_at,
    }))
}

/// Create the remote work dir (`~` is the login user's home) and return its absolute path.
async fn prepare_remote_dir(wired: &Wired, remote_dir: &str) -> Result<String> {
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
    let script = format!("d={target}; mkdir -p -- \"$d\" && cd -- \"$d\" && pwd -P");
    let out = t.exec(&script, ExecOptions::default()).await.map_err(|e| {
        SeedError::engine(
            e,
            &format!("creating {remote_dir} on {}", wired.machine.machine_id),
            (SYNC, "mount_failed"),
        )
    })?;
    let path = out.stdout_lossy().trim().to_string();
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
    Ok(path)
}

/// `mount status`.
pub fn mount_status(ctx: &Ctx, mount_id: &str) -> Result<Value> {
    let locked = state::lock(&ctx.state_dir)?;
    let m = locked.state.mount(mount_id)?;
    Ok(mount_json(m, session_count(&locked.state, mount_id)))
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
        if let Err(e) = session_destroy(ctx, &sid).await {
            warnings.push(format!("session {sid}: {}", e.message));
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
    let rec = wired
        .engine
        .create_session(&wired.machine, Some(&mount.remote_path))
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                &format!("creating the tmux session on {machine_id}"),
                (TMUX, "tmux_failed"),
            )
        })?;
    let mut locked = state::lock(&ctx.state_dir)?;
    let (at, unix) = now();
    let session = Session {
        session_id: locked.state.next_id("sess", &today()),
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
    };
    let Ok(m) = locked.state.mount_mut(mount_id) else {
        // The mount went away meanwhile: do not leave the shell behind.
        drop(locked);
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
        "tmux_session": format!("seed_{}", session.session_id),
        "created_at": session.created_at,
    }))
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

/// The wrapper run in the session shell: the command, whole, in a subshell of
/// `remote_work_dir`, its stdout and stderr (stdin from /dev/null) into the v3 log with a
/// `[UTC time] ` prefix per line, the log opened by `$ <command>` and closed by
/// `$ exit_code: N`; the wrapper's own status is the command's.
fn wrapper(command: &str, log_dir: &str, log_file: &str) -> String {
    format!(
        r#"(
__seed_cmd={cmd}
__seed_log={log}
mkdir -p -- {dir} || exit 125
__seed_ts() {{ export TZ=UTC0; while IFS= read -r __seed_l || [[ -n $__seed_l ]]; do printf '[%(%Y-%m-%dT%H:%M:%SZ)T] %s\n' -1 "$__seed_l"; done; }}
printf '$ %s\n' "$__seed_cmd" | __seed_ts > "$__seed_log"
( eval "$__seed_cmd" ) < /dev/null 2>&1 | __seed_ts >> "$__seed_log"
__seed_rc=${{PIPESTATUS[0]}}
printf '$ exit_code: %s\n' "$__seed_rc" | __seed_ts >> "$__seed_log"
exit "$__seed_rc"
)"#,
        cmd = shell_quote(command),
        log = shell_quote(log_file),
        dir = shell_quote(log_dir),
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

/// Fetch a command's log and the remote artifacts (after it ended).
async fn bring_back(
    ctx: &Ctx,
    wired: &Wired,
    session: &Session,
    mount: &Mount,
    log_filename: &str,
) -> Result<()> {
    let local_dir = local_log_dir(mount, &session.session_name);
    let log_err = |what: String| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!("{what}; check local disk space and permissions"),
        )
    };
    std::fs::create_dir_all(&local_dir)
        .map_err(|e| log_err(format!("cannot create {}: {e}", local_dir.display())))?;
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
        .map_err(|e| log_err(format!("cannot fetch the log {remote_log}: {}", e.message)))?;
    let transport = wired.transport().await?;
    let (_lock, mut manifest) = state::lock_manifest(&ctx.state_dir, &mount.mount_id)?;
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
    fetched.map(|_| ())
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

/// If the session has a pending command that has ended (its exec process gone and the engine
/// says so), bring its log back and record its end. Returns whether it is still pending.
async fn refresh_pending(ctx: &Ctx, session_id: &str) -> Result<bool> {
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
    let engine_exit = match &pending.engine_command_id {
        None => None, // the exec died before the engine had the command
        Some(cid) => {
            let rec = wired
                .engine
                .command_show(&session.engine_session_id, cid)
                .await
                .map_err(|e| {
                    SeedError::engine(e, "checking the running command", (TMUX, "tmux_failed"))
                })?;
            if !rec.status.is_final() {
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
            match bring_back(ctx, &wired, &session, &mount, &pending.log_filename).await {
                Ok(()) => exit_code_from_log(
                    &local_log_dir(&mount, &session.session_name).join(&pending.log_filename),
                )
                .or(engine_code),
                Err(_) => engine_code,
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
        let _ = refresh_pending(ctx, &id).await;
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
    if refresh_pending(ctx, session_id).await? {
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
        "error" => {
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
    let counter = mount
        .log_counters
        .entry(session.session_name.clone())
        .or_insert(0);
    *counter += 1;
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
        }) => {
            record_end(&mut locked, session_id, &pending, Some(exit_code))?;
            let remote_log = format!(
                "{}/{log_filename}",
                remote_log_dir(&mount, &session.session_name)
            );
            Ok(json!({
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
            }))
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
                     {session_id} stays busy until it ends (its log {log_filename} comes back \
                     then, on the next `session status` or `session exec`); pass a larger \
                     --timeout next time"
                ),
            ))
        }
        Err((e, started)) => {
            // Nothing runs now: free the session. A command that never started leaves no
            // trace (its log number is given back when no other command took the next one).
            if let Ok(s) = locked.state.session_mut(session_id) {
                s.pending = None;
                if !started {
                    s.command_count = s.command_count.saturating_sub(1);
                    s.last_command = session.last_command.clone();
                    s.last_exit_code = session.last_exit_code;
                    s.last_executed_at = session.last_executed_at.clone();
                }
            }
            if !started && let Ok(m) = locked.state.mount_mut(&session.mount_id) {
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
    Ended { exit_code: i32, duration_ms: u64 },
    TimedOut { engine_command_id: String },
}

/// Sync up, run, bring back. The error says whether the command was started.
async fn run_exec(
    ctx: &Ctx,
    session: &Session,
    mount: &Mount,
    pending: &Pending,
    timeout: u64,
) -> std::result::Result<Ran, (SeedError, bool)> {
    let not_started = |e: SeedError| (e, false);
    let wired = ctx.wire(&session.machine, None).map_err(not_started)?;
    let transport = wired.transport().await.map_err(not_started)?;
    {
        let (_lock, mut manifest) =
            state::lock_manifest(&ctx.state_dir, &mount.mount_id).map_err(not_started)?;
        let up = sync::upload(
            &wired.engine,
            &session.engine_session_id,
            &transport,
            Path::new(&mount.local_path),
            &mount.remote_path,
            &mut manifest,
        )
        .await;
        state::save_manifest(&ctx.state_dir, &mount.mount_id, &manifest).map_err(not_started)?;
        up.map_err(not_started)?;
    }
    let log_dir = remote_log_dir(mount, &session.session_name);
    let script = wrapper(
        &pending.command,
        &log_dir,
        &format!("{log_dir}/{}", pending.log_filename),
    );
    let started = Instant::now();
    let req = ExecRequest::wait()
        .with_timeout(Duration::from_secs(timeout.max(1)))
        .with_cwd(&mount.remote_path);
    let rec = wired
        .engine
        .exec(&session.engine_session_id, &script, req)
        .await
        .map_err(|e| {
            if e.code == ErrorCode::Busy {
                (busy(&session.session_id), false)
            } else {
                (
                    SeedError::engine(e, "running the command", (TMUX, "exec_failed")),
                    false,
                )
            }
        })?;
    if !rec.status.is_final() {
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
            true,
        ));
    };
    let duration_ms = rec
        .duration_ms
        .unwrap_or_else(|| started.elapsed().as_millis() as u64);
    bring_back(ctx, &wired, session, mount, &pending.log_filename)
        .await
        .map_err(|e| (e, true))?;
    Ok(Ran::Ended {
        exit_code,
        duration_ms,
    })
}

/// `session status`.
pub async fn session_status(ctx: &Ctx, session_id: &str) -> Result<Value> {
    let _ = refresh_pending(ctx, session_id).await;
    let locked = state::lock(&ctx.state_dir)?;
    let s = locked.state.session(session_id)?;
    let m = locked.state.mount(&s.mount_id)?;
    let (_, now) = now();
    Ok(json!({
        "session_id": s.session_id,
        "session_name": s.session_name,
        "status": local_status(ctx, s),
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
    let mut warning = None;
    let gone = async {
        let wired = ctx.wire(&session.machine, None)?;
        match wired.engine.destroy(&session.engine_session_id).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == ErrorCode::UnknownSession => Ok(()),
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
        warning = Some(format!("error {}: {}", e.code, e.message));
    }
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

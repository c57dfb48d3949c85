//! `seed-runner` against the loopback OpenSSH test bed (real sshd, real tmux): the spec's three
//! examples word for word (apart from names and paths), the log format, metadata.json, the
//! sync in both directions (incremental, deletions), the error codes and the timeouts.
//!
//! The machine is the test bed's ssh_config `Host` alias; the state dir and HOME are private.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use remote_runner_testkit::{HOST_ALIAS, Sshd};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_seed-runner");

/// Tests that use the default remote dir (`~/seed-experiment` of the test user) take turns.
static DEFAULT_REMOTE_DIR: Mutex<()> = Mutex::new(());

struct Bed {
    sshd: Sshd,
    dir: tempfile::TempDir,
}

struct Out {
    code: i32,
    json: Value,
    raw: String,
}

impl Bed {
    fn new() -> Bed {
        let sshd =
            Sshd::start().unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Bed { sshd, dir }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// A local directory for a mount (created by `mount create`).
    fn local(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A fresh remote directory owned by the login user.
    fn remote(&self, name: &str) -> String {
        self.sshd
            .remote_dir(name)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path().join("home"))
            .env("REMOTE_RUNNER_STATE_DIR", self.state_dir())
            .env("REMOTE_RUNNER_SSH_CONFIG", &self.sshd.ssh_config)
            .env_remove("SSH_AUTH_SOCK")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) -> Out {
        let out = self.command(args).output().expect("spawn seed-runner");
        let raw = String::from_utf8_lossy(&out.stdout).into_owned();
        let json = serde_json::from_str(&raw)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not one JSON value ({e}): {raw:?}"));
        Out {
            code: out.status.code().unwrap_or(-1),
            json,
            raw,
        }
    }

    /// Exit 0 and the JSON result.
    fn ok(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert_eq!(out.code, 0, "{args:?} failed: {}", out.raw);
        assert!(out.json.get("error").is_none(), "{}", out.raw);
        out.json
    }

    /// Exit 1 with `{"error":{"code":N,...}}`; returns the inner error after checking the code.
    fn err(&self, args: &[&str], code: u64) -> Value {
        let out = self.run(args);
        assert_eq!(out.code, 1, "{args:?} should fail: {}", out.raw);
        let e = out.json["error"].clone();
        assert_eq!(e["code"], code, "{args:?}: {}", out.raw);
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            out.raw
        );
        e
    }

    fn mount(&self, local: &Path, remote: &str) -> Value {
        self.ok(&[
            "mount",
            "create",
            "--machine",
            HOST_ALIAS,
            "--local-dir",
            local.to_str().unwrap(),
            "--remote-dir",
            remote,
        ])
    }

    fn session(&self, mount_id: &str, name: &str) -> String {
        let v = self.ok(&[
            "session",
            "create",
            "--machine",
            HOST_ALIAS,
            "--mount-id",
            mount_id,
            "--name",
            name,
        ]);
        v["session_id"].as_str().unwrap().to_string()
    }

    fn exec(&self, session: &str, cmd: &str) -> Value {
        self.ok(&["session", "exec", "--session", session, "--cmd", cmd])
    }
}

/// Whatever a test left live is destroyed, so no tmux session outlives it.
impl Drop for Bed {
    fn drop(&mut self) {
        let Ok(out) = self.command(&["status"]).output() else {
            return;
        };
        let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
            return;
        };
        for m in v["mounts"].as_array().cloned().unwrap_or_default() {
            if let Some(id) = m["mount_id"].as_str() {
                let _ = self
                    .command(&["mount", "destroy", "--mount-id", id])
                    .output();
            }
        }
    }
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn assert_shape(v: &Value, fields: &[&str]) {
    assert_eq!(keys(v), fields, "fields of {v}");
}

fn is_utc_second(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10 | 13 | 16 | 19) || c.is_ascii_digit())
}

/// Every line `[<UTC second>] ...`; the text after the prefixes.
fn log_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read log {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            assert!(l.starts_with('['), "line without a timestamp: {l:?}");
            let (ts, rest) = l[1..].split_once("] ").unwrap_or_else(|| panic!("{l:?}"));
            assert!(is_utc_second(ts), "bad timestamp in {l:?}");
            rest.to_string()
        })
        .collect()
}

fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "gave up waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Remove the test user's `~/seed-experiment` (the default remote dir) left by a test.
fn remove_default_remote_dir(remote_path: &str) {
    assert!(remote_path.ends_with("/seed-experiment"), "{remote_path}");
    let _ = std::fs::remove_dir_all(remote_path);
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const MOUNT_FIELDS: &[&str] = &[
    "mount_id",
    "machine",
    "local_path",
    "remote_path",
    "status",
    "mounted_at",
];
const SESSION_CREATE_FIELDS: &[&str] = &[
    "session_id",
    "session_name",
    "machine",
    "mount_id",
    "local_mount_point",
    "remote_work_dir",
    "status",
    "tmux_session",
    "created_at",
];
const EXEC_FIELDS: &[&str] = &[
    "session_id",
    "session_name",
    "command",
    "exit_code",
    "log_file_local",
    "log_file_remote",
    "log_filename",
    "executed_at",
    "duration_ms",
];
const SESSION_STATUS_FIELDS: &[&str] = &[
    "session_id",
    "session_name",
    "status",
    "machine",
    "mount_id",
    "local_mount_point",
    "remote_work_dir",
    "created_at",
    "last_command",
    "last_exit_code",
    "last_executed_at",
    "command_count",
    "elapsed_seconds",
    "timeout_seconds",
];

/// Spec example 1, the basic workflow, with every JSON shape checked on the way.
#[test]
fn example_1_basic_workflow() {
    let _turn = DEFAULT_REMOTE_DIR.lock().unwrap_or_else(|p| p.into_inner());
    let bed = Bed::new();
    let workspace = bed.local("exp-web-01/workspace");
    write(
        &workspace.join("code/Makefile"),
        "all:\n\t@echo built-from-$(notdir $(CURDIR))\n",
    );

    // 1. mount create
    let mount = bed.ok(&[
        "mount",
        "create",
        "--machine",
        HOST_ALIAS,
        "--local-dir",
        workspace.to_str().unwrap(),
    ]);
    assert_shape(&mount, MOUNT_FIELDS);
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    assert!(
        mount_id.starts_with("mnt_") && mount_id.ends_with("_001"),
        "{mount}"
    );
    assert_eq!(mount["status"], "mounted");
    assert_eq!(mount["machine"], HOST_ALIAS);
    assert!(is_utc_second(mount["mounted_at"].as_str().unwrap()));
    let remote = mount["remote_path"].as_str().unwrap().to_string();
    // The default `~/seed-experiment`, in the login user's home.
    assert!(
        remote.starts_with('/') && remote.ends_with("/seed-experiment"),
        "{remote}"
    );
    assert!(Path::new(&remote).is_dir());

    // 2. session create
    let s = bed.ok(&[
        "session",
        "create",
        "--machine",
        HOST_ALIAS,
        "--mount-id",
        &mount_id,
        "--name",
        "exp-web-01",
    ]);
    assert_shape(&s, SESSION_CREATE_FIELDS);
    let sess = s["session_id"].as_str().unwrap().to_string();
    assert!(sess.starts_with("sess_"), "{s}");
    assert_eq!(s["status"], "ready");
    assert_eq!(s["tmux_session"], format!("seed_{sess}"));
    assert_eq!(s["remote_work_dir"], remote.as_str());
    assert!(workspace.join("artifacts/logs/exp-web-01").is_dir());

    // The session is an ordinary engine session: what `remote-runner session list` reads.
    let engine_sessions = engine_sessions(&bed);
    assert!(
        engine_sessions.iter().any(|r| r.machine_id == HOST_ALIAS
            && r.cwd == remote
            && r.status.as_str() == "active"),
        "{engine_sessions:?}"
    );

    // 3. exec "ls -la"
    let r1 = bed.ok(&["session", "exec", "--session", &sess, "--cmd", "ls -la"]);
    assert_shape(&r1, EXEC_FIELDS);
    assert_eq!(r1["exit_code"], 0);
    let log1 = workspace.join("artifacts/logs/exp-web-01/cmd_001.log");
    assert_eq!(r1["log_file_local"], log1.to_str().unwrap());
    assert_eq!(
        r1["log_file_remote"],
        format!("{remote}/logs/exp-web-01/cmd_001.log")
    );
    assert_eq!(r1["log_filename"], "cmd_001.log");
    let lines = log_lines(&log1);
    assert!(lines.iter().any(|l| l.ends_with(" code")), "{lines:?}");

    // 4. exec "cd code && make"
    let r2 = bed.ok(&[
        "session",
        "exec",
        "--session",
        &sess,
        "--cmd",
        "cd code && make",
    ]);
    assert_eq!(r2["exit_code"], 0);
    let log2 = workspace.join("artifacts/logs/exp-web-01/cmd_002.log");
    assert_eq!(r2["log_file_local"], log2.to_str().unwrap());
    let lines = log_lines(&log2);
    assert_eq!(lines.first().unwrap(), "$ cd code && make");
    assert!(lines.contains(&"built-from-code".to_string()), "{lines:?}");
    assert_eq!(lines.last().unwrap(), "$ exit_code: 0");

    // 5. session status
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_shape(&st, SESSION_STATUS_FIELDS);
    assert_eq!(st["status"], "active");
    assert_eq!(st["command_count"], 2);
    assert_eq!(st["last_command"], "cd code && make");
    assert_eq!(st["last_exit_code"], 0);
    assert_eq!(st["timeout_seconds"], 3600);

    // The global view.
    let all = bed.ok(&["status"]);
    assert_shape(&all, &["mounts", "sessions", "summary"]);
    assert_shape(
        &all["mounts"][0],
        &[
            "mount_id",
            "machine",
            "local_path",
            "remote_path",
            "status",
            "mounted_at",
            "session_count",
        ],
    );
    assert_eq!(all["mounts"][0]["session_count"], 1);
    assert_shape(
        &all["sessions"][0],
        &[
            "session_id",
            "session_name",
            "machine",
            "mount_id",
            "status",
            "busy",
            "command_count",
            "created_at",
        ],
    );
    assert_eq!(all["sessions"][0]["busy"], false);
    assert_eq!(all["summary"]["session_count"], 1);

    // 6. session destroy
    let d = bed.ok(&["session", "destroy", "--session", &sess]);
    assert_shape(
        &d,
        &[
            "session_id",
            "session_name",
            "status",
            "destroyed_at",
            "logs_preserved",
            "logs_location",
        ],
    );
    assert_eq!(d["status"], "destroyed");
    assert_eq!(
        d["logs_location"],
        workspace
            .join("artifacts/logs/exp-web-01")
            .to_str()
            .unwrap()
    );
    assert!(log1.exists() && log2.exists());

    // 6.1 the session is not found any more
    bed.err(&["session", "status", "--session", &sess], 2005);

    // 7. mount destroy
    let md = bed.ok(&["mount", "destroy", "--mount-id", &mount_id]);
    assert_shape(
        &md,
        &[
            "mount_id",
            "status",
            "unmounted_at",
            "artifacts_preserved",
            "artifacts_location",
        ],
    );
    assert_eq!(md["status"], "unmounted");

    // 7.1 neither is listed any more
    let all = bed.ok(&["status"]);
    assert_eq!(all["summary"]["mount_count"], 0);
    assert_eq!(all["summary"]["session_count"], 0);
    bed.err(&["mount", "status", "--mount-id", &mount_id], 2004);
    // Without --cleanup the remote dir stays; the test removes it.
    assert!(Path::new(&remote).join("code/Makefile").exists());
    remove_default_remote_dir(&remote);
}

/// Spec example 2, in the shell with `jq` as written: two sessions share one mount, each with
/// its own log directory and counter.
#[test]
fn example_2_two_sessions_share_a_mount() {
    let _turn = DEFAULT_REMOTE_DIR.lock().unwrap_or_else(|p| p.into_inner());
    let bed = Bed::new();
    if Command::new("jq").arg("--version").output().is_err() {
        panic!("jq is needed for the spec's example 2 (apt-get install jq)");
    }
    write(&bed.local("workspace/Makefile"), "all:\n\t@echo made\n");
    let script = format!(
        r#"set -e
mount_id=$({bin} mount create \
    --machine {alias} \
    --local-dir ./workspace | jq -r '.mount_id')
sess1=$({bin} session create \
    --machine {alias} \
    --mount-id $mount_id \
    --name exp-web-01 | jq -r '.session_id')
sess2=$({bin} session create \
    --machine {alias} \
    --mount-id $mount_id \
    --name exp-crypto-02 | jq -r '.session_id')
{bin} session exec --session $sess1 --cmd "make"
{bin} session exec --session $sess2 --cmd "make"
{bin} session destroy --session $sess1
{bin} session destroy --session $sess2
{bin} mount destroy --mount-id $mount_id
"#,
        bin = BIN,
        alias = HOST_ALIAS
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(bed.dir.path())
        .env("HOME", bed.dir.path().join("home"))
        .env("REMOTE_RUNNER_STATE_DIR", bed.state_dir())
        .env("REMOTE_RUNNER_SSH_CONFIG", &bed.sshd.ssh_config)
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ws = bed.local("workspace");
    for name in ["exp-web-01", "exp-crypto-02"] {
        let log = ws.join(format!("artifacts/logs/{name}/cmd_001.log"));
        let lines = log_lines(&log);
        assert_eq!(lines, vec!["$ make", "made", "$ exit_code: 0"], "{name}");
    }
    let all = bed.ok(&["status"]);
    assert_eq!(all["summary"]["mount_count"], 0);
    assert_eq!(all["summary"]["session_count"], 0);
    // metadata.json keeps both sessions' commands for audit.
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["sessions"].as_array().unwrap().len(), 2);
    remove_default_remote_dir(meta["remote_path"].as_str().unwrap());
}

/// Spec example 3: a failing command leaves the session active; its log says why.
#[test]
fn example_3_failed_command() {
    let bed = Bed::new();
    let ws = bed.local("exp-web-01/workspace");
    let remote = bed.remote("ex3");
    let mount = bed.mount(&ws, &remote);
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "exp-web-01");
    bed.exec(&sess, "true");
    bed.exec(&sess, "true");

    let r = bed.ok(&[
        "session",
        "exec",
        "--session",
        &sess,
        "--cmd",
        "cd /nonexistent && ls",
    ]);
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["log_filename"], "cmd_003.log");
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "active");
    assert_eq!(st["last_exit_code"], 1);

    let log = ws.join("artifacts/logs/exp-web-01/cmd_003.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("cd: /nonexistent: No such file or directory"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("$ exit_code: 1"), "{text}");

    let r = bed.ok(&["session", "exec", "--session", &sess, "--cmd", "pwd"]);
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/exp-web-01/cmd_004.log"));
    assert_eq!(
        lines,
        vec![
            "$ pwd".to_string(),
            remote.clone(),
            "$ exit_code: 0".to_string()
        ]
    );
}

/// The log format with shell metacharacters and a multi-line command; the remote and local logs
/// are the same; metadata.json follows every command.
#[test]
fn log_format_and_metadata() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = bed.remote("logfmt");
    let mount = bed.mount(&ws, &remote);
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let sess = bed.session(&mount_id, "fmt");
    let cmd = "x='a $b \"c\" \\d'; echo \"$x\" | cat; echo 'semi;colon' > out.txt && cat < out.txt; echo err >&2; (exit 3)";
    let r = bed.exec(&sess, cmd);
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["command"], cmd);
    let local = ws.join("artifacts/logs/fmt/cmd_001.log");
    let lines = log_lines(&local);
    assert_eq!(
        lines,
        vec![
            format!("$ {cmd}"),
            "a $b \"c\" \\d".to_string(),
            "semi;colon".to_string(),
            "err".to_string(),
            "$ exit_code: 3".to_string(),
        ]
    );
    assert_eq!(
        std::fs::read(&local).unwrap(),
        std::fs::read(format!("{remote}/logs/fmt/cmd_001.log")).unwrap()
    );

    let r = bed.exec(&sess, "echo one\necho two");
    assert_eq!(r["log_filename"], "cmd_002.log");
    let lines = log_lines(&ws.join("artifacts/logs/fmt/cmd_002.log"));
    assert_eq!(
        lines,
        vec!["$ echo one", "echo two", "one", "two", "$ exit_code: 0"]
    );

    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("metadata.json")).unwrap()).unwrap();
    assert_shape(
        &meta,
        &[
            "mount_id",
            "machine",
            "local_path",
            "remote_path",
            "mounted_at",
            "sessions",
        ],
    );
    assert_eq!(meta["mount_id"], mount_id.as_str());
    let commands = meta["sessions"][0]["commands"].as_array().unwrap().clone();
    assert_eq!(commands.len(), 2);
    assert_shape(
        &commands[0],
        &["index", "cmd", "log_file", "exit_code", "executed_at"],
    );
    assert_eq!(commands[0]["index"], 1);
    assert_eq!(commands[0]["cmd"], cmd);
    assert_eq!(commands[0]["log_file"], "cmd_001.log");
    assert_eq!(commands[0]["exit_code"], 3);
    assert_eq!(commands[1]["exit_code"], 0);
    // `exit` ends the command, not the session; a last line without a newline is kept.
    let r = bed.exec(&sess, "printf abc; exit 5");
    assert_eq!(r["exit_code"], 5);
    let lines = log_lines(&ws.join("artifacts/logs/fmt/cmd_003.log"));
    assert_eq!(lines, vec!["$ printf abc; exit 5", "abc", "$ exit_code: 5"]);
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "active");
    // metadata.json and artifacts/ are not sent to the remote side.
    assert!(!Path::new(&remote).join("metadata.json").exists());
    assert!(!Path::new(&remote).join("artifacts/logs").exists());
}

/// The sync: new and changed files go up before exec; unchanged ones (even touched) are not
/// sent again; a file deleted locally is removed remotely, files the commands made are kept;
/// the remote artifacts/ comes back.
#[test]
fn sync_is_incremental_both_ways() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = bed.remote("sync");
    write(&ws.join("data/a.txt"), "alpha\n");
    write(&ws.join("b.txt"), "beta\n");
    let mount = bed.mount(&ws, &remote);
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "sync");

    let r = bed.exec(&sess, "cat data/a.txt b.txt");
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/sync/cmd_001.log"));
    assert_eq!(lines[1..3], ["alpha", "beta"]);

    // Mark the remote copies: a second exec with no local change must not overwrite them.
    let ra = Path::new(&remote).join("data/a.txt");
    std::fs::write(&ra, "remote-mark\n").unwrap();
    bed.exec(&sess, "true");
    assert_eq!(std::fs::read_to_string(&ra).unwrap(), "remote-mark\n");

    // Touched but the same content: not sent (hash check).
    let f = std::fs::File::options()
        .write(true)
        .open(ws.join("data/a.txt"))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    bed.exec(&sess, "true");
    assert_eq!(std::fs::read_to_string(&ra).unwrap(), "remote-mark\n");

    // Changed locally: sent.
    write(&ws.join("data/a.txt"), "alpha two\n");
    bed.exec(&sess, "true");
    assert_eq!(std::fs::read_to_string(&ra).unwrap(), "alpha two\n");

    // Deleted locally: removed remotely; what a command made stays.
    bed.exec(&sess, "echo made-remotely > made.txt");
    std::fs::remove_file(ws.join("b.txt")).unwrap();
    let r = bed.exec(&sess, "ls");
    let lines = log_lines(&ws.join(format!(
        "artifacts/logs/sync/{}",
        r["log_filename"].as_str().unwrap()
    )));
    assert!(!lines.contains(&"b.txt".to_string()), "{lines:?}");
    assert!(lines.contains(&"made.txt".to_string()), "{lines:?}");
    assert!(!Path::new(&remote).join("b.txt").exists());

    // Remote artifacts come back, and only when changed.
    bed.exec(
        &sess,
        "mkdir -p artifacts/results && echo r1 > artifacts/results/r.txt",
    );
    let back = ws.join("artifacts/results/r.txt");
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "r1\n");
    std::fs::write(&back, "local-mark\n").unwrap();
    bed.exec(&sess, "true");
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "local-mark\n");
    bed.exec(&sess, "echo r2 > artifacts/results/r.txt");
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "r2\n");
    // A locally written artifacts/ file is never sent up.
    write(&ws.join("artifacts/local-only.txt"), "x\n");
    bed.exec(&sess, "true");
    assert!(!Path::new(&remote).join("artifacts/local-only.txt").exists());
}

/// The error codes that can be provoked on the loopback bed.
#[test]
fn error_codes() {
    let bed = Bed::new();
    // 2001: a machine that is neither registered nor an ssh_config alias; and an unreachable one.
    bed.err(
        &[
            "mount",
            "create",
            "--machine",
            "no-such-vm",
            "--local-dir",
            "ws",
        ],
        2001,
    );
    let cfg = bed.dir.path().join("ssh_config");
    std::fs::write(
        &cfg,
        format!(
            "{}\nHost closed-port\n    HostName 127.0.0.1\n    Port 1\n    User rrtest\n",
            std::fs::read_to_string(&bed.sshd.ssh_config).unwrap()
        ),
    )
    .unwrap();
    let out = bed
        .command(&[
            "mount",
            "create",
            "--machine",
            "closed-port",
            "--local-dir",
            "ws",
            "--timeout",
            "10",
        ])
        .env("REMOTE_RUNNER_SSH_CONFIG", &cfg)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], 2001, "{v}");

    // 2004: unknown mount (status, session create).
    bed.err(&["mount", "status", "--mount-id", "mnt_20990101_001"], 2004);
    bed.err(
        &[
            "session",
            "create",
            "--machine",
            HOST_ALIAS,
            "--mount-id",
            "mnt_20990101_001",
            "--name",
            "x",
        ],
        2004,
    );
    bed.err(
        &["mount", "destroy", "--mount-id", "mnt_20990101_001"],
        2004,
    );

    // 2005: unknown session; 2006: a destroyed one.
    bed.err(
        &["session", "status", "--session", "sess_20990101_001"],
        2005,
    );
    bed.err(
        &[
            "session",
            "exec",
            "--session",
            "sess_20990101_001",
            "--cmd",
            "true",
        ],
        2005,
    );
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("errs"));
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "e");
    bed.ok(&["session", "destroy", "--session", &sess]);
    bed.err(
        &["session", "exec", "--session", &sess, "--cmd", "true"],
        2006,
    );
    bed.err(&["session", "status", "--session", &sess], 2005);

    // 2002: a sync that fails (a remote regular file where the local side has a directory).
    let remote2 = bed.remote("errs2");
    std::fs::write(Path::new(&remote2).join("sub"), "a file\n").unwrap();
    let mount2 = bed.mount(&bed.local("ws2"), &remote2);
    write(&bed.local("ws2/sub/x.txt"), "x\n");
    let sess2 = bed.session(mount2["mount_id"].as_str().unwrap(), "s");
    let e = bed.err(
        &["session", "exec", "--session", &sess2, "--cmd", "true"],
        2002,
    );
    assert_eq!(e["name"], "sync_failed");
    // The failed sync ran no command: the session is free, and works once the conflict goes.
    std::fs::remove_file(Path::new(&remote2).join("sub")).unwrap();
    let r = bed.exec(&sess2, "cat sub/x.txt");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["log_filename"], "cmd_001.log");

    // 2008: the local log directory cannot be created (a file is in the way).
    write(&bed.local("ws2/artifacts/logs/blocked"), "in the way\n");
    bed.err(
        &[
            "session",
            "create",
            "--machine",
            HOST_ALIAS,
            "--mount-id",
            mount2["mount_id"].as_str().unwrap(),
            "--name",
            "blocked",
        ],
        2008,
    );

    // 2010: unreadable state.
    // (The state is put back afterwards, so the bed can destroy what the test left.)
    let state_file = bed.state_dir().join("seed-runner/state.json");
    let good = std::fs::read(&state_file).unwrap();
    std::fs::write(&state_file, "{not json").unwrap();
    bed.err(&["status"], 2010);
    bed.err(&["session", "status", "--session", &sess2], 2010);
    std::fs::write(&state_file, good).unwrap();
    bed.ok(&[
        "mount",
        "destroy",
        "--mount-id",
        mount2["mount_id"].as_str().unwrap(),
    ]);
    bed.err(
        &["session", "exec", "--session", &sess2, "--cmd", "true"],
        2006,
    );
}

/// A command past its --timeout: error 2007, the session busy (a new exec refused) until the
/// command ends, then active with its log brought back. A session past its own --timeout is
/// `timeout` and refuses commands.
#[test]
fn timeouts() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("timeouts"));
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let sess = bed.session(&mount_id, "slow");
    // The command waits for a gate file the test creates once it has seen the session busy.
    let remote = mount["remote_path"].as_str().unwrap().to_string();
    let cmd = "while [ ! -e gate ]; do sleep 0.2; done; echo finished";
    let e = bed.err(
        &[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            cmd,
            "--timeout",
            "1",
        ],
        2007,
    );
    assert_eq!(e["name"], "command_timeout");
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "busy");
    let e = bed.err(
        &["session", "exec", "--session", &sess, "--cmd", "true"],
        2007,
    );
    assert_eq!(e["name"], "session_busy");
    let all = bed.ok(&["status"]);
    assert_eq!(all["sessions"][0]["busy"], true);
    std::fs::write(Path::new(&remote).join("gate"), "").unwrap();
    let st = eventually("the timed-out command to end", || {
        let st = bed.ok(&["session", "status", "--session", &sess]);
        (st["status"] == "active").then_some(st)
    });
    assert_eq!(st["last_exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/slow/cmd_001.log"));
    assert_eq!(
        lines,
        vec![
            format!("$ {cmd}"),
            "finished".to_string(),
            "$ exit_code: 0".to_string()
        ]
    );
    let r = bed.exec(&sess, "true");
    assert_eq!(r["log_filename"], "cmd_002.log");

    // The session's own timeout.
    let short = bed.ok(&[
        "session",
        "create",
        "--machine",
        HOST_ALIAS,
        "--mount-id",
        &mount_id,
        "--name",
        "short",
        "--timeout",
        "1",
    ]);
    let short = short["session_id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(2100));
    let st = bed.ok(&["session", "status", "--session", &short]);
    assert_eq!(st["status"], "timeout");
    assert_eq!(st["timeout_seconds"], 1);
    let e = bed.err(
        &["session", "exec", "--session", &short, "--cmd", "true"],
        2007,
    );
    assert_eq!(e["name"], "session_timeout");
}

/// While a command runs, a second exec on the same session is refused (busy), not queued;
/// another session of the same mount runs meanwhile.
#[test]
fn concurrent_exec_is_refused_as_busy() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("busy"));
    let remote = mount["remote_path"].as_str().unwrap().to_string();
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let sess = bed.session(&mount_id, "one");
    let other = bed.session(&mount_id, "two");
    let cmd = "while [ ! -e gate ]; do sleep 0.2; done; echo through";
    let first = bed
        .command(&["session", "exec", "--session", &sess, "--cmd", cmd])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the first command to start", || {
        let st = bed.ok(&["session", "status", "--session", &sess]);
        (st["status"] == "busy").then_some(())
    });
    let e = bed.err(
        &[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            "echo second",
        ],
        2007,
    );
    assert_eq!(e["name"], "session_busy");
    let r = bed.exec(&other, "echo other");
    assert_eq!(r["exit_code"], 0);
    std::fs::write(Path::new(&remote).join("gate"), "").unwrap();
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["log_filename"], "cmd_001.log");
    // The refused exec took no log number.
    let r = bed.exec(&sess, "echo after");
    assert_eq!(r["log_filename"], "cmd_002.log");
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["command_count"], 2);
}

/// `--machine` as a machine registered with `remote-runner machine add` (the same store
/// record), with no ssh_config to fall back on.
#[test]
fn registered_machine_id() {
    use remote_runner_engine::ssh::config::{SshConfigSource, machine_from_alias};
    use remote_runner_engine::store::{self, Store};
    let bed = Bed::new();
    let mut machine = machine_from_alias(
        HOST_ALIAS,
        &SshConfigSource::File(bed.sshd.ssh_config.clone()),
    )
    .unwrap()
    .unwrap();
    machine.machine_id = "vm-seed-01".to_string();
    machine.ssh_config_host = None;
    {
        let st = Store::open(&bed.state_dir()).unwrap();
        store::machines::insert(&st, &machine).unwrap();
    }
    let empty = bed.dir.path().join("empty_ssh_config");
    std::fs::write(&empty, "").unwrap();
    let run = |args: &[&str]| -> Value {
        let out = bed
            .command(args)
            .env("REMOTE_RUNNER_SSH_CONFIG", &empty)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(out.status.success(), "{args:?}: {v}");
        v
    };
    let ws = bed.local("ws");
    // A directory mount create makes (so the login user may remove it with --cleanup).
    let remote = format!("{}/exp", bed.remote("registered"));
    let m = run(&[
        "mount",
        "create",
        "--machine",
        "vm-seed-01",
        "--local-dir",
        ws.to_str().unwrap(),
        "--remote-dir",
        &remote,
    ]);
    assert_eq!(m["machine"], "vm-seed-01");
    let mount_id = m["mount_id"].as_str().unwrap();
    let s = run(&[
        "session",
        "create",
        "--machine",
        "vm-seed-01",
        "--mount-id",
        mount_id,
        "--name",
        "reg",
    ]);
    let sess = s["session_id"].as_str().unwrap();
    let r = run(&["session", "exec", "--session", sess, "--cmd", "whoami"]);
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/reg/cmd_001.log"));
    assert_eq!(lines[1], remote_runner_testkit::TEST_USER);
    assert!(
        engine_sessions(&bed)
            .iter()
            .any(|r| r.machine_id == "vm-seed-01" && r.status.as_str() == "active")
    );
    run(&["mount", "destroy", "--mount-id", mount_id, "--cleanup"]);
    assert!(!Path::new(&remote).exists());
    // --cleanup that cannot remove the dir (its parent is not the login user's): a warning
    // with code 2009, and the mount is gone all the same.
    let locked_dir = bed.remote("undeletable");
    let m2 = run(&[
        "mount",
        "create",
        "--machine",
        "vm-seed-01",
        "--local-dir",
        ws.to_str().unwrap(),
        "--remote-dir",
        &locked_dir,
    ]);
    let d = run(&[
        "mount",
        "destroy",
        "--mount-id",
        m2["mount_id"].as_str().unwrap(),
        "--cleanup",
    ]);
    assert_eq!(d["status"], "unmounted");
    assert!(d["warning"].as_str().unwrap().contains("2009"), "{d}");
    // The mount's sessions went with it.
    assert!(
        engine_sessions(&bed)
            .iter()
            .all(|r| r.status.as_str() == "destroyed")
    );
}

/// The engine's sessions in the bed's state dir (what `remote-runner session list` reads).
fn engine_sessions(bed: &Bed) -> Vec<remote_runner_engine::engine::SessionRecord> {
    remote_runner_engine::engine::Engine::open(&bed.state_dir(), Default::default())
        .unwrap()
        .session_list()
        .unwrap()
}

/// `tmux ...` as the login user, as an agent types it: the default tmux server (no `-L`, and
/// none from the environment); whether it succeeded.
fn tmux_as_user(args: &[&str]) -> bool {
    Command::new("runuser")
        .args(["-u", remote_runner_testkit::TEST_USER, "--", "tmux"])
        .args(args)
        .env_remove("TMUX")
        .env_remove("TMUX_TMPDIR")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// `tmux -L <engine socket> ...` as the login user, for the engine session `engine` (each has a
/// tmux server of its own, `<prefix>-<session id>`); whether it succeeded.
fn engine_tmux_as_user(engine: &str, args: &[&str]) -> bool {
    Command::new("runuser")
        .args(["-u", remote_runner_testkit::TEST_USER, "--", "tmux", "-L"])
        .arg(format!(
            "{}-{engine}",
            remote_runner_engine::engine::EngineOptions::default().tmux_socket
        ))
        .args(args)
        .env_remove("TMUX")
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// The engine session behind a seed session (seed-runner's state.json).
fn engine_session_of(bed: &Bed, sess: &str) -> String {
    let st: Value = serde_json::from_slice(
        &std::fs::read(bed.state_dir().join("seed-runner/state.json")).unwrap(),
    )
    .unwrap();
    st["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == sess)
        .unwrap()["engine_session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Whether a process of the login user has exactly this command line.
fn user_process_running(cmdline: &str) -> bool {
    Command::new("pgrep")
        .args(["-u", remote_runner_testkit::TEST_USER, "-x", "-f", cmdline])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// A job started with `&` does not hold the exec (as at a tmux pane): the exec returns at once
/// with the command's own output, the session is free, and a later command can stop the job.
/// Output the job writes after its command ended goes to `cmd_NNN.bg.log`, not into the log.
#[test]
fn a_background_job_does_not_block_the_exec() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = bed.remote("bgjob");
    let mount = bed.mount(&ws, &remote);
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "bg");
    let t = Instant::now();
    let r = bed.ok(&[
        "session",
        "exec",
        "--session",
        &sess,
        "--cmd",
        "sleep 4711 & echo started",
        "--timeout",
        "60",
    ]);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/bg/cmd_001.log"));
    assert_eq!(
        lines,
        vec!["$ sleep 4711 & echo started", "started", "$ exit_code: 0"]
    );
    assert!(user_process_running("sleep 4711"));
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "active");
    // A job that keeps printing: its later output does not reach the command's log.
    let r = bed.exec(
        &sess,
        "(for i in 1 2 3 4 5 6 7 8 9 10; do echo tick-$i; sleep 0.3; done) & echo launched",
    );
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/bg/cmd_002.log"));
    assert_eq!(lines.last().unwrap(), "$ exit_code: 0", "{lines:?}");
    let bg_log = Path::new(&remote).join("logs/bg/cmd_002.bg.log");
    eventually("the job's later output", || {
        std::fs::read_to_string(&bg_log)
            .ok()
            .filter(|t| t.contains("tick-10"))
    });
    let lines = log_lines(&ws.join("artifacts/logs/bg/cmd_002.log"));
    assert_eq!(lines.last().unwrap(), "$ exit_code: 0", "{lines:?}");
    let r = bed.exec(&sess, "pkill -x -f 'sleep 4711'; echo stopped");
    assert_eq!(r["exit_code"], 0);
    eventually("the background job to stop", || {
        (!user_process_running("sleep 4711")).then_some(())
    });
    // Destroying the session ends its jobs, as closing a tmux session does.
    let r = bed.exec(&sess, "sleep 4712 & echo again");
    assert_eq!(r["exit_code"], 0);
    assert!(user_process_running("sleep 4712"));
    bed.ok(&["session", "destroy", "--session", &sess]);
    eventually("the session's job to end with it", || {
        (!user_process_running("sleep 4712")).then_some(())
    });
}

/// After a command's --timeout its partial log is local at once (and refreshed by `session
/// status`); `session destroy` brings back the log and artifacts of a command that ended
/// meanwhile (with its exit code), and `mount destroy --cleanup` those of one still running.
#[test]
fn timed_out_commands_keep_their_log_and_products() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = format!("{}/work", bed.remote("partial"));
    let mount = bed.mount(&ws, &remote);
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let sess = bed.session(&mount_id, "p");
    let cmd = "echo partial; echo made > artifacts/made.txt; \
               while [ ! -e gate ]; do sleep 0.2; done; echo after-gate; echo late > artifacts/late.txt";
    let e = bed.err(
        &[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            cmd,
            "--timeout",
            "2",
        ],
        2007,
    );
    assert_eq!(e["name"], "command_timeout");
    let log = ws.join("artifacts/logs/p/cmd_001.log");
    let lines = log_lines(&log);
    assert_eq!(lines, vec![format!("$ {cmd}"), "partial".to_string()]);
    // The command ends; destroy is the next call: it fetches the log and the products first.
    std::fs::write(Path::new(&remote).join("gate"), "").unwrap();
    std::thread::sleep(Duration::from_millis(800));
    bed.ok(&["session", "destroy", "--session", &sess]);
    let lines = log_lines(&log);
    assert_eq!(lines.last().unwrap(), "$ exit_code: 0", "{lines:?}");
    assert!(lines.contains(&"after-gate".to_string()), "{lines:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("artifacts/late.txt")).unwrap(),
        "late\n"
    );
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["sessions"][0]["commands"][0]["exit_code"], 0, "{meta}");

    // Still running at `mount destroy --cleanup`: what there is comes back before the remote
    // dir goes; the exit code stays null.
    std::fs::remove_file(Path::new(&remote).join("gate")).unwrap();
    let sess = bed.session(&mount_id, "q");
    let cmd =
        "echo first-line; echo mid > artifacts/mid.txt; while [ ! -e gate ]; do sleep 0.2; done";
    bed.err(
        &[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            cmd,
            "--timeout",
            "2",
        ],
        2007,
    );
    std::fs::write(Path::new(&remote).join("artifacts/mid.txt"), "mid2\n").unwrap();
    std::fs::write(Path::new(&remote).join("more"), "").unwrap();
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "busy");
    bed.ok(&["mount", "destroy", "--mount-id", &mount_id, "--cleanup"]);
    assert!(!Path::new(&remote).exists());
    let lines = log_lines(&ws.join("artifacts/logs/q/cmd_001.log"));
    assert_eq!(lines, vec![format!("$ {cmd}"), "first-line".to_string()]);
    assert_eq!(
        std::fs::read_to_string(ws.join("artifacts/mid.txt")).unwrap(),
        "mid2\n"
    );
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["sessions"][1]["commands"][0]["exit_code"], Value::Null);
}

/// A timed-out command's artifact that cannot be fetched at `session destroy` (or at `mount
/// destroy --cleanup`, which then removes the remote copy) is named in the answer's warning, as
/// an exec names it; the rest still comes back.
#[test]
fn a_timed_out_commands_unfetched_artifact_is_named_at_destroy() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = format!("{}/work", bed.remote("unfetched"));
    let mount = bed.mount(&ws, &remote);
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let cmd = "while [ ! -e gate ]; do sleep 0.2; done; mkdir -p artifacts/logs/{name} && \
               echo forged > artifacts/logs/{name}/x.log; echo fine > artifacts/{name}.txt";
    let timed_out = |name: &str| {
        let sess = bed.session(&mount_id, name);
        let cmd = cmd.replace("{name}", name);
        bed.err(
            &[
                "session",
                "exec",
                "--session",
                &sess,
                "--cmd",
                &cmd,
                "--timeout",
                "1",
            ],
            2007,
        );
        sess
    };
    let d = timed_out("d");
    timed_out("m");
    std::fs::write(Path::new(&remote).join("gate"), "").unwrap();
    std::thread::sleep(Duration::from_millis(800));

    let out = bed.ok(&["session", "destroy", "--session", &d]);
    let warning = out["warning"].as_str().unwrap_or_default();
    assert!(warning.contains("logs/d/x.log"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.join("artifacts/d.txt")).unwrap(),
        "fine\n"
    );

    let out = bed.ok(&["mount", "destroy", "--mount-id", &mount_id, "--cleanup"]);
    let warning = out["warning"].as_str().unwrap_or_default();
    assert!(warning.contains("logs/m/x.log"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.join("artifacts/m.txt")).unwrap(),
        "fine\n"
    );
    assert!(!Path::new(&remote).exists());
}

/// The remote `artifacts/` exists from the start, so a first `> artifacts/x` works.
#[test]
fn remote_artifacts_dir_exists() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = bed.remote("artdir");
    let mount = bed.mount(&ws, &remote);
    assert!(Path::new(&remote).join("artifacts").is_dir());
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "a");
    let r = bed.exec(&sess, "echo x > artifacts/x.txt");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(
        std::fs::read_to_string(ws.join("artifacts/x.txt")).unwrap(),
        "x\n"
    );
}

/// A second mount of the same remote dir or the same local dir (or one inside the other) is
/// refused (2002, `mount_conflict`) and changes nothing.
#[test]
fn conflicting_mounts_are_refused() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = bed.remote("conflict");
    let first = bed.mount(&ws, &remote);
    let meta_before = std::fs::read(ws.join("metadata.json")).unwrap();
    let create = |local: &Path, remote: &str| {
        bed.err(
            &[
                "mount",
                "create",
                "--machine",
                HOST_ALIAS,
                "--local-dir",
                local.to_str().unwrap(),
                "--remote-dir",
                remote,
            ],
            2002,
        )
    };
    let other_local = bed.local("other");
    let e = create(&other_local, &remote);
    assert_eq!(e["name"], "mount_conflict");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(first["mount_id"].as_str().unwrap()),
        "{e}"
    );
    assert!(
        !other_local.exists(),
        "a refused mount created its local dir"
    );
    let e = create(&other_local, &format!("{remote}/sub"));
    assert_eq!(e["name"], "mount_conflict");
    let other_remote = bed.remote("conflict2");
    let e = create(&ws, &other_remote);
    assert_eq!(e["name"], "mount_conflict");
    let e = create(&ws.join("inner"), &other_remote);
    assert_eq!(e["name"], "mount_conflict");
    assert_eq!(
        std::fs::read(ws.join("metadata.json")).unwrap(),
        meta_before
    );
    assert_eq!(bed.ok(&["status"])["summary"]["mount_count"], 1);
}

/// A mount create that fails (unknown machine, a remote dir that cannot be made) leaves no
/// local dir behind.
#[test]
fn a_failed_mount_create_leaves_nothing() {
    let bed = Bed::new();
    let fresh = bed.local("fresh/ws");
    bed.err(
        &[
            "mount",
            "create",
            "--machine",
            "no-such-vm",
            "--local-dir",
            fresh.to_str().unwrap(),
        ],
        2001,
    );
    assert!(!bed.local("fresh").exists());
    let blocked = bed.remote("blocked");
    std::fs::write(Path::new(&blocked).join("file"), "x").unwrap();
    bed.err(
        &[
            "mount",
            "create",
            "--machine",
            HOST_ALIAS,
            "--local-dir",
            fresh.to_str().unwrap(),
            "--remote-dir",
            &format!("{blocked}/file/sub"),
        ],
        2002,
    );
    assert!(!bed.local("fresh").exists());
}

/// A remote work dir deleted between commands is recreated with the inputs at the next exec;
/// mount status says `error` while it is gone.
#[test]
fn a_deleted_remote_work_dir_is_recreated() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = format!("{}/work", bed.remote("gone"));
    write(&ws.join("data/in.txt"), "input\n");
    let mount = bed.mount(&ws, &remote);
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let sess = bed.session(&mount_id, "g");
    assert_eq!(bed.exec(&sess, "cat data/in.txt")["exit_code"], 0);
    std::fs::remove_dir_all(&remote).unwrap();
    let m = bed.ok(&["mount", "status", "--mount-id", &mount_id]);
    assert_eq!(m["status"], "error", "{m}");
    let r = bed.exec(&sess, "cat data/in.txt; echo x > artifacts/x.txt");
    assert_eq!(r["exit_code"], 0, "{r}");
    let lines = log_lines(&ws.join(format!(
        "artifacts/logs/g/{}",
        r["log_filename"].as_str().unwrap()
    )));
    assert!(lines.contains(&"input".to_string()), "{lines:?}");
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "active");
    let m = bed.ok(&["mount", "status", "--mount-id", &mount_id]);
    assert_eq!(m["status"], "mounted");

    // Gone again, and the next call is a new session: it starts (the dir is made again), and
    // its first exec sends the inputs, as above.
    std::fs::remove_dir_all(&remote).unwrap();
    let second = bed.session(&mount_id, "h");
    let r = bed.exec(&second, "cat data/in.txt; ls -d artifacts");
    assert_eq!(r["exit_code"], 0, "{r}");
    let lines = log_lines(&ws.join("artifacts/logs/h/cmd_001.log"));
    assert!(lines.contains(&"input".to_string()), "{lines:?}");
    assert_eq!(
        bed.ok(&["mount", "status", "--mount-id", &mount_id])["status"],
        "mounted"
    );
}

/// The session's `tmux_session` is a real tmux session on the login user's default tmux server,
/// as an agent finds it (`has-session -t =seed_<id>`, `attach -t seed_<id>`, no `-L`): typing
/// into it reaches the pane the commands run in. Gone after destroy.
#[test]
fn tmux_session_is_real() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("tmuxname"));
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let s = bed.ok(&[
        "session",
        "create",
        "--machine",
        HOST_ALIAS,
        "--mount-id",
        &mount_id,
        "--name",
        "t",
    ]);
    let sess = s["session_id"].as_str().unwrap().to_string();
    let name = s["tmux_session"].as_str().unwrap().to_string();
    assert_eq!(name, format!("seed_{sess}"));
    assert!(tmux_as_user(&["has-session", "-t", &format!("={name}")]));
    // Tagged with the engine's session it shows.
    let engine = engine_session_of(&bed, &sess);
    let ours = format!("{name} {engine}");
    assert!(tmux_sessions().contains(&ours), "{:?}", tmux_sessions());
    // Attaching works (a control-mode client: there is no terminal here).
    assert!(tmux_as_user(&["-C", "attach-session", "-t", &name]));
    // A command that waits for input gets what is typed into `seed_<id>`.
    let e = bed.err(
        &[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            "read -r x; echo \"got:$x\"",
            "--timeout",
            "2",
        ],
        2007,
    );
    assert_eq!(e["name"], "command_timeout");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(&format!("`tmux attach -t {name}`")),
        "{e}"
    );
    assert!(tmux_as_user(&[
        "send-keys",
        "-t",
        &format!("={name}:"),
        "typed-in",
        "Enter"
    ]));
    eventually("the command to end", || {
        let st = bed.ok(&["session", "status", "--session", &sess]);
        (st["status"] == "active").then_some(())
    });
    let lines = log_lines(&ws.join("artifacts/logs/t/cmd_001.log"));
    assert_eq!(lines[1], "got:typed-in", "{lines:?}");
    bed.exec(&sess, "true");
    bed.ok(&["session", "destroy", "--session", &sess]);
    // (Other tests may reuse the freed name for sessions of their own: look at the tag.)
    assert!(
        !tmux_sessions()
            .iter()
            .any(|l| l.ends_with(&format!(" {engine}"))),
        "{:?}",
        tmux_sessions()
    );
}

/// `<session name> <engine session>` of every session on the login user's default tmux server.
fn tmux_sessions() -> Vec<String> {
    let out = Command::new("runuser")
        .args(["-u", remote_runner_testkit::TEST_USER, "--", "tmux"])
        .args(["list-sessions", "-F", "#{session_name} #{@seed_engine}"])
        .env_remove("TMUX")
        .env_remove("TMUX_TMPDIR")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A tmux session that dies is `error` at the next `session status` and `status`, not `active`
/// until an exec meets it.
#[test]
fn a_dead_tmux_session_is_an_error() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("tmuxdies"));
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let sess = bed.session(&mount_id, "dies");
    let engine = engine_session_of(&bed, &sess);
    // Only the engine's tmux session: the `seed_` name, showing its pane, goes with it.
    assert!(engine_tmux_as_user(
        &engine,
        &["kill-session", "-t", &format!("={engine}")]
    ));
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "error", "{st}");
    assert!(!tmux_sessions().contains(&format!("seed_{sess} {engine}")));
    let all = bed.ok(&["status"]);
    assert_eq!(all["sessions"][0]["status"], "error", "{all}");
    let e = bed.err(
        &["session", "exec", "--session", &sess, "--cmd", "true"],
        2003,
    );
    assert_eq!(e["name"], "session_error");

    // Dead while a timed-out command ran: not busy for ever, `error`, and exec says why.
    let sess = bed.session(&mount_id, "dies-busy");
    let e = bed.err(
        &[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            "while [ ! -e gate ]; do sleep 0.2; done",
            "--timeout",
            "1",
        ],
        2007,
    );
    assert_eq!(e["name"], "command_timeout");
    let engine = engine_session_of(&bed, &sess);
    assert!(engine_tmux_as_user(
        &engine,
        &["kill-session", "-t", &format!("={engine}")]
    ));
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "error", "{st}");
    let e = bed.err(
        &["session", "exec", "--session", &sess, "--cmd", "true"],
        2003,
    );
    assert_eq!(e["name"], "session_error");
}

/// Commands get the pane's terminal as stdin, as at a tmux pane.
#[test]
fn commands_have_a_terminal() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("tty"));
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "tty");
    let r = bed.exec(&sess, "if [ -t 0 ]; then echo stdin-is-a-tty; fi; tty");
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/tty/cmd_001.log"));
    assert_eq!(lines[1], "stdin-is-a-tty", "{lines:?}");
    assert!(lines[2].starts_with("/dev/pts/"), "{lines:?}");
}

/// The pre-exec sync restores inputs a command deleted or changed; empty directories and
/// symlinks are synced.
#[test]
fn sync_restores_inputs_and_keeps_dirs_and_links() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = bed.remote("restore");
    write(&ws.join("in/a.txt"), "aaa\n");
    write(&ws.join("b.txt"), "bbb\n");
    std::fs::create_dir_all(ws.join("empty/deeper")).unwrap();
    std::os::unix::fs::symlink("in/a.txt", ws.join("link")).unwrap();
    let mount = bed.mount(&ws, &remote);
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "r");
    let r = bed.exec(
        &sess,
        "test -d empty/deeper && echo dir-ok; readlink link; cat link",
    );
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/r/cmd_001.log"));
    assert_eq!(lines[1..4], ["dir-ok", "in/a.txt", "aaa"], "{lines:?}");
    bed.exec(&sess, "rm in/a.txt; echo changed > b.txt");
    let r = bed.exec(&sess, "cat in/a.txt b.txt");
    assert_eq!(r["exit_code"], 0);
    let lines = log_lines(&ws.join("artifacts/logs/r/cmd_003.log"));
    assert_eq!(lines[1..3], ["aaa", "bbb"], "{lines:?}");
}

/// A connection that drops while a command runs: the exec reconnects and still returns the
/// command's exit code and log.
#[test]
fn a_connection_drop_mid_command_keeps_the_result() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("drop"));
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "d");
    let child = bed
        .command(&[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            "sleep 3; echo survived; exit 7",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(bed.sshd.signal_connections(9) > 0);
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 7, "{v}");
    let lines = log_lines(&ws.join("artifacts/logs/d/cmd_001.log"));
    assert_eq!(lines[1..], ["survived", "$ exit_code: 7"], "{lines:?}");

    // The exec itself dies mid-command (its connection with it): the next exec fetches the
    // command's log and records its exit code.
    let mut child = bed
        .command(&[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            "sleep 2; echo finished-alone; exit 3",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let remote_log = Path::new(mount["remote_path"].as_str().unwrap()).join("logs/d/cmd_002.log");
    eventually("the command to start", || remote_log.exists().then_some(()));
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let r = bed.exec(&sess, "true");
    assert_eq!(r["log_filename"], "cmd_003.log");
    let lines = log_lines(&ws.join("artifacts/logs/d/cmd_002.log"));
    assert_eq!(
        lines[1..],
        ["finished-alone", "$ exit_code: 3"],
        "{lines:?}"
    );
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["sessions"][0]["commands"][1]["exit_code"], 3, "{meta}");
}

/// A machine that cannot be reached again while a command runs: the exec answers 2001 (not a
/// log-write 2008), the command stays pending, and the session is `error`.
#[test]
fn an_unreachable_machine_mid_command_is_an_error() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("unreachable"));
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "u");
    let engine = engine_session_of(&bed, &sess);
    let child = bed
        .command(&[
            "session",
            "exec",
            "--session",
            &sess,
            "--cmd",
            "sleep 3; echo done",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let remote_log = Path::new(mount["remote_path"].as_str().unwrap()).join("logs/u/cmd_001.log");
    eventually("the command to start", || remote_log.exists().then_some(()));
    // (Connections first: they are found as the listener's children.)
    let pids = bed.sshd.connection_tree_pids();
    assert!(bed.sshd.signal_listener(9));
    for pid in pids {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], 2001, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("come back on the next"),
        "{v}"
    );
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "error", "{st}");
    let all = bed.ok(&["status"]);
    assert_eq!(all["sessions"][0]["status"], "error", "{all}");
    assert_eq!(all["sessions"][0]["busy"], true, "{all}");
    // The machine is gone for good in this test: end its shell by hand.
    tmux_as_user(&["kill-session", "-t", &format!("=seed_{sess}")]);
    engine_tmux_as_user(&engine, &["kill-session", "-t", &format!("={engine}")]);
}

/// A command that ended but whose log cannot be written locally: error 2008, and the command's
/// exit code is still recorded (the session is free).
#[test]
fn an_unwritable_local_log_keeps_the_exit_code() {
    let bed = Bed::new();
    let ws = bed.local("ws");
    let mount = bed.mount(&ws, &bed.remote("unwritable"));
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "w");
    let log_dir = ws.join("artifacts/logs/w");
    std::fs::remove_dir(&log_dir).unwrap();
    std::fs::write(&log_dir, "in the way\n").unwrap();
    let e = bed.err(
        &["session", "exec", "--session", &sess, "--cmd", "exit 7"],
        2008,
    );
    assert_eq!(e["name"], "log_write_failed");
    let st = bed.ok(&["session", "status", "--session", &sess]);
    assert_eq!(st["status"], "active", "{st}");
    assert_eq!(st["last_exit_code"], 7, "{st}");
    assert_eq!(st["command_count"], 1, "{st}");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["sessions"][0]["commands"][0]["exit_code"], 7, "{meta}");
}

/// Names that come from the machine are data (issue 28): an artifact whose name holds a newline
/// or starts with `-` comes back like any other and later execs go on (exit codes kept); a
/// remote `artifacts/logs/...` file never overwrites a command's local log (it is skipped and
/// the exec says so in `warning`); a log number whose local log exists (a mount re-created on
/// the same directory) is never reused; a 4777 artifact arrives without set-id or group/other
/// write.
#[test]
fn machine_names_are_data() {
    use std::os::unix::fs::PermissionsExt;
    let bed = Bed::new();
    let ws = bed.local("ws");
    let remote = bed.remote("names");
    write(&ws.join("input.txt"), "in\n");
    let mount = bed.mount(&ws, &remote);
    let mount_id = mount["mount_id"].as_str().unwrap().to_string();
    let sess = bed.session(&mount_id, "names");

    let r = bed.exec(&sess, "echo first");
    assert_eq!(r["log_filename"], "cmd_001.log");
    let first_log = ws.join("artifacts/logs/names/cmd_001.log");
    assert_eq!(log_lines(&first_log)[1], "first");

    let out = bed.run(&[
        "session",
        "exec",
        "--session",
        &sess,
        "--cmd",
        "mkdir -p artifacts/logs/names && printf nl > \"artifacts/bad$(printf '\\nname')\" && \
         printf dash > artifacts/-rf && printf loose > artifacts/loose.sh && \
         chmod 4777 artifacts/loose.sh && echo forged > artifacts/logs/names/cmd_001.log && \
         printf latin1 > \"artifacts/caf$(printf '\\351')\"; exit 3",
    ]);
    assert_eq!(out.code, 0, "{}", out.raw);
    assert_eq!(out.json["exit_code"], 3, "{}", out.raw);
    let warning = out.json["warning"].as_str().unwrap_or_default();
    assert!(warning.contains("logs/names/cmd_001.log"), "{}", out.raw);
    // A name that is not UTF-8 cannot be fetched, but it is named, never left out in silence.
    assert!(
        warning.contains("caf\u{fffd}") && warning.contains("not valid UTF-8"),
        "{}",
        out.raw
    );
    assert_eq!(
        log_lines(&first_log)[1],
        "first",
        "the first log was overwritten"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("artifacts/bad\nname")).unwrap(),
        "nl"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("artifacts/-rf")).unwrap(),
        "dash"
    );
    let mode = std::fs::metadata(ws.join("artifacts/loose.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7022, 0, "mode {mode:o}");

    // Later execs are unharmed.
    let r = bed.exec(&sess, "exit 4");
    assert_eq!(r["exit_code"], 4);
    let r = bed.exec(&sess, "echo fine");
    assert_eq!(r["exit_code"], 0);

    // A mount re-created on the same directory starts its numbers again, but never over a log
    // that is there.
    bed.ok(&["session", "destroy", "--session", &sess]);
    bed.ok(&["mount", "destroy", "--mount-id", &mount_id]);
    let mount = bed.mount(&ws, &remote);
    let sess = bed.session(mount["mount_id"].as_str().unwrap(), "names");
    let r = bed.exec(&sess, "echo again");
    assert_ne!(r["log_filename"], "cmd_001.log", "{r}");
    assert_eq!(
        log_lines(&first_log)[1],
        "first",
        "the first log was overwritten"
    );
}

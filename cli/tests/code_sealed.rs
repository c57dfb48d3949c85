//! A code run is sealed (issue 42, items 5 and 6), through the CLI binary on `local` and over
//! the real sshd: a program cannot reach the account's tmux servers (`tmux -L <socket>
//! run-shell`, `tmux ls`), the connection keepers' sockets or the engine's state root, and one
//! run can neither see another's processes nor write into its channel through any of them; a
//! machine that cannot seal a run refuses it unless weaker isolation is asked for.

mod common;
mod session_bed;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};
use session_bed::{Bed, DEADLINE, eventually};

/// `code run --json` of a Python `program` in the bed's work directory: (exit code, result).
fn run_python(bed: &Bed, machine: &str, program: &str) -> (i32, Value) {
    let work = bed.work_str();
    let r = common::run_command(
        bed.command(&[
            "code",
            "run",
            "--machine",
            machine,
            "--language",
            "python",
            "--cwd",
            &work,
            "--json",
        ]),
        Some(program),
    );
    let v: Value = serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON result ({e}): {r:?}"));
    (r.code, v)
}

/// A new session in the work directory: its record (the tmux server it started is the
/// account's, alive while the test runs).
fn session(bed: &Bed) -> Value {
    let work = bed.work_str();
    bed.json(&[
        "session",
        "create",
        "--machine",
        &bed.machine,
        "--cwd",
        &work,
    ])
}

/// The session's shell still answers: its tmux server was alive all along.
fn still_answers(bed: &Bed, session: &Value) {
    let id = session["session_id"].as_str().unwrap();
    let r = bed.exec(id, "echo still-here", &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("still-here"), "{r:?}");
}

/// A program asks the account's tmux server of a live session to run a command outside the
/// run (`run-shell`, also `-b`), to list its sessions, and lists tmux's socket directory: none
/// of it reaches a server, and nothing ran.
fn tmux_servers_are_out_of_reach(bed: &Bed) {
    let s = session(bed);
    let socket = s["tmux_socket"].as_str().unwrap();
    let escaped = bed.at("escaped");
    let program = format!(
        "import os, subprocess\n\
         def tmux(*args):\n    \
             return subprocess.run(['tmux', *args], capture_output=True).returncode\n\
         d = '/tmp/tmux-%d' % os.getuid()\n\
         return {{\n    \
             'run_shell': tmux('-L', {socket:?}, 'run-shell', 'touch {escaped}'),\n    \
             'run_shell_b': tmux('-L', {socket:?}, 'run-shell', '-b', 'touch {escaped}-b'),\n    \
             'ls': tmux('-L', {socket:?}, 'ls'),\n    \
             'default_ls': tmux('ls'),\n    \
             'sockets': sorted(os.listdir(d)) if os.path.isdir(d) else 'no dir',\n\
         }}"
    );
    let (code, v) = run_python(bed, &bed.machine, &program);
    assert_eq!(code, 0, "{v}");
    still_answers(bed, &s);
    let found = &v["value"];
    for (what, path) in [
        ("run-shell", &escaped),
        ("run-shell -b", &format!("{escaped}-b")),
    ] {
        assert!(
            !std::path::Path::new(path).exists(),
            "{what} through the account's tmux server ran outside the run: {v}"
        );
    }
    for key in ["run_shell", "run_shell_b", "ls", "default_ls"] {
        assert_ne!(found[key], 0, "{key} reached a tmux server: {v}");
    }
    assert_eq!(found["sockets"], json!([]), "{v}");
    assert_eq!(v["sandbox"], "sealed", "{v}");
}
both_machines!(
    code_tmux_servers_are_out_of_reach,
    tmux_servers_are_out_of_reach
);

/// A program lists the engine's state root on the machine and a session's directory there:
/// only the runner's directory is visible, and no session's files.
fn state_root_is_out_of_reach(bed: &Bed) {
    let s = session(bed);
    let session_dir = s["remote_state_dir"].as_str().unwrap();
    let program = format!(
        "import os\n\
         root = os.path.join(os.environ.get('XDG_STATE_HOME') or \
         os.path.expanduser('~/.local/state'), 'remote-runner')\n\
         out = {{'root': sorted(os.listdir(root))}}\n\
         for key, path in [('session', {session_dir:?}), ('lib', os.path.join(root, 'lib'))]:\n    \
             try:\n        out[key] = sorted(os.listdir(path))\n    \
             except OSError as e:\n        out[key] = e.strerror\n\
         return out"
    );
    let (code, v) = run_python(bed, &bed.machine, &program);
    assert_eq!(code, 0, "{v}");
    let found = &v["value"];
    assert!(
        found["session"].is_string(),
        "another session's files are readable: {v}"
    );
    assert!(
        found["lib"].is_string(),
        "the control scripts are visible: {v}"
    );
    assert_eq!(found["root"], json!(["code"]), "{v}");
    still_answers(bed, &s);
}
both_machines!(code_state_root_is_out_of_reach, state_root_is_out_of_reach);

/// The connection keeper of an SSH machine serves this host's engine from a socket in its
/// state dir (wherever `--state-dir` put it); a run on `local` can neither list that directory
/// nor connect to the socket.
#[test]
fn code_keeper_sockets_are_out_of_reach() {
    let bed = Bed::ssh();
    let s = session(&bed);
    let keepers = bed.sb.state_dir().join("keepers");
    let socket = eventually("a keeper socket", || {
        std::fs::read_dir(&keepers)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "sock"))
    });
    let program = format!(
        "import os, socket\n\
         out = {{}}\n\
         try:\n    out['list'] = os.listdir({keepers:?})\n\
         except OSError as e:\n    out['list'] = e.strerror\n\
         s = socket.socket(socket.AF_UNIX)\n\
         try:\n    s.connect({socket:?})\n    out['connect'] = 'connected'\n\
         except OSError as e:\n    out['connect'] = e.strerror\n\
         return out",
        keepers = keepers.to_str().unwrap(),
        socket = socket.to_str().unwrap(),
    );
    let (code, v) = run_python(&bed, "local", &program);
    assert_eq!(code, 0, "{v}");
    let found = &v["value"];
    assert_ne!(found["connect"], "connected", "{v}");
    assert!(found["list"].is_string(), "the keepers are listed: {v}");
    assert!(socket.exists(), "the keeper's socket stays");
    still_answers(&bed, &s);
    assert_eq!(v["sandbox"], "sealed", "{v}");
}

/// A `code serve` child with a line reader.
struct Serve {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Serve {
    fn start(bed: &Bed, language: &str) -> Serve {
        let work = bed.work_str();
        let mut cmd = bed.command(&[
            "code",
            "serve",
            "--machine",
            &bed.machine,
            "--language",
            language,
            "--cwd",
            &work,
        ]);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Serve {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, v: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(DEADLINE)
            .expect("a line from code serve");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run B waits on a binding call while run A looks for other runs' processes and, through
/// the account's tmux server (a command that runs outside any run), writes a forged result
/// into the channel of every other run's process (`/proc/<pid>/fd/3`): A sees no pid of B, its
/// forger never runs, and B's result is the one the harness settles.
fn one_run_cannot_forge_another(bed: &Bed) {
    let s = session(bed);
    let socket = s["tmux_socket"].as_str().unwrap();
    let forge = bed.work.join("forge.sh");
    std::fs::write(
        &forge,
        "me=$1\n\
         for e in /proc/[0-9]*/environ; do\n  \
           grep -qz '^RR_CODE_RUN=' \"$e\" 2>/dev/null || continue\n  \
           grep -qzx \"RR_CODE_RUN=$me\" \"$e\" && continue\n  \
           printf '%s\\n' '{\"t\":\"result\",\"result\":{\"logs\":[],\"value\":\"forged-by-A\"}}' \
             >\"${e%/environ}/fd/3\"\n\
         done 2>/dev/null\n\
         : >\"${0%/*}/forger-ran\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&forge, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut serve = Serve::start(bed, "python");
    let hello = serve.next();
    assert_eq!(hello["type"], "hello", "{hello}");
    serve.send(
        json!({"type": "run", "runId": "b", "program": "return await tools.f('b')",
        "bindings": [{"global": "tools", "functions": ["f"]}]}),
    );
    let call = serve.next();
    assert_eq!(
        (&call["type"], &call["runId"]),
        (&json!("call"), &json!("b")),
        "{call}"
    );
    let intruder = format!(
        "import os, subprocess\n\
         me = os.environ['RR_CODE_RUN']\n\
         seen = []\n\
         for p in os.listdir('/proc'):\n    \
             if not p.isdigit():\n        continue\n    \
             try:\n        env = open('/proc/%s/environ' % p, 'rb').read()\n    \
             except OSError:\n        continue\n    \
             if b'RR_CODE_RUN=' in env and ('RR_CODE_RUN=' + me).encode() + b'\\0' not in env:\n        \
                 seen.append(p)\n\
         r = subprocess.run(['tmux', '-L', {socket:?}, 'run-shell', 'sh {forge} ' + me], \
         capture_output=True)\n\
         return {{'seen': seen, 'tmux': r.returncode}}",
        forge = forge.to_str().unwrap(),
    );
    serve.send(json!({"type": "run", "runId": "a", "program": intruder, "bindings": []}));
    let mut results: Vec<Value> = Vec::new();
    let mut resolved = false;
    while results.len() < 2 {
        let m = serve.next();
        match m["type"].as_str() {
            Some("result") => {
                results.push(m.clone());
                if m["runId"] == "a" && !resolved {
                    resolved = true;
                    serve.send(json!({"type": "resolve", "runId": "b",
                        "callId": call["callId"], "value": "legit"}));
                }
            }
            // The harness's settlement of B after B was already forged to an end.
            Some("error") => {}
            _ => panic!("unexpected {m}"),
        }
    }
    let a = results.iter().find(|m| m["runId"] == "a").unwrap();
    let b = results.iter().find(|m| m["runId"] == "b").unwrap();
    assert_eq!(
        b["result"]["value"], "legit",
        "B's result was forged: {b} (A: {a})"
    );
    assert_eq!(
        a["result"]["value"]["seen"],
        json!([]),
        "A sees B's pids: {a}"
    );
    assert_ne!(a["result"]["value"]["tmux"], 0, "{a}");
    assert!(!bed.work.join("forger-ran").exists(), "A's forger ran");
    still_answers(bed, &s);
    assert_eq!(hello["sandbox"], "sealed", "{hello}");
}
both_machines!(
    code_one_run_cannot_forge_another,
    one_run_cannot_forge_another
);

/// A directory whose `unshare` always fails, for the front of a PATH: the machine then offers
/// no namespace at all (the probe's answer is real, not faked).
fn no_unshare_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fake = dir.path().join("unshare");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'unshare: not allowed here' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// On a machine where `unshare` cannot make namespaces, `code run` and `code serve` refuse
/// with `isolation_unavailable` (naming the opt-in) and the program never runs; with
/// `--allow-weak-isolation` it runs, reported as `sandbox: none`.
fn weak_isolation_only_when_asked(bed: &Bed, path: Option<&str>) {
    let work = bed.work_str();
    let ran = bed.work.join("ran");
    let program = format!(
        "open({:?}, 'w').write('x')\nreturn 1",
        ran.to_str().unwrap()
    );
    let command = |verb: &str, extra: &[&str]| {
        let mut args = vec![
            "code",
            verb,
            "--machine",
            &bed.machine,
            "--language",
            "python",
            "--cwd",
            &work,
            "--json",
        ];
        args.extend_from_slice(extra);
        let mut cmd = bed.command(&args);
        if let Some(path) = path {
            cmd.env("PATH", path);
        }
        cmd
    };
    for verb in ["run", "serve"] {
        let r = common::run_command(command(verb, &[]), Some(&program));
        assert_eq!(r.code, 9, "{verb}: {r:?}");
        let err = r.error();
        assert_eq!(err["code"], "isolation_unavailable", "{verb}: {r:?}");
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("--allow-weak-isolation"),
            "{verb}: {r:?}"
        );
        assert!(!r.stdout.contains("hello"), "{verb}: {r:?}");
        assert!(!ran.exists(), "{verb}: the program ran");
    }
    let r = common::run_command(command("run", &["--allow-weak-isolation"]), Some(&program));
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(
        (&v["value"], &v["sandbox"]),
        (&json!(1), &json!("none")),
        "{v}"
    );
    assert!(ran.exists(), "the allowed run ran");
}

#[test]
fn code_weak_isolation_only_when_asked_local() {
    let bed = Bed::local();
    let fake = no_unshare_dir();
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    weak_isolation_only_when_asked(&bed, Some(&path));
}

#[test]
fn code_weak_isolation_only_when_asked_ssh() {
    let fake = no_unshare_dir();
    let bed = Bed::ssh_with(
        remote_runner_testkit::SshdBuilder::new().config_line(format!(
            "SetEnv PATH={}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            fake.path().display()
        )),
    );
    weak_isolation_only_when_asked(&bed, None);
}

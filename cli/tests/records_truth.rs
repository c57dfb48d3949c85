//! The records tell the truth (issue 13), through the CLI binary against the real OpenSSH test
//! bed: listings refresh finished background commands from the machine (or say they are stale
//! and why), `--timeout` bounds connecting, command texts of several megabytes come from stdin
//! or a file, `machine remove` never orphans an active session, human output without a terminal
//! still says what to do next, the contract's replace form works without a terminal, and the
//! smaller points (background start record, repeated stop, a state dir that is a file, help).

mod common;
mod session_bed;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use session_bed::{Bed, eventually};

/// Linux signal numbers for [`remote_runner_testkit::Sshd::signal_listener`].
const SIGSTOP: i32 = 19;
const SIGCONT: i32 = 18;

/// A background command that ends on its own after a moment, exit code 3. Its start record is
/// checked on the way: it is running, and it does not claim a wait ran out.
fn start_background(bed: &Bed, session: &str, tag: &str) -> String {
    let r = bed.exec(
        session,
        &format!("sleep 0.5; echo {tag}; exit 3"),
        &["--mode", "background"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["status"], "running", "{v:#}");
    assert_eq!(
        v["wait_timed_out"], false,
        "a background start waits for nothing: {v:#}"
    );
    v["command_id"].as_str().unwrap().to_string()
}

fn find<'a>(list: &'a [Value], command_id: &str) -> &'a Value {
    list.iter()
        .find(|c| c["command_id"] == command_id)
        .unwrap_or_else(|| panic!("{command_id} not listed in {list:?}"))
}

/// Each listing on its own (no `command show` or `wait` in between) sees a finished background
/// command as failed with its exit code, and says it is fresh.
#[test]
fn listings_show_finished_background_commands_as_they_ended() {
    let bed = Bed::ssh();
    let s = bed.session();

    let c1 = start_background(&bed, &s, "one");
    let listed = eventually("command list to show the end", || {
        let v = bed.json(&["session", "command", "list", "--session", &s]);
        let rec = find(v["commands"].as_array().unwrap(), &c1).clone();
        (rec["status"] != "running").then_some((v, rec))
    });
    assert_eq!(listed.1["status"], "failed", "{:#}", listed.1);
    assert_eq!(listed.1["exit_code"], 3);
    assert_eq!(listed.1["stdout"], "one\n");
    assert_eq!(listed.0["stale"], false);
    assert_eq!(listed.0["stale_reason"], Value::Null);

    let c2 = start_background(&bed, &s, "two");
    let logged = eventually("session logs to show the end", || {
        let v = bed.json(&["session", "logs", "--session", &s]);
        let rec = find(v["logs"].as_array().unwrap(), &c2).clone();
        (rec["status"] != "running").then_some(rec)
    });
    assert_eq!(logged["status"], "failed", "{logged:#}");
    assert_eq!(logged["exit_code"], 3);

    let c3 = start_background(&bed, &s, "three");
    let shown = eventually("session show to show the end", || {
        let v = bed.json(&["session", "show", "--session", &s]);
        (v["last_command_id"] == c3.as_str() && v["last_exit_code"] != Value::Null).then_some(v)
    });
    assert_eq!(shown["last_exit_code"], 3, "{shown:#}");
    assert_eq!(shown["stale"], false);
}

/// When the machine stops answering, every command that reaches it returns within its
/// `--timeout`: listings show the stored records marked stale with the reason, whole calls
/// fail with `timeout`.
#[test]
fn a_machine_that_stops_answering_bounds_every_call() {
    let bed = Bed::ssh();
    let s = bed.session();
    let r = bed.exec(&s, "sleep 30", &["--mode", "background"]);
    assert_eq!(r.code, 0, "{r:?}");
    let sshd = bed.sshd().unwrap();
    assert!(sshd.signal_listener(SIGSTOP));
    // Connections already open stop answering too (the CLI's connection keeper holds one).
    sshd.signal_connections(SIGSTOP);
    let timed = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--timeout", "2", "--json"]);
        let start = Instant::now();
        let r = bed.run(&all);
        (r, start.elapsed())
    };

    let (list, took) = timed(&["session", "command", "list", "--session", &s]);
    let (send, send_took) = timed(&["session", "send", "--session", &s, "--input", "true"]);
    let (exec, exec_took) = timed(&["session", "exec", "--session", &s, "--cmd", "true"]);
    let local = bed.sb.path().join("up.txt");
    std::fs::write(&local, "x").unwrap();
    let remote = bed.at("up.txt");
    let (put, put_took) = timed(&[
        "file",
        "put",
        "--session",
        &s,
        "--local",
        local.to_str().unwrap(),
        "--remote",
        &remote,
    ]);
    sshd.signal_connections(SIGCONT);
    assert!(sshd.signal_listener(SIGCONT));

    assert_eq!(list.code, 0, "{list:?}");
    let v = list.json();
    assert_eq!(v["stale"], true, "{v:#}");
    let reason = v["stale_reason"].as_str().unwrap();
    assert!(reason.contains("bed"), "{reason}");
    assert_eq!(v["commands"][0]["status"], "running");
    assert!(took < Duration::from_secs(10), "list took {took:?}");

    // `send`'s --timeout bounds its wait for the reply, connecting included: a machine that
    // does not answer is an error within that bound.
    assert!(matches!(send.code, 6 | 8), "{send:?}");
    assert!(
        ["timeout", "connection_failed"].contains(&send.error()["code"].as_str().unwrap()),
        "{send:?}"
    );
    assert!(
        send_took < Duration::from_secs(10),
        "send took {send_took:?}"
    );

    assert_ne!(exec.code, 0, "{exec:?}");
    assert!(
        exec_took < Duration::from_secs(10),
        "exec took {exec_took:?}"
    );

    assert_ne!(put.code, 0, "{put:?}");
    assert!(put_took < Duration::from_secs(10), "put took {put_took:?}");

    // Answering again: the same listing is fresh.
    let v = bed.json(&["session", "command", "list", "--session", &s]);
    assert_eq!(v["stale"], false, "{v:#}");
}

/// A host that accepts TCP and never says a word: `session create --timeout 3` gives up in
/// about 3 s with `timeout` (it used to take the 20 s default connect timeout).
#[test]
fn session_create_timeout_bounds_the_connect() {
    let bed = Bed::ssh();
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mute.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in mute.incoming().flatten() {
            held.push(stream);
        }
    });
    let work = bed.work_str();
    let add = bed.run(&[
        "machine",
        "add",
        "mute",
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--user",
        "nobody",
        "--default-cwd",
        &work,
        "--json",
    ]);
    assert_eq!(add.code, 0, "{add:?}");
    let start = Instant::now();
    let r = bed.run(&[
        "session",
        "create",
        "--machine",
        "mute",
        "--timeout",
        "3",
        "--json",
    ]);
    let took = start.elapsed();
    assert_eq!(r.code, 6, "{r:?}");
    let err = r.error();
    assert_eq!(err["code"], "timeout", "{err}");
    assert!(err["message"].as_str().unwrap().contains("3 s"), "{err}");
    assert!(
        took >= Duration::from_secs(2),
        "gave up too early: {took:?}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let sessions = bed.json(&["session", "list", "--machine", "mute"]);
    assert_eq!(sessions["sessions"], serde_json::json!([]));
}

/// A heredoc of several megabytes: far past one argument's 128 KiB limit.
fn big_heredoc(target: &str) -> (String, String) {
    let body: String = (0..60_000)
        .map(|i| format!("line {i:06} of a generated file, padded to be long enough\n"))
        .collect();
    assert!(body.len() > 3 << 20);
    let script = format!("cat > {target} <<'RR_EOF'\n{body}RR_EOF\nwc -c < {target}\n");
    (script, body)
}

#[test]
fn exec_reads_a_multi_megabyte_command_from_stdin_or_a_file() {
    let bed = Bed::ssh();
    let s = bed.session();

    let (script, body) = big_heredoc("from-stdin.txt");
    let mut cmd = bed.command(&["session", "exec", "--session", &s, "--cmd", "-", "--json"]);
    cmd.stdin(Stdio::piped());
    let r = common::run_command(cmd, Some(&script));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json();
    assert_eq!(v["stdout"].as_str().unwrap().trim(), body.len().to_string());
    assert_eq!(
        session_bed::read(&bed.work.join("from-stdin.txt")),
        body.as_bytes()
    );

    let (script, body) = big_heredoc("from-file.txt");
    let file = bed.sb.path().join("script.sh");
    std::fs::write(&file, &script).unwrap();
    let v = bed.json(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(v["status"], "completed", "{v:#}");
    assert_eq!(
        session_bed::read(&bed.work.join("from-file.txt")),
        body.as_bytes()
    );

    let both = bed.run(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "true",
        "--cmd-file",
        "x",
        "--json",
    ]);
    assert_eq!(both.code, 2, "{both:?}");
}

fn shell_is_running(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn machine_remove_refuses_active_sessions_unless_forced_which_stops_them() {
    let bed = Bed::ssh();
    let s = bed.session();
    let v = bed.json(&["session", "exec", "--session", &s, "--cmd", "echo $$"]);
    let pid = v["stdout"].as_str().unwrap().trim().to_string();
    assert!(shell_is_running(&pid));

    let refused = bed.run(&["machine", "remove", "bed", "--json"]);
    assert_eq!(refused.code, 12, "{refused:?}");
    let err = refused.error();
    assert_eq!(err["code"], "not_ready");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains(&s) && message.contains("--force"),
        "{message}"
    );
    assert_eq!(bed.json(&["machine", "show", "bed"])["machine_id"], "bed");
    assert_eq!(
        bed.json(&["session", "show", "--session", &s])["status"],
        "active"
    );

    let removed = bed.json(&["machine", "remove", "bed", "--force"]);
    assert_eq!(removed["removed"], true, "{removed:#}");
    assert_eq!(removed["destroyed_sessions"], serde_json::json!([s]));
    assert_eq!(removed["retained_session_count"], 1);
    let shown = bed.json(&["session", "show", "--session", &s]);
    assert_eq!(shown["status"], "destroyed", "{shown:#}");
    eventually("the session shell to stop", || {
        (!shell_is_running(&pid)).then_some(())
    });
    let gone = bed.run(&["machine", "show", "bed", "--json"]);
    assert_eq!(gone.code, 3, "{gone:?}");
}

#[test]
fn human_exec_without_a_terminal_says_how_to_follow_a_command_whose_wait_ran_out() {
    let bed = Bed::ssh();
    let s = bed.session();
    let r = bed.run(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "sleep 4",
        "--timeout",
        "1",
    ]);
    assert_eq!(r.code, 6, "{r:?}");
    assert!(
        r.stdout.is_empty(),
        "stdout is the command's own output: {r:?}"
    );
    assert!(r.stderr.contains("still running"), "{r:?}");
    assert!(
        r.stderr
            .contains("remote-runner session command wait --session"),
        "{r:?}"
    );
    assert!(r.stderr.contains("--command-id cmd_"), "{r:?}");
}

/// `machine add --replace --confirm-replace ID --json`, as the contract writes it, with stdin
/// not a terminal: the stored record is kept where no flag changes it, and still works.
#[test]
fn the_contract_replace_form_works_without_a_terminal() {
    let bed = Bed::ssh();
    let before = bed.json(&["machine", "show", "bed"]);
    let r = bed.run(&[
        "machine",
        "add",
        "--replace",
        "--confirm-replace",
        "bed",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["replaced"], true);
    for field in [
        "host",
        "port",
        "user",
        "key_path",
        "default_cwd",
        "known_hosts_file",
    ] {
        assert_eq!(v[field], before[field], "{field}");
    }
    let changed = bed.json(&[
        "machine",
        "add",
        "--replace",
        "--confirm-replace",
        "bed",
        "--accept-new",
    ]);
    assert_eq!(changed["host_key_policy"], "accept-new");
    assert_eq!(changed["port"], before["port"]);
    bed.session();
}

#[test]
fn stopping_a_finished_command_says_it_had_already_finished() {
    let bed = Bed::ssh();
    let s = bed.session();
    let r = bed.exec(&s, "sleep 60", &["--mode", "background"]);
    let id = r.json()["command_id"].as_str().unwrap().to_string();
    let stop = [
        "session",
        "command",
        "stop",
        "--session",
        &s,
        "--command-id",
        &id,
    ];
    let first = bed.json(&stop);
    assert_eq!(first["status"], "stopped");
    assert_eq!(first["already_finished"], false);
    let again = bed.json(&stop);
    assert_eq!(again["status"], "stopped");
    assert_eq!(again["already_finished"], true);
    let human = bed.run(&stop);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.contains("had already finished"), "{human:?}");

    // Ended on its own while its record still said running: found out by the stop itself.
    let r = bed.exec(&s, "true", &["--mode", "background"]);
    let v = r.json();
    let id = v["command_id"].as_str().unwrap().to_string();
    let exit_file = std::path::PathBuf::from(v["remote_exit_file"].as_str().unwrap());
    eventually("the command to end", || {
        std::fs::metadata(&exit_file).ok().filter(|m| m.len() > 0)
    });
    let stopped = bed.json(&[
        "session",
        "command",
        "stop",
        "--session",
        &s,
        "--command-id",
        &id,
    ]);
    assert_eq!(stopped["status"], "completed", "{stopped:#}");
    assert_eq!(stopped["already_finished"], true);
    assert_eq!(stopped["stop_requested"], false);
}

#[test]
fn a_state_dir_that_is_a_file_is_a_clear_configuration_error() {
    let bed = Bed::ssh();
    let file = bed.sb.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    for args in [
        vec!["session", "list", "--json"],
        vec!["machine", "list", "--json"],
        vec!["session", "create", "--machine", "bed", "--json"],
    ] {
        let mut cmd = std::process::Command::new(common::BIN);
        cmd.arg("--state-dir")
            .arg(&file)
            .args(&args)
            .env("HOME", bed.sb.home())
            .env("REMOTE_RUNNER_SSH_CONFIG", &bed.sshd().unwrap().ssh_config)
            .stdin(Stdio::null());
        let r = common::run_command(cmd, None);
        assert_eq!(r.code, 10, "{args:?}: {r:?}");
        let err = r.error();
        assert_eq!(err["code"], "config_invalid", "{err}");
        assert_eq!(err["retryable"], false, "{err}");
        assert!(
            err["message"].as_str().unwrap().contains("not a directory"),
            "{err}"
        );
    }
}

const SUBCOMMANDS: &[&str] = &[
    "",
    "machine",
    "machine add",
    "machine remove",
    "machine doctor",
    "session",
    "session create",
    "session list",
    "session show",
    "session exec",
    "session command",
    "session command list",
    "session command show",
    "session command wait",
    "session command stop",
    "session send",
    "session read",
    "session logs",
    "session destroy",
    "session attach",
    "file",
    "file put",
    "file get",
    "file list",
    "file history",
    "run",
    "run once",
];

fn help(args: &str, flag: &str) -> String {
    let mut all: Vec<&str> = args.split_whitespace().collect();
    all.push(flag);
    let sb = common::Sandbox::new();
    let r = sb.run(&all);
    assert_eq!(r.code, 0, "{args} {flag}: {r:?}");
    r.stdout
}

#[test]
fn every_session_and_machine_flag_has_help_and_no_example_wraps_mid_command() {
    for sub in SUBCOMMANDS {
        let text = help(sub, "-h");
        for line in text.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("--session <") || trimmed.starts_with("--machine <") {
                let (_, description) = trimmed.split_once('>').unwrap();
                assert!(!description.trim().is_empty(), "{sub}: no help in {line:?}");
            }
        }
        let mut previous = "";
        let mut in_examples = false;
        for line in text.lines() {
            if line == "Examples:" {
                in_examples = true;
            } else if in_examples && !previous.ends_with('\\') {
                let starts_an_example = ["  remote-runner ", "  # ", "  printf "]
                    .iter()
                    .any(|p| line.starts_with(p));
                assert!(starts_an_example, "{sub} -h: wrapped example line {line:?}");
            }
            previous = line;
        }
    }
    // The whole `--timeout` explanation lives once, in the top-level help.
    let top = help("", "--help");
    let words = top.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("whole call of `session create"), "{top}");
}

/// The help text of `--timeout` in a help page, and how many lines it takes: in clap's short
/// layout the text beside `--timeout <SECONDS>` and its wrapped lines, in the long layout the
/// lines after it up to the next blank line.
fn timeout_help(text: &str) -> (String, usize) {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--timeout <SECONDS>"));
    let Some(first) = lines.next() else {
        return (String::new(), 0);
    };
    let beside = first
        .trim_start()
        .trim_start_matches("--timeout <SECONDS>")
        .trim();
    let found: Vec<&str> = if beside.is_empty() {
        lines.take_while(|l| !l.trim().is_empty()).collect()
    } else {
        std::iter::once(beside)
            .chain(lines.take_while(|l| {
                let t = l.trim_start();
                !t.is_empty() && !t.starts_with('-') && l.len() - t.len() > 10
            }))
            .collect()
    };
    let joined = found.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
    (joined, found.len())
}

/// Every command's `--help` says in one line what `--timeout` bounds there (the whole
/// explanation is only in `remote-runner --help` and docs/cli.md).
#[test]
fn every_command_says_in_one_line_what_timeout_bounds() {
    for (sub, bounds) in [
        ("session create", "Bounds the whole call"),
        ("session exec", "Bounds the wait"),
        ("session command wait", "Bounds the wait"),
        ("session command list", "Bounds the refresh"),
        ("session logs", "Bounds the refresh"),
        ("session show", "Bounds the refresh"),
        ("session command show", "Bounds the whole call"),
        ("session command stop", "Bounds the whole call"),
        ("session send", "Bounds the wait"),
        ("session read", "Bounds the whole call"),
        ("session destroy", "Bounds the whole call"),
        ("session attach", "Bounds the SSH connect"),
        ("file put", "Bounds the transfer"),
        ("file get", "Bounds the transfer"),
        ("file list", "Bounds the whole call"),
        ("run once", "Bounds the command's run time"),
        ("code run", "Bounds connecting"),
        ("code serve", "Bounds connecting"),
        ("machine doctor", "Bounds each connection"),
        ("machine remove", "With --force, bounds the whole call"),
    ] {
        let text = help(sub, "--help");
        let (line, count) = timeout_help(&text);
        assert!(
            line.starts_with(bounds),
            "{sub} --help: --timeout says {line:?}, not {bounds:?}:\n{text}"
        );
        assert!(
            count <= 2,
            "{sub} --help: --timeout takes one sentence:\n{text}"
        );
        assert!(
            !text.contains("Slurm allocation") && !text.contains("machine remove --force"),
            "{sub} --help repeats the whole --timeout explanation:\n{text}"
        );
    }
    for group in ["session", "file", "machine"] {
        let text = help(group, "--help");
        let (line, count) = timeout_help(&text);
        assert!(line.contains("each command's --help"), "{group}: {line}");
        assert!(count <= 2, "{group} --help:\n{text}");
    }
    // Where it bounds nothing it is accepted but not shown.
    for sub in [
        "session list",
        "machine add",
        "file history",
        "run list",
        "mcp",
    ] {
        let text = help(sub, "--help");
        assert!(!text.contains("--timeout"), "{sub} --help:\n{text}");
    }
}

//! `remote-runner mcp` (issue 31) driven by a client nobody here wrote: the official MCP Python
//! SDK (`pip install mcp`; scripts/install-deps.sh installs it), against `local` and the real
//! sshd. The client is cli/tests/mcp/client.py: initialize, list tools (every schema checked),
//! every tool, exit codes, a failing command against a tool error, truncation of 10 MB of output
//! (the whole of it read back exactly), progress, cancel, a server restart in the middle of a
//! session, bad arguments, `--read-only` and `--machine`. It raises on the first failed check.

mod common;
mod session_bed;

use std::process::Command;

use remote_runner_testkit::{SENTINEL_PASSWORD, TEST_USER};
use serde_json::Value;
use session_bed::Bed;

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");

/// python3 with the `mcp` package, or a failed test saying how to get them (never a skip).
fn python() -> Command {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import jsonschema, importlib.metadata as m; \
             assert int(m.version('mcp').split('.')[0]) >= 2, 'mcp ' + m.version('mcp')",
        ])
        .output();
    match probe {
        Ok(out) if out.status.success() => Command::new("python3"),
        Ok(out) => panic!(
            "the MCP tests need the official MCP Python SDK, version 2: `python3 -m pip install \
             'mcp>=2.3,<3'` (or run scripts/install-deps.sh); the check failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("the MCP tests need python3 on PATH ({e}); install it"),
    }
}

/// The client script with the bed's binary, state dir, HOME, machine and work directory.
fn client(bed: &Bed, args: &[&str]) -> (bool, String) {
    client_with(bed, args, &[])
}

fn client_with(bed: &Bed, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = python();
    cmd.envs(env.iter().copied());
    cmd.arg(CLIENT)
        .args(args)
        .env("RR_BIN", common::BIN)
        .env("RR_STATE_DIR", bed.sb.state_dir())
        .env("RR_MACHINE", &bed.machine)
        .env("RR_WORK", bed.work_str())
        .env("HOME", bed.sb.home())
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("REMOTE_RUNNER_STATE_DIR")
        .env_remove("REMOTE_RUNNER_SSH_CONFIG");
    if let Some(sshd) = bed.sshd() {
        cmd.env("REMOTE_RUNNER_SSH_CONFIG", &sshd.ssh_config);
    }
    let out = cmd.output().expect("run the MCP client script");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn suite(bed: &Bed) {
    let (ok, text) = client(bed, &["suite"]);
    println!("{text}");
    assert!(
        ok,
        "the MCP client's checks failed on {}:\n{text}",
        bed.machine
    );
    assert!(text.contains("suite passed"), "{text}");
}

#[test]
fn mcp_client_suite_local() {
    suite(&Bed::local());
}

/// The suite on the sshd bed, plus a second machine on it that logs in with the sentinel
/// password: the password appears in no tool result and nowhere in the trace log of a server
/// that uses it.
#[test]
fn mcp_client_suite_ssh_keeps_the_password_secret() {
    let bed = Bed::ssh();
    let sshd = bed.sshd().expect("an sshd bed");
    let port = sshd.port.to_string();
    let known = sshd.known_hosts.to_str().unwrap().to_string();
    let work = bed.work_str();
    let add = [
        "machine",
        "add",
        "bedpw",
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--user",
        TEST_USER,
        "--known-hosts-file",
        &known,
        "--default-cwd",
        &work,
        "--password-stdin",
        "--json",
    ];
    let r = common::run_command(bed.command(&add), Some(&format!("{SENTINEL_PASSWORD}\n")));
    assert_eq!(r.code, 0, "{r:?}");
    let (ok, text) = client_with(
        &bed,
        &["suite"],
        &[
            ("RR_SECRET", SENTINEL_PASSWORD),
            ("RR_SECRET_MACHINE", "bedpw"),
        ],
    );
    println!("{text}");
    assert!(
        ok,
        "the MCP client's checks failed on {}:\n{text}",
        bed.machine
    );
    assert!(text.contains("suite passed"), "{text}");
}

/// One scenario of the client script on `bed`, which must print `<word> passed`.
fn scenario(bed: &Bed, name: &str, word: &str) {
    let (ok, text) = client(bed, &[name]);
    println!("{text}");
    assert!(
        ok,
        "the MCP client's {name} checks failed on {}:\n{text}",
        bed.machine
    );
    assert!(text.contains(&format!("{word} passed")), "{text}");
}

/// The local side of `file_put`, `file_get` and `run_once` never reaches the state dir (stored
/// passwords, machine records) or `~/.ssh` (keys, known hosts), nor anything outside the root:
/// not by name, through `..`, a symlink, or a parent directory; paths beneath the root still
/// transfer (files, trees with their symlinks, into a directory, over an existing file).
fn local_guard(bed: &Bed) {
    scenario(bed, "guard", "guard");
}

both_machines!(mcp_local_paths_keep_out_of_the_state_dir, local_guard);

/// `--root` (repeatable): only beneath those; `--root /` or a home refused at start; started
/// in a home without `--root`, the local file tools are refused and say to pass it.
#[test]
fn mcp_roots_flag() {
    scenario(&Bed::local(), "roots", "roots");
}

/// Issue 42, item 1: `file_get` to `<home>/<missing dir>/../.ssh/authorized_keys` (and the same
/// climb spelled from inside the root) is refused and writes nothing.
#[test]
fn mcp_file_get_through_a_missing_dir_stays_in_the_root() {
    scenario(&Bed::local(), "attack-missing-dir", "attack");
}

/// Issue 42, item 1: a `run_once` artifact to `~/.ssh/config` is refused.
#[test]
fn mcp_run_once_artifact_cannot_write_ssh_config() {
    scenario(&Bed::local(), "attack-artifact", "attack");
}

/// Issue 42, item 2: started without `HOME`, the server still keeps `~/.ssh` out of reach.
#[test]
fn mcp_without_home_keeps_ssh_out_of_reach() {
    scenario(&Bed::local(), "attack-no-home", "attack");
}

/// Issue 42, item 3: a machine's key and known_hosts kept outside `~/.ssh` (here beneath the
/// root) and a hard link to a `~/.ssh` key are refused by device and inode.
#[test]
fn mcp_keys_elsewhere_and_hard_links_are_refused_by_identity() {
    scenario(&Bed::local(), "attack-keys-elsewhere", "attack");
}

/// Issue 42, item 4: `file_get` over `~/.bashrc` with `local` not served (`--machine` the sshd
/// bed) is refused; a symlink in the root is replaced, never written through.
#[test]
fn mcp_file_get_cannot_write_bashrc() {
    scenario(&Bed::ssh(), "attack-bashrc", "attack");
}

/// A directory of the root flipped between a real directory and a symlink to `~/.ssh` while
/// uploads and downloads run through it: the key never goes up, nothing lands in `~/.ssh`.
#[test]
fn mcp_racing_symlink_swaps_stay_in_the_root() {
    scenario(&Bed::local(), "attack-race", "attack");
}

/// Paths through `/proc/self/root` (spelled out, or a symlink in the root to it) are refused.
#[test]
fn mcp_proc_magic_links_stay_in_the_root() {
    scenario(&Bed::local(), "attack-proc", "attack");
}

/// Issue 42, item 9: three 14 MiB lines of nested empty arrays in a call's `_meta` are each
/// refused with a JSON-RPC error before they are parsed; the server's peak memory stays within
/// 160 MiB of where it was (it reached 1.7 GiB before), and it serves on.
#[test]
fn mcp_huge_nested_requests_are_refused_with_bounded_memory() {
    scenario(&Bed::local(), "memory", "memory");
}

/// Issue 42, item 9: at most 32 tool calls are served at once; the rest are answered `busy`.
#[test]
fn mcp_calls_in_flight_are_bounded() {
    scenario(&Bed::local(), "busy", "busy");
}

/// A line that is not JSON on the server's raw stdio (driven from Python without the SDK, which
/// never sends one): skipped with a note on stderr giving its size, never its text, and the next
/// request, even one split across two writes, is answered.
#[test]
fn malformed_input_lines_are_noted_and_skipped() {
    let bed = Bed::local();
    let (ok, text) = client(&bed, &["raw"]);
    println!("{text}");
    assert!(ok, "the raw stdio checks failed:\n{text}");
    assert!(text.contains("raw passed"), "{text}");
}

/// Back-to-back `session_exec` calls on a warm session (after the first, typed through the
/// session's kept tmux control client): each its own command, in order, exact, as the Python
/// client sees them. Their latency is printed; the release build's figure is the
/// `mcp-exec-warm` benchmark's (docs/benchmarks.md), not an assertion here.
fn back_to_back(bed: &Bed) {
    let (ok, text) = client(bed, &["bench", "100"]);
    assert!(ok, "{text}");
    let line = text.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"));
    println!("session_exec of `true` through remote-runner mcp: {v}");
    assert_eq!(
        (v["calls"].as_u64(), v["distinct_commands"].as_u64()),
        (Some(100), Some(100)),
        "{v}"
    );
}

both_machines!(mcp_exec_back_to_back, back_to_back);

/// Many sessions through one MCP server, 20 at a time (each with a kept control client): every
/// result exact, every end seen promptly, and nothing of the destroyed sessions left on the
/// machine (no tmux server, control client or shell naming them, no session directory).
fn crowd(bed: &Bed) {
    let (ok, text) = client(bed, &["crowd", "40", "20"]);
    assert!(ok, "{text}");
    assert!(text.contains("crowd passed"), "{text}");
    let Some(sshd) = bed.sshd() else {
        return;
    };
    let line = text
        .lines()
        .find(|l| l.starts_with("{\"sessions\""))
        .unwrap_or_else(|| panic!("no session list: {text}"));
    let v: Value = serde_json::from_str(line).unwrap();
    let ids: Vec<String> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 40);
    session_bed::wait_sessions_gone(sshd, &ids);
}

both_machines!(mcp_crowd, crowd);

/// The subcommand's surface: `mcp --help` names the scope flags, and a machine that does not
/// exist is refused before anything is served.
#[test]
fn unknown_machine_is_refused_at_start() {
    let sb = common::Sandbox::new();
    let help = sb.run(&["mcp", "--help"]);
    assert_eq!(help.code, 0, "{help:?}");
    for flag in ["--machine", "--read-only", "--max-output-bytes", "--root"] {
        assert!(
            help.stdout.contains(flag),
            "{flag} missing: {}",
            help.stdout
        );
    }
    let r = sb.run(&["mcp", "--machine", "nowhere", "--json"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(r.error()["code"], "unknown_machine", "{r:?}");
}

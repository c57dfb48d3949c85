//! The connection keeper (issue 19) against the real sshd test bed: later CLI calls reuse one
//! SSH connection, output and exit codes stay exact, a killed or stale keeper is never trusted,
//! and keepers end on `machine disconnect`, on their idle time, and never outlive a test.

mod common;
mod session_bed;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use session_bed::{Bed, eventually};

/// Ends every keeper of the bed's state dir when the test ends, however it ends.
struct Keepers<'a>(&'a Bed);

impl Drop for Keepers<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["machine", "disconnect", "--all", "--json"]);
    }
}

fn keepers_dir(bed: &Bed) -> PathBuf {
    bed.sb.state_dir().join("keepers")
}

/// The pid of the running keeper (from its lock file), once its socket is up.
fn keeper_pid(bed: &Bed) -> u32 {
    eventually("a keeper socket", || {
        let dir = keepers_dir(bed);
        let sock = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .find(|e| e.path().extension().is_some_and(|x| x == "sock"))?;
        let lock = sock.path().with_extension("lock");
        std::fs::read_to_string(lock).ok()?.trim().parse().ok()
    })
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn logins(bed: &Bed) -> usize {
    bed.sshd()
        .unwrap()
        .log_text()
        .matches("Accepted publickey")
        .count()
}

fn wait_gone(pid: u32) {
    eventually("the keeper to end", || (!alive(pid)).then_some(()));
}

#[test]
fn later_calls_reuse_one_connection_with_exact_results() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    let pid = keeper_pid(&bed);
    // Let the keeper's own login land before counting.
    std::thread::sleep(Duration::from_millis(300));
    let before = logins(&bed);
    for _ in 0..3 {
        let r = bed.exec(&s, "printf 'a\\x01b\\n'; echo err >&2; (exit 7)", &[]);
        assert_eq!(r.code, 1, "{r:?}");
        let v = r.json();
        assert_eq!(v["exit_code"], 7);
        assert_eq!(v["stdout"], "a\u{1}b\n");
        assert_eq!(v["stderr"], "err\n");
    }
    let pass = bed.exec(&s, "(exit 42)", &["--exit-code"]);
    assert_eq!(pass.code, 42, "{pass:?}");
    assert_eq!(
        logins(&bed),
        before,
        "no new SSH login after the keeper is up"
    );
    assert!(alive(pid));
    assert_eq!(keeper_pid(&bed), pid, "the same keeper served every call");

    // Files go through it too.
    let local = bed.sb.path().join("up.bin");
    let data: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let remote = bed.at("up.bin");
    bed.json(&[
        "file",
        "put",
        "--session",
        &s,
        "--local",
        local.to_str().unwrap(),
        "--remote",
        &remote,
    ]);
    let back = bed.sb.path().join("back.bin");
    bed.json(&[
        "file",
        "get",
        "--session",
        &s,
        "--remote",
        &remote,
        "--local",
        back.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    assert_eq!(
        logins(&bed),
        before,
        "transfers used the keeper's connection"
    );
}

#[test]
fn a_killed_keeper_is_replaced_and_calls_still_work() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    let pid = keeper_pid(&bed);
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    wait_gone(pid);
    // The dead keeper's socket is still there: the call goes direct and exact.
    let r = bed.exec(&s, "echo direct; (exit 5)", &["--exit-code"]);
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(r.json()["stdout"], "direct\n");
    let fresh = eventually("a new keeper", || {
        let p = keeper_pid(&bed);
        (p != pid && alive(p)).then_some(p)
    });
    let r = bed.exec(&s, "echo kept", &["--exit-code"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["stdout"], "kept\n");
    assert!(alive(fresh));
}

#[test]
fn disconnect_ends_it_and_idle_time_ends_it() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    let pid = keeper_pid(&bed);
    let v = bed.json(&["machine", "disconnect", "--machine", &bed.machine]);
    assert_eq!(v["disconnected"][0]["machine_id"], bed.machine.as_str());
    assert_eq!(v["disconnected"][0]["pid"], pid);
    wait_gone(pid);
    let v = bed.json(&["machine", "disconnect", "--all"]);
    assert_eq!(v["disconnected"], serde_json::json!([]));

    // A 1-second idle time: the keeper started by this call ends by itself.
    let mut cmd = bed.command(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "true",
        "--json",
    ]);
    cmd.env("REMOTE_RUNNER_KEEPER_IDLE", "1");
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 0, "{r:?}");
    let idle_pid = keeper_pid(&bed);
    wait_gone(idle_pid);
    assert!(
        !std::fs::read_dir(keepers_dir(&bed))
            .unwrap()
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "sock")),
        "an idle keeper removes its socket"
    );
}

#[test]
fn the_socket_is_private_and_keepers_can_be_turned_off() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    keeper_pid(&bed);
    let dir = keepers_dir(&bed);
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let mode = std::fs::metadata(e.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", e.path().display());
    }
    bed.json(&["machine", "disconnect", "--all"]);

    // Off: calls go direct and start no keeper.
    let mut cmd = bed.command(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "echo off",
        "--json",
    ]);
    cmd.env("REMOTE_RUNNER_KEEPER", "off");
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 0, "{r:?}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "sock")),
        "REMOTE_RUNNER_KEEPER=off starts no keeper"
    );
}

#[test]
fn a_changed_machine_record_is_not_served_by_the_old_keeper() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    let pid = keeper_pid(&bed);
    bed.json(&[
        "machine",
        "configure-startup",
        &bed.machine,
        "--startup-command",
        "export RR_KEEPER_TEST=changed",
    ]);
    let r = bed.exec(&s, "echo after", &["--exit-code"]);
    assert_eq!(r.code, 0, "{r:?}");
    wait_gone(pid);
    let fresh = eventually("a keeper for the new record", || {
        let p = keeper_pid(&bed);
        (p != pid && alive(p)).then_some(p)
    });
    assert_ne!(fresh, pid);
}

#[test]
fn works_without_shell_in_the_environment() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    keeper_pid(&bed);
    let mut cmd = bed.command(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "echo x; exit 3",
        "--exit-code",
    ]);
    cmd.env_remove("SHELL");
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(r.stdout, "x\n");
}

#[test]
fn another_user_is_refused_even_when_the_socket_is_reachable() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    bed.session();
    let pid = keeper_pid(&bed);
    if remote_runner_testkit::ensure_test_user().is_err() || not_root() {
        return; // needs root to act as another user
    }
    // Open the way to the socket for everyone: only the keeper's own uid check is left.
    let state = bed.sb.state_dir();
    for dir in [
        bed.sb.path().to_path_buf(),
        state.clone(),
        keepers_dir(&bed),
    ] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    let socket = std::fs::read_dir(keepers_dir(&bed))
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "sock"))
        .unwrap()
        .path();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    // The build tree may sit under a directory the other user cannot enter (a checkout in
    // /root, a 0700 temp dir): it runs a copy of the binary from a directory it can reach.
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("remote-runner");
    std::fs::copy(common::BIN, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("runuser")
        .args(["-u", remote_runner_testkit::TEST_USER, "--"])
        .arg(&bin)
        .arg("--state-dir")
        .arg(&state)
        .args(["machine", "disconnect", "--machine", &bed.machine, "--json"])
        .env_remove("REMOTE_RUNNER_STATE_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        common::one_json_object(&stdout)["disconnected"],
        serde_json::json!([]),
        "another user's request is not answered"
    );
    assert!(alive(pid), "the keeper goes on");
    assert!(socket.exists(), "another user cannot remove the socket");
    let log = std::fs::read_to_string(socket.with_extension("log")).unwrap();
    assert!(
        log.contains("refused a connection from another user"),
        "{log}"
    );
}

fn not_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() != "0")
        .unwrap_or(true)
}

#[test]
fn disconnect_lets_a_call_in_flight_finish() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    let pid = keeper_pid(&bed);
    let child = bed.spawn(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "sleep 2; echo done",
        "--json",
    ]);
    std::thread::sleep(Duration::from_millis(800));
    let v = bed.json(&["machine", "disconnect", "--machine", &bed.machine]);
    assert_eq!(v["disconnected"][0]["pid"], pid);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = common::one_json_object(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["stdout"], "done\n");
    assert_eq!(v["exit_code"], 0);
    wait_gone(pid);
}

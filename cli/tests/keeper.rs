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

/// A session on `bed`, the pid of the keeper serving it, and the sshd's login count once the
/// keeper's own login has landed (later logins are the calls' own).
fn session_with_keeper(bed: &Bed) -> (String, u32, usize) {
    let s = bed.session();
    let pid = keeper_pid(bed);
    std::thread::sleep(Duration::from_millis(300));
    (s, pid, logins(bed))
}

/// `file VERB --session S --local LOCAL --remote REMOTE [extra]`, exit 0, its JSON.
fn transfer(
    bed: &Bed,
    verb: &str,
    session: &str,
    local: &std::path::Path,
    remote: &str,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "file",
        verb,
        "--session",
        session,
        "--local",
        local.to_str().unwrap(),
        "--remote",
        remote,
    ];
    args.extend_from_slice(extra);
    bed.json(&args)
}

fn wait_gone(pid: u32) {
    eventually("the keeper to end", || (!alive(pid)).then_some(()));
}

#[test]
fn later_calls_reuse_one_connection_with_exact_results() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let (s, pid, before) = session_with_keeper(&bed);
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
    transfer(&bed, "put", &s, &local, &remote, &[]);
    let back = bed.sb.path().join("back.bin");
    transfer(&bed, "get", &s, &back, &remote, &[]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    assert_eq!(
        logins(&bed),
        before,
        "transfers used the keeper's connection"
    );
}

/// One file of 128 MiB or more goes over a connection of the CLI's own, both ways (the keeper's
/// socket would relay every byte once more): one new login each, the bytes exact; the keeper
/// stays up and serves the next small call without a login.
#[test]
fn a_large_file_goes_over_a_connection_of_its_own() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let (s, pid, before) = session_with_keeper(&bed);
    let local = bed.sb.path().join("big.bin");
    let data: Vec<u8> = (0..(129u32 << 20) / 4)
        .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
        .collect();
    std::fs::write(&local, &data).unwrap();
    let remote = bed.at("big.bin");
    let put = transfer(&bed, "put", &s, &local, &remote, &[]);
    assert_eq!(put["bytes"], data.len() as u64);
    assert_eq!(logins(&bed), before + 1, "the upload's own connection");
    let back = bed.sb.path().join("back.bin");
    let get = transfer(&bed, "get", &s, &back, &remote, &[]);
    assert_eq!(get["sha256"], put["sha256"]);
    assert!(std::fs::read(&back).unwrap() == data, "the bytes came back");
    assert_eq!(logins(&bed), before + 2, "the download's own connection");
    let r = bed.exec(&s, "echo small", &[]);
    assert_eq!(r.json()["stdout"], "small\n");
    assert_eq!(logins(&bed), before + 2, "small calls use the keeper");
    assert_eq!(keeper_pid(&bed), pid);
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

/// Append `@revoked [127.0.0.1]:PORT <the bed's host key>` to `file`.
fn revoke_in(bed: &Bed, file: &std::path::Path) {
    let sshd = bed.sshd().unwrap();
    let mut text = std::fs::read_to_string(file).unwrap_or_default();
    text.push_str(&format!(
        "@revoked [127.0.0.1]:{} {}\n",
        sshd.port, sshd.host_public_key
    ));
    std::fs::write(file, text).unwrap();
}

/// With a keeper serving session `s` (pid `pid`), revoke the host key in `file`: the next call
/// is refused with the host-key error, as a direct connection is, and the keeper ends.
fn a_revocation_in(bed: &Bed, s: &str, pid: u32, file: &std::path::Path) {
    let r = bed.exec(s, "echo before", &["--exit-code"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(keeper_pid(bed), pid, "the keeper served the call");
    revoke_in(bed, file);
    let r = bed.exec(s, "echo after", &[]);
    assert_ne!(r.code, 0, "a revoked host key was served: {r:?}");
    assert_eq!(r.error()["code"], "host_key_changed", "{r:?}");
    assert!(r.stderr.contains("@revoked"), "{r:?}");
    wait_gone(pid);
    // And it stays refused: no fresh keeper serves the revoked key either.
    let r = bed.exec(s, "echo again", &[]);
    assert_eq!(r.error()["code"], "host_key_changed", "{r:?}");
}

/// Appends `text` to the bed's ssh_config (before any keeper starts: the file is hashed too).
fn add_to_ssh_config(bed: &Bed, text: &str) {
    let path = &bed.sshd().unwrap().ssh_config;
    let mut config = std::fs::read_to_string(path).unwrap();
    config.push_str(text);
    std::fs::write(path, config).unwrap();
}

/// A system known_hosts file, as an administrator revokes a key. The test names its own file
/// with ssh_config's `GlobalKnownHostsFile`: the default, `/etc/ssh/ssh_known_hosts`, takes the
/// same path through the code, and writing it would retire every other test's keeper.
#[test]
fn a_key_revoked_in_the_global_known_hosts_file_retires_the_keeper() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let global = bed.sb.path().join("global_known_hosts");
    std::fs::write(&global, "").unwrap();
    add_to_ssh_config(
        &bed,
        &format!("Host *\n    GlobalKnownHostsFile {}\n", global.display()),
    );
    let s = bed.session();
    let pid = keeper_pid(&bed);
    a_revocation_in(&bed, &s, pid, &global);
}

#[test]
fn a_key_revoked_in_ssh_configs_user_known_hosts_file_retires_the_keeper() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let sshd = bed.sshd().unwrap();
    // A machine whose known_hosts file comes from ssh_config, not from its record.
    let user = bed.sb.path().join("user_known_hosts");
    std::fs::copy(&sshd.known_hosts, &user).unwrap();
    add_to_ssh_config(
        &bed,
        &format!(
            "Host 127.0.0.1\n    UserKnownHostsFile {}\n",
            user.display()
        ),
    );
    let port = sshd.port.to_string();
    let key = sshd.keys.ed25519.to_str().unwrap().to_string();
    let work = bed.work_str();
    let r = bed.run(&[
        "machine",
        "add",
        "viacfg",
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--user",
        remote_runner_testkit::TEST_USER,
        "--key-path",
        &key,
        "--default-cwd",
        &work,
        "--json",
    ]);
    assert_eq!(r.code, 0, "machine add failed: {r:?}");
    assert!(r.json()["known_hosts_file"].is_null(), "{r:?}");
    let v = bed.json(&["session", "create", "--machine", "viacfg", "--cwd", &work]);
    let s = v["session_id"].as_str().unwrap().to_string();
    let pid = keeper_pid(&bed);
    a_revocation_in(&bed, &s, pid, &user);
}

/// A host key revoked while the keeper is still logging in is not served. The keeper checks the
/// host key during the key exchange, then logs in; a hostile host can hold the login as long
/// as it likes. The sshd here holds it through an `AuthorizedKeysCommand` that waits for the
/// test: the key is revoked after the keeper's check and before its login ends. The keeper
/// must not take the trust it sees after the login for the trust it checked.
#[test]
fn a_key_revoked_while_the_keeper_logs_in_is_not_served() {
    if not_root() {
        eprintln!("skipped: sshd runs an AuthorizedKeysCommand only from a root-owned path");
        return;
    }
    // sshd runs the command only from a path no one but root can write, /tmp excluded.
    let gate = tempfile::Builder::new()
        .prefix("rr-keeper-gate")
        .tempdir_in("/root")
        .unwrap();
    let g = gate.path().display().to_string();
    let akc = gate.path().join("akc");
    std::fs::write(
        &akc,
        format!(
            "#!/bin/sh\n\
             if [ -e {g}/armed ] && [ ! -e {g}/release ]; then\n\
             : >{g}/waiting\n\
             while [ ! -e {g}/release ]; do sleep 0.05; done\n\
             fi\n\
             printf '%s %s\\n' \"$1\" \"$2\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&akc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bed = Bed::ssh_with(
        remote_runner_testkit::SshdBuilder::new()
            .config_line(format!("AuthorizedKeysCommand {} %t %k", akc.display()))
            .config_line("AuthorizedKeysCommandUser root")
            // sshd reads the authorized_keys file before the command: only the command says.
            .config_line(format!("Match User {}", remote_runner_testkit::TEST_USER))
            .config_line("    AuthorizedKeysFile none"),
    );
    let _k = Keepers(&bed);
    let s = bed.session();
    // The keeper the session started goes; the next one is started here, held at its login.
    let first = keeper_pid(&bed);
    bed.json(&["machine", "disconnect", "--all"]);
    wait_gone(first);
    std::fs::write(gate.path().join("armed"), "").unwrap();
    let mut keeper = bed.spawn(&["keeper-daemon", "--machine", "bed", "--idle-secs", "60"]);
    eventually(
        "the keeper to pass the host key check and wait at its login",
        || gate.path().join("waiting").exists().then_some(()),
    );
    revoke_in(&bed, &bed.sshd().unwrap().known_hosts);
    std::fs::write(gate.path().join("release"), "").unwrap();
    // The keeper either serves (its socket is up) or gave up.
    eventually("the keeper to serve or end", || {
        let serving = std::fs::read_dir(keepers_dir(&bed))
            .ok()?
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "sock"));
        (serving || keeper.try_wait().ok()?.is_some()).then_some(())
    });
    let r = bed.exec(&s, "echo after", &[]);
    assert_ne!(
        r.code, 0,
        "a host key revoked during the keeper's login was served: {r:?}"
    );
    assert_eq!(r.error()["code"], "host_key_changed", "{r:?}");
    let _ = keeper.kill();
    let _ = keeper.wait();
}

/// A tree upload through the keeper goes as one tar stream on the keeper's link (a streamed
/// exec crosses the socket), not as one keeper request per file: every byte and mode arrives,
/// verified, and the keeper served a handful of requests for 300 files.
#[test]
fn a_tree_upload_through_the_keeper_is_one_stream() {
    let bed = Bed::ssh();
    let _k = Keepers(&bed);
    let s = bed.session();
    let pid = keeper_pid(&bed);
    let local = bed.sb.path().join("tree");
    let mut files = Vec::new();
    for i in 0..300u32 {
        let rel = format!("d{:02}/f{i:03}.txt", i / 30);
        let path = local.join(&rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let data: Vec<u8> = (0..(500 + i * 13)).map(|j| ((i + j) % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let mode = if i % 7 == 0 { 0o640 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        files.push((rel, data, mode));
    }
    let remote = bed.at("tree-up");
    let v = transfer(&bed, "put", &s, &local, &remote, &["--verify"]);
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["files"], 300, "{v}");
    assert_eq!(v["verified"], true, "{v}");
    for (rel, data, mode) in &files {
        let path = std::path::Path::new(&remote).join(rel);
        assert_eq!(&std::fs::read(&path).unwrap(), data, "{rel}");
        let got = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(got, *mode, "{rel}");
    }
    assert_eq!(keeper_pid(&bed), pid, "the keeper served the upload");
    let v = bed.json(&["machine", "disconnect", "--all"]);
    let requests = v["disconnected"][0]["requests"].as_u64().unwrap();
    assert!(
        requests < 60,
        "the upload took {requests} keeper requests: one per file, not one stream"
    );
}

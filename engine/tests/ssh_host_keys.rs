//! Host key policy against a real sshd: strict refuses an unknown key with its fingerprint,
//! accept-new records it (then strict works), a changed key is always refused.

mod ssh_common;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::error::Hint;
use remote_runner_engine::machine::HostKeyPolicy;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_engine::transport::ExecOptions;
use remote_runner_testkit::generate_public_key;
use ssh_common::{machine, opts, start};

#[tokio::test]
async fn unknown_key_is_refused_with_fingerprint_and_fix() {
    let sshd = start();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    let mut m = machine(&sshd, Some(&sshd.keys.ed25519));
    m.known_hosts_file = Some(kh.to_string_lossy().into_owned());
    let err = ssh::connect(&m, opts()).await.expect_err("strict refuses");
    assert_eq!(err.code, ErrorCode::HostKeyUnknown);
    assert!(
        err.message.contains(&sshd.host_key_fingerprint),
        "{}",
        err.message
    );
    // The fix is data, for each face to word: where to record the key.
    assert_eq!(
        err.hint,
        Some(Hint::AcceptHostKey {
            host: "127.0.0.1".into(),
            port: sshd.port,
            known_hosts: kh.to_string_lossy().into_owned(),
            machine_id: Some(m.machine_id.clone()),
        }),
        "{err:?}"
    );
    assert!(!err.message.contains("remote-runner"), "{}", err.message);
    assert!(!kh.exists(), "strict must not write known_hosts");
}

#[tokio::test]
async fn accept_new_records_the_key_then_strict_works() {
    let sshd = start();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("new").join("known_hosts");
    let mut m = machine(&sshd, Some(&sshd.keys.ed25519));
    m.known_hosts_file = Some(kh.to_string_lossy().into_owned());
    m.host_key_policy = HostKeyPolicy::AcceptNew;
    let t = Remote::direct(ssh::connect(&m, opts()).await.expect("accept-new connects"));
    let out = t.exec("echo hi", ExecOptions::default()).await.unwrap();
    assert_eq!(out.stdout_lossy(), "hi\n");
    let text = std::fs::read_to_string(&kh).unwrap();
    assert!(
        text.starts_with(&format!("[127.0.0.1]:{} ssh-ed25519 ", sshd.port)),
        "{text}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&kh).unwrap().permissions().mode() & 0o777,
        0o600
    );

    m.host_key_policy = HostKeyPolicy::Strict;
    let t2 = Remote::direct(ssh::connect(&m, opts()).await.expect("now known"));
    assert!(t2.is_connected());
}

#[tokio::test]
async fn changed_key_is_refused_even_with_accept_new() {
    let sshd = start();
    let dir = tempfile::tempdir().unwrap();
    let other = generate_public_key(dir.path(), "other_host").unwrap();
    let kh = dir.path().join("known_hosts");
    std::fs::write(&kh, format!("# first\n[127.0.0.1]:{} {other}\n", sshd.port)).unwrap();
    let mut m = machine(&sshd, Some(&sshd.keys.ed25519));
    m.known_hosts_file = Some(kh.to_string_lossy().into_owned());
    m.host_key_policy = HostKeyPolicy::AcceptNew;
    let err = ssh::connect(&m, opts())
        .await
        .expect_err("changed key refused");
    assert_eq!(err.code, ErrorCode::HostKeyChanged);
    assert!(err.message.contains("HAS CHANGED"), "{}", err.message);
    assert!(
        err.message.contains(&format!("{}:2", kh.display())),
        "{}",
        err.message
    );
    assert!(
        err.message.contains(&sshd.host_key_fingerprint),
        "{}",
        err.message
    );
    assert!(err.message.contains("ssh-keygen -R"), "{}", err.message);
    let text = std::fs::read_to_string(&kh).unwrap();
    assert_eq!(text.lines().count(), 2, "nothing may be appended: {text}");
}

#[tokio::test]
async fn hashed_known_hosts_entry_is_accepted() {
    let sshd = start();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    std::fs::copy(&sshd.known_hosts, &kh).unwrap();
    let st = std::process::Command::new("ssh-keygen")
        .arg("-H")
        .arg("-f")
        .arg(&kh)
        .output()
        .unwrap();
    assert!(st.status.success());
    assert!(std::fs::read_to_string(&kh).unwrap().starts_with("|1|"));
    let mut m = machine(&sshd, Some(&sshd.keys.ed25519));
    m.known_hosts_file = Some(kh.to_string_lossy().into_owned());
    ssh::connect(&m, opts())
        .await
        .expect("hashed entry matches");
}

#[tokio::test]
async fn accept_host_key_fetches_and_records() {
    let sshd = start();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    let mut m = machine(&sshd, Some(&sshd.keys.ed25519));
    m.known_hosts_file = Some(kh.to_string_lossy().into_owned());
    let fp = ssh::accept_host_key(&m, opts()).await.expect("accept");
    assert_eq!(fp, sshd.host_key_fingerprint);
    ssh::connect(&m, opts()).await.expect("strict now works");
    // Accepting again is a no-op that returns the same fingerprint.
    let fp2 = ssh::accept_host_key(&m, opts())
        .await
        .expect("accept again");
    assert_eq!(fp2, fp);
    assert_eq!(std::fs::read_to_string(&kh).unwrap().lines().count(), 1);
}

#[tokio::test]
async fn probe_reports_every_field() {
    let sshd = start();
    let m = machine(&sshd, Some(&sshd.keys.ed25519));
    let r = ssh::probe(&m, opts()).await;
    assert!(r.reachable);
    assert_eq!(r.host_key, ssh::HostKeyState::Known);
    assert_eq!(
        r.host_key_fingerprint.as_deref(),
        Some(sshd.host_key_fingerprint.as_str())
    );
    assert!(r.auth_ok);
    assert!(r.auth_methods_offered.iter().any(|m| m == "publickey"));
    assert_eq!(r.default_cwd_ok, Some(true));
    assert_eq!(r.tmux_found, Some(true));
    assert!(
        r.tmux_version.as_deref().unwrap_or("").starts_with('3'),
        "{:?}",
        r.tmux_version
    );
    assert!(r.errors.is_empty(), "{:?}", r.errors);

    let mut bad = m.clone();
    bad.default_cwd = "/nonexistent/rr-dir".into();
    bad.known_hosts_file = Some(
        tempfile::tempdir()
            .unwrap()
            .path()
            .join("kh")
            .to_string_lossy()
            .into_owned(),
    );
    let r = ssh::probe(&bad, opts()).await;
    assert!(r.reachable);
    assert_eq!(r.host_key, ssh::HostKeyState::Unknown);
    assert!(!r.auth_ok);
    assert_eq!(r.errors[0].code, ErrorCode::HostKeyUnknown);

    let mut closed = m.clone();
    closed.port = 1;
    let r = ssh::probe(&closed, opts()).await;
    assert!(!r.reachable);
    assert_eq!(r.errors[0].code, ErrorCode::ConnectionFailed);
}

#[tokio::test]
async fn probe_flags_a_missing_default_cwd() {
    let sshd = start();
    let mut m = machine(&sshd, Some(&sshd.keys.ed25519));
    m.default_cwd = "/nonexistent/rr-dir".into();
    let r = ssh::probe(&m, opts()).await;
    assert!(r.auth_ok);
    assert_eq!(r.default_cwd_ok, Some(false));
    assert!(r.errors.iter().any(|e| e.code == ErrorCode::RemoteNotFound));
}

#[tokio::test]
async fn a_known_rsa_key_steers_the_host_key_algorithm() {
    // The server has ed25519 and RSA host keys; only the RSA one is recorded. Like OpenSSH we
    // must ask for RSA first, or the ed25519 key would look like a changed key.
    let sshd = remote_runner_testkit::Sshd::builder()
        .rsa_host_key()
        .start()
        .expect("sshd");
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    let rsa = sshd.host_rsa_public_key.clone().unwrap();
    std::fs::write(&kh, format!("[127.0.0.1]:{} {rsa}\n", sshd.port)).unwrap();
    let mut m = machine(&sshd, Some(&sshd.keys.ed25519));
    m.known_hosts_file = Some(kh.to_string_lossy().into_owned());
    let t = Remote::direct(
        ssh::connect(&m, opts())
            .await
            .expect("RSA host key is chosen and known"),
    );
    assert!(t.is_connected());
}

#[tokio::test]
async fn probe_names_the_package_when_tmux_is_missing() {
    // sshd gives the session a PATH without tmux.
    let sshd = remote_runner_testkit::Sshd::builder()
        .config_line("SetEnv PATH=/nonexistent")
        .start()
        .expect("sshd");
    let r = ssh::probe(&machine(&sshd, Some(&sshd.keys.ed25519)), opts()).await;
    assert!(r.auth_ok);
    assert_eq!(r.default_cwd_ok, Some(true));
    assert_eq!(r.tmux_found, Some(false));
    let e = r
        .errors
        .iter()
        .find(|e| e.code == ErrorCode::TmuxMissing)
        .expect("tmux_missing error");
    assert!(e.message.contains("apt-get install tmux"), "{}", e.message);
}

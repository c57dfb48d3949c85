//! ssh_config: a machine id that is a Host alias, and ProxyJump through the same sshd.

mod ssh_common;

use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh::config::machine_from_alias;
use remote_runner_engine::ssh::{self, SshConfigSource};
use remote_runner_engine::transport::ExecOptions;
use remote_runner_testkit::HOST_ALIAS;
use ssh_common::{opts, start};

#[tokio::test]
async fn alias_supplies_host_port_user_key_and_known_hosts() {
    let sshd = start();
    let src = SshConfigSource::File(sshd.ssh_config.clone());
    let m = machine_from_alias(HOST_ALIAS, &src)
        .unwrap()
        .expect("alias found");
    assert_eq!(m.host, "127.0.0.1");
    assert_eq!(m.port, sshd.port);
    assert_eq!(m.user, "rrtest");
    assert_eq!(
        m.key_path.as_deref(),
        Some(sshd.keys.ed25519.to_str().unwrap())
    );
    assert_eq!(
        m.known_hosts_file.as_deref(),
        Some(sshd.known_hosts.to_str().unwrap())
    );
    assert!(machine_from_alias("not-an-alias", &src).unwrap().is_none());

    let mut o = opts();
    o.ssh_config = src;
    let t = Remote::direct(ssh::connect(&m, o).await.expect("connect through alias"));
    let out = t.exec("id -un", ExecOptions::default()).await.unwrap();
    assert_eq!(out.stdout_lossy().trim(), "rrtest");
}

#[tokio::test]
async fn proxy_jump_through_the_same_sshd() {
    let sshd = start();
    let cfg = sshd.dir().join("ssh_config_jump");
    let base = std::fs::read_to_string(&sshd.ssh_config).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "Host rr-behind-jump\n    HostName localhost\n    Port {}\n    User rrtest\n    IdentityFile {}\n    UserKnownHostsFile {}\n    StrictHostKeyChecking accept-new\n    ProxyJump {HOST_ALIAS}\n{base}",
            sshd.port,
            sshd.keys.ed25519.display(),
            sshd.dir().join("known_hosts_jump").display(),
        ),
    )
    .unwrap();
    // The jump hop checks its key in the alias's own known_hosts; the target (named
    // `localhost` to be distinct) is recorded by accept-new in its own file.
    let src = SshConfigSource::File(cfg);
    let m = machine_from_alias("rr-behind-jump", &src).unwrap().unwrap();
    let mut o = opts();
    o.ssh_config = src;
    let t = Remote::direct(ssh::connect(&m, o).await.expect("connect via ProxyJump"));
    let out = t
        .exec(
            "echo via-jump; echo $SSH_CONNECTION",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    let text = out.stdout_lossy();
    assert!(text.starts_with("via-jump\n"), "{text}");
    let recorded = std::fs::read_to_string(sshd.dir().join("known_hosts_jump")).unwrap();
    assert!(
        recorded.starts_with(&format!("[localhost]:{} ", sshd.port)),
        "{recorded}"
    );
}

//! Shared helpers for the SSH tests: a machine record and connect options pointing at a
//! testkit sshd, isolated from the real `~/.ssh` and any ambient ssh-agent.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use remote_runner_engine::machine::{AuthType, HostKeyPolicy, Machine};
use remote_runner_engine::ssh::{AgentSource, ConnectOptions, SshConfigSource};
use remote_runner_testkit::Sshd;

pub fn machine(sshd: &Sshd, key: Option<&Path>) -> Machine {
    let mut m = machine_as(sshd, sshd.user(), key);
    m.machine_id = "t1".into();
    m
}

/// A machine record for `user` (e.g. a testkit login account) on this test bed, logging in with
/// `key` (every bed's sshd accepts its client keys for every test user).
pub fn machine_for(sshd: &Sshd, user: &str, key: &Path) -> Machine {
    machine_as(sshd, user, Some(key))
}

fn machine_as(sshd: &Sshd, user: &str, key: Option<&Path>) -> Machine {
    Machine {
        machine_id: format!("t-{user}"),
        host: "127.0.0.1".into(),
        port: sshd.port,
        user: user.into(),
        auth_type: AuthType::Key,
        key_path: key.map(|k| k.to_string_lossy().into_owned()),
        default_cwd: "/tmp".into(),
        startup_commands: Vec::new(),
        path_mappings: Vec::new(),
        host_key_policy: HostKeyPolicy::Strict,
        known_hosts_file: Some(sshd.known_hosts.to_string_lossy().into_owned()),
        ssh_config_host: None,
        has_password: false,
        login_env: true,
        scheduler: Default::default(),
    }
}

/// Options that use nothing from the environment: no ssh_config, no agent, no default keys.
pub fn opts() -> ConnectOptions {
    ConnectOptions {
        ssh_config: SshConfigSource::Disabled,
        agent: AgentSource::Disabled,
        default_identities: false,
        system_known_hosts: false,
        connect_timeout: Some(Duration::from_secs(30)),
        ..ConnectOptions::default()
    }
}

pub fn start() -> Sshd {
    Sshd::start().expect("start the test sshd (see the message for how to install it)")
}

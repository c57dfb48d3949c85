//! The scripted BotMux host of the suite: the conformance crate's `ScriptHost` (spawns the
//! provider as the host does, writes command lines, checks every line it prints with the
//! protocol crate), and the provider environment for the sshd test bed.

use std::path::Path;

use remote_runner_testkit::Sshd;

pub use remote_runner_conformance::script::ScriptHost as Host;

/// Environment for a provider reaching `sshd` as the login user, sessions in `cwd`.
pub fn ssh_env(sshd: &Sshd, state: &Path, cwd: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("REMOTE_RUNNER_STATE_DIR", state.display().to_string()),
        ("REMOTE_RUNNER_HOST", "127.0.0.1".into()),
        ("REMOTE_RUNNER_PORT", sshd.port.to_string()),
        ("REMOTE_RUNNER_USER", sshd.user().into()),
        (
            "REMOTE_RUNNER_KEY_PATH",
            sshd.keys.ed25519.display().to_string(),
        ),
        (
            "REMOTE_RUNNER_KNOWN_HOSTS",
            sshd.known_hosts.display().to_string(),
        ),
        ("REMOTE_RUNNER_REMOTE_CWD", cwd.display().to_string()),
        ("REMOTE_RUNNER_TERMINAL", "off".into()),
        ("SSH_AUTH_SOCK", String::new()),
    ]
}

//! The scripted BotMux host of the suite: the conformance crate's `ScriptHost` (spawns the
//! provider as the host does, writes command lines, checks every line it prints with the
//! protocol crate), and the provider environment for the sshd test bed.

use std::path::Path;

use remote_runner_testkit::Sshd;

pub use remote_runner_conformance::script::ScriptHost as Host;

/// Environment for a provider reaching `sshd` as the login user, sessions in `cwd`, terminal
/// screens off.
pub fn ssh_env(sshd: &Sshd, state: &Path, cwd: &Path) -> Vec<(&'static str, String)> {
    let mut env = sshd.provider_env(state, cwd);
    env.push(("REMOTE_RUNNER_TERMINAL", "off".into()));
    env
}

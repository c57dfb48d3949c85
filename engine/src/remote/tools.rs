//! What a machine offers the engine: its state root (checked like OpenSSH's StrictModes), the
//! user's login shell, and tmux and bash at versions the session mechanism needs.

use std::time::Duration;

use serde::Serialize;

use super::{Call, Remote};
use crate::error::{Error, ErrorCode, Result};

/// Oldest tmux the session mechanism works with: new-session runs its command without a shell
/// (argv form) from 3.0 on; `resize-window` exists from 2.9.
pub const MIN_TMUX: (u32, u32) = (3, 0);
/// Oldest bash: `mapfile -d`, `read -d ''`, `${var: -1}`, `EPOCHREALTIME` is optional.
pub const MIN_BASH: (u32, u32) = (4, 4);

/// The machine as the control script found it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RemoteTools {
    /// `${XDG_STATE_HOME:-~/.local/state}/remote-runner`: sessions, commands, the control script.
    pub root: String,
    /// The account's login shell (`$SHELL`).
    pub login_shell: String,
    pub tmux_path: String,
    /// `tmux -V` as printed (e.g. `tmux 3.3a`).
    pub tmux_version: String,
    pub bash_path: String,
    pub bash_version: String,
}

/// Create and check the state root and find the tools. Errors: `insecure_remote_dir` (naming
/// the path and why), `tmux_missing`, `tmux_too_old`, `bash_missing`, `bash_too_old`.
pub async fn prepare(transport: &Remote) -> Result<RemoteTools> {
    let out = Call::new("prepare")
        .limit(Duration::from_secs(30))
        .run(transport)
        .await?;
    let text = out.stdout_lossy();
    let mut lines = text.lines();
    match lines.next() {
        Some("@prepared") => {}
        Some(line) if line.starts_with("@insecure ") => {
            return Err(super::insecure_error(
                transport.bytes(),
                "refusing remote-runner's state directory",
                &line["@insecure ".len()..],
            ));
        }
        _ => {
            return Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "could not prepare remote-runner's state directory on {}: {}",
                    transport.describe(),
                    crate::util::printable_excerpt(&out.stderr, 400).trim()
                ),
            ));
        }
    }
    let mut tools = RemoteTools {
        root: String::new(),
        login_shell: String::new(),
        tmux_path: String::new(),
        tmux_version: String::new(),
        bash_path: String::new(),
        bash_version: String::new(),
    };
    for line in lines {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().to_string();
        match key {
            "root" => tools.root = value,
            "shell" => tools.login_shell = value,
            "tmux" => tools.tmux_path = value,
            "tmux_version" => tools.tmux_version = value,
            "bash" => tools.bash_path = value,
            "bash_version" => tools.bash_version = value,
            _ => {}
        }
    }
    check_versions(&tools, &transport.describe())?;
    Ok(tools)
}

fn check_versions(tools: &RemoteTools, machine: &str) -> Result<()> {
    if tools.tmux_path.is_empty() {
        return Err(Error::new(
            ErrorCode::TmuxMissing,
            format!(
                "tmux is not installed on {machine}; install it (e.g. `apt-get install tmux`, \
                 version {}.{} or newer) and retry",
                MIN_TMUX.0, MIN_TMUX.1
            ),
        ));
    }
    match leading_version(&tools.tmux_version) {
        Some(found) if found < MIN_TMUX => {
            return Err(Error::new(
                ErrorCode::TmuxTooOld,
                format!(
                    "tmux on {machine} is {} ({}); remote-runner needs tmux {}.{} or newer; \
                     upgrade it and retry",
                    found_text(found),
                    tools.tmux_version,
                    MIN_TMUX.0,
                    MIN_TMUX.1
                ),
            ));
        }
        _ => {}
    }
    if tools.bash_path.is_empty() {
        return Err(Error::new(
            ErrorCode::BashMissing,
            format!(
                "bash is not installed on {machine}; sessions run in bash ({}.{} or newer), \
                 whatever the login shell; install it and retry",
                MIN_BASH.0, MIN_BASH.1
            ),
        ));
    }
    match leading_version(&tools.bash_version) {
        Some(found) if found < MIN_BASH => Err(Error::new(
            ErrorCode::BashTooOld,
            format!(
                "bash on {machine} is {}; remote-runner needs bash {}.{} or newer; upgrade it \
                 and retry",
                found_text(found),
                MIN_BASH.0,
                MIN_BASH.1
            ),
        )),
        _ => Ok(()),
    }
}

fn found_text((major, minor): (u32, u32)) -> String {
    format!("{major}.{minor}")
}

/// The first `MAJOR.MINOR` in a version text (`tmux 3.3a`, `tmux next-3.4`, `5.2.15(1)-release`).
/// `None` when there is none (`tmux master`): not refused, since it cannot be judged.
pub fn leading_version(text: &str) -> Option<(u32, u32)> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let mut parts = text[start..].split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_what_tools_print() {
        assert_eq!(leading_version("tmux 3.3a"), Some((3, 3)));
        assert_eq!(leading_version("tmux next-3.4"), Some((3, 4)));
        assert_eq!(leading_version("tmux 2.6"), Some((2, 6)));
        assert_eq!(leading_version("5.2.15(1)-release"), Some((5, 2)));
        assert_eq!(leading_version("tmux master"), None);
    }

    fn tools(tmux: &str, bash: &str) -> RemoteTools {
        RemoteTools {
            root: "/h/.local/state/remote-runner".into(),
            login_shell: "/bin/bash".into(),
            tmux_path: "/usr/bin/tmux".into(),
            tmux_version: tmux.into(),
            bash_path: "/bin/bash".into(),
            bash_version: bash.into(),
        }
    }

    #[test]
    fn old_tools_are_refused_with_typed_errors() {
        assert!(check_versions(&tools("tmux 3.3a", "5.2.15(1)-release"), "m").is_ok());
        let e = check_versions(&tools("tmux 2.6", "5.2"), "m").unwrap_err();
        assert_eq!(e.code, ErrorCode::TmuxTooOld);
        assert!(e.message.contains("2.6") && e.message.contains("3.0"));
        let e = check_versions(&tools("tmux 3.1c", "4.2.46(2)-release"), "m").unwrap_err();
        assert_eq!(e.code, ErrorCode::BashTooOld);
        assert!(check_versions(&tools("tmux master", "5.1"), "m").is_ok());
    }
}

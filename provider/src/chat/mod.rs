//! The chat helper: how a turn's command on the machine talks to the chat it came from.
//!
//! In every turn (shell and agent mode) the command's environment has `RR_CHAT`, the path of
//! `chat.sh` installed on the machine, and `RR_TURN_DIR`. `"$RR_CHAT" send TEXT` and
//! `"$RR_CHAT" tool JSON` leave a request in `$RR_TURN_DIR/chat/<n>/` and wait there for the
//! reply; the provider watches that directory during the turn, sends each request to the host
//! as one `outbound_message` or `session_tool` event, and writes the host's result back.
//! Everything about a call is on the machine, so a provider that restarts mid-call settles it
//! truthfully (see [`sweep`]).
//!
//! - [`call`]: one request read and checked, and the reply the helper replays.
//! - [`settle`]: results from the host to the calls waiting for them.
//! - [`turn`]: one turn's calls: watch, send, wait, and hold the `final` until all are settled.

pub mod call;
pub mod settle;
pub mod turn;

use std::sync::LazyLock;
use std::time::Duration;

use sha2::{Digest, Sha256};

use remote_runner_engine::error::Result;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::{Transport, shell_quote};

pub use settle::{Settlement, Settlements};
pub use turn::ChatTurn;

/// The helper, as installed on machines.
pub const CHAT_SCRIPT: &str = include_str!("chat.sh");

/// `chat-<first 16 hex digits of its sha256>.sh`: a new version never replaces one that a
/// running turn of an older build may still call.
pub static CHAT_NAME: LazyLock<String> = LazyLock::new(|| {
    let hash = Sha256::digest(CHAT_SCRIPT.as_bytes());
    let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("chat-{hex}.sh")
});

/// Where the helper lives for a session whose state directory is `<root>/sessions/<id>`:
/// `<root>/lib/chat-HASH.sh`, beside the control script.
pub fn script_path(session_state_dir: &str) -> String {
    let root = session_state_dir
        .trim_end_matches('/')
        .rsplitn(3, '/')
        .nth(2)
        .unwrap_or(session_state_dir);
    format!("{root}/lib/{}", *CHAT_NAME)
}

/// Install the helper at `path` unless it is there (written atomically, mode 0700).
pub async fn install(transport: &dyn Transport, path: &str) -> Result<()> {
    if transport.stat(path).await?.is_some() {
        return Ok(());
    }
    if let Some((dir, _)) = path.rsplit_once('/') {
        transport.create_dir_all(dir, 0o700).await?;
    }
    transport
        .write_file(path, CHAT_SCRIPT.as_bytes(), 0o700)
        .await
}

/// A new provider process took over a session (resume): close the chat of every earlier turn
/// and settle each call still waiting: one the old process had recorded may have reached the
/// host (exit 4, unknown), one it had not was never sent (exit 3).
pub async fn sweep(transport: &Remote, session_state_dir: &str) -> Result<()> {
    let script = script_path(session_state_dir);
    if transport.stat(&script).await?.is_none() {
        return Ok(()); // no turn of this version ever ran here
    }
    let line = format!(
        "exec /bin/sh {} __sweep {}",
        shell_quote(&script),
        shell_quote(session_state_dir)
    );
    remote_runner_engine::remote::sh(
        transport,
        &line,
        None,
        Some(Duration::from_secs(30)),
        64 * 1024,
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_sits_beside_the_control_script() {
        assert_eq!(
            script_path("/home/u/.local/state/remote-runner/sessions/s-1"),
            format!("/home/u/.local/state/remote-runner/lib/{}", *CHAT_NAME)
        );
        assert!(CHAT_NAME.starts_with("chat-") && CHAT_NAME.ends_with(".sh"));
    }
}

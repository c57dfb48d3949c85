//! unsupported: a command type protocol v1 does not have. The host's reference runner answers
//! it with `failure` / `unsupported_command`; whatever a provider answers, every event must be
//! of a v1 type, because the set of event types is closed and any other type is a protocol
//! error that kills the provider.

use remote_runner_protocol::FailureStatus;
use serde_json::json;

use super::handshake::must_refuse;
use super::{Level, Scenario, body, host_rules, plain_turn};
use crate::host::new_request_id;
use crate::track::Reply;
use crate::violation::Warning;

/// The code the host's reference runner answers an unknown command type with.
pub const UNSUPPORTED_COMMAND: &str = "unsupported_command";

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![Scenario {
        name: "unsupported_command",
        group: "unsupported",
        level: Level::Required,
        host_rule: host_rules::UNSUPPORTED,
        checks: "a command type protocol v1 does not have (with a requestId) is answered by a \
                 failure with that requestId, never by an event type v1 does not have; code \
                 unsupported_command, status failed, not retryable (another code or \
                 classification is a warning); the provider then runs a turn",
        run: body!(ctx => {
            let mut host = ctx.spawn()?;
            host.open().await?;
            let id = new_request_id("conformance");
            let mut line = json!({"protocol":"botmux.remote-runner","version":1,
                "type":"conformance_unsupported_command","requestId":id}).to_string().into_bytes();
            line.push(b'\n');
            host.send_raw(&line, Some(&id)).await?;
            let timeout = host.config().operation_timeout;
            let what = "command of a type protocol v1 does not have";
            let reply = host.wait_reply(&id, timeout, what).await?;
            must_refuse(what, &reply)?;
            if let Reply::Failure(f) = &reply
                && (f.code != UNSUPPORTED_COMMAND || f.status != FailureStatus::Failed || f.retryable)
                && let Ok(mut warnings) = ctx.warnings.lock()
            {
                warnings.push(Warning {
                    rule: "unsupported_command_answer".into(),
                    message: format!(
                        "the unknown command type was refused with code {:?}, status {:?}, \
                         retryable {} (the host's reference runner: {UNSUPPORTED_COMMAND:?}, \
                         failed, not retryable; the host does not read the code)",
                        f.code, f.status, f.retryable
                    ),
                    line: None,
                });
            }
            plain_turn(&mut host, 1).await?;
            ctx.finish(host).await;
            Ok(())
        }),
    }]
}

//! handshake and start: hello, capabilities, start → ready ordering.

use remote_runner_protocol::{Command, ModelBackendVariant, command_to_value};

use super::{Level, Scenario, body, host_rules, plain_turn, require};
use crate::host::{new_request_id, unexpected};
use crate::track::{Reply, RequestKind};
use crate::violation::{Stop, Violation, rule};

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "hello_default_capabilities",
            group: "handshake",
            level: Level::Required,
            host_rule: host_rules::HELLO,
            checks: "hello answered with the same requestId, a valid provider name and every \
                     default required capability (start resume turn cancel detach reattach status)",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "hello_nothing_required",
            group: "handshake",
            level: Level::Required,
            host_rule: host_rules::HELLO,
            checks: "hello with an empty requiredCapabilities list is answered the same way",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                match host.hello_with(Vec::new()).await? {
                    Reply::Hello(_) => {}
                    other => return Err(unexpected("hello", &other)),
                }
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "hello_additive_fields_ignored",
            group: "handshake",
            level: Level::Required,
            host_rule: host_rules::HELLO,
            checks: "a hello carrying an unknown extra field (a future additive field) is \
                     answered normally",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                let request_id = new_request_id("hello");
                let required: Vec<String> = Vec::new();
                let command = Command::Hello(remote_runner_protocol::HelloCommand {
                    request_id: request_id.clone(),
                    session_id: host.session_id.clone(),
                    required_capabilities: required.clone(),
                });
                let mut value = command_to_value(&command);
                if let Some(map) = value.as_object_mut() {
                    map.insert("conformanceFutureField".into(), serde_json::json!({"x": 1}));
                }
                let mut line = value.to_string().into_bytes();
                line.push(b'\n');
                host.track.sent(&request_id, RequestKind::Hello(required));
                host.send_raw(&line, None).await?;
                let timeout = host.config().handshake_timeout;
                match host.wait_reply(&request_id, timeout, "hello").await? {
                    Reply::Hello(_) => {}
                    other => return Err(unexpected("hello", &other)),
                }
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "silent_until_hello",
            group: "handshake",
            level: Level::Required,
            host_rule: host_rules::HELLO,
            checks: "nothing on stdout before the host's hello (the settle window), then a \
                     normal handshake",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                let settle = host.config().settle;
                host.listen(settle).await?;
                host.handshake().await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "start_ready",
            group: "start",
            level: Level::Required,
            host_rule: host_rules::READY,
            checks: "start answered by ready with the same requestId and a valid state whose \
                     provider matches hello; the provider then answers status",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                host.probe("start").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "start_with_model_hints",
            group: "start",
            level: Level::Required,
            host_rule: host_rules::READY,
            checks: "start with model, modelBackendVariant and reasoningEffort is answered by \
                     ready or a correlated failure; after ready a turn works",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                let mut command = host.start_command();
                command.model = Some("conformance-model".into());
                command.model_backend_variant = Some(ModelBackendVariant::Max);
                command.reasoning_effort = Some("high".into());
                match host.start_with(command).await? {
                    Reply::Ready(_) => plain_turn(&mut host, 1).await?,
                    Reply::Failure(_) => {}
                    other => return Err(unexpected("start", &other)),
                }
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "status_before_start",
            group: "start",
            level: Level::Required,
            host_rule: host_rules::READY,
            checks: "status after hello but before start is answered (any status value, or a \
                     correlated failure)",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                host.simple(RequestKind::AnyStatus).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "screens_after_start",
            group: "start",
            level: Level::Required,
            host_rule: host_rules::READY,
            checks: "with terminal_screen: screens after start carry the state's generation \
                     (never ahead) and increasing sequences",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                require(&host, "terminal_screen")?;
                host.start().await?;
                let settle = host.config().settle;
                host.listen(settle).await?;
                plain_turn(&mut host, 1).await?;
                host.listen(settle).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "start_state_is_persistable",
            group: "start",
            level: Level::Required,
            host_rule: host_rules::READY,
            checks: "the ready state survives the host's round trip: the same state sent back \
                     in a resume (reattach) to a new process is accepted at the same or a \
                     higher generation",
            run: body!(ctx => {
                let mut first = ctx.spawn()?;
                let state = first.open().await?;
                let detach = first.simple(RequestKind::Detach).await?;
                if let Reply::Failure(f) = detach {
                    return Err(crate::host::refused("detach", &f));
                }
                ctx.finish(first).await;
                let mut second = ctx.spawn()?;
                second.handshake().await?;
                match second.resume(state, None).await? {
                    Reply::Ready(_) => {}
                    Reply::Failure(f) => return Err(crate::host::refused("resume", &f)),
                    other => return Err(unexpected("resume", &other)),
                }
                ctx.finish(second).await;
                Ok(())
            }),
        },
    ]
}

/// A reply that must be a refusal (a correlated failure).
pub(super) fn must_refuse(what: &str, reply: &Reply) -> Result<(), Stop> {
    match reply {
        Reply::Failure(_) => Ok(()),
        _ => Err(Violation::new(
            rule::NOT_REFUSED,
            format!("the {what} was accepted"),
            format!("a failure correlated to the {what}'s requestId"),
        )
        .into()),
    }
}

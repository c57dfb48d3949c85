//! signals, and commands while a start is in flight.
//!
//! BotMux closes a session with `cancel`, waits for `status: closed`, then sends SIGTERM to the
//! provider without closing its stdin. A provider that only exits on stdin EOF is leaked, one
//! process per closed chat. These scenarios send the signal with stdin open in each state the
//! harness can reach with any provider.
//!
//! The in-flight scenarios send `status` and `cancel` right behind `start`: a provider whose
//! command loop waits on its engine answers neither until the start ends.

use std::time::Duration;

use remote_runner_protocol::{Command, RequestCommand};
use tokio::time::Instant;

use super::lifecycle::expect_status;
use super::{Level, Scenario, body, hold_turn, host_rules};
use crate::host::{Host, new_request_id};
use crate::track::{Reply, RequestKind};
use crate::violation::{Step, Stop, Violation, rule};

/// The bound for exiting after a signal (the host's rule has no grace of its own).
pub const SIGNAL_EXIT_BOUND: Duration = Duration::from_secs(1);
/// How soon `status` must be answered while a start is in flight ("a few milliseconds";
/// generous for loaded machines).
pub const IN_FLIGHT_REPLY_BOUND: Duration = Duration::from_millis(500);
/// How soon a `cancel` must end a start in flight (its ready or its failure).
pub const CANCEL_ENDS_START_BOUND: Duration = Duration::from_secs(1);

macro_rules! signal_scenario {
    ($name:literal, $signal:literal, $checks:literal, $host:ident => $setup:block) => {
        Scenario {
            name: $name,
            group: "signals",
            level: Level::Required,
            host_rule: host_rules::SIGNAL,
            checks: $checks,
            run: body!(ctx => {
                let mut $host = ctx.spawn()?;
                $setup
                $host.expect_exit_on_signal($signal, SIGNAL_EXIT_BOUND).await?;
                ctx.finish($host).await;
                Ok(())
            }),
        }
    };
}

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        signal_scenario!(
            "sigterm_before_hello",
            "TERM",
            "SIGTERM with stdin open before hello (after a status answer proves the provider \
             is up): exits within 1 s",
            host => {
                host.simple(RequestKind::AnyStatus).await?;
            }
        ),
        signal_scenario!(
            "sigterm_idle",
            "TERM",
            "SIGTERM with stdin open after start, no turn: exits within 1 s",
            host => {
                host.open().await?;
            }
        ),
        Scenario {
            name: "sigterm_mid_start",
            group: "signals",
            level: Level::Required,
            host_rule: host_rules::SIGNAL_MID_START,
            checks: "SIGTERM with stdin open right behind start, before its ready: exits within \
                     1 s, and whatever it wrote before exiting is whole, valid protocol lines",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                send_start(&mut host).await?;
                host.expect_exit_on_signal("TERM", SIGNAL_EXIT_BOUND).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        signal_scenario!(
            "sigterm_mid_turn",
            "TERM",
            "SIGTERM with stdin open while a turn runs: exits within 1 s",
            host => {
                host.open().await?;
                hold_turn(&mut host).await?;
            }
        ),
        signal_scenario!(
            "sigterm_after_cancel",
            "TERM",
            "the host's close: cancel, status closed, then SIGTERM with stdin open: exits \
             within 1 s",
            host => {
                host.open().await?;
                expect_status(host.simple(RequestKind::Cancel).await?, "cancel")?;
            }
        ),
        signal_scenario!(
            "sigterm_after_detach",
            "TERM",
            "SIGTERM with stdin open after detach: exits within 1 s",
            host => {
                host.open().await?;
                expect_status(host.simple(RequestKind::Detach).await?, "detach")?;
            }
        ),
        Scenario {
            name: "sigint_and_sighup_idle",
            group: "signals",
            level: Level::Recommended,
            host_rule: "not sent by the host (it sends SIGTERM); SIGINT and SIGHUP come from a \
                        terminal or a supervisor",
            checks: "SIGINT, and SIGHUP, with stdin open after start: each exits within 1 s",
            run: body!(ctx => {
                for signal in ["INT", "HUP"] {
                    let mut host = ctx.spawn()?;
                    host.open().await?;
                    host.expect_exit_on_signal(signal, SIGNAL_EXIT_BOUND).await?;
                    ctx.finish(host).await;
                }
                Ok(())
            }),
        },
        Scenario {
            name: "status_during_start",
            group: "start",
            level: Level::Recommended,
            host_rule: host_rules::START_IN_FLIGHT,
            checks: "status sent right behind start is answered within 500 ms, not held until \
                     the start ends",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                let start = send_start(&mut host).await?;
                let status = send_request(&mut host, "status", Command::Status, RequestKind::AnyStatus).await?;
                match host.wait_reply(&status, IN_FLIGHT_REPLY_BOUND, "status").await {
                    Ok(reply) => expect_status(reply, "status")?,
                    Err(Stop::Fail(v)) if v.rule == rule::REPLY_TIMEOUT => {
                        return Err(Violation::new(
                            rule::REPLY_WAITED_ON_START,
                            format!(
                                "status got no answer within {} ms while a start was in flight",
                                IN_FLIGHT_REPLY_BOUND.as_millis()
                            ),
                            "status answered at once while the start runs (a command loop that \
                             does not wait on the engine)",
                        )
                        .into());
                    }
                    Err(other) => return Err(other),
                }
                let handshake = host.config().handshake_timeout;
                host.wait_reply(&start, handshake, "start").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "cancel_during_start",
            group: "start",
            level: Level::Recommended,
            host_rule: host_rules::START_IN_FLIGHT,
            checks: "cancel sent right behind start ends the start within 1 s (its ready, or a \
                     failure for its requestId) and is answered by status closed",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                let start = send_start(&mut host).await?;
                let cancel = send_request(&mut host, "cancel", Command::Cancel, RequestKind::Cancel).await?;
                let sent = Instant::now();
                let handshake = host.config().handshake_timeout;
                match host.wait_reply(&start, handshake, "start").await? {
                    Reply::Ready(_) | Reply::Failure(_) => {}
                    other => return Err(crate::host::unexpected("start", &other)),
                }
                let took = sent.elapsed();
                if took > CANCEL_ENDS_START_BOUND {
                    return Err(Violation::new(
                        rule::START_NOT_ENDED_BY_CANCEL,
                        format!("the start was answered {} ms after the cancel", took.as_millis()),
                        format!("a cancel ends a start in flight within {} ms (a failure for the start's requestId)", CANCEL_ENDS_START_BOUND.as_millis()),
                    ).into());
                }
                let timeout = host.config().operation_timeout;
                expect_status(host.wait_reply(&cancel, timeout, "cancel").await?, "cancel")?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
    ]
}

/// Sends `start` without waiting; returns its requestId.
async fn send_start(host: &mut Host) -> Step<String> {
    let command = host.start_command();
    let request_id = command.request_id.clone();
    host.send(&Command::Start(command), Some(RequestKind::Start))
        .await?;
    Ok(request_id)
}

/// Sends a request-only command without waiting; returns its requestId.
async fn send_request(
    host: &mut Host,
    prefix: &str,
    make: fn(RequestCommand) -> Command,
    kind: RequestKind,
) -> Result<String, Stop> {
    let request_id = new_request_id(prefix);
    let command = make(RequestCommand {
        request_id: request_id.clone(),
    });
    host.send(&command, Some(kind)).await?;
    Ok(request_id)
}

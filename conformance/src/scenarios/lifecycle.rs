//! turn, pre_ack, busy, cancel, detach and eof: the turn lifecycle and the close paths.

use remote_runner_protocol::{Command, SenderType, TrustedCaller, TurnCommand};

use super::{Level, Scenario, body, echo, expect_final, hold_turn, host_rules, plain_turn};
use crate::host::{Submitted, new_request_id, refused, unexpected};
use crate::track::{Reply, RequestKind};
use crate::violation::{Stop, Violation, rule};

fn refusal_expected(what: &str, submitted: &Submitted) -> Result<(), Stop> {
    match submitted {
        Submitted::Refused(_) => Ok(()),
        Submitted::Acked => Err(Violation::new(
            rule::NOT_REFUSED,
            format!("the {what} was ACKed"),
            "a pre-ACK failure carrying the turn's requestId",
        )
        .into()),
    }
}

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        // ---- turn ----
        Scenario {
            name: "turn_ack_then_final",
            group: "turn",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a turn gets exactly one busy ACK, progress only after it, then a final \
                     (state and usage on the final follow the state rules)",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "turn_three_in_a_row",
            group: "turn",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "three turns one after the other each ACK once and end with a final",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                for n in 1..=3 {
                    plain_turn(&mut host, n).await?;
                }
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "turn_multiline_output",
            group: "turn",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a turn printing several lines streams and ends like any other",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let content = "printf 'conformance-a\\nconformance-b\\nconformance-c\\n'";
                let (_, end) = host.run_turn(content).await?;
                expect_final(&end, content)?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "turn_unicode_content",
            group: "turn",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a turn with non-ASCII and quoted content is accepted and ends with a final",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let content = "echo \"conformance-ünïcødé ✓ 漢字\"";
                let (_, end) = host.run_turn(content).await?;
                expect_final(&end, content)?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "turn_large_content",
            group: "turn",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a 16 KiB turn is accepted and ends",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let content = format!("echo conformance-{}", "x".repeat(16 * 1024));
                let (_, end) = host.run_turn(&content).await?;
                expect_final(&end, "echo conformance-xxx…")?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "turn_trusted_caller",
            group: "turn",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a turn carrying trustedCaller is accepted and ends",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let turn_id = host.new_turn_id();
                let command = Command::Turn(TurnCommand {
                    request_id: new_request_id("turn"),
                    turn_id: turn_id.clone(),
                    content: echo(1),
                    trusted_caller: Some(TrustedCaller {
                        request_user_open_id: Some("ou_conformance".into()),
                        request_lark_app_id: Some("cli_conformance".into()),
                        sender_type: Some(SenderType::User),
                        ..TrustedCaller::default()
                    }),
                });
                if let Submitted::Refused(f) = host.submit_command(command).await? {
                    return Err(refused("turn", &f));
                }
                let end = host.finish(&turn_id).await?;
                expect_final(&end, &echo(1))?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "turn_empty_content",
            group: "turn",
            level: Level::Recommended,
            host_rule: host_rules::TURN,
            checks: "a turn with empty content gets an ACK and an end, or a correlated pre-ACK \
                     failure; the provider stays usable",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let (turn_id, submitted) = host.submit("").await?;
                if let Submitted::Acked = submitted {
                    host.finish(&turn_id).await?;
                }
                plain_turn(&mut host, 2).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        // ---- pre_ack ----
        Scenario {
            name: "turn_before_start_refused",
            group: "pre_ack",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a turn before start gets a correlated pre-ACK failure (requestId echoed); \
                     start and a turn then work",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                let (_, submitted) = host.submit(&echo(1)).await?;
                refusal_expected("turn before start", &submitted)?;
                host.start().await?;
                plain_turn(&mut host, 2).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "turn_after_detach_refused",
            group: "pre_ack",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a turn while detached gets a correlated pre-ACK failure; after reattach \
                     turns work again",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                expect_status(host.simple(RequestKind::Detach).await?, "detach")?;
                let (_, submitted) = host.submit(&echo(1)).await?;
                refusal_expected("turn while detached", &submitted)?;
                expect_status(host.simple(RequestKind::Reattach).await?, "reattach")?;
                plain_turn(&mut host, 2).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "refused_turn_does_not_poison",
            group: "pre_ack",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "after a refused turn, two more turns run normally (no left-over state)",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                let (_, submitted) = host.submit(&echo(1)).await?;
                refusal_expected("turn before start", &submitted)?;
                host.start().await?;
                plain_turn(&mut host, 2).await?;
                plain_turn(&mut host, 3).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        // ---- busy ----
        Scenario {
            name: "second_turn_while_busy_refused",
            group: "busy",
            level: Level::Required,
            host_rule: host_rules::TURN,
            checks: "a second turn while one runs (the host never does this) gets a correlated \
                     pre-ACK failure, never a second ACK; the first turn still ends",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let first = hold_turn(&mut host).await?;
                let (second, submitted) = host.submit(&echo(2)).await?;
                if let Submitted::Acked = submitted {
                    host.finish(&second).await?;
                }
                host.release_results();
                host.finish(&first).await?;
                plain_turn(&mut host, 3).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "status_while_busy",
            group: "busy",
            level: Level::Recommended,
            host_rule: host_rules::TURN,
            checks: "status during a running turn is answered; the turn then ends normally",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let turn = hold_turn(&mut host).await?;
                host.simple(RequestKind::AnyStatus).await?;
                host.release_results();
                host.finish(&turn).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        // ---- cancel ----
        Scenario {
            name: "cancel_idle",
            group: "cancel",
            level: Level::Required,
            host_rule: host_rules::CANCEL,
            checks: "cancel after start is answered by status closed",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                expect_status(host.simple(RequestKind::Cancel).await?, "cancel")?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "cancel_after_turn",
            group: "cancel",
            level: Level::Required,
            host_rule: host_rules::CANCEL,
            checks: "cancel after a finished turn is answered by status closed",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                plain_turn(&mut host, 1).await?;
                expect_status(host.simple(RequestKind::Cancel).await?, "cancel")?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "cancel_during_turn",
            group: "cancel",
            level: Level::Required,
            host_rule: host_rules::CANCEL,
            checks: "cancel while a turn runs is answered by status closed; the turn may end \
                     with a failure carrying its turnId",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                hold_turn(&mut host).await?;
                expect_status(host.simple(RequestKind::Cancel).await?, "cancel")?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "cancel_before_start",
            group: "cancel",
            level: Level::Required,
            host_rule: host_rules::CANCEL,
            checks: "cancel right after hello is answered (closed, or a correlated failure)",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                host.simple(RequestKind::Cancel).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        // ---- detach ----
        Scenario {
            name: "detach_then_reattach",
            group: "detach",
            level: Level::Required,
            host_rule: host_rules::DETACH,
            checks: "detach → status detached, reattach → status ready, then a turn works",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                expect_status(host.simple(RequestKind::Detach).await?, "detach")?;
                expect_status(host.simple(RequestKind::Reattach).await?, "reattach")?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "detach_after_turn",
            group: "detach",
            level: Level::Required,
            host_rule: host_rules::DETACH,
            checks: "after a finished turn: detach, reattach, and another turn",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                plain_turn(&mut host, 1).await?;
                expect_status(host.simple(RequestKind::Detach).await?, "detach")?;
                expect_status(host.simple(RequestKind::Reattach).await?, "reattach")?;
                plain_turn(&mut host, 2).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "reattach_without_detach_refused",
            group: "detach",
            level: Level::Required,
            host_rule: host_rules::DETACH,
            checks: "reattach without a detach gets a correlated failure (or status ready); \
                     the provider stays usable",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                host.simple(RequestKind::Reattach).await?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "detach_twice_cycle",
            group: "detach",
            level: Level::Required,
            host_rule: host_rules::DETACH,
            checks: "two detach/reattach cycles in a row each get their own answers",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                for _ in 0..2 {
                    expect_status(host.simple(RequestKind::Detach).await?, "detach")?;
                    expect_status(host.simple(RequestKind::Reattach).await?, "reattach")?;
                }
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        // ---- eof ----
        Scenario {
            name: "eof_before_hello",
            group: "eof",
            level: Level::Required,
            host_rule: host_rules::EOF,
            checks: "stdin closed before any command: the provider exits in bounded time",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.expect_exit_on_eof().await
            }),
        },
        Scenario {
            name: "eof_after_hello",
            group: "eof",
            level: Level::Required,
            host_rule: host_rules::EOF,
            checks: "stdin closed after the handshake: the provider exits in bounded time",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                host.expect_exit_on_eof().await
            }),
        },
        Scenario {
            name: "eof_after_turn",
            group: "eof",
            level: Level::Required,
            host_rule: host_rules::EOF,
            checks: "stdin closed after a finished turn: the provider exits in bounded time",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                plain_turn(&mut host, 1).await?;
                host.expect_exit_on_eof().await
            }),
        },
        Scenario {
            name: "eof_after_detach",
            group: "eof",
            level: Level::Required,
            host_rule: host_rules::EOF,
            checks: "stdin closed after detach (daemon shutdown): the provider exits in bounded time",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                expect_status(host.simple(RequestKind::Detach).await?, "detach")?;
                host.expect_exit_on_eof().await
            }),
        },
        Scenario {
            name: "eof_during_turn",
            group: "eof",
            level: Level::Required,
            host_rule: host_rules::EOF,
            checks: "stdin closed while a turn runs: the provider exits in bounded time",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                hold_turn(&mut host).await?;
                host.expect_exit_on_eof().await
            }),
        },
    ]
}

/// Requires a status reply (its value was already checked against the command).
pub(super) fn expect_status(reply: Reply, what: &str) -> Result<(), Stop> {
    match reply {
        Reply::Status(_) => Ok(()),
        Reply::Failure(f) => Err(refused(what, &f)),
        other => Err(unexpected(what, &other)),
    }
}

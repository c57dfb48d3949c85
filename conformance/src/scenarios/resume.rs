//! resume: a state from a previous process, reattach and rebuild.

use remote_runner_protocol::{ResumeMode, State};

use super::handshake::must_refuse;
use super::lifecycle::expect_status;
use super::{Ctx, Level, Scenario, body, host_rules, plain_turn};
use crate::host::{Host, refused, unexpected};
use crate::track::{Reply, RequestKind};
use crate::violation::{Step, Violation};

/// Runs a first process: start, one turn, then `close` (detach or cancel). Returns its
/// last state, as the host would have persisted it.
async fn previous_run(ctx: &Ctx, close: RequestKind) -> Step<State> {
    let mut host = ctx.spawn()?;
    host.open().await?;
    plain_turn(&mut host, 1).await?;
    let what = if close == RequestKind::Cancel {
        "cancel"
    } else {
        "detach"
    };
    expect_status(host.simple(close).await?, what)?;
    let state = persisted(&host)?;
    ctx.finish(host).await;
    Ok(state)
}

fn persisted(host: &Host) -> Step<State> {
    host.track.state().cloned().ok_or_else(|| {
        Violation::new(
            crate::violation::rule::NO_STATE_YET,
            "no state after start",
            "a ready carrying a state",
        )
        .into()
    })
}

/// A second process resumes `state` with `mode`; returns the new host and its ready state.
async fn resumed(ctx: &Ctx, state: State, mode: Option<ResumeMode>) -> Step<(Host, State)> {
    let mut host = ctx.spawn()?;
    host.handshake().await?;
    let ready = match host.resume(state, mode).await? {
        Reply::Ready(ready) => ready.state,
        Reply::Failure(f) => return Err(refused("resume", &f)),
        other => return Err(unexpected("resume", &other)),
    };
    // Listen a moment: a screen of a newly raised generation here is an error.
    let settle = host.config().settle;
    host.listen(settle).await?;
    Ok((host, ready))
}

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "resume_reattach_after_detach",
            group: "resume",
            level: Level::Required,
            host_rule: host_rules::STATE,
            checks: "a new process resumes (resumeMode reattach) the state of a detached run: \
                     ready with the same requestId, generation not lower, agentThreadId kept; \
                     a turn then works",
            run: body!(ctx => {
                let state = previous_run(&ctx, RequestKind::Detach).await?;
                let (mut host, _) = resumed(&ctx, state, Some(ResumeMode::Reattach)).await?;
                plain_turn(&mut host, 2).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "resume_default_mode",
            group: "resume",
            level: Level::Required,
            host_rule: host_rules::STATE,
            checks: "resume without resumeMode behaves as reattach",
            run: body!(ctx => {
                let state = previous_run(&ctx, RequestKind::Detach).await?;
                let (mut host, _) = resumed(&ctx, state, None).await?;
                plain_turn(&mut host, 2).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "resume_rebuild_after_cancel",
            group: "resume",
            level: Level::Required,
            host_rule: host_rules::STATE,
            checks: "rebuild of a cancelled run raises the generation, keeps agentThreadId, \
                     sends no screen of the new generation before the host's next command; \
                     turns then run at the new generation",
            run: body!(ctx => {
                let state = previous_run(&ctx, RequestKind::Cancel).await?;
                let (mut host, _) = resumed(&ctx, state, Some(ResumeMode::Rebuild)).await?;
                plain_turn(&mut host, 2).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "resume_rebuild_twice",
            group: "resume",
            level: Level::Required,
            host_rule: host_rules::STATE,
            checks: "two rebuilds in a row raise the generation each time",
            run: body!(ctx => {
                let state = previous_run(&ctx, RequestKind::Cancel).await?;
                let (mut host, _) = resumed(&ctx, state, Some(ResumeMode::Rebuild)).await?;
                plain_turn(&mut host, 2).await?;
                expect_status(host.simple(RequestKind::Cancel).await?, "cancel")?;
                let state = persisted(&host)?;
                ctx.finish(host).await;
                let (mut host, _) = resumed(&ctx, state, Some(ResumeMode::Rebuild)).await?;
                plain_turn(&mut host, 3).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "resume_rebuild_then_detach_reattach",
            group: "resume",
            level: Level::Required,
            host_rule: host_rules::STATE,
            checks: "after a rebuild, detach and a reattach resume keep the new generation",
            run: body!(ctx => {
                let state = previous_run(&ctx, RequestKind::Cancel).await?;
                let (mut host, _) = resumed(&ctx, state, Some(ResumeMode::Rebuild)).await?;
                expect_status(host.simple(RequestKind::Detach).await?, "detach")?;
                let state = persisted(&host)?;
                ctx.finish(host).await;
                let (mut host, _) = resumed(&ctx, state, Some(ResumeMode::Reattach)).await?;
                plain_turn(&mut host, 3).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "resume_foreign_provider_refused",
            group: "resume",
            level: Level::Required,
            host_rule: host_rules::STATE,
            checks: "resume with a state of another provider gets a correlated failure (a \
                     ready adopting it would break the provider-match rule)",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.handshake().await?;
                let state = State::new("conformance-foreign-provider", 4)
                    .with_remote_session_id("conformance-foreign:1");
                let reply = host.resume(state, None).await?;
                must_refuse("resume of a foreign state", &reply)?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
    ]
}

//! terminal: input and resize for the current, a future and a stale generation; screens.

use remote_runner_protocol::{Command, TerminalInputCommand, TerminalResizeCommand};

use super::handshake::must_refuse;
use super::{Level, Scenario, body, host_rules, plain_turn, require};
use crate::host::{Host, new_request_id, unexpected};
use crate::track::Reply;
use crate::violation::{Step, Stop};

/// Which generation a terminal command names, relative to the state's.
#[derive(Debug, Clone, Copy)]
enum Target {
    Current,
    Future,
    Stale,
}

fn generation_for(host: &Host, target: Target) -> Step<u64> {
    let current = host.track.state().map_or(0, |s| s.generation);
    match target {
        Target::Current => Ok(current),
        Target::Future => Ok(current + 1),
        Target::Stale => current.checked_sub(1).ok_or_else(|| {
            Stop::NotApplicable("the state is at generation 0; no older generation exists".into())
        }),
    }
}

async fn terminal_input(host: &mut Host, target: Target) -> Step<Reply> {
    let generation = generation_for(host, target)?;
    let command = Command::TerminalInput(TerminalInputCommand {
        request_id: new_request_id("terminal-input"),
        generation,
        data: "echo conformance-input\r".into(),
    });
    host.request(command, "terminal_input").await
}

async fn terminal_resize(host: &mut Host, target: Target) -> Step<Reply> {
    let generation = generation_for(host, target)?;
    let command = Command::TerminalResize(TerminalResizeCommand {
        request_id: new_request_id("terminal-resize"),
        generation,
        cols: 100,
        rows: 30,
    });
    host.request(command, "terminal_resize").await
}

async fn opened(ctx: &super::Ctx, capability: &str) -> Step<Host> {
    let mut host = ctx.spawn()?;
    host.handshake().await?;
    require(&host, capability)?;
    host.start().await?;
    Ok(host)
}

fn status_expected(what: &str, reply: &Reply) -> Step<()> {
    match reply {
        Reply::Status(_) => Ok(()),
        other => Err(unexpected(what, other)),
    }
}

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "terminal_input_current_generation",
            group: "terminal",
            level: Level::Required,
            host_rule: host_rules::TERMINAL,
            checks: "with terminal_input: input for the current generation is answered by a \
                     status with its requestId; a turn still works",
            run: body!(ctx => {
                let mut host = opened(&ctx, "terminal_input").await?;
                let reply = terminal_input(&mut host, Target::Current).await?;
                status_expected("terminal_input", &reply)?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "terminal_input_future_generation_refused",
            group: "terminal",
            level: Level::Required,
            host_rule: host_rules::TERMINAL,
            checks: "with terminal_input: input for a future generation gets a correlated failure",
            run: body!(ctx => {
                let mut host = opened(&ctx, "terminal_input").await?;
                let reply = terminal_input(&mut host, Target::Future).await?;
                must_refuse("terminal_input for a future generation", &reply)?;
                host.probe("a refused terminal_input").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "terminal_input_stale_generation_refused",
            group: "terminal",
            level: Level::Required,
            host_rule: host_rules::TERMINAL,
            checks: "with terminal_input: input for an older generation gets a correlated failure",
            run: body!(ctx => {
                let mut host = opened(&ctx, "terminal_input").await?;
                let reply = terminal_input(&mut host, Target::Stale).await?;
                must_refuse("terminal_input for a stale generation", &reply)?;
                host.probe("a refused terminal_input").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "terminal_resize_current_generation",
            group: "terminal",
            level: Level::Required,
            host_rule: host_rules::TERMINAL,
            checks: "with terminal_resize: a resize for the current generation is answered by \
                     a status; later screens keep valid sizes",
            run: body!(ctx => {
                let mut host = opened(&ctx, "terminal_resize").await?;
                let reply = terminal_resize(&mut host, Target::Current).await?;
                status_expected("terminal_resize", &reply)?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "terminal_resize_future_generation_refused",
            group: "terminal",
            level: Level::Required,
            host_rule: host_rules::TERMINAL,
            checks: "with terminal_resize: a resize for a future generation gets a correlated failure",
            run: body!(ctx => {
                let mut host = opened(&ctx, "terminal_resize").await?;
                let reply = terminal_resize(&mut host, Target::Future).await?;
                must_refuse("terminal_resize for a future generation", &reply)?;
                host.probe("a refused terminal_resize").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "terminal_resize_stale_generation_refused",
            group: "terminal",
            level: Level::Required,
            host_rule: host_rules::TERMINAL,
            checks: "with terminal_resize: a resize for an older generation gets a correlated failure",
            run: body!(ctx => {
                let mut host = opened(&ctx, "terminal_resize").await?;
                let reply = terminal_resize(&mut host, Target::Stale).await?;
                must_refuse("terminal_resize for a stale generation", &reply)?;
                host.probe("a refused terminal_resize").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "terminal_screens_during_turns",
            group: "terminal",
            level: Level::Required,
            host_rule: host_rules::TERMINAL,
            checks: "with terminal_screen: screens around turns and input are never ahead of \
                     the state's generation (older generations and repeated sequences are \
                     reported as warnings, as the host ignores them)",
            run: body!(ctx => {
                let mut host = opened(&ctx, "terminal_screen").await?;
                plain_turn(&mut host, 1).await?;
                if host.track.has_capability("terminal_input") {
                    let reply = terminal_input(&mut host, Target::Current).await?;
                    status_expected("terminal_input", &reply)?;
                }
                plain_turn(&mut host, 2).await?;
                let settle = host.config().settle;
                host.listen(settle).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
    ]
}

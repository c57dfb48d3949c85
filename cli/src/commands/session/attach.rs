//! `session attach`: the session's tmux in this terminal.
//!
//! The process becomes the tmux client (`exec`) of the engine's attach plan
//! ([`attach_plan`]), so the terminal, signals and the exit status belong to tmux; detaching
//! (Ctrl-b d) ends the client and leaves the session running. The OpenSSH client authenticates
//! with keys or ssh-agent; for a password machine it asks for the password itself
//! (remote-runner never hands its stored password to another program).

use std::io::IsTerminal;
use std::os::unix::process::CommandExt;
use std::process::Command;

use remote_runner_engine::engine::SessionStatus;
use remote_runner_engine::engine::attach::attach_plan;
use remote_runner_engine::{Error, ErrorCode, Result};

use super::SessionArg;
use crate::context::Context;
use crate::output::Report;

pub fn attach(ctx: &Context, args: SessionArg) -> Result<Report> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(Error::invalid(format!(
            "session attach needs a terminal (stdin and stdout must be a TTY); run it from an \
             interactive shell. To follow the session from a script use `remote-runner session \
             read --session {} --json`",
            args.session
        )));
    }
    let wired = ctx.engine()?;
    let session = wired.engine.session_show(&args.session)?;
    if session.status != SessionStatus::Active {
        return Err(Error::new(
            ErrorCode::SessionLost,
            format!(
                "session {} is {}; only an active session can be attached. Its transcript is \
                 still readable: remote-runner session read --session {}",
                session.session_id,
                session.status.as_str(),
                session.session_id
            ),
        ));
    }
    let machine = wired.machine(&session.machine_id)?;
    let plan = attach_plan(&machine, &session, ctx.timeout);
    if plan.asks_password {
        ctx.out.note(&format!(
            "machine {} uses a password: ssh will ask for it (remote-runner never passes its \
             stored password to another program; add a key to attach without typing it)",
            machine.machine_id
        ));
    }
    let mut command = Command::new(&plan.argv[0]);
    command.args(&plan.argv[1..]);
    for name in &plan.env_remove {
        command.env_remove(name);
    }
    let program = command.get_program().to_string_lossy().into_owned();
    let err = command.exec();
    let hint = if machine.is_local() {
        "is tmux still installed? (apt-get install tmux)"
    } else {
        "attaching to an SSH machine needs the OpenSSH client: apt-get install openssh-client"
    };
    Err(Error::io(format!("cannot run {program}; {hint}"), &err))
}

//! The `botmux-remote-runner` provider: the BotMux remote-runner protocol v1 on stdin/stdout
//! ([`server`]), and the chat calls a turn's agent makes back into it ([`chat`]), over the
//! remote-runner engine (`remote_runner_engine`).

pub mod chat;
pub mod server;

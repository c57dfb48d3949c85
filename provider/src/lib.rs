//! The remote-runner engine: one execution engine for remote Linux machines over SSH + tmux.
//!
//! Faces: the `botmux-remote-runner` provider (module [`server`]) and the `remote-runner` CLI
//! (a separate crate) both call into [`engine`]. The engine reaches machines only through the
//! [`transport::Transport`] trait (SSH or local) and keeps records in [`store`].

pub mod chat;
pub mod connect;
pub mod engine;
pub mod error;
pub mod hint;
pub mod keeper;
pub mod machine;
pub mod records;
pub mod remote;
pub mod secret;
pub mod server;
pub mod slurm;
pub mod ssh;
pub mod store;
pub mod tmux;
pub mod transport;
pub mod util;

pub use error::{Error, ErrorCode, Result};

//! The remote-runner engine: one execution engine for remote Linux machines over SSH + tmux.
//!
//! Faces (the `botmux-remote-runner` provider, the `remote-runner` CLI and its MCP server,
//! `seed-runner`) are separate crates that call into [`engine`]. The engine reaches machines only
//! through the [`transport::Transport`] trait (SSH or local) and keeps records in [`store`].

pub mod connect;
pub mod engine;
pub mod error;
pub mod hint;
pub mod keeper;
pub mod machine;
pub mod records;
pub mod remote;
pub mod secret;
pub mod slurm;
pub mod ssh;
pub mod store;
pub mod tmux;
pub mod transport;
pub mod util;

pub use error::{Error, ErrorCode, Result};

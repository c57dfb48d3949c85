//! The remote-runner engine: one execution engine for remote Linux machines over SSH + tmux.
//!
//! Faces (the `botmux-remote-runner` provider, the `remote-runner` CLI and its MCP server,
//! `seed-runner`) are separate crates that call into [`engine`]. The engine reaches machines only
//! through a [`remote::Remote`]: a byte transport ([`transport::Transport`]: SSH, local, the
//! CLI's keeper, a Slurm node) and the control plane its calls take ([`remote::ControlPlane`]);
//! it keeps records in [`store`].

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

//! The remote-runner engine: one execution engine for remote Linux machines over SSH + tmux.
//!
//! Every face (the `botmux-remote-runner` provider, the `remote-runner` CLI and its MCP server,
//! `seed-runner`) is a crate of its own that uses this API and nothing else:
//!
//! - **Open** the engine on a state directory: [`engine::Engine::open`] with
//!   [`engine::OpenOptions`] (connection keepers on or off, how a key's passphrase is obtained,
//!   the connect bound, an ad-hoc machine).
//! - **Machines**: [`engine::Machines`] (list, show, add, replace, configure, remove with its
//!   rules, [`engine::Machines::doctor`]); [`machine::Machine`] is a machine's configuration.
//! - **Sessions and commands**: `Engine::create_session`, `exec` ([`engine::ExecRequest`]),
//!   `command_wait`, `command_stop`, output by byte offset, [`engine::send`] (typing into a
//!   running program), the transcript, `destroy`, [`engine::attach`] plans.
//! - **Files**: [`engine::transfer`] (files and trees, sha256-verified) and
//!   `Engine::session_file_read` / `session_file_write`.
//! - **Runs**: [`engine::run`] (one command with inputs and artifacts), [`engine::batch`],
//!   [`engine::slurm`]; **code runs**: `Engine::code_runtime` ([`engine::code`]).
//! - **Records and errors**: [`records`] (the JSON shapes every face prints), [`Error`] with its
//!   stable [`ErrorCode`] and a typed [`hint::Hint`] that each face words itself, and
//!   [`secret::Secret`] (never printed).
//!
//! How machines are reached (SSH, this host, the CLI's connection keeper, a Slurm node; the
//! byte transport and the control plane above it), where records are kept (SQLite) and the
//! remote scripts are private; `docs/architecture.md` describes them. The `testing` feature
//! makes them public for the engine's own tests, the benchmarks and the reliability tools.

pub mod engine;
pub mod error;
pub mod hint;
pub mod machine;
pub mod records;
pub mod secret;

pub use error::{Error, ErrorCode, Result};

/// The engine's internals: public only with the `testing` feature (the engine's own integration
/// tests, the benchmarks and the reliability tools), private to every face, so a face that
/// reaches for one does not compile. Without the feature, the items only tests and benchmarks
/// use (probes, test-only constructors and re-exports) are unused: that is allowed here rather
/// than at each of them.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "testing")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "testing"))]
        #[allow(dead_code, unused_imports)]
        mod $name;
    )*};
}

internal_modules!(
    connect, keeper, remote, shell, slurm, ssh, store, tmux, transport, util
);

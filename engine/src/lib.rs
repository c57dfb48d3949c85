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
//! - **Sessions and commands**: [`Engine::create_session`](engine::Engine::create_session),
//!   [`exec`](engine::Engine::exec) ([`engine::ExecRequest`]),
//!   [`command_wait`](engine::Engine::command_wait),
//!   [`command_stop`](engine::Engine::command_stop), output by byte offset
//!   ([`read_output`](engine::Engine::read_output)), [`engine::send`] (typing into a running
//!   program), the transcript ([`read`](engine::Engine::read)),
//!   [`destroy`](engine::Engine::destroy), [`engine::attach`] plans.
//! - **Files**: [`engine::transfer`] ([`file_put`](engine::Engine::file_put) and
//!   [`file_get`](engine::Engine::file_get): files and trees, sha256-verified, cancelled by a
//!   [`CancellationToken`]) and [`session_file_read`](engine::Engine::session_file_read) /
//!   [`session_file_write`](engine::Engine::session_file_write) (bytes by offset).
//! - **Runs**: [`engine::run`] (one command with inputs and artifacts), [`engine::batch`],
//!   [`engine::slurm`]; **code runs**: [`Engine::code_runtime`](engine::Engine::code_runtime)
//!   ([`engine::code`]).
//! - **Records and errors**: [`records`] (the JSON shapes every face prints), [`Error`] with its
//!   stable [`ErrorCode`] and a typed [`hint::Hint`] that each face words itself, and
//!   [`secret::Secret`] (never printed). Enums that grow (error codes, hints, statuses) are
//!   `#[non_exhaustive]`: a face's `match` keeps a fallback arm.
//!
//! # A first face
//!
//! Open the engine, start a session on the built-in `local` machine (this host), run a command
//! and destroy the session; every error has a stable code and, often, a next step. The
//! workspace's `examples/engine-tour` is the whole tour (shell state, exit codes, files),
//! compiled and run by its tests.
//!
//! ```no_run
//! use remote_runner_engine::engine::{Engine, ExecRequest, OpenOptions};
//!
//! # async fn tour() -> remote_runner_engine::Result<()> {
//! let engine = Engine::open(std::path::Path::new("/tmp/rr-state"), OpenOptions::default())?;
//! let machine = engine.machine("local")?;
//! let session = engine.create_session(&machine, Some("/tmp")).await?;
//! let record = engine.exec(&session.session_id, "uname -r", ExecRequest::wait()).await?;
//! println!("{:?}, exit code {:?}: {}", record.status, record.exit_code, record.stdout);
//! engine.destroy(&session.session_id).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Runtime
//!
//! The engine's calls are `async` and need a [tokio](https://docs.rs/tokio) runtime with I/O
//! and time enabled (`#[tokio::main]`, or a `Builder` with `enable_all`). Either flavour works:
//! on a multi-thread runtime the store's (SQLite) calls leave the worker thread through
//! `block_in_place`; on a current-thread one they run inline. The engine tour runs on both in
//! its tests. [`Engine`](engine::Engine) is `Send + Sync`: share one behind an `Arc`.
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
/// The cancellation token of [`engine::transfer::TransferOptions::cancel`] and
/// [`engine::Engine::run_once`], re-exported so a face need not name `tokio-util` itself.
pub use tokio_util::sync::CancellationToken;

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

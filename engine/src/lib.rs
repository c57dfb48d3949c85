//! The remote-runner engine: one execution engine for remote Linux machines over SSH + tmux.
//!
//! Faces (the `botmux-remote-runner` provider, the `remote-runner` CLI and its MCP server,
//! `seed-runner`) are separate crates that call into [`engine`]. The engine reaches machines only
//! through a [`remote::Remote`]: a byte transport ([`transport::Transport`]: SSH, local, the
//! CLI's keeper, a Slurm node) and the control plane its calls take ([`remote::ControlPlane`]);
//! it keeps records in [`store`].

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

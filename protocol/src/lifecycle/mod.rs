//! The protocol's lifecycle rules as sans-IO state machines, one for each side. They do no
//! I/O and know nothing of an engine or a transport: feed them what happened, ask them what is
//! allowed.
//!
//! - [`provider`]: what a provider may accept next and what it must refuse (with which code);
//!   used by `botmux-remote-runner` and the reference provider.
//! - [`host`]: what the host accepts from a provider next (request/reply correlation, turn
//!   phases and overlap, state application, terminal screens, host-executed operations); used
//!   by the conformance harness's tracker.

pub mod host;
pub mod provider;

pub use provider::{ProviderLifecycle, Refusal, capabilities, capabilities_with};

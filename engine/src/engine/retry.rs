//! The engine's retry policy for a face's own loops over engine calls (a provider turn's output
//! stream, its chat calls): [`LINK`] retries a dropped or stalled link ([`is_link_error`]). The
//! outermost [`run`] in a task owns the retrying; the engine's own retries inside it run once
//! (see "Retries" in docs/architecture.md).

pub use crate::util::retry::{LINK, Policy, is_link_error, run};

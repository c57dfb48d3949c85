//! The records the engine writes and the store keeps, in the contract's JSON shapes: sessions,
//! commands, transfers and runs. They sit below both, so the store persists them without
//! knowing the engine and the engine fills them without knowing SQLite.
//!
//! The JSON a face prints is `serde_json` of these records, so their field types follow the
//! contract's shapes (`docs/cli.md`) byte for byte:
//!
//! - **Timestamps** (`created_at`, `started_at`, `ended_at`, ...) are `String`s in RFC 3339,
//!   UTC, to the second (`2026-01-01T12:00:00Z`), as stored and as printed; a face that
//!   computes with them parses them (`time::OffsetDateTime::parse(s, &Rfc3339)`). A time type
//!   would tie the records to one time crate's serde for no change on the wire.
//! - **Statuses** are enums, `#[non_exhaustive]` because states are added over time: a face's
//!   `match` needs a fallback arm (`as_str` names any of them).
//! - Fields whose values come from elsewhere stay strings so that a value this build does not
//!   know is kept and shown as it is: [`CommandRecord::end_reason`] (written by the scripts on
//!   the machine) and [`SessionRecord::backend`].

pub mod run;
pub mod session;
pub mod transfer;

pub use run::{BatchJob, RunManifest, RunStatus, RunSummary, RunTransfer};
pub use session::{CommandMode, CommandRecord, CommandStatus, SessionRecord, SessionStatus};
pub use transfer::{
    ErrorInfo, FileEntry, FileListing, PartialFiles, SkippedEntry, TransferDirection, TransferKind,
    TransferRecord, TransferStatus,
};

//! The records the engine writes and the store keeps, in the contract's JSON shapes: sessions,
//! commands, transfers and runs. They sit below both, so the store persists them without
//! knowing the engine and the engine fills them without knowing SQLite.

pub mod run;
pub mod session;
pub mod transfer;

pub use run::{BatchJob, RunManifest, RunStatus, RunSummary, RunTransfer};
pub use session::{CommandMode, CommandRecord, CommandStatus, SessionRecord, SessionStatus};
pub use transfer::{
    ErrorInfo, FileEntry, FileListing, PartialFiles, SkippedEntry, TransferDirection, TransferKind,
    TransferRecord, TransferStatus,
};

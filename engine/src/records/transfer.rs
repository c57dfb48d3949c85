//! The transfer record (stored, listed by `file history`) and the listing entry of `file list`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Hint};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferDirection {
    /// Local to remote.
    Put,
    /// Remote to local.
    Get,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TransferStatus {
    /// In progress (or the process running it was killed: the record was never finished).
    Running,
    Succeeded,
    /// Finished, but some entries were not written: each is listed in `skipped` with the
    /// reason (a special file, a symlink leaving the tree, a path too long here, ...).
    Partial,
    Failed,
    /// Stopped on request (a cancelled run).
    Cancelled,
}

impl TransferStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferStatus::Running => "running",
            TransferStatus::Succeeded => "succeeded",
            TransferStatus::Partial => "partial",
            TransferStatus::Failed => "failed",
            TransferStatus::Cancelled => "cancelled",
        }
    }
}

/// What was transferred: one file, or a directory tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferKind {
    File,
    Dir,
}

/// An error as stored in records (the JSON shape of [`Error::to_json`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
    pub retryable: bool,
    /// The next step, as data (each face renders it in its own words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<Hint>,
}

impl From<&Error> for ErrorInfo {
    fn from(e: &Error) -> Self {
        ErrorInfo {
            code: e.code.as_str().to_string(),
            message: e.message.clone(),
            retryable: e.retryable,
            hint: e.hint.clone(),
        }
    }
}

/// An entry of a tree that was not transferred, and why (unsafe name, symlink leaving the
/// destination, special file, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedEntry {
    /// Path relative to the transfer's source root.
    pub path: String,
    pub reason: String,
    /// A stable code for the kinds a program may act on (`path_too_long`: the path is over a
    /// host's path-length limit, here or on the machine); absent for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// One file transfer (a single file or a whole tree), as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferRecord {
    pub transfer_id: String,
    pub session_id: Option<String>,
    pub machine_id: String,
    pub direction: TransferDirection,
    /// The user's own paths (remote paths before path mappings).
    pub source: String,
    pub destination: String,
    /// `None` until the source was examined.
    pub kind: Option<TransferKind>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub status: TransferStatus,
    /// File bytes written to the destination.
    pub bytes: u64,
    /// Regular files written.
    pub files: u64,
    /// Directories created or reused.
    pub dirs: u64,
    /// Symlinks recreated (only those whose target stays inside the tree).
    #[serde(default)]
    pub symlinks: u64,
    /// sha256 (hex) of a single-file transfer's content.
    pub sha256: Option<String>,
    /// `Some(true)` when both ends were hashed and matched; `None` when not asked.
    pub verified: Option<bool>,
    #[serde(default)]
    pub skipped: Vec<SkippedEntry>,
    pub error: Option<ErrorInfo>,
    /// Set while a download runs: where its temporary files are. A record still `running` with
    /// this set after its process was killed names the partial files it left; the next
    /// transfer or `file history` removes them and marks the record `failed` (`interrupted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_files: Option<PartialFiles>,
}

/// Where the temporary files of one download are: names containing `name_contains` in `dir`
/// (and below it when `recursive`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialFiles {
    pub dir: String,
    pub recursive: bool,
    pub name_contains: String,
}

/// One entry of `file list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    /// The entry's path in the user's namespace (before path mappings).
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    /// Permission bits in octal, e.g. `0644` (set-id bits included, as on the machine).
    pub mode: String,
    /// Last modification, RFC 3339 UTC.
    pub mtime: String,
    /// Seconds since the Unix epoch.
    pub mtime_unix: i64,
}

/// Result of `file list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileListing {
    pub session_id: String,
    /// The path as the user gave it.
    pub path: String,
    /// Type of the path itself (`dir` lists its entries, anything else lists itself).
    #[serde(rename = "type")]
    pub kind: String,
    pub entries: Vec<FileEntry>,
}

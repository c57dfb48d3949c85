//! Who may own the state dir, checked the way OpenSSH's `StrictModes` checks `~/.ssh`.
//!
//! The state dir holds the records that say which host to reach and the stored passwords. If
//! another user owns it, or could write to it or to a directory above it, that user could swap
//! the database (a machine record pointing at a server of theirs) and have a password sent
//! there. So the dir is created 0700, and an existing one is used only when:
//!
//! - it and every file or directory directly in it (and directly in its `logs/`, `runs/` and
//!   `transfers/`) is owned by the user running remote-runner, and none is writable by group or
//!   others;
//! - every directory above it is owned by that user or root and is not writable by group or
//!   others, unless it has the sticky bit (like `/tmp`, where nobody can rename another user's
//!   entry).
//!
//! Anything else is refused with `permission_denied`, naming the path and the fix; nothing is
//! changed. Modes that only let others *read* (0755, 0644, left by older versions) are
//! tightened to 0700 / 0600.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorCode, Result};

/// Subdirectories whose direct entries are checked too.
const CHECKED_SUBDIRS: &[&str] = &["logs", "runs", "transfers"];

/// The effective user id of this process.
#[allow(unsafe_code)]
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::geteuid() }
}

/// Create the state dir (0700) if missing, then check it as the module doc says.
pub fn open_state_dir(dir: &Path) -> Result<()> {
    create_private_dir(dir)?;
    let uid = effective_uid();
    let real = dir
        .canonicalize()
        .map_err(|e| Error::io(format!("cannot resolve {}", dir.display()), &e))?;
    // The path as given too: a symlink to the state dir is only as safe as where it lives.
    let given = std::path::absolute(dir)
        .map_err(|e| Error::io(format!("cannot resolve {}", dir.display()), &e))?;
    if given != real {
        check_ancestors(&given, uid)?;
    }
    check_ancestors(&real, uid)?;
    check_private(&real, uid)?;
    for entry in entries(&real)? {
        check_listed(&entry, uid)?;
        let is_checked_subdir = entry
            .file_name()
            .is_some_and(|n| CHECKED_SUBDIRS.iter().any(|s| n == *s));
        if is_checked_subdir && entry.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            for inner in entries(&entry)? {
                check_listed(&inner, uid)?;
            }
        }
    }
    Ok(())
}

/// Create `dir` and any missing parents with mode 0700 (never wider), then require that it is
/// ours and private (see [`check_private`]).
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    create_private_dir(dir)?;
    check_private(dir, effective_uid())
}

fn create_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), &e))
}

fn entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let listed = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("cannot list {}", dir.display()), &e))?;
    let mut out = Vec::new();
    for entry in listed {
        let entry = entry.map_err(|e| Error::io(format!("cannot list {}", dir.display()), &e))?;
        out.push(entry.path());
    }
    Ok(out)
}

/// [`check_private`] for an entry a directory listing named: one gone since (SQLite removes its
/// `-wal` and `-shm` files when another process closes the store) is nothing to check.
fn check_listed(path: &Path, uid: u32) -> Result<()> {
    match check_private(path, uid) {
        Err(_)
            if path
                .symlink_metadata()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
        {
            Ok(())
        }
        checked => checked,
    }
}

/// `path` (not followed) must be owned by `uid` and not writable by group or others. Read or
/// execute bits for others are removed (0700 for a directory, 0600 for a file).
fn check_private(path: &Path, uid: u32) -> Result<()> {
    let meta = path
        .symlink_metadata()
        .map_err(|e| Error::io(format!("cannot inspect {}", path.display()), &e))?;
    if meta.uid() != uid {
        return Err(refused(
            path,
            &format!(
                "is owned by user id {}, not by you (user id {uid})",
                meta.uid()
            ),
            &owner_fix(path, uid),
        ));
    }
    if meta.file_type().is_symlink() {
        return Ok(()); // ours; a symlink's own mode means nothing
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(refused(
            path,
            &format!("is writable by group or others (mode {mode:04o})"),
            &format!(
                "check nothing in it was changed by someone else, then make it private: chmod \
                 go-w {}",
                shell_arg(path)
            ),
        ));
    }
    if mode & 0o077 != 0 {
        let private = if meta.is_dir() { 0o700 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(private)).map_err(|e| {
            Error::io(
                format!("cannot set mode {private:04o} on {}", path.display()),
                &e,
            )
        })?;
    }
    Ok(())
}

/// Every directory above `path` (absolute) must be owned by `uid` or root, and not writable by
/// group or others unless sticky.
fn check_ancestors(path: &Path, uid: u32) -> Result<()> {
    for dir in path.ancestors().skip(1) {
        let meta = dir
            .metadata()
            .map_err(|e| Error::io(format!("cannot inspect {}", dir.display()), &e))?;
        if meta.uid() != uid && meta.uid() != 0 {
            return Err(refused(
                dir,
                &format!(
                    "(a directory above the state dir {}) is owned by user id {}, who could \
                     replace the state dir",
                    path.display(),
                    meta.uid()
                ),
                "use a state dir under a directory only you (or root) control",
            ));
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && !sticky {
            return Err(refused(
                dir,
                &format!(
                    "(a directory above the state dir {}) is writable by group or others (mode \
                     {:04o}), so they could replace the state dir",
                    path.display(),
                    meta.mode() & 0o7777
                ),
                &format!(
                    "make it private (chmod go-w {}) or use a state dir elsewhere",
                    shell_arg(dir)
                ),
            ));
        }
    }
    Ok(())
}

fn owner_fix(path: &Path, uid: u32) -> String {
    format!(
        "use a state dir of your own (--state-dir or REMOTE_RUNNER_STATE_DIR), or, if the files \
         really are yours, take them back after checking them: chown -R {uid} {}",
        shell_arg(path)
    )
}

fn refused(path: &Path, why: &str, fix: &str) -> Error {
    Error::new(
        ErrorCode::PermissionDenied,
        format!(
            "refusing to use {}: it {why}; another user could swap the records or read the stored \
             passwords. Fix: {fix}",
            path.display()
        ),
    )
}

fn shell_arg(path: &Path) -> String {
    crate::transport::shell_quote(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        path.symlink_metadata().unwrap().mode() & 0o777
    }

    /// An entry listed and gone before it was checked (SQLite's `-shm` when another process
    /// closes the store) is not an error; a path asked for by name still is.
    #[test]
    fn a_listed_entry_that_is_gone_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join("state.sqlite3-shm");
        let uid = effective_uid();
        assert!(check_listed(&gone, uid).is_ok());
        assert!(check_private(&gone, uid).is_err());
        std::fs::write(&gone, b"").unwrap();
        std::fs::set_permissions(&gone, PermissionsExt::from_mode(0o666)).unwrap();
        assert!(
            check_listed(&gone, uid).is_err(),
            "a present one is checked"
        );
    }

    #[test]
    fn a_new_state_dir_and_its_subdirs_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        open_state_dir(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
        ensure_private_dir(&state.join("runs").join("run_1")).unwrap();
        assert_eq!(mode(&state.join("runs")), 0o700);
        assert_eq!(mode(&state.join("runs").join("run_1")), 0o700);
    }

    #[test]
    fn readable_modes_are_tightened_writable_ones_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::create_dir(state.join("runs")).unwrap();
        std::fs::set_permissions(state.join("runs"), PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(state.join("state.sqlite3"), b"").unwrap();
        std::fs::set_permissions(
            state.join("state.sqlite3"),
            PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        open_state_dir(&state).unwrap();
        assert_eq!(mode(&state.join("runs")), 0o700);
        assert_eq!(mode(&state.join("state.sqlite3")), 0o600);

        std::fs::set_permissions(
            state.join("state.sqlite3"),
            PermissionsExt::from_mode(0o666),
        )
        .unwrap();
        let err = open_state_dir(&state).unwrap_err();
        assert_eq!(err.code, ErrorCode::PermissionDenied);
        assert!(err.message.contains("state.sqlite3"), "{}", err.message);
        assert!(err.message.contains("chmod go-w"), "{}", err.message);
        assert_eq!(
            mode(&state.join("state.sqlite3")),
            0o666,
            "nothing is changed"
        );

        std::fs::set_permissions(
            state.join("state.sqlite3"),
            PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        std::fs::set_permissions(&state, PermissionsExt::from_mode(0o770)).unwrap();
        let err = open_state_dir(&state).unwrap_err();
        assert_eq!(err.code, ErrorCode::PermissionDenied);
        assert!(err.message.contains("mode 0770"), "{}", err.message);
    }

    #[test]
    fn a_group_writable_parent_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, PermissionsExt::from_mode(0o775)).unwrap();
        let err = open_state_dir(&shared.join("state")).unwrap_err();
        assert_eq!(err.code, ErrorCode::PermissionDenied);
        assert!(
            err.message.contains("above the state dir"),
            "{}",
            err.message
        );
        // The sticky bit (as on /tmp) makes it safe.
        std::fs::set_permissions(&shared, PermissionsExt::from_mode(0o1777)).unwrap();
        open_state_dir(&shared.join("state")).unwrap();
    }
}

//! The modes downloads give what they write here. A remote machine chooses its own modes, and a
//! hostile one chooses 0777 or set-id: a download never widens local permissions. A new file or
//! directory gets the remote permission bits masked by this process's umask and by 0755 (the
//! owner's bits, read and search for the others; never group- or other-writable, never set-id
//! or sticky); an existing destination keeps its mode (a replaced file of this user's takes the
//! old file's permission bits; an existing directory is not touched).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// At most the owner's bits plus read and search for group and others.
const CAP: u32 = 0o755;

/// This process's umask, read from `/proc/self/status` (reading it with `umask(2)` would set
/// it, racing other threads creating files). Without /proc: the strict 077.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o077)
}

/// The mode of a new file or directory downloaded from one whose mode is `remote`.
pub fn for_new(remote: u32, umask: u32) -> u32 {
    remote & CAP & !umask
}

/// The mode of a downloaded file that lands at `dest`: the permission bits (less set-id and
/// sticky) of an existing regular file of this user's, else [`for_new`]. A file another user
/// put there (a shared directory) has a mode they chose: keeping it would let them make the
/// downloaded file, ours from then on, as open as they like.
pub fn for_file(dest: &Path, remote: u32, umask: u32) -> u32 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(dest) {
        Ok(m) if m.file_type().is_file() && m.uid() == crate::store::ownership::effective_uid() => {
            m.permissions().mode() & 0o777
        }
        _ => for_new(remote, umask),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_modes_never_widen_local_ones() {
        assert_eq!(for_new(0o4777, 0o022), 0o755);
        assert_eq!(for_new(0o777, 0o077), 0o700);
        assert_eq!(for_new(0o666, 0o002), 0o644);
        assert_eq!(for_new(0o600, 0o022), 0o600);
    }

    #[test]
    fn the_umask_is_read_without_changing_it() {
        let m = umask();
        assert!(m <= 0o777);
        assert_eq!(umask(), m);
    }
}

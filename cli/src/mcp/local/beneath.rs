//! Opening paths beneath a directory handle the way the kernel's `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)` does: `..` past the handle, absolute paths and symlinks, symlinks
//! leading out (present or swapped in while the path is walked) and `/proc` magic links all fail
//! in the kernel, so no path check here can be raced. Every other call is `*at` on a handle
//! opened that way, with `O_NOFOLLOW` for single names.
//!
//! The kernel does the resolving, through `rustix` (already in the dependency tree): cap-std
//! would add several crates for the same `openat2` call and, on kernels without it (before Linux
//! 5.6), a user-space emulation of it. There the local file tools are refused (`not_implemented`)
//! instead: no path walk written here or there stands in for the kernel's.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// A file's identity: (device, inode).
pub type Id = (u64, u64);

/// `rel` opened beneath `dir`. `EAGAIN` (a rename raced the walk) is retried a few times.
pub fn open(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, rel, flags | OFlags::CLOEXEC, Mode::empty(), RESOLVE) {
            Err(Errno::AGAIN) if tries < 8 => tries += 1,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// The directory `rel` beneath `dir`, created with its missing parents (`mkdir -p`); every
/// step is resolved beneath `dir`, so a directory swapped for a symlink on the way is refused.
pub fn create_dirs(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    let mut prefix = PathBuf::new();
    let mut cur = open(dir, &prefix, OFlags::PATH | OFlags::DIRECTORY)?;
    for part in rel.components() {
        prefix.push(part);
        cur = match open(dir, &prefix, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let name = prefix.file_name().map(Path::new).unwrap_or(Path::new("."));
                match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                open(dir, &prefix, OFlags::PATH | OFlags::DIRECTORY)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(cur)
}

/// The child directory `name` of `dir`, never through a symlink; created when missing.
pub fn child_dir(dir: BorrowedFd<'_>, name: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Err(Errno::NOENT) => {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o777))?;
            Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
        }
        other => Ok(other?),
    }
}

pub fn id(fd: impl AsFd) -> io::Result<Id> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// Where the kernel says an open handle is (for messages and the ancestors check).
pub fn real_path(fd: impl AsFd) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
}

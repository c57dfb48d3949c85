//! Moving files between a root and the engine's transfers through a private staging directory
//! (`<state dir>/mcp-stage/<id>`, mode 0700, removed when the call ends).
//!
//! Upload: the local file or tree is opened beneath its root, checked against the guarded set
//! (every file and directory of a tree too) and copied into the staging directory from the open
//! handles; the engine uploads the copy. Download: the engine writes into the staging directory;
//! then each file is put in place beneath the root under a fresh temporary name (`O_CREAT |
//! O_EXCL | O_NOFOLLOW`) and renamed over its final name within the same directory handle, so
//! an existing file is replaced (as `file_get` always did) but never written through, and a
//! symlink at the final name is replaced, not followed.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use remote_runner_engine::{Error, ErrorCode, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::beneath;
use super::{Guarded, Roots, Target, check_guarded};

/// One call's staging directory, removed with it.
#[derive(Debug)]
pub struct Stage {
    dir: PathBuf,
}

impl Stage {
    pub fn new(state_dir: &Path) -> Result<Stage> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = state_dir.join("mcp-stage");
        let dir = base.join(format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let made = std::fs::create_dir_all(&base)
            .and_then(|()| std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)))
            .and_then(|()| {
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir(&dir)
            })
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)));
        made.map_err(|e| {
            io_error(
                &format!("create the staging directory {}", dir.display()),
                e,
            )
        })?;
        Ok(Stage { dir })
    }

    /// A fresh directory of this stage for one transfer (`n` tells transfers apart).
    pub fn slot(&self, n: usize) -> Result<PathBuf> {
        let slot = self.dir.join(n.to_string());
        std::fs::create_dir(&slot).map_err(|e| io_error("create a staging slot", e))?;
        Ok(slot)
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn io_error(what: &str, e: io::Error) -> Error {
    Error::new(ErrorCode::Io, format!("could not {what}: {e}"))
}

impl Target<'_> {
    /// Copy what this path names into `slot` (under its own name, which a file upload keeps)
    /// and return the copy's path, refusing anything guarded on the way.
    pub fn stage_upload(&self, roots: &Roots, guarded: &Guarded, slot: &Path) -> Result<PathBuf> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = beneath::open(self.root.dir.as_fd(), &self.rel, flags)
            .map_err(|e| self.resolve_error(e, roots))?;
        check_guarded(&fd, &self.given, guarded)?;
        let name = beneath::real_path(&fd)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_os_string()))
            .unwrap_or_else(|| "root".into());
        let dest = slot.join(name);
        let st = rustix::fs::fstat(&fd).map_err(|e| io_error("stat the local path", e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => copy_file(fd, &dest, st.st_mode)?,
            FileType::Directory => {
                std::fs::create_dir(&dest).map_err(|e| io_error("stage a directory", e))?;
                copy_tree(fd.as_fd(), &dest, &self.given, guarded)?;
            }
            _ => {
                return Err(Error::invalid(format!(
                    "local path {} is neither a file nor a directory",
                    self.given
                )));
            }
        }
        Ok(dest)
    }

    /// Refuse early what a download could never be placed at: a path outside the roots, or an
    /// existing guarded file or directory at it (checked again when placing).
    pub fn precheck_download(&self, roots: &Roots, guarded: &Guarded) -> Result<()> {
        match beneath::open(self.root.dir.as_fd(), &self.rel, OFlags::PATH) {
            Ok(fd) => check_guarded(&fd, &self.given, guarded),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // Its existing part must still resolve beneath the root.
                let parent = existing_parent(self.root.dir.as_fd(), &self.rel);
                match beneath::open(self.root.dir.as_fd(), &parent, OFlags::PATH) {
                    Ok(fd) => check_guarded(&fd, &self.given, guarded),
                    Err(e) => Err(self.resolve_error(e, roots)),
                }
            }
            Err(e) => Err(self.resolve_error(e, roots)),
        }
    }

    /// Put the download the engine wrote at `staged` in place, as `file_get` does: a file goes
    /// inside this path when it is an existing directory or ends with `/` (under `name`, the
    /// remote file's name), else becomes it; a directory is merged into this path. Returns the
    /// final path.
    pub fn place_download(
        &self,
        roots: &Roots,
        guarded: &Guarded,
        staged: &Path,
        name: &str,
    ) -> Result<PathBuf> {
        let root = self.root.dir.as_fd();
        let meta =
            std::fs::symlink_metadata(staged).map_err(|e| io_error("read the download", e))?;
        let existing_dir = beneath::open(root, &self.rel, OFlags::PATH | OFlags::DIRECTORY).ok();
        let (dir, file_name) = if meta.is_dir() {
            let dir =
                beneath::create_dirs(root, &self.rel).map_err(|e| self.place_error(e, roots))?;
            (dir, None)
        } else if let Some(dir) = existing_dir {
            (dir, Some(PathBuf::from(name)))
        } else if self.into_dir || self.names_a_dir() {
            let dir =
                beneath::create_dirs(root, &self.rel).map_err(|e| self.place_error(e, roots))?;
            (dir, Some(PathBuf::from(name)))
        } else {
            let parent = self.rel.parent().unwrap_or(Path::new(""));
            let dir = beneath::create_dirs(root, parent).map_err(|e| self.place_error(e, roots))?;
            (dir, self.rel.file_name().map(PathBuf::from))
        };
        check_guarded(&dir, &self.given, guarded)?;
        let dir_path = beneath::real_path(&dir).unwrap_or_default();
        // Reopened for reading entries and creating in it (an O_PATH handle can do neither).
        let dir = rustix::fs::openat(
            &dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error("open the destination directory", e.into()))?;
        match file_name {
            Some(file_name) => {
                put_file(dir.as_fd(), &file_name, staged, &self.given, guarded)?;
                Ok(dir_path.join(file_name))
            }
            None => {
                merge_tree(dir.as_fd(), staged, &self.given, guarded)?;
                Ok(dir_path)
            }
        }
    }

    fn place_error(&self, e: io::Error, roots: &Roots) -> Error {
        match e.raw_os_error() {
            Some(libc::ENOTDIR | libc::EEXIST) => Error::new(
                ErrorCode::Io,
                format!(
                    "local path {}: something that is not a directory is in the way",
                    self.given
                ),
            ),
            _ => self.resolve_error(e, roots),
        }
    }
}

/// The longest prefix of `rel` that exists beneath `root` (for the early check of a download).
fn existing_parent(root: BorrowedFd<'_>, rel: &Path) -> PathBuf {
    let mut p = rel.to_path_buf();
    while p.pop() {
        if beneath::open(root, &p, OFlags::PATH).is_ok() {
            return p;
        }
    }
    PathBuf::new()
}

/// Copy an open regular file to a new file `dest` (mode kept, set-id bits dropped).
fn copy_file(fd: OwnedFd, dest: &Path, mode: u32) -> Result<()> {
    let mut src = File::from(fd);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)
        .map_err(|e| io_error("stage a file", e))?;
    io::copy(&mut src, &mut out).map_err(|e| io_error("copy a local file", e))?;
    out.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))
        .map_err(|e| io_error("set a staged file's mode", e))
}

/// Copy the tree open at `dir` into the existing directory `dest`, never following a symlink
/// (symlinks are copied as symlinks: the engine uploads those that stay inside the tree);
/// special files are left out. A guarded file or directory anywhere in it refuses the upload.
fn copy_tree(dir: BorrowedFd<'_>, dest: &Path, given: &str, guarded: &Guarded) -> Result<()> {
    let entries =
        rustix::fs::Dir::read_from(dir).map_err(|e| io_error("list a directory", e.into()))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list a directory", e.into()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = Path::new(std::ffi::OsStr::from_bytes(name));
        let shown = format!("{given}/{}", name.display());
        let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_error(&format!("stat {shown}"), e.into()))?;
        let target = dest.join(name);
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {
                let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(dir, name, flags, Mode::empty())
                    .map_err(|e| io_error(&format!("open {shown}"), e.into()))?;
                check_guarded(&fd, &shown, guarded)?;
                let st = rustix::fs::fstat(&fd).map_err(|e| io_error("stat", e.into()))?;
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
                    copy_file(fd, &target, st.st_mode)?;
                }
            }
            FileType::Directory => {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(dir, name, flags, Mode::empty())
                    .map_err(|e| io_error(&format!("open {shown}"), e.into()))?;
                check_guarded(&fd, &shown, guarded)?;
                std::fs::create_dir(&target).map_err(|e| io_error("stage a directory", e))?;
                copy_tree(fd.as_fd(), &target, &shown, guarded)?;
            }
            FileType::Symlink => {
                let link = rustix::fs::readlinkat(dir, name, Vec::new())
                    .map_err(|e| io_error(&format!("read the symlink {shown}"), e.into()))?;
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(link.to_bytes()), &target)
                    .map_err(|e| io_error("stage a symlink", e))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Put the staged file `staged` at `name` in `dir`: a new temporary name created exclusively,
/// never following a symlink, then renamed over `name` in the same directory.
fn put_file(
    dir: BorrowedFd<'_>,
    name: &Path,
    staged: &Path,
    given: &str,
    guarded: &Guarded,
) -> Result<()> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            if guarded.is_guarded((st.st_dev, st.st_ino)) {
                let fd = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io_error("open the destination", e.into()))?;
                check_guarded(&fd, given, guarded)?;
            }
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(Error::new(
                    ErrorCode::Io,
                    format!("local path {given}: a directory is in the way of the file"),
                ));
            }
        }
        Err(Errno::NOENT) => {}
        Err(e) => return Err(io_error("stat the destination", e.into())),
    }
    let mode = std::fs::metadata(staged)
        .map_err(|e| io_error("read the download", e))?
        .permissions()
        .mode();
    let mut src = File::open(staged).map_err(|e| io_error("read the download", e))?;
    let tmp = temp_name(name);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, &tmp, flags, Mode::from_raw_mode(0o600))
        .map_err(|e| io_error(&format!("create a file beside {given}"), e.into()))?;
    let mut out = File::from(fd);
    let written = io::copy(&mut src, &mut out)
        .and_then(|_| out.set_permissions(std::fs::Permissions::from_mode(mode & 0o777)))
        .and_then(|()| rustix::fs::renameat(dir, &tmp, dir, name).map_err(io::Error::from));
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
        return Err(io_error(&format!("write {given}"), e));
    }
    Ok(())
}

/// Merge the staged tree into `dir`: directories opened or made without following symlinks,
/// files put as [`put_file`] does, symlinks (the engine kept only those that stay inside)
/// recreated under a temporary name and renamed into place.
fn merge_tree(dir: BorrowedFd<'_>, staged: &Path, given: &str, guarded: &Guarded) -> Result<()> {
    let entries = std::fs::read_dir(staged).map_err(|e| io_error("list the download", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list the download", e))?;
        let name = PathBuf::from(entry.file_name());
        let shown = format!("{given}/{}", name.display());
        let kind = entry
            .file_type()
            .map_err(|e| io_error("list the download", e))?;
        if kind.is_dir() {
            let sub = beneath::child_dir(dir, &name).map_err(|e| {
                Error::new(
                    ErrorCode::Io,
                    format!(
                        "local path {shown}: not a directory, or a symlink is in the way ({e})"
                    ),
                )
            })?;
            check_guarded(&sub, &shown, guarded)?;
            merge_tree(sub.as_fd(), &entry.path(), &shown, guarded)?;
        } else if kind.is_symlink() {
            let link =
                std::fs::read_link(entry.path()).map_err(|e| io_error("read a symlink", e))?;
            let tmp = temp_name(&name);
            rustix::fs::symlinkat(&link, dir, &tmp)
                .and_then(|()| rustix::fs::renameat(dir, &tmp, dir, &name))
                .map_err(|e| io_error(&format!("create the symlink {shown}"), e.into()))?;
        } else {
            put_file(dir, &name, &entry.path(), &shown, guarded)?;
        }
    }
    Ok(())
}

/// A hidden temporary name beside `name`.
fn temp_name(name: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    PathBuf::from(format!(
        ".{}.rr-mcp-{}-{}.part",
        name.display(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

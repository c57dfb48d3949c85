//! The MCP server's reach into the host's files: only beneath the roots the user named.
//!
//! `--root DIR` (repeatable) names them; without it the directory the server was started in is
//! the one root, unless that is `/`, a home directory or one of a home's ancestors (then the
//! local file tools are refused and say to pass `--root`). A tool's local path, absolute or
//! relative to the first root, is opened beneath its root's directory handle with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` ([`beneath`]), so nothing outside a root
//! can be named whatever the path holds or the files do meanwhile. Whatever the roots, the
//! engine's state dir, the machines' key and known_hosts files and `~/.ssh` are refused by
//! identity ([`guard`]). The engine's transfers never see a root: an upload is copied from the
//! opened handles into a private staging directory, and a download lands there first and is then
//! moved into the root through directory handles ([`stage`]).

mod beneath;
mod guard;
mod stage;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use remote_runner_engine::{Error, ErrorCode, Result};
use rustix::fs::OFlags;

pub use guard::Guarded;
pub use stage::Stage;

/// One directory tools may use, held open from the start.
#[derive(Debug)]
struct Root {
    /// Its real path (symlinks resolved at start).
    path: PathBuf,
    /// As the user gave it, when that differs (an absolute local path may use either).
    given: PathBuf,
    dir: OwnedFd,
}

/// The roots, or why there are none.
#[derive(Debug)]
pub struct Roots {
    roots: Vec<Root>,
    /// Set when no root could be chosen: what the local file tools answer.
    refusal: Option<String>,
}

/// A tool's local path, placed beneath one root.
pub struct Target<'a> {
    root: &'a Root,
    /// The path beneath the root (may hold `..`; the kernel keeps it beneath).
    rel: PathBuf,
    /// The path as the tool call gave it (for messages and results).
    pub given: String,
    /// Ends with `/`: a directory meant, for a download "into".
    into_dir: bool,
}

impl Roots {
    /// The roots of `--root` (each must be an existing directory that is not `/`, a home or a
    /// home's ancestor), or the current directory when none was given.
    pub fn choose(given: &[PathBuf], state_dir: &Path) -> Result<Roots> {
        if given.is_empty() {
            let cwd = std::env::current_dir().map_err(|e| {
                Error::new(
                    ErrorCode::Io,
                    format!("the current directory cannot be read ({e}); pass --root DIR"),
                )
            })?;
            return Ok(match Root::open(&cwd, state_dir) {
                Ok(root) => Roots {
                    roots: vec![root],
                    refusal: None,
                },
                Err(why) => Roots {
                    roots: Vec::new(),
                    refusal: Some(format!(
                        "this MCP server was started in {} without --root, and {why}, so it \
                         reads and writes no local files; start it with --root DIR (repeatable) \
                         naming the directories its tools may use",
                        cwd.display()
                    )),
                },
            });
        }
        let mut roots = Vec::new();
        for dir in given {
            let root = Root::open(dir, state_dir).map_err(|why| {
                Error::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "--root {}: {why}; name a project directory instead",
                        dir.display()
                    ),
                )
            })?;
            roots.push(root);
        }
        Ok(Roots {
            roots,
            refusal: None,
        })
    }

    /// The roots' paths (for messages and `machine_list`'s neighbours).
    pub fn paths(&self) -> Vec<String> {
        self.roots
            .iter()
            .map(|r| r.path.display().to_string())
            .collect()
    }

    /// Where `local` lies: beneath which root, as what relative path. Outside every root (by its
    /// spelling; what it resolves to is the kernel's to keep beneath) is `permission_denied`.
    pub fn locate<'a>(&'a self, local: &str) -> Result<Target<'a>> {
        if let Some(why) = &self.refusal {
            return Err(denied(why.clone()));
        }
        if local.is_empty() || local.contains('\0') {
            return Err(Error::invalid(
                "a local path must be a non-empty path without NUL bytes",
            ));
        }
        let path = Path::new(local);
        let into_dir = local.ends_with('/');
        let found = if path.is_absolute() {
            self.roots.iter().find_map(|root| {
                [&root.path, &root.given]
                    .into_iter()
                    .find_map(|base| path.strip_prefix(base).ok())
                    .map(|rel| (root, rel.to_path_buf()))
            })
        } else {
            self.roots.first().map(|root| (root, path.to_path_buf()))
        };
        let Some((root, rel)) = found else {
            return Err(self.outside(local, "it is not beneath any of them"));
        };
        // An early, clearer refusal of what the kernel would refuse anyway.
        if climbs_out(&rel) {
            return Err(self.outside(local, "its .. components lead out of its root"));
        }
        Ok(Target {
            root,
            rel,
            given: local.to_string(),
            into_dir,
        })
    }

    fn outside(&self, local: &str, why: &str) -> Error {
        denied(format!(
            "local path {local} is outside the roots this MCP server may use ({}): {why}; use a \
             path beneath one of them (a relative path is taken from {}), or start the server \
             with --root DIR naming the directory",
            self.paths().join(", "),
            self.paths()
                .first()
                .map(String::as_str)
                .unwrap_or("the first root")
        ))
    }
}

impl Root {
    /// Open `dir` as a root, or say why it cannot be one.
    fn open(dir: &Path, state_dir: &Path) -> std::result::Result<Root, String> {
        let path = std::fs::canonicalize(dir).map_err(|e| format!("it cannot be opened ({e})"))?;
        if path == Path::new("/") {
            return Err("it is the filesystem's root /".into());
        }
        for home in guard::homes() {
            let home = std::fs::canonicalize(&home).unwrap_or(home);
            if home.starts_with(&path) {
                return Err(format!(
                    "it is or holds the home directory {}, whose dotfiles (.bashrc, .ssh, ...) \
                     run code and hold keys",
                    home.display()
                ));
            }
        }
        let guarded = Guarded::collect(state_dir);
        if let Some(dir) = guarded.guarded_ancestor(&path) {
            return Err(format!(
                "it lies in {}, which holds credentials, machines or host keys",
                dir.display()
            ));
        }
        let fd = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("it is not a directory that can be opened ({e})"))?;
        Ok(Root {
            given: dir.to_path_buf(),
            path,
            dir: fd,
        })
    }
}

impl Target<'_> {
    /// The kernel's refusal to resolve the path, as the tool's error.
    fn resolve_error(&self, e: std::io::Error, roots: &Roots) -> Error {
        match e.raw_os_error() {
            Some(libc::EXDEV) => roots.outside(
                &self.given,
                "it leads out of its root (through .., an absolute path or a symlink)",
            ),
            Some(libc::ELOOP) => roots.outside(
                &self.given,
                "it goes through a /proc magic link or too many symlinks",
            ),
            Some(libc::ENOENT) => Error::new(
                ErrorCode::Io,
                format!("local path {} does not exist", self.given),
            ),
            Some(libc::ENOSYS) => Error::new(
                ErrorCode::NotImplemented,
                "this kernel has no openat2 (Linux 5.6 or later), which the MCP server needs to \
                 keep local paths beneath its roots; local file tools are unavailable here",
            ),
            _ => Error::new(
                ErrorCode::Io,
                format!("local path {} cannot be opened: {e}", self.given),
            ),
        }
    }

    /// Whether the relative path names the root itself or a parent (`.`, `..`, `a/..`): no
    /// file name of its own.
    fn names_a_dir(&self) -> bool {
        matches!(
            self.rel.components().next_back(),
            None | Some(Component::CurDir | Component::ParentDir)
        )
    }
}

/// Whether `rel`'s `..` components climb above its start, read as written.
fn climbs_out(rel: &Path) -> bool {
    let mut depth = 0usize;
    for part in rel.components() {
        match part {
            Component::ParentDir if depth == 0 => return true,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// Refused: what a tool may touch on the host was set when the server started.
fn denied(message: String) -> Error {
    Error::new(ErrorCode::PermissionDenied, message).retryable(false)
}

/// Refuse `fd` (opened for `given`) when it is a guarded file or directory or lies in one.
fn check_guarded(fd: impl AsFd, given: &str, guarded: &Guarded) -> Result<()> {
    let id = beneath::id(&fd).map_err(|e| Error::new(ErrorCode::Io, format!("{given}: {e}")))?;
    let inside = beneath::real_path(&fd)
        .ok()
        .and_then(|p| guarded.guarded_ancestor(&p));
    if guarded.is_guarded(id) || inside.is_some() {
        return Err(denied(format!(
            "local path {given} is (or lies in) the engine's state dir, a machine's key or \
             known_hosts file, or ~/.ssh (the same file by device and inode, whatever the path or \
             link), which hold credentials, machines or host keys and are never read or written \
             by an MCP tool; pick another file"
        )));
    }
    Ok(())
}

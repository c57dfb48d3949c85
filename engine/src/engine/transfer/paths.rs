//! Remote path handling for transfers: the machine's path mappings, joining, and the safety
//! checks that keep a download inside its destination.

use crate::error::{Error, Result};
use crate::machine::PathMapping;

/// One remote location in both of the machine's namespaces: `cmd` as commands in the session see
/// it (the user's namespace, used for `exec`), `file` as SFTP sees it (after path mappings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePath {
    pub cmd: String,
    pub file: String,
}

impl RemotePath {
    /// Resolve a user-given remote path: relative paths are taken from `cwd`, `.` and empty
    /// components are dropped, then the longest matching mapping prefix is applied.
    pub fn resolve(user: &str, cwd: &str, mappings: &[PathMapping]) -> Result<RemotePath> {
        // A newline is a legal byte of a file name (a machine may well have one): it is data
        // everywhere here (SFTP paths, shell-quoted commands, `sha256sum`'s escaped lines).
        if user.is_empty() || user.contains('\0') {
            return Err(Error::invalid(format!(
                "remote path {user:?} must be non-empty and free of NUL characters"
            )));
        }
        let joined = if user.starts_with('/') {
            user.to_string()
        } else {
            format!("{}/{user}", cwd.trim_end_matches('/'))
        };
        let cmd = normalize(&joined);
        let file = map_to_file(&cmd, mappings);
        Ok(RemotePath { cmd, file })
    }

    pub fn join(&self, rel: &str) -> RemotePath {
        if rel.is_empty() {
            return self.clone();
        }
        RemotePath {
            cmd: join(&self.cmd, rel),
            file: join(&self.file, rel),
        }
    }

    /// The parent directory and the last component (`None` for a root).
    pub fn split(&self) -> Option<(RemotePath, String)> {
        let (cdir, name) = split_last(&self.cmd)?;
        let (fdir, _) = split_last(&self.file)?;
        Some((
            RemotePath {
                cmd: cdir,
                file: fdir,
            },
            name,
        ))
    }
}

fn split_last(p: &str) -> Option<(String, String)> {
    let (dir, name) = p.rsplit_once('/')?;
    if name.is_empty() {
        return None;
    }
    let dir = if dir.is_empty() { "/" } else { dir };
    Some((dir.to_string(), name.to_string()))
}

/// `a/b` + `c` with exactly one slash between.
pub fn join(base: &str, rel: &str) -> String {
    if base.ends_with('/') {
        format!("{base}{rel}")
    } else {
        format!("{base}/{rel}")
    }
}

/// Drop empty and `.` components; keep `..` (the remote resolves it, as a shell would).
fn normalize(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

/// Apply the longest `command_prefix` that matches on a component boundary.
pub fn map_to_file(cmd: &str, mappings: &[PathMapping]) -> String {
    let mut best: Option<&PathMapping> = None;
    for m in mappings {
        let prefix = m.command_prefix.trim_end_matches('/');
        let matches = if prefix.is_empty() {
            true
        } else {
            cmd == prefix || cmd.starts_with(&format!("{prefix}/"))
        };
        if matches
            && best.is_none_or(|b| b.command_prefix.trim_end_matches('/').len() < prefix.len())
        {
            best = Some(m);
        }
    }
    match best {
        None => cmd.to_string(),
        Some(m) => {
            let prefix = m.command_prefix.trim_end_matches('/');
            let rest = &cmd[prefix.len()..];
            let base = m.file_prefix.trim_end_matches('/');
            if rest.is_empty() {
                if base.is_empty() {
                    "/".to_string()
                } else {
                    base.to_string()
                }
            } else {
                format!("{base}{rest}")
            }
        }
    }
}

/// Whether one name read from a remote directory is safe to create locally: not empty, not
/// `.` or `..`, no `/` or NUL (a hostile server can send any bytes).
pub fn safe_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// Whether a symlink at `link_rel` (relative to the destination root, `/`-separated) with
/// `target` stays inside the destination. Only targets of the form `../../a/b` are allowed:
/// leading `..` components that do not climb above the root, then plain names. A `..` after a
/// name is refused because the name may itself be a link, which lexical checks cannot follow.
pub fn symlink_stays_inside(link_rel: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') || target.contains('\0') {
        return false;
    }
    let depth = link_rel.split('/').filter(|c| !c.is_empty()).count();
    let parent_depth = depth.saturating_sub(1);
    let mut ups = 0usize;
    let mut seen_name = false;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." if !seen_name => ups += 1,
            ".." => return false,
            _ => seen_name = true,
        }
    }
    ups <= parent_depth
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(c: &str, f: &str) -> PathMapping {
        PathMapping {
            command_prefix: c.into(),
            file_prefix: f.into(),
        }
    }

    #[test]
    fn resolves_relative_and_maps_longest_prefix() {
        let maps = [
            m("/mnt/c/Users", "C:/Users"),
            m("/mnt/c/Users/x/proj", "D:/proj"),
        ];
        let p = RemotePath::resolve("out/a.txt", "/mnt/c/Users/x/proj/", &maps).unwrap();
        assert_eq!(p.cmd, "/mnt/c/Users/x/proj/out/a.txt");
        assert_eq!(p.file, "D:/proj/out/a.txt");
        let p = RemotePath::resolve("/mnt/c/Users/y", "/", &maps).unwrap();
        assert_eq!(p.file, "C:/Users/y");
        // Only on component boundaries.
        let p = RemotePath::resolve("/mnt/c/Usersx", "/", &maps).unwrap();
        assert_eq!(p.file, "/mnt/c/Usersx");
        let p = RemotePath::resolve("/mnt/c/Users", "/", &maps).unwrap();
        assert_eq!(p.file, "C:/Users");
        assert!(RemotePath::resolve("", "/", &maps).is_err());
        assert_eq!(
            RemotePath::resolve("./a//b/", "/w", &[]).unwrap().cmd,
            "/w/a/b"
        );
    }

    #[test]
    fn split_and_join_keep_both_namespaces() {
        let p = RemotePath::resolve("/mnt/c/p/f", "/", &[m("/mnt/c", "C:")]).unwrap();
        let (dir, name) = p.split().unwrap();
        assert_eq!(
            (dir.cmd.as_str(), dir.file.as_str(), name.as_str()),
            ("/mnt/c/p", "C:/p", "f")
        );
        assert_eq!(dir.join("g").file, "C:/p/g");
        assert!(
            RemotePath::resolve("/", "/", &[])
                .unwrap()
                .split()
                .is_none()
        );
        let (root, n) = RemotePath::resolve("/x", "/", &[])
            .unwrap()
            .split()
            .unwrap();
        assert_eq!((root.cmd.as_str(), n.as_str()), ("/", "x"));
    }

    #[test]
    fn names_and_symlinks() {
        for bad in ["", ".", "..", "a/b", "/etc", "a\0b"] {
            assert!(!safe_name(bad), "{bad:?}");
        }
        assert!(safe_name("ü ñ x..y"));
        assert!(symlink_stays_inside("a", "b"));
        assert!(symlink_stays_inside("d/a", "../b/c"));
        assert!(symlink_stays_inside("d/e/a", "../../b"));
        assert!(!symlink_stays_inside("a", "../b"));
        assert!(!symlink_stays_inside("d/a", "../../b"));
        assert!(!symlink_stays_inside("a", "/etc/passwd"));
        assert!(!symlink_stays_inside("a", "l/.."));
        assert!(!symlink_stays_inside("a", "x/../../y"));
        assert!(!symlink_stays_inside("a", ""));
    }
}

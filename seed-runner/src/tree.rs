//! What the file sync (`sync.rs`) does not carry, so the remote work dir holds the local tree as
//! the prototype's copy did: directories (empty ones too) and symlinks (as links, target
//! unchanged) go up before each exec, and inputs a command deleted or changed on the remote side
//! are sent again at the next exec.
//!
//! Directories and links cost nothing when unchanged: what changed is done in one remote call.
//! The check for inputs changed remotely runs after each command, beside the log fetch (no
//! round trip of its own on the exec's path): every input that is gone, or (a file) was modified
//! since the command started (the wrapper's stamp, `logs/<name>/.seed_start`), is forgotten in
//! the manifest, so the next sync sends it again. A change made between two commands (by a
//! background job, by hand) is not seen.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::{ExecOptions, shell_quote};

use crate::error::{Result, SYNC, SeedError};
use crate::state::Manifest;

/// The remote check of [`changed`] (POSIX sh).
pub const INPUTS_CHANGED: &str = include_str!("inputs_changed.sh");

fn sync_err(what: String) -> SeedError {
    SeedError::new(SYNC, "sync_failed", what)
}

/// Local directories, and symlinks with their targets.
type Scanned = (BTreeSet<String>, Vec<(String, String)>);

/// Directories and symlinks under `root` (relative, `/`-separated), without the reserved names
/// at its root. Names that are not UTF-8 or hold a newline are left out (as by the file sync).
fn scan(root: &Path) -> Result<Scanned> {
    let mut dirs = BTreeSet::new();
    let mut links = Vec::new();
    let mut stack = vec![(String::new(), root.to_path_buf())];
    while let Some((rel, dir)) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| sync_err(format!("cannot read {}: {e}", dir.display())))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| sync_err(format!("cannot read {}: {e}", dir.display())))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.contains('\n')
                || rel.is_empty() && (name == "artifacts" || name == "metadata.json")
            {
                continue;
            }
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                dirs.insert(child.clone());
                stack.push((child, entry.path()));
            } else if kind.is_symlink()
                && let Ok(target) = std::fs::read_link(entry.path())
                && let Some(target) = target.to_str()
            {
                links.push((child, target.to_string()));
            }
        }
    }
    Ok((dirs, links))
}

/// Make new local directories and symlinks on the remote side, and remove there the ones that
/// were deleted locally (a directory only when empty).
pub async fn upload(
    transport: &Arc<Remote>,
    local_root: &Path,
    remote_root: &str,
    manifest: &mut Manifest,
) -> Result<()> {
    let (dirs, links) = scan(local_root)?;
    let mut script = String::new();
    let new_dirs: Vec<&String> = dirs
        .iter()
        .filter(|d| !manifest.dirs.contains(*d))
        .collect();
    if !new_dirs.is_empty() {
        script.push_str("mkdir -p --");
        for d in &new_dirs {
            script.push(' ');
            script.push_str(&shell_quote(d));
        }
        script.push_str(" || exit 1\n");
    }
    let present: BTreeSet<&str> = links.iter().map(|(p, _)| p.as_str()).collect();
    for (path, target) in &links {
        if manifest.links.get(path) == Some(target) {
            continue;
        }
        let p = shell_quote(path);
        script.push_str(&format!(
            "rm -f -- {p} && ln -s -- {} {p} || exit 1\n",
            shell_quote(target)
        ));
    }
    let gone_links: Vec<String> = manifest
        .links
        .keys()
        .filter(|p| !present.contains(p.as_str()))
        .cloned()
        .collect();
    for path in &gone_links {
        let p = shell_quote(path);
        script.push_str(&format!("if [ -L {p} ]; then rm -f -- {p}; fi\n"));
    }
    // Deepest first, so a removed tree goes whole (as long as it is empty remotely).
    let gone_dirs: Vec<String> = manifest
        .dirs
        .iter()
        .rev()
        .filter(|d| !dirs.contains(*d))
        .cloned()
        .collect();
    for d in &gone_dirs {
        script.push_str(&format!("rmdir -- {} 2>/dev/null\n", shell_quote(d)));
    }
    if script.is_empty() {
        return Ok(());
    }
    let script = format!(
        "cd -- {} || exit 1\n{script}exit 0\n",
        shell_quote(remote_root)
    );
    let out = transport
        .exec(&script, ExecOptions::default())
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                "making directories and symlinks on the remote side",
                (SYNC, "sync_failed"),
            )
        })?;
    if !out.status.success() {
        return Err(sync_err(format!(
            "cannot make the local directories and symlinks in {remote_root}: {}",
            out.stderr_lossy().trim()
        )));
    }
    manifest.dirs = dirs;
    manifest.links = links.into_iter().collect();
    Ok(())
}

/// The inputs to check after a command, one line each: `<kind> <path>`, where kind is `f` (a
/// file: gone, or modified at or after the stamp), `F` (a file sent just before the command:
/// modified strictly after the stamp, since a send in the stamp's clock tick is not a change),
/// `d` or `l` (gone).
pub fn inputs(manifest: &Manifest, sent_now: Option<&BTreeSet<String>>) -> String {
    let mut out = String::new();
    let mut line = |kind: char, path: &str| {
        if !path.contains('\n') {
            out.push(kind);
            out.push(' ');
            out.push_str(path);
            out.push('\n');
        }
    };
    for path in manifest.uploaded.keys() {
        let fresh = sent_now.is_none_or(|s| s.contains(path));
        line(if fresh { 'F' } else { 'f' }, path);
    }
    for path in &manifest.dirs {
        line('d', path);
    }
    for path in manifest.links.keys() {
        line('l', path);
    }
    out
}

/// The inputs (from [`inputs`]) gone or changed on the remote side since `stamp` (relative to
/// `remote_root`). Nothing when the work dir or the stamp is gone (the next exec sees to it).
pub async fn changed(
    transport: &Arc<Remote>,
    remote_root: &str,
    stamp: &str,
    inputs: String,
) -> Result<Vec<String>> {
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    // The list goes in the script as a here-document, not on stdin: a call without input
    // data runs on a kept control process, not a fresh channel and login shell. (Every line
    // starts with a kind and a space, so none can be the end word.)
    let script = format!(
        "root={}\nstamp={}\n{{\n{INPUTS_CHANGED}}} <<'__seed_inputs_end'\n{inputs}__seed_inputs_end\n",
        shell_quote(remote_root),
        shell_quote(stamp)
    );
    let out = transport
        .exec(&script, ExecOptions::default())
        .await
        .map_err(|e| SeedError::engine(e, "checking the inputs", (SYNC, "sync_failed")))?;
    Ok(out
        .stdout_lossy()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Forget what the manifest says was sent for `paths`, so the next sync sends them again.
pub fn forget(manifest: &mut Manifest, paths: &[String]) {
    for p in paths {
        manifest.uploaded.remove(p);
        manifest.dirs.remove(p);
        manifest.links.remove(p);
    }
}

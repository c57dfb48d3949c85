//! The wrapper each `session exec` runs in the session shell (bash, in the tmux pane):
//! `wrapper.sh`, rendered with the command and its paths.
//!
//! - The command runs whole (`eval`) in a subshell of `remote_work_dir`, so every command
//!   starts there and a `cd` does not carry over. Its stdin is the pane's terminal, as at a
//!   tmux pane (`[ -t 0 ]` holds; a program that reads input waits for it).
//! - Its stdout and stderr go, in order, through a pipe to a reader that prefixes each line with
//!   `[<UTC second>] ` and appends it to the log, so the remote log grows as the command runs.
//! - A job the command starts with `&` keeps the pipe open after the command ends. So the end is
//!   not the pipe's EOF: after the command the wrapper writes an end line holding a per-command
//!   nonce and the exit code; the reader closes the log with `$ exit_code: N` on it and hands the
//!   pipe to a detached reader that appends what the jobs print later to `cmd_NNN.bg.log`
//!   (never a SIGPIPE for them, and the exec returns at once, as `&` does at a pane).
//! - `logs/<name>/.seed_start` is touched (a builtin redirection) as the command starts: what
//!   changed after it is what the command changed (see `tree.rs`).
//! - When the work dir is gone (or was made again by someone else: it has no `artifacts/`),
//!   nothing runs: the wrapper prints [`WORKDIR_MISSING`] on its own stdout (the engine's, not
//!   the log) and exits [`NOT_RUN`]; seed-runner makes the dir again, sends the inputs and runs
//!   the command.

use remote_runner_engine::engine::host::shell_quote;

/// What the wrapper prints (on the engine's stdout) when the work dir is gone.
pub const WORKDIR_MISSING: &str = "seed-runner:workdir_missing";

/// Exit status of the wrapper when it ran nothing (work dir gone, log dir not creatable).
pub const NOT_RUN: i32 = 125;

/// A nonce for the end line: unguessable enough that no command prints it by chance.
fn nonce() -> String {
    use sha2::{Digest, Sha256};
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut h = Sha256::new();
    h.update(t.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(format!("{:p}", &t).as_bytes());
    format!("__seed_end_{}", &hex::encode(h.finalize())[..24])
}

/// The script (`wrapper.sh`), with `@NAME@` placeholders.
pub const SCRIPT: &str = include_str!("wrapper.sh");

/// The wrapper for `command`, logging to `log_file` in `log_dir`, run in `work_dir`.
pub fn script(command: &str, work_dir: &str, log_dir: &str, log_file: &str) -> String {
    render(
        SCRIPT,
        &[
            ("@END@", shell_quote(&nonce())),
            ("@MISSING@", shell_quote(WORKDIR_MISSING)),
            ("@WORK@", shell_quote(work_dir)),
            ("@DIR@", shell_quote(log_dir)),
            ("@LOG@", shell_quote(log_file)),
            ("@CMD@", shell_quote(command)),
        ],
    )
}

/// Replace each placeholder in `template` with its value, scanning the template once (a
/// value that holds a placeholder's text stays as it is).
fn render(template: &str, values: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    'scan: while let Some(at) = rest.find('@') {
        for (name, value) in values {
            if rest[at..].starts_with(name) {
                out.push_str(&rest[..at]);
                out.push_str(value);
                rest = &rest[at + name.len()..];
                continue 'scan;
            }
        }
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_never_read_as_placeholders() {
        let s = script(
            "echo @LOG@ @DIR@",
            "/w/@CMD@",
            "/w/logs/x",
            "/w/logs/x/cmd_001.log",
        );
        assert!(s.contains("__seed_cmd='echo @LOG@ @DIR@'"), "{s}");
        assert!(s.contains("cd -- /w/@CMD@ 2>"), "{s}");
        assert!(!s.contains("@END@") && !s.contains("@MISSING@"), "{s}");
        assert!(s.contains(&format!("exit {NOT_RUN}")), "{s}");
    }
}

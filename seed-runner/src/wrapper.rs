//! The wrapper each `session exec` runs in the session shell (bash, in the tmux pane).
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
//! - A work dir that is gone (or was made again by someone else: it has no `artifacts/`) is
//!   on the wrapper's own stdout as [`WORKDIR_MISSING`]
//!   (that output is the engine's, not the log's) and nothing runs: seed-runner recreates the
//!   dir, syncs the inputs again and runs the command.

use remote_runner_provider::transport::shell_quote;

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

/// The wrapper for `command`, logging to `log_file` in `log_dir`, run in `work_dir`.
pub fn script(command: &str, work_dir: &str, log_dir: &str, log_file: &str) -> String {
    format!(
        r#"(
__seed_cmd={cmd}
__seed_log={log}
__seed_end={end}
if ! \builtin cd -- {work} 2>/dev/null || [ ! -d artifacts ]; then \builtin printf '%s\n' {missing}; exit {not_run}; fi
if [ ! -d {dir} ]; then \command -p mkdir -p -- {dir} || exit {not_run}; fi
: >| {dir}/.seed_start
__seed_ts() {{ export TZ=UTC0; while IFS= read -r __seed_l || [[ -n $__seed_l ]]; do
  if [[ $__seed_l == *"$__seed_end "* ]]; then
    __seed_p=${{__seed_l%%"$__seed_end "*}}
    if [[ -n $__seed_p ]]; then printf '[%(%Y-%m-%dT%H:%M:%SZ)T] %s\n' -1 "$__seed_p"; fi
    printf '[%(%Y-%m-%dT%H:%M:%SZ)T] $ exit_code: %s\n' -1 "${{__seed_l##*"$__seed_end "}}"
    __seed_rest <&0 >/dev/null 2>&1 &
    return 0
  fi
  printf '[%(%Y-%m-%dT%H:%M:%SZ)T] %s\n' -1 "$__seed_l"; done; }}
__seed_rest() {{ trap '' HUP INT; while IFS= read -r __seed_l || [[ -n $__seed_l ]]; do
  printf '[%(%Y-%m-%dT%H:%M:%SZ)T] %s\n' -1 "$__seed_l" >> "${{__seed_log%.log}}.bg.log"; done; }}
printf '$ %s\n' "$__seed_cmd" | __seed_ts >| "$__seed_log"
{{ ( eval "$__seed_cmd" ); __seed_rc=$?; printf '%s %s\n' "$__seed_end" "$__seed_rc"; exit "$__seed_rc"; }} 2>&1 | __seed_ts >> "$__seed_log"
exit "${{PIPESTATUS[0]}}"
)"#,
        cmd = shell_quote(command),
        log = shell_quote(log_file),
        end = shell_quote(&nonce()),
        work = shell_quote(work_dir),
        dir = shell_quote(log_dir),
        missing = shell_quote(WORKDIR_MISSING),
        not_run = NOT_RUN,
    )
}

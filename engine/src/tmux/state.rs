//! What a command's remote directory says about it, and the script that reports it.

use crate::error::{Error, ErrorCode, Result};
use crate::transport::ExecOutput;

/// The contents of a command's `exit` file: the truth about how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ExitInfo {
    pub code: i32,
    /// `normal`, `prompt` (interrupted back to the prompt), `shell_exit` (the command ended the
    /// shell), `shell_killed`, `killed` (background group killed), `cd_failed`.
    pub how: String,
    /// `done` or `stopped` (a stop was requested).
    pub state: String,
    /// Seconds since the epoch.
    pub ended: Option<f64>,
}

/// A command's state as reported by its remote directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommandState {
    pub exit: Option<ExitInfo>,
    /// Whether the process that will write the exit file still exists (checked only while no
    /// exit file is there): the tmux session (foreground) or the group leader (background).
    pub alive: bool,
    pub started: Option<f64>,
    /// The shell's directory when the command started.
    pub pwd: Option<String>,
    pub pid: Option<i64>,
    pub stdout_size: u64,
    pub stderr_size: u64,
    /// The command directory does not exist (never started on this machine, or removed).
    pub missing: bool,
    /// The command's exit file holds no exit line: the command wrote over it. Never a sign that
    /// the session is gone (`alive` says that, from tmux).
    pub exit_garbled: bool,
    /// The command still holds the session's foreground lock (reported with `exit_garbled`).
    pub holds_lock: bool,
    /// The command was written but never typed (its caller died before starting it) and nothing
    /// holds it any more: it will never run.
    pub never_started: bool,
    /// A foreground command that sleeps reading the session's terminal (it waits for input).
    pub waiting_input: bool,
    /// Then: the terminal's line at the cursor (a prompt written to the terminal itself).
    pub screen_line: Option<String>,
}

/// Whether `line` is an exit line as the session shell and the control script write it, and as
/// they read it (ctl.sh `rr_ended`): `code=<number> how=<word> state=<word>`, then anything.
/// A command can write its own exit file; `code=x how= state=` is not an end.
pub fn is_exit_line(line: &str) -> bool {
    let mut words = line.split(' ');
    let mut field = |name: &str| {
        words
            .next()
            .and_then(|w| w.strip_prefix(name))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let (Some(code), Some(how), Some(state)) = (field("code="), field("how="), field("state="))
    else {
        return false;
    };
    let word = |w: &str| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    code.bytes().all(|b| b.is_ascii_digit()) && word(&how) && word(&state)
}

/// Parse the output of the control script's `report` (anything before `@report` is ignored).
pub fn parse(out: &ExecOutput) -> Result<CommandState> {
    let text = out.stdout_lossy();
    let Some((_, report)) = text.split_once("@report\n") else {
        return Err(Error::new(
            ErrorCode::RemoteError,
            format!(
                "the command state could not be read from the machine: {}",
                out.stderr_lossy().trim()
            ),
        ));
    };
    let mut st = CommandState::default();
    let mut code = None;
    let mut how = String::new();
    let mut state = String::new();
    let mut ended = None;
    // The directory the command started in comes last, raw (it may hold any character). The
    // markers are whole lines: a terminal line in the report (`screen=`) cannot imitate them.
    let report = format!("\n{report}");
    let (report, pwd) = match report.split_once("\n@pwd\n") {
        Some((r, p)) => (r, Some(p.strip_suffix('\n').unwrap_or(p))),
        None => (report.as_str(), None),
    };
    let (report, sizes) = report.split_once("\n@sizes\n").unwrap_or((report, ""));
    for line in sizes.lines() {
        // `wc -c` lines: "<size> <path>"; the total line ends in "total".
        let Some((n, path)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let n = n.parse().unwrap_or(0);
        if path.ends_with("/stdout") {
            st.stdout_size = n;
        } else if path.ends_with("/stderr") {
            st.stderr_size = n;
        }
    }
    // The exit file is one line of space-separated `key=value`s (written in one go by the
    // session shell); the stop script's fallback and the other lines are one `key=value` each.
    let pairs = report.lines().flat_map(|line| -> Vec<&str> {
        if line.starts_with("code=") {
            line.split_whitespace().collect()
        } else {
            vec![line]
        }
    });
    for pair in pairs {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        let v = v.trim();
        match k {
            "missing" => st.missing = true,
            "never" => st.never_started = true,
            "garbled" => st.exit_garbled = true,
            "holds" => st.holds_lock = true,
            "input" => st.waiting_input = v == "1",
            "screen" => {
                let line: String = pair["screen=".len()..]
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect();
                st.screen_line = Some(line);
            }
            "alive" => st.alive = v == "1",
            "code" => code = v.parse::<i32>().ok(),
            "how" => how = v.to_string(),
            "state" => state = v.to_string(),
            "ended" => ended = v.parse::<f64>().ok(),
            "started" => st.started = v.parse::<f64>().ok(),
            "pwd" => st.pwd = Some(v.to_string()),
            "pid" => st.pid = v.parse::<i64>().ok(),
            _ => {}
        }
    }
    if let Some(pwd) = pwd {
        st.pwd = Some(pwd.to_string());
    }
    if let Some(code) = code {
        st.exit = Some(ExitInfo {
            code,
            how,
            state,
            ended,
        });
        st.alive = false;
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_lines_are_strict() {
        for good in [
            "code=0 how=normal state=done ended=1.5",
            "code=137 how=shell_killed state=done",
        ] {
            assert!(is_exit_line(good), "{good}");
        }
        for bad in [
            "code=x how=y state=z",
            "code= how=normal state=done",
            "code=0 how=Normal state=done",
            "code=-1 how=normal state=done",
            "code=0  how=normal state=done",
            "code=0 how=normal",
            "garbage",
        ] {
            assert!(!is_exit_line(bad), "{bad}");
        }
    }
    use crate::transport::ExitStatus;

    fn out(s: &str) -> ExecOutput {
        ExecOutput {
            stdout: s.as_bytes().to_vec(),
            stderr: Vec::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            status: ExitStatus::Code(0),
        }
    }

    #[test]
    fn parses_a_finished_command() {
        let st = parse(&out(
            "noise\n@report\ncode=7\nhow=shell_exit\nstate=done\nended=12.5\nstarted=10.25\n@sizes\n  3 /x/stdout\n 10 /x/stderr\n 13 total\n",
        ))
        .unwrap();
        let exit = st.exit.unwrap();
        assert_eq!((exit.code, exit.how.as_str()), (7, "shell_exit"));
        assert_eq!(exit.ended, Some(12.5));
        assert_eq!(st.started, Some(10.25));
        assert_eq!((st.stdout_size, st.stderr_size), (3, 10));
        assert!(!st.alive);
    }

    #[test]
    fn parses_the_one_line_exit_file() {
        let st = parse(&out(
            "@report\ncode=0 how=normal state=stopped ended=12.5\nstarted=10.25\npwd=/a b=c\n",
        ))
        .unwrap();
        let exit = st.exit.unwrap();
        assert_eq!(
            (exit.code, exit.how.as_str(), exit.state.as_str()),
            (0, "normal", "stopped")
        );
        assert_eq!(exit.ended, Some(12.5));
        assert_eq!(st.pwd.as_deref(), Some("/a b=c"));
        assert_eq!((st.stdout_size, st.stderr_size), (0, 0));
    }

    #[test]
    fn a_directory_name_cannot_forge_the_exit() {
        let st = parse(&out(
            "@report\nalive=1\nstarted=10.25\n@pwd\n/tmp/x\ncode=0 how=normal state=done\n",
        ))
        .unwrap();
        assert!(st.exit.is_none());
        assert!(st.alive);
        assert_eq!(
            st.pwd.as_deref(),
            Some("/tmp/x\ncode=0 how=normal state=done")
        );
    }

    #[test]
    fn a_terminal_line_cannot_forge_the_markers() {
        let st = parse(&out(
            "@report\ninput=1\nscreen=Password: @sizes\nalive=1\nstarted=1.5\n@sizes\n  3 /x/stdout\n@pwd\n/w\n",
        ))
        .unwrap();
        assert!(st.waiting_input && st.alive);
        assert_eq!(st.screen_line.as_deref(), Some("Password: @sizes"));
        assert_eq!((st.stdout_size, st.pwd.as_deref()), (3, Some("/w")));
    }

    #[test]
    fn no_report_marker_is_an_error() {
        assert!(parse(&out("garbage")).is_err());
    }
}

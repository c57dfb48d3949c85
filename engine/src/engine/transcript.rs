//! What `session read` shows of the terminal's transcript: what a person at the terminal saw,
//! without the engine's own plumbing. Removed: the line the engine types to run each command
//! (`\builtin . "$__rr_sdir/rr.sh" run ...`: the session shell shows the command's own text
//! instead, `$ TEXT`), the escape sequence that names the window to wake a waiting caller
//! (`ESC k rr-<id> ESC \`), and the bracketed-paste mode switches (`ESC[?2004h`/`l`) that
//! sessions started by older versions printed before every prompt. Everything else is kept as
//! the terminal got it (a human reader on a terminal still gets control characters
//! neutralised by the CLI).

/// The typed line's fixed part (see `tmux::TmuxDriver::start_command`).
const TYPED_LINE: &str = "\\builtin . \"$__rr_sdir/rr.sh\" ";

/// `text` without the engine's plumbing (see the module documentation).
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // Whole lines holding the typed line.
    while let Some(at) = rest.find(TYPED_LINE) {
        let start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        let end = rest[at..].find('\n').map_or(rest.len(), |i| at + i + 1);
        out.push_str(&rest[..start]);
        rest = &rest[end..];
    }
    out.push_str(rest);
    let out = out.replace("\x1b[?2004h", "").replace("\x1b[?2004l", "");
    strip_wake_names(&out)
}

/// Remove `ESC k rr-... ESC \` window names (and the `ESC \` that precedes them).
fn strip_wake_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\x1bkrr-") {
        let Some(len) = rest[at..].find("\x1b\\") else {
            break;
        };
        let head = &rest[..at];
        out.push_str(head.strip_suffix("\x1b\\").unwrap_or(head));
        rest = &rest[at + len + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plumbing_is_removed_and_the_rest_kept() {
        let raw = "\x1b[?2004h$  \\builtin . \"$__rr_sdir/rr.sh\" run \"$__rr_cdir/\"cmd_01ab\r\n\
                   \x1b[?2004l\r\x1b[K$ python3 -q\nprint(1)\r\n1\n\x1b\\\x1bkrr-cmd_01ab\x1b\\\
                   \x1b[?2004h$ \x1b[1mbold\x1b[0m";
        assert_eq!(
            clean(raw),
            "\r\x1b[K$ python3 -q\nprint(1)\r\n1\n$ \x1b[1mbold\x1b[0m"
        );
        assert_eq!(clean("no plumbing\n"), "no plumbing\n");
    }
}

//! What `session read` shows of the terminal's transcript: what a person at the terminal saw,
//! without the engine's own plumbing. Removed: the line the engine types to run each command
//! (`\builtin . "$__rr_sdir/rr.sh" run ...`: the session shell shows the command's own text
//! instead, `$ TEXT`), the escape sequence that names the window to wake a waiting caller
//! (`ESC k rr-<id> ESC \`), and the bracketed-paste mode switches (`ESC[?2004h`/`l`) that
//! sessions started by older versions printed before every prompt. Everything else is kept as
//! the terminal got it (a human reader on a terminal still gets control characters
//! neutralised by the CLI).
//!
//! A running command's output goes to its own files, not to the terminal; the terminal shows it
//! only when the command ends. `compose` builds the transcript a reader gets from the
//! terminal's bytes and those files, as it comes: see there.

mod compose;

use std::path::Path;

use crate::error::{Error, Result};

pub(crate) use compose::compose;
pub use compose::{TRANSCRIPT_LIVE_CAP, is_capped, is_composed};

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

/// Remove `ESC k rr-... ESC \` and `ESC k rq-... ESC \` window names (a command's end, told to
/// a wait-for channel or to a control client) and the `ESC \` that precedes them.
fn strip_wake_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let next = |t: &str| match (t.find("\x1bkrr-"), t.find("\x1bkrq-")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    while let Some(at) = next(rest) {
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

/// The session shell's marks in the terminal (an OSC string tmux ignores; only the transcript
/// pipe carries it): `ESC ] 6973 ; rr-KIND ; SECRET ; COMMAND_ID BEL`, where SECRET is the
/// session's mark secret (a session started by an older version prints none).
const MARK_PREFIX: &[u8] = b"\x1b]6973;rr-";

/// The session's mark secret, kept in its local log directory (0600; never on the machine
/// under a name, see docs/security.md, "Marks and end notices").
const MARK_KEY_FILE: &str = "marks.key";

/// Keep a new session's mark secret in its local log directory `log_dir`.
pub fn save_mark_key(log_dir: &Path, key: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = log_dir.join(MARK_KEY_FILE);
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(key.as_bytes()))
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), &e))
}

/// The mark secret of the session whose local log directory is `log_dir`; `None` for a session
/// started by an older version (its marks hold none).
pub(crate) fn load_mark_key(log_dir: &Path) -> Option<String> {
    let key = std::fs::read_to_string(log_dir.join(MARK_KEY_FILE)).ok()?;
    let key = key.trim();
    (!key.is_empty() && key.bytes().all(|b| b.is_ascii_hexdigit())).then(|| key.to_string())
}

/// A mark of the session shell (`engine/src/tmux/rr.sh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mark {
    /// The command's text has been shown; its output starts.
    Run(String),
    /// The command ended; the terminal's copy of its output follows.
    End(String),
    /// The terminal's copy of the command's output is over.
    Shown(String),
}

fn is_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

/// The first complete, well-formed mark in `buf` at or after `from` that holds the session's
/// mark secret `key` (`None`: a session whose marks hold none): its start, its end (just past
/// it) and what it says. Anything else is left as text: a mark printed by a command's output
/// cannot know the secret.
pub(crate) fn find_mark(
    buf: &[u8],
    from: usize,
    key: Option<&str>,
) -> Option<(usize, usize, Mark)> {
    let mut at = from;
    while at < buf.len() {
        let start = at + find(&buf[at..], MARK_PREFIX)?;
        let body = start + MARK_PREFIX.len();
        at = body;
        let Some(len) = buf[body..].iter().take(160).position(|b| *b == 0x07) else {
            continue;
        };
        let Some((kind, rest)) = split_once(&buf[body..body + len], b';') else {
            continue;
        };
        let id = match key {
            Some(key) => match split_once(rest, b';') {
                Some((k, id)) if k == key.as_bytes() => id,
                _ => continue,
            },
            None => rest,
        };
        if !is_id(id) {
            continue;
        }
        let id = String::from_utf8_lossy(id).into_owned();
        let mark = match kind {
            b"run" => Mark::Run(id),
            b"end" => Mark::End(id),
            b"shown" => Mark::Shown(id),
            _ => continue,
        };
        return Some((start, body + len + 1, mark));
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|b| *b == sep)?;
    Some((&s[..i], &s[i + 1..]))
}

/// Longest tail held back before it is complete.
const HOLD_MAX: usize = 64 << 10;

/// How many bytes at the end of `tail` (the newest bytes of the terminal) to hold back until
/// more come: an escape sequence not yet complete (a mark or a wake name cut in two), a line
/// that holds or may be starting the engine's typed line (removed whole, so it must be whole),
/// or a UTF-8 character cut in two. At most [`HOLD_MAX`].
pub(crate) fn hold_len(tail: &[u8]) -> usize {
    let mut from = tail.len();
    if let Some(esc) = tail.iter().rposition(|b| *b == 0x1b)
        && !escape_complete(&tail[esc..])
    {
        from = esc;
        if from >= 2 && &tail[from - 2..from] == b"\x1b\\" {
            from -= 2;
        }
    }
    let line_start = tail.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let line = &tail[line_start..];
    let typed = TYPED_LINE.as_bytes();
    if find(line, typed).is_some() || (1..typed.len()).any(|n| line.ends_with(&typed[..n])) {
        from = from.min(line_start);
    }
    // A UTF-8 sequence cut at the end.
    for back in 1..=3.min(tail.len()) {
        let b = tail[tail.len() - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        if need > back {
            from = from.min(tail.len() - back);
        }
        break;
    }
    let held = tail.len() - from;
    if held > HOLD_MAX { 0 } else { held }
}

/// The escape sequence at the start of `seq` (which starts with ESC) is complete.
fn escape_complete(seq: &[u8]) -> bool {
    let Some(&kind) = seq.get(1) else {
        return false;
    };
    let rest = &seq[2..];
    let st = |r: &[u8]| find(r, b"\x1b\\").is_some();
    match kind {
        b']' => rest.contains(&0x07) || st(rest),
        b'k' | b'P' | b'_' | b'^' => st(rest),
        b'[' => rest.iter().any(|b| (0x40..=0x7e).contains(b)),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_found_and_forgeries_left_as_text() {
        let buf = b"$ x\n\x1b]6973;rr-run;cmd_01\x07out\x1b]6973;rr-end;cmd_01\x07";
        let (s, e, m) = find_mark(buf, 0, None).unwrap();
        assert_eq!((s, m), (4, Mark::Run("cmd_01".into())));
        let (_, e2, m) = find_mark(buf, e, None).unwrap();
        assert_eq!((e2, m), (buf.len(), Mark::End("cmd_01".into())));
        assert_eq!(find_mark(buf, e2, None), None);
        assert_eq!(find_mark(b"\x1b]6973;rr-run;../x\x07", 0, None), None);
        assert_eq!(find_mark(b"\x1b]6973;rr-nope;cmd_1\x07", 0, None), None);
        assert_eq!(find_mark(b"\x1b]6973;rr-run;cmd_1", 0, None), None);
    }

    #[test]
    fn marks_without_the_session_secret_are_text() {
        let key = Some("00ff");
        let buf = b"\x1b]6973;rr-run;cmd_01\x07\x1b]6973;rr-end;0f;cmd_01\x07\
                    \x1b]6973;rr-end;00ff;cmd_01\x07";
        let (s, e, m) = find_mark(buf, 0, key).unwrap();
        assert_eq!((e, m), (buf.len(), Mark::End("cmd_01".into())));
        assert!(s > 40);
        assert_eq!(find_mark(b"\x1b]6973;rr-run;00ff\x07", 0, key), None);
        assert_eq!(find_mark(b"\x1b]6973;rr-run;00ff;../x\x07", 0, key), None);
    }

    #[test]
    fn incomplete_tails_are_held() {
        assert_eq!(hold_len(b"done\n$ "), 0);
        assert_eq!(hold_len(b"done\n\x1b]6973;rr-ru"), 12);
        assert_eq!(hold_len(b"a\x1b\\\x1bkrr-cmd"), 10);
        assert_eq!(hold_len(b"a\x1b[1m"), 0);
        assert_eq!(hold_len(b"a\x1b["), 2);
        assert_eq!(hold_len(b"x\n$  \\builtin . \"$__rr"), 20);
        assert_eq!(hold_len(b"x\n$  \\bu"), 6);
        assert_eq!(hold_len("é".as_bytes().split_at(1).0), 1);
        assert_eq!(hold_len("é".as_bytes()), 0);
    }

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
        // The end of a command typed through a control client, and a wait-for one after it.
        assert_eq!(
            clean("1\n\x1b\\\x1bkrq-cmd_02\x1b\\2\n\x1b\\\x1bkrr-cmd_03\x1b\\$ "),
            "1\n2\n$ "
        );
    }
}

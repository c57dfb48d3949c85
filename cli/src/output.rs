//! Rendering: one JSON object on stdout with `--json`, otherwise tables and key/value lists.
//!
//! Every command returns a [`Report`]: the contract's JSON plus an optional human rendering.
//! Errors go to stderr: `{"error":{"code","message","retryable","hint"?}}` with `--json` (the
//! message ends with the hint in the CLI's words; `hint` gives it as data), a plain line
//! otherwise. Colour is used only on a terminal (or with `--color always`) and never when
//! `NO_COLOR` is set to a non-empty value (unless `--color always` asks for it).

use std::io::{IsTerminal, Write};

use remote_runner_engine::Error;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use unicode_width::UnicodeWidthStr;

use crate::exit;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorMode {
    /// Colour on a terminal, unless NO_COLOR is set.
    Auto,
    /// Always colour, even into a pipe.
    Always,
    /// Never colour.
    Never,
}

/// How to write to the two streams.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
    stdout_color: bool,
    stderr_color: bool,
}

impl Output {
    pub fn new(json: bool, color: ColorMode) -> Output {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let decide = |is_tty: bool| match color {
            ColorMode::Always => true,
            ColorMode::Never => false,
            ColorMode::Auto => is_tty && !no_color,
        };
        Output {
            json,
            stdout_color: decide(std::io::stdout().is_terminal()),
            stderr_color: decide(std::io::stderr().is_terminal()),
        }
    }

    /// Print a command's result and return the exit code it asks for.
    pub fn report(&self, report: &Report) -> u8 {
        let text = if self.json || report.human.is_empty() {
            let mut s = serde_json::to_string_pretty(&report.json)
                .unwrap_or_else(|_| report.json.to_string());
            s.push('\n');
            s
        } else {
            render_blocks(&report.human, self.stdout_color)
        };
        write_ignoring_broken_pipe(&mut std::io::stdout().lock(), &text);
        report.exit
    }

    /// Print an error to stderr and return its exit code.
    pub fn error(&self, err: &Error) -> u8 {
        let text = if self.json {
            let message = crate::hint::message(err);
            format!(
                "{}\n",
                serde_json::json!({ "error": err.to_json_with(&message) })
            )
        } else {
            let label = paint("error:", Tone::Bad, self.stderr_color);
            let code = paint(&format!("[{}]", err.code), Tone::Dim, self.stderr_color);
            let message = crate::hint::message(err);
            format!("{label} {} {code}\n", neutralize(&message))
        };
        write_ignoring_broken_pipe(&mut std::io::stderr().lock(), &text);
        exit::for_error(err.code)
    }

    /// A coloured status line on stderr (e.g. how a command ended, after its own output).
    pub fn status(&self, cell: &Cell) {
        let text = paint(&neutralize(&cell.text), cell.tone, self.stderr_color);
        write_ignoring_broken_pipe(&mut std::io::stderr().lock(), &format!("{text}\n"));
    }

    /// A warning or progress line on stderr (never on stdout, so `--json` stays one object).
    pub fn note(&self, message: &str) {
        let label = paint("note:", Tone::Warn, self.stderr_color);
        write_ignoring_broken_pipe(
            &mut std::io::stderr().lock(),
            &format!("{label} {}\n", neutralize(message)),
        );
    }
}

/// A command's result: the JSON object, how to show it to a person, and the exit code.
#[derive(Debug, Clone)]
pub struct Report {
    pub json: Value,
    pub human: Vec<Block>,
    pub exit: u8,
}

impl Report {
    pub fn new(json: Value) -> Report {
        Report {
            json,
            human: Vec::new(),
            exit: exit::SUCCESS,
        }
    }

    pub fn human(mut self, blocks: Vec<Block>) -> Report {
        self.human = blocks;
        self
    }

    /// Exit with this code (e.g. [`exit::for_remote_status`]).
    pub fn exit_code(mut self, code: u8) -> Report {
        self.exit = code;
        self
    }

    /// The work ran and its result says it failed (exit code 1).
    pub fn failed(mut self) -> Report {
        self.exit = exit::WORK_FAILED;
        self
    }
}

/// How a piece of text is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Bold,
    Good,
    Bad,
    Warn,
    Dim,
}

#[derive(Debug, Clone)]
pub struct Cell {
    pub text: String,
    pub tone: Tone,
}

impl Cell {
    pub fn new(text: impl Into<String>, tone: Tone) -> Cell {
        Cell {
            text: text.into(),
            tone,
        }
    }

    pub fn plain(text: impl Into<String>) -> Cell {
        Cell::new(text, Tone::Plain)
    }

    /// "yes" in green or "no" in red.
    pub fn check(ok: bool) -> Cell {
        if ok {
            Cell::new("yes", Tone::Good)
        } else {
            Cell::new("no", Tone::Bad)
        }
    }
}

/// One part of a human rendering.
#[derive(Debug, Clone)]
pub enum Block {
    /// Aligned columns with a header row; `empty` is shown instead when there are no rows.
    Table {
        headers: Vec<&'static str>,
        rows: Vec<Vec<Cell>>,
        empty: String,
    },
    /// `key  value` lines with the keys aligned.
    Fields(Vec<(&'static str, Cell)>),
    /// One line.
    Line(Cell),
    /// Text printed exactly as is (a completion script, a man page). The only block that is not
    /// neutralised: whoever builds it decides (see [`neutralize`]).
    Raw(String),
}

/// Every table cell, field value and line is passed through [`neutralize`] here, so no
/// renderer can forget it: file names, paths, cwds and versions that came from a machine never
/// reach the terminal raw. (`--json` output is never touched.)
fn render_blocks(blocks: &[Block], color: bool) -> String {
    let mut out = String::new();
    for block in blocks {
        match block {
            Block::Table {
                headers,
                rows,
                empty,
            } => {
                let rows: Vec<Vec<Cell>> = rows
                    .iter()
                    .map(|row| {
                        row.iter()
                            .map(|c| Cell::new(neutralize_inline(&c.text), c.tone))
                            .collect()
                    })
                    .collect();
                render_table(&mut out, headers, &rows, &neutralize(empty), color)
            }
            Block::Fields(fields) => {
                let width = fields.iter().map(|(k, _)| k.width()).max();
                for (key, value) in fields {
                    let pad = width.unwrap_or(0) - key.width();
                    let key = paint(key, Tone::Bold, color);
                    let value = paint(&neutralize_inline(&value.text), value.tone, color);
                    out.push_str(&format!("{key}{}  {value}\n", " ".repeat(pad)));
                }
            }
            Block::Line(cell) => {
                out.push_str(&paint(&neutralize(&cell.text), cell.tone, color));
                out.push('\n');
            }
            Block::Raw(text) => out.push_str(text),
        }
    }
    out
}

/// `text` (from a machine, or anything else) made safe to print on a person's terminal: every
/// control character is shown as text instead of acting on the terminal. C0 controls other
/// than newline and tab become caret notation (`ESC` is `^[`, so OSC 52 clipboard writes,
/// title changes and screen clears are inert), DEL is `^?`, C1 controls (U+0080..U+009F, which
/// some terminals take as `ESC [`) and the bidirectional overrides and isolates (which can make
/// a name read as something else) become `\u{202e}`-style text. `\r\n` becomes `\n`.
pub fn neutralize(text: &str) -> String {
    neutralize_with(text, false)
}

/// [`neutralize`] for one table cell or field value: newlines and tabs are shown too (`^J`,
/// `^I`), so a name cannot break the layout or forge a row.
pub fn neutralize_inline(text: &str) -> String {
    neutralize_with(text, true)
}

fn neutralize_with(text: &str, inline: bool) -> String {
    let text = text.replace("\r\n", "\n");
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' if !inline => out.push(c),
            '\u{0}'..='\u{1f}' => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            '\u{7f}' => out.push_str("^?"),
            '\u{80}'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

fn render_table(out: &mut String, headers: &[&str], rows: &[Vec<Cell>], empty: &str, color: bool) {
    if rows.is_empty() {
        out.push_str(empty);
        out.push('\n');
        return;
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.width()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.text.width());
            }
        }
    }
    let header_cells: Vec<Cell> = headers.iter().map(|h| Cell::new(*h, Tone::Bold)).collect();
    for row in std::iter::once(&header_cells).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let last = i + 1 == row.len();
            line.push_str(&paint(&cell.text, cell.tone, color));
            if !last {
                let pad = widths.get(i).copied().unwrap_or(0) - cell.text.width();
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn paint(text: &str, tone: Tone, color: bool) -> String {
    let code = match tone {
        Tone::Plain => return text.to_string(),
        Tone::Bold => "1",
        Tone::Good => "32",
        Tone::Bad => "1;31",
        Tone::Warn => "33",
        Tone::Dim => "2",
    };
    if color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// A record as the JSON the contract shows (its serde shape).
pub fn to_json(value: &impl serde::Serialize) -> remote_runner_engine::Result<Value> {
    serde_json::to_value(value)
        .map_err(|e| Error::internal(format!("cannot encode the result as JSON: {e}")))
}

/// A reader closing the pipe early (`| head`) is not an error worth a panic or a message.
fn write_ignoring_broken_pipe(w: &mut dyn Write, text: &str) {
    let _ = w.write_all(text.as_bytes()).and_then(|()| w.flush());
}

/// "just now", "5 minutes ago", "3 days ago"; the timestamp itself when older than 30 days or
/// unreadable.
pub fn relative_time(rfc3339: &str) -> String {
    let Ok(then) = OffsetDateTime::parse(rfc3339, &Rfc3339) else {
        return rfc3339.to_string();
    };
    let secs = (OffsetDateTime::now_utc() - then).whole_seconds();
    let ago = |n: i64, unit: &str| {
        let s = if n == 1 { "" } else { "s" };
        format!("{n} {unit}{s} ago")
    };
    match secs {
        s if s < 0 => rfc3339.to_string(),
        0..=59 => "just now".to_string(),
        60..=3599 => ago(secs / 60, "minute"),
        3600..=86_399 => ago(secs / 3600, "hour"),
        86_400..=2_591_999 => ago(secs / 86_400, "day"),
        _ => rfc3339.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_colour_only_when_asked() {
        let blocks = vec![Block::Table {
            headers: vec!["ID", "HOST"],
            rows: vec![
                vec![Cell::plain("a"), Cell::plain("h1")],
                vec![Cell::plain("longer"), Cell::new("h2", Tone::Good)],
            ],
            empty: "none".into(),
        }];
        assert_eq!(
            render_blocks(&blocks, false),
            "ID      HOST\na       h1\nlonger  h2\n"
        );
        assert!(render_blocks(&blocks, true).contains("\x1b[32mh2\x1b[0m"));
    }

    #[test]
    fn wide_characters_take_two_columns() {
        let blocks = vec![Block::Table {
            headers: vec!["CWD", "STATUS"],
            rows: vec![
                vec![Cell::plain("/数据/实验"), Cell::plain("active")],
                vec![Cell::plain("/data/run"), Cell::plain("lost")],
            ],
            empty: "none".into(),
        }];
        assert_eq!(
            render_blocks(&blocks, false),
            "CWD         STATUS\n/数据/实验  active\n/data/run   lost\n"
        );
    }

    #[test]
    fn escape_sequences_become_visible_text() {
        let hostile = "a\x1b]0;pwned\x07b\x1b[2J\x1b[31mred\r\nnext\tcol\x08\x7f\u{9b}31m";
        let safe = neutralize(hostile);
        assert_eq!(
            safe,
            "a^[]0;pwned^Gb^[[2J^[[31mred\nnext\tcol^H^?\\u{9b}31m"
        );
        assert!(
            !safe
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
        assert_eq!(neutralize("50%\r100%"), "50%^M100%");
        assert_eq!(neutralize("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        let text = "héllo wörld\n\tindented ✓\n";
        assert_eq!(neutralize(text), text);
    }

    #[test]
    fn cells_fields_lines_and_empty_notes_are_neutralised() {
        let osc52 = "\x1b]52;c;cm0gLXJmIH4K\x07";
        let blocks = vec![
            Block::Table {
                headers: vec!["NAME"],
                rows: vec![vec![Cell::plain(format!("a{osc52}\nforged row"))]],
                empty: String::new(),
            },
            Block::Fields(vec![("cwd", Cell::plain("/x\x1b]0;title\x07"))]),
            Block::Line(Cell::plain("\x1bc clear")),
            Block::Table {
                headers: vec!["NAME"],
                rows: vec![],
                empty: format!("/d{osc52} is empty."),
            },
        ];
        for color in [false, true] {
            let out = render_blocks(&blocks, color);
            let without_our_colours = out.replace("\x1b[1m", "").replace("\x1b[0m", "");
            assert!(!without_our_colours.contains('\x1b'), "{out:?}");
            assert!(!out.contains('\x07'), "{out:?}");
            assert!(
                out.contains("a^[]52;c;cm0gLXJmIH4K^G^Jforged row"),
                "{out:?}"
            );
        }
    }

    #[test]
    fn relative_times_read_naturally() {
        let now = OffsetDateTime::now_utc();
        let fmt = |t: OffsetDateTime| t.format(&Rfc3339).unwrap();
        assert_eq!(relative_time(&fmt(now)), "just now");
        assert_eq!(
            relative_time(&fmt(now - time::Duration::minutes(5))),
            "5 minutes ago"
        );
        assert_eq!(
            relative_time(&fmt(now - time::Duration::hours(1))),
            "1 hour ago"
        );
        assert_eq!(relative_time("not a time"), "not a time");
    }
}

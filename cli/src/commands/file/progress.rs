//! A transfer progress bar on stderr: bytes done of total, rate, ETA. Only for a person at a
//! terminal: never with `--json` and never when stderr is not a TTY. Redrawn at most every
//! 100 ms on one line (`\r`), cleared when the transfer ends.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use remote_runner_provider::engine::transfer::{ProgressFn, TransferProgress};

const REDRAW_EVERY: Duration = Duration::from_millis(100);
const BAR_WIDTH: usize = 24;

/// What the bar remembers between updates.
struct BarState {
    started: Instant,
    last_draw: Option<Instant>,
    drawn: bool,
}

/// The bar: hand [`ProgressBar::callback`] to the engine, call [`ProgressBar::finish`] after.
pub struct ProgressBar {
    state: Arc<Mutex<BarState>>,
}

impl ProgressBar {
    /// A bar when a person is watching (`!json` and stderr is a terminal), else `None`.
    pub fn for_terminal(json: bool) -> Option<ProgressBar> {
        if json || !std::io::stderr().is_terminal() {
            return None;
        }
        Some(ProgressBar {
            state: Arc::new(Mutex::new(BarState {
                started: Instant::now(),
                last_draw: None,
                drawn: false,
            })),
        })
    }

    pub fn callback(&self) -> ProgressFn {
        let state = self.state.clone();
        Arc::new(move |p: &TransferProgress| {
            let Ok(mut s) = state.lock() else { return };
            let now = Instant::now();
            let complete = p.bytes_total > 0 && p.bytes_done >= p.bytes_total;
            if !complete && s.last_draw.is_some_and(|t| now - t < REDRAW_EVERY) {
                return;
            }
            s.last_draw = Some(now);
            s.drawn = true;
            let line = render(p, now - s.started);
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{line}");
            let _ = err.flush();
        })
    }

    /// Clear the bar's line.
    pub fn finish(&self) {
        if self.state.lock().is_ok_and(|s| s.drawn) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

fn render(p: &TransferProgress, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(0.001);
    let rate = p.bytes_done as f64 / secs;
    let (bar, eta) = if p.bytes_total > 0 {
        let frac = (p.bytes_done as f64 / p.bytes_total as f64).clamp(0.0, 1.0);
        let filled = (frac * BAR_WIDTH as f64).round() as usize;
        let bar = format!(
            "[{}{}] {:>3.0}% ",
            "#".repeat(filled),
            "-".repeat(BAR_WIDTH - filled),
            frac * 100.0
        );
        let left = p.bytes_total.saturating_sub(p.bytes_done) as f64;
        let eta = if rate > 0.0 {
            format!("  ETA {}", duration(left / rate))
        } else {
            String::new()
        };
        (bar, eta)
    } else {
        (String::new(), String::new())
    };
    let files = if p.files_total > 1 {
        format!("  {}/{} files", p.files_done, p.files_total)
    } else {
        String::new()
    };
    format!(
        "{bar}{} / {}  {}/s{eta}{files}",
        bytes(p.bytes_done as f64),
        bytes(p.bytes_total as f64),
        bytes(rate)
    )
}

/// `12.3 MiB`.
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn duration(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_bytes_rate_and_eta() {
        let p = TransferProgress {
            transfer_id: "tr_1".into(),
            bytes_done: 50 * 1024 * 1024,
            bytes_total: 100 * 1024 * 1024,
            files_done: 0,
            files_total: 1,
        };
        let line = render(&p, Duration::from_secs(5));
        assert!(line.contains(" 50% "), "{line}");
        assert!(line.contains("50.0 MiB / 100.0 MiB"), "{line}");
        assert!(line.contains("10.0 MiB/s"), "{line}");
        assert!(line.contains("ETA 5s"), "{line}");
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(duration(125.0), "2m05s");
    }
}

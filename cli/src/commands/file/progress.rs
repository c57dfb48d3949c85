//! A transfer progress bar on stderr (indicatif): bytes done of total, rate, ETA, files. Only
//! for a person at a terminal: never with `--json` and never when stderr is not a TTY. Cleared
//! when the transfer ends.

use std::io::IsTerminal;
use std::sync::Arc;

use indicatif::{ProgressDrawTarget, ProgressStyle};
use remote_runner_engine::engine::transfer::{ProgressFn, TransferProgress};

const TEMPLATE: &str = "[{bar:24}] {percent:>3}% {binary_bytes} / {binary_total_bytes}  {binary_bytes_per_sec}  ETA {eta}{msg}";

/// The bar: hand [`ProgressBar::callback`] to the engine, call [`ProgressBar::finish`] after.
pub struct ProgressBar {
    bar: indicatif::ProgressBar,
}

impl ProgressBar {
    /// A bar when a person is watching (`!json` and stderr is a terminal), else `None`.
    pub fn for_terminal(json: bool) -> Option<ProgressBar> {
        if json || !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(TEMPLATE)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>-");
        bar.set_style(style);
        Some(ProgressBar { bar })
    }

    pub fn callback(&self) -> ProgressFn {
        let bar = self.bar.clone();
        Arc::new(move |p: &TransferProgress| {
            if p.bytes_total > 0 {
                bar.set_length(p.bytes_total);
            }
            bar.set_message(files(p));
            bar.set_position(p.bytes_done);
            // The complete state is always shown, however fast the transfer was.
            if p.bytes_total > 0 && p.bytes_done >= p.bytes_total {
                bar.force_draw();
            }
        })
    }

    /// Clear the bar's line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `  3/10 files` for a tree, nothing for one file.
fn files(p: &TransferProgress) -> String {
    if p.files_total > 1 {
        format!("  {}/{} files", p.files_done, p.files_total)
    } else {
        String::new()
    }
}

/// `12.3 MiB`, for summaries printed after a transfer.
pub fn bytes(n: f64) -> String {
    indicatif::BinaryBytes(n.max(0.0) as u64).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
    }

    #[test]
    fn sizes_and_file_counts_read_naturally() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1536.0), "1.50 KiB");
        let p = TransferProgress {
            transfer_id: "tr_1".into(),
            bytes_done: 1,
            bytes_total: 2,
            files_done: 3,
            files_total: 10,
        };
        assert_eq!(files(&p), "  3/10 files");
    }
}

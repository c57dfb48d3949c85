//! What a benchmark returns, and how results are shown: a plain-text table on stdout and the
//! Markdown of docs/benchmarks.md.

use std::fmt::Write as _;
use std::time::Duration;

use crate::stats::{Summary, mb_per_s, ms};

/// Who did the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Ours,
    OpenSsh,
    /// Another tool doing the same work (a peer MCP server).
    Peer,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Ours => "remote-runner",
            Side::OpenSsh => "OpenSSH",
            Side::Peer => "peer",
        }
    }
}

/// One thing timed over several runs.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub what: String,
    pub side: Side,
    pub summary: Summary,
    /// Bytes moved per run, for a throughput column.
    pub bytes: Option<u64>,
}

impl Measurement {
    pub fn new(what: &str, side: Side, samples: &[Duration]) -> Measurement {
        let summary = Summary::of(samples).unwrap_or(Summary {
            runs: 0,
            median: Duration::ZERO,
            p90: Duration::ZERO,
        });
        Measurement {
            what: what.to_string(),
            side,
            summary,
            bytes: None,
        }
    }

    pub fn with_bytes(mut self, bytes: u64) -> Measurement {
        self.bytes = Some(bytes);
        self
    }

    /// Median throughput in MB/s (10^6 bytes), when bytes are known.
    pub fn throughput(&self) -> Option<f64> {
        self.bytes.map(|b| mb_per_s(b, self.summary.median))
    }
}

/// Where a ratio should land.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
    /// Reported for context only.
    None,
}

/// A comparison between two measurements of the same run.
#[derive(Debug, Clone)]
pub struct Ratio {
    pub label: String,
    pub value: f64,
    /// How the ratio is formed, e.g. "our median time / OpenSSH median time".
    pub meaning: &'static str,
    pub target: Target,
}

impl Ratio {
    /// Time ratio ours / theirs: below 1.0 means we are faster.
    pub fn time(label: &str, ours: &Measurement, theirs: &Measurement, target: Target) -> Ratio {
        Ratio {
            label: label.to_string(),
            value: ours.summary.median.as_secs_f64() / theirs.summary.median.as_secs_f64(),
            meaning: "our median time / OpenSSH median time (lower is better)",
            target,
        }
    }

    /// Speed ratio theirs-time / ours-time (for equal work: our throughput / theirs): above 1.0
    /// means we are faster.
    pub fn speed(label: &str, ours: &Measurement, theirs: &Measurement, target: Target) -> Ratio {
        Ratio {
            label: label.to_string(),
            value: theirs.summary.median.as_secs_f64() / ours.summary.median.as_secs_f64(),
            meaning: "OpenSSH median time / our median time = our throughput / OpenSSH throughput (higher is better)",
            target,
        }
    }

    /// `Some(true)` met, `Some(false)` missed, `None` no target.
    pub fn met(&self) -> Option<bool> {
        match self.target {
            Target::AtMost(t) => Some(self.value <= t),
            Target::AtLeast(t) => Some(self.value >= t),
            Target::None => None,
        }
    }

    fn target_text(&self) -> String {
        // One decimal, or two where a target has them (0.45).
        let shown = |t: f64| {
            if (t * 10.0).fract().abs() < 1e-9 {
                format!("{t:.1}")
            } else {
                format!("{t:.2}")
            }
        };
        match self.target {
            Target::AtMost(t) => format!("<= {}", shown(t)),
            Target::AtLeast(t) => format!(">= {}", shown(t)),
            Target::None => "-".to_string(),
        }
    }

    fn verdict(&self) -> &'static str {
        match self.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        }
    }
}

/// Everything one benchmark reports.
#[derive(Debug, Clone)]
pub struct BenchResult {
    pub name: &'static str,
    /// One sentence: what is compared with what.
    pub summary: String,
    pub measurements: Vec<Measurement>,
    pub ratios: Vec<Ratio>,
    /// Extra figures (peak memory, byte counts) and caveats, one line each.
    pub notes: Vec<String>,
}

impl BenchResult {
    pub fn new(name: &'static str, summary: impl Into<String>) -> BenchResult {
        BenchResult {
            name,
            summary: summary.into(),
            measurements: Vec::new(),
            ratios: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn push(&mut self, m: Measurement) -> &Measurement {
        self.measurements.push(m);
        self.measurements.last().expect("just pushed")
    }
}

fn throughput_cell(m: &Measurement) -> String {
    m.throughput()
        .map(|t| format!("{t:.1} MB/s"))
        .unwrap_or_else(|| "-".to_string())
}

/// The plain-text table printed after each benchmark.
pub fn text(result: &BenchResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "== {} — {}", result.name, result.summary);
    let _ = writeln!(
        out,
        "  {:<58} {:<14} {:>4} {:>12} {:>12} {:>12}",
        "measurement", "side", "runs", "median", "p90", "throughput"
    );
    for m in &result.measurements {
        let _ = writeln!(
            out,
            "  {:<58} {:<14} {:>4} {:>12} {:>12} {:>12}",
            m.what,
            m.side.label(),
            m.summary.runs,
            ms(m.summary.median),
            ms(m.summary.p90),
            throughput_cell(m)
        );
    }
    for r in &result.ratios {
        let _ = writeln!(
            out,
            "  ratio {}: {:.2} (target {}, {}) — {}",
            r.label,
            r.value,
            r.target_text(),
            r.verdict(),
            r.meaning
        );
    }
    for n in &result.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

/// One benchmark's section of docs/benchmarks.md.
pub fn markdown(result: &BenchResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## `{}`\n\n{}\n", result.name, result.summary);
    let _ = writeln!(
        out,
        "| measurement | side | runs | median | p90 | median throughput |\n|---|---|--:|--:|--:|--:|"
    );
    for m in &result.measurements {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            m.what.replace('|', "\\|"),
            m.side.label(),
            m.summary.runs,
            ms(m.summary.median),
            ms(m.summary.p90),
            throughput_cell(m)
        );
    }
    if !result.ratios.is_empty() {
        let _ = writeln!(
            out,
            "\n| ratio | value | target | verdict | how it is formed |\n|---|--:|---|---|---|"
        );
        for r in &result.ratios {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {} | {} | {} |",
                r.label,
                r.value,
                r.target_text(),
                r.verdict(),
                r.meaning
            );
        }
    }
    if !result.notes.is_empty() {
        out.push('\n');
        for n in &result.notes {
            let _ = writeln!(out, "- {n}");
        }
    }
    out.push('\n');
    out
}

/// The whole of docs/benchmarks.md for one run.
pub fn document(
    info: &crate::machine_info::MachineInfo,
    command: &str,
    cfg: crate::Config,
    results: &[BenchResult],
    failures: &[(String, String)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmarks\n\n\
         remote-runner beside OpenSSH doing the same work, in the same run, against the same real\n\
         `sshd` on 127.0.0.1 (a testkit bed: ed25519 key, strict known_hosts, no agent, no\n\
         ssh_config on either side). These are measurements, not tests: nothing here is asserted,\n\
         and a missed target is reported as such.\n\n\
         **Absolute times drift between runs** (and with whatever else the machine is doing);\n\
         the **ratios within one run hold**, because both sides run back to back on the same bed.\n\n\
         **The filesystem's recent history moves every figure of ours that creates files** (a\n\
         command's files on the machine, its local log, a tree's entries; the OpenSSH sides create\n\
         none): on a journal-less ext4, such as this bench machine's, a create scans past every\n\
         inode of its block group deleted in the last minutes, so after a test run or an earlier\n\
         section deleted many files a create costs 0.3-1 ms instead of 20 us. So the latency\n\
         sections leave their clean-up (their sessions' command directories, the probe files)\n\
         to the end of the run, and `mcp-exec-warm` shows that cost at its start and end.\n\n\
         Regenerate with `scripts/bench.sh` (builds the release binaries, installs rsync if\n\
         missing, then runs every benchmark and rewrites this file). `scripts/bench.sh --quick`\n\
         is a short smoke run that writes nothing.\n"
    );
    let _ = writeln!(
        out,
        "## This run\n\n\
         - date: {}\n\
         - command: `{command}`{}\n\
         - machine: {} cores, {} ({}), {} RAM; load average at start {}\n\
         - tools: {}; {}; {}\n\
         - statistics: median and p90 (nearest rank) over the runs shown; throughput = bytes / median time,\n  \
         MB = 10^6 bytes\n",
        info.date_utc,
        if cfg.quick { " (quick mode)" } else { "" },
        info.cores,
        info.cpu,
        info.kernel,
        info.memory,
        info.load,
        info.openssh,
        info.tmux,
        info.rsync,
    );
    let _ = writeln!(out, "## Summary of ratios\n");
    let _ = writeln!(
        out,
        "| benchmark | ratio | value | target | verdict |\n|---|---|--:|---|---|"
    );
    for r in results {
        for ratio in &r.ratios {
            let _ = writeln!(
                out,
                "| `{}` | {} | {:.2} | {} | {} |",
                r.name,
                ratio.label,
                ratio.value,
                ratio.target_text(),
                ratio.verdict()
            );
        }
    }
    out.push('\n');
    for r in results {
        out.push_str(&markdown(r));
    }
    for (name, err) in failures {
        let _ = writeln!(out, "## `{name}`\n\nCould not run in this run: {err}\n");
    }
    out
}

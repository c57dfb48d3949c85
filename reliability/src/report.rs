//! Machine-readable results: each fault writes one JSON line to
//! `target/reliability/<fault>.jsonl` (fault, how it was injected, runs, checks, result,
//! figures, the failures verbatim). `scripts/reliability.sh` renders them into
//! `docs/reliability.md`. A test records every run before it asserts, so a failure is reported
//! too, never hidden.

use std::fmt::Display;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Map, Value, json};

/// The results of one fault (or load / hostile-input case).
#[derive(Debug)]
pub struct Report {
    fault: String,
    group: String,
    injection: String,
    checks: Vec<String>,
    runs: usize,
    passed: usize,
    failures: Vec<String>,
    figures: Map<String, Value>,
    started: Instant,
    skipped: Option<String>,
}

impl Report {
    /// `fault`: a stable id (file name); `group`: `fault`, `load` or `hostile`; `injection`: how
    /// the fault is made; `checks`: what every run verifies.
    pub fn new(fault: &str, group: &str, injection: &str, checks: &[&str]) -> Report {
        Report {
            fault: fault.to_string(),
            group: group.to_string(),
            injection: injection.to_string(),
            checks: checks.iter().map(|c| c.to_string()).collect(),
            runs: 0,
            passed: 0,
            failures: Vec::new(),
            figures: Map::new(),
            started: Instant::now(),
            skipped: None,
        }
    }

    /// Count one run: passed when `outcome` is `Ok`, else its error is kept (with the run number).
    pub fn record<T>(&mut self, run: usize, outcome: anyhow::Result<T>) -> Option<T> {
        self.runs += 1;
        match outcome {
            Ok(v) => {
                self.passed += 1;
                Some(v)
            }
            Err(e) => {
                let msg = format!("run {run}: {e:#}");
                eprintln!("[{}] FAILED {msg}", self.fault);
                self.failures.push(msg);
                None
            }
        }
    }

    /// A failure outside the runs (setup, a final check).
    pub fn fail(&mut self, why: impl Display) {
        let msg = why.to_string();
        eprintln!("[{}] FAILED {msg}", self.fault);
        self.failures.push(msg);
    }

    pub fn figure(&mut self, key: &str, value: impl Into<Value>) {
        self.figures.insert(key.to_string(), value.into());
    }

    /// The fault cannot run here (never used to hide a failure: only for a missing privilege).
    pub fn skip(mut self, reason: &str) {
        eprintln!("[{}] SKIPPED: {reason}", self.fault);
        self.skipped = Some(reason.to_string());
        self.write();
    }

    /// Write the result line, then fail the test when any run failed.
    pub fn finish(self) {
        self.write();
        assert!(
            self.failures.is_empty(),
            "{}: {} of {} runs failed:\n{}",
            self.fault,
            self.failures.len(),
            self.runs,
            self.failures.join("\n")
        );
        assert!(self.runs > 0, "{}: no run was made", self.fault);
    }

    fn write(&self) {
        let result = if self.skipped.is_some() {
            "skipped"
        } else if self.failures.is_empty() && self.runs > 0 {
            "pass"
        } else {
            "fail"
        };
        let line = json!({
            "fault": self.fault,
            "group": self.group,
            "injection": self.injection,
            "checks": self.checks,
            "runs": self.runs,
            "passed": self.passed,
            "result": result,
            "skipped_reason": self.skipped,
            "failures": self.failures,
            "figures": self.figures,
            "mode": if crate::full_mode() { "full" } else { "ci" },
            "seconds": (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        });
        let dir = results_dir();
        if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| {
            std::fs::write(
                dir.join(format!("{}.jsonl", self.fault)),
                format!("{line}\n"),
            )
        }) {
            eprintln!(
                "cannot write the reliability result for {}: {e}",
                self.fault
            );
        }
    }
}

/// `target/reliability` of this workspace (or `$CARGO_TARGET_DIR/reliability`).
pub fn results_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("reliability")
}

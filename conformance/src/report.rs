//! The report: readable text for people, one JSON object for machines.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::scenarios::{Level, Scenario};
use crate::violation::{Violation, Warning};

/// How a scenario ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Pass,
    /// A rule was broken.
    Fail(Box<Violation>),
    /// Needs a capability or behaviour the provider does not offer.
    NotApplicable(String),
}

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// Scenario name.
    pub name: &'static str,
    /// Its group.
    pub group: &'static str,
    /// What it checks.
    pub checks: &'static str,
    /// Whether its failure fails the run.
    pub level: Level,
    /// The host rule it stands on.
    pub host_rule: &'static str,
    /// The outcome.
    pub outcome: Outcome,
    /// Wall time.
    pub duration_ms: u64,
    /// Tolerated oddities.
    pub warnings: Vec<Warning>,
    /// stderr bytes (counted, never parsed).
    pub stderr_bytes: u64,
}

impl ScenarioReport {
    /// A scenario whose task panicked (a harness bug, reported as a failure).
    pub fn crashed(scenario: Scenario, detail: &str) -> Self {
        ScenarioReport {
            name: scenario.name,
            group: scenario.group,
            checks: scenario.checks,
            level: scenario.level,
            host_rule: scenario.host_rule,
            outcome: Outcome::Fail(Box::new(Violation::new(
                "harness_error",
                format!("the scenario crashed: {detail}"),
                "please report this harness bug",
            ))),
            duration_ms: 0,
            warnings: Vec::new(),
            stderr_bytes: 0,
        }
    }

    /// Whether this scenario's outcome fails the run (`strict`: recommended ones too).
    pub fn fails_run(&self, strict: bool) -> bool {
        matches!(self.outcome, Outcome::Fail(_)) && (strict || self.level == Level::Required)
    }

    /// A recommended scenario that failed, reported as a warning (without `--strict`).
    pub fn only_warns(&self, strict: bool) -> bool {
        matches!(self.outcome, Outcome::Fail(_)) && !self.fails_run(strict)
    }

    /// The broken rule, if the scenario failed.
    pub fn rule(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Fail(v) => Some(&v.rule),
            _ => None,
        }
    }
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The provider command.
    pub provider: Vec<String>,
    /// Every scenario, in order.
    pub scenarios: Vec<ScenarioReport>,
    /// Recommended scenarios fail the run too (`--strict`).
    pub strict: bool,
}

impl Report {
    /// Builds a report.
    pub fn new(provider: Vec<String>, scenarios: Vec<ScenarioReport>) -> Self {
        Report {
            provider,
            scenarios,
            strict: false,
        }
    }

    /// The same report judged with `--strict` (recommended scenarios fail the run).
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// (passed, failed, not applicable). Failed counts the failures that fail the run; a
    /// recommended scenario that failed without `--strict` is counted by
    /// [`Report::recommended_failed`] instead.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for s in &self.scenarios {
            match s.outcome {
                Outcome::Pass => counts.0 += 1,
                Outcome::Fail(_) if s.fails_run(self.strict) => counts.1 += 1,
                Outcome::Fail(_) => {}
                Outcome::NotApplicable(_) => counts.2 += 1,
            }
        }
        counts
    }

    /// Recommended scenarios that failed and, without `--strict`, only warn.
    pub fn recommended_failed(&self) -> usize {
        self.scenarios
            .iter()
            .filter(|s| s.only_warns(self.strict))
            .count()
    }

    /// True when the orchestrator accepts the provider: no required scenario failed (with
    /// `--strict`, no scenario at all).
    pub fn success(&self) -> bool {
        self.counts().1 == 0
    }

    /// The scenario named `name`.
    pub fn scenario(&self, name: &str) -> Option<&ScenarioReport> {
        self.scenarios.iter().find(|s| s.name == name)
    }

    /// Rules of every failed scenario.
    pub fn failed_rules(&self) -> Vec<&str> {
        self.scenarios
            .iter()
            .filter_map(ScenarioReport::rule)
            .collect()
    }

    /// The readable report.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "remote-runner-conformance: provider {}",
            self.provider.join(" ")
        );
        let mut group = "";
        for s in &self.scenarios {
            if s.group != group {
                group = s.group;
                let _ = writeln!(out, "\n{group}");
            }
            let mark = match s.outcome {
                Outcome::Pass => "PASS",
                Outcome::Fail(_) if s.fails_run(self.strict) => "FAIL",
                Outcome::Fail(_) => "WARN",
                Outcome::NotApplicable(_) => "N/A ",
            };
            let level = match s.level {
                Level::Required => "",
                Level::Recommended => " (recommended)",
            };
            let _ = writeln!(
                out,
                "  {mark}  {:<44} {:>6} ms{level}",
                s.name, s.duration_ms
            );
            match &s.outcome {
                Outcome::Fail(v) => {
                    let _ = writeln!(out, "        host:     {}", s.host_rule);
                    let _ = writeln!(out, "        rule:     {}", v.rule);
                    let _ = writeln!(out, "        got:      {}", v.message);
                    if let Some(line) = &v.line {
                        let _ = writeln!(out, "        line:     {line}");
                    }
                    let _ = writeln!(out, "        expected: {}", v.expected);
                }
                Outcome::NotApplicable(reason) => {
                    let _ = writeln!(out, "        n/a:      {reason}");
                }
                Outcome::Pass => {}
            }
            for w in &s.warnings {
                let _ = writeln!(out, "        warning:  {} ({})", w.rule, w.message);
            }
        }
        let (passed, failed, na) = self.counts();
        let warnings: usize = self.scenarios.iter().map(|s| s.warnings.len()).sum();
        let recommended = self.recommended_failed();
        let _ = writeln!(
            out,
            "\n{passed} passed, {failed} failed, {recommended} recommended failed (warnings), \
             {na} not applicable, {warnings} warnings"
        );
        let verdict = if self.success() {
            "the BotMux host accepts this provider (no required scenario failed)"
        } else {
            "the BotMux host would not accept this provider: a required scenario failed"
        };
        let _ = writeln!(
            out,
            "{verdict}{}",
            if self.strict { " [--strict]" } else { "" }
        );
        out
    }

    /// The machine-readable report (one JSON object).
    pub fn to_json(&self) -> Value {
        let (passed, failed, na) = self.counts();
        let scenarios: Vec<Value> = self
            .scenarios
            .iter()
            .map(|s| {
                let mut v = json!({
                    "name": s.name,
                    "group": s.group,
                    "checks": s.checks,
                    "level": s.level,
                    "hostRule": s.host_rule,
                    "outcome": match s.outcome {
                        Outcome::Pass => "pass",
                        Outcome::Fail(_) if s.fails_run(self.strict) => "fail",
                        Outcome::Fail(_) => "warn",
                        Outcome::NotApplicable(_) => "n/a",
                    },
                    "durationMs": s.duration_ms,
                    "stderrBytes": s.stderr_bytes,
                    "warnings": s.warnings,
                });
                match &s.outcome {
                    Outcome::Fail(violation) => v["failure"] = json!(violation),
                    Outcome::NotApplicable(reason) => v["reason"] = json!(reason),
                    Outcome::Pass => {}
                }
                v
            })
            .collect();
        json!({
            "provider": self.provider,
            "ok": failed == 0,
            "strict": self.strict,
            "summary": {"passed": passed, "failed": failed,
                "recommendedFailed": self.recommended_failed(), "notApplicable": na},
            "scenarios": scenarios,
        })
    }
}

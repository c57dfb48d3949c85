//! Runs the selected scenarios with bounded parallelism, one fresh provider per scenario.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;

use crate::config::Config;
use crate::report::{Outcome, Report, ScenarioReport};
use crate::scenarios::{self, Ctx, Scenario};
use crate::violation::Stop;

/// The scenarios the config selects (by `--group` and `--scenario`), in report order.
/// Errors name an unknown group or scenario.
pub fn select(config: &Config) -> Result<Vec<Scenario>, String> {
    let all = scenarios::all();
    for group in &config.groups {
        if !scenarios::GROUPS.contains(&group.as_str()) {
            return Err(format!(
                "unknown group {group:?}; groups are: {}",
                scenarios::GROUPS.join(", ")
            ));
        }
    }
    for name in &config.scenarios {
        if !all.iter().any(|s| s.name == name) {
            return Err(format!("unknown scenario {name:?}; --list shows them all"));
        }
    }
    Ok(all
        .into_iter()
        .filter(|s| config.groups.is_empty() || config.groups.iter().any(|g| g == s.group))
        .filter(|s| config.scenarios.is_empty() || config.scenarios.iter().any(|n| n == s.name))
        .collect())
}

/// Runs `scenarios` against the configured provider.
pub async fn run(config: &Config, scenarios: Vec<Scenario>) -> Report {
    let config = Arc::new(config.clone());
    let jobs = config.jobs.max(1);
    let mut results: Vec<(usize, ScenarioReport)> =
        futures::stream::iter(scenarios.into_iter().enumerate().map(|(i, scenario)| {
            let config = Arc::clone(&config);
            async move {
                let handle = tokio::spawn(run_one(config, scenario));
                let report = match handle.await {
                    Ok(report) => report,
                    Err(err) => ScenarioReport::crashed(scenario, &err.to_string()),
                };
                (i, report)
            }
        }))
        .buffer_unordered(jobs)
        .collect()
        .await;
    results.sort_by_key(|(i, _)| *i);
    Report::new(
        config.provider.clone(),
        results.into_iter().map(|(_, r)| r).collect(),
    )
    .with_strict(config.strict)
}

async fn run_one(config: Arc<Config>, scenario: Scenario) -> ScenarioReport {
    let started = Instant::now();
    let temp = match &config.cwd {
        Some(_) => None,
        None => tempfile::Builder::new()
            .prefix("remote-runner-conformance-")
            .tempdir()
            .ok(),
    };
    let cwd = match (&config.cwd, &temp) {
        (Some(cwd), _) => cwd.clone(),
        (None, Some(temp)) => temp.path().to_path_buf(),
        (None, None) => std::env::temp_dir(),
    };
    let ctx = Ctx {
        config: Arc::clone(&config),
        cwd,
        session_id: format!("conformance-{}-{}", scenario.name, uuid::Uuid::new_v4()),
        warnings: Arc::new(Mutex::new(Vec::new())),
        stderr_counters: Arc::new(Mutex::new(Vec::new())),
    };
    let outcome = match (scenario.run)(ctx.clone()).await {
        Ok(()) => Outcome::Pass,
        Err(Stop::Fail(violation)) => Outcome::Fail(violation),
        Err(Stop::NotApplicable(reason)) => Outcome::NotApplicable(reason),
    };
    let warnings = ctx.warnings.lock().map(|w| w.clone()).unwrap_or_default();
    let stderr_bytes = ctx.stderr_bytes();
    drop(temp);
    ScenarioReport {
        name: scenario.name,
        group: scenario.group,
        checks: scenario.checks,
        level: scenario.level,
        host_rule: scenario.host_rule,
        outcome,
        duration_ms: started.elapsed().as_millis() as u64,
        warnings,
        stderr_bytes,
    }
}

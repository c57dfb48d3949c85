//! The scenario registry: enough scenarios, unique names, every group populated, selection.

use std::collections::HashSet;

use remote_runner_conformance::scenarios::{GROUPS, all};
use remote_runner_conformance::{Config, select};

#[test]
fn at_least_forty_uniquely_named_scenarios_in_known_groups() {
    let scenarios = all();
    assert!(scenarios.len() >= 40, "{} scenarios", scenarios.len());
    let names: HashSet<&str> = scenarios.iter().map(|s| s.name).collect();
    assert_eq!(names.len(), scenarios.len(), "scenario names are unique");
    for group in GROUPS {
        assert!(
            scenarios.iter().any(|s| s.group == group),
            "group {group} has scenarios"
        );
    }
    for s in &scenarios {
        assert!(GROUPS.contains(&s.group), "{} has a known group", s.name);
        assert!(!s.checks.is_empty(), "{} says what it checks", s.name);
    }
}

#[test]
fn selection_by_group_and_scenario() {
    let mut config = Config::new(vec!["unused".into()]);
    config.groups = vec!["resume".into()];
    let selected = select(&config).expect("resume is a group");
    assert!(!selected.is_empty());
    assert!(selected.iter().all(|s| s.group == "resume"));

    config.groups.clear();
    config.scenarios = vec!["cancel_idle".into(), "invalid_json".into()];
    let names: Vec<&str> = select(&config)
        .expect("known")
        .iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        ["cancel_idle", "invalid_json"],
        "report order, not flag order"
    );

    config.scenarios = vec!["no_such_scenario".into()];
    assert!(select(&config).is_err());
    config.scenarios.clear();
    config.groups = vec!["no_such_group".into()];
    assert!(select(&config).unwrap_err().contains("unknown group"));
}

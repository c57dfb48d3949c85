//! The harness against the reference echo provider and its deliberate mutants.
//!
//! Compiled as the `conformance` test of the `remote-runner-examples` package (see
//! examples/Cargo.toml), so that `CARGO_BIN_EXE_reference-provider` is the freshly built
//! reference provider.

use std::time::Duration;

use remote_runner_conformance::{Config, Outcome, Report, run, select};

const REFERENCE: &str = env!("CARGO_BIN_EXE_reference-provider");

fn config(args: &[&str]) -> Config {
    let mut provider = vec![REFERENCE.to_owned()];
    provider.extend(args.iter().map(|a| (*a).to_owned()));
    let mut config = Config::new(provider);
    // Short deadlines keep the mutants that never answer quick; the reference answers in
    // milliseconds, so these are still generous.
    config.operation_timeout = Duration::from_millis(3_000);
    config.exit_timeout = Duration::from_millis(3_000);
    // Mutants must fail recommended scenarios too.
    config.strict = true;
    config
}

async fn run_with(config: Config) -> Report {
    let scenarios = select(&config).expect("known groups and scenarios");
    assert!(!scenarios.is_empty(), "the filters select scenarios");
    run(&config, scenarios).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_provider_passes_every_scenario() {
    let report = run_with(config(&[])).await;
    let text = report.to_text();
    let (passed, failed, not_applicable) = report.counts();
    assert_eq!(failed, 0, "{text}");
    assert_eq!(
        not_applicable, 0,
        "the reference advertises every capability and honours every trigger:\n{text}"
    );
    assert!(passed >= 40, "at least 40 scenarios ran: {passed}\n{text}");
    assert!(report.success());
    let json = report.to_json();
    assert_eq!(json["ok"], true);
    assert_eq!(json["summary"]["failed"], 0);
}

#[tokio::test]
async fn reference_provider_answers_through_the_env_variable_too() {
    // REFERENCE_PROVIDER_MUTANT reaches the provider through --env: proves env passing.
    let mut config = config(&[]);
    config.env = vec![("REFERENCE_PROVIDER_MUTANT".into(), "two-acks".into())];
    config.scenarios = vec!["turn_ack_then_final".into()];
    let report = run_with(config).await;
    assert_eq!(
        report.failed_rules(),
        vec!["request_already_answered"],
        "{}",
        report.to_text()
    );
}

#[tokio::test]
async fn screens_the_host_ignores_are_warnings_not_failures() {
    let mut config = config(&["--mutant", "ignored-screens"]);
    config.groups = vec!["terminal".into(), "turn".into()];
    let report = run_with(config).await;
    let text = report.to_text();
    assert!(report.success(), "{text}");
    let rules: Vec<&str> = report
        .scenarios
        .iter()
        .flat_map(|s| s.warnings.iter().map(|w| w.rule.as_str()))
        .collect();
    assert!(rules.contains(&"screen_sequence_not_increasing"), "{text}");
    assert!(rules.contains(&"stale_screen_ignored"), "{text}");
    assert!(text.contains("warning:  stale_screen_ignored"), "{text}");
}

/// Runs `mutant` on the selected scenarios; `scenario` must fail with `rule`, and nothing
/// may pass that the mutant breaks in every scenario.
async fn mutant_fails(mutant: &str, groups: &[&str], scenario: &str, rule: &str) {
    let mut config = config(&["--mutant", mutant]);
    config.groups = groups.iter().map(|g| (*g).to_owned()).collect();
    let report = run_with(config).await;
    let text = report.to_text();
    assert!(!report.success(), "mutant {mutant} must fail:\n{text}");
    let Some(result) = report.scenario(scenario) else {
        panic!("scenario {scenario} was not run for mutant {mutant}:\n{text}");
    };
    match &result.outcome {
        Outcome::Fail(violation) => {
            assert_eq!(
                violation.rule, rule,
                "mutant {mutant}, scenario {scenario}:\n{text}"
            );
            assert!(!violation.expected.is_empty());
        }
        other => {
            panic!("mutant {mutant}: {scenario} should fail with {rule}, got {other:?}\n{text}")
        }
    }
    assert!(
        text.contains(&format!("rule:     {rule}")),
        "the report names the rule:\n{text}"
    );
    let json = report.to_json();
    assert_eq!(json["ok"], false);
}

macro_rules! mutant_test {
    ($test:ident, $mutant:literal, [$($group:literal),*], $scenario:literal, $rule:literal) => {
        #[tokio::test]
        async fn $test() {
            mutant_fails($mutant, &[$($group),*], $scenario, $rule).await;
        }
    };
}

mutant_test!(
    mutant_progress_before_ack,
    "progress-before-ack",
    ["turn"],
    "turn_ack_then_final",
    "event_before_ack"
);
mutant_test!(
    mutant_two_acks,
    "two-acks",
    ["turn"],
    "turn_ack_then_final",
    "request_already_answered"
);
mutant_test!(
    mutant_post_ack_failure_without_turn_id,
    "post-ack-failure-without-turn-id",
    ["turn"],
    "turn_ack_then_final",
    "post_ack_failure_without_turn_id"
);
mutant_test!(
    mutant_rebuild_same_generation,
    "rebuild-same-generation",
    ["resume"],
    "resume_rebuild_after_cancel",
    "rebuild_not_advanced"
);
mutant_test!(
    mutant_changed_remote_session_id,
    "changed-remote-session-id",
    ["turn"],
    "turn_ack_then_final",
    "remote_session_id_changed"
);
mutant_test!(
    mutant_access_token_in_state,
    "access-token-in-state",
    ["start"],
    "start_ready",
    "provider_state_sensitive_key"
);
mutant_test!(
    mutant_future_screen,
    "future-screen",
    ["start"],
    "start_ready",
    "screen_generation_ahead"
);
mutant_test!(
    mutant_final_before_outbound_result,
    "final-before-outbound-result",
    ["outbound", "session_tool"],
    "outbound_delivered_then_final",
    "final_before_results"
);
mutant_test!(
    mutant_stdout_noise,
    "stdout-noise",
    ["handshake"],
    "hello_default_capabilities",
    "non_protocol_line"
);
mutant_test!(
    mutant_ignore_cancel,
    "ignore-cancel",
    ["cancel"],
    "cancel_idle",
    "reply_timeout"
);
mutant_test!(
    mutant_hello_wrong_request_id,
    "hello-wrong-request-id",
    ["handshake"],
    "hello_default_capabilities",
    "unknown_request_id"
);
mutant_test!(
    mutant_duplicate_capabilities,
    "duplicate-capabilities",
    ["handshake"],
    "hello_default_capabilities",
    "duplicate_capability"
);
mutant_test!(
    mutant_usage_generation_mismatch,
    "usage-generation-mismatch",
    ["turn"],
    "turn_ack_then_final",
    "usage_generation"
);
mutant_test!(
    mutant_ready_without_request_id,
    "ready-without-request-id",
    ["start"],
    "start_ready",
    "field_type"
);
mutant_test!(
    mutant_status_unknown_request_id,
    "status-unknown-request-id",
    ["start"],
    "start_ready",
    "unknown_request_id"
);
mutant_test!(
    mutant_reply_to_outbound_result,
    "reply-to-outbound-result",
    ["outbound"],
    "outbound_delivered_then_final",
    "reply_to_settlement"
);
mutant_test!(
    mutant_uncorrelated_turn_failure,
    "uncorrelated-turn-failure",
    ["pre_ack"],
    "turn_before_start_refused",
    "uncorrelated_failure"
);
mutant_test!(
    mutant_accept_second_turn,
    "accept-second-turn",
    ["busy"],
    "second_turn_while_busy_refused",
    "turn_overlap"
);
mutant_test!(
    mutant_screen_after_rebuild_ready,
    "screen-after-rebuild-ready",
    ["resume"],
    "resume_rebuild_after_cancel",
    "early_new_generation_screen"
);
mutant_test!(
    mutant_exit_on_invalid_json,
    "exit-on-invalid-json",
    ["bad_input"],
    "invalid_json",
    "not_usable_after"
);
mutant_test!(
    mutant_no_exit_on_eof,
    "no-exit-on-eof",
    ["eof"],
    "eof_after_hello",
    "no_exit_after_eof"
);
mutant_test!(
    mutant_any_generation_input,
    "any-generation-input",
    ["terminal"],
    "terminal_input_future_generation_refused",
    "not_refused"
);
mutant_test!(
    mutant_forget_thread_on_rebuild,
    "forget-thread-on-rebuild",
    ["resume"],
    "resume_rebuild_after_cancel",
    "agent_thread_id_not_kept"
);
mutant_test!(
    mutant_missing_reattach,
    "missing-reattach",
    ["handshake"],
    "hello_default_capabilities",
    "missing_required_capability"
);
mutant_test!(
    mutant_cancel_answered_detached,
    "cancel-answered-detached",
    ["cancel"],
    "cancel_idle",
    "unexpected_status_value"
);
mutant_test!(
    mutant_stop_reading_after_start,
    "stop-reading-after-start",
    ["bad_input"],
    "oversize_line",
    "stdin_not_read"
);

mutant_test!(
    mutant_refuse_turns,
    "refuse-turns",
    ["turn"],
    "turn_ack_then_final",
    "unexpected_refusal"
);
mutant_test!(
    mutant_unknown_event_for_unknown_command,
    "unknown-event-for-unknown-command",
    ["unsupported"],
    "unsupported_command",
    "unknown_event_type"
);

#[tokio::test]
async fn an_unknown_event_type_fails_the_run_without_strict() {
    // The host kills a provider for an event type outside v1 whatever command it answers, so
    // this scenario is required: no --strict needed to fail the run.
    let mut config = config(&["--mutant", "unknown-event-for-unknown-command"]);
    config.scenarios = vec!["unsupported_command".into()];
    config.strict = false;
    let report = run_with(config).await;
    let text = report.to_text();
    assert!(!report.success(), "{text}");
    assert_eq!(report.failed_rules(), vec!["unknown_event_type"], "{text}");
    assert!(text.contains("FAIL  unsupported_command"), "{text}");
}

#[tokio::test]
async fn the_reference_answers_an_unknown_command_as_the_hosts_runner_does() {
    // failure unsupported_command, failed, not retryable: no warning either.
    let mut config = config(&[]);
    config.scenarios = vec!["unsupported_command".into()];
    let report = run_with(config).await;
    let text = report.to_text();
    assert!(report.success(), "{text}");
    let result = report.scenario("unsupported_command").expect("it ran");
    assert!(matches!(result.outcome, Outcome::Pass), "{text}");
    assert!(result.warnings.is_empty(), "{text}");
}

mutant_test!(
    mutant_slow_start_status,
    "slow-start-blocks-loop",
    ["start"],
    "status_during_start",
    "reply_waited_on_start"
);
mutant_test!(
    mutant_slow_start_cancel,
    "slow-start-blocks-loop",
    ["start"],
    "cancel_during_start",
    "start_not_ended_by_cancel"
);

mutant_test!(
    mutant_signal_waits_for_start,
    "signal-waits-for-start",
    ["signals"],
    "sigterm_mid_start",
    "no_exit_after_signal"
);
mutant_test!(
    mutant_torn_line_on_signal,
    "torn-line-on-signal",
    ["signals"],
    "sigterm_mid_start",
    "unterminated_line"
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutant_ignore_stop_signals_fails_every_signal_scenario() {
    let mut config = config(&["--mutant", "ignore-stop-signals"]);
    config.groups = vec!["signals".into()];
    config.jobs = 6;
    let report = run_with(config).await;
    let text = report.to_text();
    assert!(!report.success(), "{text}");
    for scenario in [
        "sigterm_before_hello",
        "sigterm_idle",
        "sigterm_mid_start",
        "sigterm_mid_turn",
        "sigterm_after_cancel",
        "sigterm_after_detach",
        "sigint_and_sighup_idle",
    ] {
        assert_eq!(
            report.scenario(scenario).and_then(|s| s.rule()),
            Some("no_exit_after_signal"),
            "{scenario}:\n{text}"
        );
    }
}

#[tokio::test]
async fn a_recommended_failure_warns_and_fails_only_with_strict() {
    let mut config = config(&["--mutant", "slow-start-blocks-loop"]);
    config.scenarios = vec!["status_during_start".into()];
    config.strict = false;
    let report = run_with(config.clone()).await;
    let text = report.to_text();
    assert!(
        report.success(),
        "a recommended failure alone is accepted:\n{text}"
    );
    assert_eq!(report.recommended_failed(), 1, "{text}");
    assert!(text.contains("WARN  status_during_start"), "{text}");
    assert!(
        text.contains("the BotMux host accepts this provider"),
        "{text}"
    );
    assert_eq!(report.to_json()["scenarios"][0]["outcome"], "warn");

    config.strict = true;
    let report = run_with(config).await;
    assert!(!report.success(), "{}", report.to_text());
    assert_eq!(report.failed_rules(), vec!["reply_waited_on_start"]);
}

//! The `remote-runner-conformance` binary: listing, usage errors, exit statuses, JSON output,
//! and how it spawns providers (cwd, env, stdout purity, stderr ignored). The providers here
//! are real processes (`sh`), so what is checked is the harness's own behaviour.

use std::process::{Command, Output};

use serde_json::Value;

const HARNESS: &str = env!("CARGO_BIN_EXE_remote-runner-conformance");

fn harness(args: &[&str]) -> Output {
    Command::new(HARNESS)
        .args(args)
        .output()
        .expect("the harness binary runs")
}

/// Runs one scenario against `sh -c script` and returns the exit code and JSON report.
fn one_scenario(extra: &[&str], script: &str) -> (i32, Value) {
    let mut args = vec![
        "--json",
        "--scenario",
        "hello_default_capabilities",
        "--handshake-timeout-ms",
        "500",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--provider", "sh", "-c", script]);
    let out = harness(&args);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is one JSON object ({err}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

fn failure_rule(json: &Value) -> &str {
    json["scenarios"][0]["failure"]["rule"]
        .as_str()
        .unwrap_or("<none>")
}

#[test]
fn list_prints_every_scenario_with_its_group() {
    let out = harness(&["--list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().count() >= 40, "{text}");
    for group in [
        "handshake",
        "busy",
        "resume",
        "bad_input",
        "outbound",
        "session_tool",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(group)),
            "{group} in {text}"
        );
    }
}

#[test]
fn missing_provider_flag_is_a_usage_error() {
    assert_eq!(harness(&[]).status.code(), Some(2));
}

#[test]
fn unknown_provider_program_is_a_usage_error() {
    let out = harness(&["--provider", "/nonexistent/conformance-provider"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}

#[test]
fn unknown_group_and_scenario_are_usage_errors() {
    let out = harness(&["--group", "nope", "--provider", "sh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown group"));
    let out = harness(&["--scenario", "nope", "--provider", "sh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn out_of_range_timeout_is_a_usage_error() {
    let out = harness(&["--operation-timeout-ms", "50", "--provider", "sh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("100..=300000"));
}

#[test]
fn silent_provider_fails_the_handshake_deadline() {
    let (code, json) = one_scenario(&[], "exec cat 3>&1 >/dev/null");
    assert_eq!(code, 1);
    assert_eq!(json["ok"], false);
    assert_eq!(json["summary"]["failed"], 1);
    assert_eq!(json["scenarios"][0]["outcome"], "fail");
    assert_eq!(failure_rule(&json), "reply_timeout");
}

#[test]
fn a_non_protocol_stdout_line_is_a_failure_with_the_line() {
    let (code, json) = one_scenario(&[], "echo 'starting up...'; exec cat 3>&1 >/dev/null");
    assert_eq!(code, 1);
    assert_eq!(failure_rule(&json), "non_protocol_line");
    assert_eq!(json["scenarios"][0]["failure"]["line"], "starting up...");
}

#[test]
fn stderr_is_drained_and_counted_not_parsed() {
    let (code, json) = one_scenario(
        &[],
        "echo 'log line on stderr' >&2; exec cat 3>&1 >/dev/null",
    );
    assert_eq!(code, 1);
    // The stderr line is no protocol error: the only failure is the missing hello.
    assert_eq!(failure_rule(&json), "reply_timeout");
    assert_eq!(json["scenarios"][0]["stderrBytes"], 19);
}

#[test]
fn provider_gets_the_chosen_cwd_and_env_and_no_extra_arguments() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cwd = dir.path().canonicalize().expect("canonical temp dir");
    let cwd_text = cwd.display().to_string();
    // Stays silent (reply_timeout) only when cwd, env and argv are exactly as given;
    // otherwise it prints a non-protocol line.
    let script = format!(
        "if [ \"$(pwd -P)\" = '{cwd_text}' ] && [ \"$CONFORMANCE_PROBE\" = 'a=b' ] && [ $# -eq 0 ] \
         && [ -n \"$PATH\" ]; then exec cat 3>&1 >/dev/null; else echo \"wrong: $(pwd) $CONFORMANCE_PROBE $#\"; fi"
    );
    let (_, json) = one_scenario(
        &["--cwd", &cwd_text, "--env", "CONFORMANCE_PROBE=a=b"],
        &script,
    );
    assert_eq!(failure_rule(&json), "reply_timeout", "{json}");
    // Without them the same script complains, so the check above is meaningful.
    let (_, json) = one_scenario(&[], &script);
    assert_eq!(failure_rule(&json), "non_protocol_line", "{json}");
}

#[test]
fn default_cwd_is_a_fresh_empty_directory() {
    let script = "if [ -z \"$(ls -A)\" ]; then exec cat 3>&1 >/dev/null; else echo not-empty; fi";
    let (_, json) = one_scenario(&[], script);
    assert_eq!(failure_rule(&json), "reply_timeout", "{json}");
}

#[test]
fn readable_report_names_rule_line_and_expectation() {
    let out = harness(&[
        "--scenario",
        "hello_default_capabilities",
        "--provider",
        "sh",
        "-c",
        "echo '{\"protocol\":\"botmux.remote-runner\",\"version\":1,\"type\":\"nope\"}'; exec cat 3>&1 >/dev/null",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FAIL  hello_default_capabilities"), "{text}");
    assert!(text.contains("rule:     unknown_event_type"), "{text}");
    assert!(text.contains("line:     {\"protocol\""), "{text}");
    assert!(text.contains("expected: "), "{text}");
    assert!(text.contains("0 passed, 1 failed"), "{text}");
}

#[test]
fn provider_arguments_end_at_the_next_harness_option_or_after_double_dash() {
    use remote_runner_conformance::cli::split_provider;
    let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    let (harness, provider) =
        split_provider(words("bin --provider ./p --mutant x --env A=1 --json")).unwrap();
    assert_eq!(provider.unwrap(), words("./p --mutant x"));
    assert_eq!(harness, words("bin --env A=1 --json"));
    let (harness, provider) =
        split_provider(words("bin --json --provider ./p -- --env B")).unwrap();
    assert_eq!(provider.unwrap(), words("./p --env B"));
    assert_eq!(harness, words("bin --json"));
    let (_, provider) = split_provider(words("bin --provider=./p -v")).unwrap();
    assert_eq!(provider.unwrap(), words("./p -v"));
    assert!(split_provider(words("bin --provider")).is_err());
    assert!(split_provider(words("bin --provider --json")).is_err());
}

#[test]
fn options_after_the_provider_command_reach_the_harness() {
    // The form from the docs: --provider first, harness options after it.
    let out = harness(&[
        "--provider",
        "sh",
        "-c",
        "exec cat 3>&1 >/dev/null",
        "--json",
        "--scenario",
        "hello_default_capabilities",
        "--handshake-timeout-ms",
        "300",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(
        json["provider"],
        serde_json::json!(["sh", "-c", "exec cat 3>&1 >/dev/null"])
    );
    assert_eq!(json["summary"]["failed"], 1);
}

#[test]
fn a_failed_recommended_scenario_warns_exit_0_and_fails_only_with_strict() {
    // A provider that never answers fails `invalid_json_before_hello`, a recommended scenario
    // (the host never sends invalid JSON).
    let run = |strict: bool| {
        let mut args = vec![
            "--json",
            "--scenario",
            "invalid_json_before_hello",
            "--operation-timeout-ms",
            "300",
            "--handshake-timeout-ms",
            "300",
        ];
        if strict {
            args.push("--strict");
        }
        args.extend_from_slice(&["--provider", "sh", "-c", "cat >/dev/null"]);
        let out = harness(&args);
        let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        (out.status.code(), json)
    };
    let (code, json) = run(false);
    assert_eq!(code, Some(0), "{json}");
    assert_eq!(json["ok"], true);
    assert_eq!(json["summary"]["recommendedFailed"], 1);
    assert_eq!(json["scenarios"][0]["level"], "recommended");
    assert_eq!(json["scenarios"][0]["outcome"], "warn");
    assert!(
        json["scenarios"][0]["hostRule"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );

    let (code, json) = run(true);
    assert_eq!(code, Some(1), "{json}");
    assert_eq!(json["ok"], false);
    assert_eq!(json["strict"], true);
    assert_eq!(json["scenarios"][0]["outcome"], "fail");
}

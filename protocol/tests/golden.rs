//! Golden lines: the host doc's reference-runner example, the doc's message examples and the
//! reference runner's events decode, validate, and re-encode to the same JSON value.

use remote_runner_protocol::{
    Command, Event, ResumeMode, Rule, State, decode_command, decode_event, encode_command,
    encode_event,
};
use serde_json::Value;

fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

fn command_round_trip(line: &str) -> Command {
    let command = decode_command(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
    let encoded = encode_command(&command);
    assert_eq!(encoded.last(), Some(&b'\n'));
    assert_eq!(encoded.iter().filter(|b| **b == b'\n').count(), 1);
    assert_eq!(
        serde_json::from_slice::<Value>(&encoded).unwrap(),
        json(line),
        "{line}"
    );
    command
}

fn event_round_trip(line: &str) -> Event {
    let event = decode_event(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
    let encoded = encode_event(&event);
    assert_eq!(encoded.last(), Some(&b'\n'));
    assert_eq!(
        serde_json::from_slice::<Value>(&encoded).unwrap(),
        json(line),
        "{line}"
    );
    event
}

/// Every line of the reference-runner example in the host's doc.
const REFERENCE_EXAMPLE: [&str; 5] = [
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"hello","requestId":"h1","sessionId":"demo","requiredCapabilities":["start","resume","turn","cancel","detach","reattach","status"]}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"start","requestId":"s1","sessionId":"demo","cwd":"/tmp"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":"t1","turnId":"turn-1","content":"hello"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"detach","requestId":"d1"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"reattach","requestId":"r1"}"#,
];

#[test]
fn reference_runner_example_lines_round_trip() {
    let types: Vec<&str> = REFERENCE_EXAMPLE
        .iter()
        .map(|line| command_round_trip(line).type_name())
        .collect();
    assert_eq!(types, ["hello", "start", "turn", "detach", "reattach"]);
    let Command::Turn(turn) = command_round_trip(REFERENCE_EXAMPLE[2]) else {
        panic!("not a turn")
    };
    assert_eq!(
        (turn.request_id.as_str(), turn.turn_id.as_str()),
        ("t1", "turn-1")
    );
}

/// The commands shown in the host doc's body (envelope added), plus the other command shapes.
const DOC_COMMANDS: [&str; 9] = [
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"outbound_message_result","requestId":"outbound-message-result:1b4e28ba-2fa1-11d2-883f-0016d3cca427","operationId":"progress-1","turnId":"turn-1","generation":3,"result":{"outcome":"delivered","messageId":"om_xxx"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"session_tool_result","requestId":"session-tool-result:1b4e28ba","operationId":"history-1","turnId":"turn-1","generation":3,"result":{"outcome":"completed","exitCode":0,"stdout":"{\"total\":1}\n","stderr":""}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"resume","requestId":"resume:1","sessionId":"demo","cwd":"/tmp","state":{"version":1,"provider":"example-cloud","generation":3,"remoteSessionId":"compute-session-42","agentThreadId":"agent-thread-7","providerState":{"runtimeSubpath":"sessions/7"}},"resumeMode":"rebuild","model":"example-model","modelBackendVariant":"max","reasoningEffort":"high"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":"turn:2","turnId":"turn-2","content":"run it","trustedCaller":{"requestUserOpenId":"ou_1","requestUserUnionId":"on_1","requestLarkAppId":"cli_1","source":"schedule_creator","taskId":"task-1","senderType":"user"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"terminal_input","requestId":"terminal-input:1","generation":3,"data":"ls\r"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"terminal_resize","requestId":"terminal-resize:1","generation":3,"cols":120,"rows":40}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"cancel","requestId":"cancel:1"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"status","requestId":"status:1"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"outbound_message_result","requestId":"outbound-message-result:2","operationId":"progress-2","turnId":"turn-1","generation":3,"result":{"outcome":"unknown","code":"outbound_delivery_unknown","message":"delivery could not be confirmed"}}"#,
];

#[test]
fn doc_commands_round_trip() {
    for line in DOC_COMMANDS {
        command_round_trip(line);
    }
    let Command::Resume(resume) = command_round_trip(DOC_COMMANDS[2]) else {
        panic!("not a resume")
    };
    assert_eq!(resume.mode(), ResumeMode::Rebuild);
}

/// What the reference runner prints for the example above (facts file §10), plus the doc's
/// event examples.
const REFERENCE_EVENTS: [&str; 16] = [
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"hello","requestId":"h1","provider":"reference","capabilities":["start","resume","turn","cancel","detach","status","terminal_screen","terminal_input","terminal_resize","reattach","outbound_message","session_tool","reference_future_capability"]}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"lineage_changed","state":{"version":1,"provider":"reference","generation":1,"remoteSessionId":"reference:demo"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"ready","requestId":"s1","state":{"version":1,"provider":"reference","generation":1,"remoteSessionId":"reference:demo"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"terminal_screen","generation":1,"sequence":0,"cols":120,"rows":40,"snapshot":"reference runner ready\nline two"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"status","requestId":"t1","status":"busy","state":{"version":1,"provider":"reference","generation":1,"remoteSessionId":"reference:demo"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"lineage_changed","state":{"version":1,"provider":"reference","generation":1,"remoteSessionId":"reference:demo","agentThreadId":"reference-thread:turn-1"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"progress","turnId":"turn-1","content":"reference: hello"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"final","turnId":"turn-1","content":"hello","state":{"version":1,"provider":"reference","generation":1,"remoteSessionId":"reference:demo","agentThreadId":"reference-thread:turn-1"},"usage":{"generation":1,"snapshot":{"context":{"usedTokens":11,"windowTokens":1000,"percentUsed":1.1},"tokens":{"in":8,"out":3},"turnTokens":{"in":8,"out":3},"model":"reference-model","reasoningEffort":"medium"}}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"status","requestId":"d1","status":"detached","state":{"version":1,"provider":"reference","generation":1,"remoteSessionId":"reference:demo","agentThreadId":"reference-thread:turn-1"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"status","requestId":"r1","status":"ready","state":{"version":1,"provider":"reference","generation":1,"remoteSessionId":"reference:demo","agentThreadId":"reference-thread:turn-1"}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"failure","code":"invalid_json","message":"invalid JSON command","status":"failed","retryable":false}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"failure","requestId":"t2","turnId":"turn-2","code":"not_ready","message":"runner is not ready","status":"failed","retryable":false}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"outbound_message","operationId":"reference-outbound-1","turnId":"turn-1","generation":1,"content":"reference progress","responseKind":"progress","mention":"none"}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"session_tool","operationId":"history-1","turnId":"turn-1","generation":3,"request":{"tool":"history","limit":20,"scope":"thread","withCardJson":true}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"final","turnId":"turn-1","content":"done","usage":{"generation":3,"snapshot":{"context":{"usedTokens":7274,"windowTokens":258400,"percentUsed":3},"tokens":{"in":7230,"out":44},"turnTokens":{"in":7230,"out":44},"model":"example-model","reasoningEffort":"high"}}}"#,
    r#"{"protocol":"botmux.remote-runner","version":1,"type":"access_url","url":"https://example.invalid/sessions/7"}"#,
];

#[test]
fn reference_runner_events_round_trip() {
    for line in REFERENCE_EVENTS {
        event_round_trip(line);
    }
}

#[test]
fn null_usage_metrics_round_trip_as_null() {
    let line = r#"{"protocol":"botmux.remote-runner","version":1,"type":"final","turnId":"turn-1","content":"","usage":{"generation":0,"snapshot":{"context":null,"tokens":null,"turnTokens":null}}}"#;
    event_round_trip(line);
}

#[test]
fn outbound_message_with_a_real_png_round_trips() {
    // A 1x1 PNG, canonical base64.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let line = format!(
        r#"{{"protocol":"botmux.remote-runner","version":1,"type":"outbound_message","operationId":"progress-1","turnId":"turn-1","generation":3,"content":"已完成依赖检查，继续执行验证。","responseKind":"progress","mention":"none","images":[{{"name":"evidence.png","mimeType":"image/png","dataBase64":"{png}"}}]}}"#
    );
    event_round_trip(&line);
}

#[test]
fn the_docs_truncated_image_example_is_rejected_as_base64() {
    let line = r#"{"protocol":"botmux.remote-runner","version":1,"type":"outbound_message","operationId":"progress-1","turnId":"turn-1","generation":3,"content":"x","responseKind":"progress","mention":"none","images":[{"name":"evidence.png","mimeType":"image/png","dataBase64":"iVBORw0KGgo..."}]}"#;
    let err = decode_event(line.as_bytes()).unwrap_err();
    assert_eq!(err.validation().unwrap().rule, Rule::Base64);
    assert_eq!(err.turn_id.as_deref(), Some("turn-1"));
}

#[test]
fn the_docs_persisted_state_example_is_valid() {
    let state: State = serde_json::from_str(
        r#"{"version":1,"provider":"example-cloud","generation":3,"remoteSessionId":"compute-session-42","agentThreadId":"agent-thread-7","providerState":{"runtimeSubpath":"sessions/7"}}"#,
    )
    .unwrap();
    state.validate().unwrap();
}

#[test]
fn encoding_puts_the_envelope_first() {
    let line = encode_event(&Event::progress("turn-1", "x"));
    assert!(
        line.starts_with(br#"{"protocol":"botmux.remote-runner","version":1,"type":"progress","#)
    );
}

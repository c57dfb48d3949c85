//! One test per validation rule: the edge value is accepted, one past it is rejected with the
//! rule's name.

use base64::Engine as _;
use remote_runner_protocol::{
    Command, DecodeError, DecodeErrorKind, Event, MAX_SAFE_INTEGER, Rule, State, Transition,
    check_transition, decode_command, decode_event,
};
use serde_json::{Map, Value, json};

fn with_envelope(body: Value) -> Vec<u8> {
    let mut map = Map::new();
    map.insert("protocol".into(), json!("botmux.remote-runner"));
    map.insert("version".into(), json!(1));
    map.extend(body.as_object().unwrap().clone());
    serde_json::to_vec(&Value::Object(map)).unwrap()
}

fn event(body: Value) -> Result<Event, DecodeError> {
    decode_event(&with_envelope(body))
}

fn command(body: Value) -> Result<Command, DecodeError> {
    decode_command(&with_envelope(body))
}

#[track_caller]
fn rule<T: std::fmt::Debug>(result: Result<T, DecodeError>) -> Rule {
    match result {
        Ok(v) => panic!("expected a validation error, got {v:?}"),
        Err(err) => match err.kind {
            DecodeErrorKind::InvalidMessage(v) => v.rule,
            other => panic!("expected InvalidMessage, got {other:?}"),
        },
    }
}

#[track_caller]
fn ok<T: std::fmt::Debug>(result: Result<T, DecodeError>) -> T {
    result.unwrap_or_else(|err| panic!("expected valid, got {err}"))
}

fn status_with_request_id(id: &str) -> Value {
    json!({"type":"status","requestId":id,"status":"ready"})
}

fn state_event(state: Value) -> Value {
    json!({"type":"lineage_changed","state":state})
}

fn state_with_provider_state(ps: Value) -> Value {
    json!({"version":1,"provider":"p","generation":1,"providerState":ps})
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

// ---- field grammars ----

#[test]
fn request_id_128_ok_129_fails() {
    ok(event(status_with_request_id(&"a".repeat(128))));
    assert_eq!(
        rule(event(status_with_request_id(&"a".repeat(129)))),
        Rule::RequestId
    );
    assert_eq!(
        rule(event(status_with_request_id("_starts-badly"))),
        Rule::RequestId
    );
    assert_eq!(
        rule(event(status_with_request_id("has space"))),
        Rule::RequestId
    );
    // The host trims before checking.
    ok(event(status_with_request_id("  h1 ")));
    assert_eq!(
        rule(command(
            json!({"type":"cancel","requestId":"a".repeat(129)})
        )),
        Rule::RequestId
    );
}

#[test]
fn provider_64_ok_65_fails() {
    let hello = |p: &str| json!({"type":"hello","requestId":"h1","provider":p,"capabilities":[]});
    ok(event(hello(&format!("p{}", "a".repeat(63)))));
    assert_eq!(
        rule(event(hello(&format!("p{}", "a".repeat(64))))),
        Rule::Provider
    );
    assert_eq!(rule(event(hello("Upper"))), Rule::Provider);
    assert_eq!(rule(event(hello("9lives"))), Rule::Provider);
}

#[test]
fn capability_names_64_ok_65_fails_and_no_duplicates() {
    let hello =
        |caps: Value| json!({"type":"hello","requestId":"h1","provider":"p","capabilities":caps});
    ok(event(hello(json!([
        "start",
        "reference_future_capability",
        format!("c{}", "a".repeat(63))
    ]))));
    assert_eq!(
        rule(event(hello(json!([format!("c{}", "a".repeat(64))])))),
        Rule::CapabilityName
    );
    assert_eq!(rule(event(hello(json!(["Start"])))), Rule::CapabilityName);
    assert_eq!(
        rule(event(hello(json!(["start", "start"])))),
        Rule::DuplicateCapability
    );
    assert_eq!(rule(event(hello(json!("start")))), Rule::FieldType);
    let cmd = json!({"type":"hello","requestId":"h1","sessionId":"s","requiredCapabilities":["turn","turn"]});
    assert_eq!(rule(command(cmd)), Rule::DuplicateCapability);
}

#[test]
fn ids_256_ok_257_fails() {
    let state = |id: &str| {
        state_event(json!({"version":1,"provider":"p","generation":1,"remoteSessionId":id}))
    };
    ok(event(state(&"a".repeat(256))));
    ok(event(state("compute/with:colons.and-dashes_1")));
    assert_eq!(rule(event(state(&"a".repeat(257)))), Rule::Id);
    assert_eq!(rule(event(state("-leading-dash"))), Rule::Id);
    let op = |id: &str| json!({"type":"outbound_message","operationId":id,"turnId":"turn-1","generation":1,"content":"x","responseKind":"progress","mention":"none"});
    ok(event(op(&"o".repeat(256))));
    assert_eq!(rule(event(op(&"o".repeat(257)))), Rule::Id);
}

#[test]
fn turn_id_256_utf16_units_ok_257_fails() {
    let progress = |t: &str| json!({"type":"progress","turnId":t,"content":""});
    ok(event(progress(&"t".repeat(256))));
    // 128 emoji are 256 UTF-16 units; one more is 258.
    ok(event(progress(&"😀".repeat(128))));
    assert_eq!(rule(event(progress(&"😀".repeat(129)))), Rule::TurnId);
    assert_eq!(rule(event(progress(&"t".repeat(257)))), Rule::TurnId);
    assert_eq!(rule(event(progress(" \t "))), Rule::TurnId);
    // Trimmed before counting.
    ok(event(progress(&format!("  {}  ", "t".repeat(256)))));
    let turn = |t: &str| json!({"type":"turn","requestId":"t1","turnId":t,"content":"x"});
    assert_eq!(rule(command(turn(""))), Rule::TurnId);
}

#[test]
fn error_code_128_ok_129_fails_and_message_4096_ok_4097_fails() {
    let failure = |code: &str, message: &str| json!({"type":"failure","turnId":"t","code":code,"message":message,"status":"failed","retryable":false});
    ok(event(failure(
        &format!("c{}", "a".repeat(127)),
        &"m".repeat(4096),
    )));
    assert_eq!(
        rule(event(failure(&format!("c{}", "a".repeat(128)), "m"))),
        Rule::ErrorCode
    );
    assert_eq!(rule(event(failure("NotReady", "m"))), Rule::ErrorCode);
    assert_eq!(
        rule(event(failure("c", &"m".repeat(4097)))),
        Rule::ErrorMessage
    );
    assert_eq!(rule(event(failure("c", "   "))), Rule::ErrorMessage);
    let bad_status =
        json!({"type":"failure","code":"c","message":"m","status":"weird","retryable":false});
    assert_eq!(rule(event(bad_status)), Rule::FieldType);
}

#[test]
fn failure_correlation_fields_are_optional_but_well_formed() {
    let f = |extra: Value| {
        let mut body = json!({"type":"failure","code":"c","message":"m","status":"ambiguous","retryable":true});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    ok(event(f(json!({}))));
    ok(event(f(json!({"requestId":"t1"}))));
    ok(event(f(json!({"turnId":"turn 1 with spaces"}))));
    assert_eq!(
        rule(event(f(json!({"requestId":"bad id"})))),
        Rule::RequestId
    );
    assert_eq!(rule(event(f(json!({"turnId":""})))), Rule::TurnId);
    assert_eq!(rule(event(f(json!({"retryable":"no"})))), Rule::FieldType);
}

#[test]
fn safe_integers_max_ok_one_more_fails() {
    let screen = |g: u64, s: u64| json!({"type":"terminal_screen","generation":g,"sequence":s,"cols":1,"rows":1,"snapshot":""});
    ok(event(screen(MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)));
    assert_eq!(
        rule(event(screen(MAX_SAFE_INTEGER + 1, 0))),
        Rule::SafeInteger
    );
    assert_eq!(
        rule(event(screen(0, MAX_SAFE_INTEGER + 1))),
        Rule::SafeInteger
    );
    let negative = json!({"type":"terminal_screen","generation":0,"sequence":-1,"cols":1,"rows":1,"snapshot":""});
    assert_eq!(rule(event(negative)), Rule::FieldType);
    let fractional = json!({"type":"terminal_screen","generation":0.5,"sequence":0,"cols":1,"rows":1,"snapshot":""});
    assert_eq!(rule(event(fractional)), Rule::FieldType);
}

#[test]
fn ready_requires_request_id() {
    let state = json!({"version":1,"provider":"p","generation":0});
    ok(event(
        json!({"type":"ready","requestId":"s1","state":state}),
    ));
    assert_eq!(
        rule(event(json!({"type":"ready","state":state}))),
        Rule::FieldType
    );
}

// ---- state ----

#[test]
fn state_version_1_ok_2_fails_and_generation_is_non_negative() {
    ok(event(state_event(
        json!({"version":1,"provider":"p","generation":0}),
    )));
    assert_eq!(
        rule(event(state_event(
            json!({"version":2,"provider":"p","generation":0})
        ))),
        Rule::StateVersion
    );
    assert_eq!(
        rule(event(state_event(
            json!({"version":1,"provider":"p","generation":-1})
        ))),
        Rule::FieldType
    );
}

#[test]
fn state_drops_unknown_top_level_keys() {
    let Event::LineageChanged(e) = ok(event(state_event(
        json!({"version":1,"provider":"p","generation":0,"futureField":{"x":1}}),
    ))) else {
        panic!("not lineage_changed")
    };
    assert_eq!(e.state, State::new("p", 0));
}

fn nested(depth: usize) -> Value {
    // An object whose deepest value sits at `depth` (providerState itself is depth 0).
    let mut value = json!(1);
    for _ in 1..depth {
        value = json!({ "n": value });
    }
    json!({ "n": value })
}

#[test]
fn provider_state_depth_16_ok_17_fails() {
    ok(event(state_event(state_with_provider_state(nested(16)))));
    assert_eq!(
        rule(event(state_event(state_with_provider_state(nested(17))))),
        Rule::ProviderStateDepth
    );
    // Arrays count as levels too.
    let mut arr = json!(1);
    for _ in 0..16 {
        arr = json!([arr]);
    }
    assert_eq!(
        rule(event(state_event(state_with_provider_state(
            json!({"a": arr})
        )))),
        Rule::ProviderStateDepth
    );
}

#[test]
fn provider_state_must_be_a_plain_object() {
    assert_eq!(
        rule(event(state_event(state_with_provider_state(json!([1, 2]))))),
        Rule::FieldType
    );
}

#[test]
fn provider_state_65536_bytes_ok_65537_fails() {
    // {"k":"…"} is 8 bytes of overhead.
    let fill = |n: usize| json!({"k": "x".repeat(n - 8)});
    assert_eq!(serde_json::to_vec(&fill(65536)).unwrap().len(), 65536);
    ok(event(state_event(state_with_provider_state(fill(65536)))));
    assert_eq!(
        rule(event(state_event(state_with_provider_state(fill(65537))))),
        Rule::ProviderStateSize
    );
}

#[test]
fn provider_state_key_256_ok_257_fails() {
    ok(event(state_event(state_with_provider_state(
        json!({"k".repeat(256): 1}),
    ))));
    assert_eq!(
        rule(event(state_event(state_with_provider_state(
            json!({"k".repeat(257): 1})
        )))),
        Rule::ProviderStateKeyLength
    );
}

#[test]
fn provider_state_refuses_credential_like_keys() {
    for key in [
        "maxTokens",
        "tokenCount",
        "access_key",
        "Pass-Word",
        "sessionCookie",
        "AUTHORIZATION",
        "private_key",
        "clientSecret",
        "credentials",
    ] {
        assert_eq!(
            rule(event(state_event(state_with_provider_state(
                json!({ key: 1 })
            )))),
            Rule::ProviderStateSensitiveKey,
            "{key}"
        );
    }
    let err = event(state_event(state_with_provider_state(
        json!({"outer": {"inner": {"accessToken": "x"}}}),
    )))
    .unwrap_err();
    let v = err.validation().unwrap();
    assert_eq!(v.rule, Rule::ProviderStateSensitiveKey);
    assert_eq!(v.path, "state.providerState.outer.inner.accessToken");
    ok(event(state_event(state_with_provider_state(
        json!({"runtimeSubpath": "sessions/7", "tok": 1, "key": 2}),
    ))));
}

#[test]
fn provider_state_numbers_are_finite() {
    // JSON cannot carry NaN/Infinity, so the check guards values built in Rust.
    let mut ps = Map::new();
    ps.insert("big".into(), json!(1e308));
    let state = State::new("p", 0).with_provider_state(ps);
    state.validate().unwrap();
}

// ---- state transitions ----

#[test]
fn transition_provider_must_match_hello() {
    let next = State::new("other", 1);
    let err = check_transition(None, &next, "reference", Transition::Update).unwrap_err();
    assert_eq!(err.rule, Rule::StateProviderMismatch);
    check_transition(
        None,
        &State::new("reference", 1),
        "reference",
        Transition::Update,
    )
    .unwrap();
}

#[test]
fn transition_generation_never_goes_down() {
    let prev = State::new("p", 5);
    check_transition(Some(&prev), &State::new("p", 5), "p", Transition::Update).unwrap();
    check_transition(Some(&prev), &State::new("p", 6), "p", Transition::Update).unwrap();
    let err =
        check_transition(Some(&prev), &State::new("p", 4), "p", Transition::Update).unwrap_err();
    assert_eq!(err.rule, Rule::GenerationDecreased);
}

#[test]
fn transition_same_generation_keeps_remote_session_id() {
    let prev = State::new("p", 5).with_remote_session_id("a");
    check_transition(
        Some(&prev),
        &prev.clone().with_agent_thread_id("t"),
        "p",
        Transition::Update,
    )
    .unwrap();
    let changed = State::new("p", 5).with_remote_session_id("b");
    let err = check_transition(Some(&prev), &changed, "p", Transition::Update).unwrap_err();
    assert_eq!(err.rule, Rule::RemoteSessionIdChanged);
    let cleared = State::new("p", 5);
    let err = check_transition(Some(&prev), &cleared, "p", Transition::Update).unwrap_err();
    assert_eq!(err.rule, Rule::RemoteSessionIdChanged);
    // Setting one where there was none is allowed, and a bump allows a change.
    check_transition(Some(&State::new("p", 5)), &changed, "p", Transition::Update).unwrap();
    let bumped = State::new("p", 6).with_remote_session_id("b");
    check_transition(Some(&prev), &bumped, "p", Transition::Update).unwrap();
}

#[test]
fn transition_rebuild_must_advance() {
    let prev = State::new("p", 7)
        .with_remote_session_id("a")
        .with_agent_thread_id("t");
    let same = prev.clone();
    let err = check_transition(Some(&prev), &same, "p", Transition::RebuildReady).unwrap_err();
    assert_eq!(err.rule, Rule::RebuildNotAdvanced);
    let next = State::new("p", 8)
        .with_remote_session_id("b")
        .with_agent_thread_id("t");
    check_transition(Some(&prev), &next, "p", Transition::RebuildReady).unwrap();
}

// ---- usage ----

fn final_with_usage(usage: Value) -> Value {
    json!({"type":"final","turnId":"turn-1","content":"done","usage":usage})
}

fn usage_with_context(context: Value) -> Value {
    json!({"generation":1,"snapshot":{"context":context,"tokens":null}})
}

#[test]
fn usage_context_and_tokens_must_be_present() {
    ok(event(final_with_usage(
        json!({"generation":1,"snapshot":{"context":null,"tokens":null}}),
    )));
    assert_eq!(
        rule(event(final_with_usage(
            json!({"generation":1,"snapshot":{"tokens":null}})
        ))),
        Rule::FieldType
    );
    assert_eq!(
        rule(event(final_with_usage(
            json!({"generation":1,"snapshot":{"context":null}})
        ))),
        Rule::FieldType
    );
}

#[test]
fn usage_integers_are_non_negative_and_safe() {
    ok(event(final_with_usage(usage_with_context(
        json!({"usedTokens":0}),
    ))));
    ok(event(final_with_usage(usage_with_context(
        json!({"usedTokens":MAX_SAFE_INTEGER}),
    ))));
    assert_eq!(
        rule(event(final_with_usage(usage_with_context(
            json!({"usedTokens":-1})
        )))),
        Rule::FieldType
    );
    assert_eq!(
        rule(event(final_with_usage(usage_with_context(
            json!({"usedTokens":MAX_SAFE_INTEGER + 1})
        )))),
        Rule::SafeInteger
    );
    let tokens = json!({"generation":1,"snapshot":{"context":null,"tokens":{"in":1,"out":-1}}});
    assert_eq!(rule(event(final_with_usage(tokens))), Rule::FieldType);
}

#[test]
fn usage_window_tokens_1_ok_0_fails() {
    ok(event(final_with_usage(usage_with_context(
        json!({"usedTokens":0,"windowTokens":1}),
    ))));
    assert_eq!(
        rule(event(final_with_usage(usage_with_context(
            json!({"usedTokens":0,"windowTokens":0})
        )))),
        Rule::UsageWindowTokens
    );
}

#[test]
fn usage_percent_100_ok_100_0001_fails() {
    let pct =
        |p: f64| final_with_usage(usage_with_context(json!({"usedTokens":0,"percentUsed":p})));
    ok(event(pct(100.0)));
    ok(event(pct(0.0)));
    assert_eq!(rule(event(pct(100.0001))), Rule::UsagePercent);
    assert_eq!(rule(event(pct(-0.0001))), Rule::UsagePercent);
}

#[test]
fn usage_labels_have_length_limits() {
    let label = |key: &str, len: usize| {
        let mut snapshot = json!({"context":null,"tokens":null});
        snapshot[key] = json!("m".repeat(len));
        final_with_usage(json!({"generation":1,"snapshot":snapshot}))
    };
    ok(event(label("model", 256)));
    assert_eq!(rule(event(label("model", 257))), Rule::UsageLabel);
    ok(event(label("reasoningEffort", 64)));
    assert_eq!(rule(event(label("reasoningEffort", 65))), Rule::UsageLabel);
    ok(event(label("modelBackendVariant", 64)));
    assert_eq!(
        rule(event(label("modelBackendVariant", 65))),
        Rule::UsageLabel
    );
    assert_eq!(rule(event(label("model", 0))), Rule::UsageLabel);
}

#[test]
fn usage_generation_must_match_the_final_state() {
    let state = json!({"version":1,"provider":"p","generation":2});
    let usage = |g: u64| json!({"generation":g,"snapshot":{"context":null,"tokens":null}});
    ok(event(
        json!({"type":"final","turnId":"t","content":"","state":state,"usage":usage(2)}),
    ));
    assert_eq!(
        rule(event(
            json!({"type":"final","turnId":"t","content":"","state":state,"usage":usage(3)})
        )),
        Rule::UsageGeneration
    );
    let Event::Final(f) = ok(event(final_with_usage(usage(3)))) else {
        panic!()
    };
    let usage = f.usage.unwrap();
    usage.check_generation(3).unwrap();
    assert_eq!(
        usage.check_generation(2).unwrap_err().rule,
        Rule::UsageGeneration
    );
}

// ---- terminal ----

#[test]
fn terminal_cols_and_rows_1000_ok_1001_fails() {
    let screen = |c: u64, r: u64| json!({"type":"terminal_screen","generation":1,"sequence":0,"cols":c,"rows":r,"snapshot":""});
    ok(event(screen(1000, 1000)));
    ok(event(screen(1, 1)));
    assert_eq!(rule(event(screen(1001, 1))), Rule::TerminalSize);
    assert_eq!(rule(event(screen(1, 1001))), Rule::TerminalSize);
    assert_eq!(rule(event(screen(0, 1))), Rule::TerminalSize);
    let resize = |c: u64, r: u64| json!({"type":"terminal_resize","requestId":"r","generation":1,"cols":c,"rows":r});
    ok(command(resize(1000, 1)));
    assert_eq!(rule(command(resize(1001, 1))), Rule::TerminalSize);
    assert_eq!(rule(command(resize(1, 0))), Rule::TerminalSize);
}

#[test]
fn terminal_snapshot_4_mib_ok_one_more_byte_fails() {
    let screen = |n: usize| json!({"type":"terminal_screen","generation":1,"sequence":0,"cols":80,"rows":24,"snapshot":"s".repeat(n)});
    ok(event(screen(4 * 1024 * 1024)));
    assert_eq!(
        rule(event(screen(4 * 1024 * 1024 + 1))),
        Rule::TerminalDataSize
    );
}

#[test]
fn terminal_input_is_non_empty() {
    let input =
        |data: &str| json!({"type":"terminal_input","requestId":"i","generation":1,"data":data});
    ok(command(input("\u{3}")));
    assert_eq!(rule(command(input(""))), Rule::TerminalDataSize);
}

// ---- outbound_message ----

fn outbound(content: &str, extra: Value) -> Value {
    let mut body = json!({"type":"outbound_message","operationId":"op-1","turnId":"turn-1","generation":1,"content":content,"responseKind":"auxiliary","mention":"requester"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[test]
fn outbound_content_32768_bytes_ok_32769_fails() {
    ok(event(outbound(&"x".repeat(32768), json!({}))));
    assert_eq!(
        rule(event(outbound(&"x".repeat(32769), json!({})))),
        Rule::OutboundContentSize
    );
    // Counted in UTF-8 bytes: 10923 three-byte characters are 32769 bytes.
    assert_eq!(
        rule(event(outbound(&"验".repeat(10923), json!({})))),
        Rule::OutboundContentSize
    );
    assert_eq!(
        rule(event(outbound(" \n\t", json!({})))),
        Rule::OutboundContentBlank
    );
}

#[test]
fn outbound_enums_are_closed() {
    assert_eq!(
        rule(event(outbound("x", json!({"responseKind":"final"})))),
        Rule::FieldType
    );
    assert_eq!(
        rule(event(outbound("x", json!({"mention":"everyone"})))),
        Rule::FieldType
    );
}

fn png(len: usize) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.resize(len, 0);
    bytes
}

fn image(name: &str, mime: &str, bytes: &[u8]) -> Value {
    json!({"name":name,"mimeType":mime,"dataBase64":b64(bytes)})
}

#[test]
fn outbound_images_4_ok_5_fail() {
    let img = image("a.png", "image/png", &png(16));
    ok(event(outbound("x", json!({"images":[img, img, img, img]}))));
    assert_eq!(
        rule(event(outbound(
            "x",
            json!({"images":[img, img, img, img, img]})
        ))),
        Rule::ImageLimit
    );
}

#[test]
fn outbound_images_2_mib_ok_one_more_byte_fails() {
    let half = 1024 * 1024;
    let a = image("a.png", "image/png", &png(half));
    let b = image("b.png", "image/png", &png(half));
    ok(event(outbound("x", json!({"images":[a, b]}))));
    let c = image("b.png", "image/png", &png(half + 1));
    assert_eq!(
        rule(event(outbound("x", json!({"images":[a, c]})))),
        Rule::ImageLimit
    );
}

#[test]
fn outbound_image_mime_types_and_magic() {
    let jpeg = [0xFF, 0xD8, 0xFF, 0xE0, 0, 0];
    let gif = b"GIF89a\x01\x00".to_vec();
    let webp = b"RIFF\x00\x00\x00\x00WEBPVP8 ".to_vec();
    for img in [
        image("a.jpg", "image/jpeg", &jpeg),
        image("a.gif", "image/gif", &gif),
        image("a.webp", "image/webp", &webp),
    ] {
        ok(event(outbound("x", json!({"images":[img]}))));
    }
    let bmp = image("a.bmp", "image/bmp", b"BM\x00\x00");
    assert_eq!(
        rule(event(outbound("x", json!({"images":[bmp]})))),
        Rule::ImageMimeType
    );
    let lying = image("a.jpg", "image/jpeg", &png(16));
    assert_eq!(
        rule(event(outbound("x", json!({"images":[lying]})))),
        Rule::ImageMagic
    );
}

#[test]
fn outbound_image_base64_must_be_canonical() {
    let mut img = image("a.png", "image/png", &png(10));
    let canonical = img["dataBase64"].as_str().unwrap().to_owned();
    assert!(canonical.ends_with("=="));
    img["dataBase64"] = json!(canonical.trim_end_matches('='));
    assert_eq!(
        rule(event(outbound("x", json!({"images":[img.clone()]})))),
        Rule::Base64
    );
    img["dataBase64"] = json!(format!("{}\n", canonical));
    assert_eq!(
        rule(event(outbound("x", json!({"images":[img.clone()]})))),
        Rule::Base64
    );
    img["dataBase64"] = json!(canonical.replace('+', "-"));
    if img["dataBase64"] != json!(canonical) {
        assert_eq!(
            rule(event(outbound("x", json!({"images":[img]})))),
            Rule::Base64
        );
    }
}

#[test]
fn outbound_image_names_are_plain() {
    for bad in ["a/b.png", "..", ".", "a\\b.png", "", " a.png", "a\u{0}.png"] {
        let img = image(bad, "image/png", &png(8));
        assert_eq!(
            rule(event(outbound("x", json!({"images":[img]})))),
            Rule::FileName,
            "{bad:?}"
        );
    }
    ok(event(outbound(
        "x",
        json!({"images":[image(&"n".repeat(255), "image/png", &png(8))]}),
    )));
    let long = image(&"n".repeat(256), "image/png", &png(8));
    assert_eq!(
        rule(event(outbound("x", json!({"images":[long]})))),
        Rule::FileName
    );
}

// ---- session_tool ----

fn session_tool(request: Value) -> Value {
    json!({"type":"session_tool","operationId":"op-1","turnId":"turn-1","generation":1,"request":request})
}

#[test]
fn session_tool_history_limit_100_ok_101_fails() {
    ok(event(session_tool(json!({"tool":"history","limit":100}))));
    ok(event(session_tool(
        json!({"tool":"history","limit":1,"scope":"ambient","withCardJson":false}),
    )));
    ok(event(session_tool(json!({"tool":"history"}))));
    assert_eq!(
        rule(event(session_tool(json!({"tool":"history","limit":101})))),
        Rule::SessionToolLimit
    );
    assert_eq!(
        rule(event(session_tool(json!({"tool":"history","limit":0})))),
        Rule::SessionToolLimit
    );
    assert_eq!(
        rule(event(session_tool(
            json!({"tool":"history","scope":"world"})
        ))),
        Rule::FieldType
    );
}

#[test]
fn session_tool_allowlist_and_exact_keys() {
    for good in [
        json!({"tool":"bots.list"}),
        json!({"tool":"skill.list"}),
        json!({"tool":"skill.show","name":"deploy"}),
        json!({"tool":"skill.resources","name":"deploy"}),
        json!({"tool":"skill.read","name":"deploy","path":"docs/readme.md"}),
        json!({"tool":"quoted","messageId":"om_abc-DEF_1","raw":true}),
    ] {
        ok(event(session_tool(good)));
    }
    for bad in [
        json!({"tool":"schedule"}),
        json!({"tool":"bots.list","chatId":"x"}),
        json!({"tool":"skill.list","name":"x"}),
        json!({"tool":"history","limit":2,"argv":["rm"]}),
        json!({"tool":"skill.show","name":"x","path":"a"}),
        json!({"name":"x"}),
        json!("history"),
    ] {
        assert_eq!(
            rule(event(session_tool(bad.clone()))),
            Rule::SessionToolRequest,
            "{bad}"
        );
    }
}

#[test]
fn session_tool_quoted_message_id() {
    assert_eq!(
        rule(event(session_tool(
            json!({"tool":"quoted","messageId":"msg_1"})
        ))),
        Rule::QuotedMessageId
    );
    assert_eq!(
        rule(event(session_tool(
            json!({"tool":"quoted","messageId":"om_"})
        ))),
        Rule::QuotedMessageId
    );
    ok(event(session_tool(
        json!({"tool":"quoted","messageId":format!("om_{}", "a".repeat(253))}),
    )));
    assert_eq!(
        rule(event(session_tool(
            json!({"tool":"quoted","messageId":format!("om_{}", "a".repeat(254))})
        ))),
        Rule::QuotedMessageId
    );
}

#[test]
fn session_tool_skill_paths_are_safe_and_relative() {
    let read = |path: &str| session_tool(json!({"tool":"skill.read","name":"deploy","path":path}));
    ok(event(read("a/b")));
    ok(event(read("a\\b.md")));
    ok(event(read(&"p".repeat(1024))));
    assert_eq!(rule(event(read(&"p".repeat(1025)))), Rule::SkillPath);
    for bad in [
        "a/../b",
        "/etc/passwd",
        "a//b",
        "./a",
        "a/.",
        "..",
        "a\\..\\b",
        "\\abs",
        "a/",
    ] {
        assert_eq!(rule(event(read(bad))), Rule::SkillPath, "{bad}");
    }
    assert_eq!(
        rule(event(session_tool(
            json!({"tool":"skill.show","name":"../x"})
        ))),
        Rule::Id
    );
}

// ---- session_tool_result / outbound_message_result ----

fn tool_result(result: Value) -> Value {
    json!({"type":"session_tool_result","requestId":"session-tool-result:1","operationId":"op-1","turnId":"turn-1","generation":1,"result":result})
}

fn attachment(i: usize, bytes: &[u8]) -> Value {
    json!({"placeholder":format!("botmux-session-tool://attachment/{i}"),"name":format!("f{i}.bin"),"type":"file","dataBase64":b64(bytes)})
}

#[test]
fn session_tool_result_text_512_kib_ok_one_more_fails() {
    let completed = |stdout: usize, stderr: usize| {
        tool_result(
            json!({"outcome":"completed","exitCode":0,"stdout":"o".repeat(stdout),"stderr":"e".repeat(stderr)}),
        )
    };
    ok(command(completed(512 * 1024, 512 * 1024)));
    assert_eq!(
        rule(command(completed(512 * 1024 + 1, 0))),
        Rule::SessionToolTextSize
    );
    assert_eq!(
        rule(command(completed(0, 512 * 1024 + 1))),
        Rule::SessionToolTextSize
    );
}

#[test]
fn session_tool_result_attachments_8_ok_9_fail() {
    let atts = |n: usize| (0..n).map(|i| attachment(i, b"x")).collect::<Vec<_>>();
    let completed = |a: Vec<Value>| {
        tool_result(
            json!({"outcome":"completed","exitCode":1,"stdout":"","stderr":"","attachments":a}),
        )
    };
    ok(command(completed(atts(8))));
    assert_eq!(rule(command(completed(atts(9)))), Rule::AttachmentLimit);
}

#[test]
fn session_tool_result_attachment_bytes_512_kib_ok_one_more_fails() {
    let half = 256 * 1024;
    let completed = |a: Vec<Value>| {
        tool_result(
            json!({"outcome":"completed","exitCode":0,"stdout":"","stderr":"","attachments":a}),
        )
    };
    ok(command(completed(vec![
        attachment(0, &vec![1; half]),
        attachment(1, &vec![2; half]),
    ])));
    assert_eq!(
        rule(command(completed(vec![
            attachment(0, &vec![1; half]),
            attachment(1, &vec![2; half + 1])
        ]))),
        Rule::AttachmentLimit
    );
    let mut bad = attachment(0, b"x");
    bad["placeholder"] = json!("file:///etc/passwd");
    assert_eq!(
        rule(command(completed(vec![bad]))),
        Rule::AttachmentPlaceholder
    );
}

#[test]
fn operation_results_have_valid_codes() {
    ok(command(tool_result(
        json!({"outcome":"unknown","code":"session_tool_timeout","message":"timed out"}),
    )));
    assert_eq!(
        rule(command(tool_result(
            json!({"outcome":"rejected","code":"Bad Code","message":"m"})
        ))),
        Rule::ErrorCode
    );
    assert_eq!(
        rule(command(tool_result(json!({"outcome":"maybe"})))),
        Rule::FieldType
    );
    let outbound = json!({"type":"outbound_message_result","requestId":"o1","operationId":"op-1","turnId":"turn-1","generation":1,"result":{"outcome":"rejected","code":"operation_id_conflict","message":""}});
    assert_eq!(rule(command(outbound)), Rule::ErrorMessage);
}

// ---- access_url ----

#[test]
fn access_url_4096_ok_4097_fails_and_must_be_http() {
    let url = |u: &str| json!({"type":"access_url","url":u});
    let base = "https://example.invalid/";
    ok(event(url(&format!(
        "{base}{}",
        "a".repeat(4096 - base.len())
    ))));
    assert_eq!(
        rule(event(url(&format!(
            "{base}{}",
            "a".repeat(4097 - base.len())
        )))),
        Rule::AccessUrl
    );
    ok(event(url("http://127.0.0.1:8080/x?y#z")));
    ok(event(url("HTTPS://Example.invalid")));
    for bad in [
        "ftp://example.invalid",
        "https://",
        "example.invalid",
        "javascript:alert(1)",
        "https://exa mple/",
    ] {
        assert_eq!(rule(event(url(bad))), Rule::AccessUrl, "{bad}");
    }
}

// ---- envelope and correlation ----

#[test]
fn envelope_errors_are_typed_and_keep_correlation_ids() {
    let err = decode_event(b"{not json").unwrap_err();
    assert_eq!(err.code(), "invalid_json");
    assert!(err.request_id.is_none() && err.turn_id.is_none());

    assert_eq!(decode_event(b"[1,2]").unwrap_err().code(), "not_an_object");

    let err = decode_command(br#"{"protocol":"botmux.remote-runner","version":2,"type":"turn","requestId":"t1","turnId":"turn-1","content":"x"}"#).unwrap_err();
    assert_eq!(err.code(), "protocol_mismatch");
    assert_eq!(err.request_id.as_deref(), Some("t1"));
    assert_eq!(err.turn_id.as_deref(), Some("turn-1"));

    let err =
        decode_command(br#"{"protocol":"other","version":1,"type":"cancel","requestId":"c1"}"#)
            .unwrap_err();
    assert_eq!(err.code(), "protocol_mismatch");

    let err = decode_event(
        br#"{"protocol":"botmux.remote-runner","version":1,"type":"progress_v2","turnId":"t"}"#,
    )
    .unwrap_err();
    assert_eq!(
        err.kind,
        DecodeErrorKind::UnknownType {
            type_name: Some("progress_v2".into())
        }
    );
    // A command type is not an event type.
    assert_eq!(decode_event(br#"{"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":"t1","turnId":"x","content":""}"#).unwrap_err().code(), "unknown_type");
    assert_eq!(
        decode_command(br#"{"protocol":"botmux.remote-runner","version":1,"requestId":"c1"}"#)
            .unwrap_err()
            .code(),
        "unknown_type"
    );

    // An invalid id is not echoed back.
    let err = decode_command(br#"{"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":"bad id","turnId":"turn-1"}"#).unwrap_err();
    assert_eq!(err.request_id, None);
    assert_eq!(err.turn_id.as_deref(), Some("turn-1"));
}

#[test]
fn version_1_point_0_is_version_1() {
    ok(decode_command(
        br#"{"protocol":"botmux.remote-runner","version":1.0,"type":"status","requestId":"s"}"#,
    ));
}

#[test]
fn unknown_fields_on_messages_are_ignored() {
    ok(command(
        json!({"type":"cancel","requestId":"c1","futureField":true}),
    ));
    ok(event(
        json!({"type":"progress","turnId":"t","content":"x","extra":1}),
    ));
}

// ---- error locations and failure replies ----

#[test]
fn type_errors_name_the_nested_structure() {
    let err = event(json!({"type":"ready","requestId":"s1","state":{"version":1,"generation":1}}))
        .unwrap_err();
    let v = err.validation().unwrap();
    assert_eq!(
        (v.rule, v.path.as_str()),
        (Rule::FieldType, "state.provider")
    );
    let err = event(final_with_usage(
        json!({"generation":1,"snapshot":{"tokens":null}}),
    ))
    .unwrap_err();
    assert_eq!(err.validation().unwrap().path, "usage");
    assert!(err.validation().unwrap().detail.contains("context"));
    let err = event(json!({"type":"progress","content":"x"})).unwrap_err();
    assert_eq!(err.validation().unwrap().path, "turnId");
}

#[test]
fn decode_errors_become_correlated_failures() {
    let err = command(json!({"type":"turn","requestId":"t1","turnId":"turn-1"})).unwrap_err();
    let Event::Failure(f) = err.failure_event() else {
        panic!()
    };
    assert_eq!(f.request_id.as_deref(), Some("t1"));
    assert_eq!(f.turn_id.as_deref(), Some("turn-1"));
    assert_eq!(f.code, "invalid_message");
    Event::Failure(f).validate().unwrap();
    // Result commands are never answered by requestId.
    let err = command(json!({"type":"outbound_message_result","requestId":"o1","operationId":"op","turnId":"turn-1","generation":1})).unwrap_err();
    assert_eq!(err.request_id, None);
    assert_eq!(err.turn_id.as_deref(), Some("turn-1"));
    let result = ok(command(
        json!({"type":"outbound_message_result","requestId":"o1","operationId":"op","turnId":"turn-1","generation":1,"result":{"outcome":"delivered","messageId":"om_1"}}),
    ));
    let Event::Failure(f) = Event::failure_for(
        &result,
        "outbound_result_mismatch",
        "no such operation",
        remote_runner_protocol::FailureStatus::Failed,
        false,
    ) else {
        panic!()
    };
    assert_eq!((f.request_id, f.turn_id.as_deref()), (None, Some("turn-1")));
}

#[test]
fn invalid_json_failure_is_uncorrelated_and_valid() {
    let err = decode_command(b"{oops").unwrap_err();
    let failure = err.failure_event();
    failure.validate().unwrap();
    assert_eq!(failure.request_id(), None);
}

#[test]
fn blank_required_strings_are_refused() {
    let start = |cwd: &str| json!({"type":"start","requestId":"s1","sessionId":"demo","cwd":cwd});
    ok(command(start("/tmp")));
    assert_eq!(rule(command(start(" \t"))), Rule::NonEmptyString);
    let hello = json!({"type":"hello","requestId":"h1","sessionId":"","requiredCapabilities":[]});
    assert_eq!(rule(command(hello)), Rule::NonEmptyString);
    let model = json!({"type":"start","requestId":"s1","sessionId":"demo","cwd":"/","model":"m".repeat(257)});
    assert_eq!(rule(command(model)), Rule::NonEmptyString);
}

#[test]
fn rule_names_are_stable_unique_snake_case() {
    let mut seen = std::collections::HashSet::new();
    for rule in Rule::ALL {
        let name = rule.as_str();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        );
        assert!(seen.insert(name), "{name} twice");
        assert_eq!(serde_json::to_value(rule).unwrap(), json!(name));
    }
    assert_eq!(Rule::ALL.len(), 42);
}

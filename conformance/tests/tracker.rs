//! The host's stateful rules, fed event by event (no process involved).

use remote_runner_conformance::track::{RequestKind, Tracker, TurnPhase};
use remote_runner_protocol::{
    Command, Event, FailureStatus, Mention, OutboundResult, ResponseKind, SessionStatus, State,
};

const CAPS: [&str; 9] = [
    "start",
    "resume",
    "turn",
    "cancel",
    "detach",
    "reattach",
    "status",
    "terminal_screen",
    "outbound_message",
];

fn state(generation: u64) -> State {
    State::new("demo", generation).with_remote_session_id(format!("compute-{generation}"))
}

/// A tracker after hello and start (state at generation 1).
fn ready() -> Tracker {
    let mut t = Tracker::default();
    t.sent("hello:1", RequestKind::Hello(vec!["turn".into()]));
    t.observe(&Event::hello("hello:1", "demo", CAPS)).unwrap();
    t.sent("start:1", RequestKind::Start);
    t.observe(&Event::ready("start:1", state(1))).unwrap();
    t
}

fn rule_of(result: Result<Vec<(String, Command)>, remote_runner_conformance::Violation>) -> String {
    result.expect_err("a violation").rule
}

fn failure(request: Option<&str>, turn: Option<&str>) -> Event {
    Event::failure(
        request.map(str::to_owned),
        turn.map(str::to_owned),
        "demo_failed",
        "demo",
        FailureStatus::Failed,
        false,
    )
}

fn acked(t: &mut Tracker, n: u32) -> String {
    let (request, turn) = (format!("turn:{n}"), format!("t{n}"));
    t.sent(&request, RequestKind::Turn(turn.clone()));
    t.observe(&Event::status(&request, SessionStatus::Busy, None))
        .unwrap();
    turn
}

fn outbound(turn: &str, id: &str, content: &str) -> Event {
    Event::outbound_message(id, turn, 1, content, ResponseKind::Progress, Mention::None)
}

#[test]
fn pre_ack_failure_with_only_the_turn_id_is_correlated() {
    let mut t = ready();
    t.sent("turn:1", RequestKind::Turn("t1".into()));
    t.observe(&failure(None, Some("t1"))).unwrap();
    assert_eq!(t.phase("t1"), Some(TurnPhase::Ended));
    assert!(
        t.reply("turn:1").is_some(),
        "the failure answers the turn request"
    );
}

#[test]
fn post_ack_failure_needs_the_turn_id() {
    let mut t = ready();
    acked(&mut t, 1);
    assert_eq!(
        rule_of(t.observe(&failure(Some("turn:1"), None))),
        "post_ack_failure_without_turn_id"
    );
    let mut t = ready();
    acked(&mut t, 1);
    t.observe(&failure(Some("turn:1"), Some("t1"))).unwrap();
    assert_eq!(t.phase("t1"), Some(TurnPhase::Ended));
    assert_eq!(
        rule_of(t.observe(&Event::progress("t1", "late"))),
        "turn_not_active"
    );
}

#[test]
fn a_failure_with_the_wrong_turn_id_is_a_mismatch() {
    let mut t = ready();
    acked(&mut t, 1);
    t.sent("turn:2", RequestKind::Turn("t2".into()));
    assert_eq!(
        rule_of(t.observe(&failure(Some("turn:2"), Some("t1")))),
        "turn_id_mismatch"
    );
}

#[test]
fn uncorrelated_failures_are_errors_unless_tolerated() {
    let mut t = ready();
    assert_eq!(
        rule_of(t.observe(&failure(None, None))),
        "uncorrelated_failure"
    );
    t.tolerate_uncorrelated = true;
    t.observe(&failure(None, None)).unwrap();
    assert_eq!(t.uncorrelated_failures, 1);
}

#[test]
fn correlation_of_status_replies() {
    let mut t = ready();
    assert_eq!(
        rule_of(t.observe(&Event::status("nobody:1", SessionStatus::Ready, None))),
        "unknown_request_id"
    );
    t.sent("cancel:1", RequestKind::Cancel);
    assert_eq!(
        rule_of(t.observe(&Event::status("cancel:1", SessionStatus::Ready, None))),
        "unexpected_status_value"
    );
    t.observe(&Event::status("cancel:1", SessionStatus::Closed, None))
        .unwrap();
    assert_eq!(
        rule_of(t.observe(&Event::status("cancel:1", SessionStatus::Closed, None))),
        "request_already_answered"
    );
    t.sent("start:2", RequestKind::Start);
    assert_eq!(
        rule_of(t.observe(&Event::status("start:2", SessionStatus::Ready, None))),
        "wrong_reply_type"
    );
}

#[test]
fn events_before_the_ack_or_for_unknown_turns_are_errors() {
    let mut t = ready();
    t.sent("turn:1", RequestKind::Turn("t1".into()));
    assert_eq!(
        rule_of(t.observe(&Event::progress("t1", "x"))),
        "event_before_ack"
    );
    assert_eq!(
        rule_of(t.observe(&Event::progress("t9", "x"))),
        "unknown_turn_id"
    );
}

#[test]
fn a_second_ack_while_a_turn_runs_is_an_overlap() {
    let mut t = ready();
    acked(&mut t, 1);
    t.sent("turn:2", RequestKind::Turn("t2".into()));
    assert_eq!(
        rule_of(t.observe(&Event::status("turn:2", SessionStatus::Busy, None))),
        "turn_overlap"
    );
}

#[test]
fn terminal_screen_fencing() {
    let mut t = ready();
    assert_eq!(
        rule_of(t.observe(&Event::terminal_screen(2, 1, 80, 24, "future"))),
        "screen_generation_ahead"
    );
    t.observe(&Event::terminal_screen(1, 5, 80, 24, "a"))
        .unwrap();
    t.observe(&Event::terminal_screen(1, 5, 80, 24, "same sequence"))
        .unwrap();
    t.observe(&Event::terminal_screen(0, 9, 80, 24, "stale"))
        .unwrap();
    let warnings: Vec<String> = t.take_warnings().into_iter().map(|w| w.rule).collect();
    assert_eq!(
        warnings,
        ["screen_sequence_not_increasing", "stale_screen_ignored"]
    );
}

#[test]
fn no_screen_of_a_rebuilt_generation_before_the_next_command() {
    let mut t = Tracker::default();
    t.sent("hello:1", RequestKind::Hello(Vec::new()));
    t.observe(&Event::hello("hello:1", "demo", CAPS)).unwrap();
    t.sent(
        "resume:1",
        RequestKind::Resume {
            persisted: state(3),
            rebuild: true,
        },
    );
    t.observe(&Event::ready("resume:1", state(4))).unwrap();
    assert_eq!(
        rule_of(t.observe(&Event::terminal_screen(4, 1, 80, 24, "early"))),
        "early_new_generation_screen"
    );
    t.command_written();
    t.observe(&Event::terminal_screen(
        4,
        2,
        80,
        24,
        "after the next command",
    ))
    .unwrap();
}

#[test]
fn rebuild_must_advance_and_keep_the_thread() {
    let mut t = Tracker::default();
    t.sent("hello:1", RequestKind::Hello(Vec::new()));
    t.observe(&Event::hello("hello:1", "demo", CAPS)).unwrap();
    let persisted = state(3).with_agent_thread_id("thread-1");
    t.sent(
        "resume:1",
        RequestKind::Resume {
            persisted: persisted.clone(),
            rebuild: true,
        },
    );
    assert_eq!(
        rule_of(t.observe(&Event::ready("resume:1", persisted.clone()))),
        "rebuild_not_advanced"
    );
    t.sent(
        "resume:2",
        RequestKind::Resume {
            persisted,
            rebuild: true,
        },
    );
    assert_eq!(
        rule_of(t.observe(&Event::ready("resume:2", state(4)))),
        "agent_thread_id_not_kept"
    );
}

#[test]
fn outbound_dedupe_conflict_and_rate_limit() {
    let mut t = ready();
    let turn = acked(&mut t, 1);
    let first = t.observe(&outbound(&turn, "op-1", "hello")).unwrap();
    let again = t.observe(&outbound(&turn, "op-1", "hello")).unwrap();
    let result = |cmds: &[(String, Command)]| match &cmds[0].1 {
        Command::OutboundMessageResult(c) => c.result.clone(),
        other => panic!("not an outbound result: {other:?}"),
    };
    assert_eq!(
        result(&first),
        result(&again),
        "same id and payload reuse the result"
    );
    let conflict = t.observe(&outbound(&turn, "op-1", "changed")).unwrap();
    assert!(
        matches!(result(&conflict), OutboundResult::Rejected { code, .. } if code == "operation_id_conflict")
    );
    let mut limited = 0;
    for i in 2..=11 {
        let cmds = t
            .observe(&outbound(&turn, &format!("op-{i}"), "x"))
            .unwrap();
        if matches!(result(&cmds), OutboundResult::Rejected { code, .. } if code == "outbound_rate_limited")
        {
            limited += 1;
        }
    }
    assert_eq!(
        limited, 1,
        "10 distinct operations are delivered, the 11th is limited"
    );
    assert_eq!(t.results_pending(&turn), 13);
}

#[test]
fn final_waits_for_every_result() {
    let mut t = ready();
    let turn = acked(&mut t, 1);
    let cmds = t.observe(&outbound(&turn, "op-1", "hello")).unwrap();
    let done = Event::final_result(&turn, "done", None, None);
    assert_eq!(rule_of(t.observe(&done)), "final_before_results");
    t.settlement_written(cmds[0].1.request_id(), &turn);
    t.observe(&done).unwrap();
    assert_eq!(
        rule_of(t.observe(&Event::status(
            cmds[0].1.request_id(),
            SessionStatus::Ready,
            None
        ))),
        "reply_to_settlement"
    );
}

#[test]
fn operations_need_the_capability_and_the_current_generation() {
    let mut t = ready();
    let turn = acked(&mut t, 1);
    let tool = Event::session_tool(
        "op-1",
        &turn,
        1,
        remote_runner_protocol::SessionToolRequest::BotsList,
    );
    assert_eq!(rule_of(t.observe(&tool)), "capability_not_advertised");
    let stale =
        Event::outbound_message("op-2", &turn, 0, "x", ResponseKind::Progress, Mention::None);
    assert_eq!(rule_of(t.observe(&stale)), "operation_generation_mismatch");
}

#[test]
fn state_rules_apply_to_lineage_and_usage() {
    let mut t = ready();
    assert_eq!(
        rule_of(t.observe(&Event::lineage_changed(state(0)))),
        "generation_decreased"
    );
    let other = State::new("demo", 1).with_remote_session_id("other");
    assert_eq!(
        rule_of(t.observe(&Event::lineage_changed(other))),
        "remote_session_id_changed"
    );
    let foreign = State::new("someone-else", 1).with_remote_session_id("compute-1");
    assert_eq!(
        rule_of(t.observe(&Event::lineage_changed(foreign))),
        "state_provider_mismatch"
    );
}

#[test]
fn nothing_but_hello_before_the_handshake() {
    let mut t = Tracker::default();
    assert_eq!(
        rule_of(t.observe(&Event::progress("t1", "x"))),
        "event_before_handshake"
    );
}

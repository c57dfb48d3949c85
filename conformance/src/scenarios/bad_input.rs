//! bad_input: lines the host never sends. The provider answers (a correlated failure when the
//! line has a readable requestId; an uncorrelated failure or nothing otherwise) and stays
//! usable. None of this may kill it.

use remote_runner_protocol::MAX_LINE_BYTES;
use serde_json::json;

use super::handshake::must_refuse;
use super::{Level, Scenario, body, host_rules, plain_turn};
use crate::host::{Host, new_request_id};
use crate::violation::Step;

/// Sends `line`; when `request_id` is given, a correlated failure must answer it.
async fn bad_line(
    host: &mut Host,
    line: Vec<u8>,
    request_id: Option<&str>,
    what: &str,
) -> Step<()> {
    host.track.tolerate_uncorrelated = true;
    host.send_raw(&line, request_id).await?;
    if let Some(id) = request_id {
        let timeout = host.config().operation_timeout;
        let reply = host.wait_reply(id, timeout, what).await?;
        must_refuse(what, &reply)?;
    }
    host.probe(what).await?;
    host.track.tolerate_uncorrelated = false;
    Ok(())
}

fn json_line(value: serde_json::Value) -> Vec<u8> {
    let mut line = value.to_string().into_bytes();
    line.push(b'\n');
    line
}

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "invalid_json",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a line that is not JSON is answered (at most an uncorrelated failure) and \
                     the provider keeps answering",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                bad_line(&mut host, b"{this is not json\n".to_vec(), None, "an invalid JSON line").await?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "invalid_json_before_hello",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a non-JSON line before hello does not prevent the handshake",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.track.tolerate_uncorrelated = true;
                host.send_raw(b"not json at all\n", None).await?;
                host.handshake().await?;
                host.track.tolerate_uncorrelated = false;
                host.start().await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "json_not_an_object",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a JSON array line is answered without dying",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                bad_line(&mut host, b"[1,2,3]\n".to_vec(), None, "a JSON array line").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "wrong_protocol",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a line with another protocol name and a requestId gets a failure with that \
                     requestId",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let id = new_request_id("status");
                let line = json_line(json!({"protocol":"other.protocol","version":1,"type":"status","requestId":id}));
                bad_line(&mut host, line, Some(&id), "a wrong-protocol line").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "wrong_version",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a line with version 2 and a requestId gets a failure with that requestId",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let id = new_request_id("status");
                let line = json_line(json!({"protocol":"botmux.remote-runner","version":2,"type":"status","requestId":id}));
                bad_line(&mut host, line, Some(&id), "a version-2 line").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "missing_required_field",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a turn without content (requestId present) gets a failure with that requestId",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let id = new_request_id("turn");
                let line = json_line(json!({"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":id,"turnId":"conformance-bad-turn"}));
                bad_line(&mut host, line, Some(&id), "a turn without content").await?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "invalid_field_value",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a terminal_resize with cols 0 (requestId present) gets a failure with that \
                     requestId",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let id = new_request_id("terminal-resize");
                let generation = host.track.state().map_or(0, |s| s.generation);
                let line = json_line(json!({"protocol":"botmux.remote-runner","version":1,"type":"terminal_resize","requestId":id,"generation":generation,"cols":0,"rows":30}));
                bad_line(&mut host, line, Some(&id), "a terminal_resize with cols 0").await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "oversize_line",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "a command line over 4 MiB is refused (at most an uncorrelated failure) and \
                     the provider keeps answering",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                let id = new_request_id("turn");
                let content = "x".repeat(MAX_LINE_BYTES + 16);
                let line = json_line(json!({"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":id,"turnId":"conformance-oversize","content":content}));
                host.track.tolerate_uncorrelated = true;
                // A correlated failure is fine too, so the id is registered but not awaited.
                host.send_raw(&line, Some(&id)).await?;
                host.probe("a line over 4 MiB").await?;
                host.track.tolerate_uncorrelated = false;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
        Scenario {
            name: "blank_lines_ignored",
            group: "bad_input",
            level: Level::Recommended,
            host_rule: host_rules::BAD_INPUT,
            checks: "blank and whitespace-only lines are skipped silently",
            run: body!(ctx => {
                let mut host = ctx.spawn()?;
                host.open().await?;
                host.send_raw(b"\n   \n\t\n\n", None).await?;
                host.probe("blank lines").await?;
                plain_turn(&mut host, 1).await?;
                ctx.finish(host).await;
                Ok(())
            }),
        },
    ]
}

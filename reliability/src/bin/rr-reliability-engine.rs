//! A one-shot engine client in its own process, standing in for a CLI process (`remote-runner
//! session exec` is wired elsewhere): reads one JSON request from `RR_ENGINE_REQUEST`, makes the
//! engine call, prints one JSON line with the record or the error.
//!
//! Request: `{"state_dir", "machine": <Machine>, "op": "exec", "session_id", "command",
//! "start_at_ms"?: <epoch ms to wait for, so racing processes start together>}`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use remote_runner_engine::engine::{EngineOptions, ExecRequest};
use remote_runner_engine::machine::Machine;
use remote_runner_reliability::bed::{connect_options, open_engine};
use serde_json::{Value, json};

fn main() {
    let reply = match std::env::var("RR_ENGINE_REQUEST") {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(req) => run(&req),
            Err(e) => json!({"ok": false, "code": "invalid_input", "message": e.to_string()}),
        },
        Err(_) => json!({"ok": false, "code": "invalid_input", "message": "set RR_ENGINE_REQUEST"}),
    };
    println!("{reply}");
}

fn run(req: &Value) -> Value {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => return json!({"ok": false, "code": "internal", "message": e.to_string()}),
    };
    rt.block_on(async {
        let machine: Machine = match serde_json::from_value(req["machine"].clone()) {
            Ok(m) => m,
            Err(e) => return json!({"ok": false, "code": "invalid_input", "message": e.to_string()}),
        };
        let state = std::path::PathBuf::from(req["state_dir"].as_str().unwrap_or_default());
        let engine = match open_engine(&state, &machine, &connect_options(), &EngineOptions::default())
        {
            Ok(e) => e,
            Err(e) => return json!({"ok": false, "code": "internal", "message": format!("{e:#}")}),
        };
        let sid = req["session_id"].as_str().unwrap_or_default();
        // Connect first so that racing processes meet at the lock, not at the handshake.
        let _ = engine.check_alive(sid).await;
        if let Some(at) = req["start_at_ms"].as_u64() {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            if at > now {
                tokio::time::sleep(Duration::from_millis(at - now)).await;
            }
        }
        match req["op"].as_str() {
            Some("exec") => {
                let cmd = req["command"].as_str().unwrap_or_default();
                match engine.exec(sid, cmd, ExecRequest::wait()).await {
                    Ok(rec) => json!({"ok": true, "record": rec}),
                    Err(e) => json!({"ok": false, "code": e.code.as_str(), "message": e.message}),
                }
            }
            other => json!({"ok": false, "code": "invalid_input", "message": format!("unknown op {other:?}")}),
        }
    })
}

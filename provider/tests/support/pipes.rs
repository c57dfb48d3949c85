//! The provider's `serve()` in this process, on in-memory pipes, and a checker for exact lines.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use remote_runner_provider::server::{ProviderConfig, serve};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

/// How long any one expected line may take (the engine runs real tmux).
const LINE_WAIT: Duration = Duration::from_secs(30);

pub struct Pipes {
    to_provider: Option<DuplexStream>,
    from_provider: Lines<BufReader<DuplexStream>>,
    stop: Option<oneshot::Sender<i32>>,
    task: Option<JoinHandle<i32>>,
}

impl Pipes {
    /// A provider on the `local` machine (real tmux), terminal capabilities off so that no
    /// screen interleaves with the transcript.
    pub fn local(dir: &tempfile::TempDir) -> Pipes {
        Pipes::with_env(dir, &[])
    }

    pub fn with_env(dir: &tempfile::TempDir, extra: &[(&str, String)]) -> Pipes {
        Pipes::in_state_dir(&dir.path().join("state"), extra)
    }

    pub fn in_state_dir(state_dir: &Path, extra: &[(&str, String)]) -> Pipes {
        let mut env: HashMap<String, String> = HashMap::new();
        env.insert(
            "REMOTE_RUNNER_STATE_DIR".into(),
            state_dir.display().to_string(),
        );
        env.insert("REMOTE_RUNNER_TERMINAL".into(), "off".into());
        for (k, v) in extra {
            env.insert(k.to_string(), v.clone());
        }
        let config = ProviderConfig::from_map(env);
        let (host_in, provider_in) = tokio::io::duplex(1 << 20);
        let (provider_out, host_out) = tokio::io::duplex(1 << 20);
        let (stop_tx, stop_rx) = oneshot::channel::<i32>();
        let stop = async move {
            match stop_rx.await {
                Ok(code) => code,
                Err(_) => std::future::pending().await,
            }
        };
        let task = tokio::spawn(serve(config, provider_in, provider_out, stop));
        Pipes {
            to_provider: Some(host_in),
            from_provider: BufReader::new(host_out).lines(),
            stop: Some(stop_tx),
            task: Some(task),
        }
    }

    /// Write one line to the provider's stdin.
    pub async fn send(&mut self, line: &str) {
        let w = self.to_provider.as_mut().expect("stdin open");
        w.write_all(line.as_bytes()).await.unwrap();
        w.write_all(b"\n").await.unwrap();
        w.flush().await.unwrap();
    }

    /// The next line the provider prints, checked by the protocol crate.
    pub async fn next(&mut self) -> Option<String> {
        let line = tokio::time::timeout(LINE_WAIT, self.from_provider.next_line())
            .await
            .unwrap_or_else(|_| panic!("no line within {LINE_WAIT:?}"))
            .unwrap();
        if let Some(l) = &line
            && let Err(e) = remote_runner_protocol::decode_event(l.as_bytes())
        {
            panic!("the provider printed an invalid line: {e}\n{l}");
        }
        line
    }

    /// The next line must be `expected` exactly (same keys, same values), where the string
    /// `"<any>"` matches any value. Returns the line as JSON.
    pub async fn expect(&mut self, expected: &str) -> Value {
        let want: Value = serde_json::from_str(expected).expect("expected line is JSON");
        let got = self
            .next()
            .await
            .unwrap_or_else(|| panic!("the provider's stdout ended; expected:\n{expected}"));
        let got_value: Value = serde_json::from_str(&got).unwrap();
        assert!(
            matches(&want, &got_value),
            "line differs\nexpected: {expected}\n     got: {got}"
        );
        got_value
    }

    /// `hello` for BotMux session `chat-1`, and its answer.
    pub async fn hello(&mut self) -> Value {
        self.send(r#"{"protocol":"botmux.remote-runner","version":1,"type":"hello","requestId":"hello:1","sessionId":"chat-1","requiredCapabilities":["start"]}"#).await;
        self.expect(r#"{"protocol":"botmux.remote-runner","version":1,"type":"hello","requestId":"hello:1","provider":"remote-runner","capabilities":"<any>"}"#).await
    }

    /// Close stdin and return the exit status `serve` ends with.
    pub async fn close(&mut self) -> i32 {
        self.to_provider = None;
        self.join().await
    }

    /// Fire the stop future (a signal) with stdin still open; return the exit status.
    pub async fn stop(&mut self, code: i32) -> i32 {
        let _ = self.stop.take().expect("not stopped yet").send(code);
        self.join().await
    }

    /// The provider printed nothing more before its stdout closed.
    pub async fn expect_end(&mut self) {
        if let Some(l) = self.next().await {
            panic!("unexpected line after the end: {l}");
        }
    }

    async fn join(&mut self) -> i32 {
        let task = self.task.take().expect("serve still running");
        tokio::time::timeout(LINE_WAIT, task)
            .await
            .expect("serve ended")
            .expect("serve did not panic")
    }
}

/// Whether `got` matches `want`: same shape, same keys; `"<any>"` in `want` matches anything.
pub fn matches(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::String(s), _) if s == "<any>" => true,
        (Value::Object(w), Value::Object(g)) => {
            w.len() == g.len()
                && w.iter()
                    .all(|(k, wv)| g.get(k).is_some_and(|gv| matches(wv, gv)))
        }
        (Value::Array(w), Value::Array(g)) => {
            w.len() == g.len() && w.iter().zip(g).all(|(a, b)| matches(a, b))
        }
        _ => want == got,
    }
}

/// A TCP port on 127.0.0.1 that accepts connections and never says anything: an SSH connect
/// to it stays in flight until it hangs up.
pub struct BlackHole {
    port: u16,
    connected: std::sync::Arc<Notify>,
    hang_up: Option<oneshot::Sender<()>>,
}

impl BlackHole {
    pub async fn bind() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connected = std::sync::Arc::new(Notify::new());
        let (tx, mut rx) = oneshot::channel::<()>();
        let notify = connected.clone();
        tokio::spawn(async move {
            let mut held: Vec<TcpStream> = Vec::new();
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => {
                        if let Ok((s, _)) = accepted {
                            held.push(s);
                            notify.notify_one();
                        }
                    }
                }
            }
            // Dropping the listener and the sockets: the connect fails at once.
        });
        BlackHole {
            port,
            connected,
            hang_up: Some(tx),
        }
    }

    /// Provider environment reaching this port as an ad-hoc machine.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("REMOTE_RUNNER_HOST", "127.0.0.1".to_string()),
            ("REMOTE_RUNNER_PORT", self.port.to_string()),
            ("REMOTE_RUNNER_USER", "rr-nobody".to_string()),
        ]
    }

    pub async fn wait_for_connection(&self) {
        tokio::time::timeout(LINE_WAIT, self.connected.notified())
            .await
            .expect("the provider connected");
    }

    pub fn hang_up(&mut self) {
        if let Some(tx) = self.hang_up.take() {
            let _ = tx.send(());
        }
    }
}

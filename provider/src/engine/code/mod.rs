//! The code runtime (issue 17): run a model-written program on a machine, as a fresh process of
//! its own, against host bindings, and get back `{value?, logs, error?}` (the code-runtime seam,
//! `docs/code-runtime.md`).
//!
//! One small runner script per language (`runner.js` under `node`, `runner.py` under `python3`)
//! is uploaded once by content hash to `<state root>/code/` on the machine. Each run is one
//! [`Transport::exec`] of a short POSIX sh wrapper: the request (program, nonce, output cap,
//! bindings) goes in on stdin, the process runs under `timeout(1)` for the time budget, and the
//! result comes back as the last stdout line after a per-run nonce. `timeout` leads its own
//! process group; whatever the program started in it is killed when the run ends. Binding calls travel through
//! files in the run's own directory on the machine (`<id>.call` written by the runner, polled by
//! the host; `<id>.reply` written by the host, polled by the runner): the transport has no
//! bidirectional streaming exec, and this needs no change to it.
//!
//! Values stay JSON text end to end on the host (never re-serialized through `f64`), so `-0`
//! and integers of any size come back exactly as the runner wrote them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorCode, Result};
use crate::transport::{ExecOptions, ExitStatus, Transport, shell_quote};

const RUNNER_JS: &str = include_str!("runner.js");
const RUNNER_PY: &str = include_str!("runner.py");

/// Exit status of `timeout(1)` when the budget expired.
const TIMEOUT_STATUS: i32 = 124;
/// How often the host looks for binding calls while a run with bindings is in flight.
const CALL_POLL: Duration = Duration::from_millis(50);
/// Grace on top of the time budget for the whole exec (connection, start-up, kill-after).
const EXEC_GRACE: Duration = Duration::from_secs(30);

/// The language programs are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Javascript,
    Python,
}

impl Language {
    pub fn parse(s: &str) -> Result<Language> {
        match s {
            "javascript" | "js" => Ok(Language::Javascript),
            "python" | "py" => Ok(Language::Python),
            "typescript" | "ts" => Err(Error::new(
                ErrorCode::LanguageUnavailable,
                "typescript is not offered yet; use --language javascript",
            )),
            other => Err(Error::invalid(format!(
                "unknown language {other:?}; use javascript or python"
            ))),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Javascript => "javascript",
            Language::Python => "python",
        }
    }
    fn interpreter(self) -> &'static str {
        match self {
            Language::Javascript => "node",
            Language::Python => "python3",
        }
    }
    fn runner(self) -> (&'static str, &'static str) {
        match self {
            Language::Javascript => (RUNNER_JS, "js"),
            Language::Python => (RUNNER_PY, "py"),
        }
    }
}

/// The runtime's validated configuration: budgets and caps are never per-run knobs.
#[derive(Debug, Clone)]
pub struct CodeConfig {
    pub language: Language,
    /// Wall-clock budget of one run.
    pub time_budget: Duration,
    /// Cap on the serialized logs plus the value (or failure message) of one run, in bytes.
    pub output_cap: usize,
    /// Directory the program runs in (default: the account's home).
    pub cwd: Option<String>,
}

impl CodeConfig {
    pub fn new(language: Language) -> CodeConfig {
        CodeConfig {
            language,
            time_budget: Duration::from_secs(30),
            output_cap: 1 << 20,
            cwd: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.time_budget.is_zero() || self.time_budget > Duration::from_secs(24 * 3600) {
            return Err(Error::invalid(
                "the time budget must be between 1 second and 24 hours",
            ));
        }
        if self.output_cap < 16 || self.output_cap > 256 << 20 {
            return Err(Error::invalid(
                "the output cap must be between 16 bytes and 256 MiB",
            ));
        }
        Ok(())
    }
}

/// One namespace of host functions, visible to the program as a global object.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CodeBindingNamespace {
    pub global: String,
    pub functions: Vec<String>,
    #[serde(
        rename = "errorClass",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub error_class: Option<CodeBindingErrorClass>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CodeBindingErrorClass {
    pub name: String,
    #[serde(rename = "memberNameProperty")]
    pub member_name_property: String,
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

impl CodeBindingNamespace {
    pub fn validate(&self) -> Result<()> {
        if !is_identifier(&self.global) {
            return Err(Error::invalid(format!(
                "binding global {:?} is not a usable identifier (letters, digits, _ and $)",
                self.global
            )));
        }
        if let Some(ec) = &self.error_class {
            if !is_identifier(&ec.name) {
                return Err(Error::invalid(format!(
                    "errorClass name {:?} is not a usable identifier",
                    ec.name
                )));
            }
            if ec.member_name_property.is_empty()
                || ["name", "message", "stack"].contains(&ec.member_name_property.as_str())
            {
                return Err(Error::invalid(format!(
                    "errorClass memberNameProperty {:?} must be non-empty and not name, message \
                     or stack",
                    ec.member_name_property
                )));
            }
        }
        Ok(())
    }
}

/// A binding call from a running program, to be settled by the host.
#[derive(Debug)]
pub struct CodeCall {
    pub call_id: String,
    pub global: String,
    pub function: String,
    /// The argument as lossless JSON text.
    pub args: String,
    /// Settle the call: `Ok(json text)` resolves it, `Err(message)` rejects it.
    pub reply: oneshot::Sender<std::result::Result<String, String>>,
}

/// One run's outcome: the `CodeRunResult` as lossless JSON text.
#[derive(Debug, Clone)]
pub struct CodeRunResult {
    /// `{"logs":[...],"value"?:...,"error"?:{"kind","message"}}`.
    pub json: String,
    /// `error.kind` when the run failed.
    pub error_kind: Option<String>,
}

impl CodeRunResult {
    fn failure(kind: &str, message: impl Into<String>) -> CodeRunResult {
        let message: String = message.into();
        CodeRunResult {
            json: json!({"logs": [], "error": {"kind": kind, "message": message}}).to_string(),
            error_kind: Some(kind.to_string()),
        }
    }
}

struct Prepared {
    runner: String,
    runs_dir: String,
}

/// A code runtime on one machine. Cheap to share; runs are independent processes.
pub struct CodeRuntime {
    transport: Arc<dyn Transport>,
    config: CodeConfig,
    prepared: OnceCell<Prepared>,
}

impl CodeRuntime {
    pub fn new(transport: Arc<dyn Transport>, config: CodeConfig) -> Result<CodeRuntime> {
        config.validate()?;
        Ok(CodeRuntime {
            transport,
            config,
            prepared: OnceCell::new(),
        })
    }

    pub fn language(&self) -> Language {
        self.config.language
    }

    /// The execution substrate, a diagnostic label only.
    pub fn isolation(&self) -> &'static str {
        "process"
    }

    /// Find the interpreter and upload the runner (once per content hash per machine).
    async fn prepare(&self) -> Result<&Prepared> {
        self.prepared
            .get_or_try_init(|| async {
                let lang = self.config.language;
                let (source, ext) = lang.runner();
                let hash = hex::encode(Sha256::digest(source.as_bytes()));
                let name = format!("runner-{}.{ext}", &hash[..16]);
                let script = format!(
                    "umask 077\n\
                     r=${{XDG_STATE_HOME:-}}; case $r in /*) ;; *) r=$HOME/.local/state ;; esac\n\
                     d=$r/remote-runner/code\n\
                     mkdir -p \"$d/runs\" || exit 3\n\
                     command -v {interp} >/dev/null 2>&1 || {{ echo missing-interpreter; exit 0; }}\n\
                     command -v timeout >/dev/null 2>&1 || {{ echo missing-timeout; exit 0; }}\n\
                     printf '%s\\n' \"$d\"\n\
                     if [ -f \"$d/{name}\" ]; then echo present; else echo absent; fi\n",
                    interp = lang.interpreter(),
                );
                let out = self
                    .transport
                    .exec(&script, ExecOptions::default())
                    .await?;
                let text = out.stdout_lossy();
                let mut lines = text.lines();
                let first = lines.next().unwrap_or("");
                match first {
                    "missing-interpreter" => {
                        return Err(Error::new(
                            ErrorCode::LanguageUnavailable,
                            format!(
                                "{} is not on the machine's PATH; install it to run {} programs \
                                 there",
                                lang.interpreter(),
                                lang.as_str()
                            ),
                        ));
                    }
                    "missing-timeout" => {
                        return Err(Error::new(
                            ErrorCode::RemoteError,
                            "timeout(1) (coreutils) is not on the machine's PATH; the code \
                             runtime needs it to bound runs",
                        ));
                    }
                    _ => {}
                }
                if !out.status.success() || !first.starts_with('/') {
                    return Err(Error::new(
                        ErrorCode::RemoteError,
                        format!(
                            "cannot prepare the code runtime directory on the machine: {}",
                            out.stderr_lossy().trim()
                        ),
                    ));
                }
                let dir = first.to_string();
                let runner = format!("{dir}/{name}");
                if lines.next() != Some("present") {
                    self.transport
                        .write_file(&runner, source.as_bytes(), 0o600)
                        .await?;
                }
                Ok(Prepared {
                    runner,
                    runs_dir: format!("{dir}/runs"),
                })
            })
            .await
    }

    /// Run one program. Never fails for the program's sake: every program outcome is a
    /// [`CodeRunResult`]; `Err` means the runtime itself could not start (no interpreter,
    /// machine unreachable before the run).
    ///
    /// `calls`: where binding calls go (required when `bindings` is non-empty). `abort`: the
    /// host's abort; the process is stopped even in a tight loop.
    pub async fn run(
        &self,
        program: &str,
        bindings: &[CodeBindingNamespace],
        calls: Option<mpsc::UnboundedSender<CodeCall>>,
        abort: CancellationToken,
    ) -> Result<CodeRunResult> {
        for b in bindings {
            b.validate()?;
        }
        let prepared = self.prepare().await?;
        let run_id = crate::util::new_id("code");
        let run_dir = format!("{}/{run_id}", prepared.runs_dir);
        let nonce = format!("\u{1e}rr-result-{run_id}:");
        let request = json!({
            "program": program,
            "nonce": nonce,
            "cap": self.config.output_cap,
            "bindings": bindings,
            "callDir": run_dir,
        });
        let budget = self.config.time_budget;
        let secs = budget.as_secs_f64();
        let cd = match &self.config.cwd {
            Some(dir) => format!("cd {} || exit 91\n", shell_quote(dir)),
            None => "cd || exit 91\n".to_string(),
        };
        // The runner is checked (StrictModes) right before it runs.
        let token = uuid::Uuid::new_v4().simple().to_string();
        let script = format!(
            "{check}d={dir}\nmkdir -m 700 \"$d\" || exit 90\n{cd}exec 3<&0\n\
             timeout -k 2 {secs:.3} {interp} {runner} <&3 3<&- &\n\
             p=$!\necho \"$p\" > \"$d/pid\"\nwait \"$p\"; s=$?\nkill -s KILL -- \"-$p\" 2>/dev/null || kill -s KILL \"-$p\" 2>/dev/null\nrm -rf \"$d\"\nexit $s\n",
            dir = shell_quote(&run_dir),
            interp = self.config.language.interpreter(),
            runner = shell_quote(&prepared.runner),
            check = crate::remote::check_script_sh(&prepared.runner, &token),
        );
        let options = ExecOptions {
            stdin: Some(request.to_string().into_bytes()),
            timeout: Some(budget + EXEC_GRACE),
            max_output: self.config.output_cap.saturating_mul(2) + (1 << 20),
        };
        let started = Instant::now();
        let exec = self.transport.exec(&script, options);
        tokio::pin!(exec);
        let mut poll = tokio::time::interval(CALL_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut aborted = false;
        let mut replies: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        let outcome = loop {
            tokio::select! {
                out = &mut exec => break out,
                _ = abort.cancelled(), if !aborted => {
                    aborted = true;
                    self.stop(&run_dir).await;
                }
                _ = poll.tick(), if !bindings.is_empty() && !aborted => {
                    if let Some(tx) = &calls {
                        self.collect_calls(&run_dir, tx, &mut replies).await;
                    }
                }
            }
        };
        for r in replies {
            r.abort();
        }
        let elapsed = started.elapsed();
        if aborted {
            return Ok(CodeRunResult::failure(
                "abort",
                "the run was aborted by the host; the process was stopped",
            ));
        }
        let out = match outcome {
            Ok(out) => {
                let what = format!("the code runtime's runner {}", prepared.runner);
                if let Some(e) =
                    crate::remote::script_refusal(&*self.transport, &out, &token, &what)
                {
                    return Err(e);
                }
                out
            }
            Err(e) if e.code == ErrorCode::Timeout => {
                self.stop(&run_dir).await;
                return Ok(CodeRunResult::failure(
                    "timeout",
                    format!(
                        "the run exceeded its time budget of {secs} s (the machine did not answer \
                         in time; the process was stopped)"
                    ),
                ));
            }
            Err(e) => {
                // The link dropped (or the exec failed): make sure the process does not run on.
                self.stop(&run_dir).await;
                return Ok(CodeRunResult::failure(
                    "worker-exit",
                    format!(
                        "the process on the machine ended without settling: {}",
                        e.message
                    ),
                ));
            }
        };
        let stdout = out.stdout.as_slice();
        if let Some(at) = find_last(stdout, nonce.as_bytes()) {
            let rest = &stdout[at + nonce.len()..];
            let line = rest.split(|b| *b == b'\n').next().unwrap_or(rest);
            if let Ok(text) = std::str::from_utf8(line)
                && let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text)
            {
                let error_kind = obj
                    .get("error")
                    .and_then(|e| e.get("kind"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                return Ok(CodeRunResult {
                    json: text.to_string(),
                    error_kind,
                });
            }
        }
        let timed_out = elapsed >= budget
            && matches!(
                &out.status,
                ExitStatus::Code(TIMEOUT_STATUS) | ExitStatus::Code(137) | ExitStatus::Signal(_)
            );
        if timed_out {
            return Ok(CodeRunResult::failure(
                "timeout",
                format!(
                    "the run exceeded its time budget of {secs} s (the runtime's configured \
                     time budget); the process was stopped"
                ),
            ));
        }
        if out.stdout_truncated {
            return Ok(CodeRunResult::failure(
                "output-limit",
                format!(
                    "the program wrote more than {} bytes straight to its stdout, past the output \
                     cap of {} bytes",
                    out.stdout.len(),
                    self.config.output_cap
                ),
            ));
        }
        let status = match &out.status {
            ExitStatus::Code(90) => "its run directory could not be created".to_string(),
            ExitStatus::Code(91) => "the working directory could not be entered".to_string(),
            ExitStatus::Code(c) => format!("exit status {c}"),
            ExitStatus::Signal(s) => format!("signal {s}"),
        };
        let stderr = crate::util::printable_excerpt(&out.stderr, 2000);
        Ok(CodeRunResult::failure(
            "worker-exit",
            format!(
                "the {} process ended without settling the run ({status}){}",
                self.config.language.interpreter(),
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!("; stderr: {}", stderr.trim())
                }
            ),
        ))
    }

    /// Stop a run's process (and its process group) on the machine; best effort.
    async fn stop(&self, run_dir: &str) {
        let script = format!(
            "d={dir}\ni=0\nwhile [ ! -s \"$d/pid\" ] && [ $i -lt 50 ]; do\n  [ -d \"$d\" ] || [ $i -lt 10 ] || exit 0\n  sleep 0.1; i=$((i+1))\ndone\n\
             p=$(cat \"$d/pid\" 2>/dev/null) || exit 0\n[ -n \"$p\" ] || exit 0\n\
             kill -TERM \"$p\" 2>/dev/null\n\
             i=0\nwhile kill -0 \"$p\" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done\n\
             kill -s KILL -- \"-$p\" 2>/dev/null || kill -s KILL \"-$p\" 2>/dev/null; kill -KILL \"$p\" 2>/dev/null\nexit 0\n",
            dir = shell_quote(run_dir),
        );
        let options = ExecOptions {
            timeout: Some(Duration::from_secs(20)),
            ..ExecOptions::default()
        };
        let _ = self.transport.exec(&script, options).await;
    }

    /// Pick up the `<id>.call` files the runner wrote, hand them to the host, and answer each
    /// with a `<id>.reply` file when the host settles it.
    async fn collect_calls(
        &self,
        run_dir: &str,
        tx: &mpsc::UnboundedSender<CodeCall>,
        replies: &mut Vec<tokio::task::JoinHandle<()>>,
    ) {
        let Ok(entries) = self.transport.read_dir(run_dir).await else {
            return;
        };
        for entry in entries {
            let Some(id) = entry.name.strip_suffix(".call") else {
                continue;
            };
            let path = format!("{run_dir}/{}", entry.name);
            let Ok(data) = self.transport.read_file_range(&path, 0, 256 << 20).await else {
                continue;
            };
            let _ = self.transport.remove_file(&path).await;
            let Some(call) = parse_call(&data) else {
                continue;
            };
            let (reply_tx, reply_rx) = oneshot::channel();
            let call = CodeCall {
                call_id: id.to_string(),
                global: call.0,
                function: call.1,
                args: call.2,
                reply: reply_tx,
            };
            if tx.send(call).is_err() {
                continue;
            }
            let transport = self.transport.clone();
            let reply_path = format!("{run_dir}/{id}.reply");
            replies.push(tokio::spawn(async move {
                let body = match reply_rx.await {
                    Ok(Ok(value)) => format!("{{\"ok\":true,\"value\":{value}}}"),
                    Ok(Err(message)) => json!({"ok": false, "message": message}).to_string(),
                    Err(_) => {
                        json!({"ok": false, "message": "the host dropped this call"}).to_string()
                    }
                };
                let _ = transport
                    .write_file(&reply_path, body.as_bytes(), 0o600)
                    .await;
            }));
        }
    }
}

/// `(global, function, args text)` from a call file; args stay JSON text.
fn parse_call(data: &[u8]) -> Option<(String, String, String)> {
    let text = std::str::from_utf8(data).ok()?;
    let value: Value = serde_json::from_str(text).ok()?;
    let global = value.get("global")?.as_str()?.to_string();
    let function = value.get("function")?.as_str()?.to_string();
    // The runner writes `"args":` last: keep its text as is (lossless).
    let at = text.rfind(",\"args\":")?;
    let args = text[at + 8..text.len() - 1].to_string();
    Some((global, function, args))
}

fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    (0..=hay.len() - needle.len())
        .rev()
        .find(|&i| &hay[i..i + needle.len()] == needle)
}

/// The value of the top-level `"key"` member of a JSON object text, as its exact source text
/// (so numbers keep every digit and `-0` its sign). `None` when absent or not an object.
pub fn raw_member<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let bytes = text.as_bytes();
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(bytes, i);
        match bytes.get(i)? {
            b'}' => return None,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = skip_value(bytes, i)?;
        let name: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_ws(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(bytes, i + 1);
        let end = skip_value(bytes, start)?;
        if name == key {
            return Some(&text[start..end]);
        }
        i = end;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// End of the JSON value starting at `i` (structure only; validity is checked elsewhere).
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => {
            let mut j = i + 1;
            loop {
                match b.get(j)? {
                    b'\\' => j += 2,
                    b'"' => return Some(j + 1),
                    _ => j += 1,
                }
            }
        }
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = skip_value(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(c) = b.get(j) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::raw_member;

    #[test]
    fn raw_member_keeps_source_text() {
        let t = r#"{"type":"resolve","value":{"a":[1,-0,123456789012345678901234567890,"x\"}"]},"z":1}"#;
        assert_eq!(
            raw_member(t, "value"),
            Some(r#"{"a":[1,-0,123456789012345678901234567890,"x\"}"]}"#)
        );
        assert_eq!(raw_member(t, "z"), Some("1"));
        assert_eq!(raw_member(t, "missing"), None);
    }
}

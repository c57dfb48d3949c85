//! `code run` and `code serve` (issues 17 and 29) through the CLI binary, on `local` and over
//! the real sshd, in both languages: values and logs, lossless round trips of tricky values, the
//! six failure kinds, bindings with typed rejections, abort of a tight loop, dispose with runs
//! in flight, no process left behind in the run's directory; the run's sealed channel (forged
//! calls and results, another run's calls), its whole process tree ending with it, lossless
//! edges (lone surrogates, depth, huge ints, -0), `serve`'s edges, caps and binding speed.

mod common;
mod session_bed;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use session_bed::{Bed, DEADLINE, eventually};

/// `code run --json` of `program` (on stdin); returns (exit code, stdout text, parsed result).
fn run(bed: &Bed, language: &str, program: &str, extra: &[&str]) -> (i32, String, Value) {
    let work = bed.work_str();
    let mut args = vec![
        "code",
        "run",
        "--machine",
        &bed.machine,
        "--language",
        language,
        "--cwd",
        &work,
        "--json",
    ];
    args.extend_from_slice(extra);
    let r = common::run_command(bed.command(&args), Some(program));
    let v: Value = serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON result ({e}): {r:?}"));
    assert!(v["logs"].is_array(), "{v}");
    (r.code, r.stdout, v)
}

fn expect_kind(bed: &Bed, language: &str, program: &str, extra: &[&str], kind: &str) -> String {
    let (code, _, v) = run(bed, language, program, extra);
    assert_eq!(v["error"]["kind"], kind, "{language}: {program}: {v}");
    assert!(v.get("value").is_none(), "{v}");
    assert_eq!(code, 1, "{v}");
    v["error"]["message"].as_str().unwrap().to_string()
}

/// Pids of processes whose cwd is the bed's work directory (the runs' cwd).
fn processes_in(bed: &Bed) -> Vec<String> {
    let work = std::fs::canonicalize(&bed.work).unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
            && cwd == work
        {
            found.push(name);
        }
    }
    found
}

/// The command lines of every process on this host.
fn command_lines() -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(entry.path().join("cmdline")) {
            found.push(String::from_utf8_lossy(&c).replace('\0', " "));
        }
    }
    found
}

fn no_process_left(bed: &Bed) {
    eventually("no process left in the run directory", || {
        processes_in(bed).is_empty().then_some(())
    });
}

fn values_and_logs(bed: &Bed) {
    let js = r#"
        console.log("hello", 1 + 1);
        await new Promise((r) => setTimeout(r, 10));
        console.error("line one\nline two");
        const o = JSON.parse('{"__proto__": {"x": 1}}');
        return {big: 9007199254740991, neg: -0, text: "héllo ✓ 😀", nested: {a: [1, [2, {b: null}]], t: true},
                proto: o, ["constructor"]: "c"};
    "#;
    let (code, text, v) = run(bed, "javascript", js, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["logs"], json!(["hello 2", "line one", "line two"]));
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["value"]["big"], json!(9007199254740991u64));
    assert!(text.contains("\"neg\":-0,"), "-0 keeps its sign: {text}");
    assert_eq!(v["value"]["text"], "héllo ✓ 😀");
    assert_eq!(
        v["value"]["nested"],
        json!({"a": [1, [2, {"b": null}]], "t": true})
    );
    assert_eq!(v["value"]["proto"], json!({"__proto__": {"x": 1}}));
    assert_eq!(v["value"]["constructor"], "c");

    let py = r#"
import asyncio
print("hello", 1 + 1)
await asyncio.sleep(0.01)
print("partial", end="")
return {"big": 123456789012345678901234567890, "neg": -0.0, "text": "héllo ✓ 😀",
        "nested": {"a": [1, [2, {"b": None}]], "t": True}, "__proto__": {"x": 1}}
"#;
    let (code, text, v) = run(bed, "python", py, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["logs"], json!(["hello 2", "partial"]));
    assert!(
        text.contains("\"big\":123456789012345678901234567890"),
        "every digit kept: {text}"
    );
    assert!(text.contains("\"neg\":-0.0"), "{text}");
    assert_eq!(v["value"]["text"], "héllo ✓ 😀");
    assert_eq!(v["value"]["__proto__"], json!({"x": 1}));

    // No return: no value. Each run is a fresh process: nothing carries over.
    let (_, _, v) = run(
        bed,
        "javascript",
        "globalThis.leak = 1; console.log('x')",
        &[],
    );
    assert!(v.get("value").is_none(), "{v}");
    let (_, _, v) = run(bed, "javascript", "return typeof globalThis.leak", &[]);
    assert_eq!(v["value"], "undefined");
    let (_, _, v) = run(bed, "python", "return None", &[]);
    assert_eq!(v["value"], Value::Null, "an explicit None is null: {v}");
    let (_, _, v) = run(bed, "python", "x = 1", &[]);
    assert!(v.get("value").is_none(), "{v}");

    // What a program starts does not outlive its run.
    let (_, _, v) = run(
        bed,
        "python",
        "import subprocess\nsubprocess.Popen(['sleep', '300'])\nreturn 1",
        &[],
    );
    assert_eq!(v["value"], 1, "{v}");
    no_process_left(bed);
}
both_machines!(code_values_and_logs, values_and_logs);

fn failure_kinds(bed: &Bed) {
    // exception: thrown, and a syntax error.
    let m = expect_kind(
        bed,
        "javascript",
        "throw new TypeError('boom')",
        &[],
        "exception",
    );
    assert!(m.contains("boom"), "{m}");
    expect_kind(bed, "javascript", "return (", &[], "exception");
    let m = expect_kind(bed, "python", "raise ValueError('boom')", &[], "exception");
    assert!(m.contains("boom"), "{m}");
    expect_kind(bed, "python", "return (", &[], "exception");

    // invalid-output: refused, never coerced.
    for (program, word) in [
        ("return NaN", "NaN"),
        ("return [1, Infinity]", "Infinity"),
        ("return [1, undefined]", "undefined"),
        ("return 10n", "BigInt"),
        ("return {f() {}}", "function"),
        ("const a = {}; a.self = a; return a", "cycle"),
        ("return new Map()", "Map"),
    ] {
        let m = expect_kind(bed, "javascript", program, &[], "invalid-output");
        assert!(m.contains(word), "{program}: {m}");
    }
    for (program, word) in [
        ("return float('nan')", "nan"),
        ("return {1: 2}", "key"),
        ("return {1, 2}", "set"),
        ("a = []\na.append(a)\nreturn a", "cycle"),
    ] {
        let m = expect_kind(bed, "python", program, &[], "invalid-output");
        assert!(m.contains(word), "{program}: {m}");
    }

    // output-limit: an explicit failure, never a truncated value.
    let cap = ["--output-cap", "200"];
    expect_kind(
        bed,
        "javascript",
        "return 'x'.repeat(500)",
        &cap,
        "output-limit",
    );
    expect_kind(
        bed,
        "javascript",
        "for (let i = 0; i < 100; i++) console.log('line', i); return 1",
        &cap,
        "output-limit",
    );
    expect_kind(bed, "python", "return 'x' * 500", &cap, "output-limit");

    // worker-exit: the process died without settling.
    expect_kind(bed, "javascript", "process.exit(3)", &[], "worker-exit");
    expect_kind(
        bed,
        "python",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        &[],
        "worker-exit",
    );

    // timeout: the budget, even in a tight loop; the process does not stay behind.
    let budget = ["--time-budget", "2"];
    let m = expect_kind(bed, "javascript", "for (;;) {}", &budget, "timeout");
    assert!(m.contains("time budget"), "{m}");
    expect_kind(bed, "python", "while True:\n    pass", &budget, "timeout");
    no_process_left(bed);
}
both_machines!(code_failure_kinds, failure_kinds);

/// A `code serve` child with a line reader.
struct Serve {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Serve {
    fn start(bed: &Bed, language: &str, extra: &[&str]) -> Serve {
        let work = bed.work_str();
        let mut args = vec![
            "code",
            "serve",
            "--machine",
            &bed.machine,
            "--language",
            language,
            "--cwd",
            &work,
        ];
        args.extend_from_slice(extra);
        let mut cmd = bed.command(&args);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Serve {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, v: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    fn next(&self) -> Value {
        let line = self.next_raw();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// The next line as text (lone surrogates are JSON escapes no `Value` holds).
    fn next_raw(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("a line from code serve")
    }

    fn send_raw(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Start `run`'s calls of `tools.*` and answer each with `answer(function, args)` until
    /// its result: (the calls seen, the result line as text).
    fn drive(
        &mut self,
        run: Value,
        mut answer: impl FnMut(&str, &Value) -> Value,
    ) -> (Vec<Value>, String) {
        let run_id = run["runId"].as_str().unwrap().to_string();
        self.send(run);
        let mut calls = Vec::new();
        loop {
            let line = self.next_raw();
            let Ok(m) = serde_json::from_str::<Value>(&line) else {
                return (calls, line);
            };
            match m["type"].as_str().unwrap() {
                "call" => {
                    assert_eq!(m["runId"], run_id.as_str(), "{m}");
                    let reply = answer(m["function"].as_str().unwrap(), &m["args"]);
                    let mut reply = reply;
                    reply["runId"] = json!(run_id);
                    reply["callId"] = m["callId"].clone();
                    calls.push(m);
                    self.send(reply);
                }
                "result" => return (calls, line),
                other => panic!("unexpected {other}: {m}"),
            }
        }
    }

    fn close(&mut self) {
        self.stdin = None;
    }

    fn wait(&mut self) -> i32 {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(start.elapsed() < DEADLINE, "code serve did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_bindings(bed: &Bed, language: &str, program: &str) {
    let mut s = Serve::start(bed, language, &[]);
    assert_eq!(
        s.next(),
        json!({"type": "hello", "language": language, "isolation": "process", "sandbox": "sealed"})
    );
    s.send(
        json!({"type": "run", "runId": "r1", "program": program, "bindings": [
        {"global": "tools", "functions": ["echo", "__proto__", "fail"],
         "errorClass": {"name": "ToolError", "memberNameProperty": "tool"}}]}),
    );
    let mut calls = 0;
    let result = loop {
        let m = s.next();
        match m["type"].as_str().unwrap() {
            "call" => {
                calls += 1;
                assert_eq!(m["runId"], "r1");
                assert_eq!(m["global"], "tools");
                match m["function"].as_str().unwrap() {
                    "echo" | "__proto__" => s.send(json!({"type": "resolve", "runId": "r1",
                        "callId": m["callId"], "value": {"got": m["args"], "n": -1}})),
                    "fail" => s.send(json!({"type": "reject", "runId": "r1",
                        "callId": m["callId"], "message": "no such thing"})),
                    other => panic!("unexpected call {other}"),
                }
            }
            "result" => break m,
            other => panic!("unexpected {other}: {m}"),
        }
    };
    assert_eq!(calls, 3, "{result}");
    let r = &result["result"];
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(
        r["value"],
        json!({
            "echo": {"got": {"q": [1, "ü"]}, "n": -1},
            "proto": {"got": 7, "n": -1},
            "failed": ["ToolError", "fail", "no such thing", true]
        }),
        "{r}"
    );
    s.close();
    assert_eq!(s.wait(), 0);
}

fn serve_bindings_both(bed: &Bed) {
    serve_bindings(
        bed,
        "javascript",
        r#"
        const echo = await tools.echo({q: [1, "ü"]});
        const proto = await tools["__proto__"](7);
        let failed;
        try { await tools.echo([1, NaN]); throw new Error("a lossy argument was sent"); } catch (e) {
            if (!(e instanceof TypeError) || !e.message.includes("NaN")) throw e;
        }
        try { await tools.fail({}); } catch (e) {
            failed = [e.name, e.tool, e.message, e instanceof ToolError];
        }
        return {echo, proto, failed};
        "#,
    );
    serve_bindings(
        bed,
        "python",
        r#"
echo = await tools.echo({"q": [1, "ü"]})
proto = await getattr(tools, "__proto__")(7)
try:
    await tools.fail({})
except ToolError as e:
    failed = [type(e).__name__, e.tool, str(e), isinstance(e, ToolError)]
return {"echo": echo, "proto": proto, "failed": failed}
"#,
    );
}
both_machines!(code_serve_bindings, serve_bindings_both);

fn serve_abort_and_dispose(bed: &Bed) {
    for (language, tight, quick) in [
        (
            "javascript",
            "for (;;) {}",
            "await new Promise((r) => setTimeout(r, 100000)); return 'done'",
        ),
        (
            "python",
            "while True:\n    pass",
            "import asyncio\nawait asyncio.sleep(100)\nreturn 'done'",
        ),
    ] {
        let mut s = Serve::start(bed, language, &["--time-budget", "120"]);
        assert_eq!(s.next()["type"], "hello");
        s.send(json!({"type": "run", "runId": "loop", "program": tight, "bindings": []}));
        s.send(json!({"type": "run", "runId": "slow", "program": quick, "bindings": []}));
        // Abort the tight loop once it runs.
        eventually("the tight loop runs", || {
            (!processes_in(bed).is_empty()).then_some(())
        });
        s.send(json!({"type": "abort", "runId": "loop"}));
        let m = s.next();
        assert_eq!(m["runId"], "loop", "{m}");
        assert_eq!(m["result"]["error"]["kind"], "abort", "{m}");
        // EOF while "slow" is still in flight: dispose aborts it (promptly), writes its result.
        let closed = Instant::now();
        s.close();
        let m = s.next();
        assert_eq!(m["runId"], "slow", "{m}");
        assert_eq!(m["result"]["error"]["kind"], "abort", "{m}");
        assert!(
            closed.elapsed() < Duration::from_secs(15),
            "{:?}",
            closed.elapsed()
        );
        assert_eq!(s.wait(), 0);
        no_process_left(bed);
    }
}
both_machines!(code_serve_abort_and_dispose, serve_abort_and_dispose);

#[test]
fn code_unknown_language_is_a_usage_error() {
    let bed = Bed::local();
    let r = bed.run(&[
        "code",
        "run",
        "--machine",
        "local",
        "--language",
        "cobol",
        "--json",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(r.error()["code"], "invalid_argument");
    // TypeScript is known but not offered yet: a typed refusal, not a usage error.
    let r = bed.run(&[
        "code",
        "run",
        "--machine",
        "local",
        "--language",
        "typescript",
        "--json",
    ]);
    assert_eq!(r.code, 9, "{r:?}");
    assert_eq!(r.error()["code"], "language_unavailable");
}

fn runs_in_a_sessions_cwd(bed: &Bed) {
    let session = bed.session();
    let r = common::run_command(
        bed.command(&[
            "code",
            "run",
            "--session",
            &session,
            "--language",
            "python",
            "--json",
        ]),
        Some("import os\nreturn os.getcwd()"),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let cwd = std::path::PathBuf::from(v["value"].as_str().unwrap());
    assert_eq!(
        std::fs::canonicalize(cwd).unwrap(),
        std::fs::canonicalize(&bed.work).unwrap()
    );
    let r = bed.run(&["session", "destroy", "--session", &session, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
}
both_machines!(code_runs_in_a_sessions_cwd, runs_in_a_sessions_cwd);

/// stdin EOF with calls in flight: every run is aborted (its calls can no longer be settled),
/// serve writes their results and exits. Each program catches a rejection of its call and would
/// settle with it: the result is `abort` all the same, whatever the timing (dispose aborts the
/// runs and leaves their calls unsettled; it used to reject them too, and a program that caught
/// the rejection could settle before its abort was seen).
fn dispose_rejects_unsettled_calls(bed: &Bed) {
    const RUNS: usize = 4;
    for (language, program) in [
        (
            "javascript",
            "try { await tools.wait(1); return 'settled'; } catch (e) { return e.message; }",
        ),
        (
            "python",
            "try:\n    await tools.wait(1)\n    return 'settled'\nexcept Exception as e:\n    return str(e)",
        ),
    ] {
        let mut s = Serve::start(bed, language, &[]);
        assert_eq!(s.next()["type"], "hello");
        for n in 0..RUNS {
            s.send(
                json!({"type": "run", "runId": format!("r{n}"), "program": program,
                "bindings": [{"global": "tools", "functions": ["wait"]}]}),
            );
        }
        for _ in 0..RUNS {
            let call = s.next();
            assert_eq!(call["type"], "call", "{language}: {call}");
        }
        s.close();
        let mut ended = Vec::new();
        for _ in 0..RUNS {
            let result = s.next();
            assert_eq!(result["type"], "result", "{language}: {result}");
            assert_eq!(
                result["result"]["error"]["kind"], "abort",
                "{language}: {result}"
            );
            ended.push(result["runId"].as_str().unwrap().to_string());
        }
        ended.sort();
        assert_eq!(
            ended,
            (0..RUNS).map(|n| format!("r{n}")).collect::<Vec<_>>()
        );
        assert_eq!(s.wait(), 0);
        no_process_left(bed);
    }
}
both_machines!(
    code_dispose_rejects_unsettled_calls,
    dispose_rejects_unsettled_calls
);

// ------------------------------------------------------------------ issue 29: the sealed channel

const TOOLS: &str = r#"[{"global": "tools", "functions": ["f"]}]"#;

fn tools() -> Value {
    serde_json::from_str(TOOLS).unwrap()
}

/// A program that writes `line` on the runner's own channel (found as the descriptor open on
/// what its parent's fd 3 is: the wrapper hands the channel down as fd 3), then calls
/// `tools.f(1)` and returns what it got.
fn forging(language: &str, line: &str) -> String {
    match language {
        "javascript" => format!(
            "const fs = require('fs'); \
             const chan = fs.readlinkSync('/proc/' + process.ppid + '/fd/3'); let n = 0; \
             for (const f of fs.readdirSync('/proc/self/fd')) {{ \
               let l; try {{ l = fs.readlinkSync('/proc/self/fd/' + f); }} catch (e) {{ continue; }} \
               if (l !== chan) continue; \
               try {{ fs.writeSync(+f, {line:?} + '\\n'); n++; }} catch (e) {{}} }} \
             if (!n) throw new Error('the channel was not found'); \
             return await tools.f(1);",
            line = line
        ),
        _ => format!(
            "import os\nchan = os.readlink('/proc/%d/fd/3' % os.getppid())\nn = 0\n\
             for f in os.listdir('/proc/self/fd'):\n    try:\n        \
             if os.readlink('/proc/self/fd/' + f) != chan:\n            continue\n        \
             os.write(int(f), ({line:?} + '\\n').encode())\n        n += 1\n    \
             except OSError:\n        pass\nassert n, 'the channel was not found'\n\
             return await tools.f(1)\n",
            line = line
        ),
    }
}

/// A program that writes a call outside its bindings on its channel: the host never forwards
/// it; a forged result of another shape ends the run as `invalid-output`.
fn forged_messages_are_refused(bed: &Bed) {
    for language in ["javascript", "python"] {
        let mut s = Serve::start(bed, language, &[]);
        assert_eq!(s.next()["type"], "hello");
        let forged = r#"{"t":"call","id":7777,"global":"evil","function":"rm","args":["-rf","/"]}"#;
        let (calls, result) = s.drive(
            json!({"type": "run", "runId": "a", "bindings": tools(), "program": forging(language, forged)}),
            |_, args| json!({"type": "resolve", "value": {"got": args}}),
        );
        assert_eq!(calls.len(), 1, "{language}: {calls:?}");
        assert_eq!(calls[0]["global"], "tools", "{calls:?}");
        let r: Value = serde_json::from_str(&result).unwrap();
        assert_eq!(r["result"]["value"], json!({"got": 1}), "{language}: {r}");

        for forged in [
            r#"{"t":"result","result":{"logs":[],"error":{"kind":"pwned","message":"x"}}}"#,
            r#"{"t":"result","result":{"logs":[1,2],"value":1}}"#,
            r#"not json at all"#,
        ] {
            let (_, result) = s.drive(
                json!({"type": "run", "runId": "b", "bindings": tools(), "program": forging(language, forged)}),
                |_, _| json!({"type": "resolve", "value": 1}),
            );
            let r: Value = serde_json::from_str(&result).unwrap();
            assert_eq!(
                r["result"]["error"]["kind"], "invalid-output",
                "{language}: {forged}: {r}"
            );
        }
        s.close();
        assert_eq!(s.wait(), 0);
    }
    no_process_left(bed);
}
both_machines!(
    code_forged_messages_are_refused,
    forged_messages_are_refused
);

/// A result the program forges on its channel cannot claim a kind only the host reports
/// (`timeout`, `abort`, `worker-exit`), nor pass the output cap by claiming `output-limit`.
fn forged_claims_are_refused(bed: &Bed) {
    for language in ["javascript", "python"] {
        let mut s = Serve::start(bed, language, &["--output-cap", "2000"]);
        assert_eq!(s.next()["type"], "hello");
        for kind in ["abort", "timeout", "worker-exit"] {
            let forged = format!(
                r#"{{"t":"result","result":{{"logs":[],"error":{{"kind":"{kind}","message":"m"}}}}}}"#
            );
            let (_, result) = s.drive(
                json!({"type": "run", "runId": "c", "bindings": tools(), "program": forging(language, &forged)}),
                |_, _| json!({"type": "resolve", "value": 1}),
            );
            let r: Value = serde_json::from_str(&result).unwrap();
            assert_eq!(
                r["result"]["error"]["kind"], "invalid-output",
                "{language}: {forged}: {r}"
            );
        }
        let big = "y".repeat(5000);
        let forged = format!(
            r#"{{"t":"result","result":{{"logs":["{big}"],"error":{{"kind":"output-limit","message":"m"}}}}}}"#
        );
        let (_, result) = s.drive(
            json!({"type": "run", "runId": "d", "bindings": tools(), "program": forging(language, &forged)}),
            |_, _| json!({"type": "resolve", "value": 1}),
        );
        assert!(
            result.len() < 4000,
            "{language}: the cap was passed: {} bytes",
            result.len()
        );
        let r: Value = serde_json::from_str(&result).unwrap();
        assert_eq!(r["result"]["error"]["kind"], "output-limit", "{r}");
        s.close();
        assert_eq!(s.wait(), 0);
    }
    no_process_left(bed);
}
both_machines!(code_forged_claims_are_refused, forged_claims_are_refused);

/// Printing without newlines far past the cap ends as `output-limit` at once, with the logs
/// that fit, never as a `timeout` spent re-splitting the open line.
fn unended_output_is_an_output_limit(bed: &Bed) {
    for (language, program) in [
        (
            "javascript",
            "console.log('first'); const s = 'x'.repeat(1024); \
             for (let i = 0; i < 51200; i++) process.stdout.write(s); return 1",
        ),
        (
            "python",
            "import sys\nprint('first')\ns = 'x' * 1024\n\
             for i in range(51200):\n    sys.stdout.write(s)\nreturn 1\n",
        ),
    ] {
        let started = Instant::now();
        let (code, _, v) = run(bed, language, program, &["--time-budget", "20"]);
        assert_eq!(v["error"]["kind"], "output-limit", "{language}: {v}");
        assert_eq!(v["logs"], json!(["first"]), "{language}: {v}");
        assert_eq!(code, 1, "{v}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{language}: {:?}",
            started.elapsed()
        );
    }
}
both_machines!(
    code_unended_output_is_an_output_limit,
    unended_output_is_an_output_limit
);

/// A binding resolved with a number the program's language cannot hold exactly (an integer
/// past 2^53 in JavaScript, a number past a double's range in either) is a rejection of that
/// call naming where, never a rounded number or an infinity; what it can hold arrives exact.
fn resolutions_keep_every_number(bed: &Bed) {
    for language in ["javascript", "python"] {
        let program = match language {
            "javascript" => {
                "try { return ['ok', await tools.f(1)]; } catch (e) { return ['refused', e.message]; }"
            }
            _ => {
                "try:\n    return ['ok', await tools.f(1)]\nexcept Exception as e:\n    return ['refused', str(e)]\n"
            }
        };
        let mut s = Serve::start(bed, language, &[]);
        assert_eq!(s.next()["type"], "hello");
        for (raw, refused) in [
            (r#"[9007199254740993]"#, language == "javascript"),
            (r#"{"a":[1e400]}"#, true),
            (r#"[0.5,9007199254740992,-12345]"#, false),
            (r#"[-0]"#, false),
        ] {
            s.send(json!({"type": "run", "runId": "n", "bindings": tools(), "program": program}));
            let call = s.next();
            assert_eq!(call["type"], "call", "{call}");
            s.send_raw(
                format!(
                    r#"{{"type":"resolve","runId":"n","callId":{},"value":{raw}}}"#,
                    call["callId"]
                )
                .as_bytes(),
            );
            let line = s.next_raw();
            let r: Value = serde_json::from_str(&line).unwrap();
            let value = &r["result"]["value"];
            if refused {
                assert_eq!(value[0], "refused", "{language}: {raw}: {line}");
                assert!(value[1].as_str().unwrap().contains("cannot"), "{line}");
            } else {
                assert_eq!(value[0], "ok", "{language}: {raw}: {line}");
                if raw == "[-0]" {
                    // The sign of zero: `-0` in JavaScript, `-0.0` in Python.
                    assert!(line.contains(r#"["ok",[-0"#), "{language}: {line}");
                } else {
                    let sent: Value = serde_json::from_str(raw).unwrap();
                    assert_eq!(value[1], sent, "{language}: {line}");
                }
            }
        }
        s.close();
        assert_eq!(s.wait(), 0);
    }
}
both_machines!(
    code_resolutions_keep_every_number,
    resolutions_keep_every_number
);

/// The member name of a typed rejection is an own property whatever its name (`__proto__` in
/// JavaScript); in Python a name the exception keeps for itself is the caller's error up front,
/// never a `TypeError` or a silently different value inside the program.
fn member_name_property_is_data(bed: &Bed) {
    let mut s = Serve::start(bed, "javascript", &[]);
    assert_eq!(s.next()["type"], "hello");
    let bindings = json!([{"global": "tools", "functions": ["f"],
        "errorClass": {"name": "ToolError", "memberNameProperty": "__proto__"}}]);
    let (_, result) = s.drive(
        json!({"type": "run", "runId": "p", "bindings": bindings, "program":
            "try { await tools.f(1) } catch (e) { return [e instanceof ToolError, \
             Object.getOwnPropertyNames(e).includes('__proto__') ? e['__proto__'] : 'missing'] }"}),
        |_, _| json!({"type": "reject", "message": "nope"}),
    );
    let r: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(r["result"]["value"], json!([true, "f"]), "{r}");
    s.close();
    assert_eq!(s.wait(), 0);

    let mut s = Serve::start(bed, "python", &[]);
    assert_eq!(s.next()["type"], "hello");
    for prop in ["__class__", "__dict__", "args"] {
        let bindings = json!([{"global": "tools", "functions": ["f"],
            "errorClass": {"name": "ToolError", "memberNameProperty": prop}}]);
        s.send(json!({"type": "run", "runId": "q", "bindings": bindings, "program": "return 1"}));
        let m = s.next();
        assert_eq!(m["type"], "error", "{prop}: {m}");
        assert_eq!(m["code"], "invalid_argument", "{m}");
        assert!(m["message"].as_str().unwrap().contains(prop), "{m}");
    }
    s.close();
    assert_eq!(s.wait(), 0);
}
both_machines!(
    code_member_name_property_is_data,
    member_name_property_is_data
);

/// Run B writes settlements into every other run's channel it can reach; run A's call is still
/// settled only by the harness.
fn one_run_cannot_settle_another(bed: &Bed) {
    let mut s = Serve::start(bed, "javascript", &[]);
    assert_eq!(s.next()["type"], "hello");
    s.send(json!({"type": "run", "runId": "a", "bindings": tools(), "program": "return await tools.f('a')"}));
    let call = s.next();
    assert_eq!(call["type"], "call", "{call}");
    let intruder = r#"
        const fs = require('fs');
        let tried = 0;
        for (const p of fs.readdirSync('/proc')) {
            if (!/^\d+$/.test(p)) continue;
            let env = '';
            try { env = fs.readFileSync('/proc/' + p + '/environ', 'latin1'); } catch (e) { continue; }
            if (!env.includes('RR_CODE_RUN=') || env.includes('RR_CODE_RUN=' + process.env.RR_CODE_RUN)) continue;
            let fds = [];
            try { fds = fs.readdirSync('/proc/' + p + '/fd'); } catch (e) { continue; }
            for (const f of fds) {
                try {
                    const fd = fs.openSync('/proc/' + p + '/fd/' + f, 'w');
                    for (let id = 0; id < 4; id++) fs.writeSync(fd, JSON.stringify({t: 'resolve', id, value: 'forged'}) + '\n');
                    tried++;
                } catch (e) {}
            }
        }
        return tried;
    "#;
    s.send(json!({"type": "run", "runId": "b", "program": intruder, "bindings": []}));
    let b = s.next();
    assert_eq!(b["runId"], "b", "{b}");
    assert!(b["result"]["value"].is_number(), "{b}");
    s.send(json!({"type": "resolve", "runId": "a", "callId": call["callId"], "value": "legit"}));
    let a = s.next();
    assert_eq!(a["runId"], "a", "{a}");
    assert_eq!(a["result"]["value"], "legit", "{a}");
    s.close();
    assert_eq!(s.wait(), 0);
}
both_machines!(
    code_one_run_cannot_settle_another,
    one_run_cannot_settle_another
);

// ------------------------------------------------------------------ issue 29: the process tree

/// Children that leave the run's session (setsid / start_new_session), one of them holding the
/// run's stdout: the value still settles at once, and nothing of the run is left afterwards;
/// with a PID namespace and with the fallback (the environment marker sweep).
fn process_tree_ends_with_the_run(bed: &Bed) {
    for fallback in [false, true] {
        for (language, program) in [
            (
                "javascript",
                "const cp = require('child_process');\n\
                 cp.spawn('setsid', ['sleep', '300'], {detached: true, stdio: 'ignore'}).unref();\n\
                 cp.spawn('sh', ['-c', 'sleep 300'], {detached: true, stdio: 'inherit'}).unref();\n\
                 return 'settled'",
            ),
            (
                "python",
                "import subprocess\n\
                 subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=subprocess.DEVNULL)\n\
                 subprocess.Popen(['sh', '-c', 'sleep 300'], start_new_session=True, pass_fds=())\n\
                 return 'settled'",
            ),
        ] {
            let work = bed.work_str();
            let mut cmd = bed.command(&[
                "code",
                "run",
                "--machine",
                &bed.machine,
                "--language",
                language,
                "--cwd",
                &work,
                "--json",
                "--time-budget",
                "20",
            ]);
            if fallback {
                cmd.env("REMOTE_RUNNER_CODE_NO_PIDNS", "1")
                    .arg("--allow-weak-isolation");
            }
            let started = Instant::now();
            let r = common::run_command(cmd, Some(program));
            let v: Value =
                serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {r:?}"));
            assert_eq!(v["value"], "settled", "{language} fallback={fallback}: {v}");
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{:?}",
                started.elapsed()
            );
            no_process_left(bed);
        }
    }
}
both_machines!(
    code_process_tree_ends_with_the_run,
    process_tree_ends_with_the_run
);

/// Without the PID namespace, a child that clears its environment (so carries no run marker)
/// still ends with the run: one that stays in the run's session and process group, and one
/// that also leaves them (`setsid`), which only the run's RLIMIT_RTTIME mark catches.
fn fallback_takes_an_unmarked_child(bed: &Bed) {
    for (language, program) in [
        (
            "javascript",
            "require('child_process').spawn('env', ['-i', 'sleep', '300'], {stdio: 'ignore'}).unref();\n\
             return 'settled'",
        ),
        (
            "python",
            "import subprocess\n\
             subprocess.Popen(['env', '-i', 'sleep', '300'], stdout=subprocess.DEVNULL)\n\
             return 'settled'",
        ),
        (
            "javascript",
            "require('child_process').spawn('setsid', ['env', '-i', 'sleep', '300'], \
             {detached: true, stdio: 'ignore'}).unref();\n\
             return 'settled'",
        ),
        (
            "python",
            "import subprocess\n\
             subprocess.Popen(['env', '-i', 'sleep', '300'], start_new_session=True, \
             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
             return 'settled'",
        ),
    ] {
        let work = bed.work_str();
        let mut cmd = bed.command(&[
            "code",
            "run",
            "--machine",
            &bed.machine,
            "--language",
            language,
            "--cwd",
            &work,
            "--json",
        ]);
        cmd.env("REMOTE_RUNNER_CODE_NO_PIDNS", "1")
            .arg("--allow-weak-isolation");
        let r = common::run_command(cmd, Some(program));
        let v: Value =
            serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {r:?}"));
        assert_eq!(v["value"], "settled", "{language}: {v}");
        no_process_left(bed);
    }
}
both_machines!(
    code_fallback_takes_an_unmarked_child,
    fallback_takes_an_unmarked_child
);

/// A budget expiry takes the whole tree too, setsid children included.
fn timeout_takes_the_tree(bed: &Bed) {
    let m = expect_kind(
        bed,
        "javascript",
        "require('child_process').spawn('setsid', ['sleep', '300'], {detached: true, stdio: 'ignore'}).unref(); for (;;) {}",
        &["--time-budget", "2"],
        "timeout",
    );
    assert!(m.contains("time budget"), "{m}");
    no_process_left(bed);
}
both_machines!(code_timeout_takes_the_tree, timeout_takes_the_tree);

// ------------------------------------------------------------------ issue 29: lossless edges

fn lossless_edges(bed: &Bed) {
    // Lone surrogates in values and logs: carried as JSON escapes.
    for (language, program) in [
        (
            "javascript",
            "console.log('a\\ud800b'); process.stdout.write('x\\udfff\\n'); return ['\\ud800', {k: '\\udc00'}]",
        ),
        (
            "python",
            "print('a\\ud800b')\nimport sys\nsys.stdout.write('x\\udfff\\n')\nreturn ['\\ud800', {'k': '\\udc00'}]",
        ),
    ] {
        let (code, text, _) = run_text(bed, language, program, &[]);
        assert_eq!(code, 0, "{language}: {text}");
        assert_eq!(
            text.trim(),
            r#"{"logs":["a\ud800b","x\udfff"],"value":["\ud800",{"k":"\udc00"}],"sandbox":"sealed"}"#,
            "{language}"
        );
    }
    // Stream output is logs, in order with console output.
    let (_, _, v) = run(
        bed,
        "javascript",
        "process.stdout.write('a'); console.log('b'); process.stderr.write('c\\nd'); return 1",
        &[],
    );
    assert_eq!(v["logs"], json!(["ab", "c", "d"]), "{v}");
    let (_, _, v) = run(
        bed,
        "python",
        "import sys\nsys.stdout.write('a')\nprint('b')\nsys.stderr.write('c\\nd')\nsys.stdout.buffer.write(b'e')\nreturn 1",
        &[],
    );
    assert_eq!(v["logs"], json!(["ab", "c", "de"]), "{v}");
    // Depth: 500 levels cross, 600 are refused with the path, never worker-exit.
    for (language, build) in [
        (
            "javascript",
            "let v = 1; for (let i = 0; i < N; i++) v = [v]; return v",
        ),
        ("python", "v = 1\nfor i in range(N):\n    v = [v]\nreturn v"),
    ] {
        let (code, text, _) = run_text(bed, language, &build.replace('N', "500"), &[]);
        assert_eq!(code, 0, "{language}: {text}");
        assert!(
            text.starts_with(&format!("{{\"logs\":[],\"value\":{}1", "[".repeat(500))),
            "{language}"
        );
        let m = expect_kind(
            bed,
            language,
            &build.replace('N', "600"),
            &[],
            "invalid-output",
        );
        assert!(
            m.contains("[0][0][0]") && m.contains("512"),
            "{language}: {m}"
        );
    }
    // Python integers of any size.
    let (code, text, _) = run_text(bed, "python", "return [10 ** 5000, -(10 ** 5000)]", &[]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!(",-1{}]", "0".repeat(5000))),
        "{}",
        &text[..200]
    );
    // A failure message over the output cap is output-limit.
    let cap = ["--output-cap", "200"];
    expect_kind(
        bed,
        "javascript",
        "throw new Error('x'.repeat(500))",
        &cap,
        "output-limit",
    );
    expect_kind(
        bed,
        "python",
        "raise ValueError('x' * 500)",
        &cap,
        "output-limit",
    );
}
both_machines!(code_lossless_edges, lossless_edges);

/// `code run --json` as text (for values no `Value` holds).
fn run_text(bed: &Bed, language: &str, program: &str, extra: &[&str]) -> (i32, String, ()) {
    let work = bed.work_str();
    let mut args = vec![
        "code",
        "run",
        "--machine",
        &bed.machine,
        "--language",
        language,
        "--cwd",
        &work,
        "--json",
    ];
    args.extend_from_slice(extra);
    let r = common::run_command(bed.command(&args), Some(program));
    (r.code, r.stdout, ())
}

/// Binding arguments and resolutions at the edges: -0 reaches JavaScript as -0; lone
/// surrogates cross both ways; too deep is refused with the path, both ways, never a hang.
fn binding_edges(bed: &Bed) {
    let deep_resolution = format!("{}1{}", "[".repeat(600), "]".repeat(600));
    for (language, program) in [
        (
            "javascript",
            r#"
            const z = await tools.f('zero');
            const s = await tools.f('\ud800');
            let deepArg, deepRes;
            let v = 1; for (let i = 0; i < 600; i++) v = [v];
            try { await tools.f(v); } catch (e) { deepArg = e.message; }
            try { await tools.f('deep'); } catch (e) { deepRes = e.message; }
            return [Object.is(z, -0), s === '\ud800x', deepArg, deepRes];
            "#,
        ),
        (
            "python",
            r#"
z = await tools.f('zero')
s = await tools.f('\ud800')
v = 1
for i in range(600):
    v = [v]
try:
    await tools.f(v)
except TypeError as e:
    deep_arg = str(e)
try:
    await tools.f('deep')
except Exception as e:
    deep_res = str(e)
return [z == 0, s == '\ud800x', deep_arg, deep_res]
"#,
        ),
    ] {
        let mut s = Serve::start(bed, language, &[]);
        assert_eq!(s.next()["type"], "hello");
        s.send(json!({"type": "run", "runId": "r", "bindings": tools(), "program": program}));
        let mut calls = 0;
        let result = loop {
            let line = s.next_raw();
            if line.contains(r#""type":"result""#) {
                break line;
            }
            calls += 1;
            let id =
                serde_json::from_str::<Value>(&line.replace(r"\ud800", "?")).unwrap()["callId"]
                    .clone();
            let reply = if line.contains(r#""args":"zero""#) {
                format!(r#"{{"type":"resolve","runId":"r","callId":{id},"value":-0}}"#)
            } else if line.contains(r#""args":"\ud800""#) {
                format!(r#"{{"type":"resolve","runId":"r","callId":{id},"value":"\ud800x"}}"#)
            } else if line.contains(r#""args":"deep""#) {
                format!(
                    r#"{{"type":"resolve","runId":"r","callId":{id},"value":{deep_resolution}}}"#
                )
            } else {
                panic!("{language}: unexpected call {line}");
            };
            s.send_raw(reply.as_bytes());
        };
        assert_eq!(calls, 3, "{language}: {result}");
        let r: Value = serde_json::from_str(&result).unwrap();
        let v = &r["result"]["value"];
        assert_eq!(v[0], true, "{language}: {r}");
        assert_eq!(v[1], true, "{language}: {r}");
        let deep_arg = v[2].as_str().unwrap_or_default();
        assert!(
            deep_arg.contains("[0][0]") && deep_arg.contains("512"),
            "{language}: {r}"
        );
        let deep_res = v[3].as_str().unwrap_or_default();
        assert!(
            deep_res.contains("[0][0]") && deep_res.contains("512"),
            "{language}: {r}"
        );
        s.close();
        assert_eq!(s.wait(), 0);
    }
}
both_machines!(code_binding_edges, binding_edges);

// ------------------------------------------------------------------ issue 29: serve's edges

fn serve_edges(bed: &Bed) {
    for language in ["javascript", "python"] {
        let mut s = Serve::start(bed, language, &[]);
        assert_eq!(s.next()["type"], "hello");
        // An invalid UTF-8 line: an error, and serving goes on.
        s.send_raw(b"{\"type\":\"run\",\"runId\":\"x\",\"program\":\"\xff\xfe\"}");
        let m = s.next();
        assert_eq!(m["type"], "error", "{m}");
        assert!(m["message"].as_str().unwrap().contains("UTF-8"), "{m}");
        // A run without a program is an error, not an empty program.
        s.send(json!({"type": "run", "runId": "x"}));
        let m = s.next();
        assert_eq!(
            (m["type"].as_str(), m["runId"].as_str()),
            (Some("error"), Some("x")),
            "{m}"
        );
        assert!(m["message"].as_str().unwrap().contains("program"), "{m}");
        // So is one without bindings (the seam's request always has them, maybe empty).
        s.send(json!({"type": "run", "runId": "x", "program": "return 1"}));
        let m = s.next();
        assert_eq!(m["type"], "error", "{m}");
        assert!(m["message"].as_str().unwrap().contains("bindings"), "{m}");
        // Invalid binding declarations are the caller's error, not worker-exit.
        for bindings in [
            json!([{"global": "1bad", "functions": ["f"]}]),
            json!([{"global": "t", "functions": ["f"]}, {"global": "t", "functions": ["g"]}]),
            json!([{"global": "t", "functions": ["f"], "errorClass": {"name": "E", "memberNameProperty": "message"}}]),
            json!([{"global": "t", "functions": "f"}]),
        ] {
            s.send(
                json!({"type": "run", "runId": "x", "program": "return 1", "bindings": bindings}),
            );
            let m = s.next();
            assert_eq!(m["type"], "error", "{bindings}: {m}");
        }
        // A finished runId may be used again at once.
        for round in 0..3 {
            s.send(json!({"type": "run", "runId": "again", "program": format!("return {round}"), "bindings": []}));
            let m = s.next();
            assert_eq!(m["type"], "result", "{m}");
            assert_eq!(m["result"]["value"], round, "{m}");
        }
        s.close();
        assert_eq!(s.wait(), 0);
    }
    // Out-of-range flags are errors, never clamped.
    for budget in ["0.5", "0", "100000", "nan"] {
        let r = bed.run(&[
            "code",
            "serve",
            "--machine",
            &bed.machine,
            "--language",
            "python",
            "--time-budget",
            budget,
            "--json",
        ]);
        assert_eq!(r.code, 2, "{budget}: {r:?}");
        assert_eq!(r.error()["code"], "invalid_argument", "{budget}: {r:?}");
    }
}
both_machines!(code_serve_edges, serve_edges);

/// `code run`'s human output neutralises terminal controls in the value, logs and errors.
fn human_output_is_neutralised(bed: &Bed) {
    let work = bed.work_str();
    let r = common::run_command(
        bed.command(&[
            "code",
            "run",
            "--machine",
            &bed.machine,
            "--language",
            "javascript",
            "--cwd",
            &work,
        ]),
        Some("console.log('\\u001b]0;x\\u0007log'); return '\\u009b31m\\u202eevil\\u001b[2J'"),
    );
    assert_eq!(r.code, 0, "{r:?}");
    for bad in ['\u{1b}', '\u{9b}', '\u{202e}', '\u{7}'] {
        assert!(!r.stdout.contains(bad), "{bad:?} in {:?}", r.stdout);
    }
    assert!(r.stdout.contains("evil"), "{r:?}");
    let r = common::run_command(
        bed.command(&[
            "code",
            "run",
            "--machine",
            &bed.machine,
            "--language",
            "python",
            "--cwd",
            &work,
        ]),
        Some("raise ValueError('\\u009b31m\\u202e')"),
    );
    assert_eq!(r.code, 1, "{r:?}");
    for bad in ['\u{9b}', '\u{202e}'] {
        assert!(
            !r.stdout.contains(bad) && !r.stderr.contains(bad),
            "{bad:?} in {r:?}"
        );
    }
}
both_machines!(
    code_human_output_is_neutralised,
    human_output_is_neutralised
);

/// 100 sequential binding calls in one run: each reaches the host in order, one at a time, and
/// its answer reaches the program. (How fast they are is the `code-binding` benchmark's
/// business, beside a bare pipe; a timed assertion here would only measure the test machine.)
fn bindings_in_sequence(bed: &Bed) {
    for (language, program) in [
        (
            "javascript",
            "let t = 0; for (let i = 0; i < 100; i++) t += await tools.f(i); return t",
        ),
        (
            "python",
            "t = 0\nfor i in range(100):\n    t += await tools.f(i)\nreturn t",
        ),
    ] {
        let mut s = Serve::start(bed, language, &[]);
        assert_eq!(s.next()["type"], "hello");
        s.send(json!({"type": "run", "runId": "r", "bindings": tools(), "program": program}));
        let mut calls = 0;
        let result = loop {
            let m = s.next();
            if m["type"] == "result" {
                break m;
            }
            assert_eq!(m["type"], "call", "{language}: {m}");
            assert_eq!(
                m["args"],
                json!(calls),
                "{language}: call {calls} out of order: {m}"
            );
            calls += 1;
            s.send(
                json!({"type": "resolve", "runId": "r", "callId": m["callId"], "value": m["args"]}),
            );
        };
        assert_eq!(calls, 100, "{language}");
        assert_eq!(result["result"]["value"], 4950, "{result}");
        s.close();
        assert_eq!(s.wait(), 0);
    }
}
both_machines!(code_bindings_in_sequence, bindings_in_sequence);

/// Caps the machine lets us set: a file size cap stops a write past it.
fn caps_hold(bed: &Bed) {
    let m = expect_kind(
        bed,
        "python",
        "with open('big.out', 'wb') as f:\n    f.write(b'x' * 100000)\nreturn 1",
        &["--max-file-size", "4096"],
        "exception",
    );
    assert!(m.contains("File too large") || m.contains("EFBIG"), "{m}");
    let size = std::fs::metadata(bed.work.join("big.out")).unwrap().len();
    assert!(size <= 4096, "{size}");
    let r = bed.run(&[
        "code",
        "run",
        "--machine",
        &bed.machine,
        "--language",
        "python",
        "--max-memory",
        "1000",
        "--json",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
}
both_machines!(code_caps_hold, caps_hold);

/// On a Slurm machine, `--session` runs go to the session's allocation (a step of its job on
/// its node), and the run's process tree ends with the run there too.
#[test]
fn code_runs_on_a_slurm_sessions_node_and_its_tree_ends() {
    let Some(bed) = Bed::slurm() else { return };
    let work = bed.work_str();
    let v = bed.json(&["session", "create", "--machine", "bed", "--cwd", &work]);
    let session = v["session_id"].as_str().unwrap().to_string();
    let job = v["slurm_job_id"].as_str().unwrap().to_string();
    for (language, program) in [
        (
            "python",
            "import os, subprocess\n\
             subprocess.Popen(['sleep', '301.25'], start_new_session=True)\n\
             return [os.environ.get('SLURM_JOB_ID'), os.environ.get('SLURMD_NODENAME')]",
        ),
        (
            "javascript",
            "require('child_process').spawn('setsid', ['sleep', '301.25'], {detached: true, stdio: 'ignore'}).unref();\n\
             return [process.env.SLURM_JOB_ID, process.env.SLURMD_NODENAME]",
        ),
    ] {
        let r = common::run_command(
            bed.command(&[
                "code",
                "run",
                "--session",
                &session,
                "--language",
                language,
                "--json",
            ]),
            Some(program),
        );
        assert_eq!(r.code, 0, "{language}: {r:?}");
        let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
        assert_eq!(v["value"][0], job.as_str(), "{language}: {v}");
        assert!(
            matches!(v["value"][1].as_str(), Some("n1" | "n2")),
            "{language}: {v}"
        );
        // The session's own shell lives in the same directory: look for the run's child.
        eventually("the run's setsid child is gone", || {
            (!command_lines().iter().any(|c| c.contains("301.25"))).then_some(())
        });
    }
    let r = bed.run(&["session", "destroy", "--session", &session, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// A line that never ends cannot grow serve's memory without bound: past 256 MiB it gets a
/// `line_too_long` error at once (before its newline comes), its bytes are dropped up to its
/// newline and serving goes on; a line over the bound cut off by EOF gets the error too, and
/// serve disposes and exits 0 as at any EOF.
#[test]
fn code_serve_bounds_a_line() {
    let bed = Bed::local();
    let mut s = Serve::start(&bed, "javascript", &[]);
    assert_eq!(s.next()["type"], "hello");
    let chunk = vec![b'x'; 1 << 20];
    let over = |s: &mut Serve| {
        let stdin = s.stdin.as_mut().unwrap();
        for _ in 0..=256 {
            stdin.write_all(&chunk).unwrap();
        }
        stdin.flush().unwrap();
        let m = s.next();
        assert_eq!(
            (m["type"].as_str(), m["code"].as_str()),
            (Some("error"), Some("line_too_long")),
            "{m}"
        );
        assert!(m["message"].as_str().unwrap().contains("256 MiB"), "{m}");
    };
    over(&mut s);
    // The rest of that line, up to its newline, is dropped; the next line is served.
    s.send_raw(b"{\"type\":\"run\",\"runId\":\"dropped\"}");
    s.send(json!({"type": "run", "runId": "after", "program": "return 1", "bindings": []}));
    let m = s.next();
    assert_eq!(
        (m["type"].as_str(), m["runId"].as_str()),
        (Some("result"), Some("after")),
        "{m}"
    );
    assert_eq!(m["result"]["value"], 1, "{m}");
    // One cut off by EOF.
    over(&mut s);
    s.close();
    assert_eq!(s.wait(), 0);
}

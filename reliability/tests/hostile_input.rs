//! Hostile input: the provider's stdin fed random and mutated protocol lines from a seeded
//! generator; hostile remote output (screen-rewriting escapes, OSC sequences, forged markers and
//! protocol lines); hostile remote file trees for download.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use remote_runner_engine::engine::ExecRequest;
use remote_runner_engine::engine::transfer::TransferOptions;
use remote_runner_protocol::{Command, decode_command};
use remote_runner_reliability::bed::{Bed, check_exact};
use remote_runner_reliability::host::{Host, ssh_env};
use remote_runner_reliability::report::Report;
use remote_runner_reliability::rng::XorShift;
use remote_runner_reliability::{full_mode, sha256_hex};
use serde_json::{Value, json};

const PROVIDER: &str = env!("CARGO_BIN_EXE_rr-reliability-provider");

/// Valid command lines the mutations start from.
fn base_lines() -> Vec<Value> {
    let env = |kind: &str, fields: Value| {
        let mut v = json!({"protocol": "botmux.remote-runner", "version": 1, "type": kind});
        for (k, val) in fields.as_object().into_iter().flatten() {
            v[k] = val.clone();
        }
        v
    };
    vec![
        env(
            "hello",
            json!({"requestId": "hello:1", "sessionId": "s", "requiredCapabilities": ["start","turn"]}),
        ),
        env(
            "start",
            json!({"requestId": "start:1", "sessionId": "s", "cwd": "/tmp"}),
        ),
        env(
            "resume",
            json!({"requestId": "resume:1", "sessionId": "s", "cwd": "/tmp", "state": {"provider": "remote-runner", "generation": 3}}),
        ),
        env(
            "turn",
            json!({"requestId": "turn:1", "turnId": "t1", "content": "echo hi"}),
        ),
        env("cancel", json!({"requestId": "cancel:1"})),
        env("detach", json!({"requestId": "detach:1"})),
        env("reattach", json!({"requestId": "reattach:1"})),
        env("status", json!({"requestId": "status:1"})),
        env(
            "terminal_input",
            json!({"requestId": "terminal-input:1", "generation": 1, "data": "ls\r"}),
        ),
        env(
            "terminal_resize",
            json!({"requestId": "terminal-resize:1", "generation": 1, "cols": 80, "rows": 24}),
        ),
        env(
            "outbound_message_result",
            json!({"operationId": "o1", "turnId": "t1"}),
        ),
    ]
}

const WRONG: &[&str] = &[
    "null",
    "true",
    "0",
    "-1",
    "1.5",
    "1e400",
    "-1e400",
    "18446744073709551616",
    "99999999999999999999999999",
    "\"\"",
    "[]",
    "{}",
    "[[[[[]]]]]",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "{\"a\":{\"b\":{\"c\":[1,2,3]}}}",
];

/// One hostile line from a valid base line.
fn mutate(rng: &mut XorShift, bases: &[Value]) -> Vec<u8> {
    let mut v = rng.pick(bases).clone();
    let obj = v.as_object_mut().expect("object");
    let keys: Vec<String> = obj.keys().cloned().collect();
    match rng.below(14) {
        0 => {
            obj.remove(rng.pick(&keys));
        }
        1 | 2 => {
            let k = rng.pick(&keys).clone();
            let wrong = WRONG[rng.below(WRONG.len())];
            let bad: Value = serde_json::from_str(wrong).unwrap_or(Value::Null);
            obj.insert(k, bad);
        }
        3 => {
            obj.insert(format!("extra{}", rng.below(100)), json!(rng.next_u64()));
        }
        4 => {
            let k = rng.pick(&keys).clone();
            let len = if rng.chance(50) {
                200_000
            } else {
                rng.below(3000)
            };
            obj.insert(k, json!("A".repeat(len)));
        }
        5 => {
            let ty = rng.pick(&[
                "HELLO", "Turn", "turn ", "", "ready", "final", "progress", "x",
            ]);
            obj.insert("type".into(), json!(ty));
        }
        6 => {
            obj.insert("version".into(), json!(rng.pick(&[0, 2, -1, 1000])));
        }
        _ => {}
    }
    let mut line = serde_json::to_vec(&v).unwrap_or_default();
    match rng.below(12) {
        0 => line.truncate(rng.below(line.len().max(1))),
        1 => {
            // Invalid UTF-8 inside a string or anywhere.
            let at = rng.below(line.len().max(1));
            const BAD: &[&[u8]] = &[&[0xff], &[0xc3], &[0xed, 0xa0, 0x80], &[0xf8, 0x88]];
            let bad: &[u8] = BAD[rng.below(BAD.len())];
            line.splice(at..at, bad.iter().copied());
        }
        2 => {
            let at = rng.below(line.len().max(1));
            line[at] = rng.next_u64() as u8;
        }
        3 => {
            // Duplicate a field at the text level.
            if let Some(pos) = line.iter().position(|b| *b == b'{') {
                let dup = format!("\"requestId\":{},", rng.pick(WRONG));
                line.splice(pos + 1..pos + 1, dup.into_bytes());
            }
        }
        4 => {
            let n = rng.below(400);
            line = rng.bytes(n);
        }
        5 => {
            line = format!(
                "{}{}",
                "[".repeat(rng.below(20000)),
                "]".repeat(rng.below(3))
            )
            .into_bytes()
        }
        6 => {
            line = rng
                .pick(&[
                    &b""[..],
                    b"   ",
                    b"\r",
                    b"\xef\xbb\xbf{}",
                    b"{}",
                    b"[]",
                    b"\"hello\"",
                    b"null",
                ])
                .to_vec()
        }
        7 => {
            let copy = line.clone();
            line.extend_from_slice(&copy);
        }
        _ => {}
    }
    for b in line.iter_mut() {
        if *b == b'\n' {
            *b = b' ';
        }
    }
    line
}

/// A valid start or resume would make the provider create remote sessions on this host: those
/// are exercised by the fault tests; here every line that decodes as one is replaced.
fn harmless(line: &[u8]) -> bool {
    !matches!(
        decode_command(line),
        Ok(Command::Start(_)) | Ok(Command::Resume(_))
    )
}

#[test]
fn provider_stdin_fed_random_and_mutated_lines() {
    let lines = std::env::var("RR_RELIABILITY_FUZZ_LINES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(if full_mode() { 250_000 } else { 100_000 });
    let seed = std::env::var("RR_RELIABILITY_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0x5eed_2026);
    let mut report = Report::new(
        "hostile_provider_stdin",
        "hostile",
        "random and mutated protocol lines from a seeded xorshift generator written to the \
         provider's stdin: fields dropped, duplicated or of the wrong type, huge numbers, long \
         strings, invalid UTF-8, truncation, random bytes, deep nesting (valid start/resume \
         lines are replaced, so no remote session is created)",
        &[
            "the provider stays alive (no panic, no exit)",
            "every line it prints decodes as a valid event (protocol crate decode_event)",
            "it still serves afterwards: a final status gets its reply",
        ],
    );
    let outcome = (|| -> Result<(usize, usize, f64)> {
        let dir = tempfile::tempdir()?;
        let env = vec![
            (
                "REMOTE_RUNNER_STATE_DIR",
                dir.path().join("state").display().to_string(),
            ),
            ("REMOTE_RUNNER_TERMINAL", "off".to_string()),
        ];
        let mut host = Host::spawn(PROVIDER, dir.path(), &env)?;
        let bases = base_lines();
        let mut rng = XorShift::new(seed);
        let started = Instant::now();
        let mut events = 0;
        for i in 0..lines {
            let mut line = mutate(&mut rng, &bases);
            while !harmless(&line) {
                line = mutate(&mut rng, &bases);
            }
            host.send_bytes(&line)?;
            if i % 1000 == 0 {
                host.flush()?;
                // Validate what arrived so far (bounded memory); every line is checked.
                while host.try_next(Duration::ZERO)?.is_some() {
                    events += 1;
                }
                host.seen.clear();
                if !host.alive() {
                    bail!("the provider exited after {i} lines");
                }
            }
        }
        host.send("status", json!({"requestId": "status:final"}))?;
        let reply = host.wait_for(Duration::from_secs(120), |v| {
            v["requestId"] == "status:final"
        })?;
        events += host.seen.len();
        if reply["type"] != "status" {
            bail!("the final status got {reply}");
        }
        if !host.alive() {
            bail!("the provider is not running after the final status");
        }
        Ok((lines, events, started.elapsed().as_secs_f64()))
    })();
    if let Some((n, events, secs)) = report.record(0, outcome) {
        report.figure("lines", n);
        report.figure("events_validated", events);
        report.figure("seed", seed);
        report.figure("seconds", (secs * 10.0).round() / 10.0);
    }
    report.finish();
}

/// Terminal escapes that try to rewrite the screen or talk to the terminal, forged end markers
/// and a forged protocol line.
fn hostile_output() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"\x1b[2J\x1b[H\x1b[31mFAKE PROMPT $ \x1b[0m\n");
    out.extend_from_slice(b"\x1b]0;pwned-title\x07");
    out.extend_from_slice(b"\x1b]52;c;cm0gLXJmIC8K\x07");
    out.extend_from_slice(b"\x1b]8;;file:///etc/passwd\x1b\\link\x1b]8;;\x1b\\\n");
    out.extend_from_slice(b"\x1bP+q544e\x1b\\\x1b[6n\x1b[c\x1b[?1049h\x1b[?2004h\x1b[201~");
    out.extend_from_slice(b"__REMOTE_RUNNER_CMD_END_x__:0\nexit_code: 0\n");
    out.extend_from_slice(b"\r\x1b[K\x1b[1A\x1b[2K\x1b[?1049l\x1bc");
    out.extend_from_slice(
        b"{\"protocol\":\"botmux.remote-runner\",\"version\":1,\"type\":\"final\",\"turnId\":\"h1\",\"content\":\"forged\"}\n",
    );
    out.extend_from_slice(&[0x00, 0x07, 0x08, 0x7f, 0x9b, 0xff, 0xfe]);
    out.extend_from_slice("\u{202e}rtl-override \u{200b}zero-width\n".as_bytes());
    out
}

fn write_remote(bed: &Bed, name: &str, data: &[u8]) -> Result<()> {
    let p = bed.remote.join(name);
    std::fs::write(&p, data)?;
    chown(&p)
}

fn chown(p: &Path) -> Result<()> {
    let ok = std::process::Command::new("chown")
        .args(["-hR", "rrtest:rrtest"])
        .arg(p)
        .status()?
        .success();
    if !ok {
        bail!("chown {}", p.display());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_remote_output_never_alters_local_state() {
    let mut report = Report::new(
        "hostile_remote_output",
        "hostile",
        "a command prints screen-clearing and cursor escapes, OSC title / clipboard (52) / \
         hyperlink (8), DCS and terminal queries, alternate screen, bracketed-paste end, forged \
         end markers, a forged protocol `final` line, C0/C1 controls and bidi overrides; run \
         through the engine and through a provider turn",
        &[
            "engine: exit code exact (9, not the forged 0), stdout bytes exact (sha256), session \
             still active with its cwd, the next command exact",
            "provider: every line printed is a valid event; exactly one final for the turn, with \
             exit 9 (the forged final is only progress text); generation unchanged",
        ],
    );
    let bed = Bed::start("hostile-output").await.expect("bed");
    let data = hostile_output();
    write_remote(&bed, "hostile.txt", &data).expect("write");
    let outcome = async {
        let s = bed.session().await?;
        let rec = bed
            .engine
            .exec(
                &s.session_id,
                "cat hostile.txt; (exit 9)",
                ExecRequest::wait(),
            )
            .await
            .map_err(|e| anyhow!("exec: {e}"))?;
        check_exact(&bed.engine, &rec, 9, &data).await?;
        let after = bed
            .engine
            .session_show(&s.session_id)
            .map_err(|e| anyhow!("{e}"))?;
        if after.status != s.status || after.cwd != s.cwd {
            bail!(
                "the session record changed: {:?} {:?}",
                after.status,
                after.cwd
            );
        }
        let next = bed
            .engine
            .exec(&s.session_id, "echo still-fine", ExecRequest::wait())
            .await
            .map_err(|e| anyhow!("exec: {e}"))?;
        check_exact(&bed.engine, &next, 0, b"still-fine\n").await
    }
    .await;
    report.record(0, outcome);
    let outcome = async {
        let local = tempfile::tempdir()?;
        let env = ssh_env(&bed.sshd, &local.path().join("state"), &bed.remote);
        let mut host = Host::spawn(PROVIDER, local.path(), &env)?;
        host.hello()?;
        let ready = host.start("/x")?;
        let generation = ready["state"]["generation"].clone();
        host.begin_turn("h1", "cat hostile.txt; (exit 9)")?;
        let (_, fin) = host.finish_turn("h1", Duration::from_secs(60))?;
        let finals = host
            .seen
            .iter()
            .filter(|v| v["turnId"] == "h1" && (v["type"] == "final" || v["type"] == "failure"))
            .count();
        if fin["type"] != "final" || finals != 1 {
            bail!("{finals} final events; last {fin}");
        }
        if !fin["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with("exit 9")
        {
            bail!("final content {:?}", fin["content"]);
        }
        host.send("status", json!({"requestId": "status:h"}))?;
        let st = host.wait_for(Duration::from_secs(30), |v| v["requestId"] == "status:h")?;
        if st["state"]["generation"] != generation {
            bail!(
                "generation changed: {} -> {}",
                generation,
                st["state"]["generation"]
            );
        }
        host.send("cancel", json!({"requestId": "cancel:h"}))?;
        host.wait_for(Duration::from_secs(30), |v| v["requestId"] == "cancel:h")?;
        Ok(())
    }
    .await;
    report.record(1, outcome);
    report.figure("hostile_bytes", data.len());
    report.figure("hostile_sha256", sha256_hex(&data));
    report.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_remote_file_tree_for_download() {
    let mut report = Report::new(
        "hostile_download_tree",
        "hostile",
        "a remote tree for `file get` holding symlinks to /etc/passwd, to `../../..` and to /, a \
         FIFO, a set-uid file, a name with a newline, beside ordinary files",
        &[
            "nothing outside the destination is created or changed",
            "no symlink in the destination leads outside it; no set-id bits",
            "the links leaving the tree are refused and listed in the record's skipped entries",
            "the ordinary files arrive byte-exact",
        ],
    );
    let bed = Bed::start("hostile-tree").await.expect("bed");
    let outcome = async {
        let tree = bed.remote.join("tree");
        std::fs::create_dir_all(tree.join("sub"))?;
        std::fs::write(tree.join("ok.txt"), b"ordinary\n")?;
        std::fs::write(tree.join("sub/deep.txt"), b"deep\n")?;
        std::fs::write(tree.join("name\nwith-newline"), b"nl\n")?;
        std::fs::write(tree.join("suid"), b"#!/bin/sh\n")?;
        std::os::unix::fs::symlink("/etc/passwd", tree.join("link-abs"))?;
        std::os::unix::fs::symlink("../../../../../../outside-secret", tree.join("link-up"))?;
        std::os::unix::fs::symlink("/", tree.join("link-root"))?;
        std::os::unix::fs::symlink("../ok.txt", tree.join("sub/link-inside"))?;
        let fifo = std::process::Command::new("mkfifo")
            .arg(tree.join("fifo"))
            .status()?;
        if !fifo.success() {
            bail!("mkfifo failed");
        }
        chown(&tree)?;
        let chmod = std::process::Command::new("chmod")
            .arg("4755")
            .arg(tree.join("suid"))
            .status()?;
        if !chmod.success() {
            bail!("chmod failed");
        }
        let s = bed.session().await?;
        let local = tempfile::tempdir()?;
        let sentinel = local.path().join("outside");
        std::fs::create_dir(&sentinel)?;
        std::fs::write(sentinel.join("keep.txt"), b"keep\n")?;
        let dest = local.path().join("dest");
        let rec = bed
            .engine
            .file_get(&s.session_id, "tree", &dest, TransferOptions::default())
            .await
            .map_err(|e| anyhow!("file_get: {e} ({})", e.code.as_str()))?;
        let mut top: Vec<String> = std::fs::read_dir(local.path())?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        top.sort();
        if top != ["dest", "outside"] {
            bail!("entries beside the destination: {top:?}");
        }
        if std::fs::read(sentinel.join("keep.txt"))? != b"keep\n"
            || std::fs::read_dir(&sentinel)?.count() != 1
        {
            bail!("the directory beside the destination changed");
        }
        let dest_real = std::fs::canonicalize(&dest)?;
        let mut stack = vec![dest.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d)?.flatten() {
                let meta = std::fs::symlink_metadata(e.path())?;
                if meta.file_type().is_symlink() {
                    let target = std::fs::canonicalize(e.path()).ok();
                    if !target.is_some_and(|t| t.starts_with(&dest_real)) {
                        bail!(
                            "{} is a symlink leading outside the destination",
                            e.path().display()
                        );
                    }
                } else if meta.is_dir() {
                    stack.push(e.path());
                }
                use std::os::unix::fs::PermissionsExt;
                if meta.permissions().mode() & 0o6000 != 0 {
                    bail!("{} kept a set-id bit", e.path().display());
                }
            }
        }
        for link in ["link-abs", "link-up", "link-root"] {
            if !rec.skipped.iter().any(|s| s.path.ends_with(link)) {
                bail!("{link} is not listed as skipped: {:?}", rec.skipped);
            }
        }
        if std::fs::read(dest.join("ok.txt"))? != b"ordinary\n"
            || std::fs::read(dest.join("sub/deep.txt"))? != b"deep\n"
        {
            bail!("ordinary files differ");
        }
        Ok(rec.skipped.len())
    }
    .await;
    if let Some(n) = report.record(0, outcome) {
        report.figure("skipped_entries", n);
    }
    report.finish();
}

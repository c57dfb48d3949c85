//! `code-binding`: the round trip of one binding call of the code runtime (a program's
//! `await tools.f(x)`, answered at once by the host), as the program times it, on `local` and
//! over SSH, beside a bare async function call in the same program and one SSH round trip on an
//! open channel (a line echoed by `cat`, through our transport and through an OpenSSH
//! ControlMaster). Targets (issue 29): <= 1 ms on `local`, <= one SSH round trip + 1 ms over SSH.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use remote_runner_engine::engine::code::{
    CodeBindingNamespace, CodeCall, CodeConfig, CodeRuntime, Language,
};
use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::StreamEvent;
use remote_runner_engine::transport::local::LocalTransport;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::Ctx;
use crate::openssh::OpenSsh;
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

fn program(language: Language, calls: usize) -> String {
    match language {
        Language::Javascript => format!(
            "const local = async (x) => x; const bare = [], bind = [];\n\
             for (let i = 0; i < {calls}; i++) {{ const t = process.hrtime.bigint(); await local(i); \
             bare.push(Number(process.hrtime.bigint() - t)); }}\n\
             for (let i = 0; i < {calls}; i++) {{ const t = process.hrtime.bigint(); await tools.f(i); \
             bind.push(Number(process.hrtime.bigint() - t)); }}\n\
             return {{bare, bind}};"
        ),
        Language::Python => format!(
            "import time\nasync def local(x):\n    return x\nbare = []\nbind = []\n\
             for i in range({calls}):\n    t = time.perf_counter_ns()\n    await local(i)\n    \
             bare.append(time.perf_counter_ns() - t)\n\
             for i in range({calls}):\n    t = time.perf_counter_ns()\n    await tools.f(i)\n    \
             bind.append(time.perf_counter_ns() - t)\n\
             return {{'bare': bare, 'bind': bind}}\n"
        ),
        // The benchmark runs the languages listed in `run`; a new one needs its program here.
        other => panic!("no timing program for {other:?}: write one in code_binding::program"),
    }
}

/// One run of the timing program: (bare call samples, binding call samples).
fn time_calls(
    ctx: &Ctx,
    transport: Arc<Remote>,
    language: Language,
    cwd: &str,
    calls: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let mut config = CodeConfig::new(language);
    config.cwd = Some(cwd.to_string());
    config.time_budget = Duration::from_secs(300);
    config.output_cap = 16 << 20;
    let rt = CodeRuntime::new(transport, config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let bindings = [CodeBindingNamespace {
        global: "tools".into(),
        functions: vec!["f".into()],
        error_class: None,
    }];
    let result = ctx.rt.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel::<CodeCall>();
        let answer = tokio::spawn(async move {
            while let Some(call) = rx.recv().await {
                let _ = call.reply.send(Ok(call.args));
            }
        });
        let r = rt
            .run(
                &program(language, calls),
                &bindings,
                Some(tx),
                CancellationToken::new(),
            )
            .await;
        answer.abort();
        r
    });
    let result = result.map_err(|e| anyhow::anyhow!("{e}"))?;
    let v: serde_json::Value = serde_json::from_str(&result.json)?;
    if let Some(e) = v.get("error") {
        bail!("the timing program failed: {e}");
    }
    let samples = |key: &str| -> Vec<Duration> {
        v["value"][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_u64())
            .map(Duration::from_nanos)
            .collect()
    };
    Ok((samples("bare"), samples("bind")))
}

/// Round trips of one line through `cat` on a kept channel of our transport.
fn our_echo(ctx: &Ctx, transport: &Remote, runs: usize) -> Result<Vec<Duration>> {
    ctx.rt.block_on(async {
        let (mut s, _) = remote_runner_engine::remote::sh_stream(transport, "exec cat")
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .context("the transport cannot stream")?;
        let mut samples = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            s.input.send(b"x\n".to_vec()).await?;
            loop {
                match s.events.recv().await {
                    Some(StreamEvent::Stdout(d)) if d.contains(&b'\n') => break,
                    Some(StreamEvent::Stdout(_) | StreamEvent::Stderr(_)) => {}
                    _ => bail!("cat ended"),
                }
            }
            samples.push(start.elapsed());
        }
        Ok(samples)
    })
}

/// Round trips of one line through `cat` on an OpenSSH ControlMaster session.
fn openssh_echo(ctx: &Ctx, runs: usize) -> Result<Vec<Duration>> {
    let master = OpenSsh::new(ctx.bed).control_master(&ctx.bed.local_dir("code-binding-ssh")?)?;
    let mut child = master
        .ssh("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    let mut samples = Vec::new();
    for i in 0..runs + 3 {
        let start = Instant::now();
        stdin.write_all(b"x\n")?;
        stdin.flush()?;
        line.clear();
        stdout.read_line(&mut line)?;
        if i >= 3 {
            samples.push(start.elapsed());
        }
    }
    drop(stdin);
    let _ = child.wait();
    Ok(samples)
}

pub fn run(ctx: &Ctx) -> Result<BenchResult> {
    let calls = ctx.cfg.pick(500, 50);
    let bed = ctx.bed;
    let remote = bed.remote_dir("code-binding")?;
    let cwd = remote.to_string_lossy().into_owned();
    let ssh = Remote::direct(ctx.rt.block_on(bed.connect(&remote))?);
    let local = Remote::direct(Arc::new(LocalTransport::new()));
    let local_dir = bed.local_dir("code-binding-local")?;
    let local_cwd = local_dir.to_string_lossy().into_owned();

    let mut result = BenchResult::new(
        "code-binding",
        "one binding call of the code runtime (`await tools.f(i)` answered at once by the host), \
         as the program times it, on `local` and over SSH, beside a bare async function call in \
         the same program and one SSH round trip on an open channel (a line echoed by `cat`)",
    );
    let mut rows = Vec::new();
    for (language, name) in [
        (Language::Javascript, "node"),
        (Language::Python, "python3"),
    ] {
        let (bare, on_local) = time_calls(ctx, local.clone(), language, &local_cwd, calls)?;
        let (_, on_ssh) = time_calls(ctx, ssh.clone(), language, &cwd, calls)?;
        result.push(Measurement::new(
            &format!("bare async function call ({name})"),
            Side::Ours,
            &bare,
        ));
        let l = result
            .push(Measurement::new(
                &format!("binding call round trip, `local` ({name})"),
                Side::Ours,
                &on_local,
            ))
            .clone();
        let s = result
            .push(Measurement::new(
                &format!("binding call round trip, SSH ({name})"),
                Side::Ours,
                &on_ssh,
            ))
            .clone();
        rows.push((name, l, s));
    }
    let echo = our_echo(ctx, ssh.as_ref(), calls)?;
    let echo = result
        .push(Measurement::new(
            "SSH round trip: a line echoed by `cat` on an open channel (our transport)",
            Side::Ours,
            &echo,
        ))
        .clone();
    let theirs = openssh_echo(ctx, calls)?;
    let theirs = result
        .push(Measurement::new(
            "SSH round trip: a line echoed by `cat` through a ControlMaster",
            Side::OpenSsh,
            &theirs,
        ))
        .clone();
    for (name, l, s) in &rows {
        result.ratios.push(Ratio::time(
            &format!("binding round trip over SSH ({name}) / OpenSSH channel echo"),
            s,
            &theirs,
            Target::None,
        ));
        let local_met = l.summary.median <= Duration::from_millis(1);
        let budget = echo.summary.median + Duration::from_millis(1);
        let ssh_met = s.summary.median <= budget;
        result.notes.push(format!(
            "{name}: `local` median {} (target <= 1 ms: {}); SSH median {} (target <= our SSH \
             round trip {} + 1 ms: {})",
            crate::stats::ms(l.summary.median),
            if local_met { "met" } else { "missed" },
            crate::stats::ms(s.summary.median),
            crate::stats::ms(echo.summary.median),
            if ssh_met { "met" } else { "missed" },
        ));
    }
    result.notes.push(format!(
        "one run per language and machine, {calls} sequential calls each (after {calls} bare \
         calls); the samples are the program's own clock around each `await`"
    ));
    Ok(result)
}

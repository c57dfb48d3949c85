//! `turn-latency` and `turn-stream`: the provider binary driven over stdin/stdout like the host
//! drives it, beside OpenSSH doing the same through a ControlMaster connection.
//!
//! Latency: turn line written to `final` read, for `true`. Streaming: a turn printing N bytes,
//! throughput from turn to `final`, with every `progress` byte counted (it must equal N) and the
//! provider's peak resident memory (`VmHWM`) read afterwards.

use anyhow::{Result, bail};

use crate::Ctx;
use crate::benches::exec_warm::{tmux_round_trip, tmux_setup, tmux_teardown};
use crate::openssh::{self, OpenSsh};
use crate::provider_host::ProviderHost;
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

/// The remote command printing `bytes` bytes of `a`.
fn printer(bytes: u64) -> String {
    format!("head -c {bytes} /dev/zero | tr '\\0' a")
}

pub fn run_latency(ctx: &Ctx) -> Result<BenchResult> {
    let runs = ctx.cfg.pick(30, 5);
    let warmup = 2;
    let bed = ctx.bed;
    let remote = bed.remote_dir("turn-latency")?;
    let mut provider = ProviderHost::spawn(bed, &bed.local_dir("turn-latency-state")?, &remote)?;
    provider.start()?;
    let master = OpenSsh::new(bed).control_master(&bed.local_dir("turn-latency-ssh")?)?;
    openssh::run(&mut master.ssh(&tmux_setup()))?;
    let round_trip = tmux_round_trip();

    for _ in 0..warmup {
        provider.turn("true")?;
        openssh::time_run(&mut master.ssh("true"))?;
        openssh::time_run(&mut master.ssh(&round_trip))?;
    }
    let (mut ours, mut plain, mut tmux) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        ours.push(provider.turn("true")?.elapsed);
        plain.push(openssh::time_run(&mut master.ssh("true"))?);
        tmux.push(openssh::time_run(&mut master.ssh(&round_trip))?);
    }
    provider.close();
    let _ = openssh::run(&mut master.ssh(&tmux_teardown()));

    let mut result = BenchResult::new(
        "turn-latency",
        "a `turn` of `true` sent to the provider (botmux-remote-runner over SSH, shell mode, \
         terminal off) until its `final` is read, beside `ssh -S ctl host true` and a tmux \
         send-keys + wait-for round trip through an OpenSSH ControlMaster",
    );
    let ours = result
        .push(Measurement::new(
            "provider turn `true`: turn -> final",
            Side::Ours,
            &ours,
        ))
        .clone();
    let plain = result
        .push(Measurement::new(
            "ControlMaster: `ssh host true`",
            Side::OpenSsh,
            &plain,
        ))
        .clone();
    let tmux = result
        .push(Measurement::new(
            "ControlMaster: tmux send-keys + wait-for round trip",
            Side::OpenSsh,
            &tmux,
        ))
        .clone();
    result.ratios.push(Ratio::time(
        "turn / ControlMaster `ssh host true`",
        &ours,
        &plain,
        Target::None,
    ));
    result.ratios.push(Ratio::time(
        "turn / ControlMaster tmux round trip",
        &ours,
        &tmux,
        Target::AtMost(0.8),
    ));
    result.notes.push(format!(
        "{warmup} warm-up turns first; {runs} runs interleaved; a turn also records the command \
         (store, logs) and streams its output, which `ssh host true` does not"
    ));
    Ok(result)
}

/// The provider's peak resident memory while streaming may not pass this.
const RSS_TARGET_MIB: u64 = 64;

pub fn run_stream(ctx: &Ctx) -> Result<BenchResult> {
    let bytes: u64 = ctx.cfg.pick(200_000_000, 20_000_000);
    let runs = ctx.cfg.pick(3, 1);
    let bed = ctx.bed;
    let remote = bed.remote_dir("turn-stream")?;
    let mut provider = ProviderHost::spawn(bed, &bed.local_dir("turn-stream-state")?, &remote)?;
    provider.start()?;
    provider.turn("true")?;
    let rss_before = provider.peak_rss_kib()?;
    let master = OpenSsh::new(bed).control_master(&bed.local_dir("turn-stream-ssh")?)?;
    let command = printer(bytes);

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut progress_counts = Vec::new();
    let mut ssh_counts = Vec::new();
    for _ in 0..runs {
        let outcome = provider.turn(&command)?;
        ours.push(outcome.elapsed);
        progress_counts.push(outcome.progress_bytes);
        let (took, count) = openssh::time_counting_stdout(&mut master.ssh(&command))?;
        theirs.push(took);
        ssh_counts.push(count);
    }
    let rss_peak = provider.peak_rss_kib()?;
    provider.close();
    // A figure for output that did not arrive whole would be no figure at all.
    if let Some(n) = progress_counts.iter().find(|&&n| n != bytes) {
        bail!("a turn's progress carried {n} bytes of output, expected {bytes}");
    }
    if let Some(n) = ssh_counts.iter().find(|&&n| n != bytes) {
        bail!("ssh printed {n} bytes, expected {bytes}");
    }

    let mut result = BenchResult::new(
        "turn-stream",
        format!(
            "a turn printing {bytes} bytes (`{command}`) through the provider, turn sent to \
             `final` read, beside `ssh -S ctl host '{command}'` read to its end through an OpenSSH \
             ControlMaster"
        ),
    );
    let ours = result
        .push(
            Measurement::new("provider turn streaming progress", Side::Ours, &ours)
                .with_bytes(bytes),
        )
        .clone();
    let theirs = result
        .push(
            Measurement::new(
                "ControlMaster: ssh stdout read to the end",
                Side::OpenSsh,
                &theirs,
            )
            .with_bytes(bytes),
        )
        .clone();
    result.ratios.push(Ratio::speed(
        "provider streaming / ControlMaster ssh",
        &ours,
        &theirs,
        Target::AtLeast(0.9),
    ));
    result.ratios.push(Ratio {
        label: format!("provider peak RSS (VmHWM) / {RSS_TARGET_MIB} MiB"),
        value: rss_peak as f64 / (RSS_TARGET_MIB * 1024) as f64,
        meaning: "the provider's peak resident memory after every streamed turn / the bound \
                  (lower is better)",
        target: Target::AtMost(1.0),
    });
    result.notes.push(format!(
        "progress bytes received per turn: {} (expected {bytes}: complete)",
        join(&progress_counts)
    ));
    result.notes.push(format!(
        "OpenSSH stdout bytes per run: {}",
        join(&ssh_counts)
    ));
    result.notes.push(format!(
        "provider peak RSS (VmHWM): {:.1} MiB after the session was ready, {:.1} MiB after \
         streaming {runs} x {bytes} bytes",
        rss_before as f64 / 1024.0,
        rss_peak as f64 / 1024.0,
    ));
    Ok(result)
}

fn join(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

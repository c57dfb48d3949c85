//! remote-runner benchmarks: each one runs our code and OpenSSH doing the same work, in the same
//! run, against the same real sshd on 127.0.0.1, and reports medians, p90s and ratios.
//!
//! Usage: `remote-runner-bench [--quick] [--out FILE] [--no-write] [NAME...]`
//! (normally through `scripts/bench.sh`). A full run writes docs/benchmarks.md; `--quick` runs
//! fewer iterations on smaller sizes and writes nothing unless `--out` is given.
//! These are measurements, never pass/fail timing tests: a missed target is reported, and the
//! exit code is non-zero only when a benchmark could not run.

mod bed;
mod benches;
mod machine_info;
mod openssh;
mod provider_host;
mod report;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::bed::Bed;
use crate::report::BenchResult;

/// Run mode shared by every benchmark.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub quick: bool,
}

impl Config {
    /// `full` normally, `quick` under `--quick`.
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// What a benchmark gets to work with.
pub struct Ctx<'a> {
    pub bed: &'a Bed,
    pub rt: &'a tokio::runtime::Runtime,
    pub cfg: Config,
}

type RunFn = fn(&Ctx) -> Result<BenchResult>;

/// Every benchmark, in the order a full run goes through them.
const BENCHES: &[(&str, RunFn)] = &[
    ("exec-warm", benches::exec_warm::run),
    ("exec-cold-cli", benches::exec_cold::run),
    ("mcp-exec-warm", benches::mcp::run),
    ("turn-latency", benches::turn::run_latency),
    ("turn-stream", benches::turn::run_stream),
    ("file-put-1g", benches::file::run_put),
    ("file-get-1g", benches::file::run_get),
    ("tree-10k", benches::tree::run),
    ("code-binding", benches::code_binding::run),
    ("seed-loop", benches::seed_loop::run),
    ("chats", benches::chats::run),
];

#[derive(Debug)]
struct Args {
    quick: bool,
    out: Option<PathBuf>,
    no_write: bool,
    names: Vec<String>,
}

fn parse_args(raw: &[String]) -> Result<Args> {
    let mut args = Args {
        quick: false,
        out: None,
        no_write: false,
        names: Vec::new(),
    };
    let mut it = raw.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--no-write" => args.no_write = true,
            "--out" => match it.next() {
                Some(p) => args.out = Some(PathBuf::from(p)),
                None => bail!("--out needs a file path"),
            },
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            s if s.starts_with('-') => bail!("unknown option {s}\n{}", usage()),
            name => {
                if !BENCHES.iter().any(|(n, _)| *n == name) {
                    bail!("unknown benchmark {name}\n{}", usage());
                }
                args.names.push(name.to_string());
            }
        }
    }
    Ok(args)
}

fn usage() -> String {
    let names: Vec<&str> = BENCHES.iter().map(|(n, _)| *n).collect();
    format!(
        "usage: remote-runner-bench [--quick] [--out FILE] [--no-write] [NAME...]\n\
         benchmarks: {}\n\
         A full run writes docs/benchmarks.md; --quick writes only with --out.",
        names.join(" ")
    )
}

/// docs/benchmarks.md of this workspace.
fn default_doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md")
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&raw) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("remote-runner-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    match run(&args, &raw) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("remote-runner-bench: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Run the selected benchmarks; `Ok(false)` when one of them could not run.
fn run(args: &Args, raw: &[String]) -> Result<bool> {
    let cfg = Config { quick: args.quick };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let info = machine_info::collect();
    eprintln!("starting the benchmark sshd on 127.0.0.1 ...");
    let bed = Bed::start()?;
    let ctx = Ctx {
        bed: &bed,
        rt: &rt,
        cfg,
    };
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for (name, f) in BENCHES {
        if !args.names.is_empty() && !args.names.iter().any(|n| n == name) {
            continue;
        }
        eprintln!("running {name} ...");
        match f(&ctx) {
            Ok(r) => {
                println!("{}", report::text(&r));
                results.push(r);
            }
            Err(e) => {
                eprintln!("{name} could not run: {e:#}");
                println!("== {name} — could not run: {e:#}\n");
                failures.push((name.to_string(), format!("{e:#}")));
            }
        }
    }
    eprintln!("cleaning up ...");
    bed.clean_up(&rt);
    let out = match (&args.out, args.quick || args.no_write) {
        (Some(p), _) => Some(p.clone()),
        (None, false) => Some(default_doc_path()),
        (None, true) => None,
    };
    if let Some(path) = out {
        let command = format!(
            "cargo run --release -p remote-runner-bench --{}",
            raw.iter().map(|a| format!(" {a}")).collect::<String>()
        );
        let doc = report::document(&info, &command, cfg, &results, &failures);
        std::fs::write(&path, doc)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(failures.is_empty())
}

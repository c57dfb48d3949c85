//! The facts that make a run's figures interpretable: host, CPU, memory, tool versions, date.

use std::process::Command;

#[derive(Debug, Clone)]
pub struct MachineInfo {
    pub date_utc: String,
    pub kernel: String,
    pub cpu: String,
    pub cores: usize,
    pub memory: String,
    pub openssh: String,
    pub tmux: String,
    pub rsync: String,
    /// 1/5/15-minute load averages when the run started (other work on the machine skews times).
    pub load: String,
}

pub fn collect() -> MachineInfo {
    MachineInfo {
        date_utc: first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        kernel: first_line("uname", &["-srm"]),
        cpu: cpu_model(),
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        memory: mem_total(),
        // `ssh -V` prints on stderr.
        openssh: first_line("ssh", &["-V"]),
        tmux: first_line("tmux", &["-V"]),
        rsync: first_line("rsync", &["--version"]),
        load: std::fs::read_to_string("/proc/loadavg")
            .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "unknown".to_string()),
    }
}

/// First line of a tool's stdout, else its stderr, else "unknown".
fn first_line(program: &str, args: &[&str]) -> String {
    let Ok(out) = Command::new(program).args(args).output() else {
        return "unknown".to_string();
    };
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

fn mem_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".to_string())
}

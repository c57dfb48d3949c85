//! Resource probes from /proc: open file descriptors, resident memory, process trees.

use std::collections::HashMap;

/// Open file descriptors of this process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// VmRSS of this process in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// pid -> parent pid of every process.
fn parents() -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return map;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            map.insert(pid, ppid);
        }
    }
    map
}

/// Every process below `root` (not `root` itself).
pub fn descendants(root: u32) -> Vec<u32> {
    let map = parents();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&child, &parent) in &map {
            if parent == p {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

/// The command name of a process.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Send `signal` to `pid` with the `kill` binary (keeps this crate free of `unsafe`).
pub fn signal(pid: u32, signal: i32) -> bool {
    std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Direct children of `parent`.
pub fn children(parent: u32) -> Vec<u32> {
    parents()
        .into_iter()
        .filter(|(_, p)| *p == parent)
        .map(|(c, _)| c)
        .collect()
}

/// Per connection of an sshd listener: the processes its session channels run (the
/// grandchildren of each per-connection process, below the privilege-separated child). One
/// `exec` channel is one such process; SFTP is served inside sshd (internal-sftp) and not counted.
pub fn channel_processes(listener: u32) -> Vec<usize> {
    let map = parents();
    let kids = |p: u32| -> Vec<u32> {
        map.iter()
            .filter(|(_, pp)| **pp == p)
            .map(|(c, _)| *c)
            .collect()
    };
    kids(listener)
        .into_iter()
        .map(|conn| {
            kids(conn)
                .into_iter()
                .map(|priv_child| kids(priv_child).len())
                .sum()
        })
        .collect()
}

//! A private "remote host" in its own network namespace: a veth pair with addresses in
//! 10.203.x.0/30 that exist only inside our namespaces, a second sshd (same keys and user as the
//! testkit bed) started inside the namespace, and an nftables drop rule to cut the traffic and
//! heal it. Everything is removed on drop. Needs root.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use remote_runner_testkit::Sshd;

static NEXT: AtomicUsize = AtomicUsize::new(0);

fn run(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("run {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Whether `ip netns` works here (root with iproute2 and nftables).
pub fn available() -> std::result::Result<(), String> {
    if !crate::is_root() {
        return Err("not root: creating a network namespace needs root (CI runs as root)".into());
    }
    for tool in ["ip", "nft"] {
        let ok = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!(
                "{tool} is not installed (apt-get install iproute2 nftables)"
            ));
        }
    }
    Ok(())
}

#[derive(Debug)]
pub struct NetNs {
    pub name: String,
    host_if: String,
    /// The namespace side's address (where its sshd listens, port 22).
    pub addr: String,
    sshd: Option<Child>,
    /// known_hosts line file for `addr`.
    pub known_hosts: PathBuf,
    dir: tempfile::TempDir,
}

impl NetNs {
    /// Create the namespace and the veth pair, then start an sshd inside it that serves the
    /// same host key, authorized keys and login user as `bed`.
    pub fn with_sshd(bed: &Sshd) -> Result<NetNs> {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let k = (std::process::id() as usize * 13 + n * 7) % 200 + 20;
        let name = format!("rrrel{}-{n}", std::process::id());
        let host_if = format!("rrh{}", (std::process::id() as usize % 10000) * 10 + n % 10);
        let peer_if = format!("rrs{}", (std::process::id() as usize % 10000) * 10 + n % 10);
        let dir = tempfile::Builder::new().prefix("rr-rel-ns-").tempdir()?;
        let mut ns = NetNs {
            name: name.clone(),
            host_if: host_if.clone(),
            addr: format!("10.203.{k}.2"),
            sshd: None,
            known_hosts: dir.path().join("known_hosts"),
            dir,
        };
        run(&["ip", "netns", "add", &name])?;
        run(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ])?;
        run(&["ip", "link", "set", &peer_if, "netns", &name])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("10.203.{k}.1/30"),
            "dev",
            &host_if,
        ])?;
        run(&["ip", "link", "set", &host_if, "up"])?;
        run(&[
            "ip",
            "-n",
            &name,
            "addr",
            "add",
            &format!("10.203.{k}.2/30"),
            "dev",
            &peer_if,
        ])?;
        run(&["ip", "-n", &name, "link", "set", &peer_if, "up"])?;
        run(&["ip", "-n", &name, "link", "set", "lo", "up"])?;
        run(&[
            "ip", "netns", "exec", &name, "nft", "add", "table", "inet", "rrfault",
        ])?;
        run(&[
            "ip",
            "netns",
            "exec",
            &name,
            "nft",
            "add",
            "chain",
            "inet",
            "rrfault",
            "in",
            "{ type filter hook input priority 0; }",
        ])?;
        ns.start_sshd(bed)?;
        Ok(ns)
    }

    fn start_sshd(&mut self, bed: &Sshd) -> Result<()> {
        let base = std::fs::read_to_string(bed.dir().join("sshd_config"))?;
        let mut cfg: String = base
            .lines()
            .filter(|l| {
                !(l.starts_with("ListenAddress")
                    || l.starts_with("Port")
                    || l.starts_with("PidFile"))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        cfg.push_str(&format!(
            "ListenAddress {}\nPort 22\nPidFile {}\n",
            self.addr,
            self.dir.path().join("sshd.pid").display()
        ));
        let cfg_path = self.dir.path().join("sshd_config");
        std::fs::write(&cfg_path, cfg)?;
        let log = std::fs::File::create(self.dir.path().join("sshd.log"))?;
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name,
                "/usr/sbin/sshd",
                "-D",
                "-e",
                "-f",
            ])
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start sshd in the namespace")?;
        self.sshd = Some(child);
        std::fs::write(
            &self.known_hosts,
            format!("{} {}\n", self.addr, bed.host_public_key),
        )?;
        // Ready when it answers with its banner from inside the namespace.
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            let probe = Command::new("ip")
                .args(["netns", "exec", &self.name, "sh", "-c"])
                .arg(format!(
                    "exec 3<>/dev/tcp/{}/22 && head -c 7 <&3",
                    self.addr
                ))
                .output();
            let banner = probe.map(|o| o.stdout).unwrap_or_default();
            // `sh` may not support /dev/tcp; fall back to bash.
            let ready = banner.starts_with(b"SSH-2.0")
                || Command::new("bash")
                    .arg("-c")
                    .arg(format!(
                        "exec 3<>/dev/tcp/{}/22 && head -c 7 <&3",
                        self.addr
                    ))
                    .output()
                    .is_ok_and(|o| o.stdout.starts_with(b"SSH-2.0"));
            if ready {
                return Ok(());
            }
            if Instant::now() > until {
                let log =
                    std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default();
                bail!("the namespaced sshd did not answer within 15 s; log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// pid of the namespaced sshd listener.
    pub fn sshd_pid(&self) -> Option<u32> {
        self.sshd.as_ref().map(|c| c.id())
    }

    /// Drop every packet to the namespace's sshd (the peer goes silent; TCP stays "up").
    pub fn drop_traffic(&self) -> Result<()> {
        run(&[
            "ip", "netns", "exec", &self.name, "nft", "add", "rule", "inet", "rrfault", "in",
            "tcp", "dport", "22", "drop",
        ])
    }

    /// Remove the drop rule.
    pub fn heal(&self) -> Result<()> {
        run(&[
            "ip", "netns", "exec", &self.name, "nft", "flush", "chain", "inet", "rrfault", "in",
        ])
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = self.heal();
        if let Some(mut child) = self.sshd.take() {
            for pid in crate::probe::descendants(child.id()) {
                crate::probe::signal(pid, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

//! Test bed: a real OpenSSH `sshd` on 127.0.0.1 for the test suites.
//!
//! [`Sshd::start`] (or [`SshdBuilder`]) creates a private temp dir, generates a host key and
//! client keys with `ssh-keygen`, makes sure the non-root login user [`TEST_USER`] exists, writes
//! an `sshd_config`, a `known_hosts` and an `ssh_config` with a Host alias, and runs
//! `/usr/sbin/sshd -D` as a child that is killed on drop. Every instance has its own port and
//! directory, so tests may run in parallel; the login user is shared and created once under a
//! lock.
//!
//! [`Agent`] starts an `ssh-agent` with one key loaded, for agent-auth tests.
//!
//! [`ensure_login_account`] creates accounts unlike [`TEST_USER`]: login shells bash, zsh, fish
//! and sh (dash), each with noisy startup files that set PATH and variables the way real users'
//! files do. Every test bed's sshd accepts the test client keys for them too.

pub mod scripts;
pub mod slurm;

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// The path of `tool` on this host; panics with how to install it when it is missing (the
/// tests that need a shell or checker say so rather than skip).
pub fn need_tool(tool: &str) -> PathBuf {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{tool} is not installed; scripts/install-deps.sh installs it (apt-get install {tool})"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The non-root user every test logs in as.
pub const TEST_USER: &str = "rrtest";
/// The password of [`TEST_USER`]; a sentinel that must never appear in any output.
pub const SENTINEL_PASSWORD: &str = "rr-sentinel-pw-Q7xK2vLm9";
/// The passphrase of the encrypted client key; a sentinel that must never appear in any output.
pub const SENTINEL_PASSPHRASE: &str = "rr-sentinel-pp-W3nB8zRt4";
/// The Host alias written into each test bed's `ssh_config`.
pub const HOST_ALIAS: &str = "rr-test-alias";

const SSHD: &str = "/usr/sbin/sshd";
const INSTALL_HINT: &str =
    "install it with: apt-get update && apt-get install -y openssh-server openssh-client tmux";

/// Client key files generated for one test bed.
#[derive(Debug, Clone)]
pub struct ClientKeys {
    /// Unencrypted ed25519 key.
    pub ed25519: PathBuf,
    /// Unencrypted RSA (3072) key.
    pub rsa: PathBuf,
    /// ed25519 key encrypted with [`SENTINEL_PASSPHRASE`].
    pub ed25519_encrypted: PathBuf,
    /// A key that is NOT in authorized_keys (for negative tests).
    pub unauthorized: PathBuf,
}

/// Options for a test bed.
#[derive(Debug, Clone)]
pub struct SshdBuilder {
    max_sessions: Option<u32>,
    extra_config: Vec<String>,
    rsa_host_key: bool,
}

impl Default for SshdBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SshdBuilder {
    pub fn new() -> Self {
        SshdBuilder {
            max_sessions: None,
            extra_config: Vec::new(),
            rsa_host_key: false,
        }
    }

    /// sshd's `MaxSessions` (OpenSSH default 10).
    pub fn max_sessions(mut self, n: u32) -> Self {
        self.max_sessions = Some(n);
        self
    }

    /// Also serve an RSA host key (after the ed25519 one), see [`Sshd::host_rsa_public_key`].
    pub fn rsa_host_key(mut self) -> Self {
        self.rsa_host_key = true;
        self
    }

    /// One more raw `sshd_config` line.
    pub fn config_line(mut self, line: impl Into<String>) -> Self {
        self.extra_config.push(line.into());
        self
    }

    pub fn start(self) -> Result<Sshd> {
        Sshd::start_with(self)
    }
}

/// A running sshd on 127.0.0.1. Killed (with everything it started) on drop.
#[derive(Debug)]
pub struct Sshd {
    dir: tempfile::TempDir,
    child: Child,
    /// The TCP port on 127.0.0.1.
    pub port: u16,
    /// `SHA256:...` fingerprint of the host key.
    pub host_key_fingerprint: String,
    /// The host public key line (`ssh-ed25519 AAAA...`).
    pub host_public_key: String,
    /// The RSA host public key line (`ssh-rsa AAAA...`) when the builder asked for one.
    pub host_rsa_public_key: Option<String>,
    pub keys: ClientKeys,
    /// A known_hosts file holding this server's key as `[127.0.0.1]:PORT`.
    pub known_hosts: PathBuf,
    /// An ssh_config with `Host` [`HOST_ALIAS`] pointing at this server.
    pub ssh_config: PathBuf,
    /// sshd's log (stderr of `sshd -D -e`).
    pub log: PathBuf,
}

impl Sshd {
    /// Start a test bed with default options.
    pub fn start() -> Result<Sshd> {
        SshdBuilder::new().start()
    }

    pub fn builder() -> SshdBuilder {
        SshdBuilder::new()
    }

    fn start_with(opts: SshdBuilder) -> Result<Sshd> {
        check_tools()?;
        ensure_test_user()?;
        fs::create_dir_all("/run/sshd").context("mkdir /run/sshd (sshd's privsep dir)")?;

        let dir = tempfile::Builder::new()
            .prefix("rr-sshd-")
            .tempdir()
            .context("create temp dir")?;
        // sshd reads authorized_keys after dropping to the login user: the path must be
        // traversable by it.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
        let d = dir.path();

        let host_key = d.join("host_ed25519");
        keygen(&host_key, "ed25519", "", "rr-test-host")?;
        let keys = ClientKeys {
            ed25519: d.join("id_ed25519"),
            rsa: d.join("id_rsa"),
            ed25519_encrypted: d.join("id_ed25519_enc"),
            unauthorized: d.join("id_unauthorized"),
        };
        keygen(&keys.ed25519, "ed25519", "", "rr-test-ed25519")?;
        keygen(&keys.rsa, "rsa", "", "rr-test-rsa")?;
        keygen(
            &keys.ed25519_encrypted,
            "ed25519",
            SENTINEL_PASSPHRASE,
            "rr-test-enc",
        )?;
        keygen(&keys.unauthorized, "ed25519", "", "rr-test-unauthorized")?;

        // One authorized_keys file for every login user: `AuthorizedKeysFile` is an absolute path
        // (no %h/%u), so each account in `AllowUsers` accepts the same client keys.
        let mut authorized = String::new();
        for k in [&keys.ed25519, &keys.rsa, &keys.ed25519_encrypted] {
            authorized.push_str(&fs::read_to_string(pub_path(k))?);
        }
        let authorized_keys = d.join("authorized_keys");
        fs::write(&authorized_keys, authorized)?;
        fs::set_permissions(&authorized_keys, fs::Permissions::from_mode(0o644))?;

        let host_public_key = fs::read_to_string(pub_path(&host_key))?;
        let host_public_key = host_public_key
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        let host_key_fingerprint = fingerprint(&pub_path(&host_key))?;
        let mut host_keys = vec![host_key.clone()];
        let mut host_rsa_public_key = None;
        if opts.rsa_host_key {
            let rsa = d.join("host_rsa");
            keygen(&rsa, "rsa", "", "rr-test-host-rsa")?;
            let text = fs::read_to_string(pub_path(&rsa))?;
            host_rsa_public_key = Some(
                text.split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            host_keys.push(rsa);
        }

        let log = d.join("sshd.log");
        let cfg_path = d.join("sshd_config");
        let mut last_err = anyhow!("sshd did not start");
        for _attempt in 0..5 {
            let port = free_port()?;
            write_sshd_config(&cfg_path, &opts, d, port, &host_keys, &authorized_keys)?;
            let out = Command::new(SSHD)
                .arg("-t")
                .arg("-f")
                .arg(&cfg_path)
                .output()?;
            if !out.status.success() {
                bail!(
                    "sshd -t rejected the generated config: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let log_file = fs::File::create(&log)?;
            let mut child = Command::new(SSHD)
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&cfg_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file)
                .spawn()
                .with_context(|| format!("spawn {SSHD}"))?;
            match wait_ready(&mut child, port) {
                Ok(()) => {
                    let known_hosts = d.join("known_hosts");
                    fs::write(
                        &known_hosts,
                        format!("[127.0.0.1]:{port} {host_public_key}\n"),
                    )?;
                    let ssh_config = d.join("ssh_config");
                    fs::write(
                        &ssh_config,
                        format!(
                            "Host {HOST_ALIAS}\n    HostName 127.0.0.1\n    Port {port}\n    User {TEST_USER}\n    IdentityFile {}\n    UserKnownHostsFile {}\n    StrictHostKeyChecking yes\n",
                            keys.ed25519.display(),
                            known_hosts.display()
                        ),
                    )?;
                    return Ok(Sshd {
                        dir,
                        child,
                        port,
                        host_key_fingerprint,
                        host_public_key,
                        host_rsa_public_key,
                        keys,
                        known_hosts,
                        ssh_config,
                        log,
                    });
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let text = fs::read_to_string(&log).unwrap_or_default();
                    last_err = e.context(format!("sshd log:\n{text}"));
                }
            }
        }
        Err(last_err)
    }

    /// The test bed's private directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn user(&self) -> &'static str {
        TEST_USER
    }

    pub fn password(&self) -> &'static str {
        SENTINEL_PASSWORD
    }

    /// The environment of a `botmux-remote-runner` reaching this server as the login user with
    /// its key: `state` is the local state dir, `cwd` the remote working directory.
    pub fn provider_env(&self, state: &Path, cwd: &Path) -> Vec<(&'static str, String)> {
        vec![
            ("REMOTE_RUNNER_STATE_DIR", state.display().to_string()),
            ("REMOTE_RUNNER_HOST", "127.0.0.1".into()),
            ("REMOTE_RUNNER_PORT", self.port.to_string()),
            ("REMOTE_RUNNER_USER", self.user().into()),
            (
                "REMOTE_RUNNER_KEY_PATH",
                self.keys.ed25519.display().to_string(),
            ),
            (
                "REMOTE_RUNNER_KNOWN_HOSTS",
                self.known_hosts.display().to_string(),
            ),
            ("REMOTE_RUNNER_REMOTE_CWD", cwd.display().to_string()),
            ("SSH_AUTH_SOCK", String::new()),
        ]
    }

    /// pid of the listening sshd.
    pub fn listener_pid(&self) -> u32 {
        self.child.id()
    }

    /// pids of the per-connection sshd processes (direct children of the listener).
    pub fn connection_pids(&self) -> Vec<u32> {
        children_of(self.listener_pid())
    }

    /// Every process below the listener: per-connection sshd monitors, their unprivileged
    /// children (which carry the traffic for a non-root login) and the user's commands.
    pub fn connection_tree_pids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut frontier = vec![self.listener_pid()];
        while let Some(p) = frontier.pop() {
            for c in children_of(p) {
                out.push(c);
                frontier.push(c);
            }
        }
        out
    }

    /// Send `signal` (e.g. `libc::SIGKILL`, `SIGSTOP`, `SIGCONT`) to every per-connection
    /// process. Returns how many processes were signalled.
    pub fn signal_connections(&self, signal: i32) -> usize {
        let pids = self.connection_tree_pids();
        let mut n = 0;
        for pid in pids {
            let Ok(pid) = i32::try_from(pid) else {
                continue;
            };
            // The `kill` binary keeps this crate free of `unsafe` (libc::kill is unsafe).
            let status = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
            if status.map(|s| s.success()).unwrap_or(false) {
                n += 1;
            }
        }
        n
    }

    /// Send `signal` to the listening sshd only (e.g. SIGSTOP: new connections hang in the
    /// handshake; SIGCONT resumes). Returns whether it was delivered.
    pub fn signal_listener(&self, signal: i32) -> bool {
        Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.listener_pid().to_string())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    /// Wait (bounded) until at least `n` per-connection sshd processes exist.
    pub fn wait_connections(&self, n: usize, deadline: Duration) -> bool {
        let until = Instant::now() + deadline;
        while Instant::now() < until {
            if self.connection_pids().len() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// A fresh directory owned by [`TEST_USER`] for remote file tests.
    pub fn remote_dir(&self, name: &str) -> Result<PathBuf> {
        self.remote_dir_as(name, TEST_USER)
    }

    /// A fresh directory owned by `user` (e.g. an [`Account`]'s) for remote tests.
    pub fn remote_dir_as(&self, name: &str, user: &str) -> Result<PathBuf> {
        let p = self.dir.path().join("remote").join(name);
        fs::create_dir_all(&p)?;
        fs::set_permissions(
            self.dir.path().join("remote"),
            fs::Permissions::from_mode(0o755),
        )?;
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{user}:{user}"))
            .arg(&p)
            .status()?;
        if !status.success() {
            bail!("chown {} failed", p.display());
        }
        Ok(p)
    }

    /// sshd's log so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Thaw anything a test froze, then kill the whole tree.
        self.signal_listener(libc::SIGCONT);
        self.signal_connections(libc::SIGCONT);
        self.signal_connections(libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `ssh-agent` with one key loaded. Killed on drop.
#[derive(Debug)]
pub struct Agent {
    _dir: tempfile::TempDir,
    child: Child,
    /// The agent's socket (what `SSH_AUTH_SOCK` would hold).
    pub socket: PathBuf,
}

impl Agent {
    /// Start an agent and add `key` (an unencrypted private key file) to it.
    pub fn start_with_key(key: &Path) -> Result<Agent> {
        let dir = tempfile::Builder::new().prefix("rr-agent-").tempdir()?;
        let socket = dir.path().join("agent.sock");
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context(format!("spawn ssh-agent; {INSTALL_HINT}"))?;
        let mut agent = Agent {
            _dir: dir,
            child,
            socket,
        };
        let until = Instant::now() + Duration::from_secs(10);
        while !agent.socket.exists() {
            if Instant::now() > until {
                bail!("ssh-agent did not create its socket within 10 s");
            }
            if let Some(status) = agent.child.try_wait()? {
                bail!("ssh-agent exited early: {status}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = Command::new("ssh-add")
            .arg(key)
            .env("SSH_AUTH_SOCK", &agent.socket)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            let _ = agent.child.kill();
            bail!("ssh-add failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(agent)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fail with an install hint when a required tool is missing.
pub fn check_tools() -> Result<()> {
    if !Path::new(SSHD).exists() {
        bail!("{SSHD} not found; {INSTALL_HINT}");
    }
    for tool in ["ssh-keygen", "ssh-agent", "ssh-add", "tmux"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !found {
            bail!("{tool} not found; {INSTALL_HINT}");
        }
    }
    Ok(())
}

/// Make sure [`TEST_USER`] exists with [`SENTINEL_PASSWORD`]. Idempotent and safe across
/// parallel tests and processes (serialised by a lock file).
pub fn ensure_test_user() -> Result<()> {
    with_user_lock(|| ensure_user_locked(TEST_USER, "/bin/bash"))
}

/// Run `f` holding the lock file that serialises user creation across tests and processes.
fn with_user_lock<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let lock_path = std::env::temp_dir().join("remote-runner-testkit-user.lock");
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("open {}", lock_path.display()))?;
    lock.lock().context("lock the test-user lock file")?;
    let result = f();
    let _ = lock.unlock();
    result
}

fn is_root() -> Result<bool> {
    Ok(Command::new("id").arg("-u").output()?.stdout == b"0\n")
}

/// The login shell of `user` from the passwd database, or `None` when there is no such user.
fn passwd_shell(user: &str) -> Result<Option<String>> {
    let out = Command::new("getent").arg("passwd").arg(user).output()?;
    if !out.status.success() {
        return Ok(None);
    }
    let line = String::from_utf8_lossy(&out.stdout);
    Ok(line.trim_end().rsplit(':').next().map(str::to_string))
}

/// The home directory of `user` from the passwd database.
pub(crate) fn passwd_home(user: &str) -> Result<PathBuf> {
    let out = Command::new("getent").arg("passwd").arg(user).output()?;
    if !out.status.success() {
        bail!("user {user} not found in the passwd database");
    }
    let line = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
    line.split(':')
        .nth(5)
        .filter(|h| h.starts_with('/'))
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("no home directory for {user} in {line:?}"))
}

/// Create `user` (login shell `shell`, a home directory) when missing, fix its shell when it
/// differs, and give it [`SENTINEL_PASSWORD`]. The caller holds the user lock.
fn ensure_user_locked(user: &str, shell: &str) -> Result<()> {
    let current = passwd_shell(user)?;
    let root = is_root()?;
    if !root {
        return match current {
            Some(s) if s == shell => Ok(()),
            _ => bail!(
                "the test login user {user} (login shell {shell}) does not exist and we are not \
                 root; create it with: sudo useradd -m -s {shell} {user} && echo '{user}:<password>' \
                 | sudo chpasswd"
            ),
        };
    }
    if !Path::new(shell).exists() {
        bail!(
            "login shell {shell} for {user} is not installed; install it with: scripts/install-deps.sh"
        );
    }
    let created = match current.as_deref() {
        None => {
            let out = Command::new("useradd")
                .args(["-m", "-s", shell, user])
                .output()?;
            if !out.status.success() {
                bail!(
                    "useradd {user} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            true
        }
        Some(s) if s != shell => {
            let out = Command::new("usermod").args(["-s", shell, user]).output()?;
            if !out.status.success() {
                bail!(
                    "usermod -s {shell} {user} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            false
        }
        Some(_) => false,
    };
    let marker = std::env::temp_dir().join(format!("remote-runner-testkit-user-{user}.pw"));
    let want = format!("{}\n", SENTINEL_PASSWORD.len());
    if fs::read_to_string(&marker).ok().as_deref() != Some(want.as_str()) || created {
        let mut child = Command::new("chpasswd")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("chpasswd stdin"))?
            .write_all(format!("{user}:{SENTINEL_PASSWORD}\n").as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "chpasswd for {user} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        fs::write(&marker, want)?;
    }
    Ok(())
}

/// What every startup file of a [`LoginShell`] account prints, on stdout and on stderr (followed
/// by the file's name in parentheses). It must never reach a command's output.
pub const GREETING: &str = "Welcome to the lab host";
/// An executable in `$HOME/rr-tools/bin` of every [`LoginShell`] account, a directory that only
/// the account's own startup files add to PATH.
pub const PATH_PROBE: &str = "rr-path-probe";
/// What [`PATH_PROBE`] prints (followed by a newline).
pub const PATH_PROBE_OUTPUT: &str = "probe-ok";

/// The login shell of a test account made by [`ensure_login_account`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoginShell {
    /// `/bin/bash`; `.bashrc` prints a greeting at its top, defines an alias `ll` and a
    /// function `rr_user_fn`, exports `RR_FROM_BASHRC=1` and PATH; `.bash_profile` and
    /// `.profile` print too (Debian's chain: `.bash_profile` -> `.profile` -> `.bashrc`).
    Bash,
    /// `/usr/bin/zsh`; `.zshenv` exports `RR_FROM_ZSHENV=1`, `.zprofile` adds PATH, `.zshrc`
    /// sets a prompt; each prints.
    Zsh,
    /// `/usr/bin/fish`; `~/.config/fish/config.fish` prints, exports `RR_FROM_FISH=1` and PATH.
    Fish,
    /// `/bin/sh` (dash on Debian); `.profile` prints, exports `RR_FROM_PROFILE=1` and PATH.
    Sh,
}

impl LoginShell {
    /// Every kind, in a fixed order.
    pub const ALL: [LoginShell; 4] = [
        LoginShell::Bash,
        LoginShell::Zsh,
        LoginShell::Fish,
        LoginShell::Sh,
    ];

    /// The account's user name: `rrtest-bash`, `rrtest-zsh`, `rrtest-fish`, `rrtest-sh`.
    pub fn user(self) -> &'static str {
        match self {
            LoginShell::Bash => "rrtest-bash",
            LoginShell::Zsh => "rrtest-zsh",
            LoginShell::Fish => "rrtest-fish",
            LoginShell::Sh => "rrtest-sh",
        }
    }

    /// The login shell's path in the passwd database.
    pub fn path(self) -> &'static str {
        match self {
            LoginShell::Bash => "/bin/bash",
            LoginShell::Zsh => "/usr/bin/zsh",
            LoginShell::Fish => "/usr/bin/fish",
            LoginShell::Sh => "/bin/sh",
        }
    }

    /// The variable (value `1`) that the account's startup files export.
    pub fn env_var(self) -> &'static str {
        match self {
            LoginShell::Bash => "RR_FROM_BASHRC",
            LoginShell::Zsh => "RR_FROM_ZSHENV",
            LoginShell::Fish => "RR_FROM_FISH",
            LoginShell::Sh => "RR_FROM_PROFILE",
        }
    }

    /// The startup files (relative to the home directory) and their contents.
    pub fn startup_files(self) -> Vec<(&'static str, String)> {
        fn hello(file: &str) -> String {
            format!("echo \"{GREETING} ({file})\"\necho \"{GREETING} ({file}, stderr)\" >&2\n")
        }
        match self {
            LoginShell::Bash => vec![
                (
                    ".bashrc",
                    format!(
                        "# ~/.bashrc of a lab host user: greets on every run, interactive or not.\n\
                         {}\
                         case \":$PATH:\" in *\":$HOME/rr-tools/bin:\"*) ;; *) PATH=\"$HOME/rr-tools/bin:$PATH\" ;; esac\n\
                         export PATH\n\
                         export RR_FROM_BASHRC=1\n\
                         alias ll='ls -l'\n\
                         rr_user_fn() {{ echo user-fn-ok; }}\n\
                         \n\
                         # If not running interactively, don't do anything more.\n\
                         case $- in\n    *i*) ;;\n      *) return;;\nesac\n\
                         HISTCONTROL=ignoreboth\n\
                         shopt -s histappend checkwinsize\n\
                         PS1='\\u@lab:\\w\\$ '\n",
                        hello(".bashrc")
                    ),
                ),
                (
                    ".bash_profile",
                    format!(
                        "# ~/.bash_profile: read by login shells.\n{}\
                         if [ -f \"$HOME/.profile\" ]; then . \"$HOME/.profile\"; fi\n",
                        hello(".bash_profile")
                    ),
                ),
                (
                    ".profile",
                    format!(
                        "# ~/.profile: Debian's, plus a greeting.\n{}\
                         if [ -n \"$BASH_VERSION\" ] && [ -f \"$HOME/.bashrc\" ]; then . \"$HOME/.bashrc\"; fi\n",
                        hello(".profile")
                    ),
                ),
            ],
            LoginShell::Zsh => vec![
                (
                    ".zshenv",
                    format!(
                        "# ~/.zshenv: read by every zsh.\n{}export RR_FROM_ZSHENV=1\n",
                        hello(".zshenv")
                    ),
                ),
                (
                    ".zprofile",
                    format!(
                        "# ~/.zprofile: read by login zsh.\n{}\
                         typeset -U path\n\
                         path=(\"$HOME/rr-tools/bin\" $path)\n\
                         export PATH\n",
                        hello(".zprofile")
                    ),
                ),
                (
                    ".zshrc",
                    format!(
                        "# ~/.zshrc: read by interactive zsh.\n{}\
                         PROMPT='%n@lab %~ %# '\n\
                         setopt interactive_comments\n",
                        hello(".zshrc")
                    ),
                ),
            ],
            LoginShell::Fish => vec![(
                ".config/fish/config.fish",
                format!(
                    "# ~/.config/fish/config.fish: read by every fish.\n{}\
                     set -gx RR_FROM_FISH 1\n\
                     if not contains -- $HOME/rr-tools/bin $PATH\n    set -gx PATH $HOME/rr-tools/bin $PATH\nend\n",
                    hello("config.fish")
                ),
            )],
            LoginShell::Sh => vec![(
                ".profile",
                format!(
                    "# ~/.profile: read by login sh.\n{}\
                     PATH=\"$HOME/rr-tools/bin:$PATH\"\n\
                     export PATH\n\
                     export RR_FROM_PROFILE=1\n",
                    hello(".profile")
                ),
            )],
        }
    }
}

/// A login account made by [`ensure_login_account`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub user: String,
    pub home: PathBuf,
    pub shell: LoginShell,
}

/// Make sure the account for `shell` exists (see [`LoginShell`]): user [`LoginShell::user`] with
/// login shell [`LoginShell::path`], password [`SENTINEL_PASSWORD`], its startup files (which
/// print [`GREETING`] on stdout and stderr, and set PATH and [`LoginShell::env_var`]) and
/// `$HOME/rr-tools/bin/`[`PATH_PROBE`]. Idempotent and safe across parallel tests and processes
/// (the same lock as [`ensure_test_user`]); files are rewritten only when their content differs,
/// atomically. Every [`Sshd`] accepts the test client keys for these accounts.
pub fn ensure_login_account(shell: LoginShell) -> Result<Account> {
    with_user_lock(|| {
        let user = shell.user();
        ensure_user_locked(user, shell.path())?;
        let home = passwd_home(user)?;
        if !home.is_dir() {
            bail!("home directory {} of {user} is missing", home.display());
        }
        if is_root()? {
            let mut files = shell.startup_files();
            files.push((
                "rr-tools/bin/rr-path-probe",
                format!("#!/bin/sh\necho {PATH_PROBE_OUTPUT}\n"),
            ));
            for (rel, text) in &files {
                let mode = if rel.ends_with(PATH_PROBE) {
                    0o755
                } else {
                    0o644
                };
                write_owned(&home, rel, text, mode, user)?;
            }
        } else if !home.join("rr-tools/bin").join(PATH_PROBE).exists() {
            bail!(
                "{user} exists but its startup files are not set up, and only root can write them; \
                 run this test suite once as root"
            );
        }
        Ok(Account {
            user: user.to_string(),
            home,
            shell,
        })
    })
}

/// Write `home/rel` (creating its parent directories) when its content or mode differs, through
/// a temp file and a rename, and give every created path to `user`.
fn write_owned(home: &Path, rel: &str, text: &str, mode: u32, user: &str) -> Result<()> {
    let path = home.join(rel);
    let mut dir = home.to_path_buf();
    if let Some(parent) = Path::new(rel).parent() {
        for part in parent.components() {
            dir.push(part);
            if !dir.is_dir() {
                fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
                chown(&dir, user)?;
            }
        }
    }
    let same = fs::read(&path).ok().as_deref() == Some(text.as_bytes())
        && fs::metadata(&path)
            .map(|m| m.permissions().mode() & 0o7777 == mode)
            .unwrap_or(false);
    if same {
        return Ok(());
    }
    let tmp = dir.join(format!(
        ".{}.rr-testkit-tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    chown(&tmp, user)?;
    fs::rename(&tmp, &path).with_context(|| format!("rename onto {}", path.display()))?;
    Ok(())
}

fn chown(path: &Path, user: &str) -> Result<()> {
    let status = Command::new("chown")
        .arg(format!("{user}:{user}"))
        .arg(path)
        .status()?;
    if !status.success() {
        bail!("chown {user} {} failed", path.display());
    }
    Ok(())
}

/// Every user a test bed's sshd lets in: [`TEST_USER`] and the [`LoginShell`] accounts.
fn allowed_users() -> Vec<&'static str> {
    let mut users = vec![TEST_USER];
    users.extend(LoginShell::ALL.iter().map(|s| s.user()));
    users
}

fn pub_path(key: &Path) -> PathBuf {
    let mut s = key.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

fn keygen(path: &Path, kind: &str, passphrase: &str, comment: &str) -> Result<()> {
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", kind]);
    if kind == "rsa" {
        cmd.args(["-b", "3072"]);
    }
    // The passphrase goes in argv of a local helper only for the test key; it is a fixed test
    // sentinel, not a user secret.
    cmd.arg("-N")
        .arg(passphrase)
        .arg("-C")
        .arg(comment)
        .arg("-f")
        .arg(path);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context(format!("run ssh-keygen; {INSTALL_HINT}"))?;
    if !out.status.success() {
        bail!(
            "ssh-keygen -t {kind} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `SHA256:...` fingerprint of a public key file.
pub fn fingerprint(pub_file: &Path) -> Result<String> {
    let out = Command::new("ssh-keygen")
        .args(["-l", "-E", "sha256", "-f"])
        .arg(pub_file)
        .output()?;
    if !out.status.success() {
        bail!(
            "ssh-keygen -l failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .map(str::to_string)
        .ok_or_else(|| anyhow!("unexpected ssh-keygen -l output"))
}

/// Generate a fresh ed25519 key pair (e.g. a second host key for changed-key tests). Returns the
/// public key line `ssh-ed25519 AAAA...`.
pub fn generate_public_key(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join(name);
    keygen(&path, "ed25519", "", name)?;
    let text = fs::read_to_string(pub_path(&path))?;
    Ok(text
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" "))
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn write_sshd_config(
    path: &Path,
    opts: &SshdBuilder,
    dir: &Path,
    port: u16,
    host_keys: &[PathBuf],
    authorized_keys: &Path,
) -> Result<()> {
    let mut cfg = String::new();
    for k in host_keys {
        cfg.push_str(&format!("HostKey {}\n", k.display()));
    }
    cfg.push_str(&format!(
        "ListenAddress 127.0.0.1\n\
         Port {port}\n\
         PidFile {}\n\
         AuthorizedKeysFile {}\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication yes\n\
         KbdInteractiveAuthentication yes\n\
         UsePAM yes\n\
         StrictModes no\n\
         PermitRootLogin no\n\
         AllowUsers {}\n\
         Subsystem sftp internal-sftp\n\
         LogLevel VERBOSE\n\
         MaxStartups 100:30:200\n",
        dir.join("sshd.pid").display(),
        authorized_keys.display(),
        allowed_users().join(" "),
    ));
    if let Some(n) = opts.max_sessions {
        cfg.push_str(&format!("MaxSessions {n}\n"));
    }
    for line in &opts.extra_config {
        cfg.push_str(line);
        cfg.push('\n');
    }
    fs::write(path, cfg)?;
    Ok(())
}

fn wait_ready(child: &mut Child, port: u16) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("sshd exited during startup with {status}");
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut buf = [0u8; 8];
            if s.read_exact(&mut buf).is_ok() && buf.starts_with(b"SSH-2.0") {
                return Ok(());
            }
        }
        if Instant::now() > until {
            bail!("sshd did not accept connections on 127.0.0.1:{port} within 15 s");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the `(comm)`: state ppid ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

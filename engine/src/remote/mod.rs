//! The remote control plane: how the engine runs its own scripts on a machine.
//!
//! sshd runs every exec string through the user's login shell (bash, zsh, fish, dash, tcsh)
//! after its startup files, which may print anything. So the engine sends one fixed line that
//! every one of those shells parses the same way,
//!
//! ```text
//! exec /bin/sh -c '<find ctl-HASH.sh under the state root, check it, exec it>' rr VERB NONCE
//! ```
//!
//! (the check, of the script and the directories above it, is the line's own: see
//! [`bootstrap_line`]),
//!
//! and everything variable travels as data: the verb's parameters as shell assignments on stdin
//! (ended by a nonce line), then the verb's own input. The control script (`ctl.sh`, a real
//! POSIX sh file in this directory, shellchecked and tested under dash, bash and busybox sh) is
//! installed once per machine under `${XDG_STATE_HOME:-~/.local/state}/remote-runner/lib/`, named
//! by its content hash, the first time a call finds it missing. Its replies start after a line
//! holding the per-call nonce, on stdout and on stderr: what startup files print comes before it
//! and can neither break a reply nor forge one.
//!
//! The `local` machine runs the same line through `sh -c`, so local tests exercise the same
//! scripts as SSH ones.
//!
//! This module is the layer above the byte transport ([`crate::transport`]): a call runs over
//! any [`Transport`], by the route of the machine's [`ControlPlane`] ([`Remote`]: a kept control
//! process, the CLI's connection keeper, or a Slurm job's node).

mod channels;
mod plane;
mod tools;

use std::sync::LazyLock;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorCode, Result};
use crate::transport::{ExecOptions, ExecOutput, Transport, shell_quote};

pub use channels::ControlChannels;
pub use plane::{ControlPlane, Direct, Remote};
pub use tools::{MIN_BASH, MIN_TMUX, RemoteTools, prepare};

/// The control script, as installed on machines.
pub const CTL_SCRIPT: &str = include_str!("ctl.sh");

/// `ctl-<first 16 hex digits of its sha256>.sh`: a new version never replaces an old one that
/// a process of an older build may still be running.
pub static CTL_NAME: LazyLock<String> = LazyLock::new(|| {
    let hash = Sha256::digest(CTL_SCRIPT.as_bytes());
    let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("ctl-{hex}.sh")
});

/// Bytes of startup-file output kept before a reply on top of the caller's cap.
const STARTUP_NOISE_ROOM: usize = 64 << 10;

/// Exit status of the bootstrap line when the control script is not installed yet.
const NOT_INSTALLED: i32 = 97;

/// Exit status of the bootstrap line when the control script or a directory above it fails
/// the ownership check: nothing was run.
const INSECURE: i32 = 98;

/// One call of a control-script verb.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    verb: &'a str,
    params: Vec<(&'a str, String)>,
    data: Option<&'a [u8]>,
    limit: Option<Duration>,
    max_output: usize,
}

impl<'a> Call<'a> {
    pub fn new(verb: &'a str) -> Call<'a> {
        Call {
            verb,
            params: Vec::new(),
            data: None,
            limit: Some(Duration::from_secs(30)),
            max_output: 1 << 20,
        }
    }

    /// A parameter: any text (newlines, quotes, `#(...)` included); it reaches the script as a
    /// shell variable, never as code.
    pub fn param(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.params.push((name, value.into()));
        self
    }

    /// Bytes the verb reads on its stdin.
    pub fn data(mut self, data: &'a [u8]) -> Self {
        self.data = Some(data);
        self
    }

    /// Bound on the whole call.
    pub fn limit(mut self, limit: Duration) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Bound on the whole call, or none.
    pub fn limit_opt(mut self, limit: Option<Duration>) -> Self {
        self.limit = limit;
        self
    }

    /// Keep at most this many bytes of each of stdout and stderr.
    pub fn max_output(mut self, max: usize) -> Self {
        self.max_output = max;
        self
    }

    /// The verb.
    pub fn verb(&self) -> &'a str {
        self.verb
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[(&'a str, String)] {
        &self.params
    }

    /// The verb's input, if any.
    pub fn input(&self) -> Option<&'a [u8]> {
        self.data
    }

    /// The bound on the whole call.
    pub fn bound(&self) -> Option<Duration> {
        self.limit
    }

    /// The cap on each of stdout and stderr.
    pub fn output_cap(&self) -> usize {
        self.max_output
    }

    /// Run the verb on `remote`, by the route of its control plane ([`ControlPlane`]); the
    /// control script is installed first when the machine lacks it. The output is the verb's
    /// own: everything before the nonce line is dropped.
    pub async fn run(&self, remote: &Remote) -> Result<ExecOutput> {
        remote.call(self).await
    }

    /// Run the verb on its own exec channel of `transport` (installing the control script first
    /// when the machine lacks it): the route of a call no control process takes.
    pub(crate) async fn run_on_own_channel(&self, transport: &dyn Transport) -> Result<ExecOutput> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let out = self.exec_once(transport, &nonce).await?;
        if let Some(e) = refusal(transport, &out.status, &out.stdout, &nonce) {
            return Err(e);
        }
        if out.status.code() == Some(NOT_INSTALLED)
            && let Some(root) = install_request(&out.stdout, &nonce)
        {
            install(transport, &root).await?;
            let nonce = uuid::Uuid::new_v4().simple().to_string();
            let out = self.exec_once(transport, &nonce).await?;
            if let Some(e) = refusal(transport, &out.status, &out.stdout, &nonce) {
                return Err(e);
            }
            return unframe(transport, out, &nonce);
        }
        unframe(transport, out, &nonce)
    }

    /// The caller's cap, applied to the reply itself.
    pub(crate) fn cap(&self, mut out: ExecOutput) -> ExecOutput {
        if out.stdout.len() > self.max_output {
            out.stdout.truncate(self.max_output);
            out.stdout_truncated = true;
        }
        if out.stderr.len() > self.max_output {
            out.stderr.truncate(self.max_output);
            out.stderr_truncated = true;
        }
        out
    }

    async fn exec_once(&self, transport: &dyn Transport, nonce: &str) -> Result<ExecOutput> {
        let mut stdin = Vec::new();
        for (name, value) in &self.params {
            stdin.extend_from_slice(format!("{name}={}\n", shell_quote(value)).as_bytes());
        }
        stdin.extend_from_slice(format!("@rr:{nonce}:end\n").as_bytes());
        if let Some(data) = self.data {
            stdin.extend_from_slice(data);
        }
        transport
            .exec_raw(
                &bootstrap_line(self.verb, nonce),
                ExecOptions {
                    stdin: Some(stdin),
                    timeout: self.limit,
                    // Room for what startup files print before the reply.
                    max_output: self.max_output.saturating_add(STARTUP_NOISE_ROOM),
                },
            )
            .await
    }
}

/// Run a small POSIX sh script on the machine through the control plane (any login shell), with
/// `stdin` as its standard input.
pub async fn sh(
    remote: &Remote,
    script: &str,
    stdin: Option<&[u8]>,
    limit: Option<Duration>,
    max_output: usize,
) -> Result<ExecOutput> {
    let mut call = Call::new("sh")
        .param("RR_SCRIPT", script)
        .limit_opt(limit)
        .max_output(max_output);
    if let Some(data) = stdin {
        call = call.data(data);
    }
    call.run(remote).await
}

/// Start the POSIX sh script `script` on the machine through the control plane (any login
/// shell) on its own channel, and keep it: its stdin and output flow while it runs. Returns the
/// stream and the stdout it printed already; `None` when the transport cannot stream (callers
/// fall back to [`sh`] or the file channel). A stream is a channel of its own on the machine's
/// bytes, whatever route its calls take.
pub async fn sh_stream(
    remote: &Remote,
    script: &str,
) -> Result<Option<(crate::transport::ExecStream, Vec<u8>)>> {
    sh_stream_with(remote, script, &[]).await
}

/// [`sh_stream`] with parameters: each reaches the script as a shell variable, never as code
/// (as [`Call::param`]), so the script's text stays fixed.
pub async fn sh_stream_with(
    remote: &Remote,
    script: &str,
    params: &[(&str, String)],
) -> Result<Option<(crate::transport::ExecStream, Vec<u8>)>> {
    let mut text = format!("RR_SCRIPT={}\n", shell_quote(script));
    for (name, value) in params {
        text.push_str(&format!("{name}={}\n", shell_quote(value)));
    }
    channels::open_verb(remote.bytes(), "sh", &text).await
}

/// The one line sent to the login shell: only words and one single-quoted string without `'`,
/// `\`, `!` or a newline, which bash, zsh, fish, dash, ksh and tcsh all read the same way.
///
/// Before it runs the control script, the line itself checks it the way OpenSSH's StrictModes
/// checks `authorized_keys`: the script and every directory above it, up to the home directory
/// (or `/` for a state root outside it), must belong to the account or root, be a plain file or
/// directory, and be writable by no one else (a root-owned sticky directory such as `/tmp`
/// excepted). The check cannot live in the script: a script someone else put there would
/// check itself. Anything else prints `@rr:NONCE:insecure MODE UID PATH` and exits
/// [`INSECURE`]; nothing runs.
pub fn bootstrap_line(verb: &str, nonce: &str) -> String {
    debug_assert!(verb.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    format!(
        "exec /bin/sh -c 'r=${{XDG_STATE_HOME:-}}; case $r in /*) ;; *) r=$HOME/.local/state ;; \
         esac; f=$r/remote-runner/lib/{ctl}; if [ -r \"$f\" ]; then {check} \
         exec /bin/sh \"$f\" \"$v\" \"$n\"; fi; printf \"@rr:%s:install %s\\n\" \"$2\" \
         \"$r/remote-runner\"; exit {NOT_INSTALLED}' rr {verb} {nonce}",
        ctl = CTL_NAME.as_str(),
        check = format_args!(
            "v=$1 n=$2 {STRICT_MODES} if [ -n \"$p\" ]; then \
             printf \"@rr:%s:insecure %s\\n\" \"$n\" \"$p\"; exit 98; fi;"
        ),
    )
}

/// POSIX sh (one line, without `'`, `\\`, `!`) checking the file in `$f` the way OpenSSH's
/// StrictModes checks `authorized_keys`: it and every directory above it, up to `$HOME` (or `/`
/// for a path outside it), must be a plain file or directory of the account or root, writable
/// by no one else (a root-owned sticky directory excepted). Leaves `p` empty when all is well,
/// else `MODE UID PATH` of the first path that is not (`- - FILE` when one could not be read).
/// Uses `u`, `p` and the positional parameters. One `ls -ldn` for all the paths (few
/// processes: the line runs on every call that opens a channel); each line's mode and owner's
/// uid are its first and third words, the name comes after the date.
pub const STRICT_MODES: &str = "u=$(id -u) p=$f; set -- \"$f\"; \
    while case $p in \"$HOME\"|/|\"\") false ;; */*) ;; *) false ;; esac; do \
    p=${p%/*}; p=${p:-/}; set -- \"$@\" \"$p\"; done; \
    p=$(LC_ALL=C ls -ldn -- \"$@\" 2>/dev/null | { k=0; \
    while read -r m x o g s d1 d2 d3 name; do k=$((k+1)); \
    case $o in \"$u\"|0) ;; *) echo \"$m $o $name\"; exit ;; esac; \
    case $m in [-d]????w*|[-d]???????w*) case $o/$m in 0/d????????t*) ;; \
    *) echo \"$m $o $name\"; exit ;; esac ;; [-d]*) ;; *) echo \"$m $o $name\"; exit ;; esac; \
    done; [ $k = $# ] || echo \"- - $f\"; });";

/// What a script prints on stderr, followed by `MODE UID PATH`, when [`STRICT_MODES`] refused
/// what it was to run.
pub const REFUSED_PREFIX: &str = "remote-runner: refusing to run it: ";

/// `MODE UID PATH` from [`STRICT_MODES`] in words.
pub fn refused_path(words: &str) -> String {
    let mut w = words.splitn(3, ' ');
    match (w.next(), w.next(), w.next()) {
        (Some("-"), _, Some(path)) => {
            format!("{path} (or a directory above it) could not be read")
        }
        (Some(mode), Some(uid), Some(path)) => format!(
            "{} (mode {mode}, owner uid {uid}) is not the account's own, or others can write \
             to it",
            // A symlink's line names its target too.
            if mode.starts_with('l') {
                path.split(" -> ").next().unwrap_or(path)
            } else {
                path
            }
        ),
        _ => words.to_string(),
    }
}

/// The `insecure_remote_dir` error of a bootstrap line that refused to run the control script
/// (exit status [`INSECURE`] and its `@rr:NONCE:insecure MODE UID PATH` line), if it did.
fn refusal(
    transport: &dyn Transport,
    status: &crate::transport::ExitStatus,
    stdout: &[u8],
    nonce: &str,
) -> Option<Error> {
    if status.code() != Some(INSECURE) {
        return None;
    }
    let marker = format!("@rr:{nonce}:insecure ");
    let text = String::from_utf8_lossy(stdout);
    let start = text.find(&marker)? + marker.len();
    let line = text[start..].lines().next()?;
    let why = refused_path(line);
    Some(insecure_error(
        transport,
        &format!(
            "refusing to run remote-runner's control script {}",
            CTL_NAME.as_str()
        ),
        &why,
    ))
}

/// Exit status of a script whose [`check_script_sh`] refused the file it was about to run.
const SCRIPT_REFUSED: i32 = 88;

/// POSIX sh for the start of a script run through the control plane ([`sh`],
/// `Remote::exec`) that is about to run the engine's own file `path` (the code runtime's
/// runner, the chat helper): the file and every directory above it must pass the same
/// StrictModes check as the bootstrap line ([`STRICT_MODES`]), or the script prints the reason
/// after `token` and exits before anything runs. [`script_refusal`] turns that into the error;
/// `token` (fresh per call) keeps what the file prints later from being taken for a refusal.
/// Sets `f`, `u` and `p` and the positional parameters.
pub fn check_script_sh(path: &str, token: &str) -> String {
    format!(
        "f={path}; {STRICT_MODES}\nif [ -n \"$p\" ]; then printf '%s %s\\n' {token} \"$p\"; exit {SCRIPT_REFUSED}; fi\n",
        path = shell_quote(path),
        token = shell_quote(&format!("@rr-refused:{token}")),
    )
}

/// Check the engine's own file `path` (and every directory above it) before something runs it
/// by path: [`STRICT_MODES`]' rules over the transport's file stats, one round of `lstat`s in
/// flight together and no process on the machine (the account's uid and `$HOME` are asked once
/// per connection); `insecure_remote_dir` naming `what` and the path that fails. Through a
/// connection keeper too old to report owners, the control script checks instead.
pub async fn check_script(remote: &Remote, path: &str, what: &str) -> Result<()> {
    let (uid, home) = remote.account().await?;
    let chain = strict_chain(path, &home);
    let seen = futures::future::join_all(chain.iter().map(|p| remote.stat(p)))
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    if seen.iter().flatten().all(|st| st.uid.is_some()) {
        return match strict_refusal(path, &chain, &seen, uid) {
            Some(words) => Err(insecure_error(
                remote.bytes(),
                &format!("refusing to run {what}"),
                &refused_path(&words),
            )),
            None => Ok(()),
        };
    }
    check_script_by_call(remote, path, what).await
}

/// The paths [`STRICT_MODES`] checks for `path`: it, then each directory above it up to
/// `home` (or `/` for a path outside it).
fn strict_chain(path: &str, home: &str) -> Vec<String> {
    let mut chain = vec![path.to_string()];
    let mut p = path.to_string();
    while p != home && p != "/" && !p.is_empty() && p.contains('/') {
        p.truncate(p.rfind('/').unwrap_or(0));
        if p.is_empty() {
            p.push('/');
        }
        chain.push(p.clone());
    }
    chain
}

/// [`STRICT_MODES`]' verdict on the `stats` of `chain` (`path` first): `None` when all is
/// well, else `MODE UID PATH` of the first that is not (`- - PATH` when one is missing).
fn strict_refusal(
    path: &str,
    chain: &[String],
    stats: &[Option<crate::transport::FileStat>],
    uid: u32,
) -> Option<String> {
    use crate::transport::FileKind;
    for (p, stat) in chain.iter().zip(stats) {
        let Some(st) = stat else {
            return Some(format!("- - {path}"));
        };
        let owner = st.uid.unwrap_or(u32::MAX);
        let words = || format!("{} {owner} {p}", mode_string(st));
        if owner != uid && owner != 0 {
            return Some(words());
        }
        if !matches!(st.kind, FileKind::File | FileKind::Dir) {
            return Some(words());
        }
        let others_write = st.mode & 0o022 != 0;
        // A root-owned sticky directory others may enter (`/tmp`): `ls` shows `t`.
        let sticky_root = owner == 0
            && st.kind == FileKind::Dir
            && st.mode & 0o1000 != 0
            && st.mode & 0o001 != 0;
        if others_write && !sticky_root {
            return Some(words());
        }
    }
    None
}

/// The `ls -l` mode string of a stat (`drwxr-xr-x`, `-rw-------`, `drwxrwxrwt`).
fn mode_string(st: &crate::transport::FileStat) -> String {
    use crate::transport::FileKind;
    let mut s = String::with_capacity(10);
    s.push(match st.kind {
        FileKind::Dir => 'd',
        FileKind::File => '-',
        FileKind::Symlink => 'l',
        FileKind::Other => '?',
    });
    let m = st.mode;
    for (shift, special, lower, upper) in [(6, 0o4000, 's', 'S'), (3, 0o2000, 's', 'S'), (0, 0o1000, 't', 'T')] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, m & special != 0) {
            (true, true) => lower,
            (false, true) => upper,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// [`check_script`] as one control call running [`STRICT_MODES`].
async fn check_script_by_call(remote: &Remote, path: &str, what: &str) -> Result<()> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let out = sh(
        remote,
        &format!("{}exit 0\n", check_script_sh(path, &token)),
        None,
        Some(Duration::from_secs(30)),
        64 << 10,
    )
    .await?;
    match script_refusal(remote.bytes(), &out, &token, what) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The `insecure_remote_dir` error of a script whose [`check_script_sh`] (same `token`)
/// refused to run `what`, if it did.
pub fn script_refusal(
    transport: &dyn Transport,
    out: &ExecOutput,
    token: &str,
    what: &str,
) -> Option<Error> {
    if out.status.code() != Some(SCRIPT_REFUSED) {
        return None;
    }
    let marker = format!("@rr-refused:{token} ");
    let text = out.stdout_lossy();
    let why = text.lines().find_map(|l| l.strip_prefix(&marker))?;
    Some(insecure_error(
        transport,
        &format!("refusing to run {what}"),
        &refused_path(why),
    ))
}

/// The `insecure_remote_dir` error: `what` was refused because of `why` (which names the path).
/// The fix is the same wherever the check is made.
pub fn insecure_error(transport: &dyn Transport, what: &str, why: &str) -> Error {
    let why = crate::util::printable_excerpt(why.as_bytes(), 400);
    Error::new(
        ErrorCode::InsecureRemoteDir,
        format!(
            "{what} on {}: {why}; every directory from the home down to remote-runner's files \
             must belong to the account (or root) and be writable by no one else, since another \
             user could put a script there that would run as you. If you did not create it, \
             remove it; otherwise fix it with `chown` and `chmod go-w`, or set XDG_STATE_HOME to a \
             directory the account owns",
            transport.describe()
        ),
    )
}

/// The state root named by a bootstrap line that found no control script.
fn install_request(stdout: &[u8], nonce: &str) -> Option<String> {
    let marker = format!("@rr:{nonce}:install ");
    let text = String::from_utf8_lossy(stdout);
    let start = text.find(&marker)? + marker.len();
    let root = text[start..].lines().next()?.to_string();
    root.starts_with('/').then_some(root)
}

/// Put the control script in place: `<root>/lib/ctl-HASH.sh`, directories 0700, written
/// atomically (two processes installing at once both succeed).
async fn install(transport: &dyn Transport, root: &str) -> Result<()> {
    let lib = format!("{root}/lib");
    transport.create_dir_all(&lib, 0o700).await.map_err(|e| {
        Error::new(
            e.code,
            format!(
                "cannot create remote-runner's state directory {lib} on {}: {}; make sure the \
                 account can write to it (or set XDG_STATE_HOME in its environment to a directory \
                 it owns)",
                transport.describe(),
                e.message
            ),
        )
    })?;
    let path = format!("{lib}/{}", CTL_NAME.as_str());
    transport
        .write_file(&path, CTL_SCRIPT.as_bytes(), 0o600)
        .await
}

/// The verb's reply: the output after the nonce line on each stream.
fn unframe(transport: &dyn Transport, mut out: ExecOutput, nonce: &str) -> Result<ExecOutput> {
    let marker = format!("@rr:{nonce}:begin\n");
    let Some(start) = find(&out.stdout, marker.as_bytes()) else {
        let said =
            crate::util::printable_excerpt(&[&out.stdout[..], &out.stderr[..]].concat(), 400);
        return Err(Error::new(
            ErrorCode::RemoteError,
            format!(
                "the login shell on {} did not run remote-runner's control script (status {:?}); \
                 it printed: {said:?}; check that /bin/sh exists there and that the account's \
                 startup files do not exit or replace the shell for non-interactive commands",
                transport.describe(),
                out.status
            ),
        ));
    };
    out.stdout.drain(..start + marker.len());
    if let Some(start) = find(&out.stderr, marker.as_bytes()) {
        out.stderr.drain(..start + marker.len());
    }
    Ok(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(kind: crate::transport::FileKind, mode: u32, uid: u32) -> Option<crate::transport::FileStat> {
        Some(crate::transport::FileStat {
            kind,
            size: 0,
            mode,
            mtime: 0,
            uid: Some(uid),
        })
    }

    #[test]
    fn strict_chain_stops_at_home_or_root() {
        assert_eq!(
            strict_chain("/home/u/.local/state/x.sh", "/home/u"),
            ["/home/u/.local/state/x.sh", "/home/u/.local/state", "/home/u/.local", "/home/u"]
        );
        assert_eq!(strict_chain("/tmp/a/x.sh", "/home/u"), ["/tmp/a/x.sh", "/tmp/a", "/tmp", "/"]);
        assert_eq!(strict_chain("x.sh", "/home/u"), ["x.sh"]);
    }

    #[test]
    fn strict_refusal_follows_strict_modes() {
        use crate::transport::FileKind::{Dir, File, Symlink};
        let chain: Vec<String> = ["/tmp/d/x.sh", "/tmp/d", "/tmp", "/"].map(String::from).to_vec();
        let ok = [
            stat(File, 0o700, 1001),
            stat(Dir, 0o755, 1001),
            stat(Dir, 0o1777, 0),
            stat(Dir, 0o755, 0),
        ];
        assert_eq!(strict_refusal("/tmp/d/x.sh", &chain, &ok, 1001), None);
        let verdict = |i: usize, st| {
            let mut stats = ok.clone();
            stats[i] = st;
            strict_refusal("/tmp/d/x.sh", &chain, &stats, 1001)
        };
        // Others can write the file; group can write a directory; another owner; a symlink;
        // a sticky directory that is not root's, or root's without search for others.
        assert_eq!(verdict(0, stat(File, 0o777, 1001)).unwrap(), "-rwxrwxrwx 1001 /tmp/d/x.sh");
        assert_eq!(verdict(1, stat(Dir, 0o775, 1001)).unwrap(), "drwxrwxr-x 1001 /tmp/d");
        assert_eq!(verdict(1, stat(Dir, 0o755, 1002)).unwrap(), "drwxr-xr-x 1002 /tmp/d");
        assert_eq!(verdict(0, stat(Symlink, 0o777, 1001)).unwrap(), "lrwxrwxrwx 1001 /tmp/d/x.sh");
        assert_eq!(verdict(2, stat(Dir, 0o1777, 1001)).unwrap(), "drwxrwxrwt 1001 /tmp");
        assert_eq!(verdict(2, stat(Dir, 0o1776, 0)).unwrap(), "drwxrwxrwT 0 /tmp");
        // Root's own files and directories pass; a missing one names the file.
        assert_eq!(verdict(1, stat(Dir, 0o755, 0)), None);
        assert_eq!(verdict(1, None).unwrap(), "- - /tmp/d/x.sh");
        assert_eq!(
            refused_path("-rwxrwxrwx 1001 /tmp/d/x.sh"),
            "/tmp/d/x.sh (mode -rwxrwxrwx, owner uid 1001) is not the account's own, or others \
             can write to it"
        );
    }

    #[test]
    fn bootstrap_line_is_plain_for_every_shell() {
        let line = bootstrap_line("start_command", "0123abcd");
        let quoted = line.split('\'').nth(1).unwrap();
        // fish reads `\\` and `\'` inside single quotes; tcsh reads `!`.
        for bad in ["\\\\", "\\'", "!", "\n"] {
            assert!(!quoted.contains(bad), "{bad:?} in the quoted part");
        }
        assert_eq!(line.matches('\'').count(), 2);
        assert!(line.ends_with("' rr start_command 0123abcd"));
        // Old csh-family shells limit a word to 1024 bytes.
        assert!(quoted.len() < 1024, "{} bytes: {quoted}", quoted.len());
    }

    #[test]
    fn install_request_needs_the_nonce() {
        let out = b"Welcome\n@rr:abc:install /home/u/.local/state/remote-runner\n";
        assert_eq!(
            install_request(out, "abc").as_deref(),
            Some("/home/u/.local/state/remote-runner")
        );
        assert_eq!(install_request(out, "other"), None);
    }
}

//! The authentication chain, in OpenSSH's order: a `none` probe to learn the server's methods,
//! ssh-agent, identity files (encrypted ones with a passphrase from [`PassphraseSource`]),
//! password, keyboard-interactive answered with the same password.
//!
//! The result always says which methods the server offered and which were tried; no secret ever
//! enters a message or a log line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use russh::MethodKind;
use russh::client::{AuthResult, Handle, KeyboardInteractiveAuthResponse};
use russh::keys::agent::AgentIdentity;
use russh::keys::agent::client::AgentClient;
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg};

use crate::error::{Error, ErrorCode, Result};
use crate::secret::Secret;
use crate::ssh::client::ClientHandler;
use crate::ssh::options::{AgentSource, ConnectOptions, PassphraseSource, Target};

/// Which methods the server offered and what was tried (for errors and `machine doctor`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthReport {
    pub offered: Vec<String>,
    pub tried: Vec<String>,
    pub succeeded: Option<String>,
    /// What was wrong with a key file the user named (missing, unreadable, locked), in order:
    /// the first one is the fix an auth failure leads with.
    pub key_problems: Vec<KeyProblem>,
}

/// A key file the user named that could not be offered, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProblem {
    pub path: PathBuf,
    pub kind: KeyProblemKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyProblemKind {
    /// No file at that path.
    Missing,
    /// The file is there but cannot be read or parsed (the reason, without secrets).
    Unreadable(String),
    /// Encrypted, and no passphrase could be had (why not).
    Locked(String),
    /// Encrypted, and the passphrase given did not decrypt it.
    WrongPassphrase,
}

impl KeyProblem {
    /// What is wrong with the file, and the fix, in one sentence each.
    fn explain(&self) -> (String, String) {
        let p = self.path.display();
        let word = crate::shell::shell_quote(&self.path.display().to_string());
        match &self.kind {
            KeyProblemKind::Missing => (
                format!("the key file {p} does not exist"),
                format!(
                    "point the machine's key_path (or ssh_config IdentityFile) at your private \
                     key, or create this one with `ssh-keygen -t ed25519 -f {word}` and add \
                     {p}.pub to the server's ~/.ssh/authorized_keys"
                ),
            ),
            KeyProblemKind::Unreadable(why) => (
                format!("the key file {p} cannot be read ({why})"),
                format!(
                    "make it a private key readable by you (`chmod 600 {word}`), or point \
                     key_path at another key"
                ),
            ),
            KeyProblemKind::Locked(why) => (
                format!("the key file {p} is encrypted and {why}"),
                format!(
                    "load it into ssh-agent (`ssh-add {word}`) and run again, or run on a \
                     terminal to be asked for its passphrase"
                ),
            ),
            KeyProblemKind::WrongPassphrase => (
                format!("the passphrase did not decrypt the key file {p}"),
                format!("run again and type its passphrase, or load it with `ssh-add {word}`"),
            ),
        }
    }
}

/// Decrypted identity files, kept per pool so a reconnect does not ask again.
#[derive(Debug, Default)]
pub(crate) struct KeyCache {
    keys: Mutex<HashMap<PathBuf, Arc<PrivateKey>>>,
}

impl KeyCache {
    fn get(&self, p: &Path) -> Option<Arc<PrivateKey>> {
        self.keys.lock().ok()?.get(p).cloned()
    }
    fn put(&self, p: &Path, k: Arc<PrivateKey>) {
        if let Ok(mut m) = self.keys.lock() {
            m.insert(p.to_path_buf(), k);
        }
    }
}

fn method_names(set: &russh::MethodSet) -> Vec<String> {
    set.iter()
        .map(|m| <&'static str>::from(m).to_string())
        .collect()
}

fn offers(report: &AuthReport, method: MethodKind) -> bool {
    let name: &'static str = (&method).into();
    report.offered.iter().any(|m| m == name)
}

/// Run the chain on a fresh connection. On failure the error is `auth_failed`; `report` is
/// filled either way.
pub(crate) async fn authenticate(
    handle: &mut Handle<ClientHandler>,
    target: &Target,
    opts: &ConnectOptions,
    cache: &KeyCache,
    report: &mut AuthReport,
) -> Result<()> {
    let user = target.user.clone();
    match handle.authenticate_none(&user).await.map_err(lost)? {
        AuthResult::Success => {
            report.succeeded = Some("none".into());
            return Ok(());
        }
        AuthResult::Failure {
            remaining_methods, ..
        } => report.offered = method_names(&remaining_methods),
    }

    if offers(report, MethodKind::PublicKey) {
        if try_agent(handle, &user, opts, report).await? {
            return Ok(());
        }
        if try_identity_files(handle, target, opts, cache, report).await? {
            return Ok(());
        }
    }
    if let Some(password) = &opts.password {
        if offers(report, MethodKind::Password) {
            report.tried.push("password".into());
            let r = handle
                .authenticate_password(&user, password.expose())
                .await
                .map_err(lost)?;
            if r.success() {
                report.succeeded = Some("password".into());
                return Ok(());
            }
        }
        if offers(report, MethodKind::KeyboardInteractive)
            && try_keyboard_interactive(handle, &user, password, report).await?
        {
            return Ok(());
        }
    }
    Err(auth_failed(target, opts, report))
}

fn lost(e: russh::Error) -> Error {
    Error::new(
        ErrorCode::ConnectionLost,
        format!("the connection dropped during authentication ({e}); try again"),
    )
}

fn auth_failed(target: &Target, opts: &ConnectOptions, report: &AuthReport) -> Error {
    let offered = if report.offered.is_empty() {
        "none".to_string()
    } else {
        report.offered.join(", ")
    };
    let tried = if report.tried.is_empty() {
        "nothing".to_string()
    } else {
        report.tried.join("; ")
    };
    // A named key that could not even be offered is the likeliest cause: lead with it.
    let (cause, mut hint) = match report.key_problems.first() {
        Some(problem) => {
            let (what, fix) = problem.explain();
            (format!(": {what}"), fix)
        }
        None => (
            String::new(),
            String::from(
                "add your public key to the server's ~/.ssh/authorized_keys and set key_path (or load it into ssh-agent)",
            ),
        ),
    };
    if opts.password.is_none() && report.offered.iter().any(|m| m == "password") {
        hint.push_str(", or store the machine's password");
    }
    Error::new(
        ErrorCode::AuthFailed,
        format!(
            "authentication as {} failed{cause}. The server offered [{offered}]; tried: {tried}. Fix: {hint}",
            target.label()
        ),
    )
}

async fn try_agent(
    handle: &mut Handle<ClientHandler>,
    user: &str,
    opts: &ConnectOptions,
    report: &mut AuthReport,
) -> Result<bool> {
    let agent = match &opts.agent {
        AgentSource::Disabled => return Ok(false),
        AgentSource::Env => {
            if std::env::var_os("SSH_AUTH_SOCK").is_none() {
                return Ok(false);
            }
            AgentClient::connect_env().await.map(|a| a.dynamic())
        }
        AgentSource::Socket(p) => AgentClient::connect_uds(p).await.map(|a| a.dynamic()),
    };
    let mut agent = match agent {
        Ok(a) => a,
        Err(e) => {
            report.tried.push(format!("ssh-agent (unreachable: {e})"));
            return Ok(false);
        }
    };
    if let Some(binding) = handle.agent_session_binding()
        && let Err(e) = agent.bind_session(binding, false).await
    {
        tracing::debug!("ssh-agent session-bind failed: {e}");
    }
    let identities = match agent.request_identities().await {
        Ok(ids) => ids,
        Err(e) => {
            report
                .tried
                .push(format!("ssh-agent (listing keys failed: {e})"));
            return Ok(false);
        }
    };
    if identities.is_empty() {
        report.tried.push("ssh-agent (no keys)".into());
        return Ok(false);
    }
    for id in identities {
        let AgentIdentity::PublicKey { key, comment } = id else {
            continue;
        };
        let hash = rsa_hash(handle, key.algorithm().is_rsa()).await;
        report
            .tried
            .push(format!("ssh-agent key {} ({comment})", key.algorithm()));
        match handle
            .authenticate_publickey_with(user, key, hash, &mut agent)
            .await
        {
            Ok(AuthResult::Success) => {
                report.succeeded = Some("publickey (ssh-agent)".into());
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("ssh-agent signing failed: {e}"),
        }
    }
    Ok(false)
}

async fn rsa_hash(handle: &Handle<ClientHandler>, is_rsa: bool) -> Option<HashAlg> {
    if !is_rsa {
        return None;
    }
    handle
        .best_supported_rsa_hash()
        .await
        .ok()
        .flatten()
        .flatten()
}

async fn try_identity_files(
    handle: &mut Handle<ClientHandler>,
    target: &Target,
    opts: &ConnectOptions,
    cache: &KeyCache,
    report: &mut AuthReport,
) -> Result<bool> {
    for (i, path) in target.identity_files.iter().enumerate() {
        let named = i < target.named_identities;
        let shown = path.display().to_string();
        if !path.exists() {
            if named {
                report.tried.push(format!("publickey {shown} (no such file)"));
                report.key_problems.push(KeyProblem {
                    path: path.clone(),
                    kind: KeyProblemKind::Missing,
                });
            }
            continue;
        }
        let key = match load_identity(path, &opts.passphrase, cache).await {
            Ok(k) => k,
            Err(kind) => {
                let why = match &kind {
                    KeyProblemKind::Missing => "no such file".to_string(),
                    KeyProblemKind::Unreadable(why) => format!("cannot load: {why}"),
                    KeyProblemKind::Locked(why) => format!("encrypted, and {why}"),
                    KeyProblemKind::WrongPassphrase => {
                        "encrypted, and the passphrase did not decrypt it".to_string()
                    }
                };
                report.tried.push(format!("publickey {shown} ({why})"));
                if named {
                    report.key_problems.push(KeyProblem {
                        path: path.clone(),
                        kind,
                    });
                }
                continue;
            }
        };
        let hash = rsa_hash(handle, key.algorithm().is_rsa()).await;
        let r = handle
            .authenticate_publickey(&target.user, PrivateKeyWithHashAlg::new(key, hash))
            .await
            .map_err(lost)?;
        if r.success() {
            report.tried.push(format!("publickey {shown}"));
            report.succeeded = Some(format!("publickey {shown}"));
            return Ok(true);
        }
        report.tried.push(format!("publickey {shown} (refused)"));
    }
    Ok(false)
}

/// Load (and decrypt) an identity file. The error says what is wrong, without secrets.
async fn load_identity(
    path: &Path,
    source: &PassphraseSource,
    cache: &KeyCache,
) -> std::result::Result<Arc<PrivateKey>, KeyProblemKind> {
    if let Some(k) = cache.get(path) {
        return Ok(k);
    }
    let key = match russh::keys::load_secret_key(path, None) {
        Ok(k) => k,
        Err(russh::keys::Error::KeyIsEncrypted) => {
            let passphrase = match source {
                PassphraseSource::Given(s) => s.clone(),
                PassphraseSource::Never => {
                    return Err(KeyProblemKind::Locked(
                        "no passphrase can be asked for here (not on a terminal)".into(),
                    ));
                }
                PassphraseSource::Tty => ask_passphrase(path).await?,
            };
            russh::keys::load_secret_key(path, Some(passphrase.expose()))
                .map_err(|_| KeyProblemKind::WrongPassphrase)?
        }
        Err(russh::keys::Error::IO(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(KeyProblemKind::Missing);
        }
        Err(e) => return Err(KeyProblemKind::Unreadable(e.to_string())),
    };
    let key = Arc::new(key);
    cache.put(path, key.clone());
    Ok(key)
}

/// Ask on the controlling terminal, only if there is one.
async fn ask_passphrase(path: &Path) -> std::result::Result<Secret, KeyProblemKind> {
    if std::fs::File::open("/dev/tty").is_err() {
        return Err(KeyProblemKind::Locked(
            "there is no terminal to ask for the passphrase".into(),
        ));
    }
    let prompt = format!("Enter passphrase for key '{}': ", path.display());
    tokio::task::spawn_blocking(move || rpassword::prompt_password(prompt))
        .await
        .map_err(|_| KeyProblemKind::Locked("the passphrase prompt failed".into()))?
        .map(Secret::new)
        .map_err(|e| KeyProblemKind::Locked(format!("the passphrase prompt failed: {e}")))
}

async fn try_keyboard_interactive(
    handle: &mut Handle<ClientHandler>,
    user: &str,
    password: &Secret,
    report: &mut AuthReport,
) -> Result<bool> {
    report.tried.push("keyboard-interactive".into());
    let mut response = handle
        .authenticate_keyboard_interactive_start(user, None)
        .await
        .map_err(lost)?;
    // PAM sends the password prompt, then usually an empty info request; bound the rounds.
    for _round in 0..8 {
        match response {
            KeyboardInteractiveAuthResponse::Success => {
                report.succeeded = Some("keyboard-interactive".into());
                return Ok(true);
            }
            KeyboardInteractiveAuthResponse::Failure { .. } => return Ok(false),
            KeyboardInteractiveAuthResponse::InfoRequest { prompts, .. } => {
                // Hidden prompts get the password; visible ones (rare) an empty answer.
                let answers = prompts
                    .iter()
                    .map(|p| {
                        if p.echo {
                            String::new()
                        } else {
                            password.expose().to_string()
                        }
                    })
                    .collect();
                response = handle
                    .authenticate_keyboard_interactive_respond(answers)
                    .await
                    .map_err(lost)?;
            }
        }
    }
    Ok(false)
}

//! known_hosts in OpenSSH's format: plain and hashed (`|1|salt|hash`, HMAC-SHA1) host names,
//! `[host]:port`, comma-separated patterns with `*`/`?` wildcards and `!` negation, several keys
//! per host, and the `@revoked` marker (such a key is refused). `@cert-authority` lines are
//! skipped: we do not ask servers for host certificates.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use russh::keys::{Algorithm, HashAlg, PublicKey};
use sha1::Sha1;

use crate::error::{Error, Result};

/// The known_hosts files for one host: the first `user` file is where new keys are recorded;
/// `system` files are only read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownHostsFiles {
    pub user: Vec<PathBuf>,
    pub system: Vec<PathBuf>,
}

impl KnownHostsFiles {
    /// The file a new key is appended to.
    pub fn primary(&self) -> Option<&Path> {
        self.user.first().map(PathBuf::as_path)
    }

    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.user.iter().chain(self.system.iter())
    }
}

/// What known_hosts says about a server key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyStatus {
    /// The key is recorded for this host.
    Known { file: PathBuf, line: usize },
    /// Nothing is recorded for this host.
    Unknown,
    /// Other keys are recorded for this host; this one is not.
    Changed {
        file: PathBuf,
        line: usize,
        recorded_fingerprint: String,
    },
    /// The key is marked `@revoked`.
    Revoked { file: PathBuf, line: usize },
}

/// One parsed known_hosts line.
#[derive(Debug, Clone)]
struct Entry {
    file: PathBuf,
    line: usize,
    marker: Option<String>,
    patterns: String,
    key: PublicKey,
}

/// The name known_hosts uses for `host:port` (`host` for port 22, else `[host]:port`).
pub fn host_token(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// `SHA256:...` fingerprint, as OpenSSH prints it.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

fn read_entries(path: &Path) -> Vec<Entry> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    parse_entries(path, &text)
}

fn parse_entries(path: &Path, text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let mut first = fields.next();
        let mut marker = None;
        if let Some(m) = first.filter(|f| f.starts_with('@')) {
            marker = Some(m.to_string());
            first = fields.next();
        }
        let (Some(patterns), Some(_algo), Some(b64)) = (first, fields.next(), fields.next()) else {
            continue;
        };
        let Ok(key) = russh::keys::parse_public_key_base64(b64) else {
            continue;
        };
        out.push(Entry {
            file: path.to_path_buf(),
            line: i + 1,
            marker,
            patterns: patterns.to_string(),
            key,
        });
    }
    out
}

/// Whether a comma-separated pattern list (or a hashed name) matches `token`.
fn patterns_match(patterns: &str, token: &str) -> bool {
    if let Some(hashed) = patterns.strip_prefix("|1|") {
        return hashed_matches(hashed, token);
    }
    let mut matched = false;
    for pat in patterns.split(',') {
        if let Some(neg) = pat.strip_prefix('!') {
            if wildcard_match(&neg.to_ascii_lowercase(), &token.to_ascii_lowercase()) {
                return false;
            }
        } else if wildcard_match(&pat.to_ascii_lowercase(), &token.to_ascii_lowercase()) {
            matched = true;
        }
    }
    matched
}

fn hashed_matches(salt_and_hash: &str, token: &str) -> bool {
    let Some((salt, hash)) = salt_and_hash.split_once('|') else {
        return false;
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let (Ok(salt), Ok(hash)) = (b64.decode(salt), b64.decode(hash)) else {
        return false;
    };
    let Ok(mac) = <Hmac<Sha1> as KeyInit>::new_from_slice(&salt) else {
        return false;
    };
    mac.chain_update(token.as_bytes())
        .verify_slice(&hash)
        .is_ok()
}

/// `*` and `?` glob matching (no character classes, as in OpenSSH's match_pattern).
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

fn entries_for(files: &KnownHostsFiles, host: &str, port: u16) -> Vec<Entry> {
    let mut tokens = vec![host_token(host, port)];
    if port == 22 {
        tokens.push(format!("[{host}]:22"));
    }
    files
        .all()
        .flat_map(|f| read_entries(f))
        .filter(|e| tokens.iter().any(|t| patterns_match(&e.patterns, t)))
        .collect()
}

fn same_key(a: &PublicKey, b: &PublicKey) -> bool {
    a.key_data() == b.key_data()
}

/// Check `key` for `host:port` against the files.
pub fn check(files: &KnownHostsFiles, host: &str, port: u16, key: &PublicKey) -> HostKeyStatus {
    let entries = entries_for(files, host, port);
    if let Some(e) = entries
        .iter()
        .find(|e| e.marker.as_deref() == Some("@revoked") && same_key(&e.key, key))
    {
        return HostKeyStatus::Revoked {
            file: e.file.clone(),
            line: e.line,
        };
    }
    let plain: Vec<&Entry> = entries.iter().filter(|e| e.marker.is_none()).collect();
    if let Some(e) = plain.iter().find(|e| same_key(&e.key, key)) {
        return HostKeyStatus::Known {
            file: e.file.clone(),
            line: e.line,
        };
    }
    // Prefer reporting a recorded key of the same algorithm, as OpenSSH does. A host known
    // only under other key types is also treated as changed: never silently trust a new type.
    let recorded = plain
        .iter()
        .find(|e| e.key.algorithm() == key.algorithm())
        .or_else(|| plain.first());
    match recorded {
        Some(e) => HostKeyStatus::Changed {
            file: e.file.clone(),
            line: e.line,
            recorded_fingerprint: fingerprint(&e.key),
        },
        None => HostKeyStatus::Unknown,
    }
}

/// Algorithms of the keys recorded for the host, in file order (for reordering the offer).
pub fn known_algorithms(files: &KnownHostsFiles, host: &str, port: u16) -> Vec<Algorithm> {
    let mut out: Vec<Algorithm> = Vec::new();
    for e in entries_for(files, host, port) {
        if e.marker.is_none() && !out.contains(&e.key.algorithm()) {
            out.push(e.key.algorithm());
        }
    }
    out
}

/// Put the host key algorithms we already know for this host first, as OpenSSH does, so a
/// server with several keys presents the one we can verify.
pub fn reorder_preferred(default: &[Algorithm], known: &[Algorithm]) -> Vec<Algorithm> {
    let family = |a: &Algorithm| match a {
        Algorithm::Rsa { .. } => "ssh-rsa".to_string(),
        other => other.as_str().to_string(),
    };
    let known_families: Vec<String> = known.iter().map(family).collect();
    let (mut first, rest): (Vec<Algorithm>, Vec<Algorithm>) = default
        .iter()
        .cloned()
        .partition(|a| known_families.contains(&family(a)));
    first.sort_by_key(|a| {
        known_families
            .iter()
            .position(|f| *f == family(a))
            .unwrap_or(usize::MAX)
    });
    first.extend(rest);
    first
}

/// Append `key` for `host:port` to `path` (created 0600, parent directory 0700 if created).
pub fn append(path: &Path, host: &str, port: u16, key: &PublicKey) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("create {}", parent.display()), &e))?;
        fs::set_permissions(parent, fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("chmod {}", parent.display()), &e))?;
    }
    let key_text = key
        .to_openssh()
        .map_err(|e| Error::internal(format!("cannot encode host key: {e}")))?;
    let key_text: String = key_text
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let needs_newline = fs::read(path)
        .map(|b| !b.is_empty() && !b.ends_with(b"\n"))
        .unwrap_or(false);
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("open {}", path.display()), &e))?;
    let line = format!(
        "{}{} {key_text}\n",
        if needs_newline { "\n" } else { "" },
        host_token(host, port)
    );
    f.write_all(line.as_bytes())
        .map_err(|e| Error::io(format!("write {}", path.display()), &e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIGl6oe1MiGZJKdnuQCF+gT8Gl9PUFJ+wJERQOYfy9FsX";
    const KEY_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIORW5lbyf25gFU3VzTz4LMa4GGOKAR+i5GOJSbEMmEBb";

    fn key(b64: &str) -> PublicKey {
        russh::keys::parse_public_key_base64(b64).unwrap()
    }

    fn files_with(text: &str) -> (tempfile::TempDir, KnownHostsFiles) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("known_hosts");
        fs::write(&p, text).unwrap();
        (
            d,
            KnownHostsFiles {
                user: vec![p],
                system: vec![],
            },
        )
    }

    #[test]
    fn plain_port_and_wildcard_entries() {
        let (_d, f) = files_with(&format!(
            "# comment\n[10.0.0.1]:2222 ssh-ed25519 {KEY_A}\n*.corp,!bad.corp ssh-ed25519 {KEY_B}\n"
        ));
        assert!(matches!(
            check(&f, "10.0.0.1", 2222, &key(KEY_A)),
            HostKeyStatus::Known { line: 2, .. }
        ));
        assert_eq!(
            check(&f, "10.0.0.1", 22, &key(KEY_A)),
            HostKeyStatus::Unknown
        );
        assert!(matches!(
            check(&f, "a.corp", 22, &key(KEY_B)),
            HostKeyStatus::Known { line: 3, .. }
        ));
        assert_eq!(
            check(&f, "bad.corp", 22, &key(KEY_B)),
            HostKeyStatus::Unknown
        );
        assert!(matches!(
            check(&f, "10.0.0.1", 2222, &key(KEY_B)),
            HostKeyStatus::Changed { line: 2, .. }
        ));
    }

    #[test]
    fn hashed_names_match() {
        // HMAC-SHA1 of "[127.0.0.1]:2222" with this salt, computed here with the same code path
        // that OpenSSH's `ssh-keygen -H` uses (salt || name).
        let salt = [7u8; 20];
        let mac = <Hmac<Sha1> as KeyInit>::new_from_slice(&salt)
            .unwrap()
            .chain_update(b"[127.0.0.1]:2222")
            .finalize()
            .into_bytes();
        let b64 = base64::engine::general_purpose::STANDARD;
        let line = format!(
            "|1|{}|{} ssh-ed25519 {KEY_A}\n",
            b64.encode(salt),
            b64.encode(mac)
        );
        let (_d, f) = files_with(&line);
        assert!(matches!(
            check(&f, "127.0.0.1", 2222, &key(KEY_A)),
            HostKeyStatus::Known { .. }
        ));
        assert_eq!(
            check(&f, "127.0.0.2", 2222, &key(KEY_A)),
            HostKeyStatus::Unknown
        );
    }

    #[test]
    fn revoked_wins_and_cert_authority_is_ignored() {
        let (_d, f) = files_with(&format!(
            "h ssh-ed25519 {KEY_A}\n@revoked h ssh-ed25519 {KEY_A}\n@cert-authority * ssh-ed25519 {KEY_B}\n"
        ));
        assert!(matches!(
            check(&f, "h", 22, &key(KEY_A)),
            HostKeyStatus::Revoked { line: 2, .. }
        ));
        assert_eq!(check(&f, "other", 22, &key(KEY_B)), HostKeyStatus::Unknown);
    }

    #[test]
    fn append_creates_private_file_and_is_found() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub").join("known_hosts");
        append(&p, "127.0.0.1", 2200, &key(KEY_A)).unwrap();
        let f = KnownHostsFiles {
            user: vec![p.clone()],
            system: vec![],
        };
        assert!(matches!(
            check(&f, "127.0.0.1", 2200, &key(KEY_A)),
            HostKeyStatus::Known { .. }
        ));
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = fs::metadata(p.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*.example.com", "a.example.com"));
        assert!(wildcard_match("10.0.?.1", "10.0.5.1"));
        assert!(!wildcard_match("10.0.?.1", "10.0.55.1"));
        assert!(wildcard_match("*", ""));
    }

    #[test]
    fn known_algorithms_go_first() {
        let default = vec![
            Algorithm::Ed25519,
            Algorithm::Rsa {
                hash: Some(HashAlg::Sha512),
            },
            Algorithm::Rsa { hash: None },
        ];
        let out = reorder_preferred(&default, &[Algorithm::Rsa { hash: None }]);
        assert_eq!(out.last(), Some(&Algorithm::Ed25519));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_lines_never_panic(text in "\\PC{0,200}") {
            let _ = parse_entries(Path::new("x"), &text);
            let _ = patterns_match(&text, "host");
        }

        #[test]
        fn hashed_name_matches_exactly_its_host(
            host in "[a-z0-9.-]{1,30}",
            other in "[a-z0-9.-]{1,30}",
            salt in proptest::collection::vec(proptest::num::u8::ANY, 20),
            port in 1u16..,
        ) {
            let token = host_token(&host, port);
            let mac = <Hmac<Sha1> as KeyInit>::new_from_slice(&salt)
                .unwrap()
                .chain_update(token.as_bytes())
                .finalize()
                .into_bytes();
            let b64 = base64::engine::general_purpose::STANDARD;
            let pattern = format!("|1|{}|{}", b64.encode(&salt), b64.encode(mac));
            proptest::prop_assert!(patterns_match(&pattern, &token));
            if other != host {
                proptest::prop_assert!(!patterns_match(&pattern, &host_token(&other, port)));
            }
        }

        #[test]
        fn star_suffix_matches_every_extension(prefix in "[a-z]{1,10}", rest in "[a-z.]{0,10}") {
            let text = format!("{prefix}{rest}");
            let pattern = format!("{prefix}*");
            proptest::prop_assert!(wildcard_match(&pattern, &text));
        }
    }
}

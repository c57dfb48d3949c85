//! Passwords, kept apart from the records.
//!
//! One file, `<state_dir>/credentials.json` (mode 0600, state dir 0700), maps machine ids to
//! passwords. Writers hold an exclusive lock on `<state_dir>/credentials.lock` for the whole
//! read-modify-write and replace the file atomically (temp file in the same dir + rename), so
//! concurrent processes never lose an update and readers never see a half-written file.
//! Values only leave this module as [`Secret`], whose `Debug`/`Display` are redacted; errors name
//! the file and the machine id, never a value.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode, Hint, Result};
use crate::secret::Secret;
use crate::store::set_private_mode;

const FILE_NAME: &str = "credentials.json";
const LOCK_NAME: &str = "credentials.lock";
const FORMAT_VERSION: u32 = 1;

/// The credential file of one state dir.
#[derive(Debug, Clone)]
pub struct CredentialStore {
    dir: PathBuf,
}

#[derive(Default, Serialize, Deserialize)]
struct CredentialFile {
    version: u32,
    #[serde(default)]
    passwords: BTreeMap<String, String>,
}

impl CredentialStore {
    /// Use the credential file in `state_dir`, creating the dir (0700) if needed. The file itself
    /// is created on the first write.
    pub fn open(state_dir: &Path) -> Result<CredentialStore> {
        crate::store::ownership::open_state_dir(state_dir)?;
        Ok(CredentialStore {
            dir: state_dir.to_path_buf(),
        })
    }

    /// Path of the credential file (for diagnostics; never print its contents).
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// The password stored for `machine_id`, if any.
    pub fn get_password(&self, machine_id: &str) -> Result<Option<Secret>> {
        let _lock = self.lock()?;
        let file = self.read()?;
        Ok(file.passwords.get(machine_id).map(Secret::new))
    }

    /// Store (or overwrite) the password for `machine_id`.
    pub fn set_password(&self, machine_id: &str, password: &Secret) -> Result<()> {
        if password.expose().is_empty() {
            return Err(Error::invalid(format!(
                "the password for machine {machine_id} is empty; enter a non-empty password"
            )));
        }
        let _lock = self.lock()?;
        let mut file = self.read()?;
        file.passwords
            .insert(machine_id.to_string(), password.expose().to_string());
        self.write(&file)
    }

    /// Forget the password for `machine_id`. Returns whether one was stored.
    pub fn remove(&self, machine_id: &str) -> Result<bool> {
        let _lock = self.lock()?;
        let mut file = self.read()?;
        if file.passwords.remove(machine_id).is_none() {
            return Ok(false);
        }
        self.write(&file)?;
        Ok(true)
    }

    /// Exclusive lock held until the returned file is dropped.
    fn lock(&self) -> Result<File> {
        let path = self.dir.join(LOCK_NAME);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), &e))?;
        set_private_mode(&path)?;
        lock.lock()
            .map_err(|e| Error::io(format!("cannot lock {}", path.display()), &e))?;
        Ok(lock)
    }

    fn read(&self) -> Result<CredentialFile> {
        let path = self.path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(CredentialFile {
                    version: FORMAT_VERSION,
                    passwords: BTreeMap::new(),
                });
            }
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), &e)),
        };
        // The serde error could quote a value from the file, so it is not passed on.
        let file: CredentialFile = serde_json::from_str(&text).map_err(|_| {
            Error::new(
                ErrorCode::Store,
                format!(
                    "{} is not a valid credential file; move it aside and add the passwords \
                     again",
                    path.display()
                ),
            )
            .with_hint(Hint::AddPasswordsAgain)
        })?;
        if file.version > FORMAT_VERSION {
            return Err(Error::new(
                ErrorCode::Store,
                format!(
                    "{} was written by a newer remote-runner (format {}); upgrade remote-runner",
                    path.display(),
                    file.version
                ),
            ));
        }
        Ok(file)
    }

    /// Write the whole file atomically with mode 0600 from the first byte.
    fn write(&self, file: &CredentialFile) -> Result<()> {
        let path = self.path();
        let text = serde_json::to_string_pretty(&CredentialFile {
            version: FORMAT_VERSION,
            passwords: file.passwords.clone(),
        })
        .map_err(|_| Error::internal("cannot encode the credential file"))?;
        // tempfile creates the file with mode 0600.
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(|e| {
            Error::io(
                format!("cannot create a temp file in {}", self.dir.display()),
                &e,
            )
        })?;
        tmp.write_all(text.as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| Error::io(format!("cannot write {}", tmp.path().display()), &e))?;
        tmp.persist(&path)
            .map_err(|e| Error::io(format!("cannot replace {}", path.display()), &e.error))?;
        set_private_mode(&path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn set_get_remove_round_trip_with_private_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let creds = CredentialStore::open(&dir).unwrap();
        assert_eq!(creds.get_password("m1").unwrap(), None);
        creds.set_password("m1", &Secret::new("pw-one")).unwrap();
        creds.set_password("m2", &Secret::new("pw-two")).unwrap();
        assert_eq!(
            creds.get_password("m1").unwrap().unwrap().expose(),
            "pw-one"
        );
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&creds.path()), 0o600);
        assert!(creds.remove("m1").unwrap());
        assert!(!creds.remove("m1").unwrap());
        assert_eq!(creds.get_password("m1").unwrap(), None);
        assert_eq!(
            creds.get_password("m2").unwrap().unwrap().expose(),
            "pw-two"
        );
    }

    #[test]
    fn empty_password_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let creds = CredentialStore::open(tmp.path()).unwrap();
        let err = creds.set_password("m1", &Secret::new("")).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn a_corrupt_file_error_never_quotes_its_contents() {
        let tmp = tempfile::tempdir().unwrap();
        let creds = CredentialStore::open(tmp.path()).unwrap();
        std::fs::write(creds.path(), "{\"passwords\": SENTINEL-PW").unwrap();
        let err = creds.get_password("m1").unwrap_err();
        assert_eq!(err.code, ErrorCode::Store);
        assert!(!err.message.contains("SENTINEL"), "{}", err.message);
    }

    #[test]
    fn concurrent_writers_keep_every_update() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let creds = CredentialStore::open(&dir).unwrap();
                    for j in 0..10 {
                        creds
                            .set_password(&format!("m{i}-{j}"), &Secret::new(format!("p{i}{j}")))
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let creds = CredentialStore::open(&dir).unwrap();
        for i in 0..8 {
            for j in 0..10 {
                let got = creds.get_password(&format!("m{i}-{j}")).unwrap().unwrap();
                assert_eq!(got.expose(), format!("p{i}{j}"));
            }
        }
    }
}

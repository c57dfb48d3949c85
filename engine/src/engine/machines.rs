//! The machines a state dir knows, and their rules: list, show, add, replace, configure, remove
//! (never while a session on the machine is active), and ending a machine's connection keeper.
//!
//! [`Machines`] needs only the records (the store and the credential file), so a face lists or
//! changes machines without opening an [`Engine`]; removing a machine whose active sessions are
//! to be destroyed first needs one ([`Engine::remove_machine_forced`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Engine;
use crate::error::{Error, Result};
use crate::machine::{AuthType, LOCAL_MACHINE_ID, Machine, MachineField};
use crate::secret::Secret;
use crate::ssh::config::{SshConfigSource, expand_tilde, machine_from_alias};
use crate::store::credentials::CredentialStore;
use crate::store::{self, Store, machines};

pub use crate::keeper::Disconnected;

/// A machine as listed and shown: the record, and when a stored one was added and changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineEntry {
    pub machine: Machine,
    /// When the machine was added (RFC 3339); `None` for the built-in `local`.
    pub created_at: Option<String>,
    /// When its record last changed (RFC 3339); `None` for the built-in `local`.
    pub updated_at: Option<String>,
}

/// What [`Machines::remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineRemoval {
    /// The machine is gone.
    Removed(MachineRemoved),
    /// Refused: these sessions on the machine are active (destroy them first, or remove the
    /// machine with [`Engine::remove_machine_forced`]).
    ActiveSessions(Vec<String>),
}

/// A removed machine: its session records, logs and runs are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineRemoved {
    pub machine_id: String,
    /// Active sessions destroyed first (only by [`Engine::remove_machine_forced`]).
    pub destroyed_sessions: Vec<String>,
    /// Session records of the machine kept (of any status).
    pub retained_sessions: u64,
    /// Whether a stored password was removed with it.
    pub password_removed: bool,
}

/// The machine records of one state dir.
#[derive(Debug)]
pub struct Machines {
    state_dir: PathBuf,
    /// Locked per call (short, synchronous queries), so that the handle can be shared.
    store: Mutex<Store>,
}

/// Check a machine id: 1 to 64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
pub fn validate_machine_id(id: &str) -> Result<()> {
    machines::validate_machine_id(id)
}

/// The machine an ssh_config `Host` alias describes (HostName, User, Port, IdentityFile, ...),
/// or `None` when no `Host` line names it. `ssh_config`: that file (it must exist), else
/// `$REMOTE_RUNNER_SSH_CONFIG` or `~/.ssh/config` (a missing file is fine).
pub fn machine_from_ssh_alias(alias: &str, ssh_config: Option<&Path>) -> Result<Option<Machine>> {
    let source = match ssh_config {
        Some(path) => SshConfigSource::File(path.to_path_buf()),
        None => SshConfigSource::Default,
    };
    machine_from_alias(alias, &source)
}

/// The key file a machine names, when it does not exist on this host (`~` expanded).
pub fn missing_key_file(machine: &Machine) -> Option<PathBuf> {
    let key = machine.key_path.as_ref()?;
    let expanded = expand_tilde(Path::new(key));
    (!expanded.exists()).then_some(expanded)
}

impl Machines {
    /// Open the machine records of `state_dir` (created 0700 if missing).
    pub fn open(state_dir: &Path) -> Result<Machines> {
        Ok(Machines {
            state_dir: state_dir.to_path_buf(),
            store: Mutex::new(Store::open(state_dir)?),
        })
    }

    /// Run `f` with the store.
    fn with_store<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let guard = self
            .store
            .lock()
            .map_err(|_| Error::internal("the store lock was poisoned by an earlier panic"))?;
        f(&guard)
    }

    fn credentials(&self) -> Result<CredentialStore> {
        CredentialStore::open(&self.state_dir)
    }

    /// Every machine: the built-in `local` first, then the stored ones by id.
    pub fn list(&self) -> Result<Vec<MachineEntry>> {
        let stored = self.with_store(machines::list_stored)?;
        Ok(std::iter::once(local_entry())
            .chain(stored.into_iter().map(entry_of))
            .collect())
    }

    /// One machine: `local` or a stored one (`unknown_machine`, listing the known ids, else).
    pub fn show(&self, machine_id: &str) -> Result<MachineEntry> {
        if machine_id == LOCAL_MACHINE_ID {
            return Ok(local_entry());
        }
        self.with_store(|s| {
            machines::get_stored(s, machine_id)?
                .map(entry_of)
                .ok_or_else(|| machines::unknown_machine(s.conn(), machine_id))
        })
    }

    /// A stored machine, or `None` (never the built-in `local`).
    pub fn stored(&self, machine_id: &str) -> Result<Option<Machine>> {
        self.with_store(|s| machines::get(s, machine_id))
    }

    /// Add a new machine and, for password auth, its password, so that a failure leaves
    /// nothing half-added. `already_exists` when the id is taken (in any case).
    pub fn add(&self, machine: &Machine, password: Option<&Secret>) -> Result<()> {
        check_record(machine)?;
        let creds = self.credentials()?;
        self.with_store(|s| {
            machines::insert(s, machine)?;
            if let Some(password) = password
                && let Err(err) = creds.set_password(&machine.machine_id, password)
            {
                let _ = machines::remove(s, &machine.machine_id);
                return Err(err);
            }
            Ok(())
        })
    }

    /// Overwrite a stored machine (its sessions, logs and runs are kept): `password` replaces
    /// the stored one; a machine that no longer uses password auth loses it.
    pub fn replace(&self, machine: &Machine, password: Option<&Secret>) -> Result<()> {
        check_record(machine)?;
        let creds = self.credentials()?;
        if let Some(password) = password {
            creds.set_password(&machine.machine_id, password)?;
        }
        self.with_store(|s| machines::replace(s, machine))?;
        if machine.auth_type != AuthType::Password {
            creds.remove(&machine.machine_id)?;
        }
        Ok(())
    }

    /// Change a stored machine atomically (`change` edits the current record); returns the
    /// record as stored. The built-in `local` cannot be changed.
    pub fn configure(
        &self,
        machine_id: &str,
        change: impl FnOnce(&mut Machine) -> Result<()>,
    ) -> Result<Machine> {
        self.with_store(|s| machines::update(s, machine_id, change))
    }

    /// Remove a machine record and its stored password, unless a session on it is active (the
    /// check and the delete are one transaction); its keeper is ended. Session records, logs
    /// and runs are kept.
    pub async fn remove(&self, machine_id: &str) -> Result<MachineRemoval> {
        match self.remove_unless_active(machine_id)? {
            Some(active) => Ok(MachineRemoval::ActiveSessions(active)),
            None => self
                .removed(machine_id, Vec::new())
                .await
                .map(MachineRemoval::Removed),
        }
    }

    /// Remove the record unless a session is active: `None` when removed, else the active
    /// sessions; `unknown_machine` when there is no such machine.
    fn remove_unless_active(&self, machine_id: &str) -> Result<Option<Vec<String>>> {
        self.with_store(|s| match machines::remove_unless_active(s, machine_id)? {
            machines::Removal::Removed => Ok(None),
            machines::Removal::Unknown => Err(machines::unknown_machine(s.conn(), machine_id)),
            machines::Removal::ActiveSessions(active) => Ok(Some(active)),
        })
    }

    /// What follows a removal: the password, the keeper, the count of kept sessions.
    async fn removed(&self, machine_id: &str, destroyed: Vec<String>) -> Result<MachineRemoved> {
        let password_removed = self.credentials()?.remove(machine_id)?;
        crate::keeper::disconnect(&self.state_dir, machine_id).await;
        let retained = self.with_store(|s| store::sessions::count_for_machine(s, machine_id))?;
        Ok(MachineRemoved {
            machine_id: machine_id.to_string(),
            destroyed_sessions: destroyed,
            retained_sessions: retained,
            password_removed,
        })
    }

    /// The stored password of a machine, if any.
    pub(crate) fn password(&self, machine_id: &str) -> Result<Option<Secret>> {
        self.credentials()?.get_password(machine_id)
    }

    /// The machine an id names (`local`, or a stored one).
    pub(crate) fn resolve(&self, machine_id: &str) -> Result<Machine> {
        self.with_store(|s| machines::resolve(s, machine_id))
    }
}

/// End the connection keeper of `machine_id`, or of every machine (`None`), of `state_dir`; the
/// next call connects afresh. Returns the keepers that were running. Opens no record.
pub async fn disconnect_keepers(state_dir: &Path, machine_id: Option<&str>) -> Vec<Disconnected> {
    match machine_id {
        Some(id) => crate::keeper::disconnect(state_dir, id)
            .await
            .into_iter()
            .collect(),
        None => crate::keeper::disconnect_all(state_dir).await,
    }
}

impl Engine {
    /// The machine an id names: the built-in `local`, the engine's ad-hoc machine
    /// ([`super::OpenOptions::adhoc`]), or a stored one (`unknown_machine`, listing the known
    /// ids, else).
    pub fn machine(&self, machine_id: &str) -> Result<Machine> {
        if machine_id == LOCAL_MACHINE_ID {
            return Ok(Machine::local());
        }
        if let Some(adhoc) = self.adhoc.as_ref().filter(|m| m.machine_id == machine_id) {
            return Ok(adhoc.clone());
        }
        self.with_store(|s| machines::resolve(s, machine_id))
    }

    /// Remove a machine, destroying its active sessions first (their remote shells stopped).
    /// The machine must be reachable: the first failure stops the removal, so no session is
    /// left active on a machine that is gone. Sessions started meanwhile are found and
    /// destroyed too.
    pub async fn remove_machine_forced(&self, machine_id: &str) -> Result<MachineRemoved> {
        let records = Machines::open(&self.state_dir)?;
        let mut destroyed = Vec::new();
        // Sessions started meanwhile are found by the next round.
        while let Some(active) = records.remove_unless_active(machine_id)? {
            self.destroy_sessions_of(machine_id, &active).await?;
            destroyed.extend(active);
        }
        records.removed(machine_id, destroyed).await
    }

    async fn destroy_sessions_of(&self, machine_id: &str, sessions: &[String]) -> Result<()> {
        // A session on a machine that cannot be reached would be recorded destroyed while its
        // shell runs on: reach the machine first, or remove nothing.
        self.direct.connect(machine_id).await.map_err(|e| Error {
            message: format!(
                "machine {machine_id} was not removed: its active sessions ({}) cannot be \
                     stopped because the machine cannot be reached: {}",
                sessions.join(", "),
                e.message
            ),
            ..e
        })?;
        for session_id in sessions {
            self.destroy(session_id).await.map_err(|e| Error {
                message: format!(
                    "machine {machine_id} was not removed: destroying its session {session_id} \
                     failed: {}",
                    e.message
                ),
                ..e
            })?;
        }
        Ok(())
    }
}

/// The engine's check of a record before it is stored, naming the field at fault.
fn check_record(machine: &Machine) -> Result<()> {
    machine.check().map_err(|p| {
        let name = match p.field {
            MachineField::Host => "host",
            MachineField::User => "user",
            MachineField::DefaultCwd => "default cwd",
            MachineField::StartupCommand => "startup command",
        };
        p.into_error(name)
    })
}

fn local_entry() -> MachineEntry {
    MachineEntry {
        machine: Machine::local(),
        created_at: None,
        updated_at: None,
    }
}

fn entry_of(stored: machines::StoredMachine) -> MachineEntry {
    MachineEntry {
        machine: stored.machine,
        created_at: Some(stored.created_at),
        updated_at: Some(stored.updated_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::machine::HostKeyPolicy;

    fn machine(id: &str, auth_type: AuthType) -> Machine {
        Machine {
            machine_id: id.to_string(),
            host: "192.0.2.10".to_string(),
            port: 22,
            user: "ely".to_string(),
            auth_type,
            key_path: None,
            default_cwd: "/home/ely".to_string(),
            startup_commands: vec![],
            path_mappings: vec![],
            host_key_policy: HostKeyPolicy::Strict,
            known_hosts_file: None,
            ssh_config_host: None,
            has_password: auth_type == AuthType::Password,
            login_env: true,
            scheduler: Default::default(),
        }
    }

    fn session(machines: &Machines, session_id: &str, machine_id: &str, status: &str) {
        machines
            .with_store(|s| {
                s.conn()
                    .execute(
                        "INSERT INTO sessions (session_id, machine_id, status, created_at, data)
                         VALUES (?1, ?2, ?3, '2026-01-01T00:00:00Z', '{}')
                         ON CONFLICT(session_id) DO UPDATE SET status = ?3",
                        rusqlite::params![session_id, machine_id, status],
                    )
                    .unwrap();
                Ok(())
            })
            .unwrap();
    }

    #[tokio::test]
    async fn a_machine_with_an_active_session_is_not_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let machines = Machines::open(&tmp.path().join("state")).unwrap();
        let password = Secret::new("pw");
        machines
            .add(&machine("m1", AuthType::Password), Some(&password))
            .unwrap();
        session(&machines, "s1", "m1", "active");
        assert_eq!(
            machines.remove("m1").await.unwrap(),
            MachineRemoval::ActiveSessions(vec!["s1".into()])
        );
        assert!(machines.stored("m1").unwrap().is_some());
        assert_eq!(machines.password("m1").unwrap().unwrap().expose(), "pw");

        session(&machines, "s1", "m1", "destroyed");
        let removed = match machines.remove("m1").await.unwrap() {
            MachineRemoval::Removed(removed) => removed,
            other => panic!("not removed: {other:?}"),
        };
        assert_eq!(removed.retained_sessions, 1);
        assert!(removed.password_removed);
        assert!(removed.destroyed_sessions.is_empty());
        assert!(machines.stored("m1").unwrap().is_none());
        assert!(machines.password("m1").unwrap().is_none());
        let gone = machines.remove("m1").await.unwrap_err();
        assert_eq!(gone.code, ErrorCode::UnknownMachine);
    }

    #[test]
    fn list_shows_local_first_and_a_replacement_drops_an_unused_password() {
        let tmp = tempfile::tempdir().unwrap();
        let machines = Machines::open(&tmp.path().join("state")).unwrap();
        machines
            .add(&machine("m1", AuthType::Password), Some(&Secret::new("pw")))
            .unwrap();
        let ids: Vec<String> = machines
            .list()
            .unwrap()
            .into_iter()
            .map(|e| e.machine.machine_id)
            .collect();
        assert_eq!(ids, [LOCAL_MACHINE_ID, "m1"]);
        assert!(
            machines
                .show(LOCAL_MACHINE_ID)
                .unwrap()
                .created_at
                .is_none()
        );
        assert!(machines.show("m1").unwrap().created_at.is_some());

        machines
            .replace(&machine("m1", AuthType::Key), None)
            .unwrap();
        assert!(machines.password("m1").unwrap().is_none());
        let bad = Machine {
            host: String::new(),
            ..machine("m2", AuthType::Key)
        };
        let err = machines.add(&bad, None).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
        assert!(err.message.starts_with("host "), "{}", err.message);
        assert!(machines.stored("m2").unwrap().is_none());
    }
}

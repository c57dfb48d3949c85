//! Machine records in the `machines` table.
//!
//! Every write runs in an `IMMEDIATE` transaction, so concurrent CLI processes and providers
//! serialize on the SQLite write lock (with the store's busy timeout) instead of racing a
//! read-modify-write. The built-in `local` machine is never stored: [`resolve`] returns it, and
//! writes to its id are refused.

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use crate::error::{Error, ErrorCode, Hint, Result};
use crate::machine::{LOCAL_MACHINE_ID, Machine};
use crate::store::{Store, from_data, query_all, query_one, to_data};
use crate::util::now_rfc3339;

/// Longest accepted machine id.
pub const MAX_MACHINE_ID_LEN: usize = 64;

/// A stored machine with its bookkeeping timestamps (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMachine {
    pub machine: Machine,
    pub created_at: String,
    pub updated_at: String,
}

/// Check a machine id: 1..=64 characters of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
/// These ids appear in file names, tmux names and shell commands, so nothing else is allowed.
pub fn validate_machine_id(id: &str) -> Result<()> {
    let first_ok = id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let chars_ok = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if id.is_empty() || id.len() > MAX_MACHINE_ID_LEN || !first_ok || !chars_ok {
        return Err(Error::invalid(format!(
            "machine id {id:?} is not valid; use 1 to {MAX_MACHINE_ID_LEN} letters, digits, \
             '.', '_' or '-', starting with a letter or digit (for example lab-gpu-01)"
        )));
    }
    Ok(())
}

/// Add a new machine. Fails with `already_exists` if the id is taken.
pub fn insert(store: &Store, machine: &Machine) -> Result<()> {
    refuse_local(&machine.machine_id, "added")?;
    validate_machine_id(&machine.machine_id)?;
    let data = to_data(machine)?;
    write_tx(store.conn(), |tx| {
        if let Some(taken) = same_id_any_case(tx, &machine.machine_id)? {
            return Err(already_exists(&machine.machine_id, &taken));
        }
        let now = now_rfc3339();
        tx.execute(
            "INSERT INTO machines (machine_id, created_at, updated_at, data) VALUES (?1, ?2, ?2, ?3)",
            params![machine.machine_id, now, data],
        )
        .map_err(query_err)?;
        Ok(())
    })
}

/// Overwrite an existing machine record, keeping its `created_at`. Fails with `unknown_machine`
/// if there is nothing to replace. Sessions, commands and runs are separate records and are kept.
pub fn replace(store: &Store, machine: &Machine) -> Result<()> {
    refuse_local(&machine.machine_id, "replaced")?;
    validate_machine_id(&machine.machine_id)?;
    let data = to_data(machine)?;
    write_tx(store.conn(), |tx| {
        let changed = tx
            .execute(
                "UPDATE machines SET data = ?2, updated_at = ?3 WHERE machine_id = ?1",
                params![machine.machine_id, data, now_rfc3339()],
            )
            .map_err(query_err)?;
        if changed == 0 {
            return Err(unknown_machine(tx, &machine.machine_id));
        }
        Ok(())
    })
}

/// Read-modify-write one machine atomically: `change` sees the current record and edits it.
/// Returns the record as stored.
pub fn update(
    store: &Store,
    machine_id: &str,
    change: impl FnOnce(&mut Machine) -> Result<()>,
) -> Result<Machine> {
    refuse_local(machine_id, "changed")?;
    write_tx(store.conn(), |tx| {
        let mut machine: Machine = query_one(
            tx,
            "SELECT data FROM machines WHERE machine_id = ?1",
            params![machine_id],
        )?
        .ok_or_else(|| unknown_machine(tx, machine_id))?;
        change(&mut machine)?;
        if machine.machine_id != machine_id {
            return Err(Error::internal("a machine update tried to change the id"));
        }
        tx.execute(
            "UPDATE machines SET data = ?2, updated_at = ?3 WHERE machine_id = ?1",
            params![machine_id, to_data(&machine)?, now_rfc3339()],
        )
        .map_err(query_err)?;
        Ok(machine)
    })
}

/// A stored machine, or `None`. Does not return the built-in `local` machine (see [`resolve`]).
pub fn get(store: &Store, machine_id: &str) -> Result<Option<Machine>> {
    Ok(get_stored(store, machine_id)?.map(|s| s.machine))
}

/// A stored machine with its timestamps, or `None`.
pub fn get_stored(store: &Store, machine_id: &str) -> Result<Option<StoredMachine>> {
    let mut stmt = store
        .conn()
        .prepare("SELECT data, created_at, updated_at FROM machines WHERE machine_id = ?1")
        .map_err(query_err)?;
    let mut rows = stmt
        .query_map(params![machine_id], read_row)
        .map_err(query_err)?;
    rows.next()
        .transpose()
        .map_err(query_err)?
        .map(decode_row)
        .transpose()
}

/// Every stored machine, ordered by id. Does not include the built-in `local` machine.
pub fn list(store: &Store) -> Result<Vec<Machine>> {
    query_all(
        store.conn(),
        "SELECT data FROM machines ORDER BY machine_id",
        [],
    )
}

/// Every stored machine with timestamps, ordered by id.
pub fn list_stored(store: &Store) -> Result<Vec<StoredMachine>> {
    let mut stmt = store
        .conn()
        .prepare("SELECT data, created_at, updated_at FROM machines ORDER BY machine_id")
        .map_err(query_err)?;
    let rows = stmt.query_map([], read_row).map_err(query_err)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(decode_row(row.map_err(query_err)?)?);
    }
    Ok(out)
}

/// Remove a stored machine. Returns whether a record was removed. Sessions, commands and runs
/// that name it are kept (they stay readable).
pub fn remove(store: &Store, machine_id: &str) -> Result<bool> {
    refuse_local(machine_id, "removed")?;
    write_tx(store.conn(), |tx| {
        let n = tx
            .execute(
                "DELETE FROM machines WHERE machine_id = ?1",
                params![machine_id],
            )
            .map_err(query_err)?;
        Ok(n > 0)
    })
}

/// What [`remove_unless_active`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    Removed,
    /// No machine with that id.
    Unknown,
    /// Refused: these sessions on the machine are still active.
    ActiveSessions(Vec<String>),
}

/// Remove a machine record unless a session on it is active; the check and the delete are one
/// transaction, so a session created meanwhile by another process is never orphaned.
pub fn remove_unless_active(store: &Store, machine_id: &str) -> Result<Removal> {
    refuse_local(machine_id, "removed")?;
    write_tx(store.conn(), |tx| {
        let mut stmt = tx
            .prepare(
                "SELECT session_id FROM sessions WHERE machine_id = ?1 AND status = 'active' \
                 ORDER BY created_at, session_id",
            )
            .map_err(query_err)?;
        let active = stmt
            .query_map(params![machine_id], |r| r.get::<_, String>(0))
            .map_err(query_err)?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(query_err)?;
        if !active.is_empty() {
            return Ok(Removal::ActiveSessions(active));
        }
        let n = tx
            .execute(
                "DELETE FROM machines WHERE machine_id = ?1",
                params![machine_id],
            )
            .map_err(query_err)?;
        Ok(if n > 0 {
            Removal::Removed
        } else {
            Removal::Unknown
        })
    })
}

/// The machine an id names: the built-in `local` machine, or a stored one. An unknown id is an
/// `unknown_machine` error that lists the known ids.
pub fn resolve(store: &Store, machine_id: &str) -> Result<Machine> {
    if machine_id == LOCAL_MACHINE_ID {
        return Ok(Machine::local());
    }
    get(store, machine_id)?.ok_or_else(|| unknown_machine(store.conn(), machine_id))
}

/// Every machine id a user can name: `local` first, then the stored ones.
pub fn known_ids(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn
        .prepare("SELECT machine_id FROM machines ORDER BY machine_id")
        .map_err(query_err)?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(query_err)?;
    let mut ids = vec![LOCAL_MACHINE_ID.to_string()];
    for row in rows {
        ids.push(row.map_err(query_err)?);
    }
    Ok(ids)
}

/// The `unknown_machine` error for `machine_id`, listing the ids that do exist. An id that
/// differs from a known one only in case names that one ("did you mean"): adding it would be
/// refused as a duplicate, so the add hint is only for ids that are truly new.
pub fn unknown_machine(conn: &Connection, machine_id: &str) -> Error {
    let ids = known_ids(conn).unwrap_or_else(|_| vec![LOCAL_MACHINE_ID.to_string()]);
    let known = ids.join(", ");
    if let Some(meant) = ids.iter().find(|id| id.eq_ignore_ascii_case(machine_id)) {
        return Error::new(
            ErrorCode::UnknownMachine,
            format!(
                "no machine named {machine_id:?}; did you mean {meant:?}? (machine ids are \
                 case-sensitive; known machines: {known})"
            ),
        );
    }
    Error::new(
        ErrorCode::UnknownMachine,
        format!("no machine named {machine_id:?}; known machines: {known}"),
    )
    .with_hint(Hint::AddMachine {
        machine_id: machine_id.to_string(),
    })
}

/// The built-in id, in any case (`LOCAL`, `Local`), is not a machine anyone can add or change:
/// two ids that differ only in case would read as one machine to a person.
fn refuse_local(machine_id: &str, what: &str) -> Result<()> {
    if machine_id.eq_ignore_ascii_case(LOCAL_MACHINE_ID) {
        return Err(Error::invalid(format!(
            "the built-in machine {LOCAL_MACHINE_ID:?} cannot be {what} (machine ids are \
             compared without regard to case, so {machine_id:?} names it too); it always runs on \
             this host without SSH. Choose another machine id"
        )));
    }
    Ok(())
}

/// The stored id equal to `machine_id` without regard to ASCII case, if any (`LAB` for `lab`).
fn same_id_any_case(conn: &Connection, machine_id: &str) -> Result<Option<String>> {
    conn.query_row(
        "SELECT machine_id FROM machines WHERE machine_id = ?1 COLLATE NOCASE \
         ORDER BY machine_id = ?1 DESC LIMIT 1",
        params![machine_id],
        |r| r.get(0),
    )
    .optional()
    .map_err(query_err)
}

fn already_exists(wanted: &str, taken: &str) -> Error {
    let message = if wanted == taken {
        format!(
            "machine {wanted} already exists; it can be overwritten, explicitly (its sessions, \
             logs and runs are kept)"
        )
    } else {
        format!(
            "machine {taken} already exists and machine ids are compared without regard to case, \
             so {wanted} cannot be added beside it; use {taken}, replace it, or choose another id"
        )
    };
    Error::new(ErrorCode::AlreadyExists, message).with_hint(Hint::ReplaceMachine {
        machine_id: taken.to_string(),
    })
}

/// Run `body` in an `IMMEDIATE` transaction: the write lock is taken up front, so two processes
/// never both read a stale record and then write.
fn write_tx<T>(conn: &Connection, body: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate).map_err(query_err)?;
    let value = body(&tx)?;
    tx.commit().map_err(query_err)?;
    Ok(value)
}

type Row = (String, String, String);

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
}

fn decode_row((data, created_at, updated_at): Row) -> Result<StoredMachine> {
    Ok(StoredMachine {
        machine: from_data(&data)?,
        created_at,
        updated_at,
    })
}

fn query_err(e: rusqlite::Error) -> Error {
    Error::new(ErrorCode::Store, format!("machine store query failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::AuthType;

    fn sample(id: &str) -> Machine {
        Machine {
            machine_id: id.to_string(),
            host: "192.0.2.10".to_string(),
            port: 22,
            user: "ely".to_string(),
            auth_type: AuthType::Key,
            key_path: Some("~/.ssh/id_ed25519".to_string()),
            default_cwd: "/home/ely".to_string(),
            startup_commands: vec![],
            path_mappings: vec![],
            host_key_policy: Default::default(),
            known_hosts_file: None,
            ssh_config_host: None,
            has_password: false,
            login_env: true,
            scheduler: Default::default(),
        }
    }

    fn open() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state")).unwrap();
        (tmp, store)
    }

    #[test]
    fn insert_get_list_remove_round_trip() {
        let (_tmp, store) = open();
        insert(&store, &sample("b")).unwrap();
        insert(&store, &sample("a")).unwrap();
        assert_eq!(get(&store, "a").unwrap(), Some(sample("a")));
        let ids: Vec<_> = list(&store)
            .unwrap()
            .into_iter()
            .map(|m| m.machine_id)
            .collect();
        assert_eq!(ids, ["a", "b"]);
        assert!(remove(&store, "a").unwrap());
        assert!(!remove(&store, "a").unwrap());
        assert_eq!(get(&store, "a").unwrap(), None);
    }

    #[test]
    fn insert_twice_is_already_exists_with_the_fix() {
        let (_tmp, store) = open();
        insert(&store, &sample("m1")).unwrap();
        let err = insert(&store, &sample("m1")).unwrap_err();
        assert_eq!(err.code, ErrorCode::AlreadyExists);
        assert_eq!(
            err.hint,
            Some(Hint::ReplaceMachine {
                machine_id: "m1".into()
            })
        );
    }

    #[test]
    fn ids_differing_only_in_case_are_refused() {
        let (_tmp, store) = open();
        for builtin in ["LOCAL", "Local", "local"] {
            let err = insert(&store, &sample(builtin)).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument, "{builtin}");
            assert!(err.message.contains("built-in"), "{}", err.message);
        }
        insert(&store, &sample("lab")).unwrap();
        let err = insert(&store, &sample("LAB")).unwrap_err();
        assert_eq!(err.code, ErrorCode::AlreadyExists);
        assert!(
            err.message.contains("machine lab already exists"),
            "{}",
            err.message
        );
        assert_eq!(get(&store, "LAB").unwrap(), None);
    }

    #[test]
    fn replace_keeps_created_at_and_requires_existing() {
        let (_tmp, store) = open();
        assert_eq!(
            replace(&store, &sample("m1")).unwrap_err().code,
            ErrorCode::UnknownMachine
        );
        insert(&store, &sample("m1")).unwrap();
        let before = get_stored(&store, "m1").unwrap().unwrap();
        let mut changed = sample("m1");
        changed.host = "198.51.100.7".to_string();
        replace(&store, &changed).unwrap();
        let after = get_stored(&store, "m1").unwrap().unwrap();
        assert_eq!(after.machine.host, "198.51.100.7");
        assert_eq!(after.created_at, before.created_at);
    }

    #[test]
    fn update_edits_in_place_and_unknown_lists_known_ids() {
        let (_tmp, store) = open();
        insert(&store, &sample("m1")).unwrap();
        let m = update(&store, "m1", |m| {
            m.startup_commands = vec!["wsl".to_string()];
            Ok(())
        })
        .unwrap();
        assert_eq!(m.startup_commands, ["wsl"]);
        assert_eq!(
            get(&store, "m1").unwrap().unwrap().startup_commands,
            ["wsl"]
        );
        let err = update(&store, "nope", |_| Ok(())).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnknownMachine);
        assert!(err.message.contains("local, m1"), "{}", err.message);
    }

    #[test]
    fn local_is_resolved_but_never_written() {
        let (_tmp, store) = open();
        assert!(resolve(&store, "local").unwrap().is_local());
        for err in [
            insert(&store, &sample("local")).unwrap_err(),
            replace(&store, &sample("local")).unwrap_err(),
            remove(&store, "local").unwrap_err(),
        ] {
            assert_eq!(err.code, ErrorCode::InvalidArgument);
        }
        assert_eq!(
            resolve(&store, "ghost").unwrap_err().code,
            ErrorCode::UnknownMachine
        );
    }

    #[test]
    fn machine_ids_are_validated() {
        for good in ["a", "lab-gpu-01", "web1.example.com", "A_b"] {
            validate_machine_id(good).unwrap();
        }
        let long = "x".repeat(65);
        for bad in ["", "-a", ".a", "a b", "a/b", "a;b", long.as_str()] {
            assert!(validate_machine_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn concurrent_writers_do_not_lose_records() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        Store::open(&dir).unwrap();
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let store = Store::open(&dir).unwrap();
                    for j in 0..10 {
                        insert(&store, &sample(&format!("m{i}-{j}"))).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let store = Store::open(&dir).unwrap();
        assert_eq!(list(&store).unwrap().len(), 80);
    }
}

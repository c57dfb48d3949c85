//! Many sessions on one machine account used at once through the CLI, as many agents on one
//! shared machine would: each session created, given commands and destroyed by fresh CLI
//! processes, a bounded number at a time. Every command's end is seen promptly (a missed
//! wake-up shows as a whole 60 s wait chunk), every result is exact, and nothing of the sessions
//! is left on the machine afterwards.

mod common;
mod session_bed;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use session_bed::Bed;

/// Sessions in the suite (the benchmark's `chats` section runs the provider at full size).
const SESSIONS: usize = 40;
/// CLI processes at once.
const AT_ONCE: usize = 20;
/// Commands per session.
const COMMANDS: usize = 3;
/// A command that runs for milliseconds must be seen to end well within the 60 s wait chunk
/// whose full length a missed wake-up costs; generous for a loaded 2-core machine.
const END_SEEN_WITHIN: Duration = Duration::from_secs(25);

fn many_sessions_at_once(bed: &Bed) {
    let next = Mutex::new(0usize);
    let slow = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    let sessions = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..AT_ONCE {
            scope.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        if *n >= SESSIONS {
                            return;
                        }
                        *n += 1;
                        *n - 1
                    };
                    if let Err(e) = one_session(bed, i, &slow, &sessions) {
                        failures.lock().unwrap().push(format!("session {i}: {e}"));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed: {failures:#?}",
        failures.len()
    );
    let slow = slow.into_inner().unwrap();
    assert!(
        slow.is_empty(),
        "{} of {} commands took longer than {END_SEEN_WITHIN:?} to be seen ending: {slow:#?}",
        slow.len(),
        SESSIONS * COMMANDS
    );
    if let Some(sshd) = bed.sshd() {
        // Nothing of the destroyed sessions is left on the machine: no tmux server, control
        // client or shell names them, and their directories are gone.
        let ids = sessions.into_inner().unwrap();
        let root = home_of(sshd.user())
            .expect("the login user's home")
            .join(".local/state/remote-runner/sessions");
        session_bed::eventually("the sessions' processes and directories to go", || {
            let ps = std::process::Command::new("ps")
                .args(["-u", sshd.user(), "-o", "args="])
                .output()
                .unwrap();
            let ps = String::from_utf8_lossy(&ps.stdout).into_owned();
            let left: Vec<&String> = ids
                .iter()
                .filter(|id| ps.contains(id.as_str()) || root.join(id).exists())
                .collect();
            left.is_empty().then_some(())
        });
    }
}
both_machines!(many_sessions, many_sessions_at_once);

fn one_session(
    bed: &Bed,
    i: usize,
    slow: &Mutex<Vec<String>>,
    sessions: &Mutex<Vec<String>>,
) -> Result<(), String> {
    let work = bed.work_str();
    let created = bed.run(&[
        "session",
        "create",
        "--machine",
        &bed.machine,
        "--cwd",
        &work,
        "--json",
    ]);
    if created.code != 0 {
        return Err(format!("create: {created:?}"));
    }
    let s = created.json()["session_id"]
        .as_str()
        .ok_or("create: no session_id")?
        .to_string();
    sessions.lock().unwrap().push(s.clone());
    for k in 0..COMMANDS {
        let cmd = format!("echo session-{i}-command-{k}; (exit {k})");
        let t = Instant::now();
        let r = bed.exec(&s, &cmd, &[]);
        let took = t.elapsed();
        let v = r.json();
        if v["exit_code"] != k as i64 || v["stdout"] != format!("session-{i}-command-{k}\n") {
            return Err(format!("command {k}: {r:?}"));
        }
        if took > END_SEEN_WITHIN {
            slow.lock()
                .unwrap()
                .push(format!("session {i} command {k}: {took:?}"));
        }
    }
    let destroyed = bed.run(&["session", "destroy", "--session", &s, "--json"]);
    if destroyed.code != 0 {
        return Err(format!("destroy: {destroyed:?}"));
    }
    Ok(())
}

/// The home directory of `user` (from the passwd database).
fn home_of(user: &str) -> Option<std::path::PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[0] == user).then(|| std::path::PathBuf::from(f[5]))
    })
}

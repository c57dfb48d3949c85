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
        // Nothing of the destroyed sessions is left on the machine.
        session_bed::wait_sessions_gone(sshd, &sessions.into_inner().unwrap());
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

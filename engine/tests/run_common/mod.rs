//! Run-once scenarios, written once against a transfer test [`Bed`] (local or SSH).
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::run::{RunManifest, RunRequest, RunStatus};
use remote_runner_engine::engine::{CommandStatus, ExecRequest, SessionStatus};
use remote_runner_engine::error::Hint;
use tokio_util::sync::CancellationToken;

use crate::transfer_common::{Bed, sha_hex, write};

fn request(bed: &Bed, command: &str) -> RunRequest {
    RunRequest {
        machine: bed.machine.clone(),
        cwd: None,
        inputs: Vec::new(),
        command: command.to_string(),
        artifacts: Vec::new(),
        keep_session: false,
        timeout: Some(Duration::from_secs(120)),
        verify: false,
        slurm_args: Vec::new(),
    }
}

fn lps(bed: &Bed, rel: &str) -> String {
    bed.lp(rel).to_string_lossy().into_owned()
}

/// The manifest file is private, parses, and equals what `run show` returns.
fn check_manifest(bed: &Bed, m: &RunManifest) {
    let path = std::path::Path::new(&m.manifest_file);
    assert!(path.starts_with(bed.state.path().join("runs").join(&m.run_id)));
    assert_eq!(
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let on_disk: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(on_disk, serde_json::to_value(m).unwrap());
    for key in [
        "run_id",
        "machine_id",
        "session_id",
        "cwd",
        "command",
        "status",
        "started_at",
        "ended_at",
        "inputs",
        "command_result",
        "artifacts",
        "destroy_session_result",
        "exit_code",
    ] {
        assert!(on_disk.get(key).is_some(), "manifest lacks {key}");
    }
    assert_eq!(&bed.other_engine().run_show(&m.run_id).unwrap(), m);
    assert!(m.ended_at.is_some());
}

/// Inputs up, command, artifacts (a file and a tree) down, manifest, session destroyed, logs
/// kept; `run list` summarises it.
pub async fn run_succeeds(bed: Bed) {
    write(&bed.lp("in.txt"), b"hello run\n", 0o644);
    let mut req = request(
        &bed,
        "tr a-z A-Z < inputs/in.txt > out.txt; mkdir -p outdir/sub; echo deep > outdir/sub/y; echo to-stdout",
    );
    req.inputs = vec![(lps(&bed, "in.txt"), "inputs/in.txt".into())];
    req.artifacts = vec![
        ("out.txt".into(), lps(&bed, "got/out.txt")),
        ("outdir".into(), lps(&bed, "got/outdir")),
    ];
    req.verify = true;
    let m = bed
        .engine
        .run_once(req, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(m.status, RunStatus::Succeeded, "{m:#?}");
    assert_eq!(m.exit_code, Some(0));
    assert_eq!(m.cwd, bed.remote.to_string_lossy());
    assert_eq!(m.inputs[0].status, "succeeded");
    assert_eq!(
        m.inputs[0].sha256.as_deref(),
        Some(sha_hex(b"hello run\n").as_str())
    );
    assert_eq!(m.inputs[0].remote, "inputs/in.txt");
    assert!(
        m.artifacts.iter().all(|a| a.status == "succeeded"),
        "{:?}",
        m.artifacts
    );
    assert_eq!(
        std::fs::read_to_string(bed.lp("got/out.txt")).unwrap(),
        "HELLO RUN\n"
    );
    assert_eq!(
        std::fs::read_to_string(bed.lp("got/outdir/sub/y")).unwrap(),
        "deep\n"
    );
    assert_eq!(m.artifacts[1].files, 1);
    let cmd = m.command_result.as_ref().unwrap();
    assert_eq!(cmd.status, CommandStatus::Completed);
    assert_eq!(cmd.stdout, "to-stdout\n");
    assert!(
        std::path::Path::new(&cmd.log_file_local).exists(),
        "command log kept"
    );
    assert_eq!(
        m.destroy_session_result.as_ref().unwrap()["status"],
        "destroyed"
    );
    let sid = m.session_id.as_deref().unwrap();
    assert_eq!(
        bed.engine.session_show(sid).unwrap().status,
        SessionStatus::Destroyed
    );
    assert!(m.error.is_none());
    check_manifest(&bed, &m);

    let list = bed.engine.run_list().unwrap();
    assert_eq!(list.len(), 1);
    let s = &list[0];
    assert_eq!(
        (s.run_id.as_str(), s.status),
        (m.run_id.as_str(), RunStatus::Succeeded)
    );
    assert_eq!(
        (s.input_count, s.artifact_count, s.exit_code),
        (1, 2, Some(0))
    );
    assert_eq!(s.machine_id, bed.machine.machine_id);
    // Transfers of the run are in the history of its session.
    assert_eq!(bed.engine.transfer_history(Some(sid)).unwrap().len(), 3);
}

/// A non-zero exit fails the run, yet the artifacts that exist are downloaded, a missing one is
/// reported `missing`, and the manifest is written.
pub async fn run_fails_but_fetches_artifacts(bed: Bed) {
    let mut req = request(&bed, "echo partial > out.txt; echo oops >&2; exit 3");
    req.artifacts = vec![
        ("out.txt".into(), lps(&bed, "out.txt")),
        ("missing.txt".into(), lps(&bed, "missing.txt")),
    ];
    let m = bed
        .engine
        .run_once(req, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(m.status, RunStatus::Failed);
    assert_eq!(m.exit_code, Some(3), "{m:#?}");
    let cmd = m.command_result.as_ref().unwrap();
    // `exit 3` ends the session shell itself: the command record says so (failed with its exit
    // code, the shell restarted); for a run it is just the exit code.
    assert_eq!(
        (cmd.status, cmd.stderr.as_str()),
        (CommandStatus::Failed, "oops\n")
    );
    assert!(cmd.shell_restarted);
    assert_eq!(cmd.exit_code, Some(3));
    assert_eq!(m.artifacts[0].status, "succeeded");
    assert_eq!(
        std::fs::read_to_string(bed.lp("out.txt")).unwrap(),
        "partial\n"
    );
    assert_eq!(m.artifacts[1].status, "missing");
    assert_eq!(
        m.artifacts[1].error.as_ref().unwrap().code,
        "remote_not_found"
    );
    assert!(!bed.lp("missing.txt").exists());
    assert!(
        m.error.as_ref().unwrap().message.contains("code 3"),
        "{:?}",
        m.error
    );
    assert_eq!(
        m.destroy_session_result.as_ref().unwrap()["status"],
        "destroyed"
    );
    check_manifest(&bed, &m);
}

/// A missing input stops the run before the command: failed, artifacts skipped, session gone.
pub async fn run_input_failure(bed: Bed) {
    let mut req = request(&bed, "touch ran.flag");
    req.inputs = vec![(lps(&bed, "no-such-input"), "in.txt".into())];
    req.artifacts = vec![("ran.flag".into(), lps(&bed, "ran.flag"))];
    let m = bed
        .engine
        .run_once(req, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(m.status, RunStatus::Failed);
    assert_eq!(m.inputs[0].status, "failed");
    assert_eq!(m.artifacts[0].status, "skipped");
    assert!(m.command_result.is_none());
    assert!(!bed.rp("ran.flag").exists());
    assert!(
        m.error.as_ref().unwrap().message.contains("no-such-input"),
        "{:?}",
        m.error
    );
    assert_eq!(
        m.destroy_session_result.as_ref().unwrap()["status"],
        "destroyed"
    );
    check_manifest(&bed, &m);
}

/// Past the time limit the command is stopped and the run is `timed_out`; with keep_session
/// the session stays usable.
pub async fn run_times_out(bed: Bed) {
    let mut req = request(&bed, "echo started; sleep 60; echo late > late.txt");
    req.timeout = Some(Duration::from_secs(2));
    req.keep_session = true;
    req.artifacts = vec![("late.txt".into(), lps(&bed, "late.txt"))];
    let m = bed
        .engine
        .run_once(req, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(m.status, RunStatus::TimedOut, "{m:#?}");
    let cmd = m.command_result.as_ref().unwrap();
    assert_eq!(cmd.status, CommandStatus::TimedOut);
    assert_eq!(cmd.stdout, "started\n");
    assert_eq!(m.error.as_ref().unwrap().code, "timeout");
    assert_eq!(m.artifacts[0].status, "missing");
    assert_eq!(m.destroy_session_result.as_ref().unwrap()["kept"], true);
    let sid = m.session_id.clone().unwrap();
    // The stored command says timed_out too, and the kept session runs the next command.
    let stored = bed
        .engine
        .command_show(&sid, &cmd.command_id)
        .await
        .unwrap();
    assert_eq!(stored.status, CommandStatus::TimedOut);
    let next = bed
        .engine
        .exec(
            &sid,
            "echo alive",
            ExecRequest::wait().with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(next.stdout, "alive\n");
    bed.engine.destroy(&sid).await.unwrap();
    assert!(!bed.rp("late.txt").exists());
    check_manifest(&bed, &m);
}

/// Cancelling while the command runs stops it and still writes a `cancelled` manifest.
pub async fn run_cancelled(bed: Bed) {
    let req = request(&bed, "touch started.flag; sleep 60; touch finished.flag");
    let token = CancellationToken::new();
    let flag = bed.rp("started.flag");
    let canceller = {
        let token = token.clone();
        async move {
            let until = Instant::now() + Duration::from_secs(60);
            while !flag.exists() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            token.cancel();
        }
    };
    let (m, ()) = tokio::join!(bed.engine.run_once(req, token), canceller);
    let m = m.unwrap();
    assert_eq!(m.status, RunStatus::Cancelled, "{m:#?}");
    let cmd = m.command_result.as_ref().unwrap();
    assert_eq!(cmd.status, CommandStatus::Stopped);
    assert_eq!(m.error.as_ref().unwrap().code, "cancelled");
    assert_eq!(
        m.destroy_session_result.as_ref().unwrap()["status"],
        "destroyed"
    );
    assert!(!bed.rp("finished.flag").exists());
    check_manifest(&bed, &m);
    assert_eq!(
        bed.engine.run_list().unwrap()[0].status,
        RunStatus::Cancelled
    );
}

/// `run show` of an unknown id says how to find the real ones.
pub async fn run_show_unknown(bed: Bed) {
    let err = bed.engine.run_show("run_nope").unwrap_err();
    assert_eq!(err.code, ErrorCode::UnknownRun);
    assert_eq!(err.hint, Some(Hint::ListRuns), "{err:?}");
    assert!(bed.engine.run_list().unwrap().is_empty());
    let err = bed
        .engine
        .run_once(request(&bed, "  "), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    let mut relative = request(&bed, "true");
    relative.cwd = Some("relative/dir".into());
    let err = bed
        .engine
        .run_once(relative, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert!(bed.engine.run_list().unwrap().is_empty());
}

/// Cancelled before anything ran: no session, no command, still a `cancelled` manifest.
pub async fn run_cancelled_early(bed: Bed) {
    let token = CancellationToken::new();
    token.cancel();
    let mut req = request(&bed, "touch ran.flag");
    req.inputs = vec![(lps(&bed, "whatever"), "in.txt".into())];
    let m = bed.engine.run_once(req, token).await.unwrap();
    assert_eq!(m.status, RunStatus::Cancelled);
    assert!(m.session_id.is_none() && m.command_result.is_none());
    assert_eq!(m.inputs[0].status, "skipped");
    assert_eq!(m.error.as_ref().unwrap().code, "cancelled");
    assert!(!bed.rp("ran.flag").exists());
    check_manifest(&bed, &m);
}

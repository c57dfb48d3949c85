//! `run once | list | show` through the CLI binary, on `local` and over the real sshd: success
//! with an input and an artifact, failure that still downloads artifacts and writes the
//! manifest, Ctrl-C (SIGINT to the CLI) that stops the remote command and records `cancelled`.

mod common;
mod session_bed;

use serde_json::Value;
use session_bed::{Bed, assert_fields, eventually, signal, wait_child};

const MANIFEST_FIELDS: &[&str] = &[
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
];

fn manifest_on_disk(m: &Value) -> Value {
    let text = std::fs::read_to_string(m["manifest_file"].as_str().unwrap()).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn a_run_uploads_runs_and_downloads(bed: &Bed) {
    let input = bed.sb.path().join("input.txt");
    std::fs::write(&input, "hello run\n").unwrap();
    let artifact = bed.sb.path().join("output.txt");
    let input_pair = format!("{}={}", input.display(), bed.at("input.txt"));
    let artifact_pair = format!("{}={}", bed.at("output.txt"), artifact.display());
    let work = bed.work_str();
    let m = bed.json(&[
        "run",
        "once",
        "--machine",
        &bed.machine,
        "--cwd",
        &work,
        "--input",
        &input_pair,
        "--cmd",
        "tr a-z A-Z < input.txt > output.txt",
        "--artifact",
        &artifact_pair,
        "--verify",
    ]);
    assert_fields(&m, MANIFEST_FIELDS);
    assert_eq!(m["status"], "succeeded", "{m:#}");
    assert_eq!(m["exit_code"], 0);
    assert_eq!(m["inputs"][0]["status"], "succeeded");
    assert_eq!(m["artifacts"][0]["status"], "succeeded");
    assert_eq!(m["command_result"]["exit_code"], 0);
    assert_eq!(std::fs::read_to_string(&artifact).unwrap(), "HELLO RUN\n");
    assert_eq!(manifest_on_disk(&m)["run_id"], m["run_id"]);
    // The session was destroyed, its logs kept.
    let session = m["session_id"].as_str().unwrap();
    assert_eq!(
        bed.json(&["session", "show", "--session", session])["status"],
        "destroyed"
    );

    let run_id = m["run_id"].as_str().unwrap();
    let shown = bed.json(&["run", "show", run_id]);
    assert_eq!(shown, m);
    let list = bed.json(&["run", "list"]);
    let runs = list["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_fields(
        &runs[0],
        &[
            "run_id",
            "machine_id",
            "session_id",
            "cwd",
            "command",
            "status",
            "started_at",
            "ended_at",
            "exit_code",
            "input_count",
            "artifact_count",
        ],
    );
    assert_eq!(runs[0]["run_id"], run_id);
    let unknown = bed.run(&["run", "show", "run_nope", "--json"]);
    assert_eq!(unknown.code, 3, "{unknown:?}");
    assert_eq!(unknown.error()["code"], "unknown_run");
}
both_machines!(success, a_run_uploads_runs_and_downloads);

fn a_failed_run_still_keeps_artifacts_and_manifest(bed: &Bed) {
    let artifact = bed.sb.path().join("partial.txt");
    let artifact_pair = format!("{}={}", bed.at("partial.txt"), artifact.display());
    let work = bed.work_str();
    let args = [
        "run",
        "once",
        "--machine",
        &bed.machine,
        "--cwd",
        &work,
        "--cmd",
        "echo partial > partial.txt; echo failing >&2; (exit 4)",
        "--artifact",
        &artifact_pair,
        "--json",
    ];
    let r = bed.run(&args);
    assert_eq!(r.code, 1, "a failed run is exit 1: {r:?}");
    let m = r.json();
    assert_eq!(m["status"], "failed");
    assert_eq!(m["exit_code"], 4);
    assert_eq!(m["command_result"]["stderr"], "failing\n");
    assert_eq!(m["artifacts"][0]["status"], "succeeded");
    assert_eq!(std::fs::read_to_string(&artifact).unwrap(), "partial\n");
    assert_eq!(manifest_on_disk(&m)["status"], "failed");

    let mut passthrough = args.to_vec();
    passthrough.push("--exit-code");
    assert_eq!(bed.run(&passthrough).code, 4);
}
both_machines!(failure, a_failed_run_still_keeps_artifacts_and_manifest);

fn ctrl_c_cancels_the_run(bed: &Bed) {
    let marker = bed.at("started");
    let cmd = format!("touch {marker}; sleep 300; echo never");
    let work = bed.work_str();
    let mut child = bed.spawn(&[
        "run",
        "once",
        "--machine",
        &bed.machine,
        "--cwd",
        &work,
        "--cmd",
        &cmd,
        "--json",
    ]);
    eventually("the command to start", || {
        std::path::Path::new(&marker).exists().then_some(())
    });
    signal(&child, "INT");
    let r = wait_child(&mut child);
    assert_eq!(r.code, 7, "cancelled: {r:?}");
    let m = r.json();
    assert_eq!(m["status"], "cancelled", "{m:#}");
    assert_eq!(m["command_result"]["status"], "stopped");
    assert_eq!(manifest_on_disk(&m)["status"], "cancelled");
    let listed = bed.json(&["run", "list"]);
    assert_eq!(listed["runs"][0]["status"], "cancelled");
}
both_machines!(cancel, ctrl_c_cancels_the_run);

/// `run once` artifacts download like `file get` (issue 28): a 0777 result directory with a
/// 4777 file, fetched into an existing 0755 directory, leaves it 0755, and the file arrives
/// without set-id or group/other write.
fn run_artifacts_never_widen_local_permissions(bed: &Bed) {
    use std::os::unix::fs::PermissionsExt;
    let dest = bed.sb.path().join("results-here");
    std::fs::create_dir(&dest).unwrap();
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pair = format!("{}={}", bed.at("results"), dest.display());
    let work = bed.work_str();
    let m = bed.json(&[
        "run",
        "once",
        "--machine",
        &bed.machine,
        "--cwd",
        &work,
        "--cmd",
        "mkdir -p results && echo x > results/tool && chmod 4777 results/tool && chmod 777 results",
        "--artifact",
        &pair,
    ]);
    assert_eq!(m["status"], "succeeded", "{m:#}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&dest), 0o755);
    let tool = mode(&dest.join("tool"));
    assert_eq!(tool & 0o7022, 0, "{tool:o}");
}
both_machines!(never_wider, run_artifacts_never_widen_local_permissions);

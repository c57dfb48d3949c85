//! The Slurm scripts as files: `provider/src/slurm/slurm.sh` (run on login nodes through the
//! control script, so POSIX sh: shellcheck-clean and parsed by dash and busybox sh) and the test
//! bed's `scripts/slurm-bed.sh` (bash).

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn run(tool: &str, args: &[&str], file: &Path) {
    let out = Command::new(tool)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {tool} ({e}); install it with: bash scripts/install-deps.sh")
        });
    assert!(
        out.status.success(),
        "{tool} {args:?} {}:\n{}{}",
        file.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_slurm_operations_are_posix_sh() {
    let script = root().join("provider/src/slurm/slurm.sh");
    run("shellcheck", &["-s", "sh"], &script);
    run("dash", &["-n"], &script);
    run("busybox", &["sh", "-n"], &script);
}

#[test]
fn the_bed_script_is_shellcheck_clean() {
    run(
        "shellcheck",
        &["-s", "bash"],
        &root().join("scripts/slurm-bed.sh"),
    );
}

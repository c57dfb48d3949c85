//! The Slurm scripts as files: `engine/src/slurm/slurm.sh` (run on login nodes through the
//! control script, so POSIX sh: shellcheck-clean and parsed by dash and busybox sh) and the test
//! bed's `scripts/slurm-bed.sh` (bash), and `scripts/install-deps.sh`, which installs the bed.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `scripts/install-deps.sh` copied where the unprivileged user the tests run it as can read it,
/// whatever the modes of the checkout's directories (a checkout under a 0700 directory is not).
fn install_deps_for_a_user() -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.path().join("install-deps.sh");
    std::fs::copy(root().join("scripts/install-deps.sh"), &script).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, script)
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
    let script = root().join("engine/src/slurm/slurm.sh");
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

/// `scripts/install-deps.sh` as a user with sudo runs it (Debian's user PATH has no /usr/sbin):
/// on this host, where the whole test bed is installed, it finds everything and installs
/// nothing. It used to look for `nft` on the PATH only, so for such a user it installed
/// nftables again on every run (and, without root or sudo, failed). The MCP tests' Python SDK is
/// per Python installation (this user's `python3` is not the one the tests run), so it is left
/// out here with `RR_INSTALL_DEPS_NO_PIP=1`.
#[test]
fn install_deps_finds_an_installed_bed_from_a_users_path() {
    let (_dir, script) = install_deps_for_a_user();
    run("shellcheck", &[], &script);
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/games"])
        .args(["HOME=/nonexistent", "RR_INSTALL_DEPS_NO_PIP=1", "bash"])
        .arg(&script)
        .arg("--tests")
        .output()
        .expect("setpriv (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("installing"),
        "as a user, with the bed installed: {:?}\n{stderr}",
        out.status
    );
}

/// On a machine without a C compiler (a fresh Debian with only rustup), `--demo` installs one:
/// the demo builds the binaries, and linking and the C parts (aws-lc, SQLite) need `cc`. Run as
/// a user without sudo and with a PATH that has tmux and ssh but no `cc`, it must ask for gcc.
#[test]
fn install_deps_demo_installs_a_c_compiler_when_there_is_none() {
    let (_dir, script) = install_deps_for_a_user();
    let bin = tempfile::tempdir().unwrap();
    for tool in ["bash", "tmux", "ssh", "ssh-keygen", "id", "env"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
        assert!(!path.is_empty(), "{tool} is not installed");
        std::os::unix::fs::symlink(&path, bin.path().join(tool)).unwrap();
    }
    std::fs::set_permissions(
        bin.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "env",
            "-i",
        ])
        .arg(format!("PATH={}", bin.path().display()))
        .arg(bin.path().join("bash"))
        .arg(&script)
        .arg("--demo")
        .output()
        .expect("setpriv (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("installing gcc"),
        "{:?}\n{stderr}",
        out.status
    );
}

/// `--tests` installs GNU time, which cli/tests/session_behaviour.rs runs as `/usr/bin/time` to
/// measure the CLI's peak memory (it is not in a fresh Debian). Here it is hidden (a mount
/// namespace binds a non-executable file over it) and the script, run as a user without sudo,
/// must ask for the package.
#[test]
fn install_deps_tests_installs_gnu_time_when_missing() {
    let (_dir, script) = install_deps_for_a_user();
    let dir = tempfile::tempdir().unwrap();
    let blank = dir.path().join("not-time");
    std::fs::write(&blank, b"").unwrap();
    let hide = format!(
        "mount --bind {} /usr/bin/time && exec setpriv --reuid=65534 --regid=65534 \
         --clear-groups env -i PATH=/usr/local/bin:/usr/bin:/bin bash {} --tests",
        blank.display(),
        script.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &hide])
        .output()
        .expect("unshare (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("installing time"),
        "{:?}\n{stderr}",
        out.status
    );
}

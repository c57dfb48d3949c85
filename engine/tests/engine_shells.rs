//! The engine over SSH for users unlike our own test user: login shells bash (with a noisy
//! `.bashrc`), zsh, fish and sh (dash), each with startup files that print a greeting on stdout
//! and stderr and set PATH and a variable (testkit `ensure_login_account`). For each account the
//! core engine cases run over the real sshd test bed, plus what only such accounts show: the
//! login environment reaches commands, the greeting never does, engine state lives under the
//! user's home, and a shared cwd gives no other user a hold on the session.

mod engine_suite;
mod ssh_common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use remote_runner_engine::engine::{CommandRecord, ExecRequest};
use remote_runner_engine::machine::Machine;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_testkit::{
    Account, GREETING, LoginShell, PATH_PROBE, PATH_PROBE_OUTPUT, Sshd, ensure_login_account,
};

/// A test bed and a connection as one account, in a fresh directory the account owns.
struct ShellBed {
    sshd: Sshd,
    account: Account,
    t: Arc<Remote>,
    machine: Machine,
    dir: String,
}

async fn shell_bed(shell: LoginShell, case: &str) -> ShellBed {
    let account = ensure_login_account(shell)
        .unwrap_or_else(|e| panic!("create the {shell:?} account (run as root): {e:#}"));
    let sshd = ssh_common::start();
    let dir = sshd
        .remote_dir_as(case, &account.user)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut machine = ssh_common::machine_for(&sshd, &account.user, &sshd.keys.ed25519);
    machine.default_cwd = dir.clone();
    let t = Remote::direct(
        ssh::connect(&machine, ssh_common::opts())
            .await
            .unwrap_or_else(|e| panic!("connect as {}: {e}", account.user)),
    );
    ShellBed {
        sshd,
        account,
        t,
        machine,
        dir,
    }
}

impl ShellBed {
    /// An engine bed whose session is created for this account's machine record.
    async fn bed(&self) -> engine_suite::Bed {
        engine_suite::bed_on(
            self.t.clone(),
            self.machine.clone(),
            engine_suite::options(Vec::new()),
        )
        .await
    }

    fn tools_dir(&self) -> String {
        format!("{}/rr-tools/bin", self.account.home.display())
    }
}

/// Neither stdout nor stderr (excerpt, full files, combined log) of `rec` holds the greeting.
fn assert_no_greeting(rec: &CommandRecord) {
    for (what, text) in [
        ("stdout", rec.stdout.clone()),
        ("stderr", rec.stderr.clone()),
        (
            "stdout file",
            String::from_utf8_lossy(&std::fs::read(&rec.stdout_file_local).unwrap_or_default())
                .into_owned(),
        ),
        (
            "stderr file",
            String::from_utf8_lossy(&std::fs::read(&rec.stderr_file_local).unwrap_or_default())
                .into_owned(),
        ),
        (
            "log",
            std::fs::read_to_string(&rec.log_file_local).unwrap_or_default(),
        ),
    ] {
        assert!(
            !text.contains(GREETING),
            "a startup file's greeting reached the {what} of {:?}: {text:?}",
            rec.command
        );
    }
}

async fn wait_bg(b: &engine_suite::Bed, cmd: &str) -> CommandRecord {
    let rec = b
        .engine
        .exec(b.sid(), cmd, ExecRequest::background())
        .await
        .unwrap_or_else(|e| panic!("background {cmd:?}: {e}"));
    b.engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(60))
        .await
        .unwrap()
}

/// The PATH and variable set by the account's own startup files reach foreground commands,
/// background commands, commands with a cwd override, and the fresh shell after `exit`.
async fn login_environment_reaches_commands(shell: LoginShell) {
    let s = shell_bed(shell, "login_env").await;
    let b = s.bed().await;
    let probe = format!(
        "{PATH_PROBE}; printf '%s\\n' \"${var}\"; case \":$PATH:\" in *\":{tools}:\"*) echo on-path;; *) echo off-path;; esac",
        var = shell.env_var(),
        tools = s.tools_dir()
    );
    let want = format!("{PATH_PROBE_OUTPUT}\n1\non-path\n");
    let rec = b.run(&probe).await;
    assert_eq!(
        (rec.exit_code, rec.stdout.as_str(), rec.stderr.as_str()),
        (Some(0), want.as_str(), ""),
        "{shell:?}: foreground: {rec:?}"
    );
    let rec = wait_bg(&b, &probe).await;
    assert_eq!(
        (rec.exit_code, rec.stdout.as_str(), rec.stderr.as_str()),
        (Some(0), want.as_str(), ""),
        "{shell:?}: background: {rec:?}"
    );
    let rec = b
        .engine
        .exec(
            b.sid(),
            &probe,
            ExecRequest::wait()
                .with_cwd("/")
                .with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(
        (rec.exit_code, rec.stdout.as_str()),
        (Some(0), want.as_str()),
        "{shell:?}: cwd override: {rec:?}"
    );
    let rec = b.run("exit 4").await;
    assert_eq!(rec.exit_code, Some(4), "{shell:?}: {rec:?}");
    let rec = b.run(&probe).await;
    assert_eq!(
        (rec.exit_code, rec.stdout.as_str(), rec.stderr.as_str()),
        (Some(0), want.as_str(), ""),
        "{shell:?}: the fresh shell after exit: {rec:?}"
    );
    b.finish().await;
    drop(s.sshd);
}

/// Whatever the startup files print goes nowhere near a command's output: foreground (ok and
/// failing), stderr-only, background, cwd override, a long output, and after `exit`.
async fn greeting_never_in_command_output(shell: LoginShell) {
    let s = shell_bed(shell, "greeting").await;
    let b = s.bed().await;
    let cases = [
        ("echo one", Some(0), "one\n", ""),
        ("echo two >&2; (exit 3)", Some(3), "", "two\n"),
        ("true", Some(0), "", ""),
        ("exit 2", Some(2), "", ""),
        ("printf 'after-exit\\n'", Some(0), "after-exit\n", ""),
    ];
    for (cmd, code, out, err) in cases {
        let rec = b.run(cmd).await;
        assert_no_greeting(&rec);
        assert_eq!(
            (rec.exit_code, rec.stdout.as_str(), rec.stderr.as_str()),
            (code, out, err),
            "{shell:?}: {cmd:?}: {rec:?}"
        );
    }
    let rec = b.run("seq 1 20000").await;
    assert_no_greeting(&rec);
    let rec = wait_bg(&b, "echo bg; echo bg-err >&2").await;
    assert_no_greeting(&rec);
    assert_eq!(
        (rec.stdout.as_str(), rec.stderr.as_str()),
        ("bg\n", "bg-err\n")
    );
    let rec = b
        .engine
        .exec(
            b.sid(),
            "pwd",
            ExecRequest::wait()
                .with_cwd(&s.dir)
                .with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_no_greeting(&rec);
    assert_eq!(rec.stdout, format!("{}\n", s.dir));
    b.finish().await;
    drop(s.sshd);
}

/// Calls without input run on a long-lived control process: one login (and one greeting) for
/// many calls, each reply exact.
async fn control_calls_share_one_login(shell: LoginShell) {
    let s = shell_bed(shell, "control_reuse").await;
    let call = || {
        remote_runner_engine::remote::Call::new("sh")
            .param("RR_SCRIPT", "echo \"pid=$$\"; echo err >&2; exit 3")
    };
    let first = call().run(s.t.as_ref()).await.unwrap();
    let second = call().run(s.t.as_ref()).await.unwrap();
    for out in [&first, &second] {
        assert_eq!(out.status.code(), Some(3), "{shell:?}: {out:?}");
        assert!(out.stdout_lossy().starts_with("pid="), "{shell:?}: {out:?}");
        assert_eq!(out.stderr_lossy(), "err\n", "{shell:?}: {out:?}");
        assert!(!out.stdout_lossy().contains(GREETING), "{shell:?}: {out:?}");
    }
    assert_eq!(first.stdout, second.stdout, "{shell:?}: one process");
    drop(s.sshd);
}

/// Engine state lives under the user's home (`${XDG_STATE_HOME:-~/.local/state}/remote-runner`,
/// 0700, owned by the user), never in the session cwd; `session destroy` removes the session's
/// remote state.
async fn state_lives_under_home(shell: LoginShell) {
    let s = shell_bed(shell, "state_home").await;
    let b = s.bed().await;
    let rec = b.run("echo hi").await;
    assert_eq!(rec.stdout, "hi\n");
    wait_bg(&b, "echo bg").await;
    let root = s.account.home.join(".local/state/remote-runner");
    let under = |p: &str| Path::new(p).starts_with(&root);
    assert!(
        under(&b.session.remote_state_dir),
        "{shell:?}: session state {} is not under {}",
        b.session.remote_state_dir,
        root.display()
    );
    for p in [
        &rec.remote_state_dir,
        &rec.remote_stdout_file,
        &rec.remote_stderr_file,
        &rec.remote_exit_file,
    ] {
        assert!(
            under(p),
            "{shell:?}: command file {p} is not under {}",
            root.display()
        );
    }
    let meta =
        std::fs::metadata(&root).unwrap_or_else(|e| panic!("{shell:?}: {}: {e}", root.display()));
    let uid = std::fs::metadata(&s.account.home).unwrap().uid();
    assert_eq!(
        (meta.uid(), meta.permissions().mode() & 0o777),
        (uid, 0o700),
        "{shell:?}: {} must be the user's and 0700",
        root.display()
    );
    let left: Vec<_> = std::fs::read_dir(&s.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "{shell:?}: the session wrote into its cwd: {left:?}"
    );
    let state_dir = b.session.remote_state_dir.clone();
    b.engine.destroy(b.sid()).await.unwrap();
    assert!(
        !Path::new(&state_dir).exists(),
        "{shell:?}: session destroy left {state_dir}"
    );
    b.finish().await;
    drop(s.sshd);
}

/// Engine suite cases of the same names, as the account of the enclosing module's `SHELL`.
macro_rules! suite_cases {
    ($($case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let s = shell_bed(SHELL, stringify!($case)).await;
            engine_suite::$case(s.t.clone(), &s.dir).await;
            drop(s.sshd);
        }
    )*};
}

macro_rules! per_shell {
    ($($module:ident => $shell:expr),* $(,)?) => {$(
        mod $module {
            use super::*;

            const SHELL: LoginShell = $shell;

            suite_cases!(
                exec_exact_exit_codes,
                stdout_stderr_separated,
                shell_state_persists,
                heredocs,
                background_run_wait_stop,
                exit_keeps_output_code_and_session,
                git_repo_cwd_leaves_no_trace,
                send_python_repl,
                send_ctrl_c_interrupts,
                send_to_the_shell,
                exec_returns_waiting_input,
                background_command_with_stdin,
                transcript_is_what_a_person_saw,
                transcript_shows_output_as_it_comes,
                typed_commands_use_the_control_client,
            );

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn login_environment_reaches_commands() {
                super::login_environment_reaches_commands(SHELL).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn greeting_never_in_command_output() {
                super::greeting_never_in_command_output(SHELL).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn control_calls_share_one_login() {
                super::control_calls_share_one_login(SHELL).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn state_lives_under_home() {
                super::state_lives_under_home(SHELL).await;
            }
        }
    )*};
}

per_shell!(
    bash => LoginShell::Bash,
    zsh => LoginShell::Zsh,
    fish => LoginShell::Fish,
    sh => LoginShell::Sh,
);

/// For a bash user, `~/.bashrc`'s alias, function and export are available to commands (in the
/// session shell), yet its greeting is not in their output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_bashrc_alias_and_function_available() {
    let s = shell_bed(LoginShell::Bash, "bashrc_alias").await;
    let b = s.bed().await;
    let rec = b
        .run("rr_user_fn; alias ll; ll -d /; printf '%s\\n' \"$RR_FROM_BASHRC\"")
        .await;
    assert_no_greeting(&rec);
    assert_eq!(rec.exit_code, Some(0), "{rec:?}");
    assert_eq!(rec.stderr, "");
    let lines: Vec<&str> = rec.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{:?}", rec.stdout);
    assert_eq!(lines[0], "user-fn-ok");
    assert_eq!(lines[1], "alias ll='ls -l'");
    assert!(
        lines[2].starts_with('d') && lines[2].ends_with(" /"),
        "`ll -d /` ran `ls -l -d /`: {:?}",
        lines[2]
    );
    assert_eq!(lines[3], "1");
    // Still there after the shell is restarted by `exit`.
    assert_eq!(b.run("exit 1").await.exit_code, Some(1));
    let rec = b.run("rr_user_fn; alias ll").await;
    assert_eq!(
        (rec.exit_code, rec.stdout.as_str()),
        (Some(0), "user-fn-ok\nalias ll='ls -l'\n")
    );
    b.finish().await;
    drop(s.sshd);
}

/// Two users whose sessions use the same shared, sticky, world-writable cwd (like `/tmp`), where
/// a third user pre-created the engine's old directory names: both sessions work, neither
/// writes anything into the shared directory, and the third user's directories stay untouched
/// (nothing of theirs is adopted or sourced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_cwd_gives_no_other_user_a_hold() {
    let attacker = ensure_login_account(LoginShell::Fish).expect("create rrtest-fish");
    let victim = ensure_login_account(LoginShell::Sh).expect("create rrtest-sh");
    let sshd = ssh_common::start();
    let shared: PathBuf = sshd.remote_dir_as("shared", "root").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The attacker's planted tree: what the engine used to create under the cwd.
    let planted = shared.join(".remote-runner");
    for d in [
        planted.clone(),
        planted.join("sessions"),
        planted.join("commands"),
    ] {
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let ok = std::process::Command::new("chown")
            .arg(format!("{0}:{0}", attacker.user))
            .arg(&d)
            .status()
            .unwrap()
            .success();
        assert!(ok, "chown {}", d.display());
    }
    let shared_s = shared.to_string_lossy().into_owned();
    let mut beds = Vec::new();
    for (user, key) in [
        (victim.user.as_str(), &sshd.keys.ed25519),
        (sshd.user(), &sshd.keys.ed25519),
    ] {
        let mut machine = ssh_common::machine_for(&sshd, user, key);
        machine.default_cwd = shared_s.clone();
        let t = Remote::direct(
            ssh::connect(&machine, ssh_common::opts())
                .await
                .unwrap_or_else(|e| panic!("connect as {user}: {e}")),
        );
        let b = engine_suite::bed_on(t, machine, engine_suite::options(Vec::new())).await;
        beds.push((user.to_string(), b));
    }
    for (user, b) in &beds {
        let rec = b.run("id -un; pwd").await;
        assert_eq!(
            (rec.exit_code, rec.stdout.as_str()),
            (Some(0), format!("{user}\n{shared_s}\n").as_str()),
            "{user}: {rec:?}"
        );
        assert_eq!(wait_bg(b, "id -un").await.stdout, format!("{user}\n"));
    }
    // Nothing in the shared directory belongs to a session user, and the planted tree is as the
    // attacker left it.
    let attacker_uid = std::fs::metadata(&attacker.home).unwrap().uid();
    let mut foreign = Vec::new();
    let mut stack = vec![shared.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.uid() != attacker_uid {
                foreign.push(e.path());
            }
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    assert!(
        foreign.is_empty(),
        "the sessions wrote into the shared cwd, some inside the attacker's directories: {foreign:?}"
    );
    for d in [&planted, &planted.join("sessions")] {
        let m = std::fs::metadata(d).unwrap();
        assert_eq!(
            (m.uid(), m.permissions().mode() & 0o7777),
            (attacker_uid, 0o777),
            "{} was changed",
            d.display()
        );
    }
    for (_, b) in beds {
        b.finish().await;
    }
    drop(sshd);
}

/// The per-machine switch: with the login environment off, the session shell gets only what
/// sshd's exec gives (the account's startup files are not run), and the session says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_environment_can_be_turned_off_per_machine() {
    let mut sb = shell_bed(LoginShell::Sh, "login_env_off").await;
    sb.machine.login_env = false;
    let b = sb.bed().await;
    assert_eq!(b.session.login_environment.as_deref(), Some("off"));
    let rec = b.run("echo \"[${RR_FROM_PROFILE:-unset}]\"").await;
    assert_eq!(rec.stdout, "[unset]\n", "{rec:?}");
    assert_no_greeting(&rec);
    b.finish().await;
    drop(sb);
}

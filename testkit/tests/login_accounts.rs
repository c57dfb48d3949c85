//! The login-shell accounts of the test kit, checked with the stock OpenSSH client: each logs in
//! with the test client key, its startup files print the greeting on stdout and stderr, and its
//! own login shell (as a login, interactive shell) sees the PATH and variables they set.

use std::process::{Command, Output};

use remote_runner_testkit::{
    GREETING, HOST_ALIAS, LoginShell, PATH_PROBE, PATH_PROBE_OUTPUT, Sshd, ensure_login_account,
};

fn ssh(sshd: &Sshd, user: &str, cmd: &str) -> Output {
    Command::new("ssh")
        .arg("-F")
        .arg(&sshd.ssh_config)
        .args(["-o", "BatchMode=yes", "-l", user, HOST_ALIAS, cmd])
        .output()
        .expect("run ssh")
}

#[test]
fn every_account_logs_in_with_the_stock_client() {
    let sshd = Sshd::start().expect("start sshd");
    for shell in LoginShell::ALL {
        let acct = ensure_login_account(shell).expect("create the account");
        assert_eq!(acct.user, shell.user());
        assert!(acct.home.is_dir(), "{acct:?}");
        let out = ssh(&sshd, &acct.user, "echo hi");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{shell:?}: ssh failed: {}\nsshd log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            sshd.log_text()
        );
        assert!(stdout.ends_with("hi\n"), "{shell:?}: {stdout:?}");
    }
}

#[test]
fn accounts_are_idempotent() {
    for shell in LoginShell::ALL {
        let a = ensure_login_account(shell).unwrap();
        let b = ensure_login_account(shell).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn login_shells_are_noisy_and_see_their_path() {
    let sshd = Sshd::start().expect("start sshd");
    for shell in LoginShell::ALL {
        let acct = ensure_login_account(shell).unwrap();
        // The account's own shell, as an interactive login shell: every startup file runs.
        // Single quotes parse the same in sh, bash, zsh and fish.
        let extra = if shell == LoginShell::Bash {
            "; rr_user_fn; alias ll"
        } else {
            ""
        };
        let cmd = format!(
            "exec {} -i -l -c '{PATH_PROBE}; echo ${}{extra}' </dev/null",
            shell.path(),
            shell.env_var()
        );
        let out = ssh(&sshd, &acct.user, &cmd);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{shell:?}: {stdout:?} {stderr:?}");
        let mut want = format!("{PATH_PROBE_OUTPUT}\n1\n");
        if shell == LoginShell::Bash {
            want.push_str("user-fn-ok\nalias ll='ls -l'\n");
        }
        assert!(stdout.ends_with(&want), "{shell:?}: {stdout:?}");
        assert!(stdout.contains(GREETING), "{shell:?}: {stdout:?}");
        assert!(stderr.contains(GREETING), "{shell:?}: {stderr:?}");
        for (file, _) in shell.startup_files() {
            let name = file.rsplit('/').next().unwrap();
            assert!(
                stdout.contains(&format!("{GREETING} ({name})")),
                "{shell:?}: {name} did not run: {stdout:?}"
            );
        }
    }
}

//! Authentication against a real sshd: keys (ed25519, RSA, encrypted), agent, password,
//! keyboard-interactive, and the refusal message.

mod ssh_common;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::secret::Secret;
use remote_runner_engine::ssh::{self, AgentSource, PassphraseSource};
use remote_runner_engine::transport::ExecOptions;
use remote_runner_testkit::{Agent, SENTINEL_PASSPHRASE, SENTINEL_PASSWORD};
use ssh_common::{machine, opts, start};

async fn whoami(t: &Remote) -> String {
    let out = t
        .exec("id -un", ExecOptions::default())
        .await
        .expect("exec");
    out.stdout_lossy().trim().to_string()
}

#[tokio::test]
async fn ed25519_key() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .expect("connect"),
    );
    assert_eq!(whoami(t.as_ref()).await, "rrtest");
    assert!(t.is_connected());
}

#[tokio::test]
async fn rsa_key() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.rsa)), opts())
            .await
            .expect("connect"),
    );
    assert_eq!(whoami(t.as_ref()).await, "rrtest");
}

#[tokio::test]
async fn encrypted_key_with_given_passphrase() {
    let sshd = start();
    let mut o = opts();
    o.passphrase = PassphraseSource::Given(Secret::new(SENTINEL_PASSPHRASE));
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519_encrypted)), o)
            .await
            .expect("connect"),
    );
    assert_eq!(whoami(t.as_ref()).await, "rrtest");
}

#[tokio::test]
async fn encrypted_key_without_passphrase_is_refused_with_reason() {
    let sshd = start();
    let err = ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519_encrypted)), opts())
        .await
        .expect_err("must fail");
    assert_eq!(err.code, ErrorCode::AuthFailed);
    assert!(err.message.contains("encrypted"), "{}", err.message);
    assert!(err.message.contains("publickey"), "{}", err.message);
}

#[tokio::test]
async fn agent_key() {
    let sshd = start();
    let agent = Agent::start_with_key(&sshd.keys.ed25519).expect("start ssh-agent");
    let mut o = opts();
    o.agent = AgentSource::Socket(agent.socket.clone());
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, None), o)
            .await
            .expect("connect"),
    );
    assert_eq!(whoami(t.as_ref()).await, "rrtest");
}

#[tokio::test]
async fn password() {
    let sshd = start();
    let mut o = opts();
    o.password = Some(Secret::new(SENTINEL_PASSWORD));
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, None), o)
            .await
            .expect("connect"),
    );
    assert_eq!(whoami(t.as_ref()).await, "rrtest");
}

#[tokio::test]
async fn keyboard_interactive_only() {
    let sshd = remote_runner_testkit::Sshd::builder()
        .config_line("AuthenticationMethods keyboard-interactive")
        .start()
        .expect("sshd");
    let mut o = opts();
    o.password = Some(Secret::new(SENTINEL_PASSWORD));
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, None), o)
            .await
            .expect("connect"),
    );
    assert_eq!(whoami(t.as_ref()).await, "rrtest");
}

#[tokio::test]
async fn refused_auth_names_offered_and_tried_methods() {
    let sshd = start();
    let err = ssh::connect(&machine(&sshd, Some(&sshd.keys.unauthorized)), opts())
        .await
        .expect_err("must fail");
    assert_eq!(err.code, ErrorCode::AuthFailed);
    assert!(
        err.message.contains("offered [publickey"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("id_unauthorized (refused)"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("store the machine's password"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn wrong_password_is_auth_failed_without_the_password() {
    let sshd = start();
    let mut o = opts();
    o.password = Some(Secret::new("rr-wrong-password-x1"));
    let err = ssh::connect(&machine(&sshd, None), o)
        .await
        .expect_err("must fail");
    assert_eq!(err.code, ErrorCode::AuthFailed);
    assert!(err.message.contains("password"));
    assert!(!err.message.contains("rr-wrong-password-x1"));
}

#[tokio::test]
async fn wrong_passphrase_is_reported_without_the_passphrase() {
    let sshd = start();
    let mut o = opts();
    o.passphrase = PassphraseSource::Given(Secret::new("rr-wrong-passphrase-x2"));
    let err = ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519_encrypted)), o)
        .await
        .expect_err("must fail");
    assert_eq!(err.code, ErrorCode::AuthFailed);
    assert!(
        err.message.contains("passphrase did not decrypt"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("rr-wrong-passphrase-x2"));
}

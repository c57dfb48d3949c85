//! Security sentinels: the test password and key passphrase never appear in an error message,
//! a Debug rendering, or the log output (tracing, with russh's `log` records bridged in), on
//! success and failure paths.

mod ssh_common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use remote_runner_engine::remote::Remote;
use remote_runner_engine::secret::Secret;
use remote_runner_engine::ssh::{self, PassphraseSource};
use remote_runner_engine::transport::ExecOptions;
use remote_runner_testkit::{SENTINEL_PASSPHRASE, SENTINEL_PASSWORD, Sshd};
use ssh_common::{machine, opts};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text.contains(SENTINEL_PASSWORD),
        "{what} leaks the password"
    );
    assert!(
        !text.contains(SENTINEL_PASSPHRASE),
        "{what} leaks the passphrase"
    );
}

#[tokio::test]
async fn sentinels_never_leak() {
    let captured = Captured::default();
    let writer = captured.clone();
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .try_init();

    let sshd = Sshd::start().expect("sshd");
    let mut texts: Vec<(String, String)> = Vec::new();

    // Success with password and with the encrypted key.
    let mut o = opts();
    o.password = Some(Secret::new(SENTINEL_PASSWORD));
    o.passphrase = PassphraseSource::Given(Secret::new(SENTINEL_PASSPHRASE));
    texts.push(("ConnectOptions Debug".into(), format!("{o:?}")));
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, None), o.clone())
            .await
            .expect("password auth"),
    );
    let out = t.exec("echo ok", ExecOptions::default()).await.unwrap();
    texts.push(("exec output".into(), format!("{out:?}")));
    texts.push(("transport Debug".into(), format!("{t:?}")));
    let t2 = Remote::direct(
        ssh::connect(
            &machine(&sshd, Some(&sshd.keys.ed25519_encrypted)),
            o.clone(),
        )
        .await
        .expect("encrypted key auth"),
    );
    drop(t2);
    let report = ssh::probe(&machine(&sshd, None), o.clone()).await;
    texts.push((
        "probe report".into(),
        format!("{report:?} {}", report.to_json()),
    ));

    // Failures: wrong key + password refused (password given but key file refused first).
    let mut bad = opts();
    bad.password = Some(Secret::new(format!("{SENTINEL_PASSWORD}-wrong")));
    bad.passphrase = PassphraseSource::Given(Secret::new(format!("{SENTINEL_PASSPHRASE}-wrong")));
    let err = ssh::connect(
        &machine(&sshd, Some(&sshd.keys.ed25519_encrypted)),
        bad.clone(),
    )
    .await
    .expect_err("wrong secrets fail");
    texts.push((
        "auth error".into(),
        format!("{err} {err:?} {}", err.to_json()),
    ));
    let report = ssh::probe(&machine(&sshd, Some(&sshd.keys.ed25519_encrypted)), bad).await;
    texts.push((
        "failed probe".into(),
        format!("{report:?} {}", report.to_json()),
    ));

    let log = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    texts.push(("tracing output".into(), log.clone()));
    for (what, text) in &texts {
        assert_clean(what, text);
    }
    // The capture really saw the SSH layer at work (russh's own records included).
    assert!(
        log.contains("ssh authenticated"),
        "tracing capture is empty: {log:.300}"
    );
    assert!(log.contains("russh"), "russh log records are not captured");
}

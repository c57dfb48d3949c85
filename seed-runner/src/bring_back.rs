//! After a command: its log and the remote artifacts come back, and the inputs it changed are
//! noted for the next sync.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::ctx::{Ctx, Wired};
use crate::error::{Result, SSH};
use crate::logs::fetch_log;
use crate::state::{self, Mount, Session};
use crate::{sync, tree};

/// Fetch a command's log and the remote artifacts; beside the log fetch, find the inputs the
/// command deleted or changed (`sent`: the files sent just before it; `None`: unknown), so that
/// the next sync sends them again. Returns a warning naming the artifacts that were not
/// fetched, and why.
pub(crate) async fn bring_back(
    ctx: &Ctx,
    wired: &Wired,
    session: &Session,
    mount: &Mount,
    log_filename: &str,
    sent: Option<&BTreeSet<String>>,
) -> Result<Option<String>> {
    let host = wired.host().await?;
    let inputs = {
        let (_lock, manifest) = state::lock_manifest(&ctx.state_dir, &mount.mount_id)?;
        tree::inputs(&manifest, sent)
    };
    let stamp = format!("logs/{}/.seed_start", session.session_name);
    let (log, changed) = tokio::join!(
        fetch_log(wired, session, mount, log_filename),
        tree::changed(&host, &mount.remote_path, &stamp, inputs)
    );
    log?;
    let (_lock, mut manifest) = state::lock_manifest(&ctx.state_dir, &mount.mount_id)?;
    if let Ok(changed) = changed {
        tree::forget(&mut manifest, &changed);
    }
    let fetched = sync::download_artifacts(
        &wired.engine,
        &session.engine_session_id,
        &host,
        Path::new(&mount.local_path),
        &mount.remote_path,
        &mut manifest,
    )
    .await;
    state::save_manifest(&ctx.state_dir, &mount.mount_id, &manifest)?;
    let skipped = fetched?.skipped;
    Ok((!skipped.is_empty()).then(|| {
        let each: Vec<String> = skipped
            .iter()
            .map(|(rel, why)| format!("artifacts/{rel:?}: {why}"))
            .collect();
        format!("artifacts not fetched: {}", each.join("; "))
    }))
}

/// [`bring_back`], on a fresh connection again when the link drops (3 attempts in all, as
/// the spec's reconnects).
pub(crate) async fn bring_back_retried(
    ctx: &Ctx,
    wired: &Wired,
    session: &Session,
    mount: &Mount,
    log_filename: &str,
    sent: Option<&BTreeSet<String>>,
) -> Result<Option<String>> {
    let mut last = match bring_back(ctx, wired, session, mount, log_filename, sent).await {
        Err(e) if e.code == SSH => e,
        other => return other,
    };
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let fresh = ctx.wire(&session.machine, None)?;
        last = match bring_back(ctx, &fresh, session, mount, log_filename, sent).await {
            Err(e) if e.code == SSH => e,
            other => return other,
        };
    }
    Err(last)
}

/// A pending command's fetch, as a note for the answer: the artifacts it could not fetch, or
/// why nothing came back.
pub(crate) fn note(notes: &mut Vec<String>, log_filename: &str, fetched: Result<Option<String>>) {
    match fetched {
        Ok(None) => {}
        Ok(Some(w)) => notes.push(format!("{log_filename}: {w}")),
        Err(e) => notes.push(format!(
            "{log_filename}: its log and artifacts could not be fetched: error {}: {}",
            e.code, e.message
        )),
    }
}

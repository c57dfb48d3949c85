//! `terminal_screen` publishing.
//!
//! A snapshot of the pane is taken only when something may have changed: while a turn runs
//! (every `screen_interval`), and for a short while after start, reattach or terminal input.
//! Nothing polls while the session is idle. A snapshot is sent only when it differs from the
//! last one. Sequences are `max(last + 1, now in ms)`, so they keep increasing across provider
//! restarts within a generation without storing anything.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use remote_runner_protocol::Event;
use tokio::time::Instant;

use super::shared::Shared;

/// After a kick, keep looking for this long (output that follows input, a slow prompt).
const SETTLE: Duration = Duration::from_secs(3);

/// Start the screen task for the provider's lifetime.
pub fn spawn(shared: Shared) {
    if !shared.config.terminal {
        return;
    }
    tokio::spawn(async move {
        let mut last_text: Option<(u64, String)> = None;
        let mut active_until = Instant::now();
        loop {
            let busy = shared.lock().turn.is_some();
            if busy || Instant::now() < active_until {
                tokio::select! {
                    _ = shared.screen.notified() => active_until = Instant::now() + SETTLE,
                    _ = tokio::time::sleep(shared.config.screen_interval) => {}
                }
            } else {
                shared.screen.notified().await;
                active_until = Instant::now() + SETTLE;
            }
            if shared.screen.is_stopped() {
                continue;
            }
            publish(&shared, &mut last_text).await;
        }
    });
}

async fn publish(shared: &Shared, last: &mut Option<(u64, String)>) {
    let (session_id, generation) = {
        let inner = shared.lock();
        match (&inner.session, &inner.state) {
            (Some(s), Some(st))
                if inner.lifecycle.may_send_screen(st.generation) && !inner.session_lost =>
            {
                (s.session_id.clone(), st.generation)
            }
            _ => return,
        }
    };
    let screen = match shared.engine.capture_screen(&session_id).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("screen capture failed: {e}");
            return;
        }
    };
    if last
        .as_ref()
        .is_some_and(|(g, t)| *g == generation && *t == screen.text)
    {
        return;
    }
    let sequence = {
        let mut inner = shared.lock();
        // Re-check: the generation may have moved while capturing.
        if !inner.lifecycle.may_send_screen(generation) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let seq = now.max(inner.last_sequence + 1);
        inner.last_sequence = seq;
        seq
    };
    let mut text = screen.text;
    if text.len() > remote_runner_protocol::MAX_LINE_BYTES / 2 {
        let (kept, _) = super::text::tail(&text, remote_runner_protocol::MAX_LINE_BYTES / 2);
        text = kept.to_string();
    }
    shared.out.send(Event::terminal_screen(
        generation,
        sequence,
        u64::from(screen.cols.clamp(1, 1000)),
        u64::from(screen.rows.clamp(1, 1000)),
        text.clone(),
    ));
    *last = Some((generation, text));
}

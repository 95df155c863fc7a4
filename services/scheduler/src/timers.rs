//! The leader's timer: sleeps until the soonest entry of the Redis due index and
//! handles what is due — a delayed or retrying instance wakes the dispatcher, a
//! planned cron fire is fired.
//!
//! The index is fed from MySQL, the authority: every wake-up by a writer (any
//! replica's kick) and every few seconds, the future due times of CREATED and
//! RETRYING instances are (re)indexed, so a Redis flush or a leader change loses
//! nothing; the planner indexes cron fires itself.

use std::time::Duration;

use ax_queue::DueIndex;
use futures::StreamExt;

use crate::leader::Term;
use crate::{cron, metrics, Shared};

/// The longest the timer sleeps without looking again.
const MAX_SLEEP: Duration = Duration::from_secs(1);
/// How often due times are re-read from MySQL without a kick.
const RECONCILE_EVERY: Duration = Duration::from_secs(5);
/// Kicks arriving faster than this share one reconcile.
const RECONCILE_MIN_GAP: Duration = Duration::from_millis(100);
const BATCH: usize = 2000;

pub fn instance_member(id: &str) -> String {
    format!("i:{id}")
}

pub(crate) async fn run(shared: Shared, term: Term) -> anyhow::Result<()> {
    let due = DueIndex::new(&shared.deps.queues);
    let mut kicks = shared.deps.bus.client.subscribe(shared.deps.bus.names.dispatch_kick()).await?;
    let mut last_reconcile = tokio::time::Instant::now() - RECONCILE_EVERY;
    let mut reconcile_wanted = true;
    loop {
        if shared.reindex.swap(false, std::sync::atomic::Ordering::SeqCst) {
            reconcile_wanted = true;
            last_reconcile = tokio::time::Instant::now() - RECONCILE_EVERY;
        }
        if reconcile_wanted && last_reconcile.elapsed() >= RECONCILE_MIN_GAP || last_reconcile.elapsed() >= RECONCILE_EVERY {
            if let Err(err) = reconcile(&shared, &due).await {
                tracing::warn!(error = %err, "reindexing due times failed");
                ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "due_reconcile").increment(1);
            }
            last_reconcile = tokio::time::Instant::now();
            reconcile_wanted = false;
        }
        let mut sleep = match due.earliest().await {
            Ok(Some(at_ms)) => Duration::from_millis((at_ms - now_ms()).max(0) as u64).min(MAX_SLEEP),
            Ok(None) => MAX_SLEEP,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the due index; MySQL polling carries on");
                MAX_SLEEP
            }
        };
        if reconcile_wanted {
            // A throttled reconcile is owed: come back as soon as the gap allows.
            sleep = sleep.min(RECONCILE_MIN_GAP.saturating_sub(last_reconcile.elapsed()));
        }
        if !sleep.is_zero() {
            tokio::select! {
                biased;
                _ = term.token.cancelled() => return Ok(()),
                _ = shared.timer_wake.notified() => continue,
                Some(_) = kicks.next() => { reconcile_wanted = true; continue }
                _ = tokio::time::sleep(sleep) => {}
            }
        }
        if let Err(err) = fire_due(&shared, &due, &term).await {
            tracing::warn!(error = ?err, "handling due entries failed");
            ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "timer").increment(1);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn fire_due(shared: &Shared, due: &DueIndex, term: &Term) -> anyhow::Result<()> {
    let entries = due.due(now_ms(), BATCH).await?;
    if entries.is_empty() {
        return Ok(());
    }
    let mut handled = Vec::with_capacity(entries.len());
    let mut cron_members = Vec::new();
    let mut instances_due = false;
    for (member, due_ms) in entries {
        if member.starts_with("i:") {
            instances_due = true;
            handled.push(member);
        } else if member.starts_with("c:") {
            cron_members.push((member, due_ms));
        } else {
            tracing::warn!(member = %member, "unknown due index entry dropped");
            handled.push(member);
        }
    }
    if instances_due {
        shared.dispatch_wake.notify_one();
    }
    if !cron_members.is_empty() {
        handled.extend(cron::fire(shared, term, &cron_members).await?);
    }
    due.remove(&handled).await?;
    Ok(())
}

/// Indexes the future due times of waiting-for-time instances from MySQL.
async fn reconcile(shared: &Shared, due: &DueIndex) -> anyhow::Result<()> {
    let pending = shared.deps.store.future_due(ax_domain::now(), 10_000).await?;
    let entries: Vec<(String, i64)> = pending.into_iter().map(|(id, at)| (instance_member(&id), at.timestamp_millis())).collect();
    due.add(&entries).await?;
    if let Ok(size) = due.len().await {
        ::metrics::gauge!(metrics::DUE_INDEX_SIZE).set(size as f64);
    }
    Ok(())
}

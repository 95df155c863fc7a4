//! The leader's timer: sleeps until the soonest entry of the Redis due index and
//! handles what is due — a delayed or retrying instance, or a cron fire's instance
//! created ahead, wakes the dispatcher; a planned cron fire of a task with a
//! concurrency limit is fired.
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
/// Cron fires per transaction, and transactions at once: 1,667 tasks due in the
/// same second as one transaction made the last of them wait for all the others.
const FIRE_PIECE: usize = 256;
const FIRES_IN_FLIGHT: usize = 4;

pub fn instance_member(id: &str) -> String {
    format!("i:{id}")
}

/// A cron fire's instance created ahead of its time: due like any instance, and
/// its lateness at the wake-up is the fire's skew.
pub(crate) fn fire_member(id: &str) -> String {
    format!("f:{id}")
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
                _ = shared.due_changed.notified() => { reconcile_wanted = true; continue }
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

/// An instance's place in the due index: its due time rounded *up* to the
/// millisecond. Rounded down, the timer woke within the millisecond before the
/// microsecond MySQL holds; the dispatcher, reading `due_at <= now`, found it not
/// due yet, and with its entry handled it waited for the next wake-up (20 ms late
/// for a few of the delay benchmark's instances).
pub(crate) fn due_score(at: ax_domain::Timestamp) -> i64 {
    at.timestamp_micros().div_euclid(1000) + i64::from(at.timestamp_micros().rem_euclid(1000) != 0)
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
    let now = now_ms();
    for (member, due_ms) in entries {
        if member.starts_with("i:") {
            instances_due = true;
            handled.push(member);
        } else if member.starts_with("f:") {
            instances_due = true;
            ::metrics::histogram!(metrics::CRON_FIRE_SKEW).record((now - due_ms).max(0) as f64 / 1000.0);
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
        for fired in futures::stream::iter(cron_pieces(cron_members)).map(|piece| async move { cron::fire(shared, term, &piece).await }).buffer_unordered(FIRES_IN_FLIGHT).collect::<Vec<_>>().await {
            handled.extend(fired?);
        }
    }
    due.remove(&handled).await?;
    Ok(())
}

/// Indexes the future due times of waiting-for-time instances from MySQL.
async fn reconcile(shared: &Shared, due: &DueIndex) -> anyhow::Result<()> {
    let pending = shared.deps.store.future_due(ax_domain::now(), 10_000).await?;
    let entries: Vec<(String, i64)> = pending
        .into_iter()
        .map(|due| (if due.cron_fire { fire_member(&due.id) } else { instance_member(&due.id) }, due_score(due.due_at)))
        .collect();
    due.add(&entries).await?;
    if let Ok(size) = due.count().await {
        ::metrics::gauge!(metrics::DUE_INDEX_SIZE).set(size as f64);
    }
    Ok(())
}

/// Due cron members in pieces of about [`FIRE_PIECE`]; a schedule's fires stay in one
/// piece, in time order (its fire for n + 1 is due only once n has moved it).
fn cron_pieces(mut members: Vec<(String, i64)>) -> Vec<Vec<(String, i64)>> {
    let schedule = |member: &str| member.rsplit_once(':').map_or(member.to_owned(), |(key, _)| key.to_owned());
    members.sort_by_cached_key(|(member, at)| (schedule(member), *at));
    crate::pieces::keeping_groups(members, FIRE_PIECE, |a, b| schedule(&a.0) == schedule(&b.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_time_is_indexed_at_its_millisecond_or_the_next() {
        let at = |micros: i64| ax_domain::Timestamp::from_timestamp_micros(micros).unwrap();
        assert_eq!(due_score(at(1_700_000_000_556_000)), 1_700_000_000_556);
        assert_eq!(due_score(at(1_700_000_000_556_001)), 1_700_000_000_557);
        assert_eq!(due_score(at(1_700_000_000_556_999)), 1_700_000_000_557);
    }

    #[test]
    fn a_schedules_fires_stay_in_one_piece_in_time_order() {
        let mut members: Vec<(String, i64)> = (0..600).map(|i| (format!("c:tsk_{i:04}:0:1000"), 1000)).collect();
        members.push(("c:tsk_0255:0:2000".into(), 2000));
        members.insert(0, ("c:tsk_0255:0:999".into(), 999));
        let pieces = cron_pieces(members);
        assert_eq!(pieces.iter().map(Vec::len).sum::<usize>(), 602);
        let holding: Vec<&Vec<(String, i64)>> = pieces.iter().filter(|p| p.iter().any(|(m, _)| m.starts_with("c:tsk_0255:"))).collect();
        assert_eq!(holding.len(), 1, "one piece holds all of tsk_0255's fires");
        let times: Vec<i64> = holding[0].iter().filter(|(m, _)| m.starts_with("c:tsk_0255:")).map(|(_, t)| *t).collect();
        assert_eq!(times, [999, 1000, 2000]);
        assert!(pieces.iter().all(|p| p.len() <= FIRE_PIECE + 2));
    }
}

//! Day-based retention: every hour, lines older than the start of the UTC day
//! `AX_LOG_RETENTION_DAYS` days ago are deleted, a chunk at a time so no delete
//! holds locks for long. Several sinks doing it at once only share the work.

use std::time::Duration;

use ax_domain::Timestamp;
use ax_store::Store;
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::metrics;

const INTERVAL: Duration = Duration::from_secs(3600);
const CHUNK: u32 = 5000;

/// The first instant that is kept: midnight UTC, `days` days before today's.
pub fn cutoff(now: Timestamp, days: u32) -> Timestamp {
    let midnight = now.date_naive().and_hms_opt(0, 0, 0).expect("midnight exists").and_utc();
    midnight - chrono::TimeDelta::days(i64::from(days))
}

pub async fn run(store: Store, days: u32, shutdown: CancellationToken) -> anyhow::Result<()> {
    // Jitter so many sinks started together do not delete in lockstep.
    let first = Duration::from_secs(rand::rng().random_range(5..60));
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + first, INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = interval.tick() => {}
        }
        match pass(&store, cutoff(ax_domain::now(), days), &shutdown).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, days, "old task log lines deleted"),
            Err(err) => {
                tracing::warn!(error = %err, "log retention pass failed; next hour tries again");
                ::metrics::counter!(metrics::FAILURES, "loop" => "retention").increment(1);
            }
        }
    }
    Ok(())
}

/// Deletes every line before `cutoff`; returns how many.
///
/// # Errors
/// MySQL failures (what was deleted before stays deleted).
pub async fn pass(store: &Store, cutoff: Timestamp, shutdown: &CancellationToken) -> Result<u64, ax_store::StoreError> {
    let mut total = 0;
    loop {
        let deleted = store.delete_logs_before(cutoff, CHUNK).await?;
        total += deleted;
        ::metrics::counter!(metrics::RETENTION_DELETED).increment(deleted);
        if deleted < u64::from(CHUNK) || shutdown.is_cancelled() {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn whole_days_are_kept() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 12, 15, 17, 30, 0).unwrap();
        assert_eq!(cutoff(now, 14), chrono::Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap());
        assert_eq!(cutoff(now, 1), chrono::Utc.with_ymd_and_hms(2026, 12, 14, 0, 0, 0).unwrap());
    }
}

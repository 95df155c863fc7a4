//! Webhook deliveries. Decisions to notify are rows in MySQL (written with the
//! alert); this loop claims due rows, renders them for their channel's format,
//! sends them concurrently, and records the result. A failed delivery is tried
//! again after an exponential back-off (`AX_ALERT_RETRY_INITIAL` doubling up to
//! `AX_ALERT_RETRY_MAX`) until `AX_ALERT_MAX_ATTEMPTS`, then marked failed; every
//! try is counted by channel and result and its error is kept on the row. The
//! event consumer never waits for any of this.

pub mod http;
pub mod render;
pub mod send;

use std::collections::HashMap;
use std::time::Duration;

use ax_domain::alert::AlertChannel;
use ax_domain::retry::ExponentialBackoff;
use ax_store::alerts::{NotificationKind, NotificationRow};
use ax_store::StoreError;
use tokio_util::sync::CancellationToken;

use self::render::Subject;
use self::send::Sender;
use crate::{metrics, Shared};

/// Deliveries taken per round.
const ROUND: u32 = 32;
/// How often the loop looks for due retries when nothing woke it.
const POLL: Duration = Duration::from_secs(1);

pub(crate) async fn run(shared: Shared, shutdown: CancellationToken) -> anyhow::Result<()> {
    let settings = &shared.config.observe.monitor;
    let sender = Sender::new(settings.alert_webhook_timeout.0);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = shared.notify_wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
        loop {
            match round(&shared, &sender).await {
                Ok(taken) if taken == ROUND as usize && !shutdown.is_cancelled() => continue,
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "notification round failed");
                    ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "notify").increment(1);
                    break;
                }
            }
        }
    }
    Ok(())
}

async fn round(shared: &Shared, sender: &Sender) -> Result<usize, StoreError> {
    let store = &shared.deps.store;
    let timeout = shared.config.observe.monitor.alert_webhook_timeout.0;
    // Held long enough for the call and its bookkeeping; a monitor that dies
    // meanwhile leaves the row to be taken again after this.
    let hold = chrono::TimeDelta::from_std(timeout * 2 + Duration::from_secs(30)).unwrap_or(chrono::TimeDelta::minutes(5));
    let claimed = store.claim_notifications(ax_domain::now(), hold, ROUND).await?;
    if claimed.is_empty() {
        return Ok(0);
    }
    let channels: HashMap<String, AlertChannel> = store.alert_channels().await?.into_iter().map(|c| (c.definition.name.clone(), c.definition)).collect();
    let results = futures::future::join_all(claimed.iter().map(|n| deliver(shared, sender, &channels, n))).await;
    for result in results {
        result?;
    }
    Ok(claimed.len())
}

/// Why a delivery can never succeed.
fn hopeless(row: &NotificationRow, channels: &HashMap<String, AlertChannel>) -> Option<String> {
    match channels.get(&row.channel) {
        None => Some(format!("channel {} does not exist any more", row.channel)),
        Some(c) if !c.enabled => Some(format!("channel {} is disabled", row.channel)),
        Some(_) => None,
    }
}

async fn deliver(shared: &Shared, sender: &Sender, channels: &HashMap<String, AlertChannel>, row: &NotificationRow) -> Result<(), StoreError> {
    let store = &shared.deps.store;
    if let Some(reason) = hopeless(row, channels) {
        tracing::warn!(notification = row.id, channel = %row.channel, reason = %reason, "notification dropped");
        ::metrics::counter!(metrics::NOTIFICATIONS, "channel" => row.channel.clone(), "result" => "gave_up").increment(1);
        return store.notification_failed(row.id, &reason, None).await;
    }
    let channel = &channels[&row.channel];
    let namespace = shared.deps.bus.names.namespace();
    let kind = NotificationKind::parse(&row.kind);
    let body = match (kind, &row.alert_id, &row.report_id) {
        (Some(NotificationKind::Test), _, _) => render::render(channel, &Subject::Test { channel: &channel.name }, namespace),
        (Some(NotificationKind::Report), _, Some(report_id)) => {
            let Some(report) = store.health_report(&report_id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e))?).await? else {
                return store.notification_failed(row.id, "the report does not exist", None).await;
            };
            render::render(channel, &Subject::Report { id: report_id, report: &report }, namespace)
        }
        (Some(kind), Some(alert_id), _) => {
            let Some(alert) = store.alert(&alert_id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e))?).await? else {
                return store.notification_failed(row.id, "the alert does not exist", None).await;
            };
            let log_url = render::log_url(&shared.config.observe.monitor.log_link, &alert);
            render::render(channel, &Subject::Alert { kind, alert: &alert, log_url }, namespace)
        }
        _ => return store.notification_failed(row.id, "malformed notification row", None).await,
    };
    let started = std::time::Instant::now();
    let result = sender.send(channel, body).await;
    ::metrics::histogram!(metrics::WEBHOOK_SECONDS, "format" => channel.format.as_str()).record(started.elapsed().as_secs_f64());
    let settings = &shared.config.observe.monitor;
    match result {
        Ok(()) => {
            ::metrics::counter!(metrics::NOTIFICATIONS, "channel" => row.channel.clone(), "result" => "sent").increment(1);
            tracing::info!(notification = row.id, channel = %row.channel, kind = %row.kind, alert_id = ?row.alert_id, attempt = row.attempts + 1, "notification sent");
            store.notification_sent(row.id, ax_domain::now()).await
        }
        Err(err) => {
            let attempt = row.attempts + 1;
            if attempt >= settings.alert_max_attempts {
                ::metrics::counter!(metrics::NOTIFICATIONS, "channel" => row.channel.clone(), "result" => "gave_up").increment(1);
                tracing::error!(notification = row.id, channel = %row.channel, attempt, error = %err, "webhook failed for the last time; notification given up");
                store.notification_failed(row.id, &err.to_string(), None).await
            } else {
                let delay = retry_delay(settings.alert_retry_initial.0, settings.alert_retry_max.0, attempt);
                ::metrics::counter!(metrics::NOTIFICATIONS, "channel" => row.channel.clone(), "result" => "failed").increment(1);
                tracing::warn!(notification = row.id, channel = %row.channel, attempt, retry_in = ?delay, error = %err, "webhook failed; will retry");
                let at = ax_domain::now() + chrono::TimeDelta::from_std(delay).unwrap_or(chrono::TimeDelta::MAX);
                store.notification_failed(row.id, &err.to_string(), Some(at)).await
            }
        }
    }
}

fn corrupt(err: ax_domain::ids::InvalidId) -> StoreError {
    StoreError::Corrupt { what: "alert_notifications", reason: err.to_string() }
}

/// The wait after failed try number `attempt`: doubling from `initial`, capped
/// at `max`, with jitter (the one back-off module's arithmetic).
pub fn retry_delay(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let mut backoff = ExponentialBackoff::new(initial, max);
    let mut delay = initial;
    for _ in 0..attempt.clamp(1, 64) {
        delay = backoff.next_delay();
    }
    delay
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_up_to_the_cap() {
        let (initial, max) = (Duration::from_secs(5), Duration::from_secs(600));
        assert!(retry_delay(initial, max, 1) <= initial);
        assert!(retry_delay(initial, max, 4) >= Duration::from_secs(20));
        assert!(retry_delay(initial, max, 40) <= max);
    }
}

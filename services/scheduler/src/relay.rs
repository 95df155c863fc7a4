//! The outbox relay: publishes committed events to `AX_EVENTS` and forgets them once
//! JetStream acknowledged them (invariant 1).
//!
//! Publishes are pipelined: a whole batch is sent before any ack is awaited. Each
//! carries `Nats-Msg-Id` = event id, so when the relay dies between publishing and
//! deleting, the republish is dropped by the stream's duplicate window and every
//! event is in the stream exactly once. While NATS is down the relay keeps the rows
//! and retries with back-off; nothing is lost, nothing is skipped.

use std::time::Duration;

use ax_bus::headers::event_headers;
use ax_domain::retry::ExponentialBackoff;
use ax_store::OutboxRow;
use tokio_util::sync::CancellationToken;

use crate::{metrics, Deps};

const BATCH: u32 = 1024;

pub async fn run(deps: Deps, interval: Duration, shutdown: CancellationToken) -> anyhow::Result<()> {
    let written = deps.store.outbox_written();
    let mut backoff = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(10));
    loop {
        match pass(&deps).await {
            Ok(published) => {
                backoff.reset();
                if published as u32 >= BATCH {
                    continue;
                }
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = written.notified() => {}
                    _ = tokio::time::sleep(interval) => {}
                }
            }
            Err(err) => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %err, retry_in = ?delay, "outbox relay pass failed");
                ::metrics::counter!(metrics::RELAY_FAILURES).increment(1);
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
    // One last pass so a clean shutdown leaves nothing behind.
    if let Err(err) = pass(&deps).await {
        tracing::info!(error = %err, "final relay pass failed; the rows stay for the next relay");
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("reading the outbox failed")]
    Read(#[source] ax_store::StoreError),
    #[error("{failed} of {total} events were not acknowledged by JetStream: {first}")]
    Publish { failed: usize, total: usize, first: String },
    #[error("deleting published outbox rows failed")]
    Delete(#[source] ax_store::StoreError),
}

/// One pass: publish the oldest pending events and delete those acknowledged.
/// Returns how many were published.
pub async fn pass(deps: &Deps) -> Result<usize, RelayError> {
    let rows = deps.store.outbox_pending(BATCH).await.map_err(RelayError::Read)?;
    if rows.is_empty() {
        return Ok(0);
    }
    let (acked, failure) = publish(deps, &rows).await;
    deps.store.outbox_delete(&acked).await.map_err(RelayError::Delete)?;
    ::metrics::counter!(metrics::EVENTS_PUBLISHED).increment(acked.len() as u64);
    match failure {
        Some((failed, first)) => Err(RelayError::Publish { failed, total: rows.len(), first }),
        None => Ok(acked.len()),
    }
}

/// Publishes `rows` pipelined and returns the ids JetStream acknowledged, plus the
/// count and first message of failures. Does not touch MySQL.
pub async fn publish(deps: &Deps, rows: &[OutboxRow]) -> (Vec<u64>, Option<(usize, String)>) {
    let js = &deps.bus.jetstream;
    let mut in_flight = Vec::with_capacity(rows.len());
    let mut failures = Vec::new();
    for row in rows {
        let headers = event_headers(&row.event_id, &row.task_name, row.instance_id.as_deref(), row.state.as_deref());
        match js.publish_with_headers(row.subject.clone(), headers, row.payload.clone().into()).await {
            Ok(ack) => in_flight.push((row.id, ack)),
            Err(err) => {
                failures.push(err.to_string());
                // The connection is gone; the rest would fail the same way.
                break;
            }
        }
    }
    let ids: Vec<u64> = in_flight.iter().map(|(id, _)| *id).collect();
    let results = futures::future::join_all(in_flight.into_iter().map(|(_, ack)| ack.into_future())).await;
    let mut acked = Vec::with_capacity(ids.len());
    for (id, result) in ids.into_iter().zip(results) {
        match result {
            Ok(_) => acked.push(id),
            Err(err) => failures.push(err.to_string()),
        }
    }
    let failure = failures.first().cloned().map(|first| (failures.len() + (rows.len() - acked.len() - failures.len()), first));
    (acked, failure)
}

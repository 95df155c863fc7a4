//! The outbox relay: publishes committed events to `AX_EVENTS` and forgets them once
//! JetStream acknowledged them (invariant 1).
//!
//! Publishes are pipelined: a whole batch is sent before any ack is awaited. Each
//! carries `Nats-Msg-Id` = event id, so when the relay dies between publishing and
//! deleting, the republish is dropped by the stream's duplicate window and every
//! event is in the stream exactly once. While NATS is down the relay keeps the rows
//! and retries with back-off; nothing is lost, nothing is skipped.

use std::collections::HashMap;
use std::time::Duration;

use ax_bus::headers::event_headers;
use ax_domain::retry::ExponentialBackoff;
use ax_store::OutboxBatch;
use tokio_util::sync::CancellationToken;

use crate::{metrics, Deps};

/// Batches per pass: a batch row holds one commit's events (about 8 in the
/// throughput benchmark, up to 1,024 for a cron piece).
const BATCHES: u32 = 128;

/// The shortest time between the starts of two passes. Under load every commit
/// wakes the relay, and a pass per commit cost a read and a delete each (a tenth of
/// MariaDB's time in the throughput benchmark); a wake this soon after the last pass
/// waits out the rest, so the events of several commits share one. An idle relay
/// woken by a commit starts at once.
const GATHER: Duration = Duration::from_millis(5);

/// Published batches are deleted in groups, this often or at this many: a delete
/// per pass was a statement and a commit each, 8 % of MariaDB's time in the
/// throughput benchmark. Until then a pass reads around them; a relay that dies
/// first leaves them to be published again, and the stream's duplicate window
/// (`Nats-Msg-Id`) drops the repeats.
const FORGET_EVERY: Duration = Duration::from_millis(50);
const FORGET_AT: usize = 256;

/// Batches published and not deleted yet.
struct Published {
    ids: Vec<u64>,
    since: tokio::time::Instant,
}

impl Published {
    fn new() -> Self {
        Self { ids: Vec::new(), since: tokio::time::Instant::now() }
    }

    /// Deletes the group when it is due (or `now`), else keeps it.
    async fn forget(&mut self, deps: &Deps, now: bool) -> Result<(), RelayError> {
        if self.ids.is_empty() || !(now || self.ids.len() >= FORGET_AT || self.since.elapsed() >= FORGET_EVERY) {
            return Ok(());
        }
        deps.store.outbox_delete(&self.ids).await.map_err(RelayError::Delete)?;
        self.ids.clear();
        self.since = tokio::time::Instant::now();
        Ok(())
    }
}

pub async fn run(deps: Deps, interval: Duration, shutdown: CancellationToken) -> anyhow::Result<()> {
    let written = deps.store.outbox_written();
    let mut backoff = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(10));
    let mut published = Published::new();
    loop {
        let started = tokio::time::Instant::now();
        match pass_counted(&deps, &mut published, false).await {
            Ok(Pass { batches, .. }) => {
                backoff.reset();
                if batches >= BATCHES as usize {
                    // A full page: more is waiting, committed by other processes
                    // whose commits do not wake this one.
                    continue;
                }
                // With nothing new, what was published is deleted before the wait.
                let wait = if published.ids.is_empty() { interval } else { interval.min(FORGET_EVERY) };
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = written.notified() => {
                        tokio::time::sleep_until(started + GATHER).await;
                    }
                    _ = tokio::time::sleep(wait) => {}
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
    if let Err(err) = pass_counted(&deps, &mut published, true).await {
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

/// One pass: publish the events of the oldest pending batches and delete the
/// batches JetStream acknowledged whole. Returns how many events were published.
pub async fn pass(deps: &Deps) -> Result<usize, RelayError> {
    pass_counted(deps, &mut Published::new(), true).await.map(|p| p.events)
}

struct Pass {
    /// Batch rows read.
    batches: usize,
    /// Events published and acknowledged.
    events: usize,
}

async fn pass_counted(deps: &Deps, published: &mut Published, forget_now: bool) -> Result<Pass, RelayError> {
    let (batches, damaged) = deps.store.outbox_pending_except(BATCHES, &published.ids).await.map_err(RelayError::Read)?;
    let done = &mut published.ids;
    for batch in &damaged {
        // Only AX writes the outbox: a row that does not decode is damage, and
        // keeping it would stall every event behind it. The audit check will show
        // its events missing from the stream.
        tracing::error!(outbox_id = batch.id, events = batch.events, error = %batch.error, "dropping an outbox row that does not decode");
        ::metrics::counter!(metrics::RELAY_FAILURES).increment(1);
        done.push(batch.id);
    }
    let (acked, failure) = publish(deps, &batches).await;
    let events: usize = batches.iter().filter(|b| acked.contains(&b.id)).map(|b| b.events.len()).sum();
    done.extend(acked);
    published.forget(deps, forget_now).await?;
    ::metrics::counter!(metrics::EVENTS_PUBLISHED).increment(events as u64);
    match failure {
        Some((failed, first)) => Err(RelayError::Publish { failed, total: batches.iter().map(|b| b.events.len()).sum(), first }),
        None => Ok(Pass { batches: batches.len() + damaged.len(), events }),
    }
}

/// Publishes the events of `batches` pipelined, in order, and returns the ids of
/// the batches whose every event JetStream acknowledged, plus how many events were
/// not acknowledged and the first error. Does not touch MySQL.
pub async fn publish(deps: &Deps, batches: &[OutboxBatch]) -> (Vec<u64>, Option<(usize, String)>) {
    let js = &deps.bus.jetstream;
    let total: usize = batches.iter().map(|b| b.events.len()).sum();
    let mut in_flight = Vec::with_capacity(total);
    let mut errors = Vec::new();
    'batches: for batch in batches {
        for event in &batch.events {
            let headers = event_headers(&event.event_id, &event.task_name, event.instance_id.as_deref(), event.state.as_deref());
            match js.publish_with_headers(event.subject.clone(), headers, event.payload.clone().into()).await {
                Ok(ack) => in_flight.push((batch.id, ack)),
                Err(err) => {
                    errors.push(err.to_string());
                    // The connection is gone; the rest would fail the same way.
                    break 'batches;
                }
            }
        }
    }
    let owners: Vec<u64> = in_flight.iter().map(|(id, _)| *id).collect();
    let results = futures::future::join_all(in_flight.into_iter().map(|(_, ack)| ack.into_future())).await;
    let mut acked_events: HashMap<u64, usize> = HashMap::with_capacity(batches.len());
    for (id, result) in owners.into_iter().zip(results) {
        match result {
            Ok(_) => *acked_events.entry(id).or_default() += 1,
            Err(err) => errors.push(err.to_string()),
        }
    }
    let acked: Vec<u64> =
        batches.iter().filter(|b| acked_events.get(&b.id).copied().unwrap_or(0) == b.events.len()).map(|b| b.id).collect();
    let unacked = total - acked_events.values().sum::<usize>();
    let failure = errors.into_iter().next().map(|first| (unacked, first));
    (acked, failure)
}

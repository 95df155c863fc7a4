//! The one loop every durable pull consumer of AX runs (trigger intake, chain,
//! monitor, log sink): pull continuously, hand whatever has arrived (up to a batch)
//! to the handler in one call so it can commit it in one transaction, and come back
//! with back-off when the pull itself fails. Acking is the handler's business: it
//! classifies each message and acks exactly what happened.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::Message;
use ax_domain::retry::ExponentialBackoff;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

pub const PULL_FAILURES: &str = "ax_consumer_pull_failures_total";

/// Runs until `shutdown`, one batch at a time. `name` labels logs and the
/// pull-failure counter.
pub async fn consume_batches<F, Fut>(consumer: PullConsumer, batch: usize, name: &'static str, shutdown: CancellationToken, handle: F)
where
    F: FnMut(Vec<Message>) -> Fut,
    Fut: Future<Output = ()>,
{
    consume_batches_concurrently(consumer, batch, 1, name, shutdown, handle).await;
}

/// [`consume_batches`] with up to `in_flight` batches handled at once, for a
/// handler whose batches do not depend on each other's order (trigger intake:
/// creation is idempotent by trigger id): the next batch commits while the last one
/// waits on MySQL. On shutdown, batches already handed over are finished.
pub async fn consume_batches_concurrently<F, Fut>(
    consumer: PullConsumer,
    batch: usize,
    in_flight: usize,
    name: &'static str,
    shutdown: CancellationToken,
    mut handle: F,
) where
    F: FnMut(Vec<Message>) -> Fut,
    Fut: Future<Output = ()>,
{
    let in_flight = in_flight.max(1);
    let mut running = futures::stream::FuturesUnordered::new();
    metrics::describe_counter!(PULL_FAILURES, "Pulls from a JetStream consumer that failed, by consumer");
    let mut backoff = ExponentialBackoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let messages = match consumer.stream().max_messages_per_batch(batch).messages().await {
            Ok(m) => m,
            Err(err) => {
                tracing::warn!(consumer = name, error = %err, "cannot pull messages; retrying");
                metrics::counter!(PULL_FAILURES, "consumer" => name).increment(1);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay()) => continue,
                }
            }
        };
        backoff.reset();
        let mut pulls = messages.ready_chunks(batch);
        loop {
            let pull = tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    while running.next().await.is_some() {}
                    return;
                }
                Some(()) = running.next(), if !running.is_empty() => continue,
                pull = pulls.next(), if running.len() < in_flight => pull,
            };
            let Some(pull) = pull else { break };
            let mut good = Vec::with_capacity(pull.len());
            for item in pull {
                match item {
                    Ok(message) => good.push(message),
                    Err(err) => tracing::warn!(consumer = name, error = %err, "consumer stream error"),
                }
            }
            if !good.is_empty() {
                running.push(handle(good));
            }
        }
    }
}

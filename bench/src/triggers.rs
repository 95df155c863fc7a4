//! Firing tasks the way upstream systems do: JSON trigger requests on
//! `ax.trigger.<task>`, each with a `Nats-Msg-Id` that becomes its trigger id.

use std::time::{Duration, Instant};

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::HeaderMap;
use ax_bus::Bus;
use ax_domain::Timestamp;
use bytes::Bytes;

/// One trigger and when it was handed to the client.
#[derive(Debug, Clone)]
pub struct Sent {
    pub trigger_id: String,
    pub at: Timestamp,
}

fn headers(trigger_id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, trigger_id);
    headers.insert("Content-Type", "application/json");
    headers
}

/// Publishes one trigger without waiting for JetStream's ack.
///
/// # Errors
/// The client could not queue the message (disconnected).
pub async fn send(bus: &Bus, task: &str, trigger_id: &str, body: &Bytes) -> anyhow::Result<(Sent, PublishAckFuture)> {
    let at = ax_domain::now();
    let ack = bus.jetstream.publish_with_headers(bus.names.trigger(task), headers(trigger_id), body.clone()).await?;
    Ok((Sent { trigger_id: trigger_id.to_owned(), at }, ack))
}

/// Acks awaited at most this many publishes behind: the JetStream context holds one
/// of its 5,000 in-flight permits per unawaited ack, so a publisher that awaited
/// nothing would stall at the 5,001st publish.
pub const WINDOW: usize = 4_096;

/// Keeps at most [`WINDOW`] acks outstanding while publishing, and awaits the rest.
#[derive(Default)]
pub struct Acks {
    pending: futures::stream::FuturesUnordered<futures::future::BoxFuture<'static, Result<async_nats::jetstream::publish::PublishAck, async_nats::jetstream::context::PublishError>>>,
}

impl Acks {
    /// # Errors
    /// JetStream refused an earlier publish.
    pub async fn push(&mut self, ack: PublishAckFuture) -> anyhow::Result<()> {
        use futures::StreamExt;
        self.pending.push(Box::pin(ack.into_future()));
        while self.pending.len() > WINDOW {
            if let Some(result) = self.pending.next().await {
                result?;
            }
        }
        Ok(())
    }

    /// # Errors
    /// JetStream refused a publish.
    pub async fn finish(mut self) -> anyhow::Result<()> {
        use futures::StreamExt;
        while let Some(result) = self.pending.next().await {
            result?;
        }
        Ok(())
    }
}

/// Publishes every id as fast as the client allows: pipelined, acks awaited only
/// to keep the client's window open. Returns the sends and the time until the last ack.
///
/// # Errors
/// A publish or an ack failed.
pub async fn pipelined(bus: &Bus, task: &str, ids: &[String], body: Bytes) -> anyhow::Result<(Vec<Sent>, Duration)> {
    let began = Instant::now();
    let mut sent = Vec::with_capacity(ids.len());
    let mut acks = Acks::default();
    for id in ids {
        let (s, ack) = send(bus, task, id, &body).await?;
        sent.push(s);
        acks.push(ack).await?;
    }
    acks.finish().await?;
    Ok((sent, began.elapsed()))
}

/// Publishes `count` triggers at `per_second`, evenly, in ticks of `tick`; acks are
/// awaited at the end. Ids are `<prefix><n>`.
///
/// # Errors
/// A publish or an ack failed.
pub async fn paced(bus: &Bus, task: &str, prefix: &str, count: usize, per_second: f64, body: Bytes) -> anyhow::Result<Vec<Sent>> {
    let began = Instant::now();
    let mut sent = Vec::with_capacity(count);
    let mut acks = Acks::default();
    let mut ticker = tokio::time::interval(Duration::from_millis(2));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while sent.len() < count {
        ticker.tick().await;
        // As many as the rate allows by now: no bursts beyond one tick's worth.
        let due = ((began.elapsed().as_secs_f64() * per_second).floor() as usize + 1).min(count);
        while sent.len() < due {
            let id = format!("{prefix}{}", sent.len());
            let (s, ack) = send(bus, task, &id, &body).await?;
            sent.push(s);
            acks.push(ack).await?;
        }
    }
    acks.finish().await?;
    Ok(sent)
}

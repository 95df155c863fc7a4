//! The durable consumer of `AX_EVENTS`.
//!
//! What is ready is taken as one pull and classified: an event that decodes is
//! observed (metrics) and, if it finishes an instance, collected for the rules
//! that judge finished instances; one that does not decode can never succeed and
//! is terminated, logged and counted. The rules run once per pull (MySQL); only
//! when they succeeded are the metrics moved and the pull acknowledged, so a
//! failed pull is negatively acknowledged and comes back without counting twice.

use std::time::Duration;

use async_nats::jetstream::message::{AckKind, Message};
use ax_domain::event::{Event, EventBody};
use ax_domain::state::StateKind;
use tokio_util::sync::CancellationToken;

use crate::observe::{self, Observation};
use crate::rules::{self, Finished};
use crate::{metrics, Shared};

const PULL: usize = 256;
const RETRY_DELAY: Duration = Duration::from_secs(2);

pub(crate) async fn run(shared: Shared, consumer: async_nats::jetstream::consumer::PullConsumer, shutdown: CancellationToken) -> anyhow::Result<()> {
    ax_bus::consume::consume_batches(consumer, PULL, "monitor", shutdown, |messages| handle(&shared, messages)).await;
    Ok(())
}

async fn handle(shared: &Shared, messages: Vec<Message>) {
    let now = ax_domain::now();
    let mut good = Vec::with_capacity(messages.len());
    let mut observations: Vec<Observation> = Vec::new();
    let mut finished: Vec<Finished> = Vec::new();
    let mut kinds: Vec<&'static str> = Vec::new();
    let mut lags: Vec<f64> = Vec::new();
    let mut owners_changed = false;
    let mut poison = Vec::new();
    {
        let mut recent = shared.recent.lock().expect("recent lock");
        for message in messages {
            let event = match Event::decode(&message.payload) {
                Ok(event) => event,
                Err(err) => {
                    poison.push((message, err));
                    continue;
                }
            };
            lags.push((now - event.time).as_seconds_f64().max(0.0));
            match &event.body {
                EventBody::InstanceTransitioned(t) => {
                    kinds.push("instance_transitioned");
                    observations.push(observe::observe(&mut recent, t, event.time));
                    if matches!(t.to, StateKind::Succeeded | StateKind::Failed) {
                        finished.push(Finished {
                            task: t.task.clone(),
                            instance_id: t.instance_id.clone(),
                            state: t.to,
                            trace_id: t.trace_id.as_str().to_owned(),
                        });
                    }
                }
                EventBody::TaskChanged(_) => {
                    kinds.push("task_changed");
                    owners_changed = true;
                }
                EventBody::HealthReported(_) => kinds.push("health_reported"),
            }
            good.push(message);
        }
    }
    for (message, err) in poison {
        drop_poison(&message, &err).await;
    }
    if owners_changed {
        shared.rules.invalidate().await;
    }
    match rules::on_finished(shared, &finished).await {
        Ok(()) => {
            for o in &observations {
                observe::record(o);
            }
            for kind in kinds {
                ::metrics::counter!(metrics::EVENTS, "kind" => kind).increment(1);
            }
            for lag in lags {
                ::metrics::histogram!(metrics::EVENT_LAG).record(lag);
            }
            for message in good {
                if let Err(err) = message.ack().await {
                    tracing::warn!(error = %err, "ack of a processed event failed; it will be seen again");
                }
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, events = good.len(), "judging alert rules failed; events will be redelivered");
            ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "events_rules").increment(1);
            for message in good {
                let _ = message.ack_with(AckKind::Nak(Some(RETRY_DELAY))).await;
            }
        }
    }
}

/// An event that will never decode: acknowledged for good, logged, counted.
async fn drop_poison(message: &Message, err: &ax_domain::event::DecodeError) {
    let reason = match err {
        ax_domain::event::DecodeError::Cbor(_) => "not_cbor",
        ax_domain::event::DecodeError::UnknownKind(_) => "unknown_kind",
        ax_domain::event::DecodeError::UnknownVersion(_) => "unknown_version",
        ax_domain::event::DecodeError::Body { .. } => "bad_body",
    };
    ::metrics::counter!(metrics::EVENTS_REFUSED, "reason" => reason).increment(1);
    tracing::warn!(subject = %message.subject, reason, error = %err, "undecodable event acknowledged and skipped");
    if let Err(err) = message.ack_with(AckKind::Term).await {
        tracing::warn!(error = %err, "terminating an undecodable event failed; it may be seen again");
    }
}

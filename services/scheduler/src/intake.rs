//! Trigger intake: the durable pull consumer of `ax.trigger.*`.
//!
//! Messages are taken in batches and classified. A good trigger becomes an instance,
//! idempotently by trigger id (the body's `trigger_id`, else the `Nats-Msg-Id`
//! header, else the stream sequence, which is stable across redelivery), and its
//! message is acknowledged only after the MySQL commit. A message that can never
//! succeed (malformed, unknown or disabled task) is terminated: acknowledged so it is
//! never redelivered, logged with the reason, and counted. A commit that fails is
//! negatively acknowledged with a delay and comes back.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::message::{AckKind, Message};
use ax_domain::task::TriggerKind;
use ax_domain::trigger::{is_valid_trigger_id, TriggerRequest};
use ax_store::{CreateOutcome, NewInstance, TaskRecord};
use tokio_util::sync::CancellationToken;

use crate::{dispatch, metrics, Shared};

const BATCH: usize = 512;
/// Trigger batches committing at once: each waits mostly on MySQL round trips.
/// In the throughput benchmark 2 gave 7,500 triggers/s, 4 gave 9,000–11,000, 8 gave
/// 11,600–12,100 and 16 no more (10,400–13,300) with end to end unchanged.
const BATCHES_IN_FLIGHT: usize = 8;
const RETRY_DELAY: Duration = Duration::from_secs(2);

pub(crate) async fn run(
    shared: Shared,
    consumer: async_nats::jetstream::consumer::PullConsumer,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    ax_bus::consume::consume_batches_concurrently(consumer, BATCH, BATCHES_IN_FLIGHT, "intake", shutdown, |messages| handle_batch(&shared, messages))
        .await;
    Ok(())
}

/// A trigger that decoded, waiting for its task.
struct Parsed {
    message: Message,
    task: String,
    trigger_id: String,
    request: TriggerRequest,
}

async fn handle_batch(shared: &Shared, messages: Vec<Message>) {
    ::metrics::counter!(metrics::TRIGGERS_RECEIVED).increment(messages.len() as u64);
    let mut parsed = Vec::with_capacity(messages.len());
    for message in messages {
        match parse(shared, &message) {
            Ok((task, trigger_id, request)) => parsed.push(Parsed { message, task, trigger_id, request }),
            Err(reason) => refuse(&message, "malformed", &reason).await,
        }
    }
    if parsed.is_empty() {
        return;
    }

    let names: Vec<&str> = {
        let mut names: Vec<&str> = parsed.iter().map(|p| p.task.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    };
    let tasks: HashMap<String, TaskRecord> = match shared.deps.store.tasks_by_names(&names).await {
        Ok(tasks) => tasks.into_iter().map(|t| (t.name.clone(), t)).collect(),
        Err(err) => {
            tracing::warn!(error = %err, "cannot read tasks; triggers will be redelivered");
            return nak_all(parsed.iter().map(|p| &p.message)).await;
        }
    };

    let now = ax_domain::now();
    let mut accepted: Vec<Parsed> = Vec::with_capacity(parsed.len());
    let mut batch = Vec::with_capacity(parsed.len());
    for p in parsed {
        let Some(task) = tasks.get(&p.task) else {
            refuse(&p.message, "unknown_task", &format!("task {} is not registered", p.task)).await;
            continue;
        };
        if !task.enabled {
            refuse(&p.message, "disabled_task", &format!("task {} is disabled", p.task)).await;
            continue;
        }
        batch.push(NewInstance::from_trigger(task, &p.request, p.trigger_id.clone(), TriggerKind::Event, "intake", now));
        accepted.push(p);
    }
    if batch.is_empty() {
        return;
    }
    match shared.deps.store.create_instances(&batch).await {
        Ok(outcomes) => {
            for ((p, new), outcome) in accepted.iter().zip(&batch).zip(&outcomes) {
                match outcome {
                    CreateOutcome::Created(id) => {
                        ::metrics::counter!(metrics::INSTANCES_CREATED, "task" => new.task_name.clone(), "trigger" => "event").increment(1);
                        if let Ok(info) = p.message.info() {
                            let delay = (chrono::Utc::now() - info.published).as_seconds_f64();
                            ::metrics::histogram!(metrics::SCHEDULE_DELAY).record(delay.max(0.0));
                        }
                        tracing::debug!(instance_id = %id, task = %new.task_name, trigger_id = %new.trigger_id, "instance created");
                    }
                    // An upstream retry, or a redelivery after a lost ack: the trigger
                    // id already made its instance.
                    CreateOutcome::Duplicate(id) => {
                        ::metrics::counter!(metrics::TRIGGERS_DUPLICATE).increment(1);
                        let delivered = p.message.info().map(|i| i.delivered).unwrap_or(0);
                        tracing::debug!(instance_id = %id, task = %new.task_name, trigger_id = %new.trigger_id, delivered, "duplicate trigger: its instance exists");
                    }
                }
                if let Err(err) = p.message.ack().await {
                    tracing::warn!(error = %err, "ack of a committed trigger failed; its redelivery will be a duplicate");
                }
            }
            dispatch::kick(shared).await;
        }
        Err(err) => {
            tracing::warn!(error = %err, count = batch.len(), "creating instances failed; triggers will be redelivered");
            nak_all(accepted.iter().map(|p| &p.message)).await;
        }
    }
}

fn parse(shared: &Shared, message: &Message) -> Result<(String, String, TriggerRequest), String> {
    let subject = message.subject.as_str();
    let task = shared
        .deps
        .bus
        .names
        .task_of_trigger(subject)
        .filter(|t| ax_domain::task::is_valid_task_name(t))
        .ok_or_else(|| format!("subject {subject} does not name a task"))?
        .to_owned();
    let header = |name: &str| message.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
    let content_type = header("Content-Type");
    let request = TriggerRequest::decode(&message.payload, content_type.as_deref()).map_err(|e| e.to_string())?;
    let trigger_id = match (&request.trigger_id, header(async_nats::header::NATS_MESSAGE_ID.as_ref())) {
        (Some(id), _) => id.clone(),
        (None, Some(id)) if is_valid_trigger_id(&id) => id,
        (None, Some(id)) => return Err(format!("Nats-Msg-Id {id:?} is not a valid trigger id")),
        (None, None) => {
            let info = message.info().map_err(|e| format!("no stream info: {e}"))?;
            format!("js-{}", info.stream_sequence)
        }
    };
    Ok((task, trigger_id, request))
}

async fn refuse(message: &Message, reason: &'static str, detail: &str) {
    ::metrics::counter!(metrics::TRIGGERS_REFUSED, "reason" => reason).increment(1);
    tracing::warn!(subject = %message.subject, reason, detail, "trigger refused and acknowledged");
    if let Err(err) = message.ack_with(AckKind::Term).await {
        tracing::warn!(error = %err, "terminating a refused trigger failed; it may be seen again");
    }
}

async fn nak_all<'a>(messages: impl Iterator<Item = &'a Message>) {
    for message in messages {
        let _ = message.ack_with(AckKind::Nak(Some(RETRY_DELAY))).await;
    }
}

//! The chain service: a durable consumer of the `succeeded` and `failed` events on
//! `AX_EVENTS` that fires the tasks chained after the upstream task.
//!
//! Each downstream instance has trigger id `chain:<upstream instance id>`, so one
//! upstream instance fires each downstream task once however often its event is
//! delivered. The downstream's params carry the upstream task, instance, final
//! state and (on success) its result. A message is acknowledged only after the
//! downstream instances are committed; an undecodable one is terminated and counted.

use std::time::Duration;

use async_nats::jetstream::message::{AckKind, Message};
use ax_bus::Bus;
use ax_domain::event::{Event, EventBody, InstanceTransitioned};
use ax_domain::state::StateKind;
use ax_domain::task::{ChainOn, TriggerKind};
use ax_domain::trigger::TriggerRequest;
use ax_store::{CreateOutcome, NewInstance, Store};
use tokio_util::sync::CancellationToken;

pub const FIRED: &str = "ax_chain_fired_total";
pub const REFUSED: &str = "ax_chain_events_refused_total";
const BATCH: usize = 256;

pub async fn run(store: Store, bus: Bus, shutdown: CancellationToken) -> anyhow::Result<()> {
    metrics::describe_counter!(FIRED, "Downstream instances created by chain triggers, by task");
    metrics::describe_counter!(REFUSED, "Events the chain service could not read, acknowledged and dropped");
    bus.apply_definitions().await?;
    let consumer = bus.consumer(ax_bus::definitions::EVENTS, ax_bus::definitions::CHAIN_CONSUMER).await?;
    tracing::info!("chain service started");
    ax_bus::consume::consume_batches(consumer, BATCH, "chain", shutdown, |messages| async {
        for message in messages {
            handle(&store, &bus, message).await;
        }
    })
    .await;
    Ok(())
}

async fn handle(store: &Store, bus: &Bus, message: Message) {
    let event = match Event::decode(&message.payload) {
        Ok(Event { body: EventBody::InstanceTransitioned(t), .. }) => t,
        Ok(_) | Err(_) => {
            metrics::counter!(REFUSED).increment(1);
            tracing::warn!(subject = %message.subject, "undecodable event on the chain consumer; dropped");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
    };
    match fire_downstream(store, &event).await {
        Ok(created) => {
            let _ = message.ack().await;
            if created > 0 {
                let _ = bus.client.publish(bus.names.dispatch_kick(), bytes::Bytes::new()).await;
            }
        }
        Err(err) => {
            tracing::warn!(instance_id = %event.instance_id, error = %err, "chain firing failed; the event will be redelivered");
            let _ = message.ack_with(AckKind::Nak(Some(Duration::from_secs(2)))).await;
        }
    }
}

/// Creates the downstream instances of one ended upstream instance; returns how many were new.
pub async fn fire_downstream(store: &Store, upstream: &InstanceTransitioned) -> anyhow::Result<usize> {
    // A shard's end is not the firing's: the firing's own event fires the chain.
    if upstream.shard.is_some() {
        return Ok(0);
    }
    let ended = match upstream.to {
        StateKind::Succeeded => ChainOn::Succeeded,
        StateKind::Failed => ChainOn::Failed,
        _ => return Ok(0),
    };
    let downstream: Vec<_> = store
        .downstream_of(&upstream.task)
        .await?
        .into_iter()
        .filter(|d| d.on == ended || d.on == ChainOn::Finished)
        .collect();
    if downstream.is_empty() {
        return Ok(0);
    }
    let result = if ended == ChainOn::Succeeded {
        store.instance(&upstream.instance_id).await?.and_then(|i| i.result)
    } else {
        None
    };
    let names: Vec<&str> = downstream.iter().map(|d| d.task_name.as_str()).collect();
    let tasks = store.tasks_by_names(&names).await?;
    let now = ax_domain::now();
    let mut batch = Vec::new();
    for task in tasks.iter().filter(|t| t.enabled) {
        let request = TriggerRequest {
            params: serde_json::json!({
                "upstream": {
                    "task": upstream.task,
                    "instance_id": upstream.instance_id,
                    "state": upstream.to,
                    "result": result,
                }
            }),
            ..TriggerRequest::default()
        };
        let trigger_id = format!("chain:{}", upstream.instance_id);
        batch.push(NewInstance::from_trigger(task, &request, trigger_id, TriggerKind::Chain, "chain", now));
    }
    let outcomes = store.create_instances(&batch).await?;
    let created = outcomes.iter().filter(|o| matches!(o, CreateOutcome::Created(_))).count();
    for (new, outcome) in batch.iter().zip(&outcomes) {
        if let CreateOutcome::Created(id) = outcome {
            metrics::counter!(FIRED, "task" => new.task_name.clone()).increment(1);
            tracing::info!(upstream = %upstream.instance_id, downstream = %id, task = %new.task_name, "chain fired");
        }
    }
    Ok(created)
}

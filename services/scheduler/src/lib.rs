//! The scheduler: turns triggers into instances, hands instances to workers, applies
//! workers' reports, and publishes every committed transition.
//!
//! # Layout
//! - [`intake`]: the durable consumer of `ax.trigger.*`, creating instances by trigger id
//! - [`dispatch`]: moves due instances to live workers and pushes them onto their queues
//! - [`registry`]: live workers, from their heartbeats
//! - [`reports`]: answers workers' reports through batched guarded transitions
//! - [`relay`]: the outbox relay to `AX_EVENTS`
//! - [`tasks`]: a cache of immutable task versions
//! - [`metrics`]: metric names, declared once

pub mod dispatch;
pub mod intake;
pub mod metrics;
pub mod registry;
pub mod relay;
pub mod reports;
pub mod tasks;

use std::sync::Arc;

use anyhow::Context as _;
use ax_bus::Bus;
use ax_queue::WorkerQueues;
use ax_runtime::Config;
use ax_store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The connections a scheduler needs, made by the caller (so `ax dev` and tests share them).
#[derive(Clone)]
pub struct Deps {
    pub store: Store,
    pub bus: Bus,
    pub queues: WorkerQueues,
}

/// Shared between the scheduler's components.
#[derive(Clone)]
pub(crate) struct Shared {
    pub deps: Deps,
    pub config: Config,
    pub registry: registry::Registry,
    pub tasks: tasks::TaskCache,
    /// Wakes the dispatcher: new instances, a freed slot, a new worker.
    pub dispatch_wake: Arc<Notify>,
}

/// Runs every scheduler component until `shutdown` is cancelled, then drains them.
///
/// # Errors
/// A component could not start (e.g. the trigger consumer is missing).
pub async fn run(config: Config, deps: Deps, shutdown: CancellationToken) -> anyhow::Result<()> {
    metrics::describe();
    deps.bus.apply_definitions().await.context("applying NATS definitions")?;
    let shared = Shared {
        registry: registry::Registry::new(config.scheduler.lease.0),
        tasks: tasks::TaskCache::new(deps.store.clone()),
        dispatch_wake: Arc::new(Notify::new()),
        deps,
        config,
    };
    let mut components = tokio::task::JoinSet::new();
    let heartbeats = registry::subscribe(&shared).await.context("subscribing to heartbeats")?;
    components.spawn(registry::run(shared.clone(), heartbeats, shutdown.child_token()));
    // Subscribed: now ask the workers to introduce themselves.
    shared.deps.bus.client.publish(shared.deps.bus.names.roll_call(), bytes::Bytes::new()).await.context("calling the roll")?;
    let reports = reports::subscribe(&shared).await.context("subscribing to reports")?;
    components.spawn(reports::run(shared.clone(), reports, shutdown.child_token()));
    let kicks = dispatch::subscribe(&shared).await.context("subscribing to dispatch kicks")?;
    components.spawn(dispatch::run(shared.clone(), kicks, shutdown.child_token()));
    let consumer = shared.deps.bus.intake_consumer().await.context("opening the trigger intake consumer")?;
    components.spawn(intake::run(shared.clone(), consumer, shutdown.child_token()));
    components.spawn(relay::run(shared.deps.clone(), shared.config.scheduler.relay_interval.0, shutdown.child_token()));
    tracing::info!(namespace = %shared.deps.bus.names.namespace(), "scheduler started");

    while let Some(done) = components.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::error!(error = ?err, "scheduler component failed; stopping the scheduler");
                shutdown.cancel();
            }
            Err(err) => {
                tracing::error!(error = %err, "scheduler component panicked; stopping the scheduler");
                shutdown.cancel();
            }
        }
    }
    tracing::info!("scheduler stopped");
    Ok(())
}

//! The log sink: a durable consumer of `AX_LOGS` that writes workers' log batches
//! to MySQL (seed 5.5), and deletes them after `AX_LOG_RETENTION_DAYS` whole days.
//! Any number may run; they share the durable consumer.
//!
//! # Layout
//! - [`consumer`]: pull, classify (good, or terminated with a reason), write a
//!   whole pull in one transaction, then acknowledge
//! - [`retention`]: the hourly day-based delete
//! - [`metrics`]: metric names, declared once

pub mod consumer;
pub mod metrics;
pub mod retention;

use anyhow::Context as _;
use ax_bus::Bus;
use ax_runtime::Config;
use ax_store::Store;
use tokio_util::sync::CancellationToken;

/// The connections the log sink needs, made by the caller.
#[derive(Clone)]
pub struct Deps {
    pub store: Store,
    pub bus: Bus,
}

/// Consumes log batches and applies retention until `shutdown` is cancelled.
///
/// # Errors
/// The durable consumer is missing and cannot be created.
pub async fn run(config: Config, deps: Deps, shutdown: CancellationToken) -> anyhow::Result<()> {
    metrics::describe();
    deps.bus.apply_definitions().await.context("applying NATS definitions")?;
    let consumer = deps.bus.log_sink_consumer().await.context("opening the log sink consumer")?;
    let mut components = tokio::task::JoinSet::new();
    components.spawn(consumer::run(deps.clone(), consumer, shutdown.child_token()));
    components.spawn(retention::run(deps.store.clone(), config.observe.log_sink.log_retention_days, shutdown.child_token()));
    tracing::info!(namespace = %deps.bus.names.namespace(), retention_days = config.observe.log_sink.log_retention_days, "log sink started");
    ax_runtime::supervise::join_components("log sink", components, &shutdown).await;
    tracing::info!("log sink stopped");
    Ok(())
}

//! The monitor: the fan-out consumer of `AX_EVENTS` that turns the event stream
//! into metrics (seed 5.4), judges alert rules (P0/P1/P2) and notifies webhooks,
//! and makes the monthly task health report (seed 6). Any number may run: they
//! share one durable consumer, keep one open alert per condition through MySQL,
//! and claim each webhook delivery once.
//!
//! ```text
//! AX_EVENTS ─▶ events ─▶ observe (metrics)
//!                    └─▶ rules::on_finished ─▶ alerts + deliveries (MySQL) ─▶ notify ─▶ webhooks
//! heartbeats ─▶ pool ─┐
//! MySQL, Redis ───────┴▶ periodic (gauges, window rules, reminders)
//! cron ─▶ health ─▶ report + event (outbox) + deliveries
//! ```
//!
//! # Layout
//! - [`events`]: the durable consumer; classify, judge, then ack or nak
//! - [`observe`]: what a transition means for the metrics
//! - [`pool`]: live workers from heartbeats; queue depths
//! - [`periodic`]: gauges and the rules that look at a time window
//! - [`rules`]: when each rule kind is judged, and [`rules::judge`], how (pure)
//! - [`notify`]: webhook deliveries with back-off; [`notify::render`] the formats
//! - [`health`]: the monthly task health report
//! - [`metrics`]: metric names, declared once

pub mod events;
pub mod health;
pub mod metrics;
pub mod notify;
pub mod observe;
pub mod periodic;
pub mod pool;
pub mod rules;

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use ax_bus::Bus;
use ax_domain::Timestamp;
use ax_queue::WorkerQueues;
use ax_runtime::Config;
use ax_store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The connections the monitor needs, made by the caller.
#[derive(Clone)]
pub struct Deps {
    pub store: Store,
    pub bus: Bus,
    /// For queue depths only.
    pub queues: WorkerQueues,
}

/// What the monitor's components share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub deps: Deps,
    pub config: Config,
    pub pool: pool::Pool,
    pub rules: rules::RuleCache,
    pub recent: Arc<Mutex<observe::Recent>>,
    /// Wakes the delivery loop when something was queued.
    pub notify_wake: Arc<Notify>,
    pub started_at: Timestamp,
}

/// Runs every component until `shutdown` is cancelled.
///
/// # Errors
/// A component could not start (the durable consumer or the heartbeat
/// subscription is unavailable, or TLS cannot be set up).
pub async fn run(config: Config, deps: Deps, shutdown: CancellationToken) -> anyhow::Result<()> {
    // The recorder must exist before the first metric is touched.
    let _ = ax_runtime::telemetry::prometheus();
    metrics::describe();
    deps.bus.apply_definitions().await.context("applying NATS definitions")?;
    let consumer = deps.bus.monitor_consumer().await.context("opening the monitor's event consumer")?;
    let shared = Shared {
        pool: pool::Pool::new(config.scheduler.lease.0),
        rules: rules::RuleCache::default(),
        recent: Arc::default(),
        notify_wake: Arc::new(Notify::new()),
        started_at: ax_domain::now(),
        deps,
        config,
    };
    let heartbeats = pool::subscribe(&shared).await.context("subscribing to heartbeats")?;
    // Ask the workers to introduce themselves rather than wait a heartbeat interval.
    shared.deps.bus.client.publish(shared.deps.bus.names.roll_call(), bytes::Bytes::new()).await.context("calling the roll")?;

    let mut components = tokio::task::JoinSet::new();
    components.spawn(pool::run(shared.clone(), heartbeats, shutdown.child_token()));
    components.spawn(events::run(shared.clone(), consumer, shutdown.child_token()));
    components.spawn(periodic::run(shared.clone(), shutdown.child_token()));
    components.spawn(notify::run(shared.clone(), shutdown.child_token()));
    components.spawn(health::run(shared.clone(), shutdown.child_token()));
    tracing::info!(namespace = %shared.deps.bus.names.namespace(), "monitor started");

    ax_runtime::supervise::join_components("monitor", components, &shutdown).await;
    tracing::info!("monitor stopped");
    Ok(())
}

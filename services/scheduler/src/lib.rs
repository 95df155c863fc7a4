//! The scheduler: turns triggers into instances, hands instances to workers, applies
//! workers' reports, and publishes every committed transition.
//!
//! # Layout
//! - [`leader`]: MySQL-lock leader election with fenced terms; the leader alone runs
//!   cron planning, the timer, dispatch and the outbox relay
//! - [`intake`]: the durable consumer of `ax.trigger.*`, creating instances by trigger id
//! - [`cron`]: planning cron fires from MySQL, creating them ahead (or indexing them
//!   to fire at their time, for a task with a concurrency limit), misfires
//! - [`timers`]: the leader's timer over the Redis due index
//! - `pieces`: cutting fire batches into transactions without splitting a schedule
//! - [`dispatch`]: moves due instances to live workers and pushes them onto their queues
//! - [`registry`]: live workers, from their heartbeats
//! - [`reports`]: answers workers' reports through batched guarded transitions
//! - [`leases`]: workers' lease renewals (and the attempts they lost) and progress
//! - [`reaper`]: ends attempts whose lease or deadline passed; rebuilds Redis after a flush
//! - [`budget`]: the retry-storm guard
//! - [`ring`]: the consistent-hash ring of the `hash` dispatch strategy
//! - [`relay`]: the outbox relay to `AX_EVENTS`
//! - [`tasks`]: a cache of immutable task versions
//! - [`metrics`]: metric names, declared once

pub mod budget;
pub mod cron;
pub mod dispatch;
pub mod intake;
pub mod leader;
pub mod leases;
pub mod metrics;
mod pieces;
pub mod reaper;
pub mod registry;
pub mod relay;
pub mod reports;
mod retry;
pub mod ring;
pub mod tasks;
pub mod timers;

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
    /// Set while this replica leads and its dispatcher runs: a kick then stays in
    /// the process instead of a NATS round trip to itself.
    pub dispatching_here: Arc<std::sync::atomic::AtomicBool>,
    /// Wakes the timer: something earlier may have been indexed.
    pub timer_wake: Arc<Notify>,
    /// Tells the timer that instances were created or moved: their due times are
    /// indexed again from MySQL (a kick over NATS says the same from elsewhere).
    pub due_changed: Arc<Notify>,
    /// Cron fires this leader planned.
    pub planned: cron::Planned,
    /// Set when Redis lost its state: the planner starts over from MySQL.
    pub replan: Arc<std::sync::atomic::AtomicBool>,
    /// Set when Redis lost its state: the timer re-indexes due times from MySQL.
    pub reindex: Arc<std::sync::atomic::AtomicBool>,
    pub budget: Arc<budget::RetryBudget>,
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
        dispatching_here: Arc::default(),
        timer_wake: Arc::new(Notify::new()),
        due_changed: Arc::new(Notify::new()),
        planned: cron::Planned::default(),
        replan: Arc::default(),
        reindex: Arc::default(),
        budget: Arc::new(budget::RetryBudget::new(config.scheduler.retry_budget_task, config.scheduler.retry_budget_cluster)),
        deps,
        config,
    };
    let holder = format!("{}:{}", hostname(), std::process::id());
    let mut components = tokio::task::JoinSet::new();
    let heartbeats = registry::subscribe(&shared).await.context("subscribing to heartbeats")?;
    components.spawn(registry::run(shared.clone(), heartbeats, shutdown.child_token()));
    // Subscribed: now ask the workers to introduce themselves.
    shared.deps.bus.client.publish(shared.deps.bus.names.roll_call(), bytes::Bytes::new()).await.context("calling the roll")?;
    let reports = reports::subscribe(&shared).await.context("subscribing to reports")?;
    components.spawn(reports::run(shared.clone(), reports, shutdown.child_token()));
    let leases = leases::subscribe(&shared).await.context("subscribing to lease renewals")?;
    components.spawn(leases::run(shared.clone(), leases, shutdown.child_token()));
    let consumer = shared.deps.bus.intake_consumer().await.context("opening the trigger intake consumer")?;
    components.spawn(intake::run(shared.clone(), consumer, shutdown.child_token()));

    // Leader work: every loop below runs only during a term this scheduler holds.
    let (term_tx, term_rx) = tokio::sync::watch::channel(None);
    components.spawn(leader::run(shared.deps.store.clone(), holder, term_tx, shutdown.child_token()));
    let each_term = |work: fn(Shared, leader::Term) -> futures::future::BoxFuture<'static, anyhow::Result<()>>| {
        let shared = shared.clone();
        leader::for_each_term(term_rx.clone(), shutdown.child_token(), move |term| work(shared.clone(), term))
    };
    components.spawn(each_term(|s, t| Box::pin(dispatch::run(s, t))));
    components.spawn(each_term(|s, t| Box::pin(timers::run(s, t))));
    components.spawn(each_term(|s, t| Box::pin(cron::plan(s, t))));
    components.spawn(each_term(|s, t| Box::pin(reaper::run(s, t))));
    components.spawn(each_term(|s, t| {
        let interval = s.config.scheduler.relay_interval.0;
        Box::pin(relay::run(s.deps, interval, t.token))
    }));
    tracing::info!(namespace = %shared.deps.bus.names.namespace(), "scheduler started");

    ax_runtime::supervise::join_components("scheduler", components, &shutdown).await;
    tracing::info!("scheduler stopped");
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "scheduler".into())
}

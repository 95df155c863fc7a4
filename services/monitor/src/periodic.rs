//! The periodic pass, every `AX_MONITOR_INTERVAL` (with jitter): gauges read
//! from MySQL, Redis and the heartbeats, then the rules that look at a time
//! window. A failed pass is logged and counted, never fatal.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use ax_domain::state::StateKind;
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::rules::{self, PassInputs};
use crate::{metrics, pool, Shared};

/// Seed 5.4: instances ready to run for longer than this are backlog.
const BACKLOG_AGE: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// Label sets reported last pass, so one that disappears is set to zero rather
/// than left at its last value.
#[derive(Default, Clone)]
pub(crate) struct Reported {
    states: Arc<Mutex<HashSet<(String, StateKind)>>>,
    backlog: Arc<Mutex<HashSet<String>>>,
}

pub(crate) async fn run(shared: Shared, shutdown: CancellationToken) -> anyhow::Result<()> {
    let period = shared.config.observe.monitor.monitor_interval.0;
    let jitter = period.mul_f64(rand::rng().random_range(0.0..0.2));
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + jitter, period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reported = Reported::default();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = interval.tick() => {}
        }
        if let Err(err) = pass(&shared, &reported).await {
            tracing::warn!(error = %err, "monitor pass failed");
            ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "periodic").increment(1);
        }
    }
    Ok(())
}

/// One pass. Public to the crate so tests and `ax dev` behave alike.
pub(crate) async fn pass(shared: &Shared, reported: &Reported) -> anyhow::Result<()> {
    let store = &shared.deps.store;
    let now = ax_domain::now();
    let sweep = pool::refresh(shared, now).await;

    let counts = store.instance_state_counts().await?;
    let mut ready_instances = 0;
    {
        let mut previous = reported.states.lock().expect("reported lock");
        let mut current = HashSet::with_capacity(counts.len());
        for (task, state, count) in &counts {
            ::metrics::gauge!(metrics::INSTANCES_BY_STATE, "task" => task.clone(), "state" => state.token()).set(*count as f64);
            current.insert((task.clone(), *state));
            if *state == StateKind::Created {
                ready_instances += count;
            }
        }
        for (task, state) in previous.difference(&current) {
            ::metrics::gauge!(metrics::INSTANCES_BY_STATE, "task" => task.clone(), "state" => state.token()).set(0.0);
        }
        *previous = current;
    }

    let backlog = store.backlog(now - BACKLOG_AGE).await?;
    {
        let mut previous = reported.backlog.lock().expect("reported lock");
        let mut current = HashSet::with_capacity(backlog.len());
        let mut oldest = 0.0_f64;
        for b in &backlog {
            ::metrics::gauge!(metrics::BACKLOG, "task" => b.task.clone()).set(b.count as f64);
            oldest = oldest.max((now - b.oldest_due).as_seconds_f64());
            current.insert(b.task.clone());
        }
        for task in previous.difference(&current) {
            ::metrics::gauge!(metrics::BACKLOG, "task" => task.clone()).set(0.0);
        }
        ::metrics::gauge!(metrics::BACKLOG_OLDEST).set(oldest);
        *previous = current;
    }

    let (pending, oldest) = store.outbox_lag().await?;
    ::metrics::gauge!(metrics::OUTBOX_PENDING).set(pending as f64);
    ::metrics::gauge!(metrics::OUTBOX_LAG).set(oldest.map_or(0.0, |t| (now - t).as_seconds_f64().max(0.0)));
    ::metrics::gauge!(metrics::NOTIFICATIONS_PENDING).set(store.pending_notifications().await? as f64);

    rules::periodic(shared, &PassInputs { sweep: &sweep, ready_instances, now }).await?;
    Ok(())
}

//! Live workers, as their heartbeats describe them. Every replica keeps its own
//! copy (heartbeats are plain publishes, seen by all), so any replica that becomes
//! the dispatcher knows the pool at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_domain::protocol::Heartbeat;
use ax_domain::task::{TaskDefinition, WorkerVersion};
use ax_domain::Timestamp;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::metrics;
use crate::Shared;

#[derive(Debug, Clone)]
pub struct WorkerEntry {
    pub heartbeat: Heartbeat,
    pub last_seen: Timestamp,
}

#[derive(Clone)]
pub struct Registry {
    lease: Duration,
    workers: Arc<Mutex<HashMap<String, WorkerEntry>>>,
}

impl Registry {
    pub fn new(lease: Duration) -> Self {
        Self { lease, workers: Arc::default() }
    }

    /// Records a heartbeat; `true` if the worker is new (or back).
    pub fn record(&self, heartbeat: Heartbeat, now: Timestamp) -> bool {
        let mut workers = self.workers.lock().expect("registry lock");
        let key = heartbeat.worker_id.as_str().to_owned();
        let was_alive = workers.get(&key).is_some_and(|w| self.alive(w, now));
        if heartbeat.leaving {
            workers.remove(&key);
            return false;
        }
        workers.insert(key, WorkerEntry { heartbeat, last_seen: now });
        !was_alive
    }

    /// A worker handed work back: it is leaving, whatever its last heartbeat said
    /// (its goodbye may still be on the way), so nothing more goes to it.
    pub fn mark_leaving(&self, worker: &str) {
        self.workers.lock().expect("registry lock").remove(worker);
    }

    fn alive(&self, entry: &WorkerEntry, now: Timestamp) -> bool {
        let lease = chrono::TimeDelta::from_std(self.lease).unwrap_or(chrono::TimeDelta::MAX);
        entry.last_seen + lease > now && !entry.heartbeat.leaving
    }

    /// Live workers, oldest heartbeat pruned.
    pub fn alive_workers(&self, now: Timestamp) -> Vec<WorkerEntry> {
        let mut workers = self.workers.lock().expect("registry lock");
        workers.retain(|_, w| self.alive(w, now));
        let mut list: Vec<WorkerEntry> = workers.values().cloned().collect();
        list.sort_by(|a, b| a.heartbeat.worker_id.cmp(&b.heartbeat.worker_id));
        list
    }
}

/// Whether `worker` may run `task`: it has the handler, every tag, and a version at
/// least the task's minimum.
pub fn eligible(worker: &Heartbeat, task: &TaskDefinition) -> bool {
    if !worker.handlers.iter().any(|h| h == &task.execution.handler) {
        return false;
    }
    if !task.dispatch.tags.iter().all(|tag| worker.tags.contains(tag)) {
        return false;
    }
    match task.min_worker_version.as_deref().and_then(WorkerVersion::parse) {
        Some(min) => WorkerVersion::parse(&worker.version).is_some_and(|v| v >= min),
        None => true,
    }
}

pub(crate) async fn subscribe(shared: &Shared) -> Result<async_nats::Subscriber, async_nats::SubscribeError> {
    shared.deps.bus.client.subscribe(shared.deps.bus.names.heartbeat()).await
}

/// Applies heartbeats to the registry, waking the dispatcher when a worker appears.
/// (Leases are renewed by the workers' lease requests, see [`crate::leases`].)
pub(crate) async fn run(shared: Shared, mut heartbeats: async_nats::Subscriber, shutdown: CancellationToken) -> anyhow::Result<()> {
    loop {
        let message = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            message = heartbeats.next() => match message { Some(m) => m, None => break },
        };
        let heartbeat: Heartbeat = match serde_json::from_slice(&message.payload) {
            Ok(h) => h,
            Err(err) => {
                tracing::warn!(error = %err, "malformed heartbeat ignored");
                ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "heartbeat_decode").increment(1);
                continue;
            }
        };
        let now = ax_domain::now();
        let worker = heartbeat.worker_id.as_str().to_owned();
        let appeared = shared.registry.record(heartbeat, now);
        if appeared {
            tracing::info!(worker_id = %worker, "worker joined");
            shared.dispatch_wake.notify_one();
        }
        ::metrics::gauge!(metrics::WORKERS_ALIVE).set(shared.registry.alive_workers(now).len() as f64);
    }
    Ok(())
}

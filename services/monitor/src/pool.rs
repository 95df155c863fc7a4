//! The worker pool as heartbeats describe it: who is alive, how busy, who went
//! silent (seed 5.4: heartbeat loss rate, worker pool use), and how many
//! assignments wait in each live worker's Redis queues.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_domain::protocol::Heartbeat;
use ax_domain::Timestamp;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::{metrics, Shared};

#[derive(Debug, Clone)]
struct Seen {
    heartbeat: Heartbeat,
    last_seen: Timestamp,
}

#[derive(Default)]
struct State {
    workers: HashMap<String, Seen>,
    /// Whether any worker was ever heard from since the monitor started.
    ever_seen: bool,
}

/// What a sweep found.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub alive: Vec<String>,
    /// Workers that went silent for a lease without saying goodbye, this sweep.
    pub lost: Vec<String>,
    /// Workers that left (goodbye) or were lost, whose gauges must be zeroed.
    pub gone: Vec<String>,
    pub running: u64,
    pub capacity: u64,
    pub ever_seen: bool,
}

#[derive(Clone)]
pub struct Pool {
    lease: Duration,
    state: Arc<Mutex<State>>,
}

impl Pool {
    pub fn new(lease: Duration) -> Self {
        Self { lease, state: Arc::default() }
    }

    /// Records a heartbeat; a goodbye removes the worker at once (it is not lost).
    pub fn record(&self, heartbeat: Heartbeat, now: Timestamp) -> Option<String> {
        let mut state = self.state.lock().expect("pool lock");
        state.ever_seen = true;
        let key = heartbeat.worker_id.as_str().to_owned();
        if heartbeat.leaving {
            state.workers.remove(&key);
            return Some(key);
        }
        state.workers.insert(key, Seen { heartbeat, last_seen: now });
        None
    }

    /// Drops workers silent for longer than the lease and sums up the rest.
    pub fn sweep(&self, now: Timestamp) -> Sweep {
        let lease = chrono::TimeDelta::from_std(self.lease).unwrap_or(chrono::TimeDelta::MAX);
        let mut state = self.state.lock().expect("pool lock");
        let lost: Vec<String> = state.workers.iter().filter(|(_, w)| w.last_seen + lease <= now).map(|(k, _)| k.clone()).collect();
        for key in &lost {
            state.workers.remove(key);
        }
        let mut alive: Vec<String> = state.workers.keys().cloned().collect();
        alive.sort();
        Sweep {
            alive,
            gone: lost.clone(),
            lost,
            running: state.workers.values().map(|w| u64::from(w.heartbeat.running)).sum(),
            capacity: state.workers.values().map(|w| u64::from(w.heartbeat.max_running)).sum(),
            ever_seen: state.ever_seen,
        }
    }
}

pub(crate) async fn subscribe(shared: &Shared) -> Result<async_nats::Subscriber, async_nats::SubscribeError> {
    shared.deps.bus.client.subscribe(shared.deps.bus.names.heartbeat()).await
}

/// Records heartbeats until shutdown.
pub(crate) async fn run(shared: Shared, mut heartbeats: async_nats::Subscriber, shutdown: CancellationToken) -> anyhow::Result<()> {
    loop {
        let message = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            message = heartbeats.next() => match message { Some(m) => m, None => break },
        };
        match serde_json::from_slice::<Heartbeat>(&message.payload) {
            Ok(heartbeat) => {
                ::metrics::counter!(metrics::HEARTBEATS).increment(1);
                if let Some(left) = shared.pool.record(heartbeat, ax_domain::now()) {
                    ::metrics::gauge!(metrics::QUEUE_DEPTH, "worker" => left).set(0.0);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "malformed heartbeat ignored");
                ::metrics::counter!(metrics::EVENTS_REFUSED, "reason" => "heartbeat").increment(1);
            }
        }
    }
    Ok(())
}

/// Sets the pool gauges and each live worker's queue depth; returns the sweep.
pub(crate) async fn refresh(shared: &Shared, now: Timestamp) -> Sweep {
    let sweep = shared.pool.sweep(now);
    for worker in &sweep.lost {
        tracing::warn!(worker_id = %worker, "worker lost: no heartbeat for a lease");
        ::metrics::counter!(metrics::HEARTBEATS_LOST).increment(1);
    }
    for worker in &sweep.gone {
        ::metrics::gauge!(metrics::QUEUE_DEPTH, "worker" => worker.clone()).set(0.0);
    }
    ::metrics::gauge!(metrics::POOL_WORKERS).set(sweep.alive.len() as f64);
    ::metrics::gauge!(metrics::POOL_RUNNING).set(sweep.running as f64);
    ::metrics::gauge!(metrics::POOL_CAPACITY).set(sweep.capacity as f64);
    let utilization = if sweep.capacity == 0 { 0.0 } else { sweep.running as f64 / sweep.capacity as f64 };
    ::metrics::gauge!(metrics::POOL_UTILIZATION).set(utilization);
    for worker in &sweep.alive {
        match shared.deps.queues.depth(worker).await {
            Ok(depth) => ::metrics::gauge!(metrics::QUEUE_DEPTH, "worker" => worker.clone()).set(depth as f64),
            Err(err) => {
                tracing::debug!(worker_id = %worker, error = %err, "queue depth unavailable");
                ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "queue_depth").increment(1);
                break;
            }
        }
    }
    sweep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(worker: &str, running: u32, leaving: bool) -> Heartbeat {
        Heartbeat {
            worker_id: worker.parse().unwrap(),
            group: "default".into(),
            tags: vec![],
            version: "0.1.0".into(),
            handlers: vec![],
            cpu_cores: 2,
            running,
            max_running: 4,
            prefetch: 0,
            memory_used_bytes: 0,
            sent_at: ax_domain::now(),
            leaving,
        }
    }

    #[test]
    fn silent_workers_are_lost_and_leaving_ones_are_not() {
        let pool = Pool::new(Duration::from_secs(30));
        let t0 = ax_domain::now();
        pool.record(beat("w1", 1, false), t0);
        pool.record(beat("w2", 3, false), t0 + chrono::TimeDelta::seconds(20));
        pool.record(beat("w3", 0, false), t0);
        assert_eq!(pool.record(beat("w3", 0, true), t0), Some("w3".to_owned()));
        let sweep = pool.sweep(t0 + chrono::TimeDelta::seconds(31));
        assert_eq!(sweep.lost, ["w1"]);
        assert_eq!(sweep.alive, ["w2"]);
        assert_eq!((sweep.running, sweep.capacity), (3, 4));
        assert!(sweep.ever_seen);
    }
}

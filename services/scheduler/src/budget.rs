//! The retry-storm guard: token buckets of retries per minute, one per task and
//! one for the cluster (as this replica sees it). A retry that finds a bucket empty
//! is not dropped but deferred to when the bucket has a token again, and the
//! condition is counted so the monitor can alert on it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metrics;

struct Bucket {
    per_minute: f64,
    tokens: f64,
    refilled: Instant,
}

impl Bucket {
    fn new(per_minute: u32) -> Self {
        Self { per_minute: f64::from(per_minute), tokens: f64::from(per_minute), refilled: Instant::now() }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_minute / 60.0).min(self.per_minute);
        self.refilled = now;
    }

    /// Takes a token; if none is left, books the next one and returns how long
    /// until it is there.
    fn take(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens * 60.0 / self.per_minute)
        }
    }
}

pub struct RetryBudget {
    per_task: u32,
    tasks: Mutex<HashMap<String, Bucket>>,
    cluster: Mutex<Bucket>,
}

impl RetryBudget {
    pub fn new(per_task: u32, cluster: u32) -> Self {
        Self { per_task, tasks: Mutex::new(HashMap::new()), cluster: Mutex::new(Bucket::new(cluster)) }
    }

    /// How much later than planned a retry of `task` must start to stay in budget.
    pub fn defer(&self, task: &str) -> Duration {
        let now = Instant::now();
        let task_wait = self.tasks.lock().expect("budget lock").entry(task.to_owned()).or_insert_with(|| Bucket::new(self.per_task)).take(now);
        let cluster_wait = self.cluster.lock().expect("budget lock").take(now);
        let wait = task_wait.max(cluster_wait);
        if !wait.is_zero() {
            let scope = if cluster_wait >= task_wait { "cluster" } else { "task" };
            ::metrics::counter!(metrics::RETRIES_DEFERRED, "task" => task.to_owned(), "scope" => scope).increment(1);
            tracing::warn!(task, scope, deferred_by = ?wait, "retry budget exhausted; retry deferred");
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storm_is_spread_out_not_dropped() {
        let budget = RetryBudget::new(60, 1000);
        let waits: Vec<Duration> = (0..62).map(|_| budget.defer("storm")).collect();
        assert!(waits[..60].iter().all(Duration::is_zero), "the first 60 go at once");
        assert!(waits[60] > Duration::from_millis(900) && waits[61] > waits[60], "{waits:?}");
        assert!(budget.defer("calm").is_zero(), "other tasks have their own budget");
    }
}

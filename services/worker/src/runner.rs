//! The worker's loops: heartbeats, taking assignments, running handlers, reporting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use ax_bus::Bus;
use ax_domain::ids::WorkerId;
use ax_domain::protocol::{Assignment, Heartbeat, Outcome, Report, ReportReply};
use ax_domain::retry::ExponentialBackoff;
use ax_queue::WorkerInbox;
use ax_runtime::Config;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::context::{Handler, TaskContext, TaskError};
use crate::logger::LogShipper;

/// How long a pop blocks in Redis; also the longest a shutdown waits for the popper.
const POP_WAIT: Duration = Duration::from_secs(1);
/// How long a report waits for a scheduler's answer before it is sent again.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long in-flight work may take to finish once shutdown begins.
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);

pub struct WorkerBuilder {
    config: Config,
    handlers: HashMap<String, Arc<dyn Handler>>,
}

impl WorkerBuilder {
    /// Registers `handler` under `name`, the `execution.handler` of the tasks it runs.
    pub fn handler(mut self, name: impl Into<String>, handler: Arc<dyn Handler>) -> Self {
        self.handlers.insert(name.into(), handler);
        self
    }

    pub fn build(self) -> Worker {
        let worker_id = self
            .config
            .worker
            .worker_id
            .as_deref()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(WorkerId::generate);
        Worker { config: self.config, handlers: Arc::new(self.handlers), worker_id }
    }
}

pub struct Worker {
    config: Config,
    handlers: Arc<HashMap<String, Arc<dyn Handler>>>,
    worker_id: WorkerId,
}

/// What the loops share.
#[derive(Clone)]
struct Shared {
    bus: Bus,
    worker_id: WorkerId,
    handlers: Arc<HashMap<String, Arc<dyn Handler>>>,
    slots: Arc<Semaphore>,
    max_running: u32,
    logs: LogShipper,
}

impl Worker {
    pub fn builder(config: Config) -> WorkerBuilder {
        WorkerBuilder { config, handlers: HashMap::new() }
    }

    pub fn id(&self) -> &WorkerId {
        &self.worker_id
    }

    /// Connects to NATS and Redis and works until `shutdown` is cancelled.
    ///
    /// # Errors
    /// NATS or Redis unreachable at start.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let names = self.config.nats.names();
        let bus = Bus::connect(self.config.nats.nats_url.expose(), names, &format!("ax-worker {}", self.worker_id))
            .await
            .context("connecting to NATS")?;
        self.run_with(bus, shutdown).await
    }

    /// Works over an existing NATS connection until `shutdown` is cancelled: stops
    /// taking work, lets in-flight attempts finish (up to a deadline), says goodbye.
    ///
    /// # Errors
    /// Redis unreachable at start.
    pub async fn run_with(self, bus: Bus, shutdown: CancellationToken) -> anyhow::Result<()> {
        let max_running = self.config.worker.max_running;
        let shared = Shared {
            bus: bus.clone(),
            worker_id: self.worker_id.clone(),
            handlers: self.handlers.clone(),
            slots: Arc::new(Semaphore::new(max_running as usize)),
            max_running,
            logs: start_log_shipper(&bus, &self.config),
        };
        let mut inbox = WorkerInbox::connect(self.config.redis.redis_url.expose(), &bus.names, self.worker_id.as_str())
            .await
            .context("connecting to Redis")?;
        let mut handler_names: Vec<String> = self.handlers.keys().cloned().collect();
        handler_names.sort();
        tracing::info!(worker_id = %self.worker_id, handlers = ?handler_names, max_running, "worker started");

        let heartbeat_stop = CancellationToken::new();
        let heartbeats = tokio::spawn(heartbeat_loop(shared.clone(), self.config.clone(), handler_names.clone(), heartbeat_stop.clone()));

        let in_flight = TaskTracker::new();
        let attempts = CancellationToken::new();
        while !shutdown.is_cancelled() {
            let permit = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                permit = shared.slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            };
            // Not raced against shutdown: a pop abandoned mid-flight could lose what
            // Redis already handed over. It returns within POP_WAIT anyway.
            match inbox.pop(POP_WAIT).await {
                Ok(Some(assignment)) => {
                    let shared = shared.clone();
                    let cancel = attempts.child_token();
                    // One id finds everything about a run: the worker's own log lines carry it too.
                    let span = tracing::info_span!("attempt", instance_id = %assignment.instance_id, attempt = assignment.attempt, trace_id = %assignment.trace_id);
                    in_flight.spawn(
                        async move {
                            execute(&shared, assignment, cancel).await;
                            drop(permit);
                        }
                        .instrument(span),
                    );
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "taking work from Redis failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }

        in_flight.close();
        if tokio::time::timeout(DRAIN_DEADLINE, in_flight.wait()).await.is_err() {
            tracing::warn!("in-flight work did not finish by the deadline; cancelling it");
            attempts.cancel();
            in_flight.wait().await;
        }
        heartbeat_stop.cancel();
        let _ = heartbeats.await;
        shared.logs.close().await;
        let goodbye = heartbeat(&shared, &self.config, &handler_names, true);
        let _ = bus.client.publish(bus.names.heartbeat(), serde_json::to_vec(&goodbye)?.into()).await;
        let _ = bus.client.flush().await;
        tracing::info!(worker_id = %self.worker_id, "worker stopped");
        Ok(())
    }
}

fn heartbeat(shared: &Shared, config: &Config, handlers: &[String], leaving: bool) -> Heartbeat {
    Heartbeat {
        worker_id: shared.worker_id.clone(),
        group: config.worker.group.clone(),
        tags: config.worker.tag_list(),
        version: crate::VERSION.to_owned(),
        handlers: handlers.to_vec(),
        cpu_cores: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
        running: shared.max_running - shared.slots.available_permits() as u32,
        max_running: shared.max_running,
        memory_used_bytes: resident_memory_bytes(),
        sent_at: ax_domain::now(),
        leaving,
    }
}

/// Heartbeats every interval, and at once when a scheduler calls the roll.
async fn heartbeat_loop(shared: Shared, config: Config, handlers: Vec<String>, stop: CancellationToken) {
    let mut interval = tokio::time::interval(config.worker.heartbeat_interval.0);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut roll_calls = match shared.bus.client.subscribe(shared.bus.names.roll_call()).await {
        Ok(sub) => Some(sub),
        Err(err) => {
            tracing::warn!(error = %err, "cannot hear roll calls; heartbeats keep their interval");
            None
        }
    };
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = interval.tick() => {}
            Some(_) = async { match roll_calls.as_mut() { Some(s) => s.next().await, None => std::future::pending().await } } => {}
        }
        let beat = heartbeat(&shared, &config, &handlers, false);
        let body = serde_json::to_vec(&beat).expect("heartbeats always serialize");
        if let Err(err) = shared.bus.client.publish(shared.bus.names.heartbeat(), body.into()).await {
            tracing::warn!(error = %err, "heartbeat not sent");
        }
    }
}

/// Runs one attempt: RUNNING first, the handler only if the scheduler agreed, then the outcome.
async fn execute(shared: &Shared, assignment: Assignment, cancel: CancellationToken) {
    let instance_id = assignment.instance_id.clone();
    let attempt = assignment.attempt;
    let Some(handler) = shared.handlers.get(&assignment.handler).cloned() else {
        let reason = format!("worker {} has no handler {:?}", shared.worker_id, assignment.handler);
        report(shared, &assignment, Outcome::Failed { reason, retryable: true }).await;
        return;
    };
    match report(shared, &assignment, Outcome::Running).await {
        Some(ReportReply::Accepted) => {}
        Some(ReportReply::Rejected { reason }) => {
            tracing::info!(instance_id = %instance_id, attempt, reason = %reason, "scheduler disowned this attempt; not running it");
            return;
        }
        _ => {
            tracing::warn!(instance_id = %instance_id, attempt, "could not confirm RUNNING; not running it (its lease will expire)");
            return;
        }
    }
    let log = shared.logs.logger(&assignment.task, &instance_id, attempt, &shared.worker_id, &assignment.trace_id);
    log.attempt_started();
    let ctx = TaskContext {
        instance_id: instance_id.clone(),
        task: assignment.task.clone(),
        task_version: assignment.task_version,
        attempt,
        params: assignment.params.clone(),
        payload_version: assignment.payload_version,
        config: assignment.config.clone(),
        trace_id: assignment.trace_id.clone(),
        cancellation: cancel.clone(),
        log: log.clone(),
    };
    let timeout = Duration::from_secs(assignment.timeout_sec);
    let outcome = match tokio::time::timeout(timeout, handler.run(ctx)).await {
        Ok(Ok(result)) => Outcome::Succeeded { result },
        Ok(Err(TaskError::Retry { reason })) => Outcome::Failed { reason, retryable: true },
        Ok(Err(TaskError::Abort { reason })) => Outcome::Failed { reason, retryable: false },
        Err(_) => {
            cancel.cancel();
            Outcome::Failed { reason: format!("timed out after {}s", assignment.timeout_sec), retryable: true }
        }
    };
    log.attempt_finished(&outcome);
    match report(shared, &assignment, outcome).await {
        Some(ReportReply::Accepted) => {}
        Some(ReportReply::Rejected { reason }) => {
            tracing::info!(instance_id = %instance_id, attempt, reason = %reason, "outcome refused: the attempt was taken over")
        }
        _ => tracing::warn!(instance_id = %instance_id, attempt, "outcome could not be delivered; the lease will decide"),
    }
}

/// Sends a report and waits for the verdict, retrying while no scheduler answers
/// (up to about a lease). `None` if it never got an answer.
async fn report(shared: &Shared, assignment: &Assignment, outcome: Outcome) -> Option<ReportReply> {
    let report = Report {
        instance_id: assignment.instance_id.clone(),
        task: assignment.task.clone(),
        task_version: assignment.task_version,
        attempt: assignment.attempt,
        worker_id: shared.worker_id.clone(),
        outcome,
    };
    let body: bytes::Bytes = serde_json::to_vec(&report).expect("reports always serialize").into();
    let subject = shared.bus.names.report();
    let mut backoff = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = tokio::time::timeout(REPORT_TIMEOUT, shared.bus.client.request(subject.clone(), body.clone())).await;
        match answer {
            Ok(Ok(message)) => match serde_json::from_slice::<ReportReply>(&message.payload) {
                Ok(ReportReply::Unavailable { reason }) => {
                    tracing::debug!(reason = %reason, "scheduler cannot decide now; reporting again");
                }
                Ok(reply) => return Some(reply),
                Err(err) => tracing::warn!(error = %err, "unreadable report reply"),
            },
            Ok(Err(err)) => tracing::debug!(error = %err, "report not answered"),
            Err(_) => tracing::debug!("report timed out"),
        }
        if tokio::time::Instant::now() > give_up {
            return None;
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// This process's resident memory, for heartbeats (Linux; 0 elsewhere).
fn resident_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|pages| pages.parse::<u64>().ok()))
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

fn start_log_shipper(bus: &Bus, config: &Config) -> LogShipper {
    crate::metrics::describe();
    let settings = &config.observe.worker_log;
    LogShipper::start(bus.clone(), settings.worker_log_buffer as usize, settings.worker_log_flush.0)
}

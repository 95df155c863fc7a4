//! The worker's loops: heartbeats and lease renewals, taking assignments, running
//! handlers under their guards, reporting, and shutting down without losing work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ax_bus::Bus;
use ax_domain::ids::WorkerId;
use ax_domain::protocol::{Assignment, Heartbeat, LeaseRenewal, LeaseRenewed, Outcome, Report, ReportReply};
use ax_domain::retry::ExponentialBackoff;
use ax_queue::{ExecutionGuards, WorkerInbox};
use ax_runtime::Config;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::context::{Handler, AttemptLink, TaskContext, TaskError};
use crate::logger::LogShipper;

/// How long a pop blocks in Redis; also the longest a shutdown waits for the popper.
const POP_WAIT: Duration = Duration::from_secs(1);
/// How long a report waits for a scheduler's answer before it is sent again.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// After a timeout or cancellation, how long a handler has to stop by itself.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Per-handler limits (seed 4.3): a pool so one handler cannot take every slot, and
/// a rate for handlers that call something rate-limited.
#[derive(Debug, Clone, Copy, Default)]
pub struct HandlerOptions {
    /// At most this many attempts of the handler at once (default: the worker's slots).
    pub pool_size: Option<u32>,
    /// At most this many starts per second.
    pub rate_per_sec: Option<f64>,
}

struct HandlerEntry {
    handler: Arc<dyn Handler>,
    pool: Option<Arc<Semaphore>>,
    rate: Option<Mutex<RateLimiter>>,
}

struct RateLimiter {
    interval: Duration,
    next: Instant,
}

impl RateLimiter {
    /// How long to wait for the next start slot (and books it).
    fn book(&mut self) -> Duration {
        let now = Instant::now();
        let start = self.next.max(now);
        self.next = start + self.interval;
        start - now
    }
}

pub struct WorkerBuilder {
    config: Config,
    handlers: HashMap<String, HandlerEntry>,
}

impl WorkerBuilder {
    /// Registers `handler` under `name`, the `execution.handler` of the tasks it runs.
    pub fn handler(self, name: impl Into<String>, handler: Arc<dyn Handler>) -> Self {
        self.handler_with(name, handler, HandlerOptions::default())
    }

    pub fn handler_with(mut self, name: impl Into<String>, handler: Arc<dyn Handler>, options: HandlerOptions) -> Self {
        let entry = HandlerEntry {
            handler,
            pool: options.pool_size.map(|n| Arc::new(Semaphore::new(n.max(1) as usize))),
            rate: options
                .rate_per_sec
                .filter(|r| *r > 0.0)
                .map(|r| Mutex::new(RateLimiter { interval: Duration::from_secs_f64(1.0 / r), next: Instant::now() })),
        };
        self.handlers.insert(name.into(), entry);
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
    handlers: Arc<HashMap<String, HandlerEntry>>,
    worker_id: WorkerId,
}

/// An attempt in flight.
struct Running {
    attempt: u32,
    cancel: CancellationToken,
    /// Its execution guards, refreshed with every heartbeat.
    guards: Vec<String>,
    holder: String,
}

/// What the loops share.
#[derive(Clone)]
struct Shared {
    bus: Bus,
    config: Config,
    worker_id: WorkerId,
    handlers: Arc<HashMap<String, HandlerEntry>>,
    handler_names: Vec<String>,
    /// Handlers running at once (`max_running`).
    slots: Arc<Semaphore>,
    /// Assignments taken from Redis and not yet ended: `max_running + prefetch`.
    taken: Arc<Semaphore>,
    max_running: u32,
    running: Arc<Mutex<HashMap<String, Running>>>,
    /// Taken ahead of a free slot, waiting for one: instance → attempt. Their
    /// leases are renewed with the running ones.
    waiting: Arc<Mutex<HashMap<String, u32>>>,
    guards: ExecutionGuards,
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

    /// Works over an existing NATS connection until `shutdown` is cancelled, then
    /// leaves cleanly: says goodbye first (so nothing more is dispatched here), hands
    /// back what is queued and not started, lets in-flight attempts finish up to a
    /// deadline and hands back the rest, so all of it is re-dispatched at once
    /// rather than after a lease.
    ///
    /// # Errors
    /// Redis unreachable at start.
    pub async fn run_with(self, bus: Bus, shutdown: CancellationToken) -> anyhow::Result<()> {
        let max_running = self.config.worker.max_running;
        let redis_url = self.config.redis.redis_url.expose().to_owned();
        let mut handler_names: Vec<String> = self.handlers.keys().cloned().collect();
        handler_names.sort();
        let shared = Shared {
            bus: bus.clone(),
            config: self.config.clone(),
            worker_id: self.worker_id.clone(),
            handlers: self.handlers.clone(),
            handler_names: handler_names.clone(),
            slots: Arc::new(Semaphore::new(max_running as usize)),
            taken: Arc::new(Semaphore::new((max_running + self.config.worker.prefetch) as usize)),
            max_running,
            running: Arc::default(),
            waiting: Arc::default(),
            guards: ExecutionGuards::connect(&redis_url).await.context("connecting to Redis")?,
            logs: start_log_shipper(&bus, &self.config),
        };
        let mut inbox = WorkerInbox::connect(&redis_url, &bus.names, self.worker_id.as_str()).await.context("connecting to Redis")?;
        tracing::info!(worker_id = %self.worker_id, handlers = ?handler_names, max_running, "worker started");

        let background_stop = CancellationToken::new();
        let heartbeats = tokio::spawn(heartbeat_loop(shared.clone(), background_stop.clone()));
        let cancellations = tokio::spawn(cancellation_loop(shared.clone(), background_stop.clone()));

        let in_flight = TaskTracker::new();
        while !shutdown.is_cancelled() {
            let permit = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                permit = shared.taken.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            };
            // Not raced against shutdown: a pop abandoned mid-flight could lose what
            // Redis already handed over. It returns within POP_WAIT anyway.
            match inbox.pop(POP_WAIT).await {
                Ok(Some(assignment)) => {
                    let shared = shared.clone();
                    let shutdown = shutdown.clone();
                    // One id finds everything about a run: the worker's own log lines carry it too.
                    let span = tracing::info_span!("attempt", instance_id = %assignment.instance_id, attempt = assignment.attempt, trace_id = %assignment.trace_id);
                    in_flight.spawn(
                        async move {
                            let key = assignment.instance_id.as_str().to_owned();
                            shared.waiting.lock().expect("waiting lock").insert(key.clone(), assignment.attempt);
                            let slot = tokio::select! {
                                biased;
                                slot = shared.slots.clone().acquire_owned() => Some(slot.expect("the semaphore is never closed")),
                                _ = shutdown.cancelled() => None,
                            };
                            shared.waiting.lock().expect("waiting lock").remove(&key);
                            match slot {
                                Some(slot) => execute(&shared, assignment, slot, permit).await,
                                // Taken ahead and never started: straight back for another worker.
                                None => {
                                    drop(permit);
                                    report(&shared, &assignment, Outcome::HandedBack).await;
                                }
                            }
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

        // Leaving: no more dispatches here, then hand back what never started.
        let goodbye = heartbeat(&shared, true);
        let _ = bus.client.publish(bus.names.heartbeat(), serde_json::to_vec(&goodbye)?.into()).await;
        let _ = bus.client.flush().await;
        match inbox.drain().await {
            Ok(queued) => {
                for assignment in queued {
                    report(&shared, &assignment, Outcome::HandedBack).await;
                }
            }
            Err(err) => tracing::warn!(error = %err, "could not drain the queue; its entries wait for their leases"),
        }
        in_flight.close();
        if tokio::time::timeout(self.config.worker.drain.0, in_flight.wait()).await.is_err() {
            tracing::warn!("in-flight work did not finish by the deadline; cancelling and handing it back");
            for running in shared.running.lock().expect("running lock").values() {
                running.cancel.cancel();
            }
            in_flight.wait().await;
        }
        // Anything dispatched here while the goodbye was on its way goes back too.
        if let Ok(late) = inbox.drain().await {
            for assignment in late {
                report(&shared, &assignment, Outcome::HandedBack).await;
            }
        }
        background_stop.cancel();
        let _ = heartbeats.await;
        let _ = cancellations.await;
        shared.logs.close().await;
        tracing::info!(worker_id = %self.worker_id, "worker stopped");
        Ok(())
    }
}

fn heartbeat(shared: &Shared, leaving: bool) -> Heartbeat {
    Heartbeat {
        worker_id: shared.worker_id.clone(),
        group: shared.config.worker.group.clone(),
        tags: shared.config.worker.tag_list(),
        version: crate::VERSION.to_owned(),
        handlers: shared.handler_names.clone(),
        cpu_cores: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
        running: shared.max_running - shared.slots.available_permits() as u32,
        max_running: shared.max_running,
        prefetch: shared.config.worker.prefetch,
        memory_used_bytes: resident_memory_bytes(),
        sent_at: ax_domain::now(),
        leaving,
    }
}

/// Every interval (and at once when a scheduler calls the roll): a heartbeat for
/// the registries and a lease renewal for the attempts held. If no renewal has been
/// confirmed for a whole lease, the scheduler has given this worker's work to
/// others: every attempt here is cancelled rather than left running as a zombie.
async fn heartbeat_loop(shared: Shared, stop: CancellationToken) {
    let mut interval = tokio::time::interval(shared.config.worker.heartbeat_interval.0);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut roll_calls = match shared.bus.client.subscribe(shared.bus.names.roll_call()).await {
        Ok(sub) => Some(sub),
        Err(err) => {
            tracing::warn!(error = %err, "cannot hear roll calls; heartbeats keep their interval");
            None
        }
    };
    let lease = shared.config.scheduler.lease.0;
    let mut last_renewed = Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = interval.tick() => {}
            Some(_) = async { match roll_calls.as_mut() { Some(s) => s.next().await, None => std::future::pending().await } } => {}
        }
        let beat = heartbeat(&shared, false);
        let body = serde_json::to_vec(&beat).expect("heartbeats always serialize");
        if let Err(err) = shared.bus.client.publish(shared.bus.names.heartbeat(), body.into()).await {
            tracing::warn!(error = %err, "heartbeat not sent");
        }
        match renew(&shared).await {
            Some(renewed) => {
                last_renewed = Instant::now();
                refresh_guards(&shared).await;
                for lost in renewed.lost {
                    if let Some(running) = shared.running.lock().expect("running lock").get(lost.as_str()) {
                        tracing::warn!(instance_id = %lost, "the scheduler no longer gives this worker the attempt; stopping it");
                        running.cancel.cancel();
                    }
                }
            }
            None if last_renewed.elapsed() > lease => {
                let running = shared.running.lock().expect("running lock");
                if !running.is_empty() {
                    tracing::error!(count = running.len(), "no lease renewal for a whole lease; stopping every attempt (it is being retried elsewhere)");
                }
                for attempt in running.values() {
                    attempt.cancel.cancel();
                }
            }
            None => {}
        }
    }
}

/// Keeps the guards of running attempts alive for another lease.
async fn refresh_guards(shared: &Shared) {
    let held: Vec<(String, String)> = shared
        .running
        .lock()
        .expect("running lock")
        .values()
        .flat_map(|r| r.guards.iter().map(|g| (g.clone(), r.holder.clone())))
        .collect();
    let ttl = shared.config.scheduler.lease.0;
    for (key, holder) in held {
        match shared.guards.refresh(&key, &holder, ttl).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(guard = %key, "execution guard lost while running"),
            Err(err) => tracing::warn!(guard = %key, error = %err, "execution guard not refreshed"),
        }
    }
}

async fn renew(shared: &Shared) -> Option<LeaseRenewed> {
    let mut held: Vec<(ax_domain::ids::InstanceId, u32)> = shared
        .running
        .lock()
        .expect("running lock")
        .iter()
        .filter_map(|(id, r)| Some((id.parse().ok()?, r.attempt)))
        .collect();
    held.extend(shared.waiting.lock().expect("waiting lock").iter().filter_map(|(id, attempt)| Some((id.parse().ok()?, *attempt))));
    let request = LeaseRenewal { worker_id: shared.worker_id.clone(), held };
    let body: bytes::Bytes = serde_json::to_vec(&request).expect("renewals serialize").into();
    let answer = tokio::time::timeout(REPORT_TIMEOUT, shared.bus.client.request(shared.bus.names.lease_renewal(), body)).await;
    match answer {
        Ok(Ok(message)) => serde_json::from_slice(&message.payload).ok(),
        _ => None,
    }
}

/// Cancels a running attempt when its instance is cancelled (an operator, or a
/// `replace` blocking strategy): the CANCELLED event names it.
async fn cancellation_loop(shared: Shared, stop: CancellationToken) {
    let subject = format!("{}.event.instance.*.cancelled", shared.bus.names.namespace());
    let mut events = match shared.bus.client.subscribe(subject).await {
        Ok(sub) => sub,
        Err(err) => {
            tracing::warn!(error = %err, "cannot hear cancellations; cancelled attempts run to their end");
            return;
        }
    };
    loop {
        let message = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            message = events.next() => match message { Some(m) => m, None => return },
        };
        let instance = message.headers.as_ref().and_then(|h| h.get("Ax-Instance")).map(|v| v.as_str().to_owned());
        if let Some(instance) = instance
            && let Some(running) = shared.running.lock().expect("running lock").get(&instance)
        {
            tracing::info!(instance_id = %instance, "instance cancelled; stopping its attempt");
            running.cancel.cancel();
        }
    }
}

/// Runs one attempt: guards, RUNNING, the handler only if the scheduler agreed,
/// then the outcome reported while the guards are released.
///
/// The report leaves first: a crash between the handler's end and the report
/// reaching a scheduler makes the attempt run again after its lease, so that
/// window is kept to the report's own send. The guards' release goes out in the
/// same moment; whoever takes the instance or task next does so only after the
/// outcome's commit and a dispatch, by which time they are free (and a guard
/// still held is waited for). The slot and the taken permit are given up as soon
/// as the handler ends: the outcome's round trip to MySQL is not work this worker
/// must wait for.
async fn execute(shared: &Shared, assignment: Assignment, slot: tokio::sync::OwnedSemaphorePermit, taken: tokio::sync::OwnedSemaphorePermit) {
    let key = assignment.instance_id.as_str().to_owned();
    let cancel = CancellationToken::new();
    let holder = format!("{}#{}", shared.worker_id, assignment.attempt);
    let log = shared.logs.logger(&assignment.task, &assignment.instance_id, assignment.attempt, &shared.worker_id, &assignment.trace_id);
    let mut ran = None;
    let (outcome, guards) = match take_guards(shared, &assignment, &holder).await {
        Ok(guards) => {
            shared
                .running
                .lock()
                .expect("running lock")
                .insert(key.clone(), Running { attempt: assignment.attempt, cancel: cancel.clone(), guards: guards.clone(), holder: holder.clone() });
            let outcome = execute_attempt(shared, &assignment, cancel, &log).await;
            drop(slot);
            drop(taken);
            ran = Some(log);
            shared.running.lock().expect("running lock").remove(&key);
            (outcome, guards)
        }
        Err(reason) => (Some(Outcome::Failed { reason, retryable: true }), Vec::new()),
    };
    let release = release_guards(shared, guards, &holder);
    let Some(outcome) = outcome else {
        release.await;
        return;
    };
    if let Some(log) = &ran {
        log.attempt_finished(&outcome);
    }
    let (reply, ()) = tokio::join!(report(shared, &assignment, outcome), release);
    match reply {
        Some(ReportReply::Accepted) => {}
        Some(ReportReply::Rejected { reason }) => {
            tracing::info!(instance_id = %assignment.instance_id, attempt = assignment.attempt, reason = %reason, "outcome refused: the attempt was taken over")
        }
        _ => tracing::warn!(instance_id = %assignment.instance_id, attempt = assignment.attempt, "outcome could not be delivered; the lease will decide"),
    }
}

async fn release_guards(shared: &Shared, guards: Vec<String>, holder: &str) {
    for guard in &guards {
        if let Err(err) = shared.guards.release(guard, holder).await {
            tracing::warn!(error = %err, guard, "guard not released; it expires with the lease");
        }
    }
}

/// The instance guard, and the task guard for a task that allows one running
/// instance. A guard still held (an earlier run not yet gone) is waited for up to
/// a heartbeat; a worker that still cannot take it does not run and says why.
async fn take_guards(shared: &Shared, assignment: &Assignment, holder: &str) -> Result<Vec<String>, String> {
    let names = &shared.bus.names;
    let ttl = shared.config.scheduler.lease.0;
    let mut keys = vec![names.instance_guard(assignment.instance_id.as_str())];
    if assignment.exclusive {
        keys.push(names.task_guard(&assignment.task));
    }
    let patience = Instant::now() + shared.config.worker.heartbeat_interval.0 + Duration::from_secs(1);
    let mut taken: Vec<String> = Vec::new();
    for key in keys {
        loop {
            match shared.guards.acquire(&key, holder, ttl).await {
                Ok(None) => {
                    taken.push(key);
                    break;
                }
                Ok(Some(_)) if Instant::now() < patience => tokio::time::sleep(Duration::from_millis(200)).await,
                Ok(Some(other)) => {
                    for k in &taken {
                        let _ = shared.guards.release(k, holder).await;
                    }
                    return Err(format!("execution guard {key} is held by {other}; an earlier run may still be going"));
                }
                Err(err) => {
                    for k in &taken {
                        let _ = shared.guards.release(k, holder).await;
                    }
                    return Err(format!("cannot take execution guard {key}: {err}"));
                }
            }
        }
    }
    Ok(taken)
}

/// Runs the handler; returns the outcome to report, `None` when there is nothing to say.
async fn execute_attempt(shared: &Shared, assignment: &Assignment, cancel: CancellationToken, log: &crate::logger::TaskLogger) -> Option<Outcome> {
    let instance_id = assignment.instance_id.clone();
    let attempt = assignment.attempt;
    let Some(entry) = shared.handlers.get(&assignment.handler) else {
        let reason = format!("worker {} has no handler {:?}", shared.worker_id, assignment.handler);
        return Some(Outcome::Failed { reason, retryable: true });
    };
    let _pool = match &entry.pool {
        Some(pool) => Some(pool.clone().acquire_owned().await.expect("the semaphore is never closed")),
        None => None,
    };
    if let Some(rate) = &entry.rate {
        let wait = rate.lock().expect("rate lock").book();
        tokio::time::sleep(wait).await;
    }
    match report(shared, assignment, Outcome::Running).await {
        Some(ReportReply::Accepted) => {}
        Some(ReportReply::Rejected { reason }) => {
            tracing::info!(instance_id = %instance_id, attempt, reason = %reason, "scheduler disowned this attempt; not running it");
            return None;
        }
        _ => {
            tracing::warn!(instance_id = %instance_id, attempt, "could not confirm RUNNING; not running it (its lease will expire)");
            return None;
        }
    }
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
        shard: assignment.shard.clone(),
        log: log.clone(),
        link: Some(AttemptLink {
            client: shared.bus.client.clone(),
            subject: shared.bus.names.progress(),
            worker_id: shared.worker_id.clone(),
            records: shared.guards.clone(),
            names: shared.bus.names.clone(),
        }),
    };
    let timeout = Duration::from_secs(assignment.timeout_sec);
    let mut run = entry.handler.run(ctx);
    let finished = tokio::select! {
        result = &mut run => Some(result),
        _ = tokio::time::sleep(timeout) => None,
        _ = cancel.cancelled() => None,
    };
    // Cancelled from outside (shutdown, a lost lease, an operator) rather than by
    // our own timeout: a handler that failed because of it is handed back, not
    // counted as a failed attempt.
    let stopped_from_outside = cancel.is_cancelled();
    Some(match finished {
        Some(Ok(result)) => Outcome::Succeeded { result },
        Some(Err(_)) if stopped_from_outside => {
            tracing::info!(instance_id = %instance_id, attempt, "attempt stopped");
            Outcome::HandedBack
        }
        Some(Err(TaskError::Retry { reason })) => Outcome::Failed { reason, retryable: true },
        Some(Err(TaskError::Abort { reason })) => Outcome::Failed { reason, retryable: false },
        None => {
            // Timed out or told to stop: the handler sees the token and has a grace
            // period to end (shell: SIGTERM, then SIGKILL), then it is dropped.
            cancel.cancel();
            let _ = tokio::time::timeout(STOP_GRACE, &mut run).await;
            if stopped_from_outside {
                // Cancelled by an operator (the hand-back is refused: fine), or by
                // shutdown or a lost lease (handed back at once).
                tracing::info!(instance_id = %instance_id, attempt, "attempt stopped");
                Outcome::HandedBack
            } else {
                Outcome::Failed { reason: format!("timed out after {}s", assignment.timeout_sec), retryable: true }
            }
        }
    })
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
        timeout_sec: assignment.timeout_sec,
        outcome,
    };
    let body: bytes::Bytes = serde_json::to_vec(&report).expect("reports always serialize").into();
    let subject = shared.bus.names.report();
    let mut backoff = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let give_up = tokio::time::Instant::now() + shared.config.scheduler.lease.0;
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

//! Task logs (seed 5.5): `ctx.log.info("…")` in a handler becomes a structured line
//! {task, instance, attempt, worker, trace id, level, message, timestamp} on
//! `ax.log.<task>.<instance>`, which the log sink stores in MySQL.
//!
//! Logging must never slow a handler down, so a log call only stamps the line
//! (sequence number and a strictly growing timestamp) and appends it to its
//! attempt's buffer, under a lock nobody else holds but the shipper for the
//! moment it takes the buffer away. No channel, no wake-up, no reference count per
//! line. One shipper per worker is told when a buffer gets its first line (and
//! when the worker's lines pass half of `AX_WORKER_LOG_BUFFER`); it lingers up to
//! `AX_WORKER_LOG_FLUSH` so lines share batches, takes every attempt's buffer, and
//! publishes each to JetStream, one batch at a time so an attempt's lines reach
//! the stream in order. When NATS is slow or away the shipper retries and the
//! buffers fill; at `AX_WORKER_LOG_BUFFER` lines new ones are dropped and counted
//! instead of blocking, and the next line that fits is preceded by a warning that
//! says how many were lost.
//!
//! ```text
//! handler ──push──▶ [attempt buffer] ◀──take── shipper ──publish+ack──▶ AX_LOGS
//!                   (lines of loggers that are gone wait in the hub's orphans)
//! ```
//!
//! The shipper runs on a thread of its own (with a single-threaded runtime): a
//! handler that logs in a tight loop without yielding would otherwise keep a
//! shipper woken onto the handler's own worker thread from ever running.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ax_bus::headers;
use ax_bus::Bus;
use ax_domain::ids::{InstanceId, TraceId, WorkerId};
use ax_domain::log::{clip_message, LogBatch, LogLevel, LogLine, LogStream, LOG_SCHEMA_VERSION, MAX_BATCH_LINES};
use ax_domain::retry::ExponentialBackoff;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::metrics;

/// A published batch stays well below NATS's default 1 MiB message limit.
const MAX_BATCH_BYTES: usize = 512 * 1024;
/// How long a closing shipper keeps trying to publish what it still holds.
const CLOSE_DEADLINE: Duration = Duration::from_secs(10);

/// What every line of one attempt shares.
#[derive(Debug, PartialEq, Eq)]
struct AttemptKey {
    task: String,
    instance_id: InstanceId,
    attempt: u32,
    worker_id: WorkerId,
    trace_id: TraceId,
}

/// Counts of the shipper, for metrics and benchmarks.
#[derive(Debug, Default)]
pub struct ShipperStats {
    /// Lines the shipper took from the buffers.
    pub accepted: AtomicU64,
    /// Lines dropped because the buffers were full, shutdown came first, or NATS
    /// could not be reached before the shutdown deadline.
    pub dropped: AtomicU64,
    /// Lines JetStream acknowledged.
    pub published: AtomicU64,
    /// Batches JetStream acknowledged.
    pub batches: AtomicU64,
}

/// What loggers and the shipper share.
struct Hub {
    /// Every attempt logger alive; the shipper takes their buffers.
    live: Mutex<Vec<Weak<AttemptLog>>>,
    /// Lines of loggers dropped before the shipper took them.
    orphans: Mutex<Vec<(Arc<AttemptKey>, Vec<LogLine>)>>,
    /// Lines waiting in all buffers together, against `capacity`.
    buffered: AtomicUsize,
    capacity: usize,
    /// Rung when the buffers get a first line: the shipper starts lingering.
    first_line: Notify,
    /// Rung when `buffered` passes half: the shipper stops lingering.
    pressure: Notify,
    /// Set once the shipper has stopped: lines logged after are dropped.
    closed: AtomicBool,
    stats: ShipperStats,
}

impl Hub {
    /// Takes every buffered line: (attempt, lines) in no particular order across
    /// attempts, in order within one.
    fn take_all(&self) -> Vec<(Arc<AttemptKey>, Vec<LogLine>)> {
        let mut taken = std::mem::take(&mut *self.orphans.lock().unwrap_or_else(|p| p.into_inner()));
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|weak| match weak.upgrade() {
            Some(log) => {
                let lines = std::mem::take(&mut log.state.lock().unwrap_or_else(|p| p.into_inner()).lines);
                if !lines.is_empty() {
                    taken.push((log.key.clone(), lines));
                }
                true
            }
            None => false,
        });
        drop(live);
        let count: usize = taken.iter().map(|(_, lines)| lines.len()).sum();
        self.buffered.fetch_sub(count, Ordering::AcqRel);
        self.stats.accepted.fetch_add(count as u64, Ordering::Relaxed);
        taken
    }
}

/// A worker's log shipper: makes [`TaskLogger`]s and publishes what they log.
/// Cheap to clone.
#[derive(Clone)]
pub struct LogShipper {
    hub: Arc<Hub>,
    closing: CancellationToken,
    /// Resolves when the shipper thread has published what it could and stopped.
    done: Arc<tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>>,
}

impl LogShipper {
    /// Starts the shipper thread on `bus`, holding up to `buffer` lines and
    /// lingering up to `flush` for a batch to fill.
    pub fn start(bus: Bus, buffer: usize, flush: Duration) -> Self {
        let hub = Arc::new(Hub {
            live: Mutex::default(),
            orphans: Mutex::default(),
            buffered: AtomicUsize::new(0),
            capacity: buffer.max(2),
            first_line: Notify::new(),
            pressure: Notify::new(),
            closed: AtomicBool::new(false),
            stats: ShipperStats::default(),
        });
        let closing = CancellationToken::new();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let shipping = ship(hub.clone(), bus, flush, closing.clone());
        let thread = std::thread::Builder::new().name("ax-log-shipper".into()).spawn(move || {
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(shipping),
                Err(err) => tracing::error!(error = %err, "cannot start the log shipper's runtime; task logs are dropped"),
            }
            let _ = done_tx.send(());
        });
        if let Err(err) = thread {
            tracing::error!(error = %err, "cannot start the log shipper thread; task logs are dropped");
            hub.closed.store(true, Ordering::Release);
        }
        Self { hub, closing, done: Arc::new(tokio::sync::Mutex::new(Some(done_rx))) }
    }

    /// A logger for one attempt of one instance on this worker.
    pub fn logger(&self, task: &str, instance_id: &InstanceId, attempt: u32, worker_id: &WorkerId, trace_id: &TraceId) -> TaskLogger {
        let key = AttemptKey {
            task: task.to_owned(),
            instance_id: instance_id.clone(),
            attempt,
            worker_id: worker_id.clone(),
            trace_id: trace_id.clone(),
        };
        let log = Arc::new(AttemptLog { key: Arc::new(key), hub: self.hub.clone(), state: Mutex::new(State::default()) });
        let mut live = self.hub.live.lock().unwrap_or_else(|p| p.into_inner());
        live.push(Arc::downgrade(&log));
        TaskLogger { inner: Some(log) }
    }

    pub fn stats(&self) -> &ShipperStats {
        &self.hub.stats
    }

    /// Lines logged and not yet taken by the shipper.
    pub fn pending_lines(&self) -> usize {
        self.hub.buffered.load(Ordering::Acquire)
    }

    /// Publishes what is buffered (for up to ten seconds) and stops. Lines logged
    /// afterwards are dropped and counted.
    pub async fn close(&self) {
        self.closing.cancel();
        if let Some(done) = self.done.lock().await.take() {
            let _ = done.await;
        }
    }
}

/// One attempt's sequence, clock and unshipped lines.
#[derive(Default)]
struct State {
    seq: u64,
    last_micros: i64,
    lines: Vec<LogLine>,
    /// Lines dropped since the last drop notice got in.
    unreported_drops: u64,
}

struct AttemptLog {
    key: Arc<AttemptKey>,
    hub: Arc<Hub>,
    state: Mutex<State>,
}

impl Drop for AttemptLog {
    /// The attempt is over: what the shipper has not taken yet waits for it.
    fn drop(&mut self) {
        let lines = std::mem::take(&mut self.state.get_mut().unwrap_or_else(|p| p.into_inner()).lines);
        if !lines.is_empty() {
            self.hub.orphans.lock().unwrap_or_else(|p| p.into_inner()).push((self.key.clone(), lines));
        }
    }
}

/// The structured logger a handler gets as `ctx.log`. Every call returns at once;
/// see the module documentation for what happens when lines come faster than
/// NATS takes them.
#[derive(Clone, Default)]
pub struct TaskLogger {
    inner: Option<Arc<AttemptLog>>,
}

impl std::fmt::Debug for TaskLogger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(inner) => write!(f, "TaskLogger({} attempt {})", inner.key.instance_id, inner.key.attempt),
            None => f.write_str("TaskLogger(disabled)"),
        }
    }
}

impl TaskLogger {
    /// A logger whose lines go nowhere (a context built outside a worker).
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    pub fn trace(&self, message: impl Into<String>) {
        self.log(LogLevel::Trace, message);
    }
    pub fn debug(&self, message: impl Into<String>) {
        self.log(LogLevel::Debug, message);
    }
    pub fn info(&self, message: impl Into<String>) {
        self.log(LogLevel::Info, message);
    }
    pub fn warn(&self, message: impl Into<String>) {
        self.log(LogLevel::Warn, message);
    }
    pub fn error(&self, message: impl Into<String>) {
        self.log(LogLevel::Error, message);
    }

    pub fn log(&self, level: LogLevel, message: impl Into<String>) {
        self.emit(level, LogStream::Handler, message.into());
    }

    /// Lines this attempt lost to full buffers and has not reported yet.
    pub fn dropped(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.state.lock().unwrap_or_else(|p| p.into_inner()).unreported_drops)
    }

    /// The worker's note that an attempt began, so a log read across attempts and
    /// workers shows where each starts.
    pub(crate) fn attempt_started(&self) {
        if let Some(inner) = &self.inner {
            let k = &inner.key;
            let note = format!("attempt {} started on worker {} (trace {})", k.attempt, k.worker_id, k.trace_id);
            self.emit(LogLevel::Info, LogStream::Worker, note);
        }
    }

    /// The worker's note of how an attempt ended.
    pub(crate) fn attempt_finished(&self, outcome: &ax_domain::protocol::Outcome) {
        use ax_domain::protocol::Outcome;
        let (level, note) = match outcome {
            Outcome::Succeeded { .. } => (LogLevel::Info, "attempt succeeded".to_owned()),
            Outcome::Failed { reason, retryable: true } => (LogLevel::Error, format!("attempt failed (may retry): {reason}")),
            Outcome::Failed { reason, retryable: false } => (LogLevel::Error, format!("attempt failed (no retry): {reason}")),
            Outcome::HandedBack => (LogLevel::Warn, "attempt handed back".to_owned()),
            Outcome::Running => return,
        };
        self.emit(level, LogStream::Worker, note);
    }

    /// A line from somewhere other than the handler's own calls (a shell command's
    /// output, the worker's notes about the attempt).
    pub(crate) fn emit(&self, level: LogLevel, stream: LogStream, message: String) {
        let Some(inner) = &self.inner else { return };
        let hub = &inner.hub;
        let message = clip_message(message);
        let mut state = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        // Sequence numbers count dropped lines too: a gap shows where they were.
        state.seq += 1;
        if hub.closed.load(Ordering::Acquire) || !reserve(hub, 1) {
            state.unreported_drops += 1;
            hub.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if state.unreported_drops > 0 && reserve(hub, 1) {
            let notice = format!("{} log lines dropped: the worker's log buffer was full", state.unreported_drops);
            state.unreported_drops = 0;
            let seq = state.seq;
            push(&mut state, seq, LogLevel::Warn, LogStream::Worker, notice);
            state.seq += 1;
        }
        let seq = state.seq;
        push(&mut state, seq, level, stream, message);
    }
}

/// Claims room for `n` lines in the worker's buffers; rings the shipper when they
/// were empty (a first line) or pass half full.
fn reserve(hub: &Hub, n: usize) -> bool {
    let before = hub.buffered.fetch_add(n, Ordering::AcqRel);
    if before + n > hub.capacity {
        hub.buffered.fetch_sub(n, Ordering::AcqRel);
        return false;
    }
    if before == 0 {
        hub.first_line.notify_one();
    }
    if before < hub.capacity / 2 && before + n >= hub.capacity / 2 {
        hub.pressure.notify_one();
    }
    true
}

fn push(state: &mut State, seq: u64, level: LogLevel, stream: LogStream, message: String) {
    // Strictly growing, so (ts, seq) orders the attempt's lines like seq does.
    let micros = chrono::Utc::now().timestamp_micros().max(state.last_micros + 1);
    state.last_micros = micros;
    let ts = chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default();
    state.lines.push(LogLine { seq, ts, level, stream, message });
}

/// The shipper: waits for lines, lingers, takes every buffer, publishes in order.
async fn ship(hub: Arc<Hub>, bus: Bus, flush: Duration, closing: CancellationToken) {
    let mut reported_drops = 0;
    loop {
        // Lines left from the last round mean no wake-up is coming for them.
        if hub.buffered.load(Ordering::Acquire) == 0 {
            tokio::select! {
                biased;
                _ = closing.cancelled() => break,
                _ = hub.first_line.notified() => {}
            }
        }
        // Linger so a trickle of lines shares batches, unless the buffers pass half.
        if hub.buffered.load(Ordering::Acquire) < hub.capacity / 2 {
            tokio::select! {
                biased;
                _ = closing.cancelled() => {}
                _ = hub.pressure.notified() => {}
                _ = tokio::time::sleep(flush) => {}
            }
        }
        publish_round(&bus, hub.take_all(), &closing, None, &hub.stats).await;
        // Loggers count drops with an atomic; the metric moves here, off their path.
        let dropped = hub.stats.dropped.load(Ordering::Relaxed);
        ::metrics::counter!(metrics::LOG_LINES_DROPPED).increment(dropped - reported_drops);
        reported_drops = dropped;
        if closing.is_cancelled() {
            break;
        }
    }
    // Closing: whatever is still buffered goes out, within the deadline; what is
    // logged from now on is dropped and counted.
    hub.closed.store(true, Ordering::Release);
    let give_up = tokio::time::Instant::now() + CLOSE_DEADLINE;
    publish_round(&bus, hub.take_all(), &closing, Some(give_up), &hub.stats).await;
    ::metrics::counter!(metrics::LOG_LINES_DROPPED).increment(hub.stats.dropped.load(Ordering::Relaxed) - reported_drops);
}

/// Publishes what was taken: one batch per attempt and size limit, each retried
/// until JetStream acknowledges it (or, when closing, until `give_up`).
async fn publish_round(
    bus: &Bus,
    taken: Vec<(Arc<AttemptKey>, Vec<LogLine>)>,
    closing: &CancellationToken,
    give_up: Option<tokio::time::Instant>,
    stats: &ShipperStats,
) {
    for batch in batches(taken) {
        let lines = batch.lines.len() as u64;
        let mut backoff = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let started = std::time::Instant::now();
            match publish(bus, &batch).await {
                Ok(()) => {
                    ::metrics::histogram!(metrics::LOG_PUBLISH_SECONDS).record(started.elapsed().as_secs_f64());
                    ::metrics::counter!(metrics::LOG_LINES).increment(lines);
                    ::metrics::counter!(metrics::LOG_BATCHES).increment(1);
                    stats.published.fetch_add(lines, Ordering::Relaxed);
                    stats.batches.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(err) => {
                    ::metrics::counter!(metrics::LOG_PUBLISH_FAILURES).increment(1);
                    let delay = backoff.next_delay();
                    let past_deadline = give_up.is_some_and(|at| tokio::time::Instant::now() + delay > at);
                    if past_deadline {
                        tracing::warn!(instance_id = %batch.instance_id, lines, error = %err, "log lines not published before shutdown; dropped");
                        stats.dropped.fetch_add(lines, Ordering::Relaxed);
                        break;
                    }
                    tracing::debug!(instance_id = %batch.instance_id, error = %err, retry_in = ?delay, "publishing log lines failed; retrying");
                    if give_up.is_none() {
                        // Closing cuts the wait short; the final round retries until its deadline.
                        tokio::select! { _ = closing.cancelled() => {}, _ = tokio::time::sleep(delay) => {} }
                    } else {
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        }
    }
}

/// Cuts each attempt's lines to the line and byte limits of a batch.
fn batches(groups: Vec<(Arc<AttemptKey>, Vec<LogLine>)>) -> Vec<LogBatch> {
    let mut out = Vec::new();
    for (key, lines) in groups {
        let mut current: Vec<LogLine> = Vec::new();
        let mut bytes = 0;
        for line in lines {
            let size = line.message.len() + 48;
            if !current.is_empty() && (current.len() >= MAX_BATCH_LINES || bytes + size > MAX_BATCH_BYTES) {
                out.push(batch_of(&key, std::mem::take(&mut current)));
                bytes = 0;
            }
            bytes += size;
            current.push(line);
        }
        if !current.is_empty() {
            out.push(batch_of(&key, current));
        }
    }
    out
}

fn batch_of(key: &AttemptKey, lines: Vec<LogLine>) -> LogBatch {
    LogBatch {
        v: LOG_SCHEMA_VERSION,
        task: key.task.clone(),
        instance_id: key.instance_id.clone(),
        attempt: key.attempt,
        worker_id: key.worker_id.clone(),
        trace_id: key.trace_id.clone(),
        lines,
    }
}

#[derive(Debug, thiserror::Error)]
enum PublishError {
    #[error("publish failed: {0}")]
    Publish(String),
    #[error("no acknowledgement: {0}")]
    Ack(String),
}

/// One batch, acknowledged. The message id is the batch's first line, so a retry
/// of a batch JetStream already stored is dropped by its duplicate window.
async fn publish(bus: &Bus, batch: &LogBatch) -> Result<(), PublishError> {
    let first_seq = batch.lines.first().map_or(0, |l| l.seq);
    let msg_id = format!("{}.{}.{}.{first_seq}", batch.instance_id, batch.attempt, batch.worker_id);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id.as_str());
    headers.insert(headers::TASK, batch.task.as_str());
    headers.insert(headers::INSTANCE, batch.instance_id.as_str());
    headers.insert(headers::ATTEMPT, batch.attempt.to_string().as_str());
    headers.insert(headers::CONTENT_TYPE, headers::CBOR);
    let subject = bus.names.log(&batch.task, batch.instance_id.as_str());
    let ack = bus
        .jetstream
        .publish_with_headers(subject, headers, batch.encode().into())
        .await
        .map_err(|e| PublishError::Publish(e.to_string()))?;
    ack.await.map_err(|e| PublishError::Ack(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(capacity: usize) -> Arc<Hub> {
        Arc::new(Hub {
            live: Mutex::default(),
            orphans: Mutex::default(),
            buffered: AtomicUsize::new(0),
            capacity,
            first_line: Notify::new(),
            pressure: Notify::new(),
            closed: AtomicBool::new(false),
            stats: ShipperStats::default(),
        })
    }

    fn logger(hub: &Arc<Hub>) -> TaskLogger {
        let key = AttemptKey {
            task: "t".into(),
            instance_id: InstanceId::generate(),
            attempt: 1,
            worker_id: "w1".parse().unwrap(),
            trace_id: TraceId::generate(),
        };
        let log = Arc::new(AttemptLog { key: Arc::new(key), hub: hub.clone(), state: Mutex::new(State::default()) });
        hub.live.lock().unwrap().push(Arc::downgrade(&log));
        TaskLogger { inner: Some(log) }
    }

    fn messages(taken: &[(Arc<AttemptKey>, Vec<LogLine>)]) -> Vec<(u64, String)> {
        taken.iter().flat_map(|(_, lines)| lines.iter().map(|l| (l.seq, l.message.clone()))).collect()
    }

    #[test]
    fn lines_are_cut_to_the_batch_limits() {
        let h = hub(1000);
        let log = logger(&h);
        let big = "x".repeat(30 * 1024);
        for _ in 0..40 {
            log.info(big.clone());
        }
        let out = batches(h.take_all());
        assert_eq!(out.iter().map(|b| b.lines.len()).collect::<Vec<_>>(), [17, 17, 6], "512 KiB per batch");
        assert_eq!(out[0].lines[0].seq, 1);
    }

    #[test]
    fn a_full_buffer_drops_and_the_next_line_that_fits_reports_it() {
        let h = hub(2);
        let log = logger(&h);
        for i in 0..5 {
            log.info(format!("line {i}"));
        }
        assert_eq!(log.dropped(), 3);
        assert_eq!(h.stats.dropped.load(Ordering::Relaxed), 3);
        let first = h.take_all();
        assert_eq!(messages(&first), [(1, "line 0".to_owned()), (2, "line 1".to_owned())]);
        let lines = &first[0].1;
        assert!(lines[1].ts > lines[0].ts, "timestamps grow strictly");
        log.info("after");
        let second = h.take_all();
        let got = messages(&second);
        assert_eq!(got.len(), 2);
        assert!(got[0].1.starts_with("3 log lines dropped"), "{got:?}");
        assert_eq!(second[0].1[0].stream, LogStream::Worker);
        assert_eq!(got[1].1, "after");
        assert!(got[0].0 > 5 && got[1].0 > got[0].0, "sequence numbers leave a gap where lines were dropped: {got:?}");
        assert_eq!(log.dropped(), 0);
        assert_eq!(h.buffered.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lines_of_a_finished_attempt_are_still_shipped() {
        let h = hub(100);
        let log = logger(&h);
        log.info("last words");
        drop(log);
        let taken = h.take_all();
        assert_eq!(messages(&taken), [(1, "last words".to_owned())]);
        assert!(h.live.lock().unwrap().is_empty(), "the dead logger is forgotten");
    }
}

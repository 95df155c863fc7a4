//! Task logs (seed 5.5): `ctx.log.info("…")` in a handler becomes a structured line
//! {task, instance, attempt, worker, trace id, level, message, timestamp} on
//! `ax.log.<task>.<instance>`, which the log sink stores in MySQL.
//!
//! Logging must never slow a handler down, so a log call only stamps the line
//! (sequence number and a strictly growing timestamp, under a short lock) and
//! hands it to a bounded channel with `try_send`. One shipper task per worker
//! empties the channel in batches: after the first line it lingers up to
//! `AX_WORKER_LOG_FLUSH` *without* listening to the channel (so a handler logging
//! in a tight loop never pays for waking it line by line), unless the channel
//! passes half full; then it drains what is there, groups lines by attempt, and
//! publishes each group to JetStream, one batch at a time so a worker's lines
//! reach the stream in order. When NATS is slow or away the shipper retries and
//! the channel fills; then new lines are dropped and counted instead of blocking,
//! and the next line that gets through is preceded by a warning that says how
//! many were lost.
//!
//! The shipper runs on a thread of its own (with a single-threaded runtime): a
//! handler that logs in a tight loop without yielding would otherwise keep the
//! shipper, woken onto the handler's own worker thread, from ever running, and
//! the buffer would only fill.
//!
//! ```text
//! handler ──try_send──▶ [bounded channel] ──recv_many──▶ shipper ──publish+ack──▶ AX_LOGS
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_bus::headers;
use ax_bus::Bus;
use ax_domain::ids::{InstanceId, TraceId, WorkerId};
use ax_domain::log::{clip_message, LogBatch, LogLevel, LogLine, LogStream, LOG_SCHEMA_VERSION, MAX_BATCH_LINES};
use ax_domain::retry::ExponentialBackoff;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::metrics;

/// A published batch stays well below NATS's default 1 MiB message limit.
const MAX_BATCH_BYTES: usize = 512 * 1024;
/// Lines taken from the channel per publishing round.
const MAX_ROUND_LINES: usize = 16_384;
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

struct Entry {
    key: Arc<AttemptKey>,
    line: LogLine,
}

/// Counts kept with atomics on the hot path and reported by the shipper.
#[derive(Debug, Default)]
pub struct ShipperStats {
    /// Lines handed to the shipper.
    pub accepted: AtomicU64,
    /// Lines dropped because the buffer was full (or the shipper had stopped).
    pub dropped: AtomicU64,
    /// Lines JetStream acknowledged.
    pub published: AtomicU64,
    /// Batches JetStream acknowledged.
    pub batches: AtomicU64,
}

/// A worker's log shipper: makes [`TaskLogger`]s and publishes what they log.
/// Cheap to clone.
#[derive(Clone)]
pub struct LogShipper {
    tx: mpsc::Sender<Entry>,
    /// Rung by a logger when the channel passes half full: the shipper stops lingering.
    pressure: Arc<Notify>,
    capacity: usize,
    closing: CancellationToken,
    /// Resolves when the shipper thread has published what it could and stopped.
    done: Arc<tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>>,
    stats: Arc<ShipperStats>,
}

impl LogShipper {
    /// Starts the shipper task on `bus`, holding up to `buffer` lines and lingering
    /// up to `flush` for a batch to fill.
    pub fn start(bus: Bus, buffer: usize, flush: Duration) -> Self {
        let capacity = buffer.max(2);
        let (tx, rx) = mpsc::channel(capacity);
        let closing = CancellationToken::new();
        let stats = Arc::new(ShipperStats::default());
        let pressure = Arc::new(Notify::new());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let shipping = ship(rx, bus, flush, pressure.clone(), closing.clone(), stats.clone());
        let thread = std::thread::Builder::new().name("ax-log-shipper".into()).spawn(move || {
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(shipping),
                Err(err) => tracing::error!(error = %err, "cannot start the log shipper's runtime; task logs are dropped"),
            }
            let _ = done_tx.send(());
        });
        if let Err(err) = thread {
            tracing::error!(error = %err, "cannot start the log shipper thread; task logs are dropped");
        }
        Self { tx, pressure, capacity, closing, done: Arc::new(tokio::sync::Mutex::new(Some(done_rx))), stats }
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
        TaskLogger {
            inner: Some(Arc::new(AttemptLog {
                key: Arc::new(key),
                tx: self.tx.clone(),
                pressure: self.pressure.clone(),
                half: self.capacity / 2,
                clock: Mutex::new(Clock { seq: 0, last_micros: 0 }),
                unreported_drops: AtomicU64::new(0),
                stats: self.stats.clone(),
            })),
        }
    }

    pub fn stats(&self) -> &ShipperStats {
        &self.stats
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

/// Sequence number and timestamp of the last line of an attempt.
struct Clock {
    seq: u64,
    last_micros: i64,
}

struct AttemptLog {
    key: Arc<AttemptKey>,
    tx: mpsc::Sender<Entry>,
    pressure: Arc<Notify>,
    /// Free slots below which the shipper is rung.
    half: usize,
    clock: Mutex<Clock>,
    /// Lines dropped since the last drop notice got through.
    unreported_drops: AtomicU64,
    stats: Arc<ShipperStats>,
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

    /// Lines this attempt lost to a full buffer so far.
    pub fn dropped(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.unreported_drops.load(Ordering::Relaxed))
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
        let message = clip_message(message);
        // The lock makes sequence, timestamp and channel order agree when several
        // tasks of one handler log at once; it is held for a few dozen nanoseconds.
        let mut clock = inner.clock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let drops = inner.unreported_drops.load(Ordering::Relaxed);
        // The notice needs a slot and the line another; no formatting while full.
        if drops > 0 && inner.tx.capacity() >= 2 {
            let notice = format!("{drops} log lines dropped: the worker's log buffer was full");
            if inner.send(&mut clock, LogLevel::Warn, LogStream::Worker, notice) {
                inner.unreported_drops.fetch_sub(drops, Ordering::Relaxed);
            }
        }
        if !inner.send(&mut clock, level, stream, message) {
            inner.unreported_drops.fetch_add(1, Ordering::Relaxed);
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl AttemptLog {
    /// Stamps and hands over one line; `false` if it was dropped.
    fn send(&self, clock: &mut Clock, level: LogLevel, stream: LogStream, message: String) -> bool {
        clock.seq += 1;
        // Strictly growing, so (ts, seq) orders the attempt's lines like seq does.
        let micros = chrono::Utc::now().timestamp_micros().max(clock.last_micros + 1);
        clock.last_micros = micros;
        let ts = chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default();
        let entry = Entry { key: self.key.clone(), line: LogLine { seq: clock.seq, ts, level, stream, message } };
        match self.tx.try_send(entry) {
            Ok(()) => {
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                if self.tx.capacity() < self.half {
                    self.pressure.notify_one();
                }
                true
            }
            // Counted by the caller: a drop notice that does not fit is not a lost line.
            Err(_) => false,
        }
    }
}

/// The shipper task: batches, groups by attempt, publishes in order.
async fn ship(
    mut rx: mpsc::Receiver<Entry>,
    bus: Bus,
    flush: Duration,
    pressure: Arc<Notify>,
    closing: CancellationToken,
    stats: Arc<ShipperStats>,
) {
    let mut buffer: Vec<Entry> = Vec::with_capacity(MAX_ROUND_LINES);
    let mut reported_drops = 0;
    loop {
        let open = tokio::select! {
            biased;
            _ = closing.cancelled() => false,
            n = rx.recv_many(&mut buffer, MAX_ROUND_LINES) => n > 0,
        };
        if !open {
            break;
        }
        // Linger so a trickle of lines shares batches, without polling the channel:
        // a waiting receiver would be woken by every single line.
        if buffer.len() < MAX_ROUND_LINES {
            tokio::select! {
                biased;
                _ = closing.cancelled() => {}
                _ = pressure.notified() => {}
                _ = tokio::time::sleep(flush) => {}
            }
        }
        while buffer.len() < MAX_ROUND_LINES {
            match rx.try_recv() {
                Ok(entry) => buffer.push(entry),
                Err(_) => break,
            }
        }
        publish_round(&bus, &mut buffer, &closing, None, &stats).await;
        // Loggers count drops with an atomic; the metric moves here, off their path.
        let dropped = stats.dropped.load(Ordering::Relaxed);
        ::metrics::counter!(metrics::LOG_LINES_DROPPED).increment(dropped - reported_drops);
        reported_drops = dropped;
    }
    // Closing: whatever is still in the channel goes out, within the deadline.
    let give_up = tokio::time::Instant::now() + CLOSE_DEADLINE;
    rx.close();
    while let Ok(entry) = rx.try_recv() {
        buffer.push(entry);
    }
    publish_round(&bus, &mut buffer, &closing, Some(give_up), &stats).await;
    ::metrics::counter!(metrics::LOG_LINES_DROPPED).increment(stats.dropped.load(Ordering::Relaxed) - reported_drops);
}

/// Publishes and empties `buffer`: one batch per attempt and size limit, each
/// retried until JetStream acknowledges it (or, when closing, until `give_up`).
async fn publish_round(bus: &Bus, buffer: &mut Vec<Entry>, closing: &CancellationToken, give_up: Option<tokio::time::Instant>, stats: &ShipperStats) {
    if buffer.is_empty() {
        return;
    }
    for batch in batches(std::mem::take(buffer)) {
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

/// Groups entries by attempt (in order of first appearance) and cuts each group
/// to the line and byte limits.
fn batches(entries: Vec<Entry>) -> Vec<LogBatch> {
    let mut groups: Vec<(Arc<AttemptKey>, Vec<LogLine>)> = Vec::new();
    for entry in entries {
        match groups.iter_mut().find(|(key, _)| Arc::ptr_eq(key, &entry.key) || **key == *entry.key) {
            Some((_, lines)) => lines.push(entry.line),
            None => groups.push((entry.key, vec![entry.line])),
        }
    }
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

    fn key(instance: &InstanceId) -> Arc<AttemptKey> {
        Arc::new(AttemptKey {
            task: "t".into(),
            instance_id: instance.clone(),
            attempt: 1,
            worker_id: "w1".parse().unwrap(),
            trace_id: TraceId::generate(),
        })
    }

    fn entry(key: &Arc<AttemptKey>, seq: u64, message: &str) -> Entry {
        Entry {
            key: key.clone(),
            line: LogLine { seq, ts: ax_domain::now(), level: LogLevel::Info, stream: LogStream::Handler, message: message.into() },
        }
    }

    #[test]
    fn lines_are_grouped_by_attempt_in_order_and_cut_to_size() {
        let (a, b) = (key(&InstanceId::generate()), key(&InstanceId::generate()));
        let entries = vec![entry(&a, 1, "a1"), entry(&b, 1, "b1"), entry(&a, 2, "a2")];
        let out = batches(entries);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].lines.iter().map(|l| l.seq).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(out[1].instance_id, b.instance_id);

        let big = "x".repeat(200 * 1024);
        let out = batches((1..=5).map(|seq| entry(&a, seq, &big)).collect());
        assert_eq!(out.len(), 3, "512 KiB per batch");
        assert_eq!(out.iter().map(|b| b.lines.len()).sum::<usize>(), 5);
    }

    #[tokio::test]
    async fn a_full_buffer_drops_and_the_next_line_reports_it() {
        let (tx, mut rx) = mpsc::channel(2);
        let logger = TaskLogger {
            inner: Some(Arc::new(AttemptLog {
                key: key(&InstanceId::generate()),
                tx,
                pressure: Arc::new(Notify::new()),
                half: 1,
                clock: Mutex::new(Clock { seq: 0, last_micros: 0 }),
                unreported_drops: AtomicU64::new(0),
                stats: Arc::default(),
            })),
        };
        for i in 0..5 {
            logger.info(format!("line {i}"));
        }
        assert_eq!(logger.dropped(), 3);
        let first = rx.recv().await.unwrap().line;
        let second = rx.recv().await.unwrap().line;
        assert_eq!((first.seq, second.seq), (1, 2));
        assert!(second.ts > first.ts, "timestamps grow strictly");
        logger.info("after");
        let notice = rx.recv().await.unwrap().line;
        assert_eq!(notice.stream, LogStream::Worker);
        assert!(notice.message.starts_with("3 log lines dropped"), "{}", notice.message);
        assert_eq!(rx.recv().await.unwrap().line.message, "after");
        assert_eq!(logger.dropped(), 0);
    }
}

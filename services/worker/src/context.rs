//! What a handler sees and returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ax_domain::ids::{InstanceId, TraceId, WorkerId};
use ax_domain::protocol::Progress;
use ax_domain::shard::ShardOf;
use tokio_util::sync::CancellationToken;

use crate::logger::TaskLogger;

/// One attempt of one instance, as handed to a handler.
#[derive(Debug, Clone)]
pub struct TaskContext {
    pub instance_id: InstanceId,
    pub task: String,
    pub task_version: u32,
    pub attempt: u32,
    pub params: serde_json::Value,
    pub payload_version: Option<u32>,
    /// Handler settings from the definition's `execution.config`.
    pub config: serde_json::Value,
    pub trace_id: TraceId,
    /// Cancelled when the attempt must stop (timeout, cancel, lost lease, shutdown
    /// past its deadline). Long handlers should watch it.
    pub cancellation: CancellationToken,
    /// Which shard of a sharded or broadcast firing this is (0-based index, total,
    /// and the firing's instance id); `None` when the task is not sharded.
    pub shard: Option<ShardOf>,
    /// Structured task log: `ctx.log.info("…")`. Lines go to `AX_LOGS` in batches
    /// and are read back with `ax logs <instance>`; a call never blocks.
    pub log: TaskLogger,
    pub(crate) link: Option<AttemptLink>,
}

/// What a context reaches outside its handler in a worker: the progress subject and
/// the side-effect records of `once`. A detached context has none.
#[derive(Clone)]
pub(crate) struct AttemptLink {
    pub client: async_nats::Client,
    pub subject: String,
    pub worker_id: WorkerId,
    pub records: ax_queue::ExecutionGuards,
    pub names: ax_domain::subjects::Names,
}

/// How long `once` remembers a side effect: longer than any retry schedule.
const SIDE_EFFECT_MEMORY: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

impl std::fmt::Debug for AttemptLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AttemptLink")
    }
}

impl TaskContext {
    /// Reports progress (0-100 and a message), shown by `GET /api/v1/instances/{id}`.
    /// Fire and forget: progress never slows or fails the handler.
    pub async fn progress(&self, percent: u8, message: impl Into<String>) {
        let Some(link) = &self.link else { return };
        let progress = Progress {
            instance_id: self.instance_id.clone(),
            attempt: self.attempt,
            worker_id: link.worker_id.clone(),
            percent: percent.min(100),
            message: message.into(),
        };
        if let Ok(body) = serde_json::to_vec(&progress) {
            let _ = link.client.publish(link.subject.clone(), body.into()).await;
        }
    }

    /// A key that names this instance's side effect `scope` across its attempts:
    /// use it as the idempotency key of a downstream call or a unique key in your
    /// own table, so a retried attempt does not repeat work the first one did
    /// (seed 4.1: the scheduler retries, the business stays idempotent).
    pub fn idempotency_key(&self, scope: &str) -> String {
        format!("{}:{scope}", self.instance_id)
    }

    /// Runs the side effect `scope` of this instance at most once across its
    /// attempts: once it has succeeded, later attempts get its recorded result
    /// without running it again. A failed run records nothing.
    ///
    /// The record lives in Redis for seven days, so a Redis flush forgets it, and a
    /// worker that dies between the effect and the record runs it again on the
    /// next attempt. Where that must never happen, also pass
    /// [`TaskContext::idempotency_key`] to the downstream system.
    ///
    /// # Errors
    /// The side effect's own error, or a retryable one when the record cannot be
    /// read (running blind could repeat the effect).
    pub async fn once<F, Fut>(&self, scope: &str, run: F) -> Result<serde_json::Value, TaskError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<serde_json::Value, TaskError>>,
    {
        let Some(link) = &self.link else { return run().await };
        let key = link.names.side_effect(self.instance_id.as_str(), scope);
        match link.records.recall(&key).await {
            Ok(Some(recorded)) => {
                return serde_json::from_str(&recorded)
                    .map_err(|e| TaskError::abort(format!("side effect {scope:?} has an unreadable record: {e}")));
            }
            Ok(None) => {}
            Err(err) => return Err(TaskError::retry(format!("cannot check whether side effect {scope:?} already ran: {err}"))),
        }
        let result = run().await?;
        if let Err(err) = link.records.remember(&key, &result.to_string(), SIDE_EFFECT_MEMORY).await {
            tracing::warn!(instance_id = %self.instance_id, scope, error = %err, "side effect ran but could not be recorded; a retry would run it again");
        }
        Ok(result)
    }

    /// A context for calling a handler outside a worker (tests, tools).
    pub fn detached(instance_id: InstanceId, task: &str, params: serde_json::Value, config: serde_json::Value) -> Self {
        Self {
            instance_id,
            task: task.to_owned(),
            task_version: 1,
            attempt: 1,
            params,
            payload_version: None,
            config,
            trace_id: TraceId::generate(),
            cancellation: CancellationToken::new(),
            shard: None,
            log: TaskLogger::disabled(),
            link: None,
        }
    }
}

/// How a handler failed; the retry intent is part of the type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// May succeed on another attempt, if the task's retry policy allows one.
    #[error("{reason}")]
    Retry { reason: String },
    /// Will not succeed by retrying (bad params, a permanent refusal): fail now.
    #[error("{reason}")]
    Abort { reason: String },
}

impl TaskError {
    pub fn retry(reason: impl Into<String>) -> Self {
        TaskError::Retry { reason: reason.into() }
    }
    pub fn abort(reason: impl Into<String>) -> Self {
        TaskError::Abort { reason: reason.into() }
    }
}

pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Option<serde_json::Value>, TaskError>> + Send>>;

/// A named piece of work. The `Ok` value is the result, stored with the instance
/// and passed to chained tasks.
pub trait Handler: Send + Sync + 'static {
    fn run(&self, ctx: TaskContext) -> HandlerFuture;
}

struct FnHandler<F>(F);

impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<serde_json::Value>, TaskError>> + Send + 'static,
{
    fn run(&self, ctx: TaskContext) -> HandlerFuture {
        Box::pin((self.0)(ctx))
    }
}

/// A handler from an async closure.
pub fn handler_fn<F, Fut>(f: F) -> Arc<dyn Handler>
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<serde_json::Value>, TaskError>> + Send + 'static,
{
    Arc::new(FnHandler(f))
}

//! What a handler sees and returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ax_domain::ids::{InstanceId, TraceId};
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
    /// Structured task log: `ctx.log.info("…")`. Lines go to `AX_LOGS` in batches
    /// and are read back with `ax logs <instance>`; a call never blocks.
    pub log: TaskLogger,
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

//! The worker SDK: what a business service embeds to run AX tasks, and what
//! `ax worker` runs with the built-in handlers.
//!
//! A worker needs only NATS and Redis. It announces itself with heartbeats, takes
//! assignments from its Redis queues (urgent first), reports RUNNING before it
//! starts a handler and the outcome after, each report carrying the attempt so a
//! stale worker is refused, and it stops an attempt the scheduler disowns.
//!
//! ```no_run
//! # async fn demo(config: ax_runtime::Config) -> anyhow::Result<()> {
//! use ax_worker::{handler_fn, TaskContext, TaskError, Worker};
//!
//! let worker = Worker::builder(config)
//!     .handler("order_sync", handler_fn(|ctx: TaskContext| async move {
//!         let order = ctx.params["order"].as_u64().ok_or_else(|| TaskError::abort("params.order missing"))?;
//!         Ok(Some(serde_json::json!({ "synced": order })))
//!     }))
//!     .build();
//! worker.run(tokio_util::sync::CancellationToken::new()).await
//! # }
//! ```
//!
//! # Layout
//! - [`context`]: `TaskContext`, `TaskError`, the `Handler` trait
//! - [`runner`]: the heartbeat, pop and report loops
//! - [`handlers`][]: built-ins (`noop`, `shell`)
//! - [`logger`]: `ctx.log`, batched to `AX_LOGS` without slowing the handler
//! - `metrics`: metric names, declared once

pub mod context;
pub mod handlers;
pub mod logger;
mod metrics;
pub mod runner;

pub use context::{handler_fn, Handler, TaskContext, TaskError};
pub use logger::{LogShipper, TaskLogger};
pub use runner::{HandlerOptions, Worker, WorkerBuilder};

/// The version this worker reports; tasks with `min_worker_version` above it never come here.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

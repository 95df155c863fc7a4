//! `ax-bench worker`: a worker process built on the SDK, like a business service
//! would embed it, with the handlers the scenarios need:
//!
//! - `noop`: succeeds at once (the SDK's built-in);
//! - `sleep`: sleeps `params.sleep_ms` (default 100) and records in Redis how often
//!   each instance's handler started and finished (`<ns>:bench:started` and
//!   `<ns>:bench:finished`, hashes by instance id), so the recovery scenario can
//!   count what really ran twice, not only what MySQL saw.

use std::time::Duration;

use anyhow::Context as _;
use ax_runtime::Config;
use ax_worker::{handler_fn, TaskContext, Worker};
use redis::AsyncCommands;

pub fn started_key(namespace: &str) -> String {
    format!("{namespace}:bench:started")
}

pub fn finished_key(namespace: &str) -> String {
    format!("{namespace}:bench:finished")
}

/// Runs until SIGINT/SIGTERM.
///
/// # Errors
/// Redis or NATS unreachable at start.
pub async fn run(config: Config) -> anyhow::Result<()> {
    config.validate()?;
    ax_runtime::telemetry::init_tracing(&config.log);
    let namespace = config.nats.namespace.clone();
    let client = redis::Client::open(config.redis.redis_url.expose()).context("parsing the Redis URL")?;
    let redis = client.get_connection_manager().await.context("connecting to Redis")?;
    let sleep = handler_fn(move |ctx: TaskContext| {
        let mut redis = redis.clone();
        let started = started_key(&namespace);
        let finished = finished_key(&namespace);
        async move {
            let ms = ctx.params.get("sleep_ms").and_then(|v| v.as_u64()).unwrap_or(100);
            let id = ctx.instance_id.as_str().to_owned();
            let _: Result<i64, _> = redis.hincr(&started, &id, 1).await;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let _: Result<i64, _> = redis.hincr(&finished, &id, 1).await;
            Ok(None)
        }
    });
    let worker = Worker::builder(config).handler("noop", ax_worker::handlers::noop()).handler("sleep", sleep).build();
    let shutdown = tokio_util::sync::CancellationToken::new();
    ax_runtime::shutdown::on_signals(shutdown.clone());
    worker.run(shutdown).await
}

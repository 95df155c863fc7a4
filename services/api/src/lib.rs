//! The HTTP API under `/api/v1`, plus `/healthz` and `/metrics`.
//!
//! # Layout
//! - [`error`]: the error body `{"error": {"code", "message", "field"}}` and its statuses
//! - [`views`]: the JSON shapes of tasks and instances
//! - [`workers`]: the worker directory, from heartbeats
//! - `routes/`: one file per resource (tasks, instances, workers, cron, schema,
//!   health, logs, traces, audit, reports, alerts)

pub mod error;
mod routes;
pub mod views;
pub mod workers;

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::Router;
use ax_bus::Bus;
use ax_store::Store;
use tokio_util::sync::CancellationToken;

/// What handlers need.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub bus: Bus,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    pub workers: workers::Directory,
    /// A worker silent this long is shown as lost (the scheduler's lease).
    pub lease: std::time::Duration,
}

/// The whole HTTP surface, for serving and for `oneshot` tests.
pub fn router(state: AppState) -> Router {
    routes::router().with_state(state)
}

/// Serves on `config.http.http_addr` until `shutdown` is cancelled.
///
/// # Errors
/// The address cannot be bound.
pub async fn run(addr: SocketAddr, state: AppState, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    serve(listener, state, shutdown).await
}

/// Serves on an already bound listener (tests bind port 0 and read the port).
///
/// # Errors
/// The server failed.
pub async fn serve(listener: tokio::net::TcpListener, state: AppState, shutdown: CancellationToken) -> anyhow::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "api listening");
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await.context("serving http")
}

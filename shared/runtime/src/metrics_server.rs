//! `/metrics` and `/healthz` for processes that have no api of their own (scheduler,
//! worker, monitor, log sink), so each can be scraped on its own.

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

/// Serves until `shutdown` is cancelled.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve(addr: SocketAddr, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding the metrics address {addr}"))?;
    serve_on(listener, shutdown).await
}

/// Serves on a bound listener (tests bind port 0).
///
/// # Errors
/// The server failed.
pub async fn serve_on(listener: tokio::net::TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let handle = crate::telemetry::prometheus();
    tracing::info!(addr = %listener.local_addr()?, "metrics listening");
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let handle = handle.clone();
                async move {
                    crate::process::refresh();
                    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response()
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await.context("serving metrics")
}

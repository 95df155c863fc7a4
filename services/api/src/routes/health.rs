use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;

use crate::AppState;

/// 200 when MySQL and NATS answer, 503 naming what does not.
pub async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let mysql = state.store.ping().await.is_ok();
    let nats = state.bus.client.connection_state() == async_nats::connection::State::Connected;
    let status = if mysql && nats { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    (status, Json(serde_json::json!({ "mysql": word(mysql), "nats": word(nats) })))
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ax_runtime::process::refresh();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}

//! `GET /api/v1/traces/{trace_id}`: one id finds everything about a run — the
//! instance, its audit trail, and where its logs are.

use axum::extract::{Path, State};
use axum::Json;
use ax_domain::ids::TraceId;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::{views, AppState};

pub async fn get(State(state): State<AppState>, Path(trace_id): Path<String>) -> ApiResult<Json<Value>> {
    let trace_id: TraceId = trace_id.parse().map_err(|e: ax_domain::ids::InvalidId| ApiError::bad_request("trace_id", e.to_string()))?;
    let id = state
        .store
        .instance_of_trace(trace_id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no instance has trace id {trace_id}")))?;
    let instance = state.store.instance(&id).await?.ok_or_else(|| ApiError::not_found(format!("instance {id} does not exist")))?;
    let transitions = state.store.transitions(&id).await?;
    Ok(Json(json!({
        "trace_id": trace_id,
        "instance": views::instance(&instance),
        "transitions": transitions,
        "logs": format!("/api/v1/instances/{id}/logs"),
        "log_lines": state.store.log_line_count(&id).await?,
    })))
}

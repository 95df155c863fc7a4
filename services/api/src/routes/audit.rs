//! `GET /api/v1/audit`: the audit trail across instances (seed 6), in commit order.

use axum::extract::{Query, State};
use axum::Json;
use ax_domain::ids::InstanceId;
use ax_domain::period::parse_time;
use ax_domain::task::is_valid_task_name;
use ax_store::audit::AuditQuery;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

#[derive(Deserialize)]
pub struct AuditParams {
    task: Option<String>,
    instance: Option<String>,
    /// RFC 3339, a date, or an age (`24h`); default 24 hours ago.
    since: Option<String>,
    until: Option<String>,
    /// The `next` of the previous page.
    after: Option<u64>,
    limit: Option<u32>,
}

pub async fn list(State(state): State<AppState>, Query(params): Query<AuditParams>) -> ApiResult<Json<Value>> {
    let now = ax_domain::now();
    if params.task.as_deref().is_some_and(|t| !is_valid_task_name(t)) {
        return Err(ApiError::bad_request("task", "must match [a-z0-9_-]{1,64}"));
    }
    if let Some(instance) = &params.instance {
        instance.parse::<InstanceId>().map_err(|e| ApiError::bad_request("instance", e.to_string()))?;
    }
    let since = match &params.since {
        Some(s) => parse_time(s, now).map_err(|e| ApiError::bad_request("since", e.to_string()))?,
        None => now - chrono::TimeDelta::hours(24),
    };
    let until = match &params.until {
        Some(s) => parse_time(s, now).map_err(|e| ApiError::bad_request("until", e.to_string()))?,
        // Just past now, so what was committed this microsecond is included.
        None => now + chrono::TimeDelta::seconds(1),
    };
    if since >= until {
        return Err(ApiError::bad_request("until", "must be after since"));
    }
    let limit = params.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(ApiError::bad_request("limit", "must be 1 to 10000"));
    }
    let rows = state
        .store
        .audit_trail(&AuditQuery { since, until, task: params.task, instance: params.instance, after: params.after.unwrap_or(0), limit })
        .await?;
    let next = (rows.len() == limit as usize).then(|| rows.last().map(|r| r.id)).flatten();
    let transitions: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).expect("audit rows serialize");
            v["id"] = json!(r.id);
            v
        })
        .collect();
    Ok(Json(json!({ "since": since, "until": until, "transitions": transitions, "next": next })))
}

//! Cron previews and backfills, computed by the same `CronSchedule` that fires, so
//! what is shown is what runs.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use ax_domain::cron_expr::CronSchedule;
use ax_domain::task::TriggerSpec;
use ax_domain::Timestamp;
use ax_store::{CreateOutcome, NewInstance};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

const MAX_PREVIEW: usize = 1000;
const MAX_BACKFILL: usize = 10_000;

#[derive(Deserialize)]
pub struct PreviewQuery {
    expr: Option<String>,
    tz: Option<String>,
    n: Option<usize>,
    after: Option<Timestamp>,
}

/// `GET /api/v1/cron/preview?expr=0 2 * * *&tz=Asia/Shanghai&n=5`: the next fires,
/// in UTC and in the zone's local time.
pub async fn preview(Query(query): Query<PreviewQuery>) -> ApiResult<Json<Value>> {
    let expr = query.expr.ok_or_else(|| ApiError::bad_request("expr", "is required"))?;
    let tz = query.tz.unwrap_or_else(|| "UTC".into());
    let n = query.n.unwrap_or(10);
    if !(1..=MAX_PREVIEW).contains(&n) {
        return Err(ApiError::bad_request("n", format!("must be 1 to {MAX_PREVIEW}")));
    }
    let schedule = CronSchedule::parse(&expr, &tz).map_err(|e| ApiError::bad_request(if e.field() == "timezone" { "tz" } else { "expr" }, e.to_string()))?;
    Ok(Json(json!({ "expr": expr, "tz": tz, "fires": fires_json(&schedule, schedule.upcoming(query.after.unwrap_or_else(ax_domain::now), n)) })))
}

pub fn fires_json(schedule: &CronSchedule, fires: Vec<Timestamp>) -> Vec<Value> {
    fires
        .into_iter()
        .map(|t| json!({ "utc": t, "local": t.with_timezone(&schedule.zone()).to_rfc3339() }))
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    from: Timestamp,
    to: Timestamp,
}

/// Creates the instances of every cron fire in `[from, to]` that has none yet. Each
/// fire keeps its unique trigger id, so a backfill never doubles a fire that ran;
/// the task's concurrency limit decides how many run at once.
pub async fn backfill(State(state): State<AppState>, Path(name): Path<String>, body: axum::body::Bytes) -> ApiResult<(StatusCode, Json<Value>)> {
    let request: BackfillRequest = serde_json::from_slice(&body).map_err(|e| ApiError::bad_request("", e.to_string()))?;
    if request.to < request.from {
        return Err(ApiError::bad_request("to", "must not be before from"));
    }
    let task = state.store.task(&name).await?.ok_or_else(|| ApiError::not_found(format!("task {name} is not registered")))?;
    let mut batch = Vec::new();
    for (index, trigger) in task.definition.triggers.iter().enumerate() {
        let TriggerSpec::Cron { cron, timezone, .. } = trigger else { continue };
        let schedule = CronSchedule::parse(cron, timezone).map_err(|e| ApiError::bad_request(format!("triggers[{index}].cron"), e.to_string()))?;
        let start = request.from - chrono::TimeDelta::microseconds(1);
        for fire in schedule.fires_between(start, request.to, MAX_BACKFILL + 1) {
            batch.push(NewInstance::for_cron_fire(&task.id, task.version, &task.definition, index as u16, fire, "backfill"));
        }
    }
    if batch.is_empty() {
        return Err(ApiError::bad_request("triggers", format!("task {name} has no cron fire between from and to")));
    }
    if batch.len() > MAX_BACKFILL {
        return Err(ApiError::bad_request("to", format!("the range holds more than {MAX_BACKFILL} fires; split it")));
    }
    let mut created = 0;
    let mut existing = 0;
    for chunk in batch.chunks(500) {
        for outcome in state.store.create_instances(chunk).await? {
            match outcome {
                CreateOutcome::Created(_) => created += 1,
                CreateOutcome::Duplicate(_) => existing += 1,
            }
        }
    }
    let _ = state.bus.client.publish(state.bus.names.dispatch_kick(), bytes::Bytes::new()).await;
    Ok((StatusCode::OK, Json(json!({ "task": name, "fires": batch.len(), "created": created, "already_existed": existing }))))
}

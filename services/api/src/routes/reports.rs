//! The task health report (seed 6): `GET /api/v1/reports/health` makes one for any
//! period on demand; the monthly ones the monitor made are kept and listed.

use axum::extract::{Path, Query, State};
use axum::Json;
use ax_domain::health::HealthSettings;
use ax_domain::ids::ReportId;
use ax_domain::period::parse_time;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

#[derive(Deserialize)]
pub struct HealthParams {
    /// Default 30 days ago.
    since: Option<String>,
    until: Option<String>,
    failure_streak: Option<u32>,
    no_fire_days: Option<u32>,
    duration_factor: Option<f64>,
    min_success_rate: Option<f64>,
}

pub async fn health(State(state): State<AppState>, Query(params): Query<HealthParams>) -> ApiResult<Json<Value>> {
    let now = ax_domain::now();
    let since = match &params.since {
        Some(s) => parse_time(s, now).map_err(|e| ApiError::bad_request("since", e.to_string()))?,
        None => now - chrono::TimeDelta::days(30),
    };
    let until = match &params.until {
        Some(s) => parse_time(s, now).map_err(|e| ApiError::bad_request("until", e.to_string()))?,
        None => now + chrono::TimeDelta::seconds(1),
    };
    if since >= until {
        return Err(ApiError::bad_request("until", "must be after since"));
    }
    let defaults = HealthSettings::default();
    let settings = HealthSettings {
        failure_streak: params.failure_streak.unwrap_or(defaults.failure_streak),
        no_fire_days: params.no_fire_days.unwrap_or(defaults.no_fire_days),
        duration_factor: params.duration_factor.unwrap_or(defaults.duration_factor),
        min_success_rate: params.min_success_rate.unwrap_or(defaults.min_success_rate),
        ..defaults
    };
    settings.validate()?;
    let stats = state.store.health_stats(since, until).await?;
    let report = ax_domain::health::report(stats, &settings, since, until, now);
    Ok(Json(serde_json::to_value(report).expect("reports serialize")))
}

/// A monthly report the monitor made.
pub async fn stored(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let id: ReportId = id.parse().map_err(|e: ax_domain::ids::InvalidId| ApiError::bad_request("id", e.to_string()))?;
    let report = state.store.health_report(&id).await?.ok_or_else(|| ApiError::not_found(format!("report {id} does not exist")))?;
    let mut body = serde_json::to_value(report).expect("reports serialize");
    body["id"] = json!(id);
    Ok(Json(body))
}

/// The monthly reports made so far, newest first.
pub async fn list(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let reports = state.store.health_reports(100).await?;
    Ok(Json(json!({ "health": reports })))
}

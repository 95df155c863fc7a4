//! Alerting over HTTP: rules and channels (replaced whole with PUT), the alert
//! history with its deliveries, and acknowledgement. Channel URLs carry tokens,
//! so they are shown redacted and secrets never.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use ax_domain::alert::{redact_url, AlertChannel, AlertLevel, AlertRule};
use ax_domain::ids::AlertId;
use ax_domain::task::is_valid_task_name;
use ax_store::alerts::{AlertFilter, AlertStatus, NewNotification, NotificationKind, Put, Stored};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

fn check_name(name: &str) -> ApiResult<()> {
    if is_valid_task_name(name) { Ok(()) } else { Err(ApiError::bad_request("name", "the name in the path must match [a-z0-9_-]{1,64}")) }
}

fn put_status(put: Put) -> StatusCode {
    if put == Put::Created { StatusCode::CREATED } else { StatusCode::OK }
}

fn rule_view(stored: &Stored<AlertRule>) -> Value {
    let mut v = serde_json::to_value(&stored.definition).expect("rules serialize");
    v["created_at"] = json!(stored.created_at);
    v["updated_at"] = json!(stored.updated_at);
    v
}

fn channel_view(stored: &Stored<AlertChannel>) -> Value {
    let c = &stored.definition;
    json!({
        "name": c.name,
        "format": c.format,
        "url": redact_url(&c.url),
        "has_secret": c.secret.is_some(),
        "levels": c.levels,
        "reports": c.reports,
        "mention_owner": c.mention_owner,
        "enabled": c.enabled,
        "created_at": stored.created_at,
        "updated_at": stored.updated_at,
    })
}

// ---- rules ----

pub async fn list_rules(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let rules = state.store.alert_rules().await?;
    Ok(Json(json!({ "rules": rules.iter().map(rule_view).collect::<Vec<_>>() })))
}

pub async fn get_rule(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    check_name(&name)?;
    let rule = state.store.alert_rule(&name).await?.ok_or_else(|| ApiError::not_found(format!("alert rule {name} does not exist")))?;
    Ok(Json(rule_view(&rule)))
}

/// Creates or replaces a rule; the body's `name` must be the path's.
pub async fn put_rule(State(state): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult<(StatusCode, Json<Value>)> {
    check_name(&name)?;
    let rule = AlertRule::from_json(&body)?;
    if rule.name != name {
        return Err(ApiError::bad_request("name", format!("is {:?} but the path names {name:?}", rule.name)));
    }
    let put = state.store.put_alert_rule(&rule).await?;
    let stored = state.store.alert_rule(&name).await?.ok_or_else(|| ApiError::not_found(format!("alert rule {name} vanished")))?;
    let mut body = rule_view(&stored);
    body["changed"] = json!(put != Put::Unchanged);
    Ok((put_status(put), Json(body)))
}

pub async fn delete_rule(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    check_name(&name)?;
    if state.store.delete_alert_rule(&name).await? { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::not_found(format!("alert rule {name} does not exist"))) }
}

// ---- channels ----

pub async fn list_channels(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let channels = state.store.alert_channels().await?;
    Ok(Json(json!({ "channels": channels.iter().map(channel_view).collect::<Vec<_>>() })))
}

pub async fn get_channel(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    check_name(&name)?;
    let channel = state.store.alert_channel(&name).await?.ok_or_else(|| ApiError::not_found(format!("channel {name} does not exist")))?;
    Ok(Json(channel_view(&channel)))
}

/// Creates or replaces a channel (the whole definition, URL included).
pub async fn put_channel(State(state): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult<(StatusCode, Json<Value>)> {
    check_name(&name)?;
    let channel = AlertChannel::from_json(&body)?;
    if channel.name != name {
        return Err(ApiError::bad_request("name", format!("is {:?} but the path names {name:?}", channel.name)));
    }
    let put = state.store.put_alert_channel(&channel).await?;
    let stored = state.store.alert_channel(&name).await?.ok_or_else(|| ApiError::not_found(format!("channel {name} vanished")))?;
    let mut body = channel_view(&stored);
    body["changed"] = json!(put != Put::Unchanged);
    Ok((put_status(put), Json(body)))
}

pub async fn delete_channel(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    check_name(&name)?;
    if state.store.delete_alert_channel(&name).await? { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::not_found(format!("channel {name} does not exist"))) }
}

/// Queues a test notification; the monitor delivers it like any other.
pub async fn test_channel(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<(StatusCode, Json<Value>)> {
    check_name(&name)?;
    if state.store.alert_channel(&name).await?.is_none() {
        return Err(ApiError::not_found(format!("channel {name} does not exist")));
    }
    let row = NewNotification { alert_id: None, report_id: None, channel: name.clone(), kind: NotificationKind::Test };
    state.store.queue_notifications(&[row]).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "channel": name, "queued": true }))))
}

// ---- alerts ----

#[derive(Deserialize)]
pub struct AlertsQuery {
    status: Option<String>,
    level: Option<String>,
    task: Option<String>,
    rule: Option<String>,
    before: Option<String>,
    limit: Option<u32>,
}

/// The alert history, newest first; page with `before=<last id>`.
pub async fn list_alerts(State(state): State<AppState>, Query(query): Query<AlertsQuery>) -> ApiResult<Json<Value>> {
    let status = match query.status.as_deref() {
        None => None,
        Some(s) => Some(AlertStatus::parse(s).ok_or_else(|| ApiError::bad_request("status", "firing or resolved"))?),
    };
    let level = match query.level.as_deref() {
        None => None,
        Some(l) => Some(AlertLevel::parse(l).ok_or_else(|| ApiError::bad_request("level", "P0, P1 or P2"))?),
    };
    if query.task.as_deref().is_some_and(|t| !is_valid_task_name(t)) {
        return Err(ApiError::bad_request("task", "must match [a-z0-9_-]{1,64}"));
    }
    if query.rule.as_deref().is_some_and(|r| !is_valid_task_name(r)) {
        return Err(ApiError::bad_request("rule", "must match [a-z0-9_-]{1,64}"));
    }
    let before = match query.before.as_deref() {
        None => None,
        Some(b) => Some(b.parse::<AlertId>().map_err(|e| ApiError::bad_request("before", e.to_string()))?),
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit", "must be 1 to 1000"));
    }
    let alerts = state.store.alerts(&AlertFilter { status, level, task: query.task, rule: query.rule, before, limit }).await?;
    Ok(Json(json!({ "alerts": alerts })))
}

fn parse_alert_id(id: &str) -> ApiResult<AlertId> {
    id.parse().map_err(|e: ax_domain::ids::InvalidId| ApiError::bad_request("id", e.to_string()))
}

/// One alert with every delivery decided for it.
pub async fn get_alert(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let id = parse_alert_id(&id)?;
    let alert = state.store.alert(&id).await?.ok_or_else(|| ApiError::not_found(format!("alert {id} does not exist")))?;
    let notifications = state.store.notifications_of_alert(&id).await?;
    let mut body = serde_json::to_value(alert).expect("alerts serialize");
    body["notifications"] = json!(notifications);
    Ok(Json(body))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    by: String,
    #[serde(default)]
    comment: Option<String>,
}

/// Someone has seen it: no more reminders. Acknowledging twice keeps the latest.
pub async fn acknowledge(State(state): State<AppState>, Path(id): Path<String>, body: Bytes) -> ApiResult<Json<Value>> {
    let id = parse_alert_id(&id)?;
    let mut de = serde_json::Deserializer::from_slice(&body);
    let ack: Ack = serde::Deserialize::deserialize(&mut de).map_err(|e| ApiError::bad_request("", format!("body: {e}")))?;
    if ack.by.trim().is_empty() || ack.by.len() > 128 {
        return Err(ApiError::bad_request("by", "who acknowledges, 1 to 128 characters"));
    }
    if ack.comment.as_ref().is_some_and(|c| c.len() > 1024) {
        return Err(ApiError::bad_request("comment", "at most 1024 characters"));
    }
    let alert = state
        .store
        .acknowledge_alert(&id, ack.by.trim(), ack.comment.as_deref(), ax_domain::now())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("alert {id} does not exist")))?;
    Ok(Json(serde_json::to_value(alert).expect("alerts serialize")))
}

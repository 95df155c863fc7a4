use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use ax_domain::task::{is_valid_task_name, TaskDefinition, TriggerKind};
use ax_domain::trigger::{is_valid_trigger_id, TriggerRequest};
use ax_store::{CreateOutcome, NewInstance};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::{views, AppState};

pub async fn list(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let tasks = state.store.tasks().await?;
    Ok(Json(json!({ "tasks": tasks.iter().map(views::task).collect::<Vec<_>>() })))
}

pub async fn get(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let task = state.store.task(&name).await?.ok_or_else(|| ApiError::not_found(format!("task {name} is not registered")))?;
    Ok(Json(views::task(&task)))
}

/// Registers a task or a new version of it. The body is the definition; its
/// `task_name` must be the name in the path.
pub async fn put(State(state): State<AppState>, Path(name): Path<String>, body: Bytes) -> ApiResult<(StatusCode, Json<Value>)> {
    if !is_valid_task_name(&name) {
        return Err(ApiError::bad_request("task_name", "the name in the path must match [a-z0-9_-]{1,64}"));
    }
    let definition = TaskDefinition::from_json(&body)?;
    if definition.task_name != name {
        return Err(ApiError::bad_request("task_name", format!("is {:?} but the path names {name:?}", definition.task_name)));
    }
    let registered = state.store.register_task(&definition, "api").await?;
    let status = match registered.action {
        Some(ax_domain::event::TaskAction::Registered) => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    let mut body = views::task(&registered.task);
    body["changed"] = json!(registered.action.is_some());
    Ok((status, Json(body)))
}

/// Fires a task now (or later, with `delay_sec`/`execute_at`). Idempotent by
/// `trigger_id` or the `Idempotency-Key` header: the same key returns the same instance.
pub async fn trigger(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
    let request = TriggerRequest::decode(&body, content_type)?;
    let key = headers.get("idempotency-key").map(|v| v.to_str().map(str::to_owned));
    let trigger_id = match (&request.trigger_id, key) {
        (Some(id), _) => id.clone(),
        (None, Some(Ok(key))) if is_valid_trigger_id(&key) => key,
        (None, Some(_)) => return Err(ApiError::bad_request("Idempotency-Key", "must be 1 to 128 printable ASCII characters without spaces")),
        (None, None) => format!("http-{}", ax_domain::ids::EventId::generate().as_str().trim_start_matches("evt_")),
    };
    let task = state.store.task(&name).await?.ok_or_else(|| ApiError::not_found(format!("task {name} is not registered")))?;
    if !task.enabled {
        return Err(ApiError::Conflict { message: format!("task {name} is disabled") });
    }
    let new = NewInstance::from_trigger(&task, &request, trigger_id, TriggerKind::Event, "api", ax_domain::now());
    let outcome = state.store.create_instances(std::slice::from_ref(&new)).await?.remove(0);
    // Wake the dispatchers; if this publish is lost they find it at their next poll.
    let _ = state.bus.client.publish(state.bus.names.dispatch_kick(), bytes::Bytes::new()).await;
    let (status, created) = match &outcome {
        CreateOutcome::Created(_) => (StatusCode::CREATED, true),
        CreateOutcome::Duplicate(_) => (StatusCode::OK, false),
    };
    Ok((status, Json(json!({ "instance_id": outcome.instance_id(), "created": created, "trigger_id": new.trigger_id }))))
}

pub async fn enable(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    set_enabled(state, name, true).await
}

pub async fn disable(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    set_enabled(state, name, false).await
}

/// A disabled task does not fire and refuses triggers; instances already running finish.
async fn set_enabled(state: AppState, name: String, enabled: bool) -> ApiResult<Json<Value>> {
    let task = state.store.set_enabled(&name, enabled, "api").await?.ok_or_else(|| ApiError::not_found(format!("task {name} is not registered")))?;
    if enabled {
        // Its schedule may have missed fires; the leader applies the misfire policy.
        let _ = state.bus.client.publish(state.bus.names.dispatch_kick(), bytes::Bytes::new()).await;
    }
    Ok(Json(views::task(&task)))
}

/// Deletes a task; its instances, audit trail and versions are kept.
pub async fn delete(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    if state.store.delete_task(&name, "api").await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("task {name} is not registered")))
    }
}

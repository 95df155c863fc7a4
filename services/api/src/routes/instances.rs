use axum::extract::{Path, Query, State};
use axum::Json;
use ax_domain::ids::InstanceId;
use ax_domain::state::StateKind;
use ax_store::InstanceFilter;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::{views, AppState};

fn parse_id(id: &str) -> ApiResult<InstanceId> {
    id.parse().map_err(|e: ax_domain::ids::InvalidId| ApiError::bad_request("id", e.to_string()))
}

pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    let instance = state.store.instance(&id).await?.ok_or_else(|| ApiError::not_found(format!("instance {id} does not exist")))?;
    if instance.shards.is_some() {
        let shards = state.store.shards_of(&id).await?;
        return Ok(Json(views::firing(&instance, &shards)));
    }
    Ok(Json(views::instance(&instance)))
}

#[derive(Deserialize)]
pub struct ListQuery {
    task: Option<String>,
    state: Option<String>,
    before: Option<String>,
    limit: Option<u32>,
}

/// Newest first; page with `before=<last id>`.
pub async fn list(State(state): State<AppState>, Query(query): Query<ListQuery>) -> ApiResult<Json<Value>> {
    let state_filter = match &query.state {
        Some(s) => Some(StateKind::parse(s).ok_or_else(|| ApiError::bad_request("state", format!("{s:?} is not a state")))?),
        None => None,
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit", "must be 1 to 1000"));
    }
    let filter = InstanceFilter {
        task: query.task,
        state: state_filter,
        before: query.before.as_deref().map(parse_id).transpose()?,
        limit,
    };
    let instances = state.store.instances(&filter).await?;
    Ok(Json(json!({ "instances": instances.iter().map(views::instance).collect::<Vec<_>>() })))
}

/// The audit trail: every transition with from, to, operator, reason and time.
pub async fn transitions(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    if state.store.instance(&id).await?.is_none() {
        return Err(ApiError::not_found(format!("instance {id} does not exist")));
    }
    let transitions = state.store.transitions(&id).await?;
    Ok(Json(json!({ "instance_id": id, "transitions": transitions })))
}

/// Cancels an instance in any non-final state; a running attempt is told to stop.
pub async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    let request = ax_store::TransitionRequest {
        instance_id: id.clone(),
        command: ax_domain::state::Command::Cancel { reason: "cancelled by an operator".into() },
        operator: "api".into(),
        result: None,
    };
    match state.store.transition(&[request]).await?.remove(0) {
        Ok(applied) => Ok(Json(views::instance(&applied.instance))),
        Err(ax_store::Refusal::NotFound) => Err(ApiError::not_found(format!("instance {id} does not exist"))),
        Err(ax_store::Refusal::Transition(err)) => Err(ApiError::Conflict { message: err.to_string() }),
    }
}

/// Runs a finished instance again: a new instance, linked to the old one.
pub async fn rerun(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<(axum::http::StatusCode, Json<Value>)> {
    let id = parse_id(&id)?;
    let new_id = state.store.rerun(&id, "api").await?;
    let _ = state.bus.client.publish(state.bus.names.dispatch_kick(), bytes::Bytes::new()).await;
    Ok((axum::http::StatusCode::CREATED, Json(json!({ "instance_id": new_id, "rerun_of": id }))))
}

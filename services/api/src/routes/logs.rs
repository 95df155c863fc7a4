//! `GET /api/v1/instances/{id}/logs`: an instance's whole log, in order, across
//! attempts and workers (seed 5.5).
//!
//! - JSON (default): a page of lines and the cursor to ask for the next one.
//! - `format=text`: plain lines, the whole log (up to a cap), for a browser or `curl`;
//!   this is where alert notifications link to.
//! - `follow=true`: server-sent events: every line so far, then new lines as the
//!   log sink stores them (polled), until the instance has finished and its log
//!   has been quiet for a few seconds; then an `end` event. A reconnecting client
//!   sends `Last-Event-ID` (each line's id is its cursor) and misses nothing.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ax_domain::ids::InstanceId;
use ax_domain::log::LogLevel;
use ax_store::logs::{LogCursor, LogQuery, LogRow};
use ax_store::Store;
use serde::Deserialize;
use serde_json::json;

use crate::error::{ApiError, ApiResult};
use crate::AppState;

const DEFAULT_LIMIT: u32 = 1000;
const MAX_LIMIT: u32 = 10_000;
/// `format=text` stops after this many lines (and says so).
const TEXT_CAP: usize = 200_000;
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// After the instance finished, how long the log must stay quiet before `end`
/// (the log sink may still be writing the last batches).
const FOLLOW_SETTLE: Duration = Duration::from_secs(5);

#[derive(Deserialize)]
pub struct LogsQuery {
    attempt: Option<u32>,
    level: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
    follow: Option<bool>,
    format: Option<String>,
}

fn line_json(row: &LogRow) -> serde_json::Value {
    let mut value = serde_json::to_value(row).expect("log rows serialize");
    value["cursor"] = json!(LogCursor::after(row).to_string());
    value
}

fn line_text(row: &LogRow) -> String {
    format!(
        "{} [attempt {}] {:<5} {:<7} {}: {}\n",
        row.ts.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
        row.attempt,
        row.level.to_uppercase(),
        row.stream,
        row.worker_id,
        row.message
    )
}

pub async fn get(State(state): State<AppState>, Path(id): Path<String>, Query(query): Query<LogsQuery>, headers: HeaderMap) -> ApiResult<Response> {
    let instance_id: InstanceId = id.parse().map_err(|e: ax_domain::ids::InvalidId| ApiError::bad_request("id", e.to_string()))?;
    if query.attempt == Some(0) {
        return Err(ApiError::bad_request("attempt", "attempts start at 1"));
    }
    let min_level = match query.level.as_deref() {
        None => LogLevel::Trace,
        Some(level) => LogLevel::parse(level).ok_or_else(|| ApiError::bad_request("level", "one of trace, debug, info, warn, error"))?,
    };
    // A reconnecting event stream resumes where it left off.
    let resume = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let after = match resume.or(query.after) {
        None => LogCursor::start(),
        Some(cursor) => cursor.parse().map_err(|e: ax_store::logs::BadCursor| ApiError::bad_request("after", e.to_string()))?,
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request("limit", format!("must be 1 to {MAX_LIMIT}")));
    }
    let text = match query.format.as_deref() {
        None | Some("json") => false,
        Some("text") => true,
        Some(_) => return Err(ApiError::bad_request("format", "json or text")),
    };
    let instance = state.store.instance(&instance_id).await?.ok_or_else(|| ApiError::not_found(format!("instance {instance_id} does not exist")))?;
    let log_query = LogQuery { instance_id: instance_id.clone(), after, attempt: query.attempt, min_level, limit };

    if query.follow == Some(true) {
        return Ok(follow(state.store.clone(), log_query).into_response());
    }
    if text {
        let mut body = String::new();
        let mut query = LogQuery { limit: MAX_LIMIT, ..log_query };
        let mut lines = 0;
        loop {
            let page = state.store.logs(&query).await?;
            for row in &page {
                body.push_str(&line_text(row));
            }
            lines += page.len();
            match page.last() {
                Some(last) if page.len() == MAX_LIMIT as usize && lines < TEXT_CAP => query.after = LogCursor::after(last),
                Some(_) if page.len() == MAX_LIMIT as usize => {
                    body.push_str(&format!("… more than {TEXT_CAP} lines; page through the JSON form with ?after=\n"));
                    break;
                }
                _ => break,
            }
        }
        if lines == 0 {
            body.push_str(&format!("no log lines for {instance_id} (yet)\n"));
        }
        return Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response());
    }
    let page = state.store.logs(&log_query).await?;
    let more = page.len() == limit as usize;
    let next = page.last().map_or(after, LogCursor::after).to_string();
    let lines: Vec<serde_json::Value> = page.iter().map(line_json).collect();
    Ok(Json(json!({
        "instance_id": instance_id,
        "task": instance.task_name,
        "trace_id": instance.trace_id,
        "state": instance.state.kind(),
        "finished": instance.state.kind().is_final(),
        "lines": lines,
        "next": next,
        "more": more,
    }))
    .into_response())
}

struct Follow {
    store: Store,
    query: LogQuery,
    ready: VecDeque<LogRow>,
    quiet_since: Option<tokio::time::Instant>,
    ended: bool,
}

fn follow(store: Store, query: LogQuery) -> Sse<impl futures::Stream<Item = Result<SseEvent, Infallible>>> {
    let state = Follow { store, query: LogQuery { limit: 1000, ..query }, ready: VecDeque::new(), quiet_since: None, ended: false };
    let stream = futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(row) = s.ready.pop_front() {
                let cursor = LogCursor::after(&row).to_string();
                let event = SseEvent::default().event("line").id(cursor).data(line_json(&row).to_string());
                return Some((Ok(event), s));
            }
            if s.ended {
                return None;
            }
            match s.store.logs(&s.query).await {
                Ok(page) if !page.is_empty() => {
                    s.query.after = LogCursor::after(page.last().expect("not empty"));
                    s.ready.extend(page);
                    s.quiet_since = None;
                    continue;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, instance_id = %s.query.instance_id, "following a log failed");
                    s.ended = true;
                    return Some((Ok(SseEvent::default().event("error").data("the store is unavailable; reconnect to resume")), s));
                }
            }
            let finished = matches!(s.store.instance(&s.query.instance_id).await, Ok(Some(i)) if i.state.kind().is_final());
            if finished {
                let since = *s.quiet_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= FOLLOW_SETTLE {
                    s.ended = true;
                    return Some((Ok(SseEvent::default().event("end").data("the instance finished")), s));
                }
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

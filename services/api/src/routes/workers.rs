use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::AppState;

/// Every worker with its load and last heartbeat.
pub async fn list(State(state): State<AppState>) -> Json<Value> {
    let workers: Vec<Value> = state
        .workers
        .list(state.lease)
        .into_iter()
        .map(|(beat, seen, alive)| {
            json!({
                "id": beat.worker_id,
                "group": beat.group,
                "tags": beat.tags,
                "version": beat.version,
                "handlers": beat.handlers,
                "cpu_cores": beat.cpu_cores,
                "running": beat.running,
                "max_running": beat.max_running,
                "prefetch": beat.prefetch,
                "memory_used_bytes": beat.memory_used_bytes,
                "last_heartbeat": seen,
                "alive": alive,
            })
        })
        .collect();
    Json(json!({ "workers": workers }))
}

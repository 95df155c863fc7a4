//! Routes, one module per resource.

mod cron;
mod health;
mod instances;
mod schema;
mod tasks;
mod workers;

use axum::routing::{get, post};
use axum::Router;

use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tasks", get(tasks::list))
        .route("/api/v1/tasks/{name}", get(tasks::get).put(tasks::put).delete(tasks::delete))
        .route("/api/v1/tasks/{name}/trigger", post(tasks::trigger))
        .route("/api/v1/tasks/{name}/enable", post(tasks::enable))
        .route("/api/v1/tasks/{name}/disable", post(tasks::disable))
        .route("/api/v1/tasks/{name}/backfill", post(cron::backfill))
        .route("/api/v1/cron/preview", get(cron::preview))
        .route("/api/v1/instances", get(instances::list))
        .route("/api/v1/instances/{id}", get(instances::get))
        .route("/api/v1/instances/{id}/transitions", get(instances::transitions))
        .route("/api/v1/instances/{id}/cancel", post(instances::cancel))
        .route("/api/v1/instances/{id}/rerun", post(instances::rerun))
        .route("/api/v1/workers", get(workers::list))
        .route("/api/v1/schema/task", get(schema::task))
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
}

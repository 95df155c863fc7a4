//! Routes, one module per resource.

mod cron;
mod alerts;
mod audit;
mod health;
mod instances;
mod logs;
mod reports;
mod schema;
mod tasks;
mod workers;
mod traces;

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
        .route("/api/v1/instances/{id}/logs", get(logs::get))
        .route("/api/v1/traces/{trace_id}", get(traces::get))
        .route("/api/v1/audit", get(audit::list))
        .route("/api/v1/reports", get(reports::list))
        .route("/api/v1/reports/health", get(reports::health))
        .route("/api/v1/reports/health/{id}", get(reports::stored))
        .route("/api/v1/alerts", get(alerts::list_alerts))
        .route("/api/v1/alerts/{id}", get(alerts::get_alert))
        .route("/api/v1/alerts/{id}/ack", post(alerts::acknowledge))
        .route("/api/v1/alert-rules", get(alerts::list_rules))
        .route("/api/v1/alert-rules/{name}", get(alerts::get_rule).put(alerts::put_rule).delete(alerts::delete_rule))
        .route("/api/v1/alert-channels", get(alerts::list_channels))
        .route("/api/v1/alert-channels/{name}", get(alerts::get_channel).put(alerts::put_channel).delete(alerts::delete_channel))
        .route("/api/v1/alert-channels/{name}/test", post(alerts::test_channel))
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
}

use axum::http::header;
use axum::response::IntoResponse;

/// The JSON Schema every definition is validated against (the console renders it as a form).
pub async fn task() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/schema+json")], ax_domain::task::TASK_SCHEMA_JSON)
}

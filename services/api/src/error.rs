//! API errors: a small code set, the field at fault, and nothing internal in the body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug)]
pub enum ApiError {
    BadRequest { field: String, message: String },
    NotFound { message: String },
    Conflict { message: String },
    Unavailable { message: String },
    Internal { message: String },
}

impl ApiError {
    pub fn bad_request(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::BadRequest { field: field.into(), message: message.into() }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::NotFound { message: message.into() }
    }
}

impl From<ax_domain::task::FieldError> for ApiError {
    fn from(err: ax_domain::task::FieldError) -> Self {
        ApiError::BadRequest { field: err.field, message: err.reason }
    }
}

impl From<ax_store::StoreError> for ApiError {
    fn from(err: ax_store::StoreError) -> Self {
        if err.is_unavailable() {
            tracing::warn!(error = %err, "store unavailable");
            return ApiError::Unavailable { message: "the store is unavailable; try again".into() };
        }
        match err {
            ax_store::StoreError::Refused { field, reason } => ApiError::BadRequest { field, message: reason },
            ax_store::StoreError::Conflict { what } => ApiError::Conflict { message: format!("{what}: conflict") },
            ax_store::StoreError::Busy { what } => ApiError::Unavailable { message: format!("{what}: busy; try again") },
            other => {
                tracing::error!(error = ?other, "store error");
                ApiError::Internal { message: "internal error; see the server log".into() }
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message, field) = match self {
            ApiError::BadRequest { field, message } => (StatusCode::BAD_REQUEST, "bad_request", message, Some(field)),
            ApiError::NotFound { message } => (StatusCode::NOT_FOUND, "not_found", message, None),
            ApiError::Conflict { message } => (StatusCode::CONFLICT, "conflict", message, None),
            ApiError::Unavailable { message } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", message, None),
            ApiError::Internal { message } => (StatusCode::INTERNAL_SERVER_ERROR, "internal", message, None),
        };
        let body = serde_json::json!({ "error": { "code": code, "message": message, "field": field } });
        (status, Json(body)).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

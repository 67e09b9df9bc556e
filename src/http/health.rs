//! Liveness and readiness.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::AppState;
use crate::serve::ready;

/// Liveness: the process answers. Never checks dependencies, never needs a key.
pub(super) async fn health() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// Readiness (`serve::ready`): 200 while an upstream answers, else 503.
pub(super) async fn ready(State(state): State<AppState>) -> Response {
    let readiness = ready::check(&state).await;
    let status = if readiness.up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness.report)).into_response()
}

/// `GET /`: a plain answer, as Ollama gives, for clients that probe the root.
pub(super) async fn root() -> &'static str {
    "assist-gateway is running (OpenAI API under /v1, Ollama API under /api)\n"
}

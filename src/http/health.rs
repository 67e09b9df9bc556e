//! Liveness and readiness.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::app::AppState;

/// Liveness: the process answers. Never checks dependencies, never needs a key.
pub(crate) async fn health() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// Readiness: the state of each dependency. 200 when all are usable, 503 when not.
pub(crate) async fn ready(State(state): State<AppState>) -> Response {
    let url = state.pipeline.upstream_url().to_string();
    let upstream = match state.pipeline.upstream_ready().await {
        Ok(models) => json!({"status": "ok", "url": url, "models": models}),
        Err(e) => json!({"status": "down", "url": url, "reason": e.to_string()}),
    };
    let ok = upstream["status"] == "ok";
    let body = json!({
        "status": if ok { "ok" } else { "down" },
        "checks": {"upstream": upstream},
    });
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// `GET /`: a plain answer, as Ollama gives, for clients that probe the root.
pub(crate) async fn root() -> &'static str {
    "assist-gateway is running (OpenAI API under /v1, Ollama API under /api)\n"
}

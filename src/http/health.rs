//! Liveness and readiness.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::app::AppState;

/// Readiness probes must answer quickly even when a dependency hangs.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Liveness: the process answers. Never checks dependencies, never needs a key.
pub(crate) async fn health() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// Readiness: the state of each dependency: `ok`, `degraded` (serving, with less) or
/// `down` (503: the upstream does not answer).
pub(crate) async fn ready(State(state): State<AppState>) -> Response {
    let url = state.pipeline.upstream_url().to_string();
    let check = tokio::time::timeout(READY_TIMEOUT, state.pipeline.upstream_ready()).await;
    let upstream = match check {
        Ok(Ok(models)) => json!({"status": "ok", "url": url, "models": models}),
        Ok(Err(e)) => json!({"status": "down", "url": url, "reason": e.to_string()}),
        Err(_) => json!({"status": "down", "url": url,
            "reason": format!("upstream {url} did not answer within {} s", READY_TIMEOUT.as_secs())}),
    };
    let (lexical, vectors) = state.retriever.readiness().await;
    let sessions = match state.pipeline.sessions() {
        None => json!({"status": "disabled"}),
        Some(s) => {
            let store = s.store();
            match tokio::time::timeout(READY_TIMEOUT, store.count()).await {
                Ok(Ok(n)) => json!({"status": "ok", "store": store.describe(), "sessions": n}),
                // Answers still come without memory.
                Ok(Err(e)) => {
                    json!({"status": "degraded", "store": store.describe(), "reason": format!("{e:#}")})
                }
                Err(_) => {
                    json!({"status": "degraded", "store": store.describe(), "reason": "no answer in time"})
                }
            }
        }
    };
    let up = upstream["status"] == "ok";
    let degraded = lexical["status"] != "ok"
        || vectors["status"] == "degraded"
        || sessions["status"] == "degraded";
    let overall = match (up, degraded) {
        (false, _) => "down",
        (true, true) => "degraded",
        (true, false) => "ok",
    };
    let body = json!({
        "status": overall,
        "checks": {"upstream": upstream, "lexical_index": lexical, "vectors": vectors, "sessions": sessions},
    });
    // Degraded still serves (BM25 answers alone); only a missing upstream is not ready.
    let status = if up {
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

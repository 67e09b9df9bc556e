//! Error shapes of the two dialects, as whole responses and as in-stream events.

use axum::http::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::Dialect;
use crate::error::GatewayError;

/// OpenAI: `{"error":{"message","type","param","code"}}`.
pub(crate) fn openai_body(e: &GatewayError) -> Value {
    json!({"error": {
        "message": e.message,
        "type": e.kind,
        "param": e.param,
        "code": e.code,
    }})
}

/// Ollama: `{"error":"…"}`.
pub(crate) fn ollama_body(e: &GatewayError) -> Value {
    json!({"error": e.message})
}

/// The error as a whole HTTP response in the dialect's shape and status.
pub fn error_response(dialect: Dialect, e: &GatewayError) -> Response {
    let body = match dialect {
        Dialect::OpenAi => openai_body(e),
        Dialect::Ollama => ollama_body(e),
    };
    let mut response = (e.status, Json(body)).into_response();
    if e.status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if let Some(secs) = e.retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

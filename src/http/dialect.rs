//! An API dialect (OpenAI, Ollama, Anthropic, Responses) as far as errors go: the shape an error takes, the
//! error type its handlers return, and the answers for routes and methods it lacks.
//! Each dialect's router is nested under its own prefix, so a handler's dialect is its
//! type, never guessed from the request.

use std::marker::PhantomData;

use axum::extract::OriginalUri;
use axum::http::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::GatewayError;

/// An API family: its name (for logs) and the body its errors have.
pub trait Dialect: Send + Sync + 'static {
    const NAME: &'static str;
    fn error_body(e: &GatewayError) -> Value;
    /// The status an error is answered with (the error's own, unless the dialect has a
    /// status of its own for it).
    fn status(e: &GatewayError) -> StatusCode {
        e.status
    }
}

/// OpenAI: `{"error":{"message","type","param","code"}}`.
pub struct OpenAi;

impl Dialect for OpenAi {
    const NAME: &'static str = "openai";

    fn error_body(e: &GatewayError) -> Value {
        json!({"error": {
            "message": e.message,
            "type": e.kind,
            "param": e.param,
            "code": e.code,
        }})
    }
}

/// Ollama: `{"error":"…"}`.
pub struct Ollama;

impl Dialect for Ollama {
    const NAME: &'static str = "ollama";

    fn error_body(e: &GatewayError) -> Value {
        json!({"error": e.message})
    }
}

/// Anthropic Messages: `{"type":"error","error":{"type","message"}}`, with Anthropic's
/// types (`authentication_error`, `not_found_error`, `overloaded_error`, …).
pub struct Anthropic;

impl Anthropic {
    /// Whether the upstream said it is overloaded (503, or Anthropic's own 529).
    fn overloaded(e: &GatewayError) -> bool {
        matches!(
            e.upstream,
            Some(crate::llm::UpstreamErrorKind::Status(503 | 529))
        )
    }

    /// Anthropic's `error.type` for an error.
    pub fn error_type(e: &GatewayError) -> &'static str {
        if Self::overloaded(e) {
            return "overloaded_error";
        }
        match e.status.as_u16() {
            401 => "authentication_error",
            402 => "billing_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            504 => "timeout_error",
            503 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        }
    }
}

impl Dialect for Anthropic {
    const NAME: &'static str = "anthropic";

    fn error_body(e: &GatewayError) -> Value {
        json!({"type": "error", "error": {
            "type": Self::error_type(e),
            "message": e.message,
        }})
    }

    /// An overloaded upstream is Anthropic's 529 (which its SDKs retry).
    fn status(e: &GatewayError) -> StatusCode {
        if Self::overloaded(e) {
            StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
        } else {
            e.status
        }
    }
}

/// OpenAI Responses (`/v1/responses`): OpenAI's error shape, its own name in logs and
/// metrics.
pub struct Responses;

impl Dialect for Responses {
    const NAME: &'static str = "responses";

    fn error_body(e: &GatewayError) -> Value {
        OpenAi::error_body(e)
    }
}

/// An error that renders itself as a whole response in dialect `D`'s shape, with its
/// status, `www-authenticate` on a 401 and `retry-after` when the error says when to
/// come back. What every handler of the dialect returns on failure.
pub struct ApiError<D> {
    pub error: GatewayError,
    dialect: PhantomData<D>,
}

impl<D> std::fmt::Debug for ApiError<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl<D> From<GatewayError> for ApiError<D> {
    fn from(error: GatewayError) -> Self {
        Self {
            error,
            dialect: PhantomData,
        }
    }
}

impl<D> From<crate::llm::UpstreamError> for ApiError<D> {
    fn from(e: crate::llm::UpstreamError) -> Self {
        GatewayError::from(e).into()
    }
}

impl<D: Dialect> IntoResponse for ApiError<D> {
    fn into_response(self) -> Response {
        let e = self.error;
        let mut response = (D::status(&e), Json(D::error_body(&e))).into_response();
        let headers = response.headers_mut();
        if e.status == StatusCode::UNAUTHORIZED {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = e.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The fallback of a dialect's router: 404 naming the path.
pub async fn not_found<D: Dialect>(OriginalUri(uri): OriginalUri) -> ApiError<D> {
    GatewayError::route_not_found(uri.path()).into()
}

/// The answer to a known path asked with a method it does not take.
pub async fn method_not_allowed<D: Dialect>() -> ApiError<D> {
    GatewayError::method_not_allowed().into()
}

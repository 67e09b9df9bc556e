//! The one error type that crosses the pipeline. Each HTTP dialect renders it in its
//! own shape (see `http::error`); the status and message are decided here.

use axum::http::StatusCode;

use crate::llm::{UpstreamError, UpstreamErrorKind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub status: StatusCode,
    /// OpenAI `error.type`.
    pub kind: &'static str,
    /// OpenAI `error.code`.
    pub code: Option<&'static str>,
    /// OpenAI `error.param`: the request field at fault.
    pub param: Option<String>,
    pub message: String,
    /// What failed, when the error came from the upstream (for metrics).
    pub upstream: Option<UpstreamErrorKind>,
    /// Seconds the client should wait before trying again (`retry-after`), when the
    /// upstream said so on its 429 / 503.
    pub retry_after: Option<u64>,
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GatewayError {}

impl GatewayError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            code: None,
            param: None,
            message: message.into(),
            upstream: None,
            retry_after: None,
        }
    }

    fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 400 for a request the gateway cannot accept; `param` names the field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.param = Some(param.into());
        e
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("model '{model}' not found"),
        )
        .with_code("model_not_found")
    }

    pub fn source_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no source '{id}' in the knowledge base (it may have been re-ingested)"),
        )
        .with_code("source_not_found")
    }

    pub fn route_not_found(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no route for {path}"),
        )
        .with_code("not_found")
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed on this route",
        )
    }

    /// 400: the prompt does not fit the model's window, even with no context, history or
    /// anything else the gateway adds (OpenAI's `context_length_exceeded`).
    pub fn context_length_exceeded(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
            .with_code("context_length_exceeded");
        e.param = Some("messages".into());
        e
    }

    /// 403 for a request the gateway refuses to serve whoever sends it (a foreign host or
    /// web page).
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "permission_error", message).with_code(code)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
            .with_code("invalid_api_key")
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("request body is larger than {limit} bytes"),
        )
        .with_code("request_too_large")
    }

    /// 429 for a caller over one of its limits (`server.rate_limit_per_minute`,
    /// `server.max_streams_per_key`).
    pub fn rate_limited(message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
            .with_code("rate_limit_exceeded")
    }

    /// 408 for a request body that did not arrive in time.
    pub fn request_timeout(secs: u64) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("the request body did not arrive within {secs} s"),
        )
        .with_code("request_timeout")
    }

    /// 409: the request conflicts with work in progress.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "invalid_request_error", message).with_code(code)
    }

    /// 409: the session's earlier turn is still running; try again in a moment.
    pub fn session_busy(message: impl Into<String>) -> Self {
        let mut e = Self::conflict("session_busy", message);
        e.retry_after = Some(5);
        e
    }

    /// 503: a feature the settings leave off.
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message).with_code(code)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }
}

impl From<UpstreamError> for GatewayError {
    fn from(e: UpstreamError) -> Self {
        use crate::llm::UpstreamErrorKind as K;
        let message = e.to_string();
        let upstream = Some(e.kind.clone());
        // Whole seconds, rounded up, as the header carries them.
        let retry_after = e.retry_after.map(|d| d.as_millis().div_ceil(1000) as u64);
        let error = match e.kind {
            _ if e.is_context_overflow() => Self::context_length_exceeded(message),
            K::Unreachable => Self::new(StatusCode::BAD_GATEWAY, "upstream_error", message)
                .with_code("upstream_unreachable"),
            K::Timeout => Self::new(StatusCode::GATEWAY_TIMEOUT, "upstream_error", message)
                .with_code("upstream_timeout"),
            K::Status(status) => match status {
                400 | 422 => Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
                    .with_code("upstream_rejected_request"),
                404 => Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
                    .with_code("model_not_found"),
                408 | 504 => Self::new(StatusCode::GATEWAY_TIMEOUT, "upstream_error", message)
                    .with_code("upstream_timeout"),
                429 => Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                    .with_code("upstream_rate_limited"),
                _ => Self::new(StatusCode::BAD_GATEWAY, "upstream_error", message)
                    .with_code("upstream_error"),
            },
            K::Stream | K::Protocol | K::Closed => {
                Self::new(StatusCode::BAD_GATEWAY, "upstream_error", message)
                    .with_code("upstream_error")
            }
            K::Unsupported => Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
                .with_code("unsupported_by_upstream"),
        };
        Self {
            upstream,
            retry_after,
            ..error
        }
    }
}

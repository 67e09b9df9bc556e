//! The HTTP plumbing both adapters share: one connection pool, timeouts, and turning
//! transport failures and error statuses into `UpstreamError`.

use std::time::Duration;

use reqwest::{Client, RequestBuilder, Response};
use serde_json::Value;

use super::{UpstreamError, UpstreamErrorKind};

/// Longest slice of an upstream error body quoted in a message.
const MAX_ERROR_BODY: usize = 500;

#[derive(Clone)]
pub(crate) struct Upstream {
    client: Client,
    base: String,
    api_key: Option<String>,
    first_byte_timeout: Duration,
}

impl Upstream {
    pub(crate) fn new(
        base_url: &str,
        api_key: &str,
        connect_timeout: Duration,
        first_byte_timeout: Duration,
    ) -> anyhow::Result<Self> {
        let client = Client::builder()
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        let key = api_key.trim();
        Ok(Self {
            client,
            base: base_url.trim_end_matches('/').to_string(),
            api_key: (!key.is_empty()).then(|| key.to_string()),
            first_byte_timeout,
        })
    }

    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub(crate) fn get(&self, path: &str) -> RequestBuilder {
        self.authorize(self.client.get(self.url(path)))
    }

    pub(crate) fn post_json(&self, path: &str, body: &Value) -> RequestBuilder {
        self.authorize(self.client.post(self.url(path)).json(body))
    }

    fn authorize(&self, rb: RequestBuilder) -> RequestBuilder {
        match &self.api_key {
            Some(key) => rb.bearer_auth(key),
            None => rb,
        }
    }

    /// Sends and waits for the response headers, at most `first_byte_timeout`.
    /// A non-2xx status becomes an error carrying the upstream's own message.
    pub(crate) async fn send(&self, rb: RequestBuilder) -> Result<Response, UpstreamError> {
        let response = match tokio::time::timeout(self.first_byte_timeout, rb.send()).await {
            Err(_) => {
                return Err(self.error(
                    UpstreamErrorKind::Timeout,
                    format!(
                        "no response within {} s",
                        self.first_byte_timeout.as_secs_f32()
                    ),
                ))
            }
            Ok(Err(e)) => return Err(self.transport_error(&e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = tokio::time::timeout(self.first_byte_timeout, response.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Err(self.error(
            UpstreamErrorKind::Status(status.as_u16()),
            error_message(&body).unwrap_or_else(|| {
                status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_ascii_lowercase()
            }),
        ))
    }

    pub(crate) fn error(
        &self,
        kind: UpstreamErrorKind,
        detail: impl Into<String>,
    ) -> UpstreamError {
        UpstreamError::new(kind, &self.base, detail)
    }

    /// Maps a reqwest failure, keeping the root cause (e.g. "Connection refused").
    pub(crate) fn transport_error(&self, e: &reqwest::Error) -> UpstreamError {
        let mut cause = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            cause = s.to_string();
            source = s.source();
        }
        if e.is_timeout() {
            self.error(UpstreamErrorKind::Timeout, cause)
        } else if e.is_connect() || e.is_request() {
            self.error(UpstreamErrorKind::Unreachable, cause)
        } else {
            self.error(UpstreamErrorKind::Closed, cause)
        }
    }
}

/// The message inside an error body in either dialect, or the body's first line.
pub(crate) fn error_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        if let Some(msg) = error_in_json(&v) {
            return Some(msg);
        }
    }
    let mut line: String = body.lines().next().unwrap_or_default().to_string();
    if line.len() > MAX_ERROR_BODY {
        let mut cut = MAX_ERROR_BODY;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    Some(line)
}

/// `{"error":"…"}` (Ollama) or `{"error":{"message":"…"}}` (OpenAI).
pub(crate) fn error_in_json(v: &Value) -> Option<String> {
    match v.get("error")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => Some(
            o.get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string(),
        ),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_from_both_dialects() {
        assert_eq!(
            error_message(r#"{"error":"model 'x' not found"}"#).as_deref(),
            Some("model 'x' not found")
        );
        assert_eq!(
            error_message(r#"{"error":{"message":"bad","type":"t"}}"#).as_deref(),
            Some("bad")
        );
        assert_eq!(
            error_message("Internal Server Error\nmore").as_deref(),
            Some("Internal Server Error")
        );
        assert_eq!(error_message("   "), None);
        let long = "é".repeat(400);
        assert!(error_message(&long).unwrap().ends_with('…'));
    }
}

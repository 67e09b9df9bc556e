//! The HTTP plumbing both adapters share: one connection pool, timeouts, and turning
//! transport failures and error statuses into `UpstreamError`.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use reqwest::{Client, Method, RequestBuilder, Response, Url};
use serde_json::Value;

use super::{UpstreamError, UpstreamErrorKind};

/// Longest slice of an upstream error body quoted in a message.
const MAX_ERROR_BODY: usize = 500;

/// Most of an upstream error body that is read (the rest is not waited for).
const MAX_ERROR_READ: usize = 64 * 1024;

/// Most bytes of a reply that describes (a model list, a model card, a token count).
pub(crate) const MAX_SMALL_REPLY: usize = 4 * 1024 * 1024;

/// Longest a reply that describes may take to arrive whole, once its headers came (or
/// the first-byte timeout, when shorter).
const SMALL_REPLY_WITHIN: Duration = Duration::from_secs(10);

/// Largest SSE event / NDJSON line accepted unless `llm.max_chunk_bytes` says otherwise.
pub(crate) const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Clone)]
pub(crate) struct Upstream {
    client: Client,
    base: String,
    /// `base` as logs, errors, `/ready` and metric labels show it (no credentials).
    shown: String,
    api_key: Option<String>,
    first_byte_timeout: Duration,
    max_line_bytes: usize,
    /// The URLs asked so far, each parsed once: reqwest parses a URL given as a string on
    /// every request (a few thousand instructions, about 2 % of a relayed answer).
    parsed: Arc<RwLock<Vec<(String, Url)>>>,
}

/// Most distinct paths whose parsed URL is kept (an adapter asks a handful).
const MAX_PARSED: usize = 16;

impl Upstream {
    pub(crate) fn new(
        base_url: &str,
        api_key: Option<&str>,
        connect_timeout: Duration,
        first_byte_timeout: Duration,
    ) -> anyhow::Result<Self> {
        let client = Client::builder()
            // A redirect would send the prompt (and the key) to another host.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        Ok(Self {
            client,
            base: base_url.trim_end_matches('/').to_string(),
            shown: without_credentials(base_url.trim_end_matches('/')),
            api_key: api_key.map(str::to_string),
            first_byte_timeout,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            parsed: Arc::default(),
        })
    }

    /// Caps one SSE event or NDJSON line (`llm.max_chunk_bytes`).
    pub(crate) fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max;
        self
    }

    pub(crate) fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }

    pub(crate) fn first_byte_timeout(&self) -> Duration {
        self.first_byte_timeout
    }

    /// How long a reply that describes (a model list, a model card, a count) may take to
    /// arrive whole once its headers came.
    pub(crate) fn small_reply_within(&self) -> Duration {
        self.first_byte_timeout.min(SMALL_REPLY_WITHIN)
    }

    /// The error for a line or event longer than `max_line_bytes`.
    pub(crate) fn too_long(&self) -> UpstreamError {
        self.error(
            UpstreamErrorKind::Protocol,
            format!(
                "an event or line longer than {} bytes (llm.max_chunk_bytes)",
                self.max_line_bytes
            ),
        )
    }

    /// The base URL to show: any user and password in it replaced by `***`.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request to `path` under the base URL, its URL parsed once per path. A base URL
    /// that does not parse goes to reqwest as written, which reports why.
    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let known = {
            let parsed = self.parsed.read().unwrap_or_else(PoisonError::into_inner);
            parsed
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, u)| u.clone())
        };
        if let Some(url) = known {
            return self.client.request(method, url);
        }
        let url = self.url(path);
        match Url::parse(&url) {
            Ok(parsed) => {
                let mut all = self.parsed.write().unwrap_or_else(PoisonError::into_inner);
                if all.len() < MAX_PARSED && !all.iter().any(|(p, _)| p == path) {
                    all.push((path.to_string(), parsed.clone()));
                }
                self.client.request(method, parsed)
            }
            Err(_) => self.client.request(method, url),
        }
    }

    pub(crate) fn get(&self, path: &str) -> RequestBuilder {
        self.authorize(self.request(Method::GET, path))
    }

    pub(crate) fn post_json(&self, path: &str, body: &Value) -> RequestBuilder {
        self.authorize(self.request(Method::POST, path).json(body))
    }

    /// A POST of JSON already written.
    pub(crate) fn post_body(&self, path: &str, body: Vec<u8>) -> RequestBuilder {
        let request = self
            .request(Method::POST, path)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        self.authorize(request)
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
        self.send_within(rb, Some(self.first_byte_timeout)).await
    }

    /// Sends a request for a whole answer, whose headers come when the answer is done:
    /// no first-byte bound (the caller bounds the whole answer).
    pub(crate) async fn send_whole(&self, rb: RequestBuilder) -> Result<Response, UpstreamError> {
        self.send_within(rb, None).await
    }

    async fn send_within(
        &self,
        rb: RequestBuilder,
        headers_within: Option<Duration>,
    ) -> Result<Response, UpstreamError> {
        let rb = with_trace_context(rb);
        let sent = match headers_within {
            Some(within) => tokio::time::timeout(within, rb.send()).await,
            None => Ok(rb.send().await),
        };
        let response = match sent {
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
        if status.is_redirection() {
            return Err(self.error(
                UpstreamErrorKind::Status(status.as_u16()),
                format!(
                    "a redirect (HTTP {}), which the gateway does not follow (it would send the request to another address): set the base URL to where it points",
                    status.as_u16()
                ),
            ));
        }
        let retry_after = matches!(status.as_u16(), 429 | 503)
            .then(|| response.headers().get(reqwest::header::RETRY_AFTER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, std::time::SystemTime::now()));
        // What an error says is in its first bytes: the rest is neither read nor kept.
        let body = match read_capped(response, MAX_ERROR_READ, self.small_reply_within()).await {
            Ok((bytes, _)) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(_) => String::new(),
        };
        let mut error = self.error(
            UpstreamErrorKind::Status(status.as_u16()),
            error_message(&body).unwrap_or_else(|| {
                status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_ascii_lowercase()
            }),
        );
        error.retry_after = retry_after;
        Err(error)
    }

    /// A reply's body as JSON: at most `max` bytes, arriving within `within`; more, later
    /// or unreadable is a `Protocol` (or `Timeout`) error.
    pub(crate) async fn json(
        &self,
        response: Response,
        max: usize,
        within: Duration,
    ) -> Result<Value, UpstreamError> {
        let (bytes, whole) = read_capped(response, max, within)
            .await
            .map_err(|e| match e {
                Capped::Late => self.error(
                    UpstreamErrorKind::Timeout,
                    format!("the reply did not arrive within {} s", within.as_secs()),
                ),
                Capped::Broken(e) => self.transport_error(&e),
            })?;
        if !whole {
            return Err(self.error(
                UpstreamErrorKind::Protocol,
                format!("a reply larger than {max} bytes"),
            ));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| self.error(UpstreamErrorKind::Protocol, format!("not JSON: {e}")))
    }

    pub(crate) fn error(
        &self,
        kind: UpstreamErrorKind,
        detail: impl Into<String>,
    ) -> UpstreamError {
        UpstreamError::new(kind, &self.shown, detail)
    }

    /// A body that broke off while being read (`Closed`).
    pub(crate) fn closed(&self, e: &reqwest::Error) -> UpstreamError {
        let mut err = self.transport_error(e);
        err.kind = UpstreamErrorKind::Closed;
        err
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

/// `url` with any user and password in it replaced by `***`.
fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_password(None);
            let _ = parsed.set_username("***");
            let shown = parsed.to_string();
            // `Url` adds a `/` to a bare host; the base URL had none.
            if url.ends_with('/') {
                shown
            } else {
                shown.trim_end_matches('/').to_string()
            }
        }
        _ => url.to_string(),
    }
}

/// A whole response body (one answer), cut off with a `Protocol` error past
/// `max_line_bytes`; a transport failure is `Closed`.
pub(crate) async fn whole_body(
    response: Response,
    up: &Upstream,
) -> Result<bytes::Bytes, UpstreamError> {
    use futures::StreamExt;
    let mut body = response.bytes_stream();
    let mut whole = bytes::BytesMut::new();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|e| up.closed(&e))?;
        if whole.len() + piece.len() > up.max_line_bytes {
            return Err(up.too_long());
        }
        whole.extend_from_slice(&piece);
    }
    Ok(whole.freeze())
}

/// Why a capped read gave nothing.
pub(crate) enum Capped {
    /// The body did not arrive within the deadline.
    Late,
    Broken(reqwest::Error),
}

/// At most `max` bytes of a body, read piece by piece within `within`, and whether that
/// was all of it (the rest is not read: dropping the response closes it).
pub(crate) async fn read_capped(
    response: Response,
    max: usize,
    within: Duration,
) -> Result<(bytes::Bytes, bool), Capped> {
    use futures::StreamExt;
    let read = async {
        let mut body = response.bytes_stream();
        let mut have = bytes::BytesMut::new();
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(Capped::Broken)?;
            if have.len() + piece.len() > max {
                let room = max - have.len();
                have.extend_from_slice(&piece[..room]);
                return Ok((have.freeze(), false));
            }
            have.extend_from_slice(&piece);
        }
        Ok((have.freeze(), true))
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or(Err(Capped::Late))
}

/// A `Retry-After` value (delay in seconds or an HTTP date) as a delay from `now`.
pub(crate) fn retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The message inside an error body in either dialect, or the body's first line.
pub(crate) fn error_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        if let Some(msg) = error_in_json(&v) {
            return Some(shortened(msg, 4 * MAX_ERROR_BODY));
        }
    }
    Some(shortened(
        body.lines().next().unwrap_or_default().to_string(),
        MAX_ERROR_BODY,
    ))
}

/// `text` cut to at most `max` bytes (at a character boundary), marked when cut, on one
/// line (an upstream's message goes into log lines).
fn shortened(text: String, max: usize) -> String {
    let mut text = if text.contains(['\n', '\r']) {
        text.replace(['\n', '\r'], " ")
    } else {
        text
    };
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// `{"error":"…"}` (Ollama) or `{"error":{"message":"…"}}` (OpenAI).
pub(crate) fn error_in_json(v: &Value) -> Option<String> {
    error_text(v.get("error")?)
}

/// What an `error` field says: itself (Ollama) or its `message` (OpenAI).
pub(crate) fn error_text(error: &Value) -> Option<String> {
    match error {
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

/// The current span as an outgoing request's parent: the W3C `traceparent` header's
/// value, and `tracestate`'s when the span carries one; `None` without a valid current
/// span. The same text the SDK's `TraceContextPropagator` writes (it also writes an empty
/// `tracestate`), without its formatting machinery (a third of tracing's cost per
/// passthrough answer went to it).
fn traceparent() -> Option<(http::HeaderValue, Option<http::HeaderValue>)> {
    /// Each byte's two hex digits, looked up at once.
    const HEX: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0; 2]; 256];
        let mut b = 0;
        while b < 256 {
            pairs[b] = [DIGITS[b >> 4], DIGITS[b & 0xf]];
            b += 1;
        }
        pairs
    };
    use opentelemetry::trace::TraceContextExt as _;
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let context = span.span_context();
    if !context.is_valid() {
        return None;
    }
    // `00-{trace id}-{span id}-{flags}`, in hex.
    let mut out = *b"00-00000000000000000000000000000000-0000000000000000-00";
    let hex = |bytes: &[u8], out: &mut [u8]| {
        for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
            pair.copy_from_slice(&HEX[usize::from(*b)]);
        }
    };
    hex(&context.trace_id().to_bytes(), &mut out[3..35]);
    hex(&context.span_id().to_bytes(), &mut out[36..52]);
    let flags = context.trace_flags() & opentelemetry::trace::TraceFlags::SAMPLED;
    hex(&[flags.to_u8()], &mut out[53..55]);
    let parent = http::HeaderValue::from_bytes(&out).ok()?;
    let state = context.trace_state().header();
    let state = match state.is_empty() {
        true => None,
        false => http::HeaderValue::from_str(&state).ok(),
    };
    Some((parent, state))
}

/// The current trace span (the OpenTelemetry context the caller polls this request in,
/// when traces are exported) as the request's parent: a W3C `traceparent` header.
/// The W3C trace context's header names, made once, not parsed from text on every request.
pub(crate) static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
static TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

fn with_trace_context(rb: RequestBuilder) -> RequestBuilder {
    match traceparent() {
        Some((parent, Some(state))) => rb
            .header(TRACEPARENT.clone(), parent)
            .header(TRACESTATE.clone(), state),
        Some((parent, None)) => rb.header(TRACEPARENT.clone(), parent),
        None => rb,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_what_the_sdk_propagator_writes() {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        assert!(traceparent().is_none(), "no span, no header");
        for (flags, state) in [
            (TraceFlags::SAMPLED, ""),
            (TraceFlags::default(), "vendor=opaque,other=1"),
        ] {
            let context = SpanContext::new(
                TraceId::from(0x0af7651916cd43dd8448eb211c80319c_u128),
                SpanId::from(0x00f067aa0ba902b7_u64),
                flags,
                true,
                TraceState::from_key_value(state.split(',').filter_map(|kv| kv.split_once('=')))
                    .unwrap(),
            );
            use opentelemetry::propagation::TextMapPropagator as _;
            use opentelemetry::trace::TraceContextExt as _;
            let cx = opentelemetry::Context::new().with_remote_span_context(context);
            let mut expected = std::collections::HashMap::new();
            opentelemetry_sdk::propagation::TraceContextPropagator::new()
                .inject_context(&cx, &mut expected);
            let _attached = cx.attach();
            let (parent, ours_state) = traceparent().unwrap();
            assert_eq!(parent.to_str().unwrap(), expected["traceparent"]);
            // The SDK also sends an empty `tracestate`; an empty one is left out here.
            assert_eq!(
                ours_state.map(|s| s.to_str().unwrap().to_string()),
                expected
                    .get("tracestate")
                    .filter(|s| !s.is_empty())
                    .cloned()
            );
        }
    }

    #[test]
    fn credentials_in_a_base_url_are_never_shown() {
        let d = Duration::from_secs(1);
        let up = Upstream::new("https://bob:s3cret@llm.example.com/v1/", None, d, d).unwrap();
        assert_eq!(up.shown(), "https://***@llm.example.com/v1");
        assert_eq!(
            up.url("/models"),
            "https://bob:s3cret@llm.example.com/v1/models"
        );
        let e = up.error(UpstreamErrorKind::Unreachable, "refused");
        assert_eq!(e.url, "https://***@llm.example.com/v1");
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert_eq!(
            without_credentials("http://127.0.0.1:11434"),
            "http://127.0.0.1:11434"
        );
        assert_eq!(without_credentials("http://:pw@h:1"), "http://***@h:1");
    }

    #[test]
    fn each_path_is_parsed_once_and_requests_go_where_the_written_url_points() {
        let d = Duration::from_secs(1);
        let up = Upstream::new("http://bob:pw@127.0.0.1:9/v1/", Some("sk"), d, d).unwrap();
        for _ in 0..3 {
            let sent = up
                .post_body("/chat/completions", b"{}".to_vec())
                .build()
                .unwrap();
            // The credentials in the base URL still become the request's basic auth.
            assert_eq!(
                sent.url().as_str(),
                "http://127.0.0.1:9/v1/chat/completions"
            );
            assert!(sent.headers()["authorization"]
                .to_str()
                .unwrap()
                .starts_with("Basic "));
            assert_eq!(sent.method(), Method::POST);
        }
        let listed = up.get("/models").build().unwrap();
        assert_eq!(listed.url().as_str(), "http://127.0.0.1:9/v1/models");
        assert_eq!(up.parsed.read().unwrap().len(), 2);
        // A base URL that does not parse is reported by reqwest, as before.
        let bad = Upstream::new("not a url", None, d, d).unwrap();
        assert!(bad.get("/models").build().is_err());
        assert!(bad.parsed.read().unwrap().is_empty());
    }

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

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after("0", now), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(90)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-3", now), None);
    }
}

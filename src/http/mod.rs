//! The HTTP surface: one router, the two dialects (`openai`, `ollama`), health, and the
//! middleware they share (request ids, access log, keys, rate limits, body limit), and
//! the server that serves them (plain or TLS).

mod auth;
mod embeddings;
mod error;
mod eval;
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod limits;
mod ollama;
mod openai;
mod scrape;
pub mod server;
pub mod tls;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

use crate::app::AppState;
use crate::error::GatewayError;
use crate::llm::Usage;
use crate::telemetry::{self, UpstreamClock};

pub use error::error_response;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Which API family a route belongs to; decides the error shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Ollama,
}

impl Dialect {
    pub fn of_path(path: &str) -> Self {
        if path.starts_with("/api/") {
            Dialect::Ollama
        } else {
            Dialect::OpenAi
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Ollama => "ollama",
        }
    }
}

pub fn router(state: AppState) -> Router {
    telemetry::install();
    Router::new()
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/models", get(openai::list_models))
        .route("/v1/models/{*id}", get(openai::get_model))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/version", get(ollama::version))
        .route("/api/ps", get(ollama::ps))
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/api/embed", post(embeddings::ollama_embed))
        .route("/api/embeddings", post(embeddings::ollama_legacy))
        .route("/v1/eval", post(eval::evaluate))
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/metrics", get(scrape::metrics))
        .route("/", get(health::root))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Inside the key check: only accepted keys are counted.
        .layer(middleware::from_fn_with_state(
            limits::Limits::from_settings(&state.settings.server),
            limits::enforce,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        // Outside the key check: browsers send preflights without credentials.
        .layer(cors(&state.settings.server.cors_origins))
        .layer(middleware::from_fn(access_log))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuid))
        .with_state(state)
}

/// CORS for browser UIs, from `server.cors_origins` (validated at start-up).
fn cors(origins: &[String]) -> tower::util::Either<CorsLayer, tower::layer::util::Identity> {
    use axum::http::{header, Method};
    if origins.is_empty() {
        return tower::util::Either::Right(tower::layer::util::Identity::new());
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    tower::util::Either::Left(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                REQUEST_ID.clone(),
            ])
            // What a browser UI needs to read back off a 429 to wait before retrying.
            .expose_headers([
                REQUEST_ID.clone(),
                header::RETRY_AFTER,
                limits::LIMIT_REQUESTS.clone(),
                limits::REMAINING_REQUESTS.clone(),
                limits::RESET_REQUESTS.clone(),
            ])
            .max_age(std::time::Duration::from_secs(3600)),
    )
}

async fn not_found(req: Request) -> Response {
    let path = req.uri().path();
    error_response(Dialect::of_path(path), &GatewayError::route_not_found(path))
}

async fn method_not_allowed(req: Request) -> Response {
    let path = req.uri().path();
    error_response(Dialect::of_path(path), &GatewayError::method_not_allowed())
}

/// A tool call in a client's message, in either dialect.
#[derive(serde::Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(serde::Deserialize)]
struct WireFunction {
    name: String,
    /// A JSON string (OpenAI) or an object (Ollama).
    arguments: Option<serde_json::Value>,
}

impl WireToolCall {
    fn into_tool_call(self) -> crate::llm::ToolCall {
        crate::llm::ToolCall::from_wire(self.id, self.function.name, self.function.arguments)
    }
}

/// Marks a response whose request a `RequestLog` already logs (chat routes).
#[derive(Clone, Copy)]
struct LoggedByHandler;

/// One line for every request that is not a chat request (those log their own line
/// when their answer ends, with TTFT and token counts).
async fn access_log(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let request_id = request_id(req.headers());
    let response = next.run(req).await;
    if response.extensions().get::<LoggedByHandler>().is_none() {
        telemetry::request(route.into(), response.status().as_u16(), started.elapsed());
        tracing::info!(
            request_id,
            %method,
            path,
            status = response.status().as_u16(),
            latency_ms = started.elapsed().as_secs_f64() * 1e3,
            "request"
        );
    }
    response
}

fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string()
}

/// A string or a list of strings (OpenAI `stop`, embedding `input`).
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// The request-size limits beyond the body size: how many messages, how long each.
fn check_limits(
    server: &crate::config::ServerSettings,
    turn: &crate::pipeline::ChatTurn,
) -> Result<(), GatewayError> {
    use crate::llm::Input;
    let texts: Vec<(String, usize)> = match &turn.request.input {
        Input::Chat(messages) => {
            if messages.len() > server.max_messages {
                return Err(GatewayError::invalid(
                    "messages",
                    format!(
                        "{} messages is more than the {} accepted (server.max_messages)",
                        messages.len(),
                        server.max_messages
                    ),
                ));
            }
            messages
                .iter()
                .enumerate()
                .map(|(i, m)| (format!("messages[{i}].content"), m.content.chars().count()))
                .collect()
        }
        Input::Prompt { prompt, .. } => vec![("prompt".into(), prompt.chars().count())],
    };
    for (field, chars) in texts {
        check_length(server, &field, chars)?;
    }
    Ok(())
}

/// One text of a request is at most `server.max_message_chars` characters long.
fn check_length(
    server: &crate::config::ServerSettings,
    field: &str,
    chars: usize,
) -> Result<(), GatewayError> {
    if chars > server.max_message_chars {
        return Err(GatewayError::invalid(
            field,
            format!(
                "{field} has {chars} characters, more than the {} accepted (server.max_message_chars)",
                server.max_message_chars
            ),
        ));
    }
    Ok(())
}

/// Reads and parses a JSON body, in the limits the settings give. Errors name the field.
async fn read_json<T: DeserializeOwned>(state: &AppState, body: Body) -> Result<T, GatewayError> {
    parse_json(&read_body(state, body).await?)
}

/// Reads a body, in the size limit the settings give.
async fn read_body(state: &AppState, body: Body) -> Result<bytes::Bytes, GatewayError> {
    let limit = state.settings.server.max_body_bytes;
    let secs = state.settings.server.body_read_timeout_secs;
    let read = axum::body::to_bytes(body, limit);
    let bytes = tokio::time::timeout(std::time::Duration::from_secs(secs), read)
        .await
        .map_err(|_| GatewayError::request_timeout(secs))?
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                GatewayError::payload_too_large(limit)
            } else {
                GatewayError::invalid("body", format!("could not read the request body: {e}"))
            }
        })?;
    Ok(bytes)
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, GatewayError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(GatewayError::invalid(
            "body",
            "the request body is empty; send a JSON object",
        ));
    }
    // JSON is UTF-8 (RFC 8259); serde_json checks only the strings it keeps, so bytes in an
    // ignored field would otherwise pass unseen.
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(GatewayError::invalid(
            "body",
            format!(
                "the request body is not valid JSON: not UTF-8 at byte {}",
                e.valid_up_to()
            ),
        ));
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{')
        && serde_json::from_slice::<serde_json::Value>(bytes).is_ok()
    {
        return Err(GatewayError::invalid(
            "body",
            "the request body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() {
            GatewayError::invalid(
                "body",
                format!("the request body is not valid JSON: {inner}"),
            )
        } else if path == "." {
            GatewayError::invalid("body", format!("invalid request: {inner}"))
        } else {
            GatewayError::invalid(path.clone(), format!("invalid value for '{path}': {inner}"))
        }
    })?;
    // Only whitespace may follow the object: `{…} garbage` or two objects is not a request.
    de.end().map_err(|e| {
        GatewayError::invalid("body", format!("the request body is not valid JSON: {e}"))
    })?;
    Ok(value)
}

/// The log line of one chat request, written when it is dropped: when the answer ended,
/// failed, or the client went away. Never holds message content.
pub(crate) struct RequestLog {
    request_id: String,
    dialect: Dialect,
    route: &'static str,
    model: String,
    stream: bool,
    started: Instant,
    status: u16,
    first_token: Option<Instant>,
    deltas: u64,
    usage: Option<Usage>,
    outcome: &'static str,
    /// The error's code (never its message, which may quote the upstream).
    error: Option<&'static str>,
    /// The caller's stream slot, held while the streamed answer lives.
    stream_slot: Option<limits::StreamSlot>,
    /// Time spent waiting on the upstream model (the rest is the gateway's).
    upstream: Arc<UpstreamClock>,
    /// The kind of upstream failure that ended the request.
    upstream_error: Option<&'static str>,
}

impl RequestLog {
    pub(crate) fn new(headers: &HeaderMap, dialect: Dialect, route: &'static str) -> Self {
        Self {
            request_id: request_id(headers),
            dialect,
            route,
            model: String::new(),
            stream: false,
            started: Instant::now(),
            status: 200,
            first_token: None,
            deltas: 0,
            usage: None,
            // Still "client_disconnected" if the stream is dropped before it ends.
            outcome: "client_disconnected",
            error: None,
            stream_slot: None,
            upstream: Arc::default(),
            upstream_error: None,
        }
    }

    /// What the pipeline adds its upstream waits to.
    pub(crate) fn upstream_clock(&self) -> Arc<UpstreamClock> {
        self.upstream.clone()
    }

    pub(crate) fn request(&mut self, model: &str, stream: bool) {
        self.model = model.to_string();
        self.stream = stream;
    }

    pub(crate) fn delta(&mut self) {
        self.deltas += 1;
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
    }

    /// Keeps a stream slot until this log is dropped with its stream.
    pub(crate) fn hold(&mut self, slot: limits::StreamSlot) {
        self.stream_slot = Some(slot);
    }

    pub(crate) fn first_token(&self) -> Option<Instant> {
        self.first_token
    }

    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    pub(crate) fn done(&mut self, usage: Usage) {
        self.usage = Some(usage);
        self.outcome = "completed";
        // A whole answer reaches the client at once: its first token comes with it.
        if !self.stream && self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
    }

    pub(crate) fn failed(&mut self, e: &GatewayError, in_stream: bool) {
        if !in_stream {
            self.status = e.status.as_u16();
        }
        self.outcome = if in_stream { "stream_error" } else { "error" };
        self.error = Some(e.code.unwrap_or(e.kind));
        self.upstream_error = e.upstream.as_ref().and_then(telemetry::upstream_error_kind);
    }

    /// A response built here is logged by this log, not by the access log.
    pub(crate) fn mark(response: &mut Response) {
        response.extensions_mut().insert(LoggedByHandler);
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let total = self.started.elapsed();
        let ttft = self.first_token.map(|t| t - self.started);
        telemetry::ChatRequest {
            route: self.route,
            model: telemetry::model_label(&self.model, self.status),
            status: self.status,
            total,
            ttft,
            upstream: self.upstream.total(),
            tokens: match (self.usage, self.deltas) {
                (Some(u), _) => Some(u.completion_tokens),
                (None, 0) => None,
                (None, deltas) => Some(deltas),
            },
            upstream_error: self.upstream_error,
        }
        .record();
        let ttft_ms = ttft.map(|t| t.as_secs_f64() * 1e3);
        tracing::info!(
            request_id = self.request_id,
            dialect = self.dialect.as_str(),
            route = self.route,
            model = self.model,
            stream = self.stream,
            status = self.status,
            outcome = self.outcome,
            latency_ms = total.as_secs_f64() * 1e3,
            ttft_ms,
            deltas = self.deltas,
            completion_tokens = self.usage.map(|u| u.completion_tokens),
            prompt_tokens = self.usage.map(|u| u.prompt_tokens),
            error = self.error,
            "chat request"
        );
    }
}

/// Renders an error for a chat route and logs it.
fn failed(mut log: RequestLog, e: GatewayError) -> Response {
    log.failed(&e, false);
    let mut response = error_response(log.dialect, &e);
    RequestLog::mark(&mut response);
    response
}

/// A streamed body with the given content type.
fn streaming_response(
    content_type: &'static str,
    body: impl futures::Stream<Item = bytes::Bytes> + Send + 'static,
) -> Response {
    use futures::StreamExt;
    let open = telemetry::ActiveStream::open();
    let mut response = Response::new(Body::from_stream(body.map(move |bytes| {
        let _open = &open;
        Ok::<_, std::convert::Infallible>(bytes)
    })));
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(content_type),
    );
    headers.insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        axum::http::HeaderValue::from_static("no"),
    );
    RequestLog::mark(&mut response);
    response
}

/// A JSON response for a chat route (logged by its `RequestLog`).
fn json_response(value: serde_json::Value) -> Response {
    let mut response = (StatusCode::OK, axum::Json(value)).into_response();
    RequestLog::mark(&mut response);
    response
}

/// Seconds since the epoch, for `created` fields.
fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// RFC 3339 with nanoseconds, for Ollama's `created_at`.
fn rfc3339_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct T {
        messages: Vec<M>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct M {
        role: String,
    }

    #[test]
    fn json_errors_name_the_field() {
        let e = parse_json::<T>(br#"{"messages":[{"role":1}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        assert!(e.message.contains("messages[0].role"), "{}", e.message);
        let e = parse_json::<T>(b"{nope").unwrap_err();
        assert!(e.message.contains("not valid JSON"));
        let e = parse_json::<T>(b"{}").unwrap_err();
        assert!(e.message.contains("messages"), "{}", e.message);
        let e = parse_json::<T>(b"").unwrap_err();
        assert!(e.message.contains("empty"));
    }

    /// Found by the `openai_request` fuzz target: a valid object followed by anything
    /// else was accepted as if the rest were not there.
    #[test]
    fn nothing_but_whitespace_may_follow_the_object() {
        for body in [
            &br#"{"messages":[{"role":"user"}]} {"messages":[]}"#[..],
            br#"{"messages":[{"role":"user"}]}}"#,
            br#"{"messages":[{"role":"user"}]}x"#,
        ] {
            let e = parse_json::<T>(body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("body"));
            assert!(e.message.contains("trailing characters"), "{}", e.message);
        }
        let ok = parse_json::<T>(b" {\"messages\":[{\"role\":\"user\"}]} \r\n\t").unwrap();
        assert_eq!(ok.messages.len(), 1);
    }

    /// Found by both request fuzz targets: invalid UTF-8 in a field the gateway ignores
    /// (an unknown key or its value) was accepted; in a field it reads it was refused.
    #[test]
    fn a_body_that_is_not_utf8_is_refused_wherever_the_bytes_are() {
        for body in [
            &b"{\"messages\":[{\"role\":\"user\",\"coltent\":\"W\xa1y\"}]}"[..],
            b"{\"messages\":[{\"role\":\"user\",\"argument\x8b\":1}]}",
            b"{\"messages\":[{\"role\":\"us\xffer\"}]}",
        ] {
            let e = parse_json::<T>(body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("body"));
            assert!(e.message.contains("not UTF-8 at byte"), "{}", e.message);
        }
    }
}

//! Test doubles and helpers shared by the integration tests and the benchmark.
//!
//! `ScriptedUpstream` is a real HTTP server on 127.0.0.1 that speaks Ollama's NDJSON
//! (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`) and OpenAI's SSE
//! (`/v1/chat/completions`, `/v1/completions`, `/v1/models`) byte for byte, as the real
//! servers frame them. Each request takes the next scripted `Reply` (or the default one),
//! is recorded, and its stream reports whether the client went away before the end.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use assist_gateway::config::{Provider, Settings};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post as route_post};
use axum::Router;
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

mod servers;
#[allow(unused_imports)]
pub use servers::{QdrantTestServer, RedisServer};

pub const UPSTREAM_MODEL: &str = "up-model:latest";

/// What the scripted upstream does with one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Streams these text pieces, `delay` apart, then finishes with `finish`.
    Tokens {
        tokens: Vec<String>,
        delay: Duration,
        finish: &'static str,
    },
    /// Asks for one function call.
    ToolCall { name: String, arguments: Value },
    /// Answers with this status and body (empty body allowed).
    Status { status: u16, body: String },
    /// Waits this long before sending headers.
    HangBeforeHeaders(Duration),
    /// Streams these pieces, then closes the connection without a final chunk.
    DropAfter(Vec<String>),
    /// Streams these pieces, then a line that is not the wire format.
    GarbageAfter(Vec<String>),
    /// Streams these pieces, then an error in the dialect's in-stream shape.
    ErrorAfter(Vec<String>, String),
    /// Streams a token every `delay`, forever.
    Endless(Duration),
    /// Streams these pieces at once, goes silent for the duration, then sends "late"
    /// and finishes.
    StallAfter(Vec<String>, Duration),
    /// Streams these pieces `delay` apart, goes silent for `silence`, then sends "late"
    /// and finishes.
    SlowThenStall {
        tokens: Vec<String>,
        delay: Duration,
        silence: Duration,
    },
    /// Answers 200 with this content type and exactly this body (e.g. hand-made SSE).
    Raw {
        content_type: &'static str,
        body: String,
    },
    /// Answers with this status, body and a `Retry-After: {retry_after}` header.
    RetryAfter {
        status: u16,
        body: String,
        retry_after: String,
    },
    /// Answers with this status and a body of this many bytes, streamed (a hostile or
    /// broken upstream's error page).
    HugeStatus { status: u16, bytes: usize },
    /// Streams pieces of this many bytes, as fast as they are taken, forever.
    Flood(usize),
    /// Answers 307 pointing at this URL.
    Redirect(String),
}

/// What the upstream's describing endpoints (`/api/tags`, `/v1/models`, `/api/show`, the
/// tokenizer) do instead of answering (see `ScriptedUpstream::hostile`).
#[derive(Clone, Copy, Debug)]
pub enum Hostile {
    /// A body of this many bytes, streamed.
    Huge(usize),
    /// Half a reply, then silence for this long.
    StallMidBody(Duration),
}

/// A streamed body: `prefix`, then digits up to `bytes` in all.
fn huge_body(prefix: &'static str, bytes: usize) -> Body {
    let piece = Bytes::from(vec![b'7'; 64 * 1024]);
    let pieces = bytes.saturating_sub(prefix.len()).div_ceil(piece.len());
    let body = futures::stream::iter(
        std::iter::once(Bytes::from_static(prefix.as_bytes()))
            .chain(std::iter::repeat_n(piece, pieces))
            .map(Ok::<_, std::io::Error>),
    );
    Body::from_stream(body)
}

/// What a describing endpoint answers when the upstream is set hostile.
fn hostile_reply(shared: &Shared, prefix: &'static str) -> Option<Response> {
    let hostile = (*shared.hostile.lock().unwrap())?;
    Some(match hostile {
        Hostile::Huge(bytes) => Response::builder()
            .header("content-type", "application/json")
            .body(huge_body(prefix, bytes))
            .unwrap(),
        Hostile::StallMidBody(silence) => {
            let body = async_stream::stream! {
                yield Ok::<Bytes, std::io::Error>(Bytes::from_static(prefix.as_bytes()));
                tokio::time::sleep(silence).await;
                yield Ok(Bytes::from_static(b"]}"));
            };
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from_stream(body))
                .unwrap()
        }
    })
}

impl Reply {
    pub fn tokens(tokens: &[&str]) -> Self {
        Reply::Tokens {
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            delay: Duration::ZERO,
            finish: "stop",
        }
    }
}

/// One request the upstream received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    /// Only requests with tools take scripted replies (see `script_for_tools_only`).
    script_for_tools_only: std::sync::atomic::AtomicBool,
    default: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    /// Streams whose body was dropped before it ended (client went away).
    cancelled: AtomicUsize,
    /// Streams that sent their last byte.
    completed: AtomicUsize,
    /// A model served besides `UPSTREAM_MODEL` (see `serve_model`).
    also_serves: Mutex<Option<String>>,
    /// How long each embedding request takes (see `slow_embeddings`).
    embed_delay: Mutex<Duration>,
    /// A context window the upstream enforces (see `limit_window`).
    window: Mutex<Option<Window>>,
    /// Texts counted by the tokenizer endpoint (kept apart from `requests`).
    tokenized: Mutex<Vec<String>>,
    /// Model listings served (`/api/tags`, `/v1/models`).
    listings: AtomicUsize,
    /// What the describing endpoints do instead of answering (see `hostile`).
    hostile: Mutex<Option<Hostile>>,
}

/// A model window enforced as real servers do, with a tokenizer denser than the gateway's
/// estimate when `chars_per_token` is small.
#[derive(Clone, Debug)]
pub struct Window {
    /// Prompt plus requested answer tokens allowed.
    pub tokens: usize,
    pub chars_per_token: f64,
    /// Serves llama-cpp-python's `POST /extras/tokenize/count`.
    pub tokenizer: bool,
    pub overflow: Overflow,
}

/// How an overflowing prompt is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// HTTP 400 with llama-cpp-python's body (OpenAI paths) or Ollama's error.
    Status,
    /// What llama-cpp-python does with a streamed request: 200, SSE headers, then
    /// nothing.
    EmptyStream,
}

impl Window {
    /// The upstream's count of a text.
    pub fn count(&self, text: &str) -> usize {
        (text.chars().count() as f64 / self.chars_per_token).ceil() as usize
    }

    /// The upstream's count of a request's prompt: the text plus 5 template tokens a
    /// message (ChatML).
    pub fn prompt_tokens(&self, body: &Value) -> usize {
        match body["messages"].as_array() {
            Some(messages) => messages
                .iter()
                .map(|m| self.count(m["content"].as_str().unwrap_or("")) + 5)
                .sum(),
            None => self.count(body["prompt"].as_str().unwrap_or("")),
        }
    }
}

impl Shared {
    /// Keeps a request for the test to inspect; returns its JSON body (null if not JSON).
    fn record(&self, uri: &Uri, headers: HeaderMap, body: &[u8]) -> Value {
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        self.requests.lock().unwrap().push(Recorded {
            path: uri.path().to_string(),
            headers,
            body: body.clone(),
        });
        body
    }
}

pub struct ScriptedUpstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl ScriptedUpstream {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/api/chat", route_post(handle))
            .route("/api/generate", route_post(handle))
            .route("/api/show", route_post(show))
            .route("/api/tags", get(tags))
            .route("/v1/chat/completions", route_post(handle))
            .route("/v1/completions", route_post(handle))
            .route("/v1/models", get(models))
            .route("/extras/tokenize/count", route_post(tokenize))
            .route("/api/embed", route_post(embed))
            .route("/v1/embeddings", route_post(embed))
            .with_state(shared.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        // Real upstreams (Ollama is Go, which sets it by default) disable Nagle's algorithm.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            addr,
            shared,
            _stop: stop,
        }
    }

    /// The root URL (Ollama's base URL); OpenAI clients use `{root}/v1`.
    pub fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next request gets this reply (queued in order).
    pub fn push(&self, reply: Reply) {
        self.shared.script.lock().unwrap().push_back(reply);
    }

    /// From now on only requests that offer tools take the scripted replies; the others
    /// (an agent's side tasks: titles, summaries) get the default one.
    pub fn script_for_tools_only(&self) {
        self.shared
            .script_for_tools_only
            .store(true, Ordering::Relaxed);
    }

    /// Requests with nothing queued get this reply.
    pub fn set_default(&self, reply: Reply) {
        *self.shared.default.lock().unwrap() = Some(reply);
    }

    /// Each embedding request takes this long to answer.
    pub fn slow_embeddings(&self, delay: Duration) {
        *self.shared.embed_delay.lock().unwrap() = delay;
    }

    /// Enforces a context window from now on.
    pub fn limit_window(&self, window: Window) {
        *self.shared.window.lock().unwrap() = Some(window);
    }

    /// Serves `model` too (listed, and chat and generate requests for it are answered).
    pub fn serve_model(&self, model: &str) {
        *self.shared.also_serves.lock().unwrap() = Some(model.to_string());
    }

    /// From now on the describing endpoints (model lists, `/api/show`, the tokenizer)
    /// misbehave this way.
    pub fn hostile(&self, how: Hostile) {
        *self.shared.hostile.lock().unwrap() = Some(how);
    }

    /// The texts the tokenizer endpoint counted.
    pub fn tokenized(&self) -> Vec<String> {
        self.shared.tokenized.lock().unwrap().clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Forgets the requests recorded so far (keeps long benchmarks' memory bounded).
    pub fn clear_requests(&self) {
        self.shared.requests.lock().unwrap().clear();
    }

    pub fn last_request(&self) -> Recorded {
        self.requests()
            .pop()
            .expect("the upstream received no request")
    }

    pub fn cancelled(&self) -> usize {
        self.shared.cancelled.load(Ordering::SeqCst)
    }

    /// How many times the model list was asked for.
    pub fn listings(&self) -> usize {
        self.shared.listings.load(Ordering::SeqCst)
    }

    pub fn completed(&self) -> usize {
        self.shared.completed.load(Ordering::SeqCst)
    }
}

/// A deterministic vector for a text: letter frequencies, L2-normalised.
pub fn letter_vector(text: &str) -> Vec<f32> {
    let mut v = [0.0f32; 26];
    for c in text
        .to_ascii_lowercase()
        .bytes()
        .filter(u8::is_ascii_lowercase)
    {
        v[(c - b'a') as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter().map(|x| x / norm).collect()
}

/// `/api/embed` (Ollama) and `/v1/embeddings` (OpenAI) in their own response shapes.
async fn embed(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = shared.record(&uri, headers, &body);
    let delay = *shared.embed_delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(Reply::Status { status, body }) = shared.script.lock().unwrap().pop_front() {
        return Response::builder()
            .status(status)
            .body(Body::from(body))
            .unwrap();
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let vectors: Vec<Vec<f32>> = inputs.iter().map(|t| letter_vector(t)).collect();
    if uri.path() == "/api/embed" {
        axum::Json(json!({"model": body["model"], "embeddings": vectors,
            "total_duration": 1000, "load_duration": 0, "prompt_eval_count": inputs.len()}))
        .into_response()
    } else {
        // Servers may answer out of order; the index says which input is which.
        let data: Vec<Value> = vectors
            .iter()
            .enumerate()
            .rev()
            .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
            .collect();
        axum::Json(
            json!({"object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": inputs.len(), "total_tokens": inputs.len()}}),
        )
        .into_response()
    }
}

/// `UPSTREAM_MODEL` and the one `serve_model` added.
fn served(shared: &Shared) -> Vec<String> {
    let mut names = vec![UPSTREAM_MODEL.to_string()];
    names.extend(shared.also_serves.lock().unwrap().clone());
    names
}

async fn tags(State(shared): State<Arc<Shared>>) -> Response {
    shared.listings.fetch_add(1, Ordering::SeqCst);
    if let Some(r) = hostile_reply(&shared, "{\"models\":[") {
        return r;
    }
    let models: Vec<Value> = served(&shared)
        .iter()
        .map(|name| {
            json!({
                "name": name, "model": name,
                "modified_at": "2026-01-02T03:04:05.123456789Z", "size": 1234567,
                "digest": "a".repeat(64),
                "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                            "parameter_size": "135M", "quantization_level": "Q8_0"}
            })
        })
        .collect();
    axum::Json(json!({ "models": models })).into_response()
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    shared.listings.fetch_add(1, Ordering::SeqCst);
    if let Some(r) = hostile_reply(&shared, "{\"object\":\"list\",\"data\":[") {
        return r;
    }
    let data: Vec<Value> = served(&shared)
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 1700000000, "owned_by": "scripted"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// llama-cpp-python's token count, when the window says the upstream has a tokenizer.
async fn tokenize(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    if let Some(r) = hostile_reply(&shared, "{\"tokens\":[") {
        return r;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match shared.window.lock().unwrap().clone() {
        Some(w) if w.tokenizer => {
            let text = body["input"].as_str().unwrap_or("");
            shared.tokenized.lock().unwrap().push(text.to_string());
            axum::Json(json!({"count": w.count(text)})).into_response()
        }
        _ => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"detail": "Not Found"})),
        )
            .into_response(),
    }
}

async fn show(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    if let Some(r) = hostile_reply(&shared, "{\"template\":\"") {
        return r;
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let name = v["model"].as_str().or(v["name"].as_str()).unwrap_or("");
    let also = shared.also_serves.lock().unwrap().clone();
    if name != UPSTREAM_MODEL && also.as_deref() != Some(name) {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": format!("model '{name}' not found")})),
        )
            .into_response();
    }
    axum::Json(json!({
        "license": "", "modelfile": "", "parameters": "num_ctx 4096", "template": "{{ .Prompt }}",
        "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                    "parameter_size": "135M", "quantization_level": "Q8_0"},
        "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
        "capabilities": ["completion", "tools"]
    }))
    .into_response()
}

/// Honours the request's token limit (`max_tokens`, `max_completion_tokens`, Ollama's
/// `options.num_predict`: one scripted piece is one token, finish `length`) and stop
/// strings (`stop`, `options.stop`: the text ends before the first one, finish `stop`),
/// as a real server does.
fn apply_limits(reply: Reply, body: &Value) -> Reply {
    let Reply::Tokens {
        mut tokens,
        delay,
        mut finish,
    } = reply
    else {
        return reply;
    };
    let limit = body["max_tokens"]
        .as_u64()
        .or(body["max_completion_tokens"].as_u64())
        .or(body["options"]["num_predict"].as_u64());
    let stops: Vec<String> = [&body["stop"], &body["options"]["stop"]]
        .into_iter()
        .flat_map(|v| match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect(),
            _ => vec![],
        })
        .filter(|s| !s.is_empty())
        .collect();
    let mut text = String::new();
    for (i, t) in tokens.iter_mut().enumerate() {
        text.push_str(t);
        if let Some(at) = stops.iter().filter_map(|s| text.find(s.as_str())).min() {
            let keep = t.len() - (text.len() - at);
            t.truncate(keep);
            let n = if t.is_empty() { i } else { i + 1 };
            tokens.truncate(n);
            return Reply::Tokens {
                tokens,
                delay,
                finish: "stop",
            };
        }
    }
    if let Some(limit) = limit {
        if (limit as usize) < tokens.len() {
            tokens.truncate(limit as usize);
            finish = "length";
        }
    }
    Reply::Tokens {
        tokens,
        delay,
        finish,
    }
}

/// Which wire format a path speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wire {
    OllamaChat,
    OllamaGenerate,
    OpenAiChat,
    OpenAiText,
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = shared.record(&uri, headers, &body);
    let wire = match uri.path() {
        "/api/chat" => Wire::OllamaChat,
        "/api/generate" => Wire::OllamaGenerate,
        "/v1/chat/completions" => Wire::OpenAiChat,
        _ => Wire::OpenAiText,
    };
    // With `script_for_tools_only`, a request without tools (an agent's side task) takes
    // the default reply and leaves the script to the requests that have tools.
    let toolless = body["tools"].as_array().is_none_or(Vec::is_empty);
    let queued = if toolless && shared.script_for_tools_only.load(Ordering::Relaxed) {
        None
    } else {
        shared.script.lock().unwrap().pop_front()
    };
    let reply = queued
        .or_else(|| shared.default.lock().unwrap().clone())
        .unwrap_or_else(|| Reply::tokens(&["Hello", " from", " upstream"]));
    let model = body["model"].as_str().unwrap_or("").to_string();
    let also = shared.also_serves.lock().unwrap().clone();
    if model != UPSTREAM_MODEL && Some(&model) != also.as_ref() {
        // As Ollama and OpenAI-compatible servers do for a model they do not serve.
        let (status, body) = match wire {
            Wire::OllamaChat | Wire::OllamaGenerate => {
                (404, json!({"error": format!("model '{model}' not found")}))
            }
            _ => (
                404,
                json!({"error": {"message": format!("The model `{model}` does not exist"),
                "type": "invalid_request_error", "param": null, "code": "model_not_found"}}),
            ),
        };
        return (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
    }
    let window = shared.window.lock().unwrap().clone();
    if let Some(w) = window {
        let asked = body["max_tokens"]
            .as_u64()
            .or(body["options"]["num_predict"].as_u64())
            .unwrap_or(0) as usize;
        let prompt = w.prompt_tokens(&body);
        let streamed = body["stream"].as_bool().unwrap_or(true);
        if prompt + asked > w.tokens {
            return match (w.overflow, wire) {
                (Overflow::EmptyStream, Wire::OpenAiChat | Wire::OpenAiText) if streamed => {
                    Response::builder()
                        .header("content-type", "text/event-stream; charset=utf-8")
                        .body(Body::empty())
                        .unwrap()
                }
                (_, Wire::OllamaChat | Wire::OllamaGenerate) => (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": "input length exceeds the context length"})),
                )
                    .into_response(),
                _ => (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": {
                        "message": format!("This model's maximum context length is {} tokens. However, you requested {} tokens ({prompt} in the messages, {asked} in the completion). Please reduce the length of the messages or completion.", w.tokens, prompt + asked),
                        "type": "invalid_request_error", "param": "messages",
                        "code": "context_length_exceeded"}})),
                )
                    .into_response(),
            };
        }
    }
    let reply = apply_limits(reply, &body);
    let stream = body["stream"]
        .as_bool()
        .unwrap_or(wire == Wire::OllamaChat || wire == Wire::OllamaGenerate);
    let include_usage = body["stream_options"]["include_usage"].as_bool() == Some(true);

    match reply {
        Reply::Status { status, body } => {
            return Response::builder()
                .status(status)
                .header(
                    "content-type",
                    if body.starts_with('{') {
                        "application/json"
                    } else {
                        "text/plain"
                    },
                )
                .body(Body::from(body))
                .unwrap()
        }
        Reply::HangBeforeHeaders(d) => {
            tokio::time::sleep(d).await;
        }
        Reply::Raw { content_type, body } => {
            return Response::builder()
                .header("content-type", content_type)
                .body(Body::from(body))
                .unwrap()
        }
        Reply::RetryAfter {
            status,
            body,
            retry_after,
        } => {
            return Response::builder()
                .status(status)
                .header("retry-after", retry_after)
                .body(Body::from(body))
                .unwrap()
        }
        Reply::HugeStatus { status, bytes } => {
            return Response::builder()
                .status(status)
                .header("content-type", "text/html")
                .body(huge_body("<html><body>", bytes))
                .unwrap()
        }
        Reply::Redirect(to) => {
            return Response::builder()
                .status(307)
                .header("location", to)
                .body(Body::empty())
                .unwrap()
        }
        _ => {}
    }
    let w = Writer {
        wire,
        model,
        include_usage,
    };
    if !stream {
        return w.whole_reply(reply, shared.clone()).await;
    }
    let content_type = match wire {
        Wire::OllamaChat | Wire::OllamaGenerate => "application/x-ndjson",
        _ => "text/event-stream",
    };
    let guard = StreamGuard {
        shared: shared.clone(),
        finished: false,
    };
    let body = async_stream::stream! {
        let mut guard = guard;
        let (pieces, delay, end): (Vec<String>, Duration, End) = match reply {
            Reply::Tokens { tokens, delay, finish } => (tokens, delay, End::Finish(finish)),
            Reply::ToolCall { name, arguments } => (vec![], Duration::ZERO, End::Tool(name, arguments)),
            Reply::DropAfter(t) => (t, Duration::ZERO, End::Drop),
            Reply::GarbageAfter(t) => (t, Duration::ZERO, End::Garbage),
            Reply::ErrorAfter(t, m) => (t, Duration::ZERO, End::Error(m)),
            Reply::Endless(d) => (vec![], d, End::Endless),
            Reply::StallAfter(t, d) => (t, Duration::ZERO, End::Stall(d)),
            Reply::SlowThenStall { tokens, delay, silence } => (tokens, delay, End::Stall(silence)),
            Reply::Flood(n) => (vec![], Duration::ZERO, End::Flood(n)),
            Reply::Status { .. } | Reply::HangBeforeHeaders(_) | Reply::RetryAfter { .. } | Reply::Raw { .. }
            | Reply::HugeStatus { .. } | Reply::Redirect(_) => (vec!["late".into()], Duration::ZERO, End::Finish("stop")),
        };
        if let Some(first) = w.opening() {
            yield Ok::<Bytes, std::io::Error>(first);
        }
        for p in &pieces {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            yield Ok(w.text(p));
        }
        match end {
            End::Finish(finish) => {
                for b in w.closing(finish, pieces.len() as u64) {
                    yield Ok(b);
                }
            }
            End::Tool(name, arguments) => {
                for b in w.tool_call(&name, &arguments) {
                    yield Ok(b);
                }
                for b in w.closing("tool_calls", 1) {
                    yield Ok(b);
                }
            }
            End::Drop => {
                // Let what was sent reach the client first, as with a real upstream dying.
                tokio::time::sleep(Duration::from_millis(50)).await;
                guard.finished = true;
                yield Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "scripted drop"));
                return;
            }
            End::Garbage => yield Ok(w.garbage()),
            End::Error(m) => yield Ok(w.error(&m)),
            End::Stall(silence) => {
                tokio::time::sleep(silence).await;
                yield Ok(w.text("late"));
                for b in w.closing("stop", pieces.len() as u64 + 1) {
                    yield Ok(b);
                }
            }
            End::Endless => loop {
                tokio::time::sleep(delay).await;
                yield Ok(w.text("tick "));
            },
            End::Flood(n) => {
                let piece = "w".repeat(n);
                loop {
                    yield Ok(w.text(&piece));
                    tokio::task::yield_now().await;
                }
            }
        }
        guard.finished = true;
    };
    Response::builder()
        .header("content-type", content_type)
        .body(Body::from_stream(body))
        .unwrap()
}

enum End {
    Finish(&'static str),
    Tool(String, Value),
    Drop,
    Garbage,
    Error(String),
    Endless,
    Stall(Duration),
    Flood(usize),
}

/// Counts a stream as cancelled when its body is dropped before the end.
struct StreamGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let counter = if self.finished {
            &self.shared.completed
        } else {
            &self.shared.cancelled
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// Frames replies exactly as Ollama and OpenAI-compatible servers do.
struct Writer {
    wire: Wire,
    model: String,
    include_usage: bool,
}

const CREATED_AT: &str = "2026-11-22T10:00:00.123456789Z";

impl Writer {
    fn sse(v: Value) -> Bytes {
        Bytes::from(format!("data: {v}\n\n"))
    }

    fn ndjson(v: Value) -> Bytes {
        Bytes::from(format!("{v}\n"))
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        let mut v = json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000,
               "model": self.model, "system_fingerprint": "fp_scripted",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        if self.wire == Wire::OpenAiText {
            v["object"] = json!("text_completion");
            v["choices"][0] = json!({"index": 0, "text": delta.get("content").cloned().unwrap_or(json!("")),
                                      "logprobs": null, "finish_reason": finish});
        }
        v
    }

    fn opening(&self) -> Option<Bytes> {
        (self.wire == Wire::OpenAiChat)
            .then(|| Self::sse(self.chunk(json!({"role": "assistant", "content": ""}), None)))
    }

    fn text(&self, t: &str) -> Bytes {
        match self.wire {
            Wire::OllamaChat => Self::ndjson(json!({"model": self.model, "created_at": CREATED_AT,
                "message": {"role": "assistant", "content": t}, "done": false})),
            Wire::OllamaGenerate => {
                Self::ndjson(json!({"model": self.model, "created_at": CREATED_AT,
                "response": t, "done": false}))
            }
            Wire::OpenAiChat | Wire::OpenAiText => {
                Self::sse(self.chunk(json!({"content": t}), None))
            }
        }
    }

    fn tool_call(&self, name: &str, arguments: &Value) -> Vec<Bytes> {
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => vec![Self::ndjson(
                json!({"model": self.model, "created_at": CREATED_AT,
                "message": {"role": "assistant", "content": "",
                            "tool_calls": [{"function": {"name": name, "arguments": arguments}}]},
                "done": false}),
            )],
            Wire::OpenAiChat | Wire::OpenAiText => {
                let args = arguments.to_string();
                let (a, b) = args.split_at(args.len() / 2);
                vec![
                    Self::sse(self.chunk(json!({"tool_calls": [{"index": 0, "id": "call_scripted", "type": "function",
                        "function": {"name": name, "arguments": ""}}]}), None)),
                    Self::sse(self.chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}), None)),
                    Self::sse(self.chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}), None)),
                ]
            }
        }
    }

    fn stats(prompt: u64, completion: u64) -> Value {
        json!({"total_duration": 5_000_000u64, "load_duration": 1_000_000u64, "prompt_eval_count": prompt,
               "prompt_eval_duration": 1_000_000u64, "eval_count": completion, "eval_duration": 3_000_000u64})
    }

    fn closing(&self, finish: &str, completion: u64) -> Vec<Bytes> {
        let prompt = 11;
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => {
                let mut v = if self.wire == Wire::OllamaChat {
                    json!({"model": self.model, "created_at": CREATED_AT,
                           "message": {"role": "assistant", "content": ""}, "done": true})
                } else {
                    json!({"model": self.model, "created_at": CREATED_AT, "response": "", "done": true, "context": [1, 2, 3]})
                };
                v["done_reason"] = json!(if finish == "tool_calls" {
                    "stop"
                } else {
                    finish
                });
                for (k, s) in Self::stats(prompt, completion).as_object().unwrap() {
                    v[k] = s.clone();
                }
                vec![Self::ndjson(v)]
            }
            Wire::OpenAiChat | Wire::OpenAiText => {
                let mut out = vec![Self::sse(self.chunk(
                    if self.wire == Wire::OpenAiChat {
                        json!({})
                    } else {
                        json!({"content": ""})
                    },
                    Some(finish),
                ))];
                if self.include_usage {
                    // OpenAI's usage event has its stream's object.
                    let object = if self.wire == Wire::OpenAiText {
                        "text_completion"
                    } else {
                        "chat.completion.chunk"
                    };
                    out.push(Self::sse(
                        json!({"id": "chatcmpl-scripted", "object": object,
                        "created": 1700000000, "model": self.model, "choices": [],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                  "total_tokens": prompt + completion}}),
                    ));
                }
                out.push(Bytes::from_static(b"data: [DONE]\n\n"));
                out
            }
        }
    }

    /// A frame with the right framing and a payload that is not JSON.
    fn garbage(&self) -> Bytes {
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => Bytes::from_static(b"this is not json\n"),
            _ => Bytes::from_static(b"data: this is not json\n\n"),
        }
    }

    fn error(&self, message: &str) -> Bytes {
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => Self::ndjson(json!({"error": message})),
            _ => Self::sse(
                json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
            ),
        }
    }

    /// A non-streamed answer (`"stream": false`) as real servers give one: headers only
    /// when the whole answer is ready; a failure mid-answer as an error status (or the
    /// connection closing); the request counted as cancelled when dropped before then.
    async fn whole_reply(&self, reply: Reply, shared: Arc<Shared>) -> Response {
        let mut guard = StreamGuard {
            shared,
            finished: false,
        };
        let (tokens, finish, tool) = match reply {
            Reply::Tokens {
                tokens,
                delay,
                finish,
            } => {
                tokio::time::sleep(delay * tokens.len() as u32).await;
                (tokens, finish, None)
            }
            Reply::ToolCall { name, arguments } => (vec![], "tool_calls", Some((name, arguments))),
            Reply::DropAfter(_) => {
                // The connection closes in the middle of the answer.
                guard.finished = true;
                let body = futures::stream::once(async {
                    Err::<Bytes, _>(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "scripted drop",
                    ))
                });
                return Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from_stream(body))
                    .unwrap();
            }
            Reply::GarbageAfter(_) => {
                guard.finished = true;
                return Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from("this is not json"))
                    .unwrap();
            }
            Reply::ErrorAfter(_, message) => {
                guard.finished = true;
                let body = match self.wire {
                    Wire::OllamaChat | Wire::OllamaGenerate => json!({"error": message}),
                    _ => json!({"error": {"message": message, "type": "server_error",
                        "param": null, "code": null}}),
                };
                return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
            }
            Reply::Endless(_) => std::future::pending().await,
            Reply::StallAfter(mut tokens, silence) => {
                tokio::time::sleep(silence).await;
                tokens.push("late".into());
                (tokens, "stop", None)
            }
            _ => (vec!["late".to_string()], "stop", None),
        };
        guard.finished = true;
        let completion = tokens.len().max(usize::from(tool.is_some())) as u64;
        let mut v = self.whole(&tokens.concat(), finish, completion);
        if let Some((name, arguments)) = tool {
            match self.wire {
                Wire::OllamaChat | Wire::OllamaGenerate => {
                    v["message"]["tool_calls"] =
                        json!([{"function": {"name": name, "arguments": arguments}}]);
                }
                _ => {
                    v["choices"][0]["message"]["content"] = Value::Null;
                    v["choices"][0]["message"]["tool_calls"] = json!([{"id": "call_scripted",
                        "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]);
                }
            }
        }
        axum::Json(v).into_response()
    }

    /// A whole answer's body: `completion` tokens of `text`, finished with `finish`.
    fn whole(&self, text: &str, finish: &str, completion: u64) -> Value {
        let prompt = 11;
        let usage = json!({"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion});
        let ollama_finish = if finish == "tool_calls" {
            "stop"
        } else {
            finish
        };
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => {
                let mut v = json!({"model": self.model, "created_at": CREATED_AT, "done": true,
                    "done_reason": ollama_finish});
                if self.wire == Wire::OllamaChat {
                    v["message"] = json!({"role": "assistant", "content": text});
                } else {
                    v["response"] = json!(text);
                    v["context"] = json!([1, 2, 3]);
                }
                for (k, s) in Self::stats(prompt, completion).as_object().unwrap() {
                    v[k] = s.clone();
                }
                v
            }
            Wire::OpenAiChat => {
                json!({"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1700000000,
                "model": self.model, "system_fingerprint": "fp_scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": null, "finish_reason": finish}], "usage": usage})
            }
            Wire::OpenAiText => {
                json!({"id": "cmpl-scripted", "object": "text_completion", "created": 1700000000,
                "model": self.model, "choices": [{"index": 0, "text": text, "logprobs": null,
                "finish_reason": finish}], "usage": usage})
            }
        }
    }
}

/// Settings for a gateway in front of `upstream` with its own data_dir (removed with the
/// returned folder), adjusted by `tweak`; with `knowledge`, `examples/knowledge` ingested
/// (BM25) into it first.
pub async fn test_settings(
    upstream: &ScriptedUpstream,
    provider: Provider,
    knowledge: bool,
    tweak: impl FnOnce(&mut Settings),
) -> (Settings, tempfile::TempDir) {
    let mut settings = Settings::load_without_env(None).unwrap();
    settings.llm.provider = provider;
    settings.llm.base_url = match provider {
        Provider::Ollama => upstream.root(),
        Provider::Openai => format!("{}/v1", upstream.root()),
    };
    settings.llm.model = UPSTREAM_MODEL.to_string();
    settings.llm.connect_timeout = Duration::from_secs(2);
    settings.llm.first_byte_timeout = Duration::from_secs(5);
    settings.server.shutdown_grace = Duration::from_secs(5);
    // gRPC on a free port: tests run side by side.
    settings.grpc.addr = "127.0.0.1:0".into();
    let data = tempfile::tempdir().unwrap();
    settings.data_dir = data.path().to_path_buf();
    tweak(&mut settings);
    settings.validate().expect("test settings are valid");
    if knowledge {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/knowledge");
        assist_gateway::app::ingest(
            &settings,
            &[examples],
            false,
            &assist_gateway::ingest::Quiet,
        )
        .await
        .expect("examples/knowledge ingests");
    }
    (settings, data)
}

/// A gateway on 127.0.0.1:0 in front of `upstream`, with settings adjusted by `tweak`.
pub struct Gateway {
    pub addr: SocketAddr,
    /// Where gRPC is served (`None` when `grpc.addr` is empty).
    pub grpc_addr: Option<SocketAddr>,
    pub settings: Settings,
    /// The gateway's data_dir, removed with it.
    _data: Option<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Gateway {
    pub async fn start(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_inner(upstream, provider, false, tweak).await
    }

    /// Like `start`, with `examples/knowledge` ingested (BM25) into its data_dir first.
    pub async fn with_knowledge(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_inner(upstream, provider, true, tweak).await
    }

    async fn start_inner(
        upstream: &ScriptedUpstream,
        provider: Provider,
        knowledge: bool,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        let (settings, data) = test_settings(upstream, provider, knowledge, tweak).await;
        let mut gateway = Self::with_settings(settings).await;
        gateway._data = Some(data);
        gateway
    }

    /// Keeps `data` (the settings' data_dir) alive as long as the gateway.
    pub fn holding(mut self, data: tempfile::TempDir) -> Self {
        self._data = Some(data);
        self
    }

    pub async fn with_settings(settings: Settings) -> Self {
        let state = assist_gateway::app::build(settings.clone()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let grpc = match settings.grpc.addr() {
            Some(_) => Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
            None => None,
        };
        let grpc_addr = grpc.as_ref().map(|l| l.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(assist_gateway::app::serve_all(
            listener,
            grpc,
            state,
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            grpc_addr,
            settings,
            _data: None,
            stop: Some(stop),
            task,
        }
    }

    /// Stops the gateway (letting open streams finish) and starts a new one on the same
    /// settings and data_dir, as a process restart would.
    pub async fn restart(mut self) -> Self {
        let data = self._data.take();
        let settings = self.settings.clone();
        self.shutdown().await.unwrap().unwrap();
        let mut gateway = Self::with_settings(settings).await;
        gateway._data = data;
        gateway
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Starts a graceful shutdown and returns the server task to await.
    pub fn shutdown(mut self) -> tokio::task::JoinHandle<std::io::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Gateway { task, .. } = self;
        task
    }
}

/// The real `assist-gateway serve` binary as a child process, for tests that need a
/// process of their own (the metrics recorder, the log subscriber). Its settings go to
/// it as a `--config` file; it logs JSON to stderr, which is kept line by line. Killed
/// when dropped.
pub struct Spawned {
    pub addr: SocketAddr,
    /// Where gRPC is served (`None` when `grpc.addr` is empty).
    pub grpc_addr: Option<SocketAddr>,
    pub settings: Settings,
    child: std::process::Child,
    log: Arc<Mutex<Vec<String>>>,
    _data: tempfile::TempDir,
}

impl Spawned {
    pub async fn start(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_with_env(upstream, provider, false, tweak, &[]).await
    }

    /// Like `start`, with `examples/knowledge` ingested (BM25) into its data_dir first.
    pub async fn with_knowledge(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_with_env(upstream, provider, true, tweak, &[]).await
    }

    /// The general form: `env` is added to the child's environment (e.g. `RUST_LOG`).
    pub async fn start_with_env(
        upstream: &ScriptedUpstream,
        provider: Provider,
        knowledge: bool,
        tweak: impl FnOnce(&mut Settings),
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_limited(upstream, provider, knowledge, tweak, env, None).await
    }

    /// Like `start_with_env`, the process limited to `open_files` open files (soft and
    /// hard, as `ulimit -n` sets them) when given.
    pub async fn start_limited(
        upstream: &ScriptedUpstream,
        provider: Provider,
        knowledge: bool,
        tweak: impl FnOnce(&mut Settings),
        env: &[(&str, &str)],
        open_files: Option<u64>,
    ) -> Self {
        use std::io::BufRead;
        let (mut settings, data) = test_settings(upstream, provider, knowledge, tweak).await;
        settings.server.addr = "127.0.0.1:0".into();
        settings.log.format = assist_gateway::config::LogFormat::Json;
        let config = data.path().join("gateway.toml");
        std::fs::write(&config, toml::to_string(&settings).unwrap()).unwrap();
        let mut command = match open_files {
            None => std::process::Command::new(gateway_binary()),
            Some(n) => {
                let mut sh = std::process::Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(gateway_binary());
                sh
            }
        };
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the gateway binary starts");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("assist-gateway listening") {
                    let v: Value = serde_json::from_str(&line).unwrap_or_default();
                    if let Some(addr) = v["fields"]["addr"].as_str() {
                        let grpc = v["fields"]["grpc_addr"]
                            .as_str()
                            .map(|a| a.parse::<SocketAddr>().unwrap());
                        let _ = addr_tx.send((addr.parse::<SocketAddr>().unwrap(), grpc));
                    }
                }
                lines.lock().unwrap().push(line);
            }
        });
        let (addr, grpc_addr) =
            tokio::task::spawn_blocking(move || addr_rx.recv_timeout(Duration::from_secs(30)))
                .await
                .unwrap()
                .unwrap_or_else(|_| {
                    panic!(
                        "the gateway did not say where it listens: {:?}",
                        log_text(&log)
                    )
                });
        Self {
            addr,
            grpc_addr,
            settings,
            child,
            log,
            _data: data,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's resident memory now and at its peak (`VmRSS`, `VmHWM`), in MiB.
    pub fn memory_mib(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap()
                / 1024.0
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Every line the gateway logged so far.
    pub fn log(&self) -> String {
        log_text(&self.log)
    }

    /// Stops the gateway (SIGTERM: open streams may finish) and waits for it to exit.
    pub fn stop(mut self) -> String {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Let the reader thread take the last lines.
        std::thread::sleep(Duration::from_millis(100));
        self.log()
    }
}

fn log_text(log: &Mutex<Vec<String>>) -> String {
    log.lock().unwrap().join("\n")
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// SSE `data:` payloads of a body, checking every event ends with a blank line.
pub fn sse_events(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "SSE body does not end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            assert!(!e.contains('\n'), "one line per event expected, got {e:?}");
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event without 'data: ': {e:?}"))
                .to_string()
        })
        .collect()
}

/// The answer text carried by SSE chat events (`choices[0].delta.content`); `[DONE]`,
/// usage and error events carry none.
pub fn sse_text(events: &[String]) -> String {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

/// NDJSON lines of a body, checking there are no blank lines and no SSE prefix.
pub fn ndjson_lines(body: &str) -> Vec<Value> {
    assert!(
        body.ends_with('\n'),
        "NDJSON body does not end with a newline: {body:?}"
    );
    body.trim_end_matches('\n')
        .split('\n')
        .map(|l| {
            assert!(!l.is_empty(), "blank line in NDJSON: {body:?}");
            serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?} is not JSON: {e}"))
        })
        .collect()
}

/// Reads a streamed body chunk by chunk until `n` bytes of payload arrived.
pub async fn read_some(response: &mut reqwest::Response, at_least: usize) -> String {
    let mut out = Vec::new();
    while out.len() < at_least {
        match response.chunk().await.unwrap() {
            Some(c) => out.extend_from_slice(&c),
            None => break,
        }
    }
    String::from_utf8(out).unwrap()
}

/// Waits until `check` holds, at most `secs` seconds.
pub async fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// POSTs JSON (or raw text when `body` is a string) and returns status, headers and body text.
pub async fn post(
    url: &str,
    body: impl Into<Payload>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let rb = client().post(url);
    let rb = match body.into() {
        Payload::Json(v) => rb.json(&v),
        Payload::Raw(s) => rb.header("content-type", "application/json").body(s),
    };
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

/// Ingests one folder with `settings`, reporting nothing; its summary.
pub async fn ingest_quietly(
    settings: &Settings,
    folder: &std::path::Path,
) -> assist_gateway::ingest::Summary {
    assist_gateway::app::ingest(
        settings,
        &[folder.to_path_buf()],
        false,
        &assist_gateway::ingest::Quiet,
    )
    .await
    .unwrap()
}

pub async fn get_text(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

pub async fn get_json(url: &str) -> (u16, Value) {
    let r = client().get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub enum Payload {
    Json(Value),
    Raw(String),
}

impl From<Value> for Payload {
    fn from(v: Value) -> Self {
        Payload::Json(v)
    }
}

impl From<&str> for Payload {
    fn from(s: &str) -> Self {
        Payload::Raw(s.to_string())
    }
}

/// The python of the pinned virtualenv (`ASSIST_PYTHON`, set by `scripts/test.sh`), or
/// `None` with a note that `what` was skipped; in CI its absence fails the test.
pub fn python_for(what: &str) -> Option<String> {
    installed("ASSIST_PYTHON", what)
}

/// The program `scripts/test.sh` installed and named in the environment variable `var`,
/// or `None` with a note that `what` was skipped; in CI its absence fails the test.
pub fn installed(var: &str, what: &str) -> Option<String> {
    if let Ok(program) = std::env::var(var) {
        return Some(program);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run {what}: use scripts/test.sh"
    );
    eprintln!("SKIPPED: {var} is not set; run scripts/test.sh to include {what}");
    None
}

/// Runs `tests/clients/<script>` with `python` and `args`; asserts it succeeded and printed
/// `passed` (its last line), and returns what it printed.
pub async fn run_client_script(python: &str, script: &str, args: &[&str], passed: &str) -> String {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(python)
        .arg(&path)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(passed), "{script}:\n{stdout}\n{stderr}");
    stdout
}

/// The `assist-gateway` binary built with these tests.
pub fn gateway_binary() -> std::path::PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_assist-gateway") {
        return path.into();
    }
    // target/<profile>/deps/<test> → target/<profile>/assist-gateway
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("assist-gateway")
}

/// Every message text the upstream was given in one request, in order.
pub fn prompt_text(r: &Recorded) -> String {
    r.body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["content"].as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| r.body["prompt"].as_str().unwrap_or("").to_string())
}

/// Named SSE events of a body (Anthropic, Responses): each `event: <name>` then one
/// `data: <json>` line, a blank line after; checks the JSON's `type` is the name.
pub fn named_events(body: &str) -> Vec<(String, Value)> {
    assert!(
        body.ends_with("\n\n"),
        "SSE body does not end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an 'event:' and a 'data:' line: {e:?}"));
            assert!(!data.contains('\n'), "one data line per event: {e:?}");
            let data: Value = serde_json::from_str(data)
                .unwrap_or_else(|err| panic!("data is not JSON ({err}): {e:?}"));
            assert_eq!(data["type"], name, "the event's type is its name: {e:?}");
            (name.to_string(), data)
        })
        .collect()
}

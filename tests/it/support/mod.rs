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

mod clients;
mod endpoints;
mod frames;
mod gateway;
mod servers;

#[allow(unused_imports)]
pub use self::endpoints::letter_vector;
use self::endpoints::*;
use self::frames::Writer;

// Not every benchmark that includes this file uses each part.
#[allow(unused_imports)]
pub use self::clients::*;
#[allow(unused_imports)]
pub use self::gateway::*;
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

//! The one chat flow every dialect shares: read the body → parse it into a `ChatTurn` →
//! check the request limits → claim a stream slot → run the pipeline → render its events,
//! streamed or whole. A dialect brings a parser and a [`Render`]; nothing else.
//!
//! Each chat request is logged and measured here, once, when its answer ends (failed,
//! finished, or dropped by a client that went away); every other route is logged by the
//! access-log middleware.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use super::auth::Caller;
use super::dialect::{ApiError, Dialect};
use super::limits::{StreamGate, StreamSlot};
use super::{body, request_id, AppState};
use crate::config::ServerSettings;
use crate::error::GatewayError;
use crate::llm::{FinishReason, Input, ToolCall, UpstreamRequest, Usage};
use crate::pipeline::classify::truncate_chars;
use crate::pipeline::{collect, Answer, ChatTurn, Event, EventStream, Pipeline, Source};
use crate::sessions::{self, Owner};
use crate::telemetry::{self, UpstreamClock};

/// How one endpoint's body becomes a turn: the dialect's parser.
pub type Parse<R> = fn(&[u8]) -> Result<Parsed<R>, GatewayError>;

/// A parsed chat request.
pub struct Parsed<R> {
    pub turn: ChatTurn,
    pub stream: bool,
    /// Ollama's "load the model" request (no messages, or an empty prompt): answered
    /// without running the pipeline.
    pub load: bool,
    /// How this request's answer is rendered (ids, options that shape the output).
    pub render: R,
}

impl<R> Parsed<R> {
    /// A request as its client sent it: the turn, with the editor context read from
    /// every place a client may put it.
    pub fn client(
        request: UpstreamRequest,
        context: Context,
        mode: (bool, bool),
        render: R,
    ) -> Self {
        let (stream, load) = mode;
        Self {
            turn: ChatTurn::from_client(
                request,
                context.session_id,
                context.user.as_ref(),
                context.additional_context.as_ref(),
            ),
            stream,
            load,
            render,
        }
    }
}

/// The fields every chat request may carry beside its dialect's own: the conversation
/// key, and the editor context as clients send it (the `user` field, context items).
pub struct Context {
    pub session_id: Option<String>,
    pub user: Option<Value>,
    pub additional_context: Option<Value>,
}

/// When the answer started and when its first token went out (Ollama reports both).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub started: Instant,
    pub first_token: Option<Instant>,
}

/// How a streamed answer ended well.
pub struct End<'a> {
    pub finish: FinishReason,
    pub usage: Usage,
    /// The assistant's sources (`None` for passthrough models).
    pub sources: Option<&'a [Source]>,
    pub timing: Timing,
}

/// A dialect's rendering of the pipeline's events.
pub trait Render: Send + 'static {
    /// The content type of a streamed answer.
    const CONTENT_TYPE: &'static str;
    /// What a stream starts with, before any event.
    fn opening(&mut self) -> Option<Bytes> {
        None
    }
    fn delta(&mut self, text: &str) -> Bytes;
    fn tool_calls(&mut self, calls: &[ToolCall]) -> Bytes;
    /// The end of a stream that went well.
    fn end(&mut self, end: End<'_>) -> Bytes;
    /// An error after the stream started, in the dialect's in-stream shape.
    fn error(&mut self, e: &GatewayError) -> Bytes;
    /// A whole answer, as one JSON body.
    fn whole(&self, answer: &Answer, timing: Timing) -> Value;
}

/// `POST` on a chat endpoint of dialect `D`, whose bodies `parse` reads and whose
/// answers `R` renders; `route` names it in logs and metrics.
pub fn post<D: Dialect, R: Render>(route: &'static str, parse: Parse<R>) -> MethodRouter<AppState> {
    axum::routing::post(
        move |State(state): State<AppState>,
              gate: Option<Extension<StreamGate>>,
              caller: Option<Extension<Caller>>,
              headers: HeaderMap,
              body: Body| async move {
            let log = ChatLog::new(&headers, D::NAME, route, state.pipeline.clone());
            let parsed = body::read(&state.settings.server, body)
                .await
                .and_then(|b| parse(&b));
            // Sessions are the caller's own with keys; without, one namespace is shared.
            let owner = match caller {
                Some(Extension(Caller::Key(digest))) => Owner::key(&digest),
                _ => Owner::shared(),
            };
            let gate = gate.map(|Extension(g)| g);
            match answer(&state, gate, &owner, log, parsed).await {
                Ok(response) => response,
                Err((mut log, e)) => {
                    log.failed(&e, false);
                    let mut response = ApiError::<D>::from(e).into_response();
                    ChatLog::mark(&mut response);
                    response
                }
            }
        },
    )
}

type Failed = (ChatLog, GatewayError);

async fn answer<R: Render>(
    state: &AppState,
    gate: Option<StreamGate>,
    owner: &Owner,
    mut log: ChatLog,
    parsed: Result<Parsed<R>, GatewayError>,
) -> Result<Response, Failed> {
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => return Err((log, e)),
    };
    log.request(&parsed.turn.request.model, parsed.stream);
    if parsed.load {
        // Nothing to generate: confirm the model exists and report it loaded.
        if let Err(e) = state.pipeline.model(&parsed.turn.request.model).await {
            return Err((log, e));
        }
        return Ok(whole(&parsed.render, &loaded(), log));
    }
    if let Err(e) = check_limits(&state.settings.server, &parsed.turn) {
        return Err((log, e));
    }
    if parsed.stream {
        if let Some(gate) = &gate {
            match gate.claim() {
                Ok(slot) => log.stream_slot = Some(slot),
                Err(e) => return Err((log, e)),
            }
        }
    }
    let events = match state
        .pipeline
        .run_timed(parsed.turn, owner, log.upstream.clone())
        .await
    {
        Ok(events) => events,
        Err(e) => return Err((log, e)),
    };
    if parsed.stream {
        let write_timeout = state.settings.server.write_timeout;
        return Ok(streaming_response(
            R::CONTENT_TYPE,
            stream(events, parsed.render, log, write_timeout),
        ));
    }
    match collect(events).await {
        Ok(answer) => Ok(whole(&parsed.render, &answer, log)),
        Err(e) => Err((log, e)),
    }
}

/// The answer to a "load the model" request: nothing, finished with `load`.
fn loaded() -> Answer {
    Answer {
        text: String::new(),
        tool_calls: Vec::new(),
        sources: None,
        finish: FinishReason::Load,
        usage: Usage::default(),
    }
}

/// The request limits beyond the body size: how many messages, how long each, and a
/// `session_id` of plain characters and bounded length.
pub fn check_limits(server: &ServerSettings, turn: &ChatTurn) -> Result<(), GatewayError> {
    if let Some(id) = &turn.session_id {
        sessions::check_id(id).map_err(|why| GatewayError::invalid("session_id", why))?;
    }
    match &turn.request.input {
        Input::Chat(messages) => {
            body::check_count(
                "messages",
                "messages",
                messages.len(),
                (server.max_messages, "server.max_messages"),
            )?;
            for (i, m) in messages.iter().enumerate() {
                let chars = m.content.chars().count();
                if chars > server.max_message_chars {
                    body::check_length(server, &format!("messages[{i}].content"), chars)?;
                }
            }
            Ok(())
        }
        Input::Prompt { prompt, .. } => {
            body::check_length(server, "prompt", prompt.chars().count())
        }
    }
}

fn whole<R: Render>(render: &R, answer: &Answer, mut log: ChatLog) -> Response {
    log.done(answer.usage);
    let mut response = axum::Json(render.whole(answer, log.timing())).into_response();
    ChatLog::mark(&mut response);
    response
}

/// Pipeline events as the dialect renders them; an error mid-stream is the dialect's
/// error event, then the end.
fn rendered<R: Render>(
    mut events: EventStream,
    mut render: R,
    mut log: ChatLog,
) -> impl futures::Stream<Item = Bytes> + Send {
    async_stream::stream! {
        if let Some(opening) = render.opening() {
            yield opening;
        }
        let mut sources = None;
        while let Some(event) = events.next().await {
            match event {
                Event::Sources(s) => sources = Some(s),
                Event::Delta(text) => {
                    log.delta();
                    yield render.delta(&text);
                }
                Event::ToolCalls(calls) => {
                    log.delta();
                    yield render.tool_calls(&calls);
                }
                Event::Done { finish, usage } => {
                    log.done(usage);
                    yield render.end(End {
                        finish,
                        usage,
                        sources: sources.as_deref(),
                        timing: log.timing(),
                    });
                    return;
                }
                Event::Error(e) => {
                    log.failed(&e, true);
                    yield render.error(&e);
                    return;
                }
            }
        }
    }
}

type Rendering = std::pin::Pin<Box<dyn futures::Stream<Item = Bytes> + Send>>;

/// A streamed answer the client must keep taking. The server takes a piece from the body
/// only when it can write it; a piece that waits longer than `write_timeout` to be taken
/// means the client stopped reading (its buffers are full). A watchdog then drops the
/// answer, as for a client that went away: the upstream request is cancelled, what was
/// streamed is saved to the session, the stream slot and the session are freed.
struct Watched {
    slot: Arc<std::sync::Mutex<WatchedSlot>>,
}

struct WatchedSlot {
    /// `None` once the answer ended, or was dropped by the watchdog.
    rendering: Option<Rendering>,
    /// When the last piece was handed over and not yet followed by another poll.
    handed: Option<Instant>,
}

impl Watched {
    fn new(rendering: Rendering, write_timeout: Duration, too_slow: Arc<AtomicBool>) -> Self {
        let slot = Arc::new(std::sync::Mutex::new(WatchedSlot {
            rendering: Some(rendering),
            handed: None,
        }));
        let watched = Arc::downgrade(&slot);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(write_timeout / 4);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(slot) = watched.upgrade() else {
                    return;
                };
                let dropped = {
                    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                    match slot.handed {
                        _ if slot.rendering.is_none() => return,
                        Some(at) if at.elapsed() > write_timeout => {
                            too_slow.store(true, Ordering::Relaxed);
                            slot.rendering.take()
                        }
                        _ => None,
                    }
                };
                if dropped.is_some() {
                    tracing::warn!(
                        write_timeout_secs = write_timeout.as_secs(),
                        "the client took nothing for the write timeout: stream ended"
                    );
                    // Dropped here, outside the lock: the answer's own cleanup runs now.
                    drop(dropped);
                    return;
                }
            }
        });
        Self { slot }
    }
}

impl futures::Stream for Watched {
    type Item = Bytes;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Bytes>> {
        use std::task::Poll;
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.handed = None;
        let Some(rendering) = slot.rendering.as_mut() else {
            return Poll::Ready(None);
        };
        match rendering.as_mut().poll_next(cx) {
            Poll::Ready(Some(bytes)) => {
                slot.handed = Some(Instant::now());
                Poll::Ready(Some(bytes))
            }
            Poll::Ready(None) => {
                slot.rendering = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The streamed answer's body.
fn stream<R: Render>(
    events: EventStream,
    render: R,
    mut log: ChatLog,
    write_timeout: Duration,
) -> Watched {
    let too_slow = Arc::new(AtomicBool::new(false));
    log.too_slow = Some(too_slow.clone());
    Watched::new(
        Box::pin(rendered(events, render, log)),
        write_timeout,
        too_slow,
    )
}

/// A streamed body with the given content type, counted as an open stream while it lives.
fn streaming_response(
    content_type: &'static str,
    body: impl futures::Stream<Item = Bytes> + Send + 'static,
) -> Response {
    let open = telemetry::ActiveStream::open();
    let mut response = Response::new(Body::from_stream(body.map(move |bytes| {
        let _open = &open;
        Ok::<_, std::convert::Infallible>(bytes)
    })));
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    headers.insert(
        axum::http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    ChatLog::mark(&mut response);
    response
}

/// Marks a response whose request a `ChatLog` logs (so the access log does not).
#[derive(Clone, Copy)]
pub(super) struct LoggedAsChat;

/// The log line and metrics of one chat request, written when it is dropped: when the
/// answer ended, failed, or the client went away. Never holds message content.
struct ChatLog {
    request_id: String,
    dialect: &'static str,
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
    stream_slot: Option<StreamSlot>,
    /// Time spent waiting on the upstream model (the rest is the gateway's).
    upstream: Arc<UpstreamClock>,
    /// The kind of upstream failure that ended the request.
    upstream_error: Option<&'static str>,
    /// Which model names are served (the metric label of any other is `other`).
    pipeline: Arc<Pipeline>,
    /// Set when the stream was dropped because its client stopped reading.
    too_slow: Option<Arc<AtomicBool>>,
}

/// Longest model name a log line shows (a client may send any string).
const LOGGED_MODEL_CHARS: usize = 64;

impl ChatLog {
    fn new(
        headers: &HeaderMap,
        dialect: &'static str,
        route: &'static str,
        pipeline: Arc<Pipeline>,
    ) -> Self {
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
            pipeline,
            too_slow: None,
        }
    }

    fn request(&mut self, model: &str, stream: bool) {
        self.model = model.to_string();
        self.stream = stream;
    }

    fn delta(&mut self) {
        self.deltas += 1;
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
    }

    fn timing(&self) -> Timing {
        Timing {
            started: self.started,
            first_token: self.first_token,
        }
    }

    fn done(&mut self, usage: Usage) {
        self.usage = Some(usage);
        self.outcome = "completed";
        // A whole answer reaches the client at once: its first token comes with it.
        if !self.stream && self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
    }

    fn failed(&mut self, e: &GatewayError, in_stream: bool) {
        if !in_stream {
            self.status = e.status.as_u16();
        }
        self.outcome = if in_stream { "stream_error" } else { "error" };
        self.error = Some(e.code.unwrap_or(e.kind));
        self.upstream_error = e.upstream.as_ref().and_then(telemetry::upstream_error_kind);
    }

    fn mark(response: &mut Response) {
        response.extensions_mut().insert(LoggedAsChat);
    }
}

impl Drop for ChatLog {
    fn drop(&mut self) {
        if self
            .too_slow
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            self.outcome = "client_too_slow";
        }
        let total = self.started.elapsed();
        let ttft = self.first_token.map(|t| t - self.started);
        let label = self.pipeline.model_label(&self.model);
        telemetry::ChatRequest {
            route: self.route,
            model: &label,
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
            dialect = self.dialect,
            route = self.route,
            model = truncate_chars(&self.model, LOGGED_MODEL_CHARS),
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

/// A tool call in a client's message, in either dialect.
#[derive(serde::Deserialize)]
pub struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(serde::Deserialize)]
struct WireFunction {
    name: String,
    /// A JSON string (OpenAI) or an object (Ollama).
    arguments: Option<Value>,
}

impl WireToolCall {
    /// A message's `tool_calls`, when it has any.
    pub fn calls(calls: Option<Vec<WireToolCall>>) -> Vec<ToolCall> {
        calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| ToolCall::from_wire(c.id, c.function.name, c.function.arguments))
            .collect()
    }
}

//! The shared chat flow (`serve::chat`) over HTTP: read the body → parse it into a
//! `ChatTurn` → the flow → the answer as a streamed body (SSE or NDJSON) or one JSON
//! body. An HTTP dialect brings a parser and an [`HttpRender`]; nothing else.
//!
//! Chat requests are logged by the chat flow when their answer ends; every other route is
//! logged by the access-log middleware.

use axum::body::Body;
use axum::extract::{Extension, OriginalUri, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use super::dialect::{ApiError, Dialect};
use super::stored::{self, Thread};
use super::{body, request_id, sources, AppState};
use crate::error::GatewayError;
use crate::llm::{FinishReason, ToolCall, UpstreamRequest, Usage};
use crate::pipeline::{Answer, ChatTurn};
use crate::serve::access::{Caller, StreamGate};
use crate::serve::chat::{self, ChatLog, Render, Timing};
use crate::sessions::Owner;
use crate::telemetry;

/// An HTTP dialect's rendering: its events as bytes of its stream, and a whole answer
/// as one JSON body.
pub trait HttpRender: Render<Piece = Bytes> {
    /// The content type of a streamed answer.
    const CONTENT_TYPE: &'static str;
    /// A whole answer, as one JSON body.
    fn whole(&self, answer: &Answer, timing: Timing) -> Value;
    /// [`HttpRender::whole`]'s bytes; a dialect may write them without building the
    /// JSON tree first (the same bytes: each such dialect tests it).
    fn whole_bytes(&self, answer: &Answer, timing: Timing) -> Vec<u8> {
        // Serialising a JSON tree into memory cannot fail.
        serde_json::to_vec(&self.whole(answer, timing)).unwrap_or_default()
    }
    /// The base URL of source links (`/v1/sources/{id}`), for a dialect that cites
    /// sources as links.
    fn link_sources(&mut self, _base: &str) {}
}

/// How one endpoint's body becomes a turn: the dialect's parser.
pub type Parse<R> = fn(&[u8]) -> Result<Parsed<R>, GatewayError>;

/// The tools of a request the gateway does not run (a provider's own server tools), left
/// out: logged once a request (a list of a thousand had logged a line each), as a count
/// and the first one's kind when it reads as one (`web_search_20250305`; the kind is the
/// client's text, so anything else is logged as `other`).
#[derive(Default)]
pub(super) struct Dropped {
    count: usize,
    first: Option<String>,
}

impl Dropped {
    pub(super) fn add(&mut self, kind: &str) {
        self.count += 1;
        self.first.get_or_insert_with(|| {
            let plain = kind.len() <= 32
                && kind
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if plain { kind } else { "other" }.to_string()
        });
    }

    pub(super) fn log(&self, what: &'static str) {
        if let Some(first) = &self.first {
            tracing::info!(tools = self.count, first = %first, "{what}");
        }
    }
}

/// A parsed chat request.
pub struct Parsed<R> {
    pub turn: ChatTurn,
    pub stream: bool,
    /// Ollama's "load the model" request (no messages, or an empty prompt): answered
    /// without running the pipeline.
    pub load: bool,
    /// How this request's answer is rendered (ids, options that shape the output).
    pub render: R,
    /// The stored response it continues, and whether it is kept (Responses API).
    pub thread: Thread,
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
            thread: Thread::default(),
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

/// `POST` on a chat endpoint of dialect `D`, whose bodies `parse` reads and whose
/// answers `R` renders; `route` names it in logs and metrics.
pub fn post<D: Dialect, R: HttpRender>(
    route: &'static str,
    parse: Parse<R>,
) -> MethodRouter<AppState> {
    axum::routing::post(
        move |State(state): State<AppState>,
              gate: Option<Extension<StreamGate>>,
              caller: Option<Extension<Caller>>,
              OriginalUri(uri): OriginalUri,
              headers: HeaderMap,
              body: Body| async move {
            let mut log = ChatLog::new(
                request_id(&headers),
                D::NAME,
                route,
                state.pipeline.clone(),
                Some(&headers),
            );
            log.caller(&state, caller.as_ref().map(|Extension(c)| c));
            let parse_span = log.span().child("parse", Vec::new);
            let parsed = body::read(&state.settings.server, body)
                .await
                .and_then(|b| {
                    parse_span.set("assist.body_bytes", b.len() as i64);
                    parse(&b)
                })
                .map(|mut p| {
                    if p.turn.session_id.is_none() {
                        p.turn.session_id =
                            header_session(&headers, &state.settings.server.session_headers);
                    }
                    p.render
                        .link_sources(&sources::base(&state.settings.server, &uri, &headers));
                    p
                });
            if let Err(e) = &parsed {
                parse_span.fail(e.code.unwrap_or(e.kind));
            }
            drop(parse_span);
            // A key's own sessions; without keys, the one shared namespace.
            let owner = caller.map_or_else(Owner::shared, |Extension(c)| c.owner());
            let gate = gate.map(|Extension(g)| g);
            // Boxed: the answer's future is kilobytes, and axum copies the handler's
            // future (which would hold it inline) into its own box.
            match Box::pin(answer(&state, gate, &owner, log, parsed)).await {
                Ok(response) => response,
                Err((mut log, e)) => {
                    log.failed(&e, false);
                    let mut response = ApiError::<D>::from(e).into_response();
                    mark(&mut response);
                    response
                }
            }
        },
    )
}

type Failed = (ChatLog, GatewayError);

/// The conversation key a client sends as a header (`server.session_headers`, the first
/// present), for bodies without `session_id`. A value that is not a valid session id is
/// left out (the client did not ask for it by name): the request is answered without
/// memory rather than refused.
fn header_session(headers: &HeaderMap, names: &[String]) -> Option<String> {
    let (name, value) = names
        .iter()
        .find_map(|name| Some((name, headers.get(name.as_str())?)))?;
    let id = value.to_str().ok().map(str::trim).unwrap_or_default();
    if id.is_empty() || crate::sessions::check_id(id).is_err() {
        tracing::info!(header = %name, bytes = value.len(), "session header ignored: not a session id");
        return None;
    }
    Some(id.to_string())
}

async fn answer<R: HttpRender>(
    state: &AppState,
    gate: Option<StreamGate>,
    owner: &Owner,
    mut log: ChatLog,
    parsed: Result<Parsed<R>, GatewayError>,
) -> Result<Response, Failed> {
    let mut parsed = match parsed {
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
    let keeper = match stored::prepare(
        state.pipeline.sessions(),
        state.pipeline.privacy(),
        owner,
        &mut parsed.turn,
        std::mem::take(&mut parsed.thread),
    )
    .await
    {
        Ok(keeper) => keeper,
        Err(e) => return Err((log, e)),
    };
    if let Some(wire) = state.pipeline.relays(&parsed.turn.request) {
        parsed.turn.request.relay = parsed.render.relay(wire);
    }
    let events = match chat::start(
        state,
        gate.as_ref(),
        owner,
        &mut log,
        parsed.turn,
        parsed.stream,
    )
    .await
    {
        Ok(events) => match keeper {
            Some(k) => k.tap(events),
            None => events,
        },
        Err(e) => return Err((log, e)),
    };
    if parsed.stream {
        let write_timeout = state.settings.server.write_timeout;
        return Ok(streaming_response(
            R::CONTENT_TYPE,
            chat::stream(events, parsed.render, log, write_timeout),
        ));
    }
    match chat::collect(events, &mut log).await {
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
        context_items: Vec::new(),
        finish: FinishReason::Load,
        usage: Usage::default(),
        verbatim: None,
    }
}

fn whole<R: HttpRender>(render: &R, answer: &Answer, mut log: ChatLog) -> Response {
    log.done(answer.usage);
    let mut response = (
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        // Relayed, the upstream's own body; else the dialect's rendering.
        match &answer.verbatim {
            Some(body) => body.clone(),
            None => Bytes::from(render.whole_bytes(answer, log.timing())),
        },
    )
        .into_response();
    mark(&mut response);
    response
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
    mark(&mut response);
    response
}

/// Marks a response whose request a `ChatLog` logs (so the access log does not).
#[derive(Clone, Copy)]
pub(super) struct LoggedAsChat;

fn mark(response: &mut Response) {
    response.extensions_mut().insert(LoggedAsChat);
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

//! The OpenAI dialect: `/v1/chat/completions`, `/v1/completions`, `/v1/models`.
//! Parses requests into `ChatTurn`s and renders pipeline events as SSE or JSON.

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::openai_body;
use super::limits::{claim_stream, StreamGate};
use super::{
    check_limits, error_response, failed, json_response, parse_json, read_body, streaming_response,
    unix_now, Dialect, OneOrMany, RequestLog, WireToolCall,
};
use crate::app::AppState;
use crate::error::GatewayError;
use crate::llm::{GenParams, Input, Message, Role, ToolCall, UpstreamRequest, Usage};
use crate::pipeline::{collect, ChatTurn, Event, EventStream, ServedModel};

/// Both endpoints' fields (no `flatten`, so that errors keep the field's path).
/// Anything not listed is accepted and ignored.
#[derive(Deserialize)]
struct Request {
    model: String,
    /// Chat only.
    messages: Option<Vec<InMessage>>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    /// Completions only.
    prompt: Option<Prompt>,
    suffix: Option<String>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<i64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    stop: Option<OneOrMany>,
    n: Option<u32>,
    response_format: Option<Value>,
    user: Option<Value>,
    session_id: Option<String>,
    additional_context: Option<Value>,
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    content: Option<Content>,
    tool_calls: Option<Vec<WireToolCall>>,
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    image_url: Option<ImageUrl>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ImageUrl {
    Object { url: String },
    Url(String),
}

/// Options that shape the rendering, not the request.
pub(super) struct Shape {
    pub(super) stream: bool,
    include_usage: bool,
}

impl Request {
    /// Sampling parameters and rendering options, validated.
    fn params(&mut self) -> Result<(GenParams, Shape), GatewayError> {
        if let Some(n) = self.n.filter(|&n| n != 1) {
            return Err(GatewayError::invalid(
                "n",
                format!("n = {n} is not supported: this gateway returns one choice"),
            ));
        }
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(GatewayError::invalid(
                "temperature",
                format!("temperature must be between 0 and 2, got {t}"),
            ));
        }
        if let Some(p) = self.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(GatewayError::invalid(
                "top_p",
                format!("top_p must be between 0 and 1, got {p}"),
            ));
        }
        let (param, max_tokens) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        if max_tokens == Some(0) {
            return Err(GatewayError::invalid(
                param,
                format!("{param} must be at least 1"),
            ));
        }
        let stream = self.stream.unwrap_or(false);
        let shape = Shape {
            stream,
            include_usage: stream
                && self
                    .stream_options
                    .as_ref()
                    .and_then(|o| o.include_usage)
                    .unwrap_or(false),
        };
        let params = GenParams {
            max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            stop: self
                .stop
                .take()
                .map(OneOrMany::into_vec)
                .unwrap_or_default(),
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            response_format: self
                .response_format
                .take()
                .filter(|rf| rf.get("type").and_then(Value::as_str) != Some("text")),
            ..GenParams::default()
        };
        if self.model.trim().is_empty() {
            return Err(GatewayError::invalid("model", "model must not be empty"));
        }
        Ok((params, shape))
    }
}

fn message(i: usize, m: InMessage) -> Result<Message, GatewayError> {
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => Role::Tool,
        other => {
            return Err(GatewayError::invalid(
                format!("messages[{i}].role"),
                format!("unknown role '{other}' in messages[{i}].role: use system, developer, user, assistant or tool"),
            ))
        }
    };
    let mut out = Message::text(role, "");
    match m.content {
        None => {}
        Some(Content::Text(t)) => out.content = t,
        Some(Content::Parts(parts)) => {
            let mut texts = Vec::new();
            for (j, part) in parts.into_iter().enumerate() {
                let field = format!("messages[{i}].content[{j}]");
                match (part.kind.as_str(), part.text, part.image_url) {
                    ("text" | "input_text", Some(t), _) => texts.push(t),
                    ("image_url", _, Some(ImageUrl::Object { url } | ImageUrl::Url(url))) => {
                        out.images.push(url)
                    }
                    ("text" | "input_text", None, _) => {
                        return Err(GatewayError::invalid(
                            format!("{field}.text"),
                            format!("{field} is a text part without 'text'"),
                        ))
                    }
                    ("image_url", _, None) => {
                        return Err(GatewayError::invalid(
                            format!("{field}.image_url"),
                            format!("{field} is an image part without 'image_url.url'"),
                        ))
                    }
                    (other, _, _) => {
                        return Err(GatewayError::invalid(
                            format!("{field}.type"),
                            format!("content part type '{other}' in {field} is not supported (use text or image_url)"),
                        ))
                    }
                }
            }
            out.content = texts.join("\n");
        }
    }
    out.tool_calls = m
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(WireToolCall::into_tool_call)
        .collect();
    out.tool_call_id = m.tool_call_id;
    Ok(out)
}

/// A `/v1/chat/completions` body, once read, as the pipeline's input.
pub(super) fn parse_chat(body: &[u8]) -> Result<(ChatTurn, Shape), GatewayError> {
    parse_json::<Request>(body).and_then(chat_turn)
}

/// A `/v1/completions` body, once read, as the pipeline's input.
pub(super) fn parse_completion(body: &[u8]) -> Result<(ChatTurn, Shape), GatewayError> {
    parse_json::<Request>(body).and_then(completion_turn)
}

fn chat_turn(mut req: Request) -> Result<(ChatTurn, Shape), GatewayError> {
    let (params, shape) = req.params()?;
    let messages = match req.messages {
        None => return Err(GatewayError::invalid("messages", "messages is required")),
        Some(m) if m.is_empty() => {
            return Err(GatewayError::invalid(
                "messages",
                "messages must contain at least one message",
            ))
        }
        Some(m) => m
            .into_iter()
            .enumerate()
            .map(|(i, m)| message(i, m))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let turn = ChatTurn {
        request: UpstreamRequest {
            model: req.model,
            input: Input::Chat(messages),
            params,
            tools: req.tools.unwrap_or_default(),
            tool_choice: req.tool_choice,
        },
        session_id: req.session_id,
        user: req.user,
        additional_context: req.additional_context,
    };
    Ok((turn, shape))
}

fn completion_turn(mut req: Request) -> Result<(ChatTurn, Shape), GatewayError> {
    let (params, shape) = req.params()?;
    let prompt = match req.prompt {
        None => String::new(),
        Some(Prompt::One(p)) => p,
        Some(Prompt::Many(mut v)) if v.len() <= 1 => v.pop().unwrap_or_default(),
        Some(Prompt::Many(_)) => {
            return Err(GatewayError::invalid(
                "prompt",
                "only one prompt per request is supported",
            ))
        }
    };
    let turn = ChatTurn {
        request: UpstreamRequest {
            model: req.model,
            input: Input::Prompt {
                prompt,
                suffix: req.suffix,
                system: None,
                raw: false,
                images: Vec::new(),
            },
            params,
            tools: Vec::new(),
            tool_choice: None,
        },
        session_id: req.session_id,
        user: req.user,
        additional_context: req.additional_context,
    };
    Ok((turn, shape))
}

/// Which of the two response families is being rendered.
#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Text,
}

pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    gate: Option<Extension<StreamGate>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let log = RequestLog::new(&headers, Dialect::OpenAi, "/v1/chat/completions");
    let parsed = read_body(&state, body).await.and_then(|b| parse_chat(&b));
    respond(state, log, parsed, Kind::Chat, gate).await
}

pub(crate) async fn completions(
    State(state): State<AppState>,
    gate: Option<Extension<StreamGate>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let log = RequestLog::new(&headers, Dialect::OpenAi, "/v1/completions");
    let parsed = read_body(&state, body)
        .await
        .and_then(|b| parse_completion(&b));
    respond(state, log, parsed, Kind::Text, gate).await
}

async fn respond(
    state: AppState,
    mut log: RequestLog,
    parsed: Result<(ChatTurn, Shape), GatewayError>,
    kind: Kind,
    gate: Option<Extension<StreamGate>>,
) -> Response {
    let (turn, shape) = match parsed {
        Ok(p) => p,
        Err(e) => return failed(log, e),
    };
    let model = turn.request.model.clone();
    log.request(&model, shape.stream);
    if let Err(e) = check_limits(&state.settings.server, &turn) {
        return failed(log, e);
    }
    if let Err(limited) = claim_stream(gate.as_deref(), shape.stream, &mut log) {
        return limited.respond(log);
    }
    let events = match state.pipeline.run_timed(turn, log.upstream_clock()).await {
        Ok(events) => events,
        Err(e) => return failed(log, e),
    };
    let meta = Meta {
        id: match kind {
            Kind::Chat => format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            Kind::Text => format!("cmpl-{}", uuid::Uuid::new_v4().simple()),
        },
        created: unix_now(),
        model,
        kind,
        include_usage: shape.include_usage,
    };
    if shape.stream {
        streaming_response("text/event-stream", sse(events, meta, log))
    } else {
        match collect(events).await {
            Ok(answer) => {
                log.done(answer.usage);
                let message_or_text = match kind {
                    Kind::Chat => {
                        let mut message = json!({
                            "role": "assistant",
                            "content": if answer.text.is_empty() && !answer.tool_calls.is_empty() {
                                Value::Null
                            } else {
                                json!(answer.text)
                            },
                        });
                        if !answer.tool_calls.is_empty() {
                            message["tool_calls"] = answer
                                .tool_calls
                                .iter()
                                .map(ToolCall::openai_json)
                                .collect();
                        }
                        ("message", message)
                    }
                    Kind::Text => ("text", json!(answer.text)),
                };
                let mut choice =
                    json!({"index": 0, "finish_reason": answer.finish.as_str(), "logprobs": null});
                choice[message_or_text.0] = message_or_text.1;
                let mut body = json!({
                    "id": meta.id,
                    "object": meta.object(false),
                    "created": meta.created,
                    "model": meta.model,
                    "choices": [choice],
                    "usage": usage_json(answer.usage),
                    "system_fingerprint": null,
                });
                if let Some(sources) = answer.sources {
                    body["sources"] = json!(sources);
                }
                json_response(body)
            }
            Err(e) => failed(log, e),
        }
    }
}

struct Meta {
    id: String,
    created: i64,
    model: String,
    kind: Kind,
    include_usage: bool,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Text, _) => "text_completion",
        }
    }

    /// One SSE event carrying one choice update.
    fn chunk(&self, update: Value, finish: Option<&str>) -> Bytes {
        frame(&self.chunk_json(update, finish))
    }

    fn chunk_json(&self, update: Value, finish: Option<&str>) -> Value {
        let mut choice = json!({"index": 0, "finish_reason": finish});
        match self.kind {
            Kind::Chat => {
                choice["delta"] = update;
                choice["logprobs"] = Value::Null;
            }
            Kind::Text => {
                choice["text"] = update;
                choice["logprobs"] = Value::Null;
            }
        }
        let mut chunk = json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    fn usage_chunk(&self, usage: Usage) -> Value {
        json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage_json(usage),
        })
    }
}

fn usage_json(u: Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// `data: <json>` and the blank line that ends the event.
fn frame(v: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut out, v).expect("a JSON value always serializes");
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Pipeline events as OpenAI SSE: a role chunk, content chunks, one finish chunk, the
/// usage chunk when asked, `[DONE]`. An error mid-stream is an error event, then the end.
fn sse(
    mut events: EventStream,
    meta: Meta,
    mut log: RequestLog,
) -> impl futures::Stream<Item = Bytes> {
    async_stream::stream! {
        if let Kind::Chat = meta.kind {
            yield meta.chunk(json!({"role": "assistant", "content": ""}), None);
        }
        let mut tool_index = 0;
        let mut sources = None;
        while let Some(event) = events.next().await {
            match event {
                Event::Sources(s) => sources = Some(s),
                Event::Delta(text) => {
                    log.delta();
                    yield match meta.kind {
                        Kind::Chat => meta.chunk(json!({"content": text}), None),
                        Kind::Text => meta.chunk(json!(text), None),
                    };
                }
                Event::ToolCalls(calls) => {
                    log.delta();
                    for call in calls {
                        yield meta.chunk(json!({"tool_calls": [{
                            "index": tool_index, "id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": ""}}]}), None);
                        yield meta.chunk(json!({"tool_calls": [{
                            "index": tool_index,
                            "function": {"arguments": call.arguments_text()}}]}), None);
                        tool_index += 1;
                    }
                }
                Event::Done { finish, usage } => {
                    log.done(usage);
                    let mut last = match meta.kind {
                        Kind::Chat => meta.chunk_json(json!({}), Some(finish.as_str())),
                        Kind::Text => meta.chunk_json(json!(""), Some(finish.as_str())),
                    };
                    if meta.include_usage {
                        yield frame(&last);
                        last = meta.usage_chunk(usage);
                    }
                    // The assistant's sources ride on the last chunk (clients ignore
                    // fields they do not know).
                    if let Some(s) = sources.take() {
                        last["sources"] = json!(s);
                    }
                    yield frame(&last);
                    yield Bytes::from_static(b"data: [DONE]\n\n");
                    return;
                }
                Event::Error(e) => {
                    log.failed(&e, true);
                    yield frame(&openai_body(&e));
                    return;
                }
            }
        }
    }
}

fn model_json(m: &ServedModel, started: i64) -> Value {
    match m {
        ServedModel::Assistant { name } => {
            json!({"id": name, "object": "model", "created": started, "owned_by": "assist-gateway"})
        }
        ServedModel::Upstream(u) => {
            json!({"id": u.id, "object": "model", "created": u.created, "owned_by": u.owned_by})
        }
    }
}

pub(crate) async fn list_models(State(state): State<AppState>) -> Response {
    let started = state.started.timestamp();
    let data: Vec<Value> = state
        .pipeline
        .models()
        .await
        .iter()
        .map(|m| model_json(m, started))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

pub(crate) async fn get_model(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match state.pipeline.model(&id).await {
        Ok(m) => Json(model_json(&m, state.started.timestamp())).into_response(),
        Err(e) => error_response(Dialect::OpenAi, &e),
    }
}

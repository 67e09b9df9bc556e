//! The Ollama dialect: `/api/chat`, `/api/generate`, `/api/tags`, `/api/show`,
//! `/api/version`, `/api/ps`. Parses requests into `ChatTurn`s and renders pipeline
//! events as NDJSON or one JSON object.

use std::time::Instant;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::ollama_body;
use super::limits::{claim_stream, StreamGate};
use super::{
    check_limits, error_response, failed, json_response, parse_json, read_body, read_json,
    rfc3339_now, streaming_response, Dialect, RequestLog, WireToolCall,
};
use crate::app::AppState;
use crate::error::GatewayError;
use crate::llm::ollama::response_format_of;
use crate::llm::{
    FinishReason, GenParams, Input, Message, ModelCard, Role, ToolCall, UpstreamRequest, Usage,
};
use crate::pipeline::{collect, ChatTurn, Event, EventStream, ServedModel};

/// Both endpoints' fields (no `flatten`, so that errors keep the field's path).
/// Anything not listed is accepted and ignored.
#[derive(Deserialize)]
struct Request {
    model: String,
    /// Chat only.
    #[serde(default)]
    messages: Vec<InMessage>,
    tools: Option<Vec<Value>>,
    /// Generate only.
    prompt: Option<String>,
    suffix: Option<String>,
    system: Option<String>,
    #[serde(default)]
    raw: bool,
    #[serde(default)]
    images: Vec<String>,
    stream: Option<bool>,
    options: Option<Map<String, Value>>,
    format: Option<Value>,
    keep_alive: Option<Value>,
    think: Option<Value>,
    session_id: Option<String>,
    user: Option<Value>,
    additional_context: Option<Value>,
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    content: Option<String>,
    #[serde(default)]
    images: Option<Vec<String>>,
    tool_calls: Option<Vec<WireToolCall>>,
    tool_name: Option<String>,
    tool_call_id: Option<String>,
}

impl Request {
    /// Sampling parameters from `options` (type-checked, errors name the option).
    fn params(&mut self) -> Result<GenParams, GatewayError> {
        if self.model.trim().is_empty() {
            return Err(GatewayError::invalid("model", "model is required"));
        }
        let mut o = self.options.take().unwrap_or_default();
        let num_predict = take::<i64>(&mut o, "num_predict")?;
        let stop = match o.remove("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s],
            Some(v) => serde_json::from_value::<Vec<String>>(v).map_err(|_| {
                GatewayError::invalid(
                    "options.stop",
                    "options.stop must be a string or a list of strings",
                )
            })?,
        };
        Ok(GenParams {
            max_tokens: num_predict
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0),
            temperature: take(&mut o, "temperature")?,
            top_p: take(&mut o, "top_p")?,
            stop,
            seed: take(&mut o, "seed")?,
            presence_penalty: take(&mut o, "presence_penalty")?,
            frequency_penalty: take(&mut o, "frequency_penalty")?,
            response_format: self.format.as_ref().and_then(response_format_of),
            extra_options: o,
            keep_alive: self.keep_alive.take(),
            think: self.think.take(),
        })
    }
}

/// Removes one option, checking its type.
fn take<T: serde::de::DeserializeOwned>(
    o: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<T>, GatewayError> {
    match o.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v).map(Some).map_err(|e| {
            GatewayError::invalid(
                format!("options.{key}"),
                format!("invalid value for 'options.{key}': {e}"),
            )
        }),
    }
}

fn message(i: usize, m: InMessage) -> Result<Message, GatewayError> {
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(GatewayError::invalid(
                format!("messages[{i}].role"),
                format!(
                "unknown role '{other}' in messages[{i}].role: use system, user, assistant or tool"
            ),
            ))
        }
    };
    let mut out = Message::text(role, m.content.unwrap_or_default());
    out.images = m.images.unwrap_or_default();
    out.tool_calls = m
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(WireToolCall::into_tool_call)
        .collect();
    out.tool_name = m.tool_name;
    out.tool_call_id = m.tool_call_id;
    Ok(out)
}

/// The response field that carries text: `message` on chat, `response` on generate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Generate,
}

/// A parsed chat or generate request: the turn, whether to stream, and whether it only
/// asks to load the model (no messages, or an empty prompt without images).
pub(super) struct Parsed {
    pub(super) turn: ChatTurn,
    pub(super) stream: bool,
    pub(super) load: bool,
}

/// An `/api/chat` body, once read, as the pipeline's input.
pub(super) fn parse_chat(body: &[u8]) -> Result<Parsed, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let params = req.params()?;
    let messages = std::mem::take(&mut req.messages)
        .into_iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    // Ollama answers a chat without messages by loading the model.
    let load = messages.is_empty();
    let turn = ChatTurn {
        request: UpstreamRequest {
            model: req.model,
            input: Input::Chat(messages),
            params,
            tools: req.tools.unwrap_or_default(),
            tool_choice: None,
        },
        session_id: req.session_id,
        user: req.user,
        additional_context: req.additional_context,
    };
    Ok(Parsed {
        turn,
        stream: req.stream.unwrap_or(true),
        load,
    })
}

/// An `/api/generate` body, once read, as the pipeline's input.
pub(super) fn parse_generate(body: &[u8]) -> Result<Parsed, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let params = req.params()?;
    let prompt = req.prompt.unwrap_or_default();
    // An empty prompt is Ollama's "load the model" request.
    let load = prompt.is_empty() && req.images.is_empty();
    let turn = ChatTurn {
        request: UpstreamRequest {
            model: req.model,
            input: Input::Prompt {
                prompt,
                suffix: req.suffix,
                system: req.system,
                raw: req.raw,
                images: req.images,
            },
            params,
            tools: Vec::new(),
            tool_choice: None,
        },
        session_id: req.session_id,
        user: req.user,
        additional_context: req.additional_context,
    };
    Ok(Parsed {
        turn,
        stream: req.stream.unwrap_or(true),
        load,
    })
}

pub(crate) async fn chat(
    State(state): State<AppState>,
    gate: Option<Extension<StreamGate>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let log = RequestLog::new(&headers, Dialect::Ollama, "/api/chat");
    let parsed = read_body(&state, body).await.and_then(|b| parse_chat(&b));
    respond(state, log, parsed, Kind::Chat, gate).await
}

pub(crate) async fn generate(
    State(state): State<AppState>,
    gate: Option<Extension<StreamGate>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let log = RequestLog::new(&headers, Dialect::Ollama, "/api/generate");
    let parsed = read_body(&state, body)
        .await
        .and_then(|b| parse_generate(&b));
    respond(state, log, parsed, Kind::Generate, gate).await
}

async fn respond(
    state: AppState,
    mut log: RequestLog,
    parsed: Result<Parsed, GatewayError>,
    kind: Kind,
    gate: Option<Extension<StreamGate>>,
) -> Response {
    let Parsed { turn, stream, load } = match parsed {
        Ok(p) => p,
        Err(e) => return failed(log, e),
    };
    let model = turn.request.model.clone();
    log.request(&model, stream);
    let render = Render { model, kind };
    if load {
        // Nothing to generate: confirm the model exists and report it loaded.
        return match state.pipeline.model(&render.model).await {
            Ok(_) => {
                log.done(Usage::default());
                json_response(render.line(
                    "",
                    None,
                    Some((FinishReason::Load, Usage::default(), &log)),
                ))
            }
            Err(e) => failed(log, e),
        };
    }
    if let Err(e) = check_limits(&state.settings.server, &turn) {
        return failed(log, e);
    }
    if let Err(limited) = claim_stream(gate.as_deref(), stream, &mut log) {
        return limited.respond(log);
    }
    let events = match state.pipeline.run_timed(turn, log.upstream_clock()).await {
        Ok(events) => events,
        Err(e) => return failed(log, e),
    };
    if stream {
        return streaming_response("application/x-ndjson", ndjson(events, render, log));
    }
    match collect(events).await {
        Ok(answer) => {
            if !answer.text.is_empty() {
                log.delta();
            }
            log.done(answer.usage);
            let mut body = render.line(
                &answer.text,
                None,
                Some((answer.finish, answer.usage, &log)),
            );
            if !answer.tool_calls.is_empty() {
                body["message"]["tool_calls"] = tool_calls_json(&answer.tool_calls);
            }
            if let Some(sources) = answer.sources {
                body["sources"] = json!(sources);
            }
            json_response(body)
        }
        Err(e) => failed(log, e),
    }
}

struct Render {
    model: String,
    kind: Kind,
}

impl Render {
    /// One response object: a text delta, tool calls, or (with `done`) the final line.
    fn line(
        &self,
        text: &str,
        tool_calls: Option<&[ToolCall]>,
        done: Option<(FinishReason, Usage, &RequestLog)>,
    ) -> Value {
        let mut v = json!({"model": self.model, "created_at": rfc3339_now()});
        match self.kind {
            Kind::Chat => {
                v["message"] = json!({"role": "assistant", "content": text});
                if let Some(calls) = tool_calls {
                    v["message"]["tool_calls"] = tool_calls_json(calls);
                }
            }
            Kind::Generate => v["response"] = json!(text),
        }
        v["done"] = json!(done.is_some());
        if let Some((finish, usage, log)) = done {
            // Ollama reports tool calls with "stop".
            v["done_reason"] = json!(match finish {
                FinishReason::ToolCalls => "stop",
                other => other.as_str(),
            });
            let now = Instant::now();
            let nanos = |d: std::time::Duration| d.as_nanos().min(u128::from(u64::MAX)) as u64;
            let first = log.first_token().unwrap_or(now);
            let total = nanos(now - log.started()).max(1);
            let prompt_eval = nanos(first - log.started()).max(1);
            let eval = nanos(now - first).max(1);
            v["total_duration"] = json!(total);
            v["load_duration"] = json!(0);
            v["prompt_eval_count"] = json!(usage.prompt_tokens);
            v["prompt_eval_duration"] = json!(prompt_eval);
            v["eval_count"] = json!(usage.completion_tokens);
            v["eval_duration"] = json!(eval);
        }
        v
    }
}

fn tool_calls_json(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| c.ollama_json(i))
        .collect()
}

fn line_bytes(v: &Value) -> Bytes {
    let mut out = serde_json::to_vec(v).expect("a JSON value always serializes");
    out.push(b'\n');
    Bytes::from(out)
}

/// Pipeline events as NDJSON: one line a delta, a final line with stats; an error
/// mid-stream is an `{"error": …}` line, then the end.
fn ndjson(
    mut events: EventStream,
    render: Render,
    mut log: RequestLog,
) -> impl futures::Stream<Item = Bytes> {
    async_stream::stream! {
        let mut sources = None;
        while let Some(event) = events.next().await {
            match event {
                Event::Sources(s) => sources = Some(s),
                Event::Delta(text) => {
                    log.delta();
                    yield line_bytes(&render.line(&text, None, None));
                }
                Event::ToolCalls(calls) => {
                    log.delta();
                    yield line_bytes(&render.line("", Some(&calls), None));
                }
                Event::Done { finish, usage } => {
                    log.done(usage);
                    let mut last = render.line("", None, Some((finish, usage, &log)));
                    if let Some(s) = sources.take() {
                        last["sources"] = json!(s);
                    }
                    yield line_bytes(&last);
                    return;
                }
                Event::Error(e) => {
                    log.failed(&e, true);
                    yield line_bytes(&ollama_body(&e));
                    return;
                }
            }
        }
    }
}

/// A stable, digest-shaped identifier for models that have no file behind them.
fn digest_of(name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = String::with_capacity(64);
    for round in 0..4u8 {
        for b in name.bytes().chain([round]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn assistant_details() -> Value {
    json!({"parent_model": "", "format": "gguf", "family": "brunix", "families": ["brunix"],
           "parameter_size": "", "quantization_level": ""})
}

/// `/api/tags` and `/api/ps` entry.
fn model_entry(m: &ServedModel, started: &str) -> Value {
    match m {
        ServedModel::Assistant { name } => {
            let tagged = format!("{name}:latest");
            json!({"name": tagged, "model": tagged, "modified_at": started, "size": 0,
                   "digest": digest_of(name), "details": assistant_details()})
        }
        ServedModel::Upstream(u) => json!({
            "name": u.id, "model": u.id,
            "modified_at": u.modified_at.clone().unwrap_or_else(|| started.to_string()),
            "size": u.size,
            "digest": if u.digest.is_empty() { digest_of(&u.id) } else { u.digest.clone() },
            "details": u.details.clone().unwrap_or_else(|| json!({
                "parent_model": "", "format": "", "family": "", "families": [],
                "parameter_size": "", "quantization_level": ""})),
        }),
    }
}

pub(crate) async fn tags(State(state): State<AppState>) -> Response {
    let started = state.started_rfc3339();
    let models: Vec<Value> = state
        .pipeline
        .models()
        .await
        .iter()
        .map(|m| model_entry(m, &started))
        .collect();
    Json(json!({"models": models})).into_response()
}

pub(crate) async fn ps(State(state): State<AppState>) -> Response {
    let mut entry = model_entry(
        &ServedModel::Assistant {
            name: state.pipeline.assistant_model().to_string(),
        },
        &state.started_rfc3339(),
    );
    let expires = chrono::Utc::now() + chrono::Duration::days(365);
    entry["expires_at"] = json!(expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    entry["size_vram"] = json!(0);
    if let Some(o) = entry.as_object_mut() {
        o.remove("modified_at");
    }
    Json(json!({"models": [entry]})).into_response()
}

#[derive(Deserialize)]
struct ShowRequest {
    model: Option<String>,
    name: Option<String>,
}

pub(crate) async fn show(State(state): State<AppState>, body: Body) -> Response {
    let req = match read_json::<ShowRequest>(&state, body).await {
        Ok(r) => r,
        Err(e) => return error_response(Dialect::Ollama, &e),
    };
    let Some(name) = req.model.or(req.name).filter(|n| !n.trim().is_empty()) else {
        return error_response(
            Dialect::Ollama,
            &GatewayError::invalid("model", "model is required"),
        );
    };
    match state.pipeline.show(&name).await {
        Ok(card) => Json(show_json(&state, &name, card)).into_response(),
        Err(e) => error_response(Dialect::Ollama, &e),
    }
}

fn show_json(state: &AppState, name: &str, card: ModelCard) -> Value {
    let assistant = state.pipeline.is_assistant(name);
    let details = card.details.unwrap_or_else(|| {
        if assistant {
            assistant_details()
        } else {
            json!({"parent_model": "", "format": "", "family": "", "families": [],
                   "parameter_size": "", "quantization_level": ""})
        }
    });
    let model_info = card
        .model_info
        .unwrap_or_else(|| match card.context_length {
            Some(n) => json!({"general.architecture": "brunix", "brunix.context_length": n}),
            None => Value::Null,
        });
    json!({
        "license": "",
        "modelfile": "",
        "parameters": card.parameters.unwrap_or_default(),
        "template": card.template.unwrap_or_else(|| "{{ .Prompt }}".to_string()),
        "details": details,
        "model_info": model_info,
        "capabilities": card.capabilities,
        "modified_at": state.started_rfc3339(),
    })
}

pub(crate) async fn version(State(state): State<AppState>) -> Response {
    Json(json!({"version": state.settings.server.ollama_version})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_stable_and_digest_shaped() {
        let d = digest_of("brunix");
        assert_eq!(d.len(), 64);
        assert!(d.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(d, digest_of("brunix"));
        assert_ne!(d, digest_of("brunix2"));
    }
}

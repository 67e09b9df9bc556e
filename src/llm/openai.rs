//! Any OpenAI-compatible server: `/chat/completions` and `/completions` streamed as SSE.

use std::borrow::Cow;
use std::ops::ControlFlow;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};

use super::http::{error_text, whole_body, Upstream, MAX_SMALL_REPLY};
use super::relay;
use super::sse;
use super::{
    ChatModel, Chunk, ChunkStream, FinishReason, Input, Message, ModelCard, Relay, ToolCall,
    UpstreamError, UpstreamErrorKind, UpstreamModel, UpstreamRequest, Usage,
};
use crate::json;

pub struct OpenAiChat {
    up: Upstream,
}

impl OpenAiChat {
    pub(crate) fn new(up: Upstream) -> Self {
        Self { up }
    }
}

/// The request's JSON, written straight into its bytes: the prompt's texts escaped by
/// [`crate::json`], the few structured values (tools, tool calls, `response_format`) by
/// `serde_json`.
fn request_body(req: &UpstreamRequest) -> (&'static str, Vec<u8>) {
    let texts: usize = match &req.input {
        Input::Chat(messages) => messages.iter().map(|m| m.content.len() + 32).sum(),
        Input::Prompt { prompt, suffix, .. } => {
            prompt.len() + suffix.as_ref().map_or(0, String::len)
        }
    };
    let mut out = Vec::with_capacity(texts + texts / 8 + 256);
    out.extend_from_slice(b"{\"model\":");
    json::push_string(&mut out, &req.model);
    out.extend_from_slice(if req.whole {
        b",\"stream\":false"
    } else {
        b",\"stream\":true,\"stream_options\":{\"include_usage\":true}"
    });
    let path = match &req.input {
        Input::Chat(messages) => {
            out.extend_from_slice(b",\"messages\":[");
            for (i, m) in messages.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                message(&mut out, m);
            }
            out.push(b']');
            if !req.tools.is_empty() {
                field(&mut out, "tools", &req.tools);
                if let Some(choice) = &req.tool_choice {
                    field(&mut out, "tool_choice", choice);
                }
            }
            "/chat/completions"
        }
        Input::Prompt {
            prompt,
            suffix,
            system,
            ..
        } => {
            out.extend_from_slice(b",\"prompt\":");
            match system {
                Some(s) if !s.is_empty() => {
                    json::push_string(&mut out, &format!("{s}\n\n{prompt}"))
                }
                _ => json::push_string(&mut out, prompt),
            }
            if let Some(s) = suffix {
                out.extend_from_slice(b",\"suffix\":");
                json::push_string(&mut out, s);
            }
            "/completions"
        }
    };
    let p = &req.params;
    if let Some(v) = p.max_tokens {
        field(&mut out, "max_tokens", &v);
    }
    if let Some(v) = p.temperature {
        field(&mut out, "temperature", &v);
    }
    if let Some(v) = p.top_p {
        field(&mut out, "top_p", &v);
    }
    if let Some(v) = p.seed {
        field(&mut out, "seed", &v);
    }
    if let Some(v) = p.presence_penalty {
        field(&mut out, "presence_penalty", &v);
    }
    if let Some(v) = p.frequency_penalty {
        field(&mut out, "frequency_penalty", &v);
    }
    if let Some(v) = &p.response_format {
        field(&mut out, "response_format", v);
    }
    if !p.stop.is_empty() {
        field(&mut out, "stop", &p.stop);
    }
    out.push(b'}');
    (path, out)
}

/// `,"key":value`, the value as `serde_json` writes it.
fn field(out: &mut Vec<u8>, key: &str, value: &impl serde::Serialize) {
    out.push(b',');
    json::push_string(out, key);
    out.push(b':');
    // Numbers, strings and JSON trees: writing them into memory cannot fail.
    let written = serde_json::to_writer(&mut *out, value);
    debug_assert!(written.is_ok());
}

fn message(out: &mut Vec<u8>, m: &Message) {
    out.extend_from_slice(b"{\"role\":");
    json::push_string(out, m.role.as_str());
    out.extend_from_slice(b",\"content\":");
    if m.images.is_empty() {
        // Also beside `tool_calls`: an empty string, never `null`, which llama-cpp-python
        // refuses ("Input should be a valid string"); OpenAI and the others accept both.
        json::push_string(out, &m.content);
    } else {
        out.extend_from_slice(b"[{\"type\":\"text\",\"text\":");
        json::push_string(out, &m.content);
        out.push(b'}');
        for img in &m.images {
            out.extend_from_slice(b",{\"type\":\"image_url\",\"image_url\":{\"url\":");
            json::push_string(out, &image_url(img));
            out.extend_from_slice(b"}}");
        }
        out.push(b']');
    }
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m.tool_calls.iter().map(ToolCall::openai_json).collect();
        field(out, "tool_calls", &calls);
    }
    if let Some(id) = &m.tool_call_id {
        out.extend_from_slice(b",\"tool_call_id\":");
        json::push_string(out, id);
    }
    out.push(b'}');
}

/// Ollama sends bare base64; OpenAI wants a URL, so bare data becomes a `data:` URL.
fn image_url(img: &str) -> String {
    if img.starts_with("data:") || img.starts_with("http://") || img.starts_with("https://") {
        return img.to_string();
    }
    let mime = match img.get(..6).unwrap_or("") {
        s if s.starts_with("/9j/") => "image/jpeg",
        s if s.starts_with("R0lGOD") => "image/gif",
        s if s.starts_with("UklGR") => "image/webp",
        _ => "image/png",
    };
    format!("data:{mime};base64,{img}")
}

#[async_trait]
impl ChatModel for OpenAiChat {
    fn base_url(&self) -> &str {
        self.up.shown()
    }

    async fn stream(&self, request: &UpstreamRequest) -> Result<ChunkStream, UpstreamError> {
        let (path, body) = request_body(request);
        let post = self.up.post_body(path, body);
        if request.whole {
            let response = self.up.send_whole(post).await?;
            let body = whole_body(response, &self.up).await?;
            let mut chunks = whole_chunks(&body, &self.up);
            if request.relay.is_some() {
                chunks = relayed_whole(body, chunks);
            }
            return Ok(futures::stream::iter(chunks).boxed());
        }
        let response = self.up.send(post).await?;
        Ok(sse_chunks(response, self.up.clone(), request.relay).boxed())
    }

    fn relays(&self) -> Option<super::Wire> {
        Some(super::Wire::OpenAi)
    }

    async fn models(&self) -> Result<Vec<UpstreamModel>, UpstreamError> {
        let response = self.up.send(self.up.get("/models")).await?;
        let v = self
            .up
            .json(response, MAX_SMALL_REPLY, self.up.small_reply_within())
            .await?;
        let data = v
            .get("data")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(data
            .iter()
            .filter_map(|m| {
                Some(UpstreamModel {
                    id: m.get("id")?.as_str()?.to_string(),
                    created: m.get("created").and_then(Value::as_i64).unwrap_or(0),
                    owned_by: m
                        .get("owned_by")
                        .and_then(Value::as_str)
                        .unwrap_or("upstream")
                        .to_string(),
                    modified_at: None,
                    size: 0,
                    digest: String::new(),
                    details: None,
                })
            })
            .collect())
    }

    async fn show(&self, model: &str) -> Result<ModelCard, UpstreamError> {
        // OpenAI-compatible servers describe little beyond existence; look the model up
        // in the list so that servers without GET /models/{id} work too.
        let models = self.models().await?;
        if models.iter().any(|m| m.id == model) {
            Ok(ModelCard {
                capabilities: vec!["completion".into(), "tools".into()],
                ..ModelCard::default()
            })
        } else {
            Err(self.up.error(
                UpstreamErrorKind::Status(404),
                format!("model '{model}' not found"),
            ))
        }
    }
}

/// Reads an SSE body (chat or text completions) into chunks, until `[DONE]` or its end.
/// An event longer than `max_line_bytes` ends it with a `Protocol` error (after the
/// events before it); a transport failure is `Closed`. Relayed, the events of each piece
/// of the body are one [`Chunk::Verbatim`] (then `Done`, as always).
fn sse_chunks(
    response: reqwest::Response,
    up: Upstream,
    relay: Option<Relay>,
) -> impl futures::Stream<Item = Result<Chunk, UpstreamError>> {
    async_stream::stream! {
        let mut body = response.bytes_stream();
        let mut reader = sse::Reader::new(up.max_line_bytes());
        let mut state = SseState::default();
        let mut out: Vec<Result<Chunk, UpstreamError>> = Vec::new();
        // Relayed: the piece's events framed for the client, and how many had content.
        let mut framed = Vec::new();
        let mut deltas = 0u32;
        while let Some(piece) = body.next().await {
            let piece = match piece {
                Ok(piece) => piece,
                Err(e) => {
                    yield Err(up.closed(&e));
                    return;
                }
            };
            // `[DONE]` and a failed event both stop the reading.
            let mut done = false;
            if relay.is_some() {
                // The piece's events framed again: its size and a little for the prefixes.
                framed.reserve(piece.len() + 64);
            }
            let read = reader.read(&piece, &mut |data| {
                if data.trim() == "[DONE]" {
                    done = true;
                    return ControlFlow::Break(());
                }
                if let Some(relay) = relay {
                    return match state.relay(data, relay, &up, &mut framed) {
                        Ok(content) => {
                            deltas += u32::from(content);
                            ControlFlow::Continue(())
                        }
                        Err(e) => {
                            out.push(Err(e));
                            ControlFlow::Break(())
                        }
                    };
                }
                match state.read(data, &up) {
                    Ok(chunks) => {
                        out.extend(chunks.into_iter().map(Ok));
                        ControlFlow::Continue(())
                    }
                    Err(e) => {
                        out.push(Err(e));
                        ControlFlow::Break(())
                    }
                }
            });
            if !framed.is_empty() {
                let bytes = bytes::Bytes::from(std::mem::take(&mut framed));
                yield Ok(Chunk::Verbatim { bytes, deltas: std::mem::take(&mut deltas) });
            }
            let failed = out.last().is_some_and(Result::is_err);
            for chunk in out.drain(..) {
                yield chunk;
            }
            if failed {
                return;
            }
            if read.is_err() {
                yield Err(up.too_long());
                return;
            }
            if done {
                break;
            }
        }
        yield state.finish(&up);
    }
}

/// A non-streamed answer (`chat.completion` or `text_completion`): only what the gateway
/// reads.
#[derive(serde::Deserialize)]
struct WireAnswer {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    choices: Option<Vec<WireWholeChoice>>,
}

#[derive(serde::Deserialize)]
struct WireWholeChoice {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(serde::Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    function_call: Option<Value>,
}

/// A whole answer's body as the chunks a stream of it would have given: its text, its
/// tool calls, then `Done` (or the error it reports, or why it cannot be read).
fn whole_chunks(body: &[u8], up: &Upstream) -> Vec<Result<Chunk, UpstreamError>> {
    let answer: WireAnswer = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(e) => {
            return vec![Err(up.error(
                UpstreamErrorKind::Protocol,
                format!("an answer that is not an OpenAI completion ({e})"),
            ))]
        }
    };
    if let Some(msg) = answer.error.as_ref().and_then(error_text) {
        return vec![Err(up.error(UpstreamErrorKind::Stream, msg))];
    }
    let Some(choice) = answer.choices.and_then(|c| c.into_iter().next()) else {
        return vec![Err(
            up.error(UpstreamErrorKind::Protocol, "an answer without choices")
        )];
    };
    let mut out = Vec::new();
    let (content, calls, function_call) = match choice.message {
        Some(m) => (m.content, m.tool_calls, m.function_call),
        None => (None, None, None),
    };
    if let Some(text) = content.or(choice.text).filter(|t| !t.is_empty()) {
        out.push(Ok(Chunk::Text(text)));
    }
    let wire_call = |c: &Value| {
        let f = c.get("function").unwrap_or(c);
        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        (!name.is_empty()).then(|| {
            ToolCall::from_wire(
                id.map(str::to_string),
                name.to_string(),
                f.get("arguments").cloned(),
            )
        })
    };
    if calls.as_ref().is_some_and(|c| c.len() > MAX_TOOL_CALLS) {
        return vec![Err(up.error(
            UpstreamErrorKind::Protocol,
            format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
        ))];
    }
    let calls: Vec<ToolCall> = match (calls, function_call.filter(Value::is_object)) {
        (Some(calls), _) => calls.iter().filter_map(wire_call).collect(),
        (None, Some(f)) => wire_call(&json!({ "function": f })).into_iter().collect(),
        (None, None) => Vec::new(),
    };
    let mut finish = FinishReason::parse(choice.finish_reason.as_deref().unwrap_or("stop"));
    if !calls.is_empty() {
        finish = FinishReason::ToolCalls;
        out.push(Ok(Chunk::ToolCalls(calls)));
    }
    let usage = answer.usage.map(Usage::from);
    out.push(Ok(Chunk::Done { finish, usage }));
    out
}

/// A whole answer relayed: its body as it came in place of its text and tool calls, once
/// it was read like any other (an answer the gateway refuses stays refused).
fn relayed_whole(
    body: bytes::Bytes,
    chunks: Vec<Result<Chunk, UpstreamError>>,
) -> Vec<Result<Chunk, UpstreamError>> {
    if chunks.iter().any(Result::is_err) {
        return chunks;
    }
    let content = chunks
        .iter()
        .any(|c| matches!(c, Ok(Chunk::Text(_) | Chunk::ToolCalls(_))));
    let verbatim = Chunk::Verbatim {
        bytes: body,
        deltas: u32::from(content),
    };
    std::iter::once(Ok(verbatim))
        .chain(
            chunks
                .into_iter()
                .filter(|c| matches!(c, Ok(Chunk::Done { .. }))),
        )
        .collect()
}

/// Most tool calls one answer may hold; an upstream that numbers one beyond is broken.
const MAX_TOOL_CALLS: usize = 128;

#[derive(Default)]
struct SseState {
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    /// Tool calls being assembled, by index.
    calls: Vec<PartialCall>,
    /// Relayed events' scans.
    scanner: relay::Scanner,
}

/// One tool call as its deltas arrive.
#[derive(Debug, Default, Clone, PartialEq)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

impl PartialCall {
    /// Takes one delta of this call. Upstreams differ: OpenAI sends the id and name once
    /// and the arguments in pieces; llama.cpp's server (llama-cpp-python) repeats the id
    /// and the whole name in every delta, with the arguments in pieces; others send the
    /// whole call at once, or the whole text so far again each time. Whatever the form,
    /// the call comes out with its id and name once and its arguments whole.
    fn merge(&mut self, id: Option<&str>, name: Option<&str>, arguments: Option<&str>) {
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            if self.id.is_empty() {
                self.id = id.to_string();
            }
        }
        if let Some(name) = name {
            merge_fragment(&mut self.name, name);
        }
        if let Some(arguments) = arguments {
            merge_fragment(&mut self.arguments, arguments);
        }
    }
}

/// Adds a fragment of a call's name or arguments: one that repeats everything gathered so
/// far (and perhaps more) replaces it, anything else is the next piece.
fn merge_fragment(have: &mut String, got: &str) {
    if got.is_empty() {
        return;
    }
    if !have.is_empty() && got.starts_with(have.as_str()) {
        have.clear();
    }
    have.push_str(got);
}

/// One event of an OpenAI-compatible stream: only the fields the gateway reads, their
/// text borrowed from the event where it has no escapes. Everything else is skipped
/// unread.
#[derive(serde::Deserialize)]
struct WireEvent<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    choices: Option<Vec<WireChoice<'a>>>,
}

#[derive(serde::Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens.unwrap_or(0),
            completion_tokens: u.completion_tokens.unwrap_or(0),
        }
    }
}

#[derive(serde::Deserialize)]
struct WireChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    /// Text completions carry their text here.
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    function_call: Option<Value>,
}

impl SseState {
    /// One event of a relayed stream, framed into `out` for the client (but for the usage
    /// event the client did not ask for), read first when it may hold what the gateway
    /// must know. Whether it carried content.
    fn relay(
        &mut self,
        data: &str,
        relay: Relay,
        up: &Upstream,
        out: &mut Vec<u8>,
    ) -> Result<bool, UpstreamError> {
        let scanned = self.scanner.scan(&relay::OPENAI, data.as_bytes());
        if scanned.read {
            // Its text and whole tool calls are the event itself, passed on as it came.
            self.read(data, up)?;
            if data.trim().is_empty() {
                return Ok(false);
            }
        }
        if relay::passed_on(&scanned, relay) {
            relay::frame(out, data);
        }
        Ok(scanned.content)
    }

    fn read(&mut self, data: &str, up: &Upstream) -> Result<Vec<Chunk>, UpstreamError> {
        if data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let event: WireEvent<'_> = serde_json::from_str(data).map_err(|e| {
            up.error(
                UpstreamErrorKind::Protocol,
                format!("an event that is not an OpenAI chunk ({e})"),
            )
        })?;
        if let Some(msg) = event.error.as_ref().and_then(error_text) {
            return Err(up.error(UpstreamErrorKind::Stream, msg));
        }
        if let Some(u) = event.usage {
            self.usage = Some(u.into());
        }
        let mut out = Vec::new();
        let Some(choice) = event.choices.and_then(|c| c.into_iter().next()) else {
            return Ok(out);
        };
        let (content, tool_calls, function_call) = match choice.delta {
            Some(d) => (d.content, d.tool_calls, d.function_call),
            None => (None, None, None),
        };
        let text = content.or(choice.text).unwrap_or_default();
        if !text.is_empty() {
            out.push(Chunk::Text(text.into_owned()));
        }
        if let Some(deltas) = tool_calls {
            for d in &deltas {
                let index = self.index_of(d, up)?;
                self.calls[index].merge(
                    d.get("id").and_then(Value::as_str),
                    d.pointer("/function/name").and_then(Value::as_str),
                    d.pointer("/function/arguments").and_then(Value::as_str),
                );
            }
        } else if let Some(f) = function_call.filter(Value::is_object) {
            // The deprecated single-call form, from servers that send no `tool_calls`.
            if self.calls.is_empty() {
                self.calls.push(PartialCall::default());
            }
            self.calls[0].merge(
                None,
                f.get("name").and_then(Value::as_str),
                f.get("arguments").and_then(Value::as_str),
            );
        }
        if !self.calls.is_empty() {
            // Calls are passed on whole, so they are held until their end: an upstream
            // that never ends one must not grow the gateway's memory.
            let held: usize = self
                .calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum();
            if held > up.max_line_bytes() {
                return Err(up.error(
                    UpstreamErrorKind::Protocol,
                    format!(
                        "tool calls longer than {} bytes (llm.max_chunk_bytes)",
                        up.max_line_bytes()
                    ),
                ));
            }
        }
        if let Some(reason) = choice.finish_reason {
            let mut finish = FinishReason::parse(&reason);
            let calls = self.take_calls();
            if !calls.is_empty() {
                finish = FinishReason::ToolCalls;
                out.push(Chunk::ToolCalls(calls));
            }
            self.finish = Some(finish);
        }
        Ok(out)
    }

    /// Which call a delta belongs to (made room for): its `index`; without one, a new
    /// call when it brings an id other than the last call's, else the last call.
    fn index_of(&mut self, d: &Value, up: &Upstream) -> Result<usize, UpstreamError> {
        let index = match d.get("index").and_then(Value::as_u64) {
            Some(i) => i,
            None => {
                let id = d
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                match self.calls.last() {
                    None => 0,
                    Some(last) if id.is_some_and(|id| !last.id.is_empty() && last.id != id) => {
                        self.calls.len() as u64
                    }
                    Some(_) => self.calls.len() as u64 - 1,
                }
            }
        };
        // The index comes from the upstream: bound it before sizing anything by it.
        let index = usize::try_from(index)
            .ok()
            .filter(|&i| i < MAX_TOOL_CALLS)
            .ok_or_else(|| {
                up.error(
                    UpstreamErrorKind::Protocol,
                    format!(
                        "tool call index {index}: at most {MAX_TOOL_CALLS} calls in one answer"
                    ),
                )
            })?;
        if self.calls.len() <= index {
            self.calls.resize(index + 1, PartialCall::default());
        }
        Ok(index)
    }

    fn take_calls(&mut self) -> Vec<ToolCall> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .map(|c| ToolCall {
                id: if c.id.is_empty() {
                    ToolCall::new_id()
                } else {
                    c.id
                },
                name: c.name,
                arguments: ToolCall::parse_arguments(&c.arguments),
            })
            .collect()
    }

    fn finish(self, up: &Upstream) -> Result<Chunk, UpstreamError> {
        match self.finish {
            Some(finish) => Ok(Chunk::Done {
                finish,
                usage: self.usage,
            }),
            None => Err(up.error(UpstreamErrorKind::Closed, "no chunk with a finish_reason")),
        }
    }
}

#[cfg(test)]
mod tests;

//! The pipeline's events as OpenAI Responses renders them: SSE events named by their
//! type, each with its `sequence_number` (`response.created`, `response.in_progress`,
//! per output item `response.output_item.added` … `response.output_item.done`, then
//! `response.completed`, `response.incomplete` or `response.failed`), or one
//! `response` body.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::error::GatewayError;
use crate::http::chat::HttpRender;
use crate::http::sources;
use crate::llm::{FinishReason, ToolCall, Usage};
use crate::pipeline::{Answer, Source, MAX_WHOLE_ANSWER_BYTES};
use crate::serve::chat::{End, Render, Timing};

/// The message item being streamed.
struct OpenMessage {
    id: String,
    output_index: usize,
    /// Its text, which the closing events repeat: at most `MAX_WHOLE_ANSWER_BYTES` (an
    /// upstream that never stops must not grow the gateway's memory with it).
    text: String,
}

/// One answer's rendering.
pub struct Stream {
    id: String,
    created_at: i64,
    model: String,
    /// The request's settings, as every response object repeats them.
    echo: Value,
    /// The next event's `sequence_number`.
    sequence: u64,
    message: Option<OpenMessage>,
    /// The output items done so far.
    output: Vec<Value>,
    /// Base URL of source links; `None`: sources are not cited as annotations.
    links: Option<String>,
    /// The message's text was longer than the closing events repeat: the response ends
    /// `incomplete`, its output cut there.
    cut: bool,
}

impl Stream {
    pub fn new(model: &str, echo: Value) -> Self {
        Self {
            id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
            created_at: chrono::Utc::now().timestamp(),
            model: model.to_string(),
            echo,
            sequence: 0,
            message: None,
            output: Vec::new(),
            links: None,
            cut: false,
        }
    }

    /// The response's id (`resp_…`), under which it is kept with `store: true`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The response object in a state.
    fn response(&self, status: &str, output: &[Value], usage: Option<Usage>) -> Value {
        let mut r = Map::new();
        r.insert("id".into(), json!(self.id));
        r.insert("object".into(), json!("response"));
        r.insert("created_at".into(), json!(self.created_at));
        r.insert("status".into(), json!(status));
        r.insert("error".into(), Value::Null);
        r.insert("incomplete_details".into(), Value::Null);
        r.insert("model".into(), json!(self.model));
        r.insert("output".into(), json!(output));
        r.insert("usage".into(), usage.map_or(Value::Null, usage_json));
        if let Value::Object(echo) = &self.echo {
            for (k, v) in echo {
                r.insert(k.clone(), v.clone());
            }
        }
        Value::Object(r)
    }

    /// One event: its type as the SSE event name, and as `type` beside its
    /// `sequence_number` and `fields`.
    fn event(&mut self, out: &mut Vec<u8>, kind: &str, fields: Value) {
        let mut data = Map::new();
        data.insert("type".into(), json!(kind));
        data.insert("sequence_number".into(), json!(self.sequence));
        if let Value::Object(fields) = fields {
            data.extend(fields);
        }
        self.sequence += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(Value::Object(data).to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    /// Opens the message item and its text part.
    fn open_message(&mut self, out: &mut Vec<u8>) {
        let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
        let output_index = self.output.len();
        self.event(
            out,
            "response.output_item.added",
            json!({"output_index": output_index, "item": {"id": id, "type": "message",
                "status": "in_progress", "role": "assistant", "content": []}}),
        );
        self.event(
            out,
            "response.content_part.added",
            json!({"item_id": id, "output_index": output_index, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
        self.message = Some(OpenMessage {
            id,
            output_index,
            text: String::new(),
        });
    }

    /// Closes the message item, if one is open, citing `sources` on its text.
    fn close_message(&mut self, out: &mut Vec<u8>, sources: Option<&[Source]>) {
        let Some(message) = self.message.take() else {
            return;
        };
        let (id, index) = (message.id.as_str(), message.output_index);
        let annotations = self.annotations(sources, message.text.chars().count());
        for (i, annotation) in annotations.iter().enumerate() {
            self.event(
                out,
                "response.output_text.annotation.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                    "annotation_index": i, "annotation": annotation}),
            );
        }
        self.event(
            out,
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                "text": message.text, "logprobs": []}),
        );
        let part = json!({"type": "output_text", "text": message.text,
            "annotations": annotations, "logprobs": []});
        self.event(
            out,
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        let item = message_item(id, "completed", part);
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }

    /// One `url_citation` per source, linking to `/v1/sources/{id}` and spanning the
    /// text's `chars` characters; none without sources or links.
    fn annotations(&self, sources: Option<&[Source]>, chars: usize) -> Vec<Value> {
        let Some(base) = self.links.as_deref() else {
            return Vec::new();
        };
        sources
            .unwrap_or_default()
            .iter()
            .map(|s| {
                json!({"type": "url_citation", "start_index": 0, "end_index": chars,
                    "url": sources::link(base, &s.id), "title": s.title()})
            })
            .collect()
    }
}

fn message_item(id: &str, status: &str, part: Value) -> Value {
    json!({"id": id, "type": "message", "status": status, "role": "assistant",
        "content": [part]})
}

fn call_item(call: &ToolCall, id: &str, status: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function_call", "status": status, "arguments": arguments,
        "call_id": call.id, "name": call.name})
}

fn usage_json(u: Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// The `code` of a failed response, in the words Codex acts on (retry, wait, give up).
fn failure_code(e: &GatewayError) -> &'static str {
    use crate::llm::UpstreamErrorKind as K;
    match (&e.upstream, e.code) {
        (_, Some("context_length_exceeded")) => "context_length_exceeded",
        (Some(K::Status(503 | 529)), _) => "server_is_overloaded",
        (_, _) if e.status.as_u16() == 429 => "rate_limit_exceeded",
        (_, _) if e.status.is_client_error() => "invalid_request_error",
        _ => "server_error",
    }
}

impl Render for Stream {
    type Piece = Bytes;

    fn opening(&mut self) -> Option<Bytes> {
        let mut out = Vec::new();
        let response = self.response("in_progress", &[], None);
        self.event(
            &mut out,
            "response.created",
            json!({ "response": response.clone() }),
        );
        self.event(
            &mut out,
            "response.in_progress",
            json!({ "response": response }),
        );
        Some(Bytes::from(out))
    }

    /// A text delta, written straight into its bytes: the hot path of every streamed
    /// answer. The message item opens with the first.
    fn delta(&mut self, text: &str) -> Bytes {
        if text.is_empty() {
            return Bytes::new();
        }
        let mut out = Vec::with_capacity(text.len() + 200);
        if self.message.is_none() {
            self.open_message(&mut out);
        }
        let sequence = self.sequence;
        self.sequence += 1;
        let Some(message) = self.message.as_mut() else {
            return Bytes::from(out);
        };
        if message.text.len() + text.len() <= MAX_WHOLE_ANSWER_BYTES {
            message.text.push_str(text);
        } else {
            self.cut = true;
        }
        out.extend_from_slice(
            b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":",
        );
        out.extend_from_slice(sequence.to_string().as_bytes());
        out.extend_from_slice(b",\"item_id\":\"");
        out.extend_from_slice(message.id.as_bytes());
        out.extend_from_slice(b"\",\"output_index\":");
        out.extend_from_slice(message.output_index.to_string().as_bytes());
        out.extend_from_slice(b",\"content_index\":0,\"delta\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, text);
        out.extend_from_slice(b",\"logprobs\":[]}\n\n");
        Bytes::from(out)
    }

    /// Each call as a `function_call` item: added with empty arguments, its arguments
    /// as one delta, done.
    fn tool_calls(&mut self, calls: &[ToolCall]) -> Bytes {
        let mut out = Vec::new();
        self.close_message(&mut out, None);
        for call in calls {
            let id = format!("fc_{}", uuid::Uuid::new_v4().simple());
            let index = self.output.len();
            let arguments = call.arguments_text();
            self.event(
                &mut out,
                "response.output_item.added",
                json!({"output_index": index, "item": call_item(call, &id, "in_progress", "")}),
            );
            self.event(
                &mut out,
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": arguments}),
            );
            self.event(
                &mut out,
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "name": call.name,
                    "arguments": arguments}),
            );
            let item = call_item(call, &id, "completed", &arguments);
            self.event(
                &mut out,
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
            self.output.push(item);
        }
        Bytes::from(out)
    }

    fn end(&mut self, end: End<'_>) -> Bytes {
        let mut out = Vec::new();
        self.close_message(&mut out, end.sources);
        let finish_reason = if self.cut {
            FinishReason::Length
        } else {
            end.finish
        };
        let (kind, status) = match finish_reason {
            FinishReason::Length => ("response.incomplete", "incomplete"),
            _ => ("response.completed", "completed"),
        };
        let mut response = self.response(status, &self.output, Some(end.usage));
        finish(&mut response, finish_reason, end.sources);
        self.event(&mut out, kind, json!({ "response": response }));
        Bytes::from(out)
    }

    fn error(&mut self, e: &GatewayError) -> Bytes {
        let mut out = Vec::new();
        let mut response = self.response("failed", &self.output, None);
        response["error"] = json!({"code": failure_code(e), "message": e.message});
        self.event(&mut out, "response.failed", json!({ "response": response }));
        Bytes::from(out)
    }
}

/// What a finished response says beside its output: why it is incomplete, when it
/// completed, the assistant's sources.
fn finish(response: &mut Value, finish: FinishReason, sources: Option<&[Source]>) {
    match finish {
        FinishReason::Length => {
            response["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        _ => response["completed_at"] = json!(chrono::Utc::now().timestamp()),
    }
    if let Some(sources) = sources.filter(|s| !s.is_empty()) {
        response["sources"] = json!(sources);
    }
}

impl HttpRender for Stream {
    const CONTENT_TYPE: &'static str = "text/event-stream";

    fn link_sources(&mut self, base: &str) {
        self.links = Some(base.to_string());
    }

    fn whole(&self, answer: &Answer, _timing: Timing) -> Value {
        let mut output = Vec::new();
        if !answer.text.is_empty() || answer.tool_calls.is_empty() {
            let annotations =
                self.annotations(answer.sources.as_deref(), answer.text.chars().count());
            let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
            output.push(message_item(
                &id,
                "completed",
                json!({"type": "output_text", "text": answer.text,
                    "annotations": annotations, "logprobs": []}),
            ));
        }
        for call in &answer.tool_calls {
            let id = format!("fc_{}", uuid::Uuid::new_v4().simple());
            output.push(call_item(call, &id, "completed", &call.arguments_text()));
        }
        let status = match answer.finish {
            FinishReason::Length => "incomplete",
            _ => "completed",
        };
        let mut response = self.response(status, &output, Some(answer.usage));
        finish(&mut response, answer.finish, answer.sources.as_deref());
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast text delta is the event the general path writes.
    #[test]
    fn text_deltas_are_the_general_events() {
        let mut s = Stream::new("m", json!({}));
        let _ = s.opening();
        let _ = s.delta("first");
        for text in ["Hello", " \"quoted\"\n\ttab \\ \u{1}", "naïve — 日本 🚀"] {
            let (id, index) = match &s.message {
                Some(m) => (m.id.clone(), m.output_index),
                None => panic!("no message"),
            };
            let mut general = Vec::new();
            let mut twin = Stream::new("m", json!({}));
            twin.sequence = s.sequence;
            twin.event(
                &mut general,
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                    "delta": text, "logprobs": []}),
            );
            assert_eq!(
                String::from_utf8_lossy(&s.delta(text)),
                String::from_utf8_lossy(&general)
            );
        }
    }
}

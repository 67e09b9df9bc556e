//! The pipeline's events as Anthropic Messages renders them: named SSE events
//! (`message_start`, `ping`, then per content block `content_block_start`,
//! `content_block_delta`…, `content_block_stop`, then `message_delta` with the stop
//! reason and usage, `message_stop`), or one `message` body.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::error::GatewayError;
use crate::http::chat::HttpRender;
use crate::http::dialect::{Anthropic, Dialect};
use crate::llm::{FinishReason, ToolCall, Usage};
use crate::pipeline::{Answer, Source};
use crate::serve::chat::{End, Render, Timing};

/// The block open in a stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Text,
}

/// One answer's rendering.
pub struct Stream {
    id: String,
    model: String,
    /// The prompt's tokens as the gateway estimates them, for `message_start` (the
    /// upstream's count comes in `message_delta`).
    estimated_input: u64,
    open: Open,
    /// The index of the next content block.
    next: usize,
    /// Whether the answer called tools (its stop reason is then `tool_use`).
    called: bool,
    /// Base URL of source links; `None`: a citation names the source's file.
    links: Option<String>,
}

impl Stream {
    pub fn new(model: &str, estimated_input: u64) -> Self {
        Self {
            id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
            model: model.to_string(),
            estimated_input,
            open: Open::None,
            next: 0,
            called: false,
            links: None,
        }
    }

    /// The assistant's sources as the text block's citations: one
    /// `search_result_location` per source (the gateway's retrieved chunks are the
    /// search results the answer was written from), linking to `/v1/sources/{id}` when
    /// the request's base URL is known. `cited_text` is the source's title, not the
    /// chunk's text, which only `/v1/sources/{id}` serves.
    fn citations(&self, sources: Option<&[Source]>) -> Vec<Value> {
        sources
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let source = match &self.links {
                    Some(base) => crate::http::sources::link(base, &s.id),
                    None => s.file.clone(),
                };
                json!({"type": "search_result_location", "source": source,
                    "title": s.title(), "cited_text": s.title(), "search_result_index": i,
                    "start_block_index": 0, "end_block_index": 1})
            })
            .collect()
    }

    fn stop_reason(&self, finish: FinishReason, calls: bool) -> &'static str {
        match finish {
            _ if calls || self.called => "tool_use",
            FinishReason::ToolCalls => "tool_use",
            FinishReason::Length => "max_tokens",
            FinishReason::Stop | FinishReason::Load => "end_turn",
        }
    }

    /// `content_block_stop` for the open block, if any.
    fn close(&mut self, out: &mut Vec<u8>) {
        if self.open != Open::None {
            event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": self.next - 1}),
            );
            self.open = Open::None;
        }
    }
}

/// Anthropic's usage object, with the cache counters its SDKs expect.
fn usage_json(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

/// One named event: `event: <name>`, `data: <json>`, a blank line.
fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// The prompt's tokens: the upstream's count, else the estimate.
fn input_tokens(usage: Usage, estimated: u64) -> u64 {
    if usage.prompt_tokens > 0 {
        usage.prompt_tokens
    } else {
        estimated
    }
}

impl Render for Stream {
    type Piece = Bytes;

    fn opening(&mut self) -> Option<Bytes> {
        let mut out = Vec::new();
        event(
            &mut out,
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": usage_json(self.estimated_input, 0),
            }}),
        );
        event(&mut out, "ping", &json!({"type": "ping"}));
        Some(Bytes::from(out))
    }

    /// A text delta, written straight into its bytes: the hot path of every streamed
    /// answer. The text block opens with the first.
    fn delta(&mut self, text: &str) -> Bytes {
        if text.is_empty() {
            return Bytes::new();
        }
        let mut out = Vec::with_capacity(text.len() + 128);
        if self.open != Open::Text {
            self.close(&mut out);
            event(
                &mut out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": self.next,
                    "content_block": {"type": "text", "text": ""}}),
            );
            self.open = Open::Text;
            self.next += 1;
        }
        out.extend_from_slice(
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":",
        );
        out.extend_from_slice((self.next - 1).to_string().as_bytes());
        out.extend_from_slice(b",\"delta\":{\"type\":\"text_delta\",\"text\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, text);
        out.extend_from_slice(b"}}\n\n");
        Bytes::from(out)
    }

    /// Each call as a `tool_use` block: opened with empty input, its arguments as one
    /// `input_json_delta`, closed.
    fn tool_calls(&mut self, calls: &[ToolCall]) -> Bytes {
        let mut out = Vec::new();
        self.close(&mut out);
        for call in calls {
            let index = self.next;
            self.next += 1;
            self.called = true;
            event(
                &mut out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name,
                        "input": {}}}),
            );
            // The whole object, never nothing: a call without deltas is read as `{}`
            // by some clients and as no call at all by others.
            event(
                &mut out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta",
                        "partial_json": call.arguments_object().to_string()}}),
            );
            event(
                &mut out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
        Bytes::from(out)
    }

    fn end(&mut self, end: End<'_>) -> Bytes {
        let mut out = Vec::new();
        // The sources cite the answer's text: their citations close its block.
        if self.open == Open::Text {
            for citation in self.citations(end.sources) {
                event(
                    &mut out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": self.next - 1,
                        "delta": {"type": "citations_delta", "citation": citation}}),
                );
            }
        }
        self.close(&mut out);
        let mut delta = json!({"type": "message_delta",
        "delta": {"stop_reason": self.stop_reason(end.finish, false), "stop_sequence": null},
        "usage": usage_json(
            input_tokens(end.usage, self.estimated_input),
            end.usage.completion_tokens,
        )});
        // The assistant's sources ride along (clients ignore fields they do not know).
        with_sources(&mut delta, end.sources);
        event(&mut out, "message_delta", &delta);
        event(&mut out, "message_stop", &json!({"type": "message_stop"}));
        Bytes::from(out)
    }

    fn error(&mut self, e: &GatewayError) -> Bytes {
        let mut out = Vec::new();
        event(&mut out, "error", &Anthropic::error_body(e));
        Bytes::from(out)
    }
}

fn with_sources(v: &mut Value, sources: Option<&[Source]>) {
    if let Some(sources) = sources.filter(|s| !s.is_empty()) {
        v["sources"] = json!(sources);
    }
}

impl HttpRender for Stream {
    const CONTENT_TYPE: &'static str = "text/event-stream";

    fn link_sources(&mut self, base: &str) {
        self.links = Some(base.to_string());
    }

    fn whole(&self, answer: &Answer, _timing: Timing) -> Value {
        let mut content = Vec::new();
        if !answer.text.is_empty() || answer.tool_calls.is_empty() {
            let citations = self.citations(answer.sources.as_deref());
            let citations = if citations.is_empty() {
                Value::Null
            } else {
                Value::Array(citations)
            };
            content.push(json!({"type": "text", "text": answer.text, "citations": citations}));
        }
        for call in &answer.tool_calls {
            content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                "input": call.arguments_object()}));
        }
        let mut body = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason(answer.finish, !answer.tool_calls.is_empty()),
            "stop_sequence": null,
            "usage": usage_json(
                input_tokens(answer.usage, self.estimated_input),
                answer.usage.completion_tokens,
            ),
        });
        with_sources(&mut body, answer.sources.as_deref());
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast text delta is the event the general path writes.
    #[test]
    fn text_deltas_are_the_general_events() {
        let mut s = Stream::new("m", 3);
        let _ = s.delta("first");
        for text in ["Hello", " \"quoted\"\n\ttab \\ \u{1}", "naïve — 日本 🚀"] {
            let mut general = Vec::new();
            event(
                &mut general,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text}}),
            );
            assert_eq!(
                String::from_utf8_lossy(&s.delta(text)),
                String::from_utf8_lossy(&general)
            );
        }
    }
}

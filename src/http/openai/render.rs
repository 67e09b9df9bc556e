//! The pipeline's events as OpenAI renders them: SSE chunks (a role chunk, content
//! chunks, one finish chunk, the usage chunk when asked, `[DONE]`) or one JSON body.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::error::GatewayError;
use crate::http::chat::HttpRender;
use crate::http::dialect::{Dialect, OpenAi};
use crate::http::sources;
use crate::llm::{ToolCall, Usage};
use crate::pipeline::{Answer, Source};
use crate::serve::chat::{End, Render, Timing};

/// Which of the two response families is being rendered.
#[derive(Clone, Copy)]
pub enum Kind {
    /// `chat.completion` with `message` / `delta`.
    Chat,
    /// `text_completion` with `text`.
    Text,
}

/// One answer's SSE rendering.
pub struct Sse {
    id: String,
    created: i64,
    model: String,
    kind: Kind,
    include_usage: bool,
    /// Tool calls sent so far (each gets the next index).
    tool_index: usize,
    /// What every content chunk starts with, up to its update: serialised once.
    head: Vec<u8>,
    /// Base URL of source links; `None`: sources are not cited as annotations.
    links: Option<String>,
    /// Characters of content streamed so far (the span the annotations cover).
    streamed_chars: usize,
}

impl Sse {
    pub fn new(kind: Kind, model: &str, include_usage: bool) -> Self {
        let id = match kind {
            Kind::Chat => format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            Kind::Text => format!("cmpl-{}", uuid::Uuid::new_v4().simple()),
        };
        let mut sse = Self {
            id,
            created: chrono::Utc::now().timestamp(),
            model: model.to_string(),
            kind,
            include_usage,
            tool_index: 0,
            head: Vec::new(),
            links: None,
            streamed_chars: 0,
        };
        // Everything before a chunk's update: the same in every content chunk.
        sse.head = format!(
            r#"data: {{"id":{},"object":"{}","created":{},"model":{},"choices":[{{"index":0,"finish_reason":null,"#,
            json!(sse.id),
            sse.object(true),
            sse.created,
            json!(sse.model),
        )
        .into_bytes();
        sse
    }

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
            Kind::Chat => choice["delta"] = update,
            Kind::Text => choice["text"] = update,
        }
        choice["logprobs"] = Value::Null;
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

impl Render for Sse {
    type Piece = Bytes;

    fn opening(&mut self) -> Option<Bytes> {
        match self.kind {
            Kind::Chat => Some(self.chunk(json!({"role": "assistant", "content": ""}), None)),
            Kind::Text => None,
        }
    }

    /// A content chunk, written straight into its bytes (the same bytes `chunk` gives):
    /// the hot path of every streamed answer.
    fn delta(&mut self, text: &str) -> Bytes {
        self.streamed_chars += text.chars().count();
        let mut out = Vec::with_capacity(self.head.len() + text.len() + 64);
        out.extend_from_slice(&self.head);
        match self.kind {
            Kind::Chat => out.extend_from_slice(b"\"delta\":{\"content\":"),
            Kind::Text => out.extend_from_slice(b"\"text\":"),
        }
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, text);
        if let Kind::Chat = self.kind {
            out.push(b'}');
        }
        out.extend_from_slice(b",\"logprobs\":null}]");
        if self.include_usage {
            out.extend_from_slice(b",\"usage\":null");
        }
        out.extend_from_slice(b"}\n\n");
        Bytes::from(out)
    }

    /// Each call as two chunks: its name, then its arguments.
    fn tool_calls(&mut self, calls: &[ToolCall]) -> Bytes {
        let mut out = Vec::new();
        for call in calls {
            let index = self.tool_index;
            self.tool_index += 1;
            out.extend_from_slice(&self.chunk(
                json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": ""}}]}),
                None,
            ));
            out.extend_from_slice(&self.chunk(
                json!({"tool_calls": [{"index": index,
                    "function": {"arguments": call.arguments_text()}}]}),
                None,
            ));
        }
        Bytes::from(out)
    }

    fn end(&mut self, end: End<'_>) -> Bytes {
        let finish = end.finish.as_str();
        let mut last = match self.kind {
            Kind::Chat => self.chunk_json(json!({}), Some(finish)),
            Kind::Text => self.chunk_json(json!(""), Some(finish)),
        };
        let mut out = Vec::new();
        // Citations as Open WebUI reads them: `url_citation` annotations in a delta, one
        // per source, covering the whole answer.
        if let (Kind::Chat, Some(annotations)) = (
            self.kind,
            self.annotations(end.sources, self.streamed_chars),
        ) {
            out.extend_from_slice(&self.chunk(json!({ "annotations": annotations }), None));
        }
        if self.include_usage {
            out.extend_from_slice(&frame(&last));
            last = self.usage_chunk(end.usage);
        }
        // The assistant's sources ride on the last chunk (clients ignore fields they do
        // not know).
        if let Some(sources) = end.sources {
            last["sources"] = json!(sources);
        }
        if !end.context_items.is_empty() {
            last["context_items"] = json!(end.context_items);
        }
        out.extend_from_slice(&frame(&last));
        out.extend_from_slice(b"data: [DONE]\n\n");
        Bytes::from(out)
    }

    fn error(&mut self, e: &GatewayError) -> Bytes {
        frame(&OpenAi::error_body(e))
    }
}

impl Sse {
    /// One `url_citation` per source, linking to `/v1/sources/{id}` and spanning the
    /// answer's `chars` characters; `None` without sources or links.
    fn annotations(&self, sources: Option<&[Source]>, chars: usize) -> Option<Value> {
        let base = self.links.as_deref()?;
        let sources = sources.filter(|s| !s.is_empty())?;
        Some(
            sources
                .iter()
                .map(|s| {
                    json!({"type": "url_citation", "url_citation": {
                        "url": sources::link(base, &s.id),
                        "title": s.title(),
                        "start_index": 0,
                        "end_index": chars,
                    }})
                })
                .collect(),
        )
    }
}

impl HttpRender for Sse {
    const CONTENT_TYPE: &'static str = "text/event-stream";

    fn link_sources(&mut self, base: &str) {
        self.links = Some(base.to_string());
    }

    fn whole(&self, answer: &Answer, _timing: Timing) -> Value {
        let mut choice =
            json!({"index": 0, "finish_reason": answer.finish.as_str(), "logprobs": null});
        match self.kind {
            Kind::Chat => {
                let mut message = json!({
                    "role": "assistant",
                    "content": if answer.text.is_empty() && !answer.tool_calls.is_empty() {
                        Value::Null
                    } else {
                        json!(answer.text)
                    },
                });
                if let Some(annotations) =
                    self.annotations(answer.sources.as_deref(), answer.text.chars().count())
                {
                    message["annotations"] = annotations;
                }
                if !answer.tool_calls.is_empty() {
                    message["tool_calls"] = answer
                        .tool_calls
                        .iter()
                        .map(ToolCall::openai_json)
                        .collect();
                }
                choice["message"] = message;
            }
            Kind::Text => choice["text"] = json!(answer.text),
        }
        let mut body = json!({
            "id": self.id,
            "object": self.object(false),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage_json(answer.usage),
            "system_fingerprint": null,
        });
        if let Some(sources) = &answer.sources {
            body["sources"] = json!(sources);
        }
        if !answer.context_items.is_empty() {
            body["context_items"] = json!(answer.context_items);
        }
        body
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
    Bytes::from(format!("data: {v}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast content chunk is byte for byte the chunk the general path renders.
    #[test]
    fn content_chunks_are_the_general_chunks() {
        for (kind, usage) in [
            (Kind::Chat, false),
            (Kind::Chat, true),
            (Kind::Text, false),
            (Kind::Text, true),
        ] {
            let mut sse = Sse::new(kind, "m\"odel/ünï", usage);
            for text in [
                "Hello",
                "",
                " \"quoted\"\n\ttab \\ \u{1}",
                "naïve — 日本 🚀",
            ] {
                let general = match kind {
                    Kind::Chat => sse.chunk(json!({"content": text}), None),
                    Kind::Text => sse.chunk(json!(text), None),
                };
                assert_eq!(
                    String::from_utf8_lossy(&sse.delta(text)),
                    String::from_utf8_lossy(&general)
                );
            }
        }
    }
}

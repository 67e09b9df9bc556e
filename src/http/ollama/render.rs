//! The pipeline's events as Ollama renders them: NDJSON, one object a line (a text
//! delta, tool calls, then a final line with `done_reason` and numeric stats), or that
//! final object alone with the whole answer.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use crate::context::UsedItem;
use crate::error::GatewayError;
use crate::http::chat::HttpRender;
use crate::http::dialect::{Dialect, Ollama};
use crate::llm::{FinishReason, ToolCall, Usage};
use crate::pipeline::{Answer, Source};
use crate::serve::chat::{End, Render, Timing};

/// The response field that carries text: `message` on chat, `response` on generate.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Generate,
}

/// One answer's NDJSON rendering.
pub struct Ndjson {
    model: String,
    kind: Kind,
    /// The upstream's own lines are passed on ([`Render::relay`]), its final line too.
    relayed: bool,
}

impl Ndjson {
    pub fn new(kind: Kind, model: &str) -> Self {
        Self {
            model: model.to_string(),
            kind,
            relayed: false,
        }
    }

    /// One response object: a text delta, tool calls, or (with `done`) the final line.
    fn line(
        &self,
        text: &str,
        tool_calls: Option<&[ToolCall]>,
        done: Option<(FinishReason, Usage, Timing)>,
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
        if let Some((finish, usage, timing)) = done {
            // Ollama reports tool calls with "stop".
            v["done_reason"] = json!(match finish {
                FinishReason::ToolCalls => "stop",
                other => other.as_str(),
            });
            let now = Instant::now();
            let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            let first = timing.first_token.unwrap_or(now);
            v["total_duration"] = json!(nanos(now - timing.started).max(1));
            v["load_duration"] = json!(0);
            v["prompt_eval_count"] = json!(usage.prompt_tokens);
            v["prompt_eval_duration"] = json!(nanos(first - timing.started).max(1));
            v["eval_count"] = json!(usage.completion_tokens);
            v["eval_duration"] = json!(nanos(now - first).max(1));
        }
        v
    }
}

impl Render for Ndjson {
    type Piece = Bytes;

    /// A text line, written straight into its bytes (the same bytes `line` gives): the
    /// hot path of every streamed answer.
    fn delta(&mut self, text: &str) -> Bytes {
        let mut out = Vec::with_capacity(self.model.len() + text.len() + 128);
        out.extend_from_slice(b"{\"model\":");
        // Writing strings into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, &self.model);
        out.extend_from_slice(b",\"created_at\":\"");
        out.extend_from_slice(rfc3339_now().as_bytes());
        match self.kind {
            Kind::Chat => {
                out.extend_from_slice(b"\",\"message\":{\"role\":\"assistant\",\"content\":")
            }
            Kind::Generate => out.extend_from_slice(b"\",\"response\":"),
        }
        let _ = serde_json::to_writer(&mut out, text);
        if self.kind == Kind::Chat {
            out.push(b'}');
        }
        out.extend_from_slice(b",\"done\":false}\n");
        Bytes::from(out)
    }

    fn tool_calls(&mut self, calls: &[ToolCall]) -> Bytes {
        line_bytes(&self.line("", Some(calls), None))
    }

    fn end(&mut self, end: End<'_>) -> Bytes {
        if self.relayed {
            // The upstream's final line went on as it came (an empty piece is not written).
            return Bytes::new();
        }
        let mut last = self.line("", None, Some((end.finish, end.usage, end.timing)));
        with_sources(&mut last, end.sources, end.context_items);
        line_bytes(&last)
    }

    fn error(&mut self, e: &GatewayError) -> Bytes {
        line_bytes(&Ollama::error_body(e))
    }

    fn relay(&mut self, wire: crate::llm::Wire) -> Option<crate::llm::Relay> {
        self.relayed = wire == crate::llm::Wire::Ollama;
        // Ollama's usage is on its final line, which always goes on.
        self.relayed.then_some(crate::llm::Relay { usage: true })
    }

    fn verbatim(&mut self, bytes: Bytes) -> Option<Bytes> {
        Some(bytes)
    }
}

impl HttpRender for Ndjson {
    const CONTENT_TYPE: &'static str = "application/x-ndjson";

    fn whole(&self, answer: &Answer, timing: Timing) -> Value {
        let mut body = self.line(
            &answer.text,
            None,
            Some((answer.finish, answer.usage, timing)),
        );
        if !answer.tool_calls.is_empty() {
            body["message"]["tool_calls"] = tool_calls_json(&answer.tool_calls);
        }
        with_sources(&mut body, answer.sources.as_deref(), &answer.context_items);
        body
    }
}

/// The assistant's sources and the attached items it used ride on the final object
/// (clients ignore fields they do not know).
fn with_sources(line: &mut Value, sources: Option<&[Source]>, items: &[UsedItem]) {
    if let Some(sources) = sources {
        line["sources"] = json!(sources);
    }
    if !items.is_empty() {
        line["context_items"] = json!(items);
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
    Bytes::from(format!("{v}\n"))
}

/// RFC 3339 with nanoseconds, for Ollama's `created_at`.
fn rfc3339_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast text line is the line the general path renders (its time aside).
    #[test]
    fn text_lines_are_the_general_lines() {
        for kind in [Kind::Chat, Kind::Generate] {
            let mut ndjson = Ndjson::new(kind, "m\"odel:ünï");
            for text in [
                "Hello",
                "",
                " \"quoted\"\n\ttab \\ \u{1}",
                "naïve — 日本 🚀",
            ] {
                let fast: Value = serde_json::from_slice(&ndjson.delta(text)).unwrap();
                let mut general = ndjson.line(text, None, None);
                assert!(fast["created_at"].as_str().unwrap().ends_with('Z'));
                general["created_at"] = fast["created_at"].clone();
                let fast_text = serde_json::to_string(&fast).unwrap();
                assert_eq!(fast_text, serde_json::to_string(&general).unwrap());
                assert!(ndjson.delta(text).ends_with(b"}\n"));
            }
        }
    }
}

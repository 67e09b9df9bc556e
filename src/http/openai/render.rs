//! The pipeline's events as OpenAI renders them: SSE chunks (a role chunk, content
//! chunks, one finish chunk, the usage chunk when asked, `[DONE]`) or one JSON body.

use bytes::Bytes;
use serde::Serialize;
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
    /// The upstream's own events are passed on ([`Render::relay`]): they bring their own
    /// role, finish and usage chunks.
    relayed: bool,
}

impl Sse {
    pub fn new(kind: Kind, model: &str, include_usage: bool) -> Self {
        let prefix = match kind {
            Kind::Chat => "chatcmpl-",
            Kind::Text => "cmpl-",
        };
        let mut id = String::with_capacity(prefix.len() + uuid::fmt::Simple::LENGTH);
        id.push_str(prefix);
        id.push_str(
            uuid::Uuid::new_v4()
                .simple()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        );
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
            relayed: false,
        };
        // Everything before a chunk's update: the same in every content chunk. Written
        // piece by piece (a formatted template cost a relayed answer 1 % of its work).
        let mut head = Vec::with_capacity(128 + sse.id.len() + sse.model.len());
        head.extend_from_slice(b"data: {\"id\":");
        // Strings into memory: cannot fail.
        let _ = serde_json::to_writer(&mut head, &sse.id);
        head.extend_from_slice(b",\"object\":\"");
        head.extend_from_slice(sse.object(true).as_bytes());
        head.extend_from_slice(b"\",\"created\":");
        head.extend_from_slice(sse.created.to_string().as_bytes());
        head.extend_from_slice(b",\"model\":");
        let _ = serde_json::to_writer(&mut head, &sse.model);
        head.extend_from_slice(b",\"choices\":[{\"index\":0,\"finish_reason\":null,");
        sse.head = head;
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
}

impl Render for Sse {
    type Piece = Bytes;

    fn opening(&mut self) -> Option<Bytes> {
        match self.kind {
            Kind::Chat if !self.relayed => {
                Some(self.chunk(json!({"role": "assistant", "content": ""}), None))
            }
            _ => None,
        }
    }

    /// A content chunk, written straight into its bytes (the same bytes `chunk` gives):
    /// the hot path of every streamed answer.
    fn delta(&mut self, text: &str) -> Bytes {
        self.streamed_chars += text.chars().count();
        let mut out = Vec::with_capacity(self.head.len() + text.len() + 64);
        let (opening, closing): (&[u8], &[u8]) = match self.kind {
            Kind::Chat => (b"\"delta\":{\"content\":", b"}"),
            Kind::Text => (b"\"text\":", b""),
        };
        self.write_update(&mut out, opening, text, closing);
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

    /// The citations, the finish chunk, the usage chunk when asked (the sources on the
    /// last of them) and `[DONE]`, written from their fields (the same bytes as the
    /// chunks' JSON trees: tested).
    fn end(&mut self, end: End<'_>) -> Bytes {
        if self.relayed {
            // The upstream's finish and usage chunks went on as they came.
            return Bytes::from_static(b"data: [DONE]\n\n");
        }
        let mut out = Vec::new();
        // Citations as Open WebUI reads them: `url_citation` annotations in a delta, one
        // per source, covering the whole answer.
        if let (Kind::Chat, Some(annotations)) =
            (self.kind, self.citations(end.sources, self.streamed_chars))
        {
            self.write_update(&mut out, b"\"delta\":{\"annotations\":", &annotations, b"}");
        }
        let finish = FinishChoice {
            index: 0,
            finish_reason: end.finish.as_str(),
            delta: matches!(self.kind, Kind::Chat).then_some(Empty {}),
            text: matches!(self.kind, Kind::Text).then_some(""),
            logprobs: (),
        };
        let chunk = |choices, usage| LastChunk {
            id: &self.id,
            object: self.object(true),
            created: self.created,
            model: &self.model,
            choices,
            usage,
            sources: None,
            context_items: &[],
        };
        // The assistant's sources ride on the last chunk (clients ignore fields they do
        // not know).
        let last = if self.include_usage {
            write_frame(&mut out, &chunk(std::slice::from_ref(&finish), Some(None)));
            chunk(&[], Some(Some(end.usage.into())))
        } else {
            chunk(std::slice::from_ref(&finish), None)
        };
        write_frame(
            &mut out,
            &LastChunk {
                sources: end.sources,
                context_items: end.context_items,
                ..last
            },
        );
        out.extend_from_slice(b"data: [DONE]\n\n");
        Bytes::from(out)
    }

    fn error(&mut self, e: &GatewayError) -> Bytes {
        frame(&OpenAi::error_body(e))
    }

    /// Not when the client asked for the usage event: upstreams that ignore
    /// `stream_options` (llama.cpp's Python server) send none, and the gateway's own
    /// rendering then writes it with the usage it estimated.
    fn relay(&mut self, wire: crate::llm::Wire) -> Option<crate::llm::Relay> {
        self.relayed = wire == crate::llm::Wire::OpenAi && !self.include_usage;
        self.relayed.then_some(crate::llm::Relay { usage: false })
    }

    fn verbatim(&mut self, bytes: Bytes) -> Option<Bytes> {
        Some(bytes)
    }
}

impl Sse {
    /// One chunk carrying one choice update, appended to `out` without a JSON tree (the
    /// same bytes as `chunk`'s): the head serialised once per answer, `opening`, the
    /// update's `value`, `closing`, then the choice's and the chunk's last fields.
    fn write_update(
        &self,
        out: &mut Vec<u8>,
        opening: &[u8],
        value: &(impl Serialize + ?Sized),
        closing: &[u8],
    ) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(opening);
        // Plain values into memory: cannot fail.
        let _ = serde_json::to_writer(&mut *out, value);
        out.extend_from_slice(closing);
        out.extend_from_slice(b",\"logprobs\":null}]");
        if self.include_usage {
            out.extend_from_slice(b",\"usage\":null");
        }
        out.extend_from_slice(b"}\n\n");
    }

    /// One `url_citation` per source, linking to `/v1/sources/{id}` and spanning the
    /// answer's `chars` characters; `None` without sources or links.
    fn citations(&self, sources: Option<&[Source]>, chars: usize) -> Option<Vec<Annotation>> {
        let base = self.links.as_deref()?;
        let sources = sources.filter(|s| !s.is_empty())?;
        Some(
            sources
                .iter()
                .map(|s| Annotation {
                    r#type: "url_citation",
                    url_citation: UrlCitation {
                        url: sources::link(base, &s.id),
                        title: s.title(),
                        start_index: 0,
                        end_index: chars,
                    },
                })
                .collect(),
        )
    }
}

/// An OpenAI whole answer, serialised from the answer's own fields without a JSON tree
/// in between (sources and their citations are the costly part of a tree: an
/// allocation for every key). Fields in the order of [`HttpRender::whole`]'s tree.
#[derive(Serialize)]
struct WholeBody<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: [WholeChoice<'a>; 1],
    usage: UsageJson,
    system_fingerprint: (),
    #[serde(skip_serializing_if = "Option::is_none")]
    sources: Option<&'a [Source]>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    context_items: &'a [crate::context::UsedItem],
}

#[derive(Serialize)]
struct WholeChoice<'a> {
    index: u32,
    finish_reason: &'static str,
    logprobs: (),
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<WholeMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

#[derive(Serialize)]
struct WholeMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<Vec<Annotation>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
}

/// A source cited as a link (`url_citation`), as Open WebUI reads it.
#[derive(Serialize)]
struct Annotation {
    r#type: &'static str,
    url_citation: UrlCitation,
}

#[derive(Serialize)]
struct UrlCitation {
    url: String,
    title: String,
    start_index: usize,
    end_index: usize,
}

/// The last chunks of a stream (the finish chunk, the usage chunk), in the order of
/// `chunk_json`'s and `usage_chunk`'s trees.
#[derive(Serialize)]
struct LastChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: &'a [FinishChoice],
    /// Absent, `null` (usage asked, not this chunk's) or the usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<UsageJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sources: Option<&'a [Source]>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    context_items: &'a [crate::context::UsedItem],
}

#[derive(Serialize)]
struct FinishChoice {
    index: u32,
    finish_reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    delta: Option<Empty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'static str>,
    logprobs: (),
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

/// `data: <json>` and the blank line that ends the event, appended to `out`.
fn write_frame(out: &mut Vec<u8>, value: &impl Serialize) {
    out.extend_from_slice(b"data: ");
    // Plain fields into memory: cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
    out.extend_from_slice(b"\n\n");
}

#[derive(Serialize)]
struct UsageJson {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

impl From<Usage> for UsageJson {
    fn from(u: Usage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
        }
    }
}

impl HttpRender for Sse {
    const CONTENT_TYPE: &'static str = "text/event-stream";

    fn whole(&self, answer: &Answer, _timing: Timing) -> Value {
        // Plain fields always have a JSON form.
        serde_json::to_value(self.whole_body(answer)).unwrap_or_default()
    }

    fn whole_bytes(&self, answer: &Answer, _timing: Timing) -> Vec<u8> {
        // Serialising plain fields into memory cannot fail.
        serde_json::to_vec(&self.whole_body(answer)).unwrap_or_default()
    }

    fn link_sources(&mut self, base: &str) {
        self.links = Some(base.to_string());
    }
}

impl Sse {
    /// A whole answer's body, in its fields.
    fn whole_body<'a>(&'a self, answer: &'a Answer) -> WholeBody<'a> {
        let (message, text) = match self.kind {
            Kind::Chat => {
                let message = WholeMessage {
                    role: "assistant",
                    content: (!answer.text.is_empty() || answer.tool_calls.is_empty())
                        .then_some(answer.text.as_str()),
                    annotations: self
                        .citations(answer.sources.as_deref(), answer.text.chars().count()),
                    tool_calls: answer
                        .tool_calls
                        .iter()
                        .map(ToolCall::openai_json)
                        .collect(),
                };
                (Some(message), None)
            }
            Kind::Text => (None, Some(answer.text.as_str())),
        };
        WholeBody {
            id: &self.id,
            object: self.object(false),
            created: self.created,
            model: &self.model,
            choices: [WholeChoice {
                index: 0,
                finish_reason: answer.finish.as_str(),
                logprobs: (),
                message,
                text,
            }],
            usage: answer.usage.into(),
            system_fingerprint: (),
            sources: answer.sources.as_deref(),
            context_items: &answer.context_items,
        }
    }
}

/// `data: <json>` and the blank line that ends the event.
fn frame(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_json(u: Usage) -> Value {
        json!({
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        })
    }

    /// A whole answer as a JSON tree, field by field (what the typed body writes).
    fn general_whole(sse: &Sse, answer: &Answer) -> Value {
        let mut choice =
            json!({"index": 0, "finish_reason": answer.finish.as_str(), "logprobs": null});
        match sse.kind {
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
                    annotations(sse, answer.sources.as_deref(), answer.text.chars().count())
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
            "id": sse.id,
            "object": sse.object(false),
            "created": sse.created,
            "model": sse.model,
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

    /// [`Sse::citations`] as JSON.
    fn annotations(sse: &Sse, sources: Option<&[Source]>, chars: usize) -> Option<Value> {
        // A list of plain fields always has a JSON form.
        sse.citations(sources, chars)
            .and_then(|list| serde_json::to_value(list).ok())
    }

    /// The end of a stream as the chunks' JSON trees give it (what `end` writes).
    fn general_end(sse: &Sse, end: &End<'_>) -> Vec<u8> {
        let finish = end.finish.as_str();
        let mut last = match sse.kind {
            Kind::Chat => sse.chunk_json(json!({}), Some(finish)),
            Kind::Text => sse.chunk_json(json!(""), Some(finish)),
        };
        let mut out = Vec::new();
        if let (Kind::Chat, Some(annotations)) =
            (sse.kind, annotations(sse, end.sources, sse.streamed_chars))
        {
            out.extend_from_slice(&sse.chunk(json!({ "annotations": annotations }), None));
        }
        if sse.include_usage {
            out.extend_from_slice(&frame(&last));
            last = json!({
                "id": sse.id,
                "object": sse.object(true),
                "created": sse.created,
                "model": sse.model,
                "choices": [],
                "usage": usage_json(end.usage),
            });
        }
        if let Some(sources) = end.sources {
            last["sources"] = json!(sources);
        }
        if !end.context_items.is_empty() {
            last["context_items"] = json!(end.context_items);
        }
        out.extend_from_slice(&frame(&last));
        out.extend_from_slice(b"data: [DONE]\n\n");
        out
    }

    #[test]
    fn the_end_of_a_stream_is_the_general_chunks() {
        use crate::context::UsedItem;
        use crate::llm::FinishReason;
        let sources = [source("a1", "Guide > Install"), source("b2", "")];
        let items = [UsedItem {
            id: "file-1".into(),
            category: "file".into(),
            path: None,
            cut: false,
        }];
        let timing = Timing {
            started: std::time::Instant::now(),
            first_token: None,
        };
        for kind in [Kind::Chat, Kind::Text] {
            for usage in [false, true] {
                for links in [None, Some("http://gw.example/")] {
                    for (with_sources, with_items) in [
                        (None, &items[..0]),
                        (Some(&sources[..0]), &items[..0]),
                        (Some(&sources[..]), &items[..]),
                    ] {
                        let mut sse = Sse::new(kind, "m\"odel/ünï", usage);
                        if let Some(base) = links {
                            sse.link_sources(base);
                        }
                        let _ = sse.delta("naïve — 日本 🚀");
                        let end = End {
                            finish: FinishReason::Length,
                            usage: Usage {
                                prompt_tokens: 10,
                                completion_tokens: 3,
                            },
                            sources: with_sources,
                            context_items: with_items,
                            timing,
                        };
                        let general = general_end(&sse, &end);
                        assert_eq!(
                            String::from_utf8_lossy(&sse.end(end)),
                            String::from_utf8_lossy(&general)
                        );
                    }
                }
            }
        }
    }

    fn source(id: &str, section: &str) -> Source {
        Source {
            id: id.into(),
            file: "docs/guía \"quoted\".md".into(),
            section: section.into(),
            lines: [3, 17],
            doc_type: "narrative",
            score: 1.0 / 61.0,
            text: "never sent".into(),
        }
    }

    /// The whole answer written from its fields is byte for byte the JSON tree's.
    #[test]
    fn whole_bytes_are_the_whole_tree() {
        use crate::context::UsedItem;
        use crate::llm::FinishReason;
        let answer = |text: &str, sources: Option<Vec<Source>>| Answer {
            text: text.into(),
            tool_calls: Vec::new(),
            sources,
            context_items: Vec::new(),
            finish: FinishReason::Stop,
            usage: Usage {
                prompt_tokens: 1200,
                completion_tokens: 34,
            },
            verbatim: None,
        };
        let mut answers = vec![
            answer("Plain answer.", None),
            answer("", Some(Vec::new())),
            answer(
                "naïve — 日本 🚀 \"q\"\n",
                Some(vec![source("a1", "Guide > Install"), source("b2", "")]),
            ),
        ];
        let mut with_tools = answer("", None);
        with_tools.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: json!({"path": "src/main.rs"}),
        }];
        with_tools.finish = FinishReason::ToolCalls;
        answers.push(with_tools);
        let mut with_items = answer("Uses the file.", Some(vec![source("c3", "")]));
        with_items.context_items = vec![UsedItem {
            id: "file-1".into(),
            category: "file".into(),
            path: Some("src/lib.rs".into()),
            cut: true,
        }];
        answers.push(with_items);
        let timing = Timing {
            started: std::time::Instant::now(),
            first_token: None,
        };
        for kind in [Kind::Chat, Kind::Text] {
            for links in [None, Some("http://127.0.0.1:8080")] {
                let mut sse = Sse::new(kind, "m\"odel/ünï", false);
                if let Some(base) = links {
                    sse.link_sources(base);
                }
                for a in &answers {
                    let tree = serde_json::to_vec(&general_whole(&sse, a)).unwrap();
                    assert_eq!(sse.whole(a, timing), general_whole(&sse, a));
                    assert_eq!(
                        String::from_utf8_lossy(&sse.whole_bytes(a, timing)),
                        String::from_utf8_lossy(&tree)
                    );
                }
            }
        }
    }

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

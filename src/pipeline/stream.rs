//! The answer stream: upstream chunks become pipeline events (sources first, usage
//! estimated when the upstream gave none, an idle upstream ended with a timeout, the turn
//! kept for its session as it streams), and a whole answer collected from them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use opentelemetry::KeyValue;

use super::memory::Memory;
use super::{ms, Event, EventStream, Pipeline, Source};
use crate::context::UsedItem;
use crate::error::GatewayError;
use crate::llm::{
    Chunk, ChunkStream, FinishReason, ToolCall, UpstreamError, UpstreamErrorKind, Usage,
};
use crate::privacy::Privacy;
use crate::telemetry::UpstreamClock;
use crate::trace;

/// A whole answer, for non-streaming responses.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// `None` for passthrough models.
    pub sources: Option<Vec<Source>>,
    /// The attached context items the prompt held.
    pub context_items: Vec<UsedItem>,
    pub finish: FinishReason,
    pub usage: Usage,
    /// Relayed: the upstream's whole answer as it came, what the client is sent.
    pub verbatim: Option<bytes::Bytes>,
}

impl Pipeline {
    /// Where an answer streams from; `span` is the upstream request's, ended with it;
    /// `asked` is when the upstream was asked (the request is answered only once its
    /// first piece came: retries happen before it).
    pub(super) fn upstream(
        &self,
        clock: Arc<UpstreamClock>,
        span: trace::Span,
        asked: Instant,
    ) -> Upstream {
        let traced = span.is_recording();
        Upstream {
            url: self.chat.base_url().to_string(),
            idle_timeout: self.config.idle_timeout,
            clock,
            span,
            asked,
            first_chunk: std::cell::Cell::new(None),
            privacy: (traced && trace::capture_content()).then(|| self.privacy.clone()),
        }
    }
}

/// The assistant's extras around an answer.
pub(super) struct Assistant {
    pub(super) sources: Vec<Source>,
    /// The attached context items the prompt held.
    pub(super) items: Vec<UsedItem>,
    pub(super) cite: bool,
    pub(super) memory: Option<Memory>,
    pub(super) started: Instant,
}

/// Where an answer streams from, for its errors.
pub(super) struct Upstream {
    pub(super) url: String,
    pub(super) idle_timeout: Duration,
    /// Time spent awaiting the next chunk is upstream time.
    pub(super) clock: Arc<UpstreamClock>,
    /// The span of the request to the upstream, ended with the answer (ended, failed, or
    /// dropped).
    pub(super) span: trace::Span,
    /// When the upstream was asked (for the time to the first token).
    pub(super) asked: Instant,
    /// Seconds from asking to the first piece, until the span holds them (set with the
    /// usage at the end, in one lock, or when this is dropped).
    pub(super) first_chunk: std::cell::Cell<Option<f64>>,
    /// With content capture: the rules the answer is cleaned by before it is recorded.
    pub(super) privacy: Option<Arc<Privacy>>,
}

impl Upstream {
    /// The first piece of the answer arrived.
    fn first_token(&self) {
        if self.span.is_recording() {
            self.first_chunk
                .set(Some(self.asked.elapsed().as_secs_f64()));
            self.span.event("first token");
        }
    }

    /// The time to the first chunk, once (set with the usage, or when dropped).
    fn first_chunk_attribute(&self) -> Option<KeyValue> {
        self.first_chunk
            .take()
            .map(|secs| KeyValue::new("gen_ai.response.time_to_first_chunk", secs))
    }

    /// The answer ended well: its usage and why it stopped, and (captured) the answer.
    fn done(&self, finish: FinishReason, usage: Usage, answer: &mut String) {
        let span = &self.span;
        if !span.is_recording() {
            return;
        }
        span.set_all(
            [
                KeyValue::new("gen_ai.usage.input_tokens", usage.prompt_tokens as i64),
                KeyValue::new("gen_ai.usage.output_tokens", usage.completion_tokens as i64),
                KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    trace::Span::strings(&[finish.as_str()]),
                ),
            ]
            .into_iter()
            .chain(self.first_chunk_attribute()),
        );
        if let Some(privacy) = &self.privacy {
            let _ = privacy.clean(answer);
            let messages = serde_json::json!([{"role": "assistant",
                "parts": [{"type": "text", "content": answer}], "finish_reason": finish.as_str()}]);
            span.set("gen_ai.output.messages", messages.to_string());
            span.set("output.value", std::mem::take(answer));
        }
    }
}

impl Drop for Upstream {
    /// An answer that failed or was dropped after its first piece still has its time.
    fn drop(&mut self) {
        if let Some(attribute) = self.first_chunk_attribute() {
            self.span.set_all([attribute]);
        }
    }
}

/// Most bytes of an answer a span records (content capture).
const MAX_TRACED_ANSWER_BYTES: usize = 64 << 10;

/// Upstream chunks → pipeline events; usage is estimated when the upstream gave none. An
/// upstream silent for longer than the idle timeout ends the answer with a timeout error
/// (dropping the chunk stream cancels the upstream request).
pub(super) fn answer_events(
    mut chunks: ChunkStream,
    upstream: Upstream,
    prompt_estimate: u64,
    assistant: Option<Assistant>,
) -> EventStream {
    async_stream::stream! {
        let (sources, items, cite, mut memory, started) = match assistant {
            Some(a) => (Some(a.sources), a.items, a.cite, a.memory, Some(a.started)),
            None => (None, Vec::new(), false, None, None),
        };
        if let Some(sources) = &sources {
            yield Event::Sources(sources.clone());
        }
        if !items.is_empty() {
            yield Event::Items(items);
        }
        let mut deltas = 0u64;
        // The answer as the span records it (content capture only).
        let mut answer = String::new();
        // One timer for the whole answer, moved on only when it fires before the answer
        // was quiet for the idle timeout: a timeout per chunk registered and cleared a
        // timer (under the timer wheel's lock) on every event.
        let idle = upstream.idle_timeout;
        let quiet = tokio::time::sleep(idle);
        tokio::pin!(quiet);
        loop {
            let waiting = tokio::time::Instant::now();
            let next = loop {
                tokio::select! {
                    biased;
                    item = chunks.next() => break Ok(item),
                    // Unconstrained, as a timeout's own timer is: a stream that used up
                    // the task's budget still meets its bound.
                    () = tokio::task::unconstrained(&mut quiet) => {
                        let due = crate::llm::resilient::after(waiting, idle);
                        if tokio::time::Instant::now() >= due {
                            break Err(());
                        }
                        quiet.as_mut().reset(due);
                    }
                }
            };
            upstream.clock.since(waiting.into_std());
            let item = match next {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(()) => Err(UpstreamError::new(
                    UpstreamErrorKind::Timeout,
                    &upstream.url,
                    format!("no token for {} s", upstream.idle_timeout.as_secs_f64()),
                )),
            };
            match item {
                Ok(Chunk::Text(text)) => {
                    if deltas == 0 {
                        upstream.first_token();
                    }
                    deltas += 1;
                    if let Some(m) = memory.as_mut() {
                        m.keep(&text);
                    }
                    if upstream.privacy.is_some() && answer.len() < MAX_TRACED_ANSWER_BYTES {
                        answer.push_str(&text);
                    }
                    yield Event::Delta(text);
                }
                Ok(Chunk::ToolCalls(calls)) => yield Event::ToolCalls(calls),
                Ok(Chunk::Verbatim { bytes, deltas: n }) => {
                    if deltas == 0 && n > 0 {
                        upstream.first_token();
                    }
                    deltas += u64::from(n);
                    yield Event::Verbatim { bytes, deltas: n };
                }
                Ok(Chunk::Done { finish, usage }) => {
                    if let Some(list) = sources.as_deref().filter(|s| cite && !s.is_empty()) {
                        let text = citation(list);
                        if let Some(m) = memory.as_mut() {
                            m.keep(&text);
                        }
                        yield Event::Delta(text);
                    }
                    if let Some(m) = memory.take() {
                        m.save(false).await;
                    }
                    let usage = usage.unwrap_or(Usage {
                        prompt_tokens: prompt_estimate,
                        completion_tokens: deltas,
                    });
                    upstream.done(finish, usage, &mut answer);
                    if let Some(started) = started {
                        tracing::info!(
                            stage = "generate",
                            ms = ms(started),
                            deltas,
                            prompt_tokens = usage.prompt_tokens,
                            completion_tokens = usage.completion_tokens,
                            finish = finish.as_str(),
                            "stage"
                        );
                    }
                    yield Event::Done { finish, usage };
                    return;
                }
                Err(e) => {
                    upstream.span.fail(super::spans::upstream_kind(&e));
                    if let Some(m) = memory.take() {
                        m.save(true).await;
                    }
                    yield Event::Error(e.into());
                    return;
                }
            }
        }
        if let Some(m) = memory.take() {
            m.save(true).await;
        }
        let closed = UpstreamError::new(UpstreamErrorKind::Closed, &upstream.url, "stream ended early");
        upstream.span.fail("closed");
        yield Event::Error(closed.into());
    }
    .boxed()
}

/// The "Sources:" list appended to the answer with `assistant.cite_sources`.
pub(super) fn citation(sources: &[Source]) -> String {
    let mut text = String::from("\n\nSources:");
    for s in sources {
        text.push_str(&format!("\n- {}", s.file));
        if !s.section.is_empty() {
            text.push_str(&format!(" § {}", s.section));
        }
        text.push_str(&format!(" (lines {}-{})", s.lines[0], s.lines[1]));
    }
    text
}

/// Most bytes of an answer a caller that takes it whole is given (an upstream that never
/// stops must not grow the gateway's memory until `llm.max_answer_secs`).
pub const MAX_WHOLE_ANSWER_BYTES: usize = 16 << 20;

/// The error for an answer longer than `MAX_WHOLE_ANSWER_BYTES`.
pub fn answer_too_long() -> GatewayError {
    GatewayError::from(UpstreamError::new(
        UpstreamErrorKind::Protocol,
        "",
        format!(
            "the answer is longer than {} MiB: ask for it streamed, or for fewer tokens",
            MAX_WHOLE_ANSWER_BYTES >> 20
        ),
    ))
}

/// Collects a whole answer (at most `MAX_WHOLE_ANSWER_BYTES`); an error event becomes the
/// error.
pub async fn collect(mut events: EventStream) -> Result<Answer, GatewayError> {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut sources = None;
    let mut context_items = Vec::new();
    let mut verbatim = None;
    while let Some(event) = events.next().await {
        match event {
            Event::Sources(s) => sources = Some(s),
            Event::Items(i) => context_items = i,
            Event::Delta(t) => {
                if text.len() + t.len() > MAX_WHOLE_ANSWER_BYTES {
                    return Err(answer_too_long());
                }
                text.push_str(&t);
            }
            Event::ToolCalls(calls) => tool_calls.extend(calls),
            // A whole answer relayed is one body (its bound was the upstream reply's).
            Event::Verbatim { bytes, .. } => verbatim = Some(bytes),
            Event::Done { finish, usage } => {
                return Ok(Answer {
                    text,
                    tool_calls,
                    sources,
                    context_items,
                    finish,
                    usage,
                    verbatim,
                });
            }
            Event::Error(e) => return Err(e),
        }
    }
    Err(GatewayError::internal(
        "the answer ended without a final event",
    ))
}

//! The pipeline's trace spans that need more than a line at their stage: the upstream
//! request's (GenAI conventions, the prompt with content capture) and a search's hits
//! (ids and scores; texts with content capture). The stages open their own spans
//! (`trace`, docs/tracing.md).

use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

use super::Pipeline;
use crate::llm::{Input, UpstreamError, UpstreamRequest};
use crate::retrieval::hybrid::Scored;
use crate::telemetry;
use crate::trace;

impl Pipeline {
    /// The span of one request to the upstream model (`chat qwen2.5-coder`), after the
    /// GenAI conventions; with content capture, the messages it is given.
    pub(super) fn chat_span(
        &self,
        operation: &'static str,
        request: &UpstreamRequest,
    ) -> trace::Span {
        let current = trace::Span::current();
        if !current.is_recording() {
            return trace::Span::none();
        }
        let name = trace::span_name(operation, &request.model);
        // One string for both attributes.
        let model: std::sync::Arc<str> = request.model.as_str().into();
        let span = current.child_of_kind(name, SpanKind::Client, || {
            // Room for those set at the end (usage, finish, time to first chunk).
            let mut attributes = Vec::with_capacity(16);
            attributes.extend([
                KeyValue::new("gen_ai.operation.name", operation),
                KeyValue::new(
                    "gen_ai.provider.name",
                    if self.config.send_num_ctx {
                        "ollama"
                    } else {
                        "openai"
                    },
                ),
                KeyValue::new("gen_ai.request.model", model.clone()),
                KeyValue::new("gen_ai.request.stream", !request.whole),
                KeyValue::new("server.address", self.server.0.clone()),
                KeyValue::new("server.port", self.server.1),
                // The upstream does not say which model answered: the one asked.
                KeyValue::new("gen_ai.response.model", model),
            ]);
            if !request.tools.is_empty() {
                attributes.push(KeyValue::new("assist.tools", request.tools.len() as i64));
            }
            if let Some(max) = request.params.max_tokens {
                attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(max)));
            }
            if let Some(t) = request.params.temperature {
                attributes.push(KeyValue::new("gen_ai.request.temperature", t));
            }
            attributes
        });
        if trace::capture_content() {
            let messages = match &request.input {
                Input::Chat(messages) => trace::messages_json(
                    messages
                        .iter()
                        .map(|m| (m.role.as_str(), m.content.as_str())),
                ),
                Input::Prompt { prompt, .. } => trace::messages_json([("user", prompt.as_str())]),
            };
            span.set("gen_ai.input.messages", messages);
        }
        span
    }

    /// A search's hits on its span: ids and scores (`assist.retrieval.hits`, and as
    /// `gen_ai.retrieval.documents`, with their cleaned texts and the query when content
    /// is captured). Hits of excluded paths are left out, as they are from the prompt.
    pub(super) fn trace_hits(&self, span: &trace::Span, query: &str, hits: &[Scored]) {
        if !span.is_recording() {
            return;
        }
        let kept: Vec<&Scored> = hits
            .iter()
            .filter(|h| !self.privacy.excluded(&h.chunk.source_file))
            .collect();
        // Shared by both attributes without capture: one string, not two copies.
        let ids: std::sync::Arc<str> = trace::documents_json(
            kept.iter()
                .map(|h| (h.chunk.chunk_id.as_str(), h.score, None)),
        )
        .into();
        let count = KeyValue::new("assist.retrieval.count", kept.len() as i64);
        let hits = KeyValue::new("assist.retrieval.hits", ids.clone());
        if !trace::capture_content() {
            span.set_all([
                count,
                hits,
                KeyValue::new("gen_ai.retrieval.documents", ids),
            ]);
            return;
        }
        let texts: Vec<String> = kept
            .iter()
            .map(|h| {
                let mut text = h.chunk.text.clone();
                let _ = self.privacy.clean(&mut text);
                text
            })
            .collect();
        let docs = trace::documents_json(
            kept.iter()
                .zip(&texts)
                .map(|(h, t)| (h.chunk.chunk_id.as_str(), h.score, Some(t.as_str()))),
        );
        let mut query = query.to_string();
        let _ = self.privacy.clean(&mut query);
        span.set_all([
            count,
            hits,
            KeyValue::new("gen_ai.retrieval.documents", docs),
            KeyValue::new("gen_ai.retrieval.query.text", query),
        ]);
    }
}

/// An upstream error's kind, as spans name it (`error.type`).
pub(super) fn upstream_kind(e: &UpstreamError) -> &'static str {
    telemetry::upstream_error_kind(&e.kind).unwrap_or("unsupported")
}

/// The upstream's host and port from its base URL (`server.address`, `server.port`).
pub(super) fn server_of(base_url: &str) -> (std::sync::Arc<str>, i64) {
    reqwest::Url::parse(base_url).map_or_else(
        |_| ("".into(), 0),
        |u| {
            let host = u.host_str().unwrap_or_default().into();
            (host, u.port_or_known_default().map_or(0, i64::from))
        },
    )
}

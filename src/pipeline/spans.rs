//! The pipeline's trace spans that need more than a line at their stage: the upstream
//! request's (GenAI conventions, the prompt with content capture) and a search's hits
//! (ids and scores; texts with content capture). The stages open their own spans
//! (`trace`, docs/tracing.md).

use tracing::field::Empty;

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
    ) -> tracing::Span {
        if !trace::enabled() {
            return tracing::Span::none();
        }
        let span = tracing::info_span!(target: trace::TARGET, "chat",
            otel.name = format!("{operation} {}", request.model).as_str(),
            otel.kind = "client",
            gen_ai.operation.name = operation,
            gen_ai.provider.name = if self.config.send_num_ctx { "ollama" } else { "openai" },
            gen_ai.request.model = request.model.as_str(),
            gen_ai.request.stream = true,
            server.address = self.server.0.as_str(),
            server.port = self.server.1,
            gen_ai.request.max_tokens = request.params.max_tokens.map(i64::from),
            gen_ai.request.temperature = request.params.temperature,
            // The upstream does not say which model answered: the one asked.
            gen_ai.response.model = request.model.as_str(),
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.response.time_to_first_chunk = Empty,
            assist.tools = request.tools.len() as i64,
        );
        if trace::capture_content() {
            let messages = match &request.input {
                Input::Chat(messages) => trace::messages_json(
                    messages
                        .iter()
                        .map(|m| (m.role.as_str(), m.content.as_str())),
                ),
                Input::Prompt { prompt, .. } => trace::messages_json([("user", prompt.as_str())]),
            };
            trace::set(&span, "gen_ai.input.messages", messages);
        }
        span
    }

    /// A search's hits on its span: ids and scores (`assist.retrieval.hits`, and as
    /// `gen_ai.retrieval.documents`, with their cleaned texts and the query when content
    /// is captured). Hits of excluded paths are left out, as they are from the prompt.
    pub(super) fn trace_hits(&self, span: &tracing::Span, query: &str, hits: &[Scored]) {
        if span.is_disabled() {
            return;
        }
        let kept: Vec<&Scored> = hits
            .iter()
            .filter(|h| !self.privacy.excluded(&h.chunk.source_file))
            .collect();
        span.record("assist.retrieval.count", kept.len() as i64);
        let ids = trace::documents_json(
            kept.iter()
                .map(|h| (h.chunk.chunk_id.as_str(), h.score, None)),
        );
        trace::set(span, "assist.retrieval.hits", ids.clone());
        if trace::capture_content() {
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
            trace::set(span, "gen_ai.retrieval.documents", docs);
            let mut query = query.to_string();
            let _ = self.privacy.clean(&mut query);
            trace::set(span, "gen_ai.retrieval.query.text", query);
        } else {
            trace::set(span, "gen_ai.retrieval.documents", ids);
        }
    }
}

/// An upstream error's kind, as spans name it (`error.type`).
pub(super) fn upstream_kind(e: &UpstreamError) -> &'static str {
    telemetry::upstream_error_kind(&e.kind).unwrap_or("unsupported")
}

/// The upstream's host and port from its base URL (`server.address`, `server.port`).
pub(super) fn server_of(base_url: &str) -> (String, i64) {
    reqwest::Url::parse(base_url).map_or_else(
        |_| (String::new(), 0),
        |u| {
            let host = u.host_str().unwrap_or_default().to_string();
            (host, u.port_or_known_default().map_or(0, i64::from))
        },
    )
}

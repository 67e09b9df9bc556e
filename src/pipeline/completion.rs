//! The completion path, fill-in-the-middle: the completion model's FIM prompt with
//! repository snippets, sent raw, and the middle cut where `fill` says it ends.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use super::stream::answer_events;
use super::window::estimate_tokens;
use super::{fill, ms, ChatTurn, Event, EventStream, Pipeline};
use crate::context::budget::estimate_tokens as estimate;
use crate::error::GatewayError;
use crate::llm::{FinishReason, Input, UpstreamRequest, Usage, Wire};
use crate::sessions::Owner;
use crate::telemetry::{self, UpstreamClock};

pub(super) mod recent {
    //! Recent middles: an editor asks for the same completion again when the user comes
    //! back to the same place, or after it cancelled the request at the next keystroke
    //! and the text returned to what it was. The same request of the same caller within
    //! [`TTL`] is answered at once from the middle the upstream wrote the first time.

    use std::hash::{Hash, Hasher};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use futures::StreamExt;

    use crate::llm::{FinishReason, UpstreamRequest, Usage};
    use crate::pipeline::{Event, EventStream};
    use crate::sessions::Owner;

    /// How long a middle is kept.
    pub const TTL: Duration = Duration::from_secs(60);
    /// Middles kept (each at most [`MAX_MIDDLE`] bytes).
    const ENTRIES: usize = 512;
    const MAX_MIDDLE: usize = 8 * 1024;

    /// A completion request as the cache tells them apart: the caller, the model, the
    /// prompt as written for it and every option that shapes the middle.
    pub fn key(owner: &Owner, request: &UpstreamRequest) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        owner.as_str().hash(&mut h);
        request.model.hash(&mut h);
        format!("{:?}", request.input).hash(&mut h);
        format!("{:?}", request.params).hash(&mut h);
        h.finish()
    }

    pub struct Recent {
        middles: quick_cache::sync::Cache<u64, (Instant, Arc<str>)>,
    }

    impl Default for Recent {
        fn default() -> Self {
            Self {
                middles: quick_cache::sync::Cache::new(ENTRIES),
            }
        }
    }

    impl Recent {
        pub fn get(&self, key: u64) -> Option<Arc<str>> {
            let (at, middle) = self.middles.get(&key)?;
            (at.elapsed() < TTL).then_some(middle)
        }

        /// The events, the middle kept when it ends as it should (not cut by
        /// `max_tokens`, not failed, not abandoned).
        pub fn keep(self: &Arc<Self>, key: u64, events: EventStream) -> EventStream {
            let recent = self.clone();
            let middle = Arc::new(Mutex::new(Some(String::new())));
            events
                .inspect(move |event| {
                    let mut slot = middle.lock().unwrap_or_else(|e| e.into_inner());
                    match event {
                        Event::Delta(text) => {
                            if let Some(m) = slot.as_mut() {
                                m.push_str(text);
                                if m.len() > MAX_MIDDLE {
                                    *slot = None;
                                }
                            }
                        }
                        Event::Done {
                            finish: FinishReason::Stop,
                            ..
                        } => {
                            if let Some(m) = slot.take() {
                                recent.middles.insert(key, (Instant::now(), m.into()));
                            }
                        }
                        _ => *slot = None,
                    }
                })
                .boxed()
        }
    }

    /// A kept middle, as the upstream's answer would have come.
    pub fn replay(middle: Arc<str>) -> EventStream {
        futures::stream::iter([
            Event::Delta(middle.to_string()),
            Event::Done {
                finish: FinishReason::Stop,
                usage: Usage::default(),
            },
        ])
        .boxed()
    }
}

impl Pipeline {
    /// The completion model's FIM template (`completion.template`, or its family by name).
    pub(super) fn fill_template(&self) -> Option<fill::Template> {
        fill::Template::choose(
            &self.config.completion_template,
            &self.config.completion_model,
        )
    }

    /// Whether `model` names the completion model itself (`name` and `name:latest` as
    /// one), not the assistant.
    pub(super) fn names_completion_model(&self, model: &str) -> bool {
        !self.is_assistant(model) && crate::llm::same_model(model, &self.config.completion_model)
    }

    /// The completion model's FIM template when the gateway fills in the middle for it
    /// by its own name (`model`): an OpenAI-compatible server asked with `suffix` does not
    /// (llama.cpp's appends it as text), so unless every upstream is Ollama (which
    /// renders the model's own template with the suffix), the gateway writes the template.
    pub(super) fn fills_for(&self, model: &str) -> Option<fill::Template> {
        if self.names_completion_model(model) && self.chat.relays() != Some(Wire::Ollama) {
            self.fill_template()
        } else {
            None
        }
    }

    /// A passthrough request for the completion model by its own name, with a `suffix`,
    /// that the gateway fills in ([`Self::fills_for`]): the template written raw and the
    /// middle's ends, without the repository's snippets (those are what `brunix` adds).
    /// A prompt the client wrote in a FIM template itself is forwarded as written.
    pub(super) fn own_fill(&self, request: &UpstreamRequest) -> Option<fill::Template> {
        if has_suffix(&request.input) {
            self.fills_for(&request.model)
        } else {
            None
        }
    }

    /// Fill-in-the-middle: the completion model's FIM prompt, with repository snippets
    /// when `repository` (the assistant's completions), sent raw; the middle ended by the
    /// gateway's rules (see `fill`). No classifier, no reformulator, no session: this
    /// path is about latency.
    pub(super) async fn run_fill(
        &self,
        turn: ChatTurn,
        owner: &Owner,
        clock: Arc<UpstreamClock>,
        repository: bool,
    ) -> Result<EventStream, GatewayError> {
        let started = Instant::now();
        let mut request = turn.request;
        let Input::Prompt {
            prompt,
            suffix,
            system,
            ..
        } = &mut request.input
        else {
            return Err(GatewayError::internal("a completion without a prompt"));
        };
        let mut suffix = match suffix.take() {
            Some(s) => s,
            None => {
                let (p, s) = fill::split_templated(prompt).unwrap_or_default();
                *prompt = p;
                s
            }
        };
        let mut cleaned = self.privacy.clean(prompt);
        cleaned.add(self.privacy.clean(&mut suffix));
        if let Some(system) = system.as_mut() {
            cleaned.add(self.privacy.clean(system));
        }
        cleaned.report("completion", "the upstream");
        let prefix = prompt.clone();
        if repository {
            request.model = self.config.completion_model.clone();
        }
        let room = self.fill_room(&request, &clock).await;
        let Some(template) = self.fill_template() else {
            // A family the gateway does not know: the upstream's own FIM (Ollama renders
            // the model's template with the suffix).
            if let Input::Prompt {
                prompt,
                suffix: s,
                system,
                ..
            } = &mut request.input
            {
                let system = system.as_deref().map_or(0, estimate);
                let (p, fitted) = fill::fit(prompt, &suffix, room.saturating_sub(system));
                *prompt = p;
                *s = Some(fitted);
            }
            let estimate = estimate_tokens(&request.input);
            let span = self.chat_span("text_completion", &request);
            let asked = Instant::now();
            let chunks = span
                .within(clock.time(self.chat.stream(&request)))
                .await
                .inspect_err(|e| span.fail(super::spans::upstream_kind(e)))?;
            return Ok(answer_events(
                chunks,
                self.upstream(clock, span, asked),
                estimate,
                None,
            ));
        };
        let repo = if !repository || self.config.completion_context_chars == 0 {
            Vec::new()
        } else {
            let query = fill::query(&prefix, &suffix);
            let search = self
                .retriever
                .search(&query, crate::retrieval::hybrid::Mode::Lexical);
            match tokio::time::timeout(self.config.completion_deadline, search).await {
                Ok(Ok(mut hits)) => {
                    let _ = self.protect_hits(&mut hits);
                    fill::repository(
                        &hits,
                        &prefix,
                        &suffix,
                        self.config.completion_context_chars,
                    )
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %format!("{e:#}"), "completion: the repository search failed");
                    Vec::new()
                }
                Err(_) => {
                    tracing::info!("completion: the repository search missed its deadline");
                    Vec::new()
                }
            }
        };
        // The prompt fits the window: the prefix loses its start, the suffix its end.
        let frame = estimate(&template.render("", "", &repo));
        let (prefix, suffix) = fill::fit(&prefix, &suffix, room.saturating_sub(frame));
        let text = template.render(&prefix, &suffix, &repo);
        tracing::info!(
            stage = "fill",
            ms = ms(started),
            template = ?template,
            prefix_chars = prefix.len(),
            suffix_chars = suffix.len(),
            snippets = repo.len(),
            "stage"
        );
        // Its events are cut here, never relayed.
        request.relay = None;
        // A fallback may take the prompt when its model reads the same template.
        request.template_peers = self
            .config
            .fallback_models
            .iter()
            .filter(|m| fill::Template::of_model(m) == Some(template))
            .cloned()
            .collect();
        request.input = Input::Prompt {
            prompt: text,
            suffix: None,
            system: None,
            raw: true,
            images: Vec::new(),
        };
        for stop in template.stops() {
            if !request.params.stop.iter().any(|s| s == stop) {
                request.params.stop.push((*stop).to_string());
            }
        }
        let key = recent::key(owner, &request);
        if let Some(middle) = self.recent_fills.get(key) {
            tracing::info!(
                middle_chars = middle.len(),
                "completion: answered from the recent completions"
            );
            telemetry::completion_cache(true);
            return Ok(recent::replay(middle));
        }
        telemetry::completion_cache(false);
        let estimate = estimate_tokens(&request.input);
        let most = request.params.max_tokens;
        let span = self.chat_span("text_completion", &request);
        let asked = Instant::now();
        let chunks = span
            .within(clock.time(self.chat.stream(&request)))
            .await
            .inspect_err(|e| span.fail(super::spans::upstream_kind(e)))?;
        let events = answer_events(chunks, self.upstream(clock, span, asked), estimate, None);
        let events = ended(
            events,
            fill::Ender::new(template, &prefix, &suffix),
            estimate,
            most,
        );
        Ok(self.recent_fills.keep(key, events))
    }
}

impl Pipeline {
    /// The tokens a fill's prompt may take: the window less the answer's room, and a
    /// margin for the template's own tokens.
    async fn fill_room(&self, request: &UpstreamRequest, clock: &UpstreamClock) -> usize {
        let (window, answer) = self.window_and_answer(&request.params, clock).await;
        window.saturating_sub(answer + 32)
    }
}

/// A completion request with a suffix.
fn has_suffix(input: &Input) -> bool {
    matches!(
        input,
        Input::Prompt {
            suffix: Some(_),
            ..
        }
    )
}

/// A completion for the assistant that asks for a middle: a suffix, or a prompt the
/// client already wrote in a FIM template (continue's OpenAI provider writes StarCoder's
/// for a model name it does not know, and sends no suffix).
pub(super) fn is_fill(input: &Input) -> bool {
    match input {
        Input::Prompt {
            suffix: Some(_), ..
        } => true,
        Input::Prompt { prompt, .. } => fill::split_templated(prompt).is_some(),
        _ => false,
    }
}

/// A completion's events, the middle cut where `ender` says it ends (then the upstream
/// request is dropped, which cancels it); what could still turn into an end is held back
/// until it is known not to. A cut middle's usage is estimated (the prompt's
/// `prompt_estimate`, the text the upstream wrote until then): the upstream's own count
/// comes only at its end, and a key's usage must not count the completion as free.
pub(super) fn ended(
    mut events: EventStream,
    ender: fill::Ender,
    prompt_estimate: u64,
    max_tokens: Option<u32>,
) -> EventStream {
    Box::pin(async_stream::stream! {
        let mut text = String::new();
        let mut sent = 0;
        // Where the middle starts (after blanks the model wrote first that the cursor's
        // line already has); `None` until known. Its ends are found in the middle alone.
        let mut start = None;
        while let Some(event) = events.next().await {
            match event {
                Event::Delta(piece) => {
                    text.push_str(&piece);
                    let lead = match start {
                        Some(lead) => lead,
                        None => match ender.start(&text) {
                            Some(lead) => {
                                (start, sent) = (Some(lead), lead);
                                lead
                            }
                            None => continue,
                        },
                    };
                    if let Some(end) = ender.end(&text[lead..]).map(|end| end + lead) {
                        if end > sent {
                            yield Event::Delta(text[sent..end].to_string());
                        }
                        let usage = Usage {
                            prompt_tokens: prompt_estimate,
                            // An estimate from characters: never more than the upstream
                            // was allowed to write.
                            completion_tokens: (crate::context::budget::estimate_tokens(&text)
                                as u64)
                                .min(max_tokens.map_or(u64::MAX, u64::from)),
                        };
                        yield Event::Done { finish: FinishReason::Stop, usage };
                        return;
                    }
                    let safe = ender.safe(&text[lead..]) + lead;
                    if safe > sent {
                        yield Event::Delta(text[sent..safe].to_string());
                        sent = safe;
                    }
                }
                Event::Done { finish, usage } => {
                    if start.is_some() && text.len() > sent {
                        yield Event::Delta(text[sent..].to_string());
                    }
                    yield Event::Done { finish, usage };
                    return;
                }
                other => yield other,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Event;

    #[tokio::test]
    async fn a_middle_cut_short_still_counts_its_tokens() {
        // The upstream runs on past the line asked for; its usage would come only at the end.
        let upstream: EventStream = futures::stream::iter([
            Event::Delta("a + b\n".into()),
            Event::Delta("\nprint(add(5, -1))\n".into()),
            Event::Done {
                finish: FinishReason::Stop,
                usage: Usage {
                    prompt_tokens: 99,
                    completion_tokens: 99,
                },
            },
        ])
        .boxed();
        let ender = fill::Ender::new(fill::Template::Qwen, "def add(a, b):\n    return ", "\n");
        let events: Vec<Event> = ended(upstream, ender, 40, None).collect().await;
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                Event::Delta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "a + b");
        let Some(Event::Done { usage, .. }) = events.last() else {
            panic!("{events:?}")
        };
        assert_eq!(usage.prompt_tokens, 40);
        assert!(usage.completion_tokens >= 3, "{usage:?}");
    }

    /// The text of a completion's deltas.
    async fn middle(upstream: Vec<Event>, prefix: &str, suffix: &str) -> String {
        let ender = fill::Ender::new(fill::Template::Qwen, prefix, suffix);
        let events: Vec<Event> = ended(futures::stream::iter(upstream).boxed(), ender, 40, None)
            .collect()
            .await;
        events
            .iter()
            .filter_map(|e| match e {
                Event::Delta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_line_the_model_indents_again_is_not_indented_twice() {
        // Found on the completion benchmark with the quick start's model: with the cursor
        // after a line's indentation, 32 of 72 middles began with four blanks more.
        let done = || Event::Done {
            finish: FinishReason::Stop,
            usage: Usage::default(),
        };
        let prefix = "def add(a, b):\n    ";
        let pieces = ["  ", "  ", "return", " a + b\n", "\nprint(1)\n"];
        let upstream = pieces.iter().map(|p| Event::Delta(p.to_string())).collect();
        assert_eq!(middle(upstream, prefix, "\n").await, "return a + b\n");
        // Only blanks, then the end: nothing to insert.
        let upstream = vec![Event::Delta("    ".into()), done()];
        assert_eq!(middle(upstream, prefix, "\n").await, "");
        // A body's next lines keep the indentation the model gave them.
        let pieces = ["    go()\n", "    wait()\n", "stop()\n"];
        let upstream = pieces.iter().map(|p| Event::Delta(p.to_string())).collect();
        assert_eq!(
            middle(upstream, "if ready:\n    ", "\n").await,
            "go()\n    wait()\n"
        );
        // Inside a line the blanks are the middle's own.
        let upstream = vec![Event::Delta(" b)".into()), done()];
        assert_eq!(middle(upstream, "f(a,", "\n").await, " b)");
    }

    #[tokio::test]
    async fn a_cut_middle_never_counts_more_tokens_than_were_allowed() {
        // Found with the OpenAI SDK and the quick start's model: `max_tokens=24`, and the
        // estimate from the text's characters said 36.
        let long = "x".repeat(400);
        let upstream: EventStream = futures::stream::iter([
            Event::Delta(format!("a + b{long}\n")),
            Event::Delta("\nprint(add(5, -1))\n".into()),
        ])
        .boxed();
        let ender = fill::Ender::new(fill::Template::Qwen, "def add(a, b):\n    return ", "\n");
        let events: Vec<Event> = ended(upstream, ender, 40, Some(24)).collect().await;
        let Some(Event::Done { usage, .. }) = events.last() else {
            panic!("{events:?}")
        };
        assert_eq!(usage.completion_tokens, 24, "{usage:?}");
    }
}

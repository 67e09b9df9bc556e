//! The window and counting: the upstream model's context window (asked once), the
//! prompt's tokens by the upstream's tokenizer when it has one, the estimate scaled to
//! what that tokenizer was seen to count, and the assemble stage that fits the prompt in.

use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use serde_json::Value;

use super::{assemble, ms, Pipeline};
use crate::context::budget::Estimator;
use crate::context::UsedItem;
use crate::error::GatewayError;
use crate::llm::{Input, Message, ModelCard};
use crate::telemetry;
use crate::trace;

/// Most the estimate reads over a real tokenizer's count (1.05–1.5× on the texts
/// measured, docs/assistant.md, "Fitting the window"): a prompt estimated at more than this times the
/// room is too long for certain.
pub(super) const ESTIMATE_OVERCOUNT: f64 = 1.5;

/// Most bytes a token of any tokenizer is taken to hold: a text longer than this times the
/// room is too long for certain, whatever the tokenizer (the estimate can read several
/// times high on a multilingual one, so only this bound refuses before counting there).
const MAX_TOKEN_BYTES: usize = 32;

/// The refusal of a prompt whose client messages alone are over the window by the
/// estimate: `what` (the prompt, or the messages) takes about `estimated` tokens. Both
/// refusals start as Anthropic's does (`prompt is too long: N tokens > M maximum`): Claude
/// Code reads that to compact its conversation and sizes what to drop by the numbers.
fn over_the_window(window: usize, answer: usize, what: &str, estimated: usize) -> GatewayError {
    tracing::warn!(
        stage = "assemble",
        window,
        answer_tokens = answer,
        estimated_tokens = estimated,
        "the client's messages alone do not fit the window (estimated)"
    );
    GatewayError::context_length_exceeded(format!(
        "prompt is too long: {estimated} tokens > {room} maximum by the gateway's estimate \
         (this model's window is {window} tokens: {what} takes about {estimated} and the \
         answer {answer} more); shorten the messages or ask for fewer tokens",
        room = window.saturating_sub(answer)
    ))
}

impl Pipeline {
    /// Assemble: the messages the upstream model gets, within its window, measured with
    /// the upstream's tokenizer when it has one (the estimate scaled by what it counted,
    /// then checked: cut further while the count is over), else estimated. Also, for a
    /// prompt that fills most of the window, a smaller one (half the room for context) to
    /// retry with if the upstream still finds it too long. An error when even the client's
    /// own messages and the answer do not fit. Also whether the prompt was counted, and
    /// its size (counted, else estimated).
    pub(super) async fn assemble(
        &self,
        request: assemble::Request<'_>,
    ) -> Result<Fitted, GatewayError> {
        let (window, answer) = (request.window_tokens as i64, request.answer_tokens as i64);
        let span = trace::Span::start("assemble", || {
            vec![
                KeyValue::new("assist.window.tokens", window),
                KeyValue::new("assist.answer.tokens", answer),
            ]
        });
        let fitted = span.within(self.assemble_in(request)).await;
        match &fitted {
            Ok(f) => {
                span.set("assist.prompt.tokens", f.tokens as i64);
                span.set("assist.prompt.counted", f.counted);
            }
            Err(e) => span.fail(e.code.unwrap_or(e.kind)),
        }
        fitted
    }

    async fn assemble_in(&self, request: assemble::Request<'_>) -> Result<Fitted, GatewayError> {
        let t = Instant::now();
        let window = request.window_tokens;
        let answer = request.answer_tokens;
        let limit = window.saturating_sub(answer);
        // The client's own messages over the window for certain: refused before anything
        // is assembled or sent to be counted (a conversation of 90,000 tool calls was
        // megabytes for the upstream's tokenizer). Without a tokenizer, by more than the
        // estimate can overcount; with one, by more than any token holds.
        let own = assemble::message_tokens(&request.messages, &Estimator::default());
        let over = match &self.tokens {
            None => own as f64 > limit as f64 * ESTIMATE_OVERCOUNT,
            Some(_) => {
                let bytes: usize = (request.messages.iter())
                    .map(|m| m.content.len() + m.calls_text().len())
                    .sum();
                bytes > limit * MAX_TOKEN_BYTES
            }
        };
        if over {
            return Err(over_the_window(window, answer, "the messages", own));
        }
        let mut estimate = request.estimate;
        let mut counted = None;
        let mut rounds = 0;
        // Counting is worth a few seconds at most, whatever the upstream's tokenizer does.
        let deadline = t + Duration::from_secs(3);
        let assembled = loop {
            let assembled = assemble::assemble(assemble::Request {
                history: request.history.clone(),
                messages: request.messages.clone(),
                estimate,
                ..request
            });
            let total = if Instant::now() < deadline {
                self.count(&assembled.messages, request.tools).await
            } else {
                None
            };
            let Some(total) = total else {
                if counted.is_none() && estimate.scale < 1.0 {
                    // Not checked: the estimate as it is (it errs high), not as learned.
                    estimate.scale = 1.0;
                    continue;
                }
                if counted.is_none()
                    && assembled.estimated_tokens as f64 > limit as f64 * ESTIMATE_OVERCOUNT
                {
                    // Only the client's own messages are left, and they are over the
                    // window by more than the estimate can overcount: forwarded, they
                    // would be cut by the upstream (Ollama drops the start of a prompt
                    // longer than num_ctx) or refused. Nearer the window, the upstream's
                    // own refusal decides (and a shorter prompt is tried once).
                    return Err(over_the_window(
                        window,
                        answer,
                        "the prompt (the messages and the assistant's instructions)",
                        assembled.estimated_tokens,
                    ));
                }
                break assembled;
            };
            counted = Some(total);
            if rounds == 0 {
                self.learn_scale(total, assembled.estimated_tokens, estimate.scale);
            }
            if total <= limit {
                break assembled;
            }
            if !assembled.can_shrink {
                tracing::warn!(
                    stage = "assemble",
                    window,
                    answer_tokens = answer,
                    prompt_tokens = total,
                    "the client's messages alone do not fit the window"
                );
                return Err(GatewayError::context_length_exceeded(format!(
                    "prompt is too long: {total} tokens > {limit} maximum (this model's window \
                     is {window} tokens: the prompt, the messages and the assistant's \
                     instructions, takes {total} and the answer {answer} more); shorten the \
                     messages or ask for fewer tokens"
                )));
            }
            rounds += 1;
            estimate.scale = if rounds >= 3 {
                // Nothing but the client's own messages.
                1e6
            } else {
                estimate.scale * total as f64 / limit as f64 * 1.05
            };
        };
        // Retrying is worth it only for a long prompt with something left to cut.
        let long = assembled.estimated_tokens.max(counted.unwrap_or(0)) * 2 >= limit;
        let smaller = (long && assembled.can_shrink).then(|| {
            assemble::assemble(assemble::Request {
                estimate: Estimator {
                    scale: estimate.scale * 2.0,
                },
                ..request
            })
            .messages
        });
        let cut: Vec<&str> = assembled
            .sections
            .iter()
            .filter(|r| r.kept_chars < r.chars)
            .map(|r| r.tag)
            .collect();
        let span = trace::Span::current();
        if span.is_recording() {
            span.set_all([
                KeyValue::new("assist.context.cut", trace::Span::strings(&cut)),
                KeyValue::new("assist.sections", assembled.sections.len() as i64),
                KeyValue::new("assist.history.dropped", assembled.history_dropped as i64),
            ]);
        }
        tracing::info!(
            stage = "assemble",
            ms = ms(t),
            window,
            context_budget = assembled.context_budget,
            estimated_tokens = assembled.estimated_tokens,
            counted_tokens = counted,
            rounds,
            sections = assembled.sections.len(),
            cut = ?cut,
            history_dropped = assembled.history_dropped,
            messages = assembled.messages.len(),
            "stage"
        );
        telemetry::stage("assemble", t.elapsed());
        Ok(Fitted {
            tokens: counted.unwrap_or(assembled.estimated_tokens),
            counted: counted.is_some(),
            messages: assembled.messages,
            smaller,
            used_items: assembled.used_items,
        })
    }

    /// The prompt's tokens by the upstream's tokenizer, chat template included; `None`
    /// when it has no tokenizer or did not answer.
    pub(super) async fn count(&self, messages: &[Message], tools: &str) -> Option<usize> {
        let counter = self.tokens.as_ref()?;
        let size = tools.len() + messages.iter().map(|m| m.content.len() + 1).sum::<usize>();
        let mut text = String::with_capacity(size);
        for m in messages {
            text.push_str(&m.content);
            text.push('\n');
            text.push_str(&m.calls_text());
        }
        text.push_str(tools);
        let n = counter.count(&text).await?;
        // Each tool call is framed by the template as a message is.
        let framed = messages.len() + messages.iter().map(|m| m.tool_calls.len()).sum::<usize>();
        Some(n + assemble::template_tokens(framed))
    }

    /// The tokens of a conversation and its tools as a client sends them (Anthropic's
    /// `count_tokens`): by the upstream's tokenizer when it has one, else the estimate
    /// scaled to what the tokenizer was seen to count.
    pub async fn count_prompt(&self, messages: &[Message], tools: &[Value]) -> u64 {
        let tools = if tools.is_empty() {
            String::new()
        } else {
            Value::Array(tools.to_vec()).to_string()
        };
        if let Some(n) = self.count(messages, &tools).await {
            return n as u64;
        }
        let estimate = self.estimator();
        (assemble::message_tokens(messages, &estimate)
            + estimate.tokens(&tools)
            + assemble::template_tokens(0)) as u64
    }

    /// Estimates scaled to the upstream's tokenizer, as far as it was seen.
    pub(super) fn estimator(&self) -> Estimator {
        let learned = f64::from_bits(self.scale.load(std::sync::atomic::Ordering::Relaxed));
        Estimator {
            // A little over what was seen: counts vary with the text.
            scale: learned * 1.05,
        }
    }

    /// Learns how the upstream's counts compare with the estimate, from one prompt that
    /// was estimated at `estimated` with `scale` and counted at `counted`.
    pub(super) fn learn_scale(&self, counted: usize, estimated: usize, scale: f64) {
        let raw = estimated as f64 / scale;
        if raw < 64.0 || !raw.is_finite() {
            return;
        }
        let seen = (counted as f64 / raw).clamp(0.2, 4.0);
        let cell = &self.scale;
        let _ = cell.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |bits| {
                let old = f64::from_bits(bits);
                // Quick to follow a higher count (overflow), slow to trust a lower one; one
                // odd prompt moves it by a quarter at most.
                let next = if seen > old {
                    seen.min(old * 1.25)
                } else {
                    old * 0.8 + seen * 0.2
                };
                Some(next.to_bits())
            },
        );
    }

    /// The window a request is budgeted for and the room kept in it for the answer. The
    /// window is the upstream's (asked once, then known), or less when the client asks
    /// for less (Ollama's num_ctx); never more. The answer's room: a client's max_tokens
    /// (forwarded as it is, a cap for most servers) up to half the window, else the
    /// configured reserve up to a quarter (a client's small num_ctx still leaves room for
    /// the prompt).
    pub(super) async fn window_and_answer(
        &self,
        params: &crate::llm::GenParams,
        clock: &crate::telemetry::UpstreamClock,
    ) -> (usize, usize) {
        let window = clock.time(self.window()).await;
        let window = params
            .extra_options
            .get("num_ctx")
            .and_then(serde_json::Value::as_u64)
            .map_or(window, |n| (n as usize).clamp(256, window));
        let answer = match params.max_tokens {
            Some(n) => (n as usize).min(window / 2),
            None => (self.config.answer_reserve_tokens as usize).min(window / 4),
        };
        (window, answer)
    }

    /// The upstream model's context window: Ollama's `num_ctx`, else its trained length
    /// (both capped by `assistant.context_tokens`), else `assistant.context_tokens`.
    /// Learned once; an upstream that cannot tell yet is asked again next time.
    pub(super) async fn window(&self) -> usize {
        let configured = self.config.context_tokens as usize;
        if let Some(w) = self.window.get() {
            return *w;
        }
        match tokio::time::timeout(
            Duration::from_secs(2),
            self.chat.show(&self.config.upstream_model),
        )
        .await
        {
            Ok(Ok(card)) => {
                let reported = num_ctx(&card).or(card.context_length.map(|n| n as usize));
                let window = reported.map_or(configured, |n| n.clamp(256, configured));
                let _ = self.window.set(window);
                window
            }
            _ => configured,
        }
    }
}

/// An assembled prompt, fitted to the window.
pub(super) struct Fitted {
    pub(super) messages: Vec<Message>,
    /// A smaller one for when the upstream finds this one too long.
    pub(super) smaller: Option<Vec<Message>>,
    /// Its size was counted by the upstream's tokenizer (else estimated).
    pub(super) counted: bool,
    pub(super) tokens: usize,
    /// The attached context items in it.
    pub(super) used_items: Vec<UsedItem>,
}

/// `num_ctx` from an Ollama model's parameters.
pub(super) fn num_ctx(card: &ModelCard) -> Option<usize> {
    card.parameters.as_deref()?.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("num_ctx")).then(|| words.next()?.parse().ok())?
    })
}

/// Estimated prompt tokens, for upstreams that report no usage.
pub(super) fn estimate_tokens(input: &Input) -> u64 {
    use crate::context::budget::estimate_tokens as tokens;
    let n: usize = match input {
        Input::Chat(messages) => messages
            .iter()
            .map(|m| tokens(&m.content) + tokens(&m.calls_text()))
            .sum(),
        Input::Prompt { prompt, system, .. } => {
            tokens(prompt) + system.as_deref().map_or(0, tokens)
        }
    };
    n as u64
}

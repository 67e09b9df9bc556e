//! Upstream resilience: one `ChatModel` over the primary upstream and its ordered
//! fallbacks that retries failed attempts with backoff, moves on to the next upstream,
//! skips upstreams that keep failing for a while (cooldown), and bounds every answer's
//! total time.
//!
//! A failure is retried only while nothing has been handed to the caller: `stream`
//! returns once the first chunk of the answer arrived, so a connection error, a timeout
//! before headers, a 429 or 5xx, or a stream that closes (or is not the wire format)
//! before its first token can be retried and fall back. Once a chunk was returned,
//! failures end the stream as they are. The first token must come within the
//! time-to-first-token timeout of the request, headers included; an upstream that sent
//! its headers but no token by then is not retried (it accepted the request and may be
//! busy with a long prompt; a retry would double its load): the answer ends with a
//! timeout error, as it would when silent mid-answer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::time::Instant;

use super::{
    ChatModel, Chunk, ChunkStream, ModelCard, UpstreamError, UpstreamErrorKind, UpstreamModel,
    UpstreamProbe, UpstreamRequest,
};
use crate::config::LlmSettings;

/// How failures are retried, how long upstreams cool down, how long answers may take.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Retries per upstream after the first attempt.
    pub retries: u32,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Consecutive failed attempts that start a cooldown; 0 = never.
    pub cooldown_failures: u32,
    pub cooldown: Duration,
    /// Longest wait from the request to the answer's first chunk, headers included.
    pub first_token: Duration,
    /// Longest time from the request to the answer's end.
    pub max_answer: Duration,
}

impl Policy {
    pub fn from_settings(s: &LlmSettings) -> Self {
        Self {
            retries: s.retries,
            retry_base: s.retry_base,
            retry_max: s.retry_max,
            cooldown_failures: s.cooldown_failures,
            cooldown: s.cooldown,
            first_token: s.first_byte_timeout,
            max_answer: s.max_answer,
        }
    }
}

/// One upstream with the model it answers the assistant's requests with.
pub struct Target {
    chat: Arc<dyn ChatModel>,
    model: String,
    health: Mutex<Health>,
}

impl Target {
    pub fn new(chat: Arc<dyn ChatModel>, model: &str) -> Self {
        Self {
            chat,
            model: model.to_string(),
            health: Mutex::new(Health::default()),
        }
    }

    fn url(&self) -> &str {
        self.chat.base_url()
    }

    fn cooling(&self, now: Instant) -> bool {
        self.health().cooling_until.is_some_and(|until| until > now)
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Debug, Default)]
struct Health {
    /// Failed attempts since the last success.
    failures: u32,
    cooling_until: Option<Instant>,
}

/// The primary upstream and its fallbacks behind one `ChatModel`.
pub struct Resilient {
    /// The primary first, then the fallbacks in order.
    targets: Vec<Target>,
    policy: Policy,
}

/// What one attempt came to.
enum Attempt {
    /// The first chunk arrived: the answer is under way.
    Started(ChunkStream),
    /// Headers, then no token within the time-to-first-token timeout: not retried, ends
    /// with that error.
    Silent(UpstreamError),
    Failed(UpstreamError),
}

/// What to do after a failed attempt.
#[derive(Debug, PartialEq)]
enum Next {
    /// Retry this upstream (after the backoff, or after `Some` Retry-After).
    Retry(Option<Duration>),
    /// Give up on this upstream: try the next one.
    MoveOn,
    /// The request itself is at fault (or the upstream said so in its own words): no
    /// other attempt would do better.
    Stop,
}

impl Resilient {
    pub fn new(targets: Vec<Target>, policy: Policy) -> Self {
        assert!(!targets.is_empty(), "at least the primary upstream");
        Self { targets, policy }
    }

    /// The order to try the targets in: those not cooling down first (in configured
    /// order), then the cooling ones, so that no request fails without trying every
    /// upstream that may answer. Requests for other models than the assistant's go to
    /// the primary only (a fallback may not serve them). A prompt written in the model's
    /// own template (`raw`: a client's, or the gateway's fill-in-the-middle prompt) goes
    /// only to those that serve the same model or a model that reads the same template
    /// ([`UpstreamRequest::template_peers`]): to another model its tokens are text.
    fn order(&self, request: &UpstreamRequest) -> Vec<usize> {
        let primary = &self.targets[0].model;
        if !super::same_model(&request.model, primary) {
            return vec![0];
        }
        let templated = matches!(request.input, super::Input::Prompt { raw: true, .. });
        let now = Instant::now();
        let (mut ready, cooling): (Vec<usize>, Vec<usize>) = (0..self.targets.len())
            .filter(|&i| {
                let model = &self.targets[i].model;
                !templated
                    || super::same_model(model, primary)
                    || request
                        .template_peers
                        .iter()
                        .any(|p| super::same_model(p, model))
            })
            .partition(|&i| !self.targets[i].cooling(now));
        for &i in &cooling {
            tracing::debug!(
                upstream = self.targets[i].url(),
                "upstream cooling down: tried last"
            );
        }
        ready.extend(cooling);
        ready
    }

    /// One request to one upstream, up to its first chunk (its first content, relayed).
    async fn attempt(&self, target: &Target, request: &UpstreamRequest) -> Attempt {
        // The client bounds the wait for headers by the same time; this bounds the whole.
        // A whole answer's first chunk comes with its last: the answer's own bound.
        let (first_token, setting) = match request.whole {
            true => (self.policy.max_answer, "llm.max_answer_secs"),
            false => (self.policy.first_token, "llm.first_byte_timeout_secs"),
        };
        let deadline = after(Instant::now(), first_token);
        let mut chunks = match target.chat.stream(request).await {
            Ok(chunks) => chunks,
            Err(e) => return Attempt::Failed(e),
        };
        // A relayed stream's events before its first content (the role event, reasoning)
        // are held, so that an upstream that fails before its first token is still retried
        // with nothing sent, as when they are read (bounded: past it, the answer started).
        let mut held = Vec::new();
        let mut held_bytes = 0;
        let first = loop {
            match tokio::time::timeout_at(deadline, chunks.next()).await {
                Ok(Some(Ok(Chunk::Verbatim { bytes, deltas: 0 })))
                    if held_bytes + bytes.len() <= MAX_HELD_BYTES =>
                {
                    held_bytes += bytes.len();
                    held.push(Ok(Chunk::Verbatim { bytes, deltas: 0 }));
                }
                first => break first,
            }
        };
        match first {
            Ok(Some(Ok(first))) => {
                held.push(Ok(first));
                Attempt::Started(futures::stream::iter(held).chain(chunks).boxed())
            }
            Ok(Some(Err(e))) => Attempt::Failed(e),
            Ok(None) => Attempt::Failed(UpstreamError::new(
                UpstreamErrorKind::Closed,
                target.url(),
                "the stream ended before its first chunk",
            )),
            Err(_) => Attempt::Silent(UpstreamError::new(
                UpstreamErrorKind::Timeout,
                target.url(),
                format!(
                    "no first token within {} s ({setting})",
                    first_token.as_secs_f64()
                ),
            )),
        }
    }

    fn next_step(&self, error: &UpstreamError, retries_left: bool) -> Next {
        use UpstreamErrorKind as K;
        // A prompt too long for the model is the request's fault, whatever the status:
        // neither retried as it is nor counted against the upstream's health.
        if error.is_context_overflow() {
            return Next::Stop;
        }
        let retryable = match error.kind {
            K::Unreachable | K::Timeout | K::Closed | K::Protocol => true,
            K::Status(s) => s == 429 || (500..600).contains(&s),
            K::Stream | K::Unsupported => false,
        };
        if !retryable {
            return Next::Stop;
        }
        if !retries_left {
            return Next::MoveOn;
        }
        match error.retry_after {
            Some(wait) if wait > self.policy.retry_max => Next::MoveOn,
            wait => Next::Retry(wait),
        }
    }

    fn succeeded(&self, target: &Target) {
        let mut h = target.health();
        h.failures = 0;
        h.cooling_until = None;
    }

    fn failed(&self, target: &Target, error: &UpstreamError) {
        let url = target.url();
        metrics::counter!("assist_upstream_attempt_failures_total",
            "upstream" => url.to_string(), "kind" => kind_label(&error.kind))
        .increment(1);
        let threshold = self.policy.cooldown_failures;
        let mut h = target.health();
        h.failures = h.failures.saturating_add(1);
        let now = Instant::now();
        if threshold > 0 && h.failures >= threshold && h.cooling_until.is_none_or(|u| u <= now) {
            h.cooling_until = Some(after(now, self.policy.cooldown));
            drop(h);
            metrics::counter!("assist_upstream_cooldowns_total", "upstream" => url.to_string())
                .increment(1);
            tracing::warn!(
                upstream = url,
                failures = threshold,
                cooldown_secs = self.policy.cooldown.as_secs_f64(),
                "upstream keeps failing: skipped while it cools down"
            );
        }
    }

    /// Tries the upstreams in order until one starts answering.
    async fn start(
        &self,
        request: &UpstreamRequest,
    ) -> Result<(ChunkStream, usize), UpstreamError> {
        let order = self.order(request);
        let mut last: Option<(usize, UpstreamError)> = None;
        for &i in &order {
            let target = &self.targets[i];
            if let Some((from, e)) = &last {
                let from = self.targets[*from].url();
                tracing::warn!(from, to = target.url(), kind = %kind_label(&e.kind), "falling back to the next upstream");
                metrics::counter!("assist_upstream_fallbacks_total",
                    "from" => from.to_string(), "to" => target.url().to_string())
                .increment(1);
            }
            // A fallback upstream gets its own model's name: the only copy of the request.
            let renamed;
            let request = match i {
                0 => request,
                _ => {
                    renamed = UpstreamRequest {
                        model: target.model.clone(),
                        ..request.clone()
                    };
                    &renamed
                }
            };
            let mut attempt = 0u32;
            loop {
                let error = match self.attempt(target, request).await {
                    Attempt::Started(chunks) => {
                        self.succeeded(target);
                        return Ok((chunks, i));
                    }
                    Attempt::Silent(e) => {
                        return Ok((futures::stream::once(async { Err(e) }).boxed(), i))
                    }
                    Attempt::Failed(e) => e,
                };
                let step = self.next_step(&error, attempt < self.policy.retries);
                if step == Next::Stop {
                    return Err(error);
                }
                self.failed(target, &error);
                let Next::Retry(retry_after) = step else {
                    last = Some((i, error));
                    break;
                };
                let delay = retry_after.unwrap_or_else(|| {
                    let mut rng = fastrand::Rng::new();
                    backoff(
                        attempt,
                        self.policy.retry_base,
                        self.policy.retry_max,
                        &mut rng,
                    )
                });
                attempt += 1;
                tracing::warn!(
                    upstream = target.url(),
                    attempt,
                    kind = %kind_label(&error.kind),
                    delay_ms = delay.as_millis() as u64,
                    retry_after = retry_after.is_some(),
                    "upstream attempt failed: retrying"
                );
                metrics::counter!("assist_upstream_retries_total", "upstream" => target.url().to_string())
                    .increment(1);
                tokio::time::sleep(delay).await;
            }
        }
        Err(last.map(|(_, e)| e).unwrap_or_else(|| {
            UpstreamError::new(
                UpstreamErrorKind::Unreachable,
                self.base_url(),
                "no upstream",
            )
        }))
    }
}

/// `wait` after `from`. A wait too long to count from now (an operator's "never", such
/// as `u64::MAX` seconds) ends about thirty years on, as tokio's own `sleep` does, where
/// `Instant + Duration` would panic on every answer.
pub(crate) fn after(from: Instant, wait: Duration) -> Instant {
    from.checked_add(wait)
        .unwrap_or_else(|| from + Duration::from_secs(30 * 365 * 86_400))
}

/// Most bytes of a relayed answer's events held before its first content.
const MAX_HELD_BYTES: usize = 64 << 10;

#[async_trait]
impl ChatModel for Resilient {
    fn base_url(&self) -> &str {
        self.targets[0].url()
    }

    async fn stream(&self, request: &UpstreamRequest) -> Result<ChunkStream, UpstreamError> {
        let max = self.policy.max_answer;
        let deadline = after(Instant::now(), max);
        let too_long = move |url: &str| {
            UpstreamError::new(
                UpstreamErrorKind::Timeout,
                url,
                format!(
                    "the answer took longer than {} s (llm.max_answer_secs)",
                    max.as_secs_f64()
                ),
            )
        };
        let (chunks, i) = match tokio::time::timeout_at(deadline, self.start(request)).await {
            Ok(started) => started?,
            Err(_) => return Err(too_long(self.base_url())),
        };
        let url = self.targets[i].url().to_string();
        Ok(async_stream::stream! {
            let mut chunks = chunks;
            // One timer for the whole answer: a timeout per chunk registered and cleared a
            // timer on every event (about a twentieth of a relayed answer's instructions).
            let late = tokio::time::sleep_until(deadline);
            tokio::pin!(late);
            loop {
                // The chunk first, as a timeout would: one that is ready is never late.
                let next = tokio::select! {
                    biased;
                    item = chunks.next() => Ok(item),
                    // Unconstrained, as a timeout's own timer is: a stream that used up
                    // the task's budget still meets its bound.
                    () = tokio::task::unconstrained(&mut late) => Err(()),
                };
                match next {
                    Ok(Some(item)) => {
                        let end = !matches!(
                            item,
                            Ok(Chunk::Text(_) | Chunk::ToolCalls(_) | Chunk::Verbatim { .. })
                        );
                        yield item;
                        if end {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(_) => {
                        tracing::warn!(upstream = url.as_str(), max_answer_secs = max.as_secs_f64(), "answer too long: ended");
                        // Dropping `chunks` on return cancels the upstream request.
                        yield Err(too_long(&url));
                        return;
                    }
                }
            }
        }
        .boxed())
    }

    /// The primary's models (what passthrough serves).
    async fn models(&self) -> Result<Vec<UpstreamModel>, UpstreamError> {
        self.targets[0].chat.models().await
    }

    async fn show(&self, model: &str) -> Result<ModelCard, UpstreamError> {
        self.targets[0].chat.show(model).await
    }

    /// Only when the fallbacks speak the same wire: a failover must not change the
    /// answer's dialect.
    fn relays(&self) -> Option<super::Wire> {
        let wire = self.targets[0].chat.relays()?;
        self.targets
            .iter()
            .all(|t| t.chat.relays() == Some(wire))
            .then_some(wire)
    }

    /// Every upstream, the fallbacks too, probed at once.
    async fn probe(&self, wait: Duration) -> Vec<UpstreamProbe> {
        let now = Instant::now();
        futures::future::join_all(self.targets.iter().enumerate().map(|(i, t)| {
            let role = if i == 0 { "primary" } else { "fallback" };
            UpstreamProbe::run(role, t.chat.as_ref(), wait, t.cooling(now))
        }))
        .await
    }
}

/// Wait before retry `attempt` (0-based): uniformly random in
/// `[0, min(max, base × 2^attempt)]` ("full jitter").
fn backoff(attempt: u32, base: Duration, max: Duration, rng: &mut fastrand::Rng) -> Duration {
    let ceiling = base
        .checked_mul(2u32.saturating_pow(attempt))
        .map_or(max, |d| d.min(max));
    let ceiling_ms = ceiling.as_millis() as u64;
    Duration::from_millis(rng.u64(0..=ceiling_ms))
}

/// A metric label for an error kind.
fn kind_label(kind: &UpstreamErrorKind) -> String {
    match kind {
        UpstreamErrorKind::Unreachable => "unreachable".into(),
        UpstreamErrorKind::Timeout => "timeout".into(),
        UpstreamErrorKind::Status(s) => format!("http_{s}"),
        UpstreamErrorKind::Stream => "stream".into(),
        UpstreamErrorKind::Protocol => "protocol".into(),
        UpstreamErrorKind::Closed => "closed".into(),
        UpstreamErrorKind::Unsupported => "unsupported".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_millis(2000);

    #[test]
    fn backoff_stays_within_the_doubling_ceiling_and_the_cap() {
        let mut rng = fastrand::Rng::with_seed(7);
        for (attempt, ceiling) in [
            (0, 200),
            (1, 400),
            (2, 800),
            (3, 1600),
            (4, 2000),
            (9, 2000),
        ] {
            for _ in 0..1000 {
                let d = backoff(attempt, BASE, MAX, &mut rng);
                assert!(
                    d <= Duration::from_millis(ceiling),
                    "attempt {attempt}: {d:?}"
                );
            }
        }
        // Huge attempt numbers neither overflow nor pass the cap.
        for attempt in [31, 32, 64, u32::MAX] {
            assert!(backoff(attempt, BASE, MAX, &mut rng) <= MAX);
        }
        let huge = Duration::from_secs(u64::MAX / 4);
        assert!(backoff(40, huge, MAX, &mut rng) <= MAX);
    }

    #[test]
    fn jitter_spreads_over_the_whole_range() {
        let mut rng = fastrand::Rng::with_seed(11);
        let samples: Vec<u128> = (0..2000)
            .map(|_| backoff(4, BASE, MAX, &mut rng).as_millis())
            .collect();
        let (min, max) = (samples.iter().min().unwrap(), samples.iter().max().unwrap());
        assert!(*min < 100, "full jitter reaches near zero: {min}");
        assert!(*max > 1900, "and near the cap: {max}");
        let mean = samples.iter().sum::<u128>() as f64 / samples.len() as f64;
        assert!((900.0..1100.0).contains(&mean), "uniform: mean {mean}");
    }

    fn resilient(retries: u32) -> Resilient {
        struct Nothing;
        #[async_trait]
        impl ChatModel for Nothing {
            fn base_url(&self) -> &str {
                "http://u"
            }
            async fn stream(&self, _: &UpstreamRequest) -> Result<ChunkStream, UpstreamError> {
                unreachable!()
            }
            async fn models(&self) -> Result<Vec<UpstreamModel>, UpstreamError> {
                unreachable!()
            }
            async fn show(&self, _: &str) -> Result<ModelCard, UpstreamError> {
                unreachable!()
            }
        }
        Resilient::new(
            vec![Target::new(Arc::new(Nothing), "m")],
            Policy {
                retries,
                retry_base: BASE,
                retry_max: MAX,
                cooldown_failures: 3,
                cooldown: Duration::from_secs(30),
                first_token: Duration::from_secs(60),
                max_answer: Duration::from_secs(600),
            },
        )
    }

    #[test]
    fn only_failures_before_the_answer_that_may_pass_are_retried() {
        let r = resilient(2);
        let err = |kind| UpstreamError::new(kind, "http://u", "x");
        use UpstreamErrorKind as K;
        for kind in [
            K::Unreachable,
            K::Timeout,
            K::Closed,
            K::Protocol,
            K::Status(429),
            K::Status(500),
            K::Status(503),
        ] {
            assert_eq!(
                r.next_step(&err(kind.clone()), true),
                Next::Retry(None),
                "{kind:?}"
            );
            assert_eq!(
                r.next_step(&err(kind.clone()), false),
                Next::MoveOn,
                "{kind:?}"
            );
        }
        for kind in [
            K::Status(400),
            K::Status(401),
            K::Status(404),
            K::Status(422),
            K::Stream,
            K::Unsupported,
        ] {
            assert_eq!(
                r.next_step(&err(kind.clone()), true),
                Next::Stop,
                "{kind:?}"
            );
        }
        // A prompt too long for the model fails the same way every time, on every upstream.
        for detail in [
            "Requested tokens (2300) exceed context window of 2048",
            "This model's maximum context length is 2048 tokens",
        ] {
            let too_long = UpstreamError::new(K::Status(500), "http://u", detail);
            assert_eq!(r.next_step(&too_long, true), Next::Stop, "{detail}");
        }
        let mut limited = err(K::Status(429));
        limited.retry_after = Some(Duration::from_secs(1));
        assert_eq!(
            r.next_step(&limited, true),
            Next::Retry(Some(Duration::from_secs(1)))
        );
        limited.retry_after = Some(Duration::from_secs(3));
        assert_eq!(
            r.next_step(&limited, true),
            Next::MoveOn,
            "longer than retry_max"
        );
    }

    #[test]
    fn the_primarys_model_by_either_of_its_names_may_fall_back_another_may_not() {
        let mut r = resilient(0);
        let chat = r.targets[0].chat.clone();
        r.targets.push(Target::new(chat, "fallback-model"));
        let order = |model: &str| r.order(&UpstreamRequest::question(model, "hi"));
        assert_eq!(order("m"), [0, 1]);
        assert_eq!(
            order("m:latest"),
            [0, 1],
            "`m` and `m:latest` are one model"
        );
        assert_eq!(order("other"), [0]);
        assert_eq!(order("m:7b"), [0]);
    }

    #[test]
    fn a_prompt_in_the_models_template_falls_back_only_to_the_same_model() {
        use crate::llm::Input;
        let mut r = resilient(0);
        let chat = r.targets[0].chat.clone();
        r.targets.push(Target::new(chat.clone(), "other-family"));
        r.targets.push(Target::new(chat, "m:latest"));
        let prompt = |raw| UpstreamRequest {
            input: Input::Prompt {
                prompt: "<|fim_prefix|>def f():\n    <|fim_suffix|>\n<|fim_middle|>".into(),
                suffix: None,
                system: None,
                raw,
                images: Vec::new(),
            },
            ..UpstreamRequest::question("m", "")
        };
        assert_eq!(r.order(&prompt(true)), [0, 2]);
        assert_eq!(
            r.order(&prompt(false)),
            [0, 1, 2],
            "plain text suits any model"
        );
        let mut peers = prompt(true);
        peers.template_peers = vec!["other-family:latest".into()];
        assert_eq!(
            r.order(&peers),
            [0, 1, 2],
            "a model that reads the same template"
        );
    }

    #[tokio::test]
    async fn failures_in_a_row_cool_an_upstream_down_and_a_success_resets() {
        let r = resilient(0);
        let t = &r.targets[0];
        let e = UpstreamError::new(UpstreamErrorKind::Status(500), "http://u", "x");
        r.failed(t, &e);
        r.failed(t, &e);
        assert!(!t.cooling(Instant::now()));
        r.failed(t, &e);
        assert!(t.cooling(Instant::now()));
        assert!(!t.cooling(Instant::now() + Duration::from_secs(31)));
        r.succeeded(t);
        assert!(!t.cooling(Instant::now()));
        r.failed(t, &e);
        assert!(!t.cooling(Instant::now()), "the count started again");
    }
}

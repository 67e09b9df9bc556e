//! Metrics: the Prometheus recorder behind the `metrics` facade (installed once per
//! process, rendered by `GET /metrics`), the histogram buckets, and the few recording
//! helpers the gateway's hot paths call. Every name the gateway records is in this file
//! (other modules may add their own `assist_*` counters through the facade).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use metrics::{describe_counter, describe_gauge, describe_histogram, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Log directives added after any filter a user sets (`log.level`, `RUST_LOG`): the
/// dependencies that would log message content, editor code or headers at debug or trace
/// level are held at info.
pub const QUIET_DEPENDENCIES: &[&str] = &[
    "rmcp=info",
    "h2=info",
    "hyper=info",
    "hyper_util=info",
    "reqwest=info",
    "tonic=info",
    "tower=info",
    "tower_http=info",
    "redis=info",
    "tantivy=info",
];

/// Upper bounds (seconds) of the buckets of every `*_seconds` histogram: from 100 µs
/// (the gateway's own work) to 5 minutes (long answers).
pub const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// How often histograms are folded into their buckets between scrapes (bounds memory
/// when nobody scrapes).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder as the process's metrics recorder, once; later calls
/// (every gateway started in the same process) return the same handle. `None` when
/// another recorder was installed first: the facade then records into that one.
pub fn install() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "histograms keep the exporter's default buckets");
                    PrometheusBuilder::new()
                });
            match builder.install_recorder() {
                Ok(handle) => {
                    describe();
                    metrics::gauge!("assist_build_info", "version" => env!("CARGO_PKG_VERSION"))
                        .set(1.0);
                    let upkeep = handle.clone();
                    let spawned = std::thread::Builder::new()
                        .name("metrics-upkeep".into())
                        .spawn(move || loop {
                            std::thread::sleep(UPKEEP_EVERY);
                            upkeep.run_upkeep();
                        });
                    if let Err(e) = spawned {
                        tracing::warn!(error = %e, "no metrics upkeep thread: histograms are folded at scrape time only");
                    }
                    Some(handle)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "another metrics recorder is installed: /metrics has nothing to render");
                    None
                }
            }
        })
        .as_ref()
}

fn describe() {
    describe_counter!(
        "assist_turn_decisions_total",
        "Decisions about assistant turns: whether the editor's code is used (decision=editor) and whether the knowledge base is searched (decision=retrieve), by value and by the rule that made it"
    );
    describe_counter!(
        "assist_requests_total",
        "Requests answered, by route, model and HTTP status"
    );
    describe_histogram!(
        "assist_request_duration_seconds",
        Unit::Seconds,
        "Whole request, until the last byte of the answer (streams included)"
    );
    describe_histogram!(
        "assist_ttft_seconds",
        Unit::Seconds,
        "Time to the first token sent to the client (non-streams: to the whole answer)"
    );
    describe_histogram!(
        "assist_gateway_overhead_seconds",
        Unit::Seconds,
        "Request time not spent waiting on the upstream model"
    );
    describe_counter!(
        "assist_tokens_streamed_total",
        "Completion tokens sent to clients (the upstream's count, else deltas)"
    );
    describe_counter!(
        "assist_upstream_errors_total",
        "Requests that ended with an upstream error, by kind"
    );
    describe_histogram!(
        "assist_pipeline_stage_seconds",
        Unit::Seconds,
        "Time of each assistant pipeline stage"
    );
    describe_histogram!(
        "assist_retrieval_seconds",
        Unit::Seconds,
        "Time of each retrieval list (lexical, dense incl. query embedding) and the fusion"
    );
    describe_counter!(
        "assist_key_requests_total",
        "Answers asked for, per API key name and model"
    );
    describe_counter!(
        "assist_key_errors_total",
        "Answers that ended with an error, per API key name and model"
    );
    describe_counter!(
        "assist_key_tokens_total",
        "Tokens per API key name, model and kind (input: the prompt, output: the answer)"
    );
    describe_gauge!("assist_sessions", "Conversation sessions kept by the store");
    describe_gauge!("assist_index_chunks", "Chunks in each knowledge index");
    describe_gauge!("assist_streams_active", "Streaming responses open now");
    describe_gauge!("assist_build_info", "The running build (value is always 1)");
}

/// Time one request spent waiting on the upstream model: for its headers, between its
/// chunks, and on the pipeline's own model calls (classify, reformulate, the context
/// window lookup). Added to by the pipeline, read when the request ends.
#[derive(Debug, Default)]
pub struct UpstreamClock {
    nanos: AtomicU64,
}

impl UpstreamClock {
    pub fn add(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Adds the time since `start`.
    pub fn since(&self, start: Instant) {
        self.add(start.elapsed());
    }

    /// Awaits `call`, counting its whole time as upstream time.
    pub async fn time<F: std::future::Future>(&self, call: F) -> F::Output {
        let start = Instant::now();
        let out = call.await;
        self.since(start);
        out
    }

    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

/// One pipeline stage's time.
/// One decision about a turn (`editor`, `retrieve`): its value and the rule that made it.
pub fn turn_decision(decision: &'static str, value: bool, rule: &'static str) {
    metrics::counter!(
        "assist_turn_decisions_total",
        "decision" => decision,
        "value" => if value { "yes" } else { "no" },
        "rule" => rule
    )
    .increment(1);
}

/// Context items of a turn by what became of them (`read`, `disabled`, `duplicate`,
/// `empty`, `cut`, `over_limit`, `switched_off`).
pub fn context_items(outcomes: &[(&'static str, usize)]) {
    for (outcome, n) in outcomes {
        if *n > 0 {
            metrics::counter!("assist_context_items_total", "outcome" => *outcome)
                .increment(*n as u64);
        }
    }
}

/// Secrets redacted and invisible characters removed, by where (`ingest`, `prompt`,
/// `source`, `session`).
pub fn secrets_redacted<'k>(
    place: &'static str,
    secrets: impl IntoIterator<Item = (&'k String, &'k usize)>,
    invisible: usize,
) {
    for (kind, n) in secrets {
        metrics::counter!("assist_secrets_redacted_total", "kind" => kind.clone(), "where" => place)
            .increment(*n as u64);
    }
    if invisible > 0 {
        metrics::counter!("assist_invisible_characters_removed_total", "where" => place)
            .increment(invisible as u64);
    }
}

/// One answer of the API key named `key` (its name, never the key): requests, errors
/// and tokens by model.
pub fn key_usage(key: &str, model: &str, error: bool, input_tokens: u64, output_tokens: u64) {
    let key = SharedString::from(key.to_string());
    let model = SharedString::from(model.to_string());
    metrics::counter!("assist_key_requests_total", "key" => key.clone(), "model" => model.clone())
        .increment(1);
    if error {
        metrics::counter!("assist_key_errors_total", "key" => key.clone(), "model" => model.clone())
            .increment(1);
    }
    metrics::counter!("assist_key_tokens_total", "key" => key.clone(), "model" => model.clone(), "kind" => "input")
        .increment(input_tokens);
    metrics::counter!("assist_key_tokens_total", "key" => key, "model" => model, "kind" => "output")
        .increment(output_tokens);
}

/// A completion request answered from the recent completions (`hit`), or sent upstream.
pub fn completion_cache(hit: bool) {
    metrics::counter!("assist_completion_cache_total", "result" => if hit { "hit" } else { "miss" })
        .increment(1);
}

/// A search whose dense half missed `retrieval.deadline_ms`.
pub fn retrieval_deadline() {
    metrics::counter!("assist_retrieval_deadline_total").increment(1);
}

pub fn stage(stage: &'static str, took: Duration) {
    metrics::histogram!("assist_pipeline_stage_seconds", "stage" => stage).record(took);
}

/// One retrieval list's time (`lexical`, `dense`) or the fusion's (`fusion`).
pub fn retrieval(list: &'static str, took: Duration) {
    metrics::histogram!("assist_retrieval_seconds", "list" => list).record(took);
}

/// A request that is not a chat request (those report through [`ChatRequest`]).
pub fn request(route: SharedString, status: u16, took: Duration) {
    let status = status_label(status);
    metrics::counter!("assist_requests_total", "route" => route.clone(), "model" => "", "status" => status)
        .increment(1);
    metrics::histogram!("assist_request_duration_seconds", "route" => route, "model" => "")
        .record(took);
}

/// How a chat request ended, recorded once when it is over.
pub struct ChatRequest<'a> {
    pub route: &'static str,
    /// A served model's name, else `other` (see `Pipeline::model_label`).
    pub model: &'a str,
    pub status: u16,
    pub total: Duration,
    pub ttft: Option<Duration>,
    pub upstream: Duration,
    /// Completion tokens sent; `None` when nothing was generated.
    pub tokens: Option<u64>,
    /// The kind of upstream error that ended the request.
    pub upstream_error: Option<&'static str>,
}

impl ChatRequest<'_> {
    pub fn record(self) {
        let series = ChatSeries::of(self.route, self.model, self.status);
        series.requests.increment(1);
        series.duration.record(self.total);
        series
            .overhead
            .record(self.total.saturating_sub(self.upstream));
        if let Some(ttft) = self.ttft {
            series
                .ttft
                .get_or_init(|| {
                    metrics::histogram!("assist_ttft_seconds",
                        "route" => series.route, "model" => series.model.clone())
                })
                .record(ttft);
        }
        if let Some(tokens) = self.tokens {
            series
                .tokens
                .get_or_init(|| {
                    metrics::counter!("assist_tokens_streamed_total", "model" => series.model.clone())
                })
                .increment(tokens);
        }
        if let Some(kind) = self.upstream_error {
            metrics::counter!("assist_upstream_errors_total", "kind" => kind).increment(1);
        }
    }
}

/// The metrics of one route, model and status, registered with the recorder on their first
/// request and kept: registering (hashing the name and labels, a lookup under the
/// registry's lock) costs several times what recording does, and every chat request
/// records up to five.
struct ChatSeries {
    route: &'static str,
    model: SharedString,
    status: u16,
    requests: metrics::Counter,
    duration: metrics::Histogram,
    overhead: metrics::Histogram,
    /// Registered on the first request that has one (a series without any is not shown).
    ttft: OnceLock<metrics::Histogram>,
    tokens: OnceLock<metrics::Counter>,
}

/// Most series kept; past them a request registers its own (the model label is already
/// bounded by the catalogue, the status by HTTP's).
const MAX_CHAT_SERIES: usize = 256;

static CHAT_SERIES: std::sync::RwLock<Vec<Arc<ChatSeries>>> = std::sync::RwLock::new(Vec::new());

impl ChatSeries {
    fn of(route: &'static str, model: &str, status: u16) -> Arc<ChatSeries> {
        use std::sync::PoisonError;
        let same =
            |s: &&Arc<ChatSeries>| s.status == status && s.route == route && &*s.model == model;
        // Handles are kept only from the gateway's own recorder, installed before they are
        // made: handles made before it are no-ops, and it would never see them.
        let keep = matches!(RECORDER.get(), Some(Some(_)));
        let room = {
            let all = CHAT_SERIES.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(series) = all.iter().find(same) {
                return series.clone();
            }
            all.len() < MAX_CHAT_SERIES
        };
        let series = Arc::new(Self::register(route, model, status));
        if keep && room {
            let mut all = CHAT_SERIES.write().unwrap_or_else(PoisonError::into_inner);
            match all.iter().find(same) {
                Some(first) => return first.clone(),
                None if all.len() < MAX_CHAT_SERIES => all.push(series.clone()),
                None => {}
            }
        }
        series
    }

    fn register(route: &'static str, model: &str, status: u16) -> Self {
        let model = SharedString::from(Arc::<str>::from(model));
        Self {
            requests: metrics::counter!("assist_requests_total",
                "route" => route, "model" => model.clone(), "status" => status_label(status)),
            duration: metrics::histogram!("assist_request_duration_seconds",
                "route" => route, "model" => model.clone()),
            overhead: metrics::histogram!("assist_gateway_overhead_seconds",
                "route" => route, "model" => model.clone()),
            ttft: OnceLock::new(),
            tokens: OnceLock::new(),
            route,
            model,
            status,
        }
    }
}

/// The `kind` label of an upstream error.
pub fn upstream_error_kind(kind: &crate::llm::UpstreamErrorKind) -> Option<&'static str> {
    use crate::llm::UpstreamErrorKind as K;
    Some(match kind {
        K::Unreachable => "unreachable",
        K::Timeout => "timeout",
        K::Status(400..=499) => "status_4xx",
        K::Status(500..=599) => "status_5xx",
        K::Status(_) => "status_other",
        K::Stream => "stream",
        K::Protocol => "protocol",
        K::Closed => "closed",
        // The request could not be expressed for the upstream: not an upstream fault.
        K::Unsupported => return None,
    })
}

fn status_label(status: u16) -> SharedString {
    let fixed = match status {
        200 => "200",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        408 => "408",
        413 => "413",
        422 => "422",
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        other => return SharedString::from(other.to_string()),
    };
    SharedString::const_str(fixed)
}

/// Counts one open streaming response while it lives.
pub struct ActiveStream(());

impl ActiveStream {
    pub fn open() -> Self {
        metrics::gauge!("assist_streams_active").increment(1.0);
        Self(())
    }
}

impl Drop for ActiveStream {
    fn drop(&mut self) {
        metrics::gauge!("assist_streams_active").decrement(1.0);
    }
}

/// Scrape-time gauges.
pub fn set_sessions(n: u64) {
    metrics::gauge!("assist_sessions").set(n as f64);
}

pub fn set_index_chunks(index: &'static str, n: u64) {
    metrics::gauge!("assist_index_chunks", "index" => index).set(n as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_series_is_registered_once_and_counts_every_request() {
        let handle = install().expect("the gateway's recorder is the process's");
        let (route, model) = ("/v1/series-test", "series-model");
        let request = |status, ttft: Option<Duration>| {
            ChatRequest {
                route,
                model,
                status,
                total: Duration::from_millis(3),
                ttft,
                upstream: Duration::from_millis(1),
                tokens: ttft.map(|_| 4),
                upstream_error: None,
            }
            .record()
        };
        request(200, Some(Duration::from_millis(1)));
        request(200, None);
        request(500, None);
        assert!(Arc::ptr_eq(
            &ChatSeries::of(route, model, 200),
            &ChatSeries::of(route, model, 200)
        ));
        let text = handle.render();
        let value = |name: &str, labels: &[&str]| -> f64 {
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x))
                })
                .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let ours = [r#"route="/v1/series-test""#, r#"model="series-model""#];
        let with = |status: &'static str| [ours[0], ours[1], status];
        assert_eq!(
            value("assist_requests_total", &with(r#"status="200""#)),
            2.0
        );
        assert_eq!(
            value("assist_requests_total", &with(r#"status="500""#)),
            1.0
        );
        assert_eq!(value("assist_request_duration_seconds_count", &ours), 3.0);
        assert_eq!(value("assist_gateway_overhead_seconds_count", &ours), 3.0);
        assert_eq!(value("assist_ttft_seconds_count", &ours), 1.0);
        assert_eq!(value("assist_tokens_streamed_total", &ours[1..]), 4.0);
    }
}

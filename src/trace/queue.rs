//! The span queue of OTLP/HTTP: each span encoded into its export request as it ends, the
//! requests sent by a thread of the queue's own.
//!
//! The SDK's batch processor moves every finished span's data through a channel into a
//! batch, and that batch into a new vector for its exporter; the gateway's exporter then
//! only reads it to encode it. Encoding the span where it ends skips those moves (about
//! 9,000 instructions a `brunix` answer in `benches/trace_cost.rs`'s per-function counts)
//! and keeps the queue as bytes. The queue is bounded, in spans and in bytes: beyond either, spans are dropped;
//! a request never waits for an export.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::otlp::{self, Batch, Sender};

/// Most spans one request carries (the SDK's default batch).
const BATCH_SPANS: usize = 512;
/// Most bytes of spans the queue holds (content captured can make spans large).
const MAX_BYTES: usize = 64 << 20;

/// A span processor that encodes spans as they end and exports them over OTLP/HTTP.
#[derive(Debug)]
pub struct Queue {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the worker: a batch is full, a flush is asked, the queue stops.
    work: Condvar,
    /// Wakes those waiting for a flush.
    flushed: Condvar,
    max_spans: usize,
    /// Longest a flush is waited for.
    flush_wait: Duration,
}

#[derive(Debug, Default)]
struct State {
    /// The encoded resource and its schema URL (set once, before any span).
    resource: Arc<(Vec<u8>, String)>,
    /// Batches being filled, one per scope (the gateway's spans have one).
    open: Vec<Batch>,
    /// Full batches, waiting for the worker.
    full: VecDeque<Batch>,
    /// Spans and bytes waiting (open and full).
    spans: usize,
    bytes: usize,
    /// Flushes asked, and done (every batch queued before the ask sent).
    flush_asked: u64,
    flush_done: u64,
    stop: bool,
    /// Bytes the last batch taken by the worker held (the next one's likely size, at
    /// most 16 MiB).
    last_batch: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Queue {
    /// A queue of at most `max_spans` spans, sent by `sender` on `runtime` every `delay`
    /// (or as soon as a batch is full).
    pub fn start(
        sender: Sender,
        runtime: tokio::runtime::Handle,
        max_spans: usize,
        delay: Duration,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            work: Condvar::new(),
            flushed: Condvar::new(),
            max_spans,
            flush_wait: sender.timeout() * 4 + Duration::from_secs(1),
        });
        let worker = {
            let shared = shared.clone();
            let sender = Arc::new(sender);
            std::thread::Builder::new()
                .name("otlp-export".into())
                .spawn(move || export(&shared, &sender, &runtime, delay))?
        };
        Ok(Self {
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }
}

/// The worker: sends full batches as they come, and every batch every `delay`, on a flush
/// and when the queue stops.
fn export(
    shared: &Shared,
    sender: &Arc<Sender>,
    runtime: &tokio::runtime::Handle,
    delay: Duration,
) {
    let mut due = Instant::now() + delay;
    loop {
        let (batches, resource, flush, stop) = {
            let mut state = shared.lock();
            loop {
                let now = Instant::now();
                if state.stop
                    || !state.full.is_empty()
                    || state.flush_asked > state.flush_done
                    || now >= due
                {
                    break;
                }
                state = shared
                    .work
                    .wait_timeout(state, due - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            let all = state.stop || state.flush_asked > state.flush_done || Instant::now() >= due;
            let mut batches: Vec<Batch> = state.full.drain(..).collect();
            if all {
                batches.append(&mut state.open);
                due = Instant::now() + delay;
            }
            for batch in &batches {
                state.spans -= batch.spans();
                state.bytes -= batch.size();
                state.last_batch = batch.size().min(16 << 20);
            }
            (
                batches,
                state.resource.clone(),
                state.flush_asked,
                state.stop,
            )
        };
        for batch in batches {
            let body = batch.finish(&resource.0, &resource.1);
            let sender = sender.clone();
            // Sent on the runtime (a runtime shutting down cancels it: the task's error).
            // A failure is said where it happens (`Sender::deliver`); its spans are lost.
            let _ = runtime.block_on(runtime.spawn(async move { sender.deliver(body).await }));
        }
        let mut state = shared.lock();
        if flush > state.flush_done {
            state.flush_done = flush;
            shared.flushed.notify_all();
        }
        if stop {
            return;
        }
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let mut state = self.shared.lock();
        if state.stop {
            return;
        }
        if state.spans >= self.shared.max_spans || state.bytes >= MAX_BYTES {
            drop(state);
            super::export_failed("queue_full", None);
            return;
        }
        let resource_len = state.resource.0.len();
        let at = match state.open.iter().rposition(|b| b.takes(&span)) {
            Some(at) => at,
            None => {
                // Sized for what the last batch held, and an eighth more.
                let expected = state.last_batch + state.last_batch / 8;
                let batch = Batch::new(&span.instrumentation_scope, resource_len, expected);
                state.bytes += batch.size();
                state.open.push(batch);
                state.open.len() - 1
            }
        };
        let before = state.open[at].size();
        state.open[at].push(&span);
        let grown = state.open[at].size() - before;
        state.spans += 1;
        state.bytes += grown;
        if state.open[at].spans() >= BATCH_SPANS {
            let full = state.open.swap_remove(at);
            state.full.push_back(full);
            self.shared.work.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let mut state = self.shared.lock();
        if state.stop {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        state.flush_asked += 1;
        let asked = state.flush_asked;
        self.shared.work.notify_one();
        // Every batch waiting may take the export's whole timeout: not waited for longer
        // than a few of them.
        let until = Instant::now() + self.shared.flush_wait;
        while state.flush_done < asked && !state.stop {
            let now = Instant::now();
            if now >= until {
                return Err(OTelSdkError::Timeout(self.shared.flush_wait));
            }
            state = self
                .shared
                .flushed
                .wait_timeout(state, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        {
            let mut state = self.shared.lock();
            if state.stop {
                return Err(OTelSdkError::AlreadyShutdown);
            }
            state.stop = true;
            self.shared.work.notify_one();
        }
        // The worker's last export is bounded by the export's timeout.
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(worker) = worker {
            worker
                .join()
                .map_err(|_| OTelSdkError::InternalFailure("the OTLP export thread".into()))?;
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        let encoded = otlp::resource(resource);
        let schema = resource.schema_url().unwrap_or_default().to_string();
        self.shared.lock().resource = Arc::new((encoded, schema));
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use prost::Message as _;

    use super::*;
    use crate::trace::otlp::tests::{collector, span_data};

    /// A provider whose spans go through a queue of `max_spans` to `url`.
    fn provider(url: reqwest::Url, max_spans: usize, delay: Duration) -> SdkTracerProvider {
        let sender = Sender::new(
            reqwest::Client::new(),
            url,
            reqwest::header::HeaderMap::new(),
            Duration::from_secs(5),
        );
        let queue =
            Queue::start(sender, tokio::runtime::Handle::current(), max_spans, delay).unwrap();
        SdkTracerProvider::builder()
            .with_resource(Resource::builder().with_service_name("queue-test").build())
            .with_span_processor(queue)
            .build()
    }

    fn names(bodies: &[bytes::Bytes]) -> Vec<String> {
        bodies
            .iter()
            .flat_map(|b| {
                let request = ExportTraceServiceRequest::decode(b.as_ref()).unwrap();
                request.resource_spans.into_iter().flat_map(|r| {
                    r.scope_spans
                        .into_iter()
                        .flat_map(|s| s.spans.into_iter().map(|s| s.name))
                })
            })
            .collect()
    }

    async fn until(what: impl Fn() -> bool) {
        for _ in 0..500 {
            if what() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn ended_spans_reach_the_collector_after_the_delay_with_their_resource() {
        let (url, got) = collector(vec![]).await;
        let provider = provider(url, 256, Duration::from_millis(100));
        let tracer = provider.tracer("assist-gateway");
        tracer.in_span("parent", |_| tracer.in_span("child", |_| {}));
        until(|| !got.lock().unwrap().is_empty()).await;
        let bodies = got.lock().unwrap().clone();
        assert_eq!(names(&bodies), ["child", "parent"]);
        let request = ExportTraceServiceRequest::decode(bodies[0].as_ref()).unwrap();
        let resource = request.resource_spans[0].resource.as_ref().unwrap();
        assert!(
            resource
                .attributes
                .iter()
                .any(|kv| kv.key == "service.name"
                    && format!("{:?}", kv.value).contains("queue-test"))
        );
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_full_batch_goes_at_once_and_spans_of_two_scopes_go_apart() {
        let (url, got) = collector(vec![]).await;
        // A delay the test never reaches: only a full batch is sent.
        let provider = provider(url, 4096, Duration::from_secs(3600));
        let other = provider.tracer("other");
        other.in_span("other scope", |_| {});
        let tracer = provider.tracer("assist-gateway");
        for _ in 0..BATCH_SPANS {
            tracer.in_span("span", |_| {});
        }
        until(|| !got.lock().unwrap().is_empty()).await;
        let bodies = got.lock().unwrap().clone();
        assert_eq!(bodies.len(), 1);
        assert_eq!(names(&bodies).len(), BATCH_SPANS);
        // The other scope's span waits for the delay, or a flush, or the end.
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        let bodies = got.lock().unwrap().clone();
        assert_eq!(bodies.len(), 2);
        assert_eq!(names(&bodies[1..]), ["other scope"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_flush_sends_what_waits_and_a_stop_sends_the_rest() {
        let (url, got) = collector(vec![]).await;
        let provider = provider(url, 4096, Duration::from_secs(3600));
        let tracer = provider.tracer("assist-gateway");
        tracer.in_span("first", |_| {});
        let provider = tokio::task::spawn_blocking(move || {
            provider.force_flush().unwrap();
            provider
        })
        .await
        .unwrap();
        assert_eq!(names(&got.lock().unwrap()), ["first"]);
        tracer.in_span("last", |_| {});
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        assert_eq!(names(&got.lock().unwrap()), ["first", "last"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_collector_that_never_answers_costs_dropped_spans_not_waiting() {
        // A collector that takes the connection and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = reqwest::Url::parse(&format!(
            "http://{}/v1/traces",
            listener.local_addr().unwrap()
        ))
        .unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let sender = Sender::new(
            reqwest::Client::new(),
            url,
            reqwest::header::HeaderMap::new(),
            Duration::from_secs(1),
        );
        let queue = Queue::start(
            sender,
            tokio::runtime::Handle::current(),
            64,
            Duration::from_millis(10),
        )
        .unwrap();
        let gateway = opentelemetry::InstrumentationScope::builder("assist-gateway").build();
        let span = span_data("span", &gateway);
        for _ in 0..10_000 {
            queue.on_end(span.clone());
            let state = queue.shared.lock();
            assert!(state.spans <= 64, "{} spans held", state.spans);
        }
        let queue = Arc::new(queue);
        let stopping = queue.clone();
        let stopped = tokio::task::spawn_blocking(move || stopping.shutdown()).await;
        assert!(stopped.unwrap().is_ok());
        // Stopped: what ends now is not kept.
        queue.on_end(span);
        assert_eq!(queue.shared.lock().spans, 0);
        held.abort();
    }
}

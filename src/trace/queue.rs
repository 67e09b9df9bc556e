//! The span queue of OTLP/HTTP: each span encoded into its export request as it ends, the
//! requests sent by a thread of the queue's own.
//!
//! The SDK's batch processor moves every finished span's data through a channel into a
//! batch, and that batch into a new vector for its exporter; the gateway's exporter then
//! only reads it to encode it. Encoding the span where it ends skips those moves (about
//! 9,000 instructions a `brunix` answer in `benches/trace_cost.rs`'s per-function counts)
//! and keeps the queue as bytes. The queue is bounded, in spans and in bytes (what its
//! buffers hold room for), counting the batches on their way to the collector until they
//! are sent: beyond either bound, spans are dropped, and a request never waits for an
//! export. (Requests do take turns encoding their spans under the queue's lock: a few
//! microseconds a span.) A stop sends what is queued until its deadline, then drops the
//! rest.

use std::collections::VecDeque;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::otlp::{self, Batch, Ended, Sender};

/// Most spans one request carries (the SDK's default batch).
const BATCH_SPANS: usize = 512;
/// How often a delivery in flight looks whether a stop's deadline passed.
const STOP_CHECK: Duration = Duration::from_millis(50);
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
    /// Stopping: what is still queued is sent until this deadline.
    stop: Option<Instant>,
    /// Bytes the last batch sent held (full, or sent on the timer): a new batch's room,
    /// so that its buffer seldom grows (growing copies it).
    full_batch: usize,
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
/// and when the queue stops (until the stop's deadline: what is left then is dropped).
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
                if state.stop.is_some()
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
            let all = state.stop.is_some()
                || state.flush_asked > state.flush_done
                || Instant::now() >= due;
            let mut batches: Vec<Batch> = state.full.drain(..).collect();
            if all {
                // A batch sent on the timer sizes the next one too: most never fill, and
                // one started small grows (and is copied) several times on its way.
                if let Some(largest) = state.open.iter().map(Batch::size).max() {
                    state.full_batch = largest;
                }
                batches.append(&mut state.open);
                due = Instant::now() + delay;
            }
            (
                batches,
                state.resource.clone(),
                state.flush_asked,
                state.stop,
            )
        };
        for batch in batches {
            let (spans, bytes) = (batch.spans(), batch.capacity());
            if shared.lock().stop.is_some_and(|d| Instant::now() >= d) {
                super::export_failed("shutdown", None);
            } else {
                let body = batch.finish(&resource.0, &resource.1);
                let sender = sender.clone();
                // Sent on the runtime, waited for here (no timer of the runtime's: it may
                // be stopping). A failure is said where it happens (`Sender::deliver`);
                // its spans are lost. A stop asked meanwhile gives it until its deadline.
                let (done, sent) = std::sync::mpsc::sync_channel::<()>(1);
                let task = runtime.spawn(async move {
                    let _ = sender.deliver(body).await;
                    let _ = done.send(());
                });
                loop {
                    match sent.recv_timeout(STOP_CHECK) {
                        // Sent, failed, or the runtime gone (the task dropped).
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                        Err(RecvTimeoutError::Timeout) => {}
                    }
                    if shared.lock().stop.is_some_and(|d| Instant::now() >= d) {
                        task.abort();
                        super::export_failed("shutdown", None);
                        break;
                    }
                }
            }
            // Counted in the bound until sent: what waits and what is on its way.
            let mut state = shared.lock();
            state.spans -= spans;
            state.bytes -= bytes;
        }
        let mut state = shared.lock();
        if flush > state.flush_done {
            state.flush_done = flush;
            shared.flushed.notify_all();
        }
        if stop.is_some() {
            return;
        }
    }
}

impl Drop for Queue {
    /// Dropped without a shutdown (a test's provider): the worker sends what is queued,
    /// within one export's timeout, and ends; nothing waits for it.
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if state.stop.is_none() {
            state.stop = Some(Instant::now() + self.shared.flush_wait);
            self.shared.work.notify_one();
        }
    }
}

impl Queue {
    /// Encodes `span`, ended, into its batch (the recorder's spans come here directly;
    /// `on_end` is for spans that come as the SDK's).
    pub fn end(&self, span: &Ended<'_>) {
        let mut state = self.shared.lock();
        if state.stop.is_some() {
            return;
        }
        if state.spans >= self.shared.max_spans || state.bytes >= MAX_BYTES {
            drop(state);
            super::export_failed("queue_full", None);
            return;
        }
        let resource_len = state.resource.0.len();
        let at = match state.open.iter().rposition(|b| b.takes(span)) {
            Some(at) => at,
            None => {
                // Half as much again as the last: answers come at an uneven rate, and a
                // batch a little larger than the last would grow (and be copied) once.
                let room = (state.full_batch + state.full_batch / 2).min(MAX_BYTES / 8);
                let batch = Batch::new(span.scope, resource_len, room);
                state.bytes += batch.capacity();
                state.open.push(batch);
                state.open.len() - 1
            }
        };
        // The bound counts what the buffers hold room for, not only what they hold.
        let before = state.open[at].capacity();
        state.open[at].push(span);
        let grown = state.open[at].capacity() - before;
        state.spans += 1;
        state.bytes += grown;
        if state.open[at].spans() >= BATCH_SPANS {
            let full = state.open.swap_remove(at);
            state.full_batch = full.size();
            state.full.push_back(full);
            self.shared.work.notify_one();
        }
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        self.end(&Ended::from(&span));
    }

    fn force_flush(&self) -> OTelSdkResult {
        let mut state = self.shared.lock();
        if state.stop.is_some() {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        state.flush_asked += 1;
        let asked = state.flush_asked;
        self.shared.work.notify_one();
        // Every batch waiting may take the export's whole timeout: not waited for longer
        // than a few of them.
        let until = Instant::now() + self.shared.flush_wait;
        while state.flush_done < asked && state.stop.is_none() {
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

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        {
            let mut state = self.shared.lock();
            if state.stop.is_some() {
                return Err(OTelSdkError::AlreadyShutdown);
            }
            state.stop = Some(Instant::now() + timeout);
            self.shared.work.notify_one();
        }
        // The worker sends what is queued until the deadline, then ends.
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
    /// A queue of `max_spans` sending to `url` every `delay`, each export tried for at
    /// most `timeout`.
    fn queue(url: reqwest::Url, timeout: Duration, max_spans: usize, delay: Duration) -> Queue {
        let sender = Sender::new(
            reqwest::Client::new(),
            url,
            reqwest::header::HeaderMap::new(),
            timeout,
        );
        Queue::start(sender, tokio::runtime::Handle::current(), max_spans, delay).unwrap()
    }

    fn provider(url: reqwest::Url, max_spans: usize, delay: Duration) -> SdkTracerProvider {
        let queue = queue(url, Duration::from_secs(5), max_spans, delay);
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
        let (url, held) = silent_collector().await;
        // Exports that would wait 30 s each: the batch on its way counts in the bound.
        let queue = queue(url, Duration::from_secs(30), 64, Duration::from_millis(10));
        let gateway = opentelemetry::InstrumentationScope::builder("assist-gateway").build();
        let span = span_data("span", &gateway);
        let mut kept = 0;
        for i in 0..10_000 {
            let before = queue.shared.lock().spans;
            queue.on_end(span.clone());
            let held = queue.shared.lock().spans;
            assert!(held <= 64, "{held} spans held");
            kept += usize::from(held > before);
            if i == 100 {
                // Long enough for the worker to take the first batch on its way.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        assert_eq!(
            kept, 64,
            "spans kept while the first 64 are still on their way"
        );
        // The stop's deadline bounds it, however long the exports would wait.
        let queue = Arc::new(queue);
        let stopping = queue.clone();
        let started = Instant::now();
        let stopped = tokio::task::spawn_blocking(move || {
            stopping.shutdown_with_timeout(Duration::from_millis(300))
        })
        .await;
        assert!(stopped.unwrap().is_ok());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // Stopped: nothing is held, and what ends now is not kept.
        queue.on_end(span);
        assert_eq!(queue.shared.lock().spans, 0);
        assert_eq!(queue.shared.lock().bytes, 0);
        held.abort();
    }

    /// A collector that takes connections and never answers.
    async fn silent_collector() -> (reqwest::Url, tokio::task::JoinHandle<()>) {
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
        (url, held)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_stop_keeps_its_deadline_with_many_batches_waiting() {
        let (url, held) = silent_collector().await;
        let queue = queue(
            url,
            Duration::from_secs(2),
            8 * BATCH_SPANS,
            Duration::from_secs(3600),
        );
        let gateway = opentelemetry::InstrumentationScope::builder("assist-gateway").build();
        let span = span_data("span", &gateway);
        for _ in 0..6 * BATCH_SPANS {
            queue.on_end(span.clone());
        }
        // Six full batches of 2 s each: 12 s without the deadline.
        let started = Instant::now();
        let stopped = tokio::task::spawn_blocking(move || {
            queue.shutdown_with_timeout(Duration::from_millis(500))
        })
        .await;
        assert!(stopped.unwrap().is_ok());
        let took = started.elapsed();
        assert!(took < Duration::from_secs(4), "the stop took {took:?}");
        held.abort();
    }
}

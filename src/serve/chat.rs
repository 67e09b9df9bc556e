//! The one chat flow every API shares, whatever its protocol: check the turn's bounds →
//! claim a stream slot → run the pipeline → render its events, streamed (watched for a
//! client that stopped reading) or whole. A dialect brings a parser (its request into a
//! `ChatTurn`) and a [`Render`]; the transport around it is its own.
//!
//! Each chat request is logged and measured here, once, when its answer ends (failed,
//! finished, or dropped by a client that went away).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use opentelemetry::KeyValue;

use super::access::{Caller, KeyId, StreamGate, StreamSlot};
use super::bounds::check_limits;
use super::round::{HoldBack, Noted};
use super::AppState;
use crate::context::UsedItem;
use crate::error::GatewayError;
use crate::llm::{FinishReason, ToolCall, Usage};
use crate::pipeline::classify::truncate_chars;
use crate::pipeline::{self, Answer, ChatTurn, Event, EventStream, Pipeline, Source};
use crate::sessions::usage::{Counts, Usage as KeyUsage};
use crate::sessions::Owner;
use crate::telemetry::{self, UpstreamClock};
use crate::trace;

/// When the answer started and when its first token went out (Ollama reports both).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub started: Instant,
    pub first_token: Option<Instant>,
}

/// How a streamed answer ended well.
pub struct End<'a> {
    pub finish: FinishReason,
    pub usage: Usage,
    /// The assistant's sources (`None` for passthrough models).
    pub sources: Option<&'a [Source]>,
    /// The attached context items the prompt held.
    pub context_items: &'a [UsedItem],
    pub timing: Timing,
}

/// What a streamed answer carries: bytes of one body, which several at a time may join
/// (the events ready at once then leave in one write), or messages, which never do.
pub trait Piece: Send + Sized + 'static {
    /// Whether pieces ready at once are joined.
    const JOINS: bool = false;
    /// Appends `next` to this piece, or gives it back when it cannot (or this one is full).
    fn join(&mut self, next: Self) -> Option<Self> {
        Some(next)
    }
}

/// Most bytes a batch of events ready at once may grow to before it is sent.
const MAX_BATCH_BYTES: usize = 64 * 1024;

impl Piece for bytes::Bytes {
    const JOINS: bool = true;

    fn join(&mut self, next: Self) -> Option<Self> {
        if self.len() >= MAX_BATCH_BYTES {
            return Some(next);
        }
        // The batch built so far is its own buffer: it grows in place.
        let mut batch = match std::mem::take(self).try_into_mut() {
            Ok(batch) => batch,
            Err(shared) => bytes::BytesMut::from(&shared[..]),
        };
        batch.reserve(next.len().max(1024));
        batch.extend_from_slice(&next);
        *self = batch.freeze();
        None
    }
}

/// A dialect's rendering of the pipeline's events into the pieces its stream carries
/// (bytes of SSE or NDJSON over HTTP, messages over gRPC).
pub trait Render: Send + 'static {
    type Piece: Piece;
    /// What a stream starts with, before any event.
    fn opening(&mut self) -> Option<Self::Piece> {
        None
    }
    fn delta(&mut self, text: &str) -> Self::Piece;
    fn tool_calls(&mut self, calls: &[ToolCall]) -> Self::Piece;
    /// The end of a stream that went well.
    fn end(&mut self, end: End<'_>) -> Self::Piece;
    /// An error after the stream started, in the dialect's in-stream shape.
    fn error(&mut self, e: &GatewayError) -> Self::Piece;
    /// Whether this rendering takes the events of an upstream of `wire` as they came (it
    /// writes that wire's dialect), and what the relay must know; asked only of a turn the
    /// pipeline would relay, which is then rendered relayed.
    fn relay(&mut self, _wire: crate::llm::Wire) -> Option<crate::llm::Relay> {
        None
    }
    /// The upstream's own bytes, relayed ([`Render::relay`]).
    fn verbatim(&mut self, _bytes: bytes::Bytes) -> Option<Self::Piece> {
        None
    }
}

/// The start of every chat answer: the turn's bounds, a stream slot for a streamed
/// answer (held by `log` while the answer lives), then the pipeline. `gate` is the
/// caller's stream slots, when they are limited.
pub async fn start(
    state: &AppState,
    gate: Option<&StreamGate>,
    owner: &Owner,
    log: &mut ChatLog,
    mut turn: ChatTurn,
    stream: bool,
) -> Result<EventStream, GatewayError> {
    check_limits(&state.settings.server, &turn)?;
    // The key's own limits (tokens per day, answers per minute), counted in the store
    // replicas share.
    if let (Some(key), Some(usage)) = (log.key.as_ref().filter(|k| k.limited()), &log.key_usage) {
        usage
            .admit(&key.account, key.tokens_per_day, key.requests_per_minute)
            .await?;
    }
    // A client that takes its answer whole: the pipeline may ask for it whole too.
    turn.request.whole = !stream;
    if stream {
        if let Some(gate) = gate {
            log.stream_slot = Some(gate.claim().await?);
        }
    }
    // Boxed: the pipeline's future is kilobytes, and every future that held it inline
    // (the handler's, then axum's box around it) was copied whole on the way.
    let run = Box::pin(state.pipeline.run_timed(turn, owner, log.upstream.clone()));
    log.span.within(run).await
}

/// A whole answer: the events collected; `log` learns how it ended.
pub async fn collect(events: EventStream, log: &mut ChatLog) -> Result<Answer, GatewayError> {
    let span = log.span.child("answer to client (whole)", Vec::new);
    let collected = span.within(pipeline::collect(events)).await;
    drop(span);
    match collected {
        Ok(answer) => {
            log.done(answer.usage);
            Ok(answer)
        }
        Err(e) => {
            log.failed(&e, false);
            Err(e)
        }
    }
}

/// Pipeline events as the dialect renders them; an error mid-stream is the dialect's
/// error event, then the end.
fn rendered<R: Render>(
    events: EventStream,
    mut render: R,
    log: ChatLog,
) -> impl futures::Stream<Item = R::Piece> + Send {
    // The stream to the client, from its first event to its end.
    let span = log.span.child("stream to client", Vec::new);
    async_stream::stream! {
        // Dropped in reverse: the stream's span, then the answer (the upstream's span),
        // then the log (the request's span) end in that order.
        let mut log = log;
        let mut events = events;
        let _span = span;
        if let Some(opening) = render.opening() {
            yield opening;
        }
        let mut sources = None;
        let mut items = Vec::new();
        while let Some(event) = events.next().await {
            match event {
                Event::Sources(s) => sources = Some(s),
                Event::Items(i) => items = i,
                Event::Delta(text) => {
                    log.deltas(1);
                    yield render.delta(&text);
                }
                Event::ToolCalls(calls) => {
                    log.deltas(1);
                    yield render.tool_calls(&calls);
                }
                Event::Verbatim { bytes, deltas } => {
                    log.deltas(deltas.into());
                    if let Some(piece) = render.verbatim(bytes) {
                        yield piece;
                    }
                }
                Event::Done { finish, usage } => {
                    log.done(usage);
                    _span.set("assist.pieces", log.deltas as i64);
                    yield render.end(End {
                        finish,
                        usage,
                        sources: sources.as_deref(),
                        context_items: &items,
                        timing: log.timing(),
                    });
                    return;
                }
                Event::Error(e) => {
                    log.failed(&e, true);
                    yield render.error(&e);
                    return;
                }
            }
        }
    }
}

type Rendering<T> = std::pin::Pin<Box<dyn futures::Stream<Item = T> + Send>>;

/// A streamed answer the client must keep taking. Pieces that join ([`Piece::JOINS`]) and
/// are ready at once, or within a round of the scheduler, are handed over as one. The
/// server takes a piece from the body only when it can write it; a piece that waits
/// longer than `write_timeout` to be taken means the client stopped reading (its buffers
/// are full). A watchdog then drops the answer, as for a client that went away: the
/// upstream request is cancelled, what was streamed is saved to the session, the stream
/// slot and the session are freed.
pub struct Watched<T> {
    slot: Arc<std::sync::Mutex<WatchedSlot<T>>>,
}

struct WatchedSlot<T> {
    /// `None` once the answer ended, or was dropped by the watchdog.
    rendering: Option<Rendering<T>>,
    /// When the last piece was handed over and not yet followed by another poll.
    handed: Option<Instant>,
    /// What leaves next: a piece that did not join the batch handed over before it, or
    /// a batch held back for a round of the scheduler.
    held: Option<T>,
    /// Whether a batch waits for a round of the scheduler.
    hold: HoldBack,
    /// The waker the rendering is polled with ([`Noted`]): whether the rendering woke
    /// since it last waited, or gave a piece (it may have more), or has not been polled.
    /// A poll the rendering did not ask for (the end of a round, a second poll from the
    /// server) then does not walk down its layers (the pipeline's events, the upstream's
    /// stream, its body) only to find them waiting. A relayed stream's rendering was
    /// polled three times an event, now twice.
    woke: Arc<Noted>,
    waker: std::task::Waker,
}

impl<T: Piece> Watched<T> {
    fn new(rendering: Rendering<T>, write_timeout: Duration, too_slow: Arc<AtomicBool>) -> Self {
        let woke = Noted::new(true);
        let slot = Arc::new(std::sync::Mutex::new(WatchedSlot {
            rendering: Some(rendering),
            handed: None,
            held: None,
            hold: HoldBack::default(),
            waker: std::task::Waker::from(woke.clone()),
            woke,
        }));
        let watched = Arc::downgrade(&slot);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(write_timeout / 4);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(slot) = watched.upgrade() else {
                    return;
                };
                let dropped = {
                    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                    match slot.handed {
                        _ if slot.rendering.is_none() => return,
                        Some(at) if at.elapsed() > write_timeout => {
                            too_slow.store(true, Ordering::Relaxed);
                            slot.rendering.take()
                        }
                        _ => None,
                    }
                };
                if dropped.is_some() {
                    tracing::warn!(
                        write_timeout_secs = write_timeout.as_secs(),
                        "the client took nothing for the write timeout: stream ended"
                    );
                    // Dropped here, outside the lock: the answer's own cleanup runs now.
                    drop(dropped);
                    return;
                }
            }
        });
        Self { slot }
    }
}

impl<T: Piece> futures::Stream for Watched<T> {
    type Item = T;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        use std::task::Poll;
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut *slot;
        slot.handed = None;
        slot.woke.register(cx.waker());
        let mut batch = slot.held.take();
        // Whether this poll took a piece from the rendering, and whether the batch is full.
        let mut grew = false;
        let mut full = false;
        while let Some(rendering) = slot.rendering.as_mut() {
            // Pieces that never join are taken one at a time.
            if batch.is_some() && !T::JOINS {
                break;
            }
            // A rendering that waits and did not wake has nothing yet.
            if !slot.woke.take() {
                break;
            }
            let polled = rendering
                .as_mut()
                .poll_next(&mut std::task::Context::from_waker(&slot.waker));
            match polled {
                Poll::Ready(Some(piece)) => {
                    // Not waiting: it may have more.
                    slot.woke.note();
                    grew = true;
                    match batch.as_mut() {
                        None => batch = Some(piece),
                        Some(batch) => {
                            if let Some(next) = batch.join(piece) {
                                slot.held = Some(next);
                                full = true;
                                break;
                            }
                        }
                    }
                }
                Poll::Ready(None) => slot.rendering = None,
                Poll::Pending => break,
            }
        }
        // A rendering that just gave pieces and then waits often waits for a task that
        // is already woken: the upstream connection, which hands its body over one piece
        // at a time although the whole answer may sit in its buffer. The batch is held
        // back for a round of the scheduler (the tasks already woken run first), again
        // while rounds bring more, and leaves after a round that brought nothing. One
        // write then carries what a burst brought, not one write a piece (`HoldBack`).
        if T::JOINS
            && !full
            && slot.rendering.is_some()
            && batch.is_some()
            && slot.hold.hold(grew, cx)
        {
            slot.held = batch;
            return Poll::Pending;
        }
        slot.hold.release();
        match batch {
            Some(batch) => {
                slot.handed = Some(Instant::now());
                Poll::Ready(Some(batch))
            }
            None if slot.rendering.is_none() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

/// The streamed answer, rendered piece by piece, watched for a client that stopped
/// reading (`server.write_timeout`); `log` is written when it ends.
pub fn stream<R: Render>(
    events: EventStream,
    render: R,
    mut log: ChatLog,
    write_timeout: Duration,
) -> Watched<R::Piece> {
    let too_slow = Arc::new(AtomicBool::new(false));
    log.too_slow = Some(too_slow.clone());
    Watched::new(
        Box::pin(rendered(events, render, log)),
        write_timeout,
        too_slow,
    )
}

/// The log line and metrics of one chat request, written when it is dropped: when the
/// answer ended, failed, or the client went away. Never holds message content.
pub struct ChatLog {
    request_id: String,
    dialect: &'static str,
    route: &'static str,
    model: String,
    stream: bool,
    started: Instant,
    status: u16,
    first_token: Option<Instant>,
    deltas: u64,
    usage: Option<Usage>,
    outcome: &'static str,
    /// The error's code (never its message, which may quote the upstream).
    error: Option<&'static str>,
    /// The caller's stream slot, held while the streamed answer lives.
    stream_slot: Option<StreamSlot>,
    /// Time spent waiting on the upstream model (the rest is the gateway's).
    upstream: Arc<UpstreamClock>,
    /// The kind of upstream failure that ended the request.
    upstream_error: Option<&'static str>,
    /// Which model names are served (the metric label of any other is `other`).
    pipeline: Arc<Pipeline>,
    /// Set when the stream was dropped because its client stopped reading.
    too_slow: Option<Arc<AtomicBool>>,
    /// The request's root span (a disabled one when traces are off).
    span: trace::Span,
    /// The caller's key, its usage counted when the request ends.
    key: Option<Arc<KeyId>>,
    key_usage: Option<Arc<KeyUsage>>,
}

/// Longest model name a log line shows (a client may send any string).
const LOGGED_MODEL_CHARS: usize = 64;

impl ChatLog {
    /// The log of a request that `request_id` names in the logs, arrived over
    /// `dialect` on `route`; its trace continues the one a `traceparent` in `headers`
    /// names.
    pub fn new(
        request_id: String,
        dialect: &'static str,
        route: &'static str,
        pipeline: Arc<Pipeline>,
        headers: Option<&http::HeaderMap>,
    ) -> Self {
        Self {
            span: trace::request_span(dialect, route, headers),
            key: None,
            key_usage: None,
            request_id,
            dialect,
            route,
            model: String::new(),
            stream: false,
            started: Instant::now(),
            status: 200,
            first_token: None,
            deltas: 0,
            usage: None,
            // Still "client_disconnected" if the stream is dropped before it ends.
            outcome: "client_disconnected",
            error: None,
            stream_slot: None,
            upstream: Arc::default(),
            upstream_error: None,
            pipeline,
            too_slow: None,
        }
    }

    /// The request's root span: its stages' spans are its children.
    pub fn span(&self) -> &trace::Span {
        &self.span
    }

    /// Who asks: with a key, its usage is counted under its name, and its limits apply.
    pub fn caller(&mut self, state: &AppState, caller: Option<&Caller>) {
        self.key = caller.and_then(|c| state.keys.id(c));
        self.key_usage = self.key.as_ref().and(state.usage.clone());
        if let Some(key) = self.key.as_ref().filter(|_| self.span.is_recording()) {
            self.span.set("assist.key", key.name.to_string());
        }
    }

    pub fn request(&mut self, model: &str, stream: bool) {
        self.model = model.to_string();
        self.stream = stream;
        if self.span.is_recording() {
            self.span.set_all([
                KeyValue::new(
                    "gen_ai.request.model",
                    truncate_chars(model, LOGGED_MODEL_CHARS),
                ),
                KeyValue::new("gen_ai.request.stream", stream),
            ]);
        }
    }

    /// `n` pieces of the answer went out (the first token with the first of them).
    pub fn deltas(&mut self, n: u64) {
        self.deltas += n;
        if n > 0 && self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
    }

    pub fn timing(&self) -> Timing {
        Timing {
            started: self.started,
            first_token: self.first_token,
        }
    }

    pub fn done(&mut self, usage: Usage) {
        self.usage = Some(usage);
        self.outcome = "completed";
        // A whole answer reaches the client at once: its first token comes with it.
        if !self.stream && self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
    }

    pub fn failed(&mut self, e: &GatewayError, in_stream: bool) {
        if !in_stream {
            self.status = e.status.as_u16();
        }
        self.outcome = if in_stream { "stream_error" } else { "error" };
        self.error = Some(e.code.unwrap_or(e.kind));
        self.upstream_error = e.upstream.as_ref().and_then(telemetry::upstream_error_kind);
    }
}

impl Drop for ChatLog {
    fn drop(&mut self) {
        if self
            .too_slow
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            self.outcome = "client_too_slow";
        }
        let total = self.started.elapsed();
        let ttft = self.first_token.map(|t| t - self.started);
        let label = self.pipeline.model_label(&self.model);
        telemetry::ChatRequest {
            route: self.route,
            model: &label,
            status: self.status,
            total,
            ttft,
            upstream: self.upstream.total(),
            tokens: match (self.usage, self.deltas) {
                (Some(u), _) => Some(u.completion_tokens),
                (None, 0) => None,
                (None, deltas) => Some(deltas),
            },
            upstream_error: self.upstream_error,
        }
        .record();
        let ttft_ms = ttft.map(|t| t.as_secs_f64() * 1e3);
        if self.span.is_recording() {
            self.span.set_all(
                [
                    KeyValue::new("http.response.status_code", i64::from(self.status)),
                    KeyValue::new("assist.outcome", self.outcome),
                ]
                .into_iter()
                .chain(ttft_ms.map(|ms| KeyValue::new("assist.ttft_ms", ms))),
            );
            if let Some(error) = self.error {
                self.span.fail(error);
            }
        }
        self.span.end();
        if let Some(key) = &self.key {
            let counts = Counts {
                requests: 1,
                errors: u64::from(self.error.is_some()),
                input_tokens: self.usage.map_or(0, |u| u.prompt_tokens),
                output_tokens: match (self.usage, self.deltas) {
                    (Some(u), _) => u.completion_tokens,
                    (None, deltas) => deltas,
                },
            };
            telemetry::key_usage(
                &key.name,
                &label,
                counts.errors > 0,
                counts.input_tokens,
                counts.output_tokens,
            );
            if let (Some(usage), Ok(rt)) = (
                self.key_usage.clone(),
                tokio::runtime::Handle::try_current(),
            ) {
                let (account, model) = (key.account.clone(), label.clone());
                rt.spawn(async move { usage.add(&account, &model, counts).await });
            }
        }
        tracing::info!(
            request_id = self.request_id,
            dialect = self.dialect,
            route = self.route,
            model = truncate_chars(&self.model, LOGGED_MODEL_CHARS),
            stream = self.stream,
            status = self.status,
            outcome = self.outcome,
            latency_ms = total.as_secs_f64() * 1e3,
            ttft_ms,
            deltas = self.deltas,
            completion_tokens = self.usage.map(|u| u.completion_tokens),
            prompt_tokens = self.usage.map(|u| u.prompt_tokens),
            error = self.error,
            "chat request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// A rendering whose pieces come in bursts: each burst's pieces ready at once, a
    /// wait (20 ms) before each burst.
    fn bursts<T: Send + 'static>(bursts: Vec<Vec<T>>) -> Rendering<T> {
        Box::pin(
            futures::stream::iter(bursts)
                .then(|burst| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    futures::stream::iter(burst)
                })
                .flatten(),
        )
    }

    async fn handed<T: Piece>(rendering: Rendering<T>) -> Vec<T> {
        let watched = Watched::new(rendering, Duration::from_secs(5), Arc::default());
        watched.collect().await
    }

    #[tokio::test]
    async fn bytes_ready_at_once_leave_as_one_piece_in_order() {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        let got = handed(bursts(vec![
            vec![b("data: 1\n\n"), b("data: 2\n\n"), b("data: 3\n\n")],
            vec![b("data: 4\n\n")],
            vec![b("data: 5\n\n"), b("data: [DONE]\n\n")],
        ]))
        .await;
        assert_eq!(
            got,
            [
                b("data: 1\n\ndata: 2\n\ndata: 3\n\n"),
                b("data: 4\n\n"),
                b("data: 5\n\ndata: [DONE]\n\n")
            ]
        );
    }

    /// Pieces handed over one at a time by another task through a channel with room for
    /// one (as the upstream connection hands over its body): each piece is ready only
    /// after that task ran again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn pieces_another_task_hands_over_one_by_one_leave_in_one_write() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
        tokio::spawn(async move {
            for i in 0..20 {
                tx.send(Bytes::from(format!("data: {i}\n\n")))
                    .await
                    .unwrap();
            }
        });
        let rendering: Rendering<Bytes> = Box::pin(futures::stream::unfold(rx, |mut rx| async {
            rx.recv().await.map(|piece| (piece, rx))
        }));
        // On a task of its own, as a server runs a response body.
        let got = tokio::spawn(handed(rendering)).await.unwrap();
        let want: String = (0..20).map(|i| format!("data: {i}\n\n")).collect();
        assert_eq!(got, [Bytes::from(want)]);
    }

    /// A rendering is polled only when it woke (or gave a piece): a poll at the end of a
    /// round, or a second poll from the server, does not walk down to find it waiting.
    #[tokio::test]
    async fn a_rendering_is_polled_again_only_when_it_woke() {
        use std::task::Poll;
        type State = (usize, Vec<Bytes>, Option<std::task::Waker>);
        let state = Arc::new(std::sync::Mutex::new(State::default()));
        let shared = state.clone();
        let rendering: Rendering<Bytes> = Box::pin(futures::stream::poll_fn(move |cx| {
            let mut s = shared.lock().unwrap();
            s.0 += 1;
            match s.1.pop() {
                Some(piece) => Poll::Ready(Some(piece)),
                None => {
                    s.2 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }));
        let mut watched = Watched::new(rendering, Duration::from_secs(5), Arc::default());
        let polls = || state.lock().unwrap().0;
        assert!(futures::poll!(watched.next()).is_pending());
        assert_eq!(polls(), 1);
        assert!(futures::poll!(watched.next()).is_pending());
        assert_eq!(polls(), 1, "it did not wake: not polled");
        let waker = {
            let mut s = state.lock().unwrap();
            s.1.push(Bytes::from_static(b"data: 1\n\n"));
            s.2.take().unwrap()
        };
        waker.wake();
        // Woken: the piece, then waiting again; the piece is held for a round.
        assert!(futures::poll!(watched.next()).is_pending());
        assert_eq!(polls(), 3);
        tokio::task::yield_now().await;
        let got = futures::poll!(watched.next());
        assert_eq!(got, Poll::Ready(Some(Bytes::from_static(b"data: 1\n\n"))));
        assert_eq!(polls(), 3, "the round passed with nothing new: not polled");
    }

    #[tokio::test]
    async fn a_batch_stops_growing_past_its_bound() {
        let piece = |c: u8| Bytes::from(vec![c; 40 * 1024]);
        let got = handed(bursts(vec![vec![piece(b'a'), piece(b'b'), piece(b'c')]])).await;
        let sizes: Vec<usize> = got.iter().map(Bytes::len).collect();
        assert_eq!(sizes, [80 * 1024, 40 * 1024]);
        let all: Vec<u8> = got.concat();
        assert!(all[..40 * 1024].iter().all(|&c| c == b'a'));
        assert!(all[40 * 1024..80 * 1024].iter().all(|&c| c == b'b'));
        assert!(all[80 * 1024..].iter().all(|&c| c == b'c'));
    }

    #[derive(Debug, PartialEq)]
    struct Message(u32);

    impl Piece for Message {}

    #[tokio::test]
    async fn messages_leave_one_at_a_time() {
        let got = handed(bursts(vec![
            vec![Message(1), Message(2), Message(3)],
            vec![Message(4)],
        ]))
        .await;
        assert_eq!(got, [Message(1), Message(2), Message(3), Message(4)]);
    }
}

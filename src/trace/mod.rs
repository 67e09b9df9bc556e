//! Traces over OTLP (OpenTelemetry), when `telemetry.otlp_endpoint` is set: one trace per
//! request, a span per stage, exported in batches from a bounded queue by a thread of its
//! own (a slow or absent collector never holds a request: spans beyond the queue are
//! dropped). Over HTTP the queue is the gateway's ([`queue`]: spans encoded as they end);
//! over gRPC, the SDK's batch processor.
//!
//! Spans are OpenTelemetry spans made by [`record`] (the SDK's sampler, ids and span data,
//! without its tracer), started and ended by the stages themselves ([`Span`]): without an
//! endpoint every constructor returns an empty span at the cost of one atomic load. (The
//! gateway's log lines are `tracing`'s; traces do not go through it: bridging spans
//! through a `tracing` layer cost three times as much CPU per answer.) Attributes follow
//! the OpenTelemetry GenAI semantic conventions (`gen_ai.*`, `server.*`), plus the gateway's own (`assist.*`). Content
//! (messages, prompt, answer, chunk texts) is recorded only with
//! `telemetry.capture_content`, and only after `[privacy]` cleaned it (the callers do).
//!
//! A client's W3C `traceparent` continues its trace ([`request_span`]); the upstream
//! request carries the current span as its parent (`llm::http`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::borrow::Cow;
use std::sync::{LazyLock, OnceLock};

use opentelemetry::context::{FutureExt as _, WithContext};
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor};
use opentelemetry_sdk::Resource;

use crate::config::{OtlpProtocol, TelemetrySettings};

mod otlp;
mod queue;
mod record;

static ENABLED: AtomicBool = AtomicBool::new(false);
static CAPTURE: AtomicBool = AtomicBool::new(false);
/// The spans' maker, with the exporter [`Tracing::start`] set up (once per process).
static RECORDER: OnceLock<record::Recorder> = OnceLock::new();
/// W3C trace context (`traceparent`, `tracestate`), read from clients (the gateway's own:
/// no global propagator and its lock to ask; `llm::http` writes it on upstream requests).
static W3C: LazyLock<TraceContextPropagator> = LazyLock::new(TraceContextPropagator::new);

/// Whether traces are exported (spans are worth filling in).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether content goes on the spans (`telemetry.capture_content`, with traces on).
pub fn capture_content() -> bool {
    CAPTURE.load(Ordering::Relaxed)
}

/// The exporter and its queue, flushed by [`Tracing::shutdown`].
pub struct Tracing {
    recorder: &'static record::Recorder,
    export_timeout: Duration,
}

impl Tracing {
    /// The exporter `settings` ask for, or `None` without an endpoint. Must be called
    /// inside the Tokio runtime that will carry the exports (HTTP requests are the
    /// gateway's own reqwest client on it; gRPC is tonic on it).
    pub fn start(settings: &TelemetrySettings) -> anyhow::Result<Option<Self>> {
        let Some(endpoint) = settings.otlp_endpoint.as_deref() else {
            return Ok(None);
        };
        let headers: HashMap<String, String> = settings
            .otlp_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let sink = match settings.otlp_protocol {
            OtlpProtocol::Http => {
                let client = reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .user_agent(concat!("assist-gateway/", env!("CARGO_PKG_VERSION")))
                    .build()?;
                let header_map = otlp::headers(
                    std::env::var("OTEL_EXPORTER_OTLP_HEADERS").ok().as_deref(),
                    std::env::var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
                        .ok()
                        .as_deref(),
                    &headers,
                )?;
                let sender = otlp::Sender::new(
                    client,
                    reqwest::Url::parse(endpoint)?,
                    header_map,
                    settings.export_timeout,
                );
                let queue = queue::Queue::start(
                    sender,
                    tokio::runtime::Handle::current(),
                    settings.max_queue_spans,
                    settings.export_delay,
                )?;
                record::Sink::Queue(queue)
            }
            OtlpProtocol::Grpc => {
                use opentelemetry_otlp::WithTonicConfig;
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (k, v) in &headers {
                    let key =
                        tonic::metadata::MetadataKey::from_bytes(k.to_lowercase().as_bytes())?;
                    metadata.insert(key, v.parse()?);
                }
                let exporter = SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint)
                    .with_timeout(settings.export_timeout)
                    .with_metadata(metadata)
                    .build()?;
                let batch = BatchConfigBuilder::default()
                    .with_max_queue_size(settings.max_queue_spans)
                    .with_max_export_batch_size(512.min(settings.max_queue_spans))
                    .with_scheduled_delay(settings.export_delay)
                    .build();
                // OTLP/HTTP's failures are said where its requests are sent
                // (`otlp::Sender`), with their kind; gRPC's here, from the export's result.
                record::Sink::Processor(Box::new(
                    BatchSpanProcessor::builder(Watched { inner: exporter })
                        .with_batch_config(batch)
                        .build(),
                ))
            }
        };
        if RECORDER
            .set(record::Recorder::new(sink, &resource))
            .is_err()
        {
            anyhow::bail!("traces: the exporter is already set up");
        }
        let Some(recorder) = RECORDER.get() else {
            anyhow::bail!("traces: the exporter is not set up");
        };
        ENABLED.store(true, Ordering::Relaxed);
        CAPTURE.store(settings.capture_content, Ordering::Relaxed);
        Ok(Some(Self {
            recorder,
            export_timeout: settings.export_timeout,
        }))
    }

    /// Exports what is queued and stops (off the runtime's workers: it blocks).
    pub async fn shutdown(self) {
        let recorder = self.recorder;
        // Long enough for the last export to be tried for its whole timeout.
        let wait = self.export_timeout + Duration::from_secs(1);
        match tokio::task::spawn_blocking(move || recorder.stop(wait)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "traces: the last export failed"),
            Err(e) => tracing::warn!(error = %e, "traces: could not stop the exporter"),
        }
    }
}

/// The OTLP/gRPC exporter, its failed exports said in the log (`export_failed`).
#[derive(Debug)]
struct Watched {
    inner: SpanExporter,
}

impl opentelemetry_sdk::trace::SpanExporter for Watched {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            // Never the error's text: it may name the endpoint.
            let kind = match e {
                opentelemetry_sdk::error::OTelSdkError::Timeout(_) => "timeout",
                _ => "rpc",
            };
            export_failed(kind, None);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Seconds (since the Unix epoch) of the last warning that an export failed.
static LAST_EXPORT_WARNING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Says in the log that the collector did not take an export: at most once a minute, with
/// the failure's kind and the collector's status, never its URL (it may hold credentials)
/// or a body. The spans of a failed export are lost; answers are not held up.
fn export_failed(kind: &'static str, status: Option<u16>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST_EXPORT_WARNING.load(Ordering::Relaxed);
    if now.saturating_sub(last) < 60
        || LAST_EXPORT_WARNING
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    tracing::warn!(
        kind,
        status,
        "traces: the collector did not take an export (its spans are lost; said at most once a minute)"
    );
}

/// One span of a trace: an OpenTelemetry SDK span in its context, or nothing when traces
/// are off. It ends when dropped (or at [`Span::end`]); a stage's children take it as
/// their parent through [`Span::child`], or implicitly while [`Span::within`] polls.
#[derive(Debug, Default)]
pub struct Span {
    cx: Option<Context>,
    /// Whether dropping this handle ends the span (not for [`Span::current`]'s).
    owned: bool,
}

impl Span {
    /// No span: what every constructor gives when traces are off.
    pub fn none() -> Self {
        Self {
            cx: None,
            owned: false,
        }
    }

    /// A span named `name`, child of the current context (the span whose future is being
    /// polled through [`Span::within`]), with the attributes `attributes` gives; nothing
    /// (and `attributes` not called) when traces are off.
    pub fn start(
        name: impl Into<Cow<'static, str>>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        if !enabled() {
            return Self::none();
        }
        Context::map_current(|parent| Self::begin(parent, name, SpanKind::Internal, attributes))
    }

    /// A child of this span (nothing when this one is nothing).
    pub fn child(
        &self,
        name: impl Into<Cow<'static, str>>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        match &self.cx {
            Some(parent) => Self::begin(parent, name, SpanKind::Internal, attributes),
            None => Self::none(),
        }
    }

    /// A child of this span of another kind (`client` for the upstream's request).
    pub fn child_of_kind(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        match &self.cx {
            Some(parent) => Self::begin(parent, name, kind, attributes),
            None => Self::none(),
        }
    }

    fn begin(
        parent: &Context,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        let Some(recorder) = RECORDER.get() else {
            return Self::none();
        };
        // Room for the attributes a stage sets when it knows them (most set 3 to 8): one
        // allocation, not one each time the list doubles.
        let mut attributes = attributes();
        attributes.reserve(8);
        Self {
            cx: Some(recorder.start(parent, name.into(), kind, attributes)),
            owned: true,
        }
    }

    /// The current context's span, to add to (the stage whose future is being polled
    /// through [`Span::within`]); this handle does not end it.
    pub fn current() -> Self {
        if !enabled() {
            return Self::none();
        }
        let cx = Context::current();
        Self {
            cx: cx.has_active_span().then_some(cx),
            owned: false,
        }
    }

    /// Whether this span records (traces on and the trace sampled): worth filling in.
    /// Read from its context's sampled flag, which the recorder sets exactly for the spans
    /// it records (the SDK's samplers record only what they sample), without locking the
    /// span as asking it would.
    pub fn is_recording(&self) -> bool {
        self.cx
            .as_ref()
            .is_some_and(|cx| cx.span().span_context().is_sampled())
    }

    /// Runs `future` with this span as the current context (its spans are children).
    pub fn within<F>(&self, future: F) -> WithContext<F> {
        future.with_context(self.cx.clone().unwrap_or_default())
    }

    /// The span's context (`None` when traces are off).
    pub fn context(&self) -> Option<&Context> {
        self.cx.as_ref()
    }

    /// Sets attribute `key`.
    pub fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(cx) = &self.cx {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Several attributes at once (one lock of the span, not one each).
    pub fn set_all(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if let Some(cx) = &self.cx {
            cx.span().set_attributes(attributes);
        }
    }

    /// A list of strings as one attribute's value (`gen_ai.response.finish_reasons`).
    pub fn strings(values: &[&'static str]) -> opentelemetry::Value {
        let list: Vec<opentelemetry::StringValue> = values.iter().map(|v| (*v).into()).collect();
        opentelemetry::Value::Array(list.into())
    }

    /// Marks the span failed: `error.type` and an error status, both `kind` (an error's
    /// code, never its message, which may quote a request or the upstream).
    pub fn fail(&self, kind: &str) {
        if let Some(cx) = &self.cx {
            let span = cx.span();
            span.set_attribute(KeyValue::new("error.type", kind.to_string()));
            span.set_status(Status::error(kind.to_string()));
        }
    }

    /// A point in time on the span (`first token`).
    pub fn event(&self, name: &'static str) {
        if let Some(cx) = &self.cx {
            cx.span().add_event(name, Vec::new());
        }
    }

    /// Ends the span now (a later end, or the drop, changes nothing).
    pub fn end(&self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if self.owned {
            self.end();
        }
    }
}

/// The root span of one chat request over `dialect`, named after its `route`; with
/// `headers`, a `traceparent` in them makes it a child of the client's span.
pub fn request_span(
    dialect: &'static str,
    route: &'static str,
    headers: Option<&http::HeaderMap>,
) -> Span {
    if !enabled() {
        return Span::none();
    }
    // HTTP's span names are `{method} {route}` (every chat route is a POST); gRPC's the
    // method's full name; MCP's its tool.
    let name: Cow<'static, str> = match dialect {
        "grpc" | "mcp" => Cow::Borrowed(route),
        _ => span_name("POST", route),
    };
    // Most requests carry no `traceparent`: looked up by a name made once, and the
    // propagator (which parses both names from text) asked only when there is one; a
    // request without one, or with one that does not parse, starts a trace.
    let parent = match headers {
        Some(headers) if headers.contains_key(&crate::llm::http::TRACEPARENT) => W3C
            .extract_with_context(
                &Context::new(),
                &opentelemetry_http::HeaderExtractor(headers),
            ),
        _ => Context::new(),
    };
    Span::begin(&parent, name, SpanKind::Server, || {
        // Room for the attributes set later (the model, the key, the outcome, …): one
        // allocation, not one each time the list doubles.
        let mut attributes = Vec::with_capacity(14);
        attributes.extend([
            KeyValue::new("openinference.span.kind", "CHAIN"),
            KeyValue::new("assist.dialect", dialect),
        ]);
        attributes
    })
}

/// A span's name `{verb} {object}` (`POST /v1/chat/completions`, `chat qwen2.5-coder`),
/// made once for each pair and kept: every request's spans are named without a string
/// formatted each time (about 700 instructions a name). The pairs are few (the server's
/// routes, the upstream's models); past [`MAX_NAMES`] of them, names are made each time.
pub fn span_name(verb: &'static str, object: &str) -> Cow<'static, str> {
    static NAMES: std::sync::Mutex<Vec<(&'static str, &'static str, &'static str)>> =
        std::sync::Mutex::new(Vec::new());
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, _, name)) = names.iter().find(|(v, o, _)| *o == object && *v == verb) {
        return Cow::Borrowed(name);
    }
    let name = format!("{verb} {object}");
    if names.len() >= MAX_NAMES {
        return Cow::Owned(name);
    }
    let name: &'static str = Box::leak(name.into_boxed_str());
    let object: &'static str = &name[verb.len() + 1..];
    names.push((verb, object, name));
    Cow::Borrowed(name)
}

/// Most span names [`span_name`] keeps.
const MAX_NAMES: usize = 256;

/// Messages in the GenAI conventions' shape (`gen_ai.input.messages`,
/// `gen_ai.output.messages`): `[{"role", "parts": [{"type": "text", "content"}]}]`.
pub fn messages_json<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let list: Vec<serde_json::Value> = messages
        .into_iter()
        .map(|(role, text)| {
            serde_json::json!({"role": role, "parts": [{"type": "text", "content": text}]})
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// Retrieved chunks as `[{"id", "score"}]` (with `"content"` when given): the shape of
/// `gen_ai.retrieval.documents`, also `assist.retrieval.hits` without content. Written
/// straight into its text (what `serde_json` writes for the same list, scores rounded to
/// six decimals), where serializing a list of structs cost an answer about 5,000
/// instructions.
pub fn documents_json<'a>(
    hits: impl IntoIterator<Item = (&'a str, f32, Option<&'a str>)>,
) -> String {
    let mut out = Vec::with_capacity(512);
    out.push(b'[');
    for (i, (id, score, content)) in hits.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"id\":");
        crate::json::push_string(&mut out, id);
        out.extend_from_slice(b",\"score\":");
        let score = (f64::from(score) * 1e6).round() / 1e6;
        if serde_json::to_writer(&mut out, &score).is_err() {
            out.extend_from_slice(b"null");
        }
        if let Some(content) = content {
            out.extend_from_slice(b",\"content\":");
            crate::json::push_string(&mut out, content);
        }
        out.push(b'}');
    }
    out.push(b']');
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_messages_have_the_conventions_shape() {
        let docs = documents_json([("a#1", 0.5, None), ("b#2", 0.25, Some("text"))]);
        let v: serde_json::Value = serde_json::from_str(&docs).unwrap();
        assert_eq!(v[0], serde_json::json!({"id": "a#1", "score": 0.5}));
        assert_eq!(v[1]["content"], "text");
        // Byte for byte what serializing the same list writes.
        let hits = [
            ("docs/a.md#0", 0.123_456_78_f32, None),
            ("b \"q\"\\\u{1}é😀", 1.0, Some("line\nnext\t\u{7f}")),
            ("c", f32::NAN, None),
            ("d", -2.5e-7, Some("")),
        ];
        // The list of structs it used to serialize.
        #[derive(serde::Serialize)]
        struct Document<'a> {
            id: &'a str,
            score: f64,
            #[serde(skip_serializing_if = "Option::is_none")]
            content: Option<&'a str>,
        }
        let reference: Vec<Document<'_>> = hits
            .iter()
            .map(|&(id, score, content)| Document {
                id,
                score: (f64::from(score) * 1e6).round() / 1e6,
                content,
            })
            .collect();
        assert_eq!(
            documents_json(hits),
            serde_json::to_string(&reference).unwrap()
        );
        let m = messages_json([("user", "hi")]);
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(v[0]["parts"][0]["content"], "hi");
    }

    #[test]
    fn span_names_are_made_once_per_pair() {
        let model = String::from("qwen2.5-coder");
        let first = span_name("chat", &model);
        let again = span_name("chat", &model.clone());
        assert_eq!(first, "chat qwen2.5-coder");
        match (&first, &again) {
            (Cow::Borrowed(a), Cow::Borrowed(b)) => assert!(std::ptr::eq(*a, *b)),
            other => panic!("kept: {other:?}"),
        }
        assert_eq!(
            span_name("text_completion", &model),
            "text_completion qwen2.5-coder"
        );
        assert_eq!(span_name("POST", "/v1/completions"), "POST /v1/completions");
    }

    #[test]
    fn spans_are_none_when_traces_are_off() {
        let span = request_span("openai", "/v1/chat/completions", None);
        assert!(span.context().is_none() && !span.is_recording());
        assert!(Span::start("stage", Vec::new).context().is_none());
    }
}

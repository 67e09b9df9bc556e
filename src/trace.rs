//! Traces over OTLP (OpenTelemetry), when `telemetry.otlp_endpoint` is set: one trace per
//! request, a span per stage, exported in batches from a bounded queue on a thread of the
//! SDK's own (a slow or absent collector never holds a request: spans beyond the queue
//! are dropped).
//!
//! The spans are `tracing` spans of the target [`TARGET`], which only the OpenTelemetry
//! layer takes (the log never shows them); without an endpoint no layer wants them, and
//! they cost a callsite check. Attributes follow the OpenTelemetry GenAI semantic
//! conventions (`gen_ai.*`, `server.*`), plus the gateway's own (`assist.*`). Content
//! (messages, prompt, answer, chunk texts) is recorded only with
//! `telemetry.capture_content`, and only after `[privacy]` cleaned it (the callers do).
//!
//! A client's W3C `traceparent` continues its trace ([`request_span`]); the upstream
//! request carries the current span as its parent (`llm::http`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::{OtlpProtocol, TelemetrySettings};

/// The target of every span the gateway exports (and of nothing else).
pub const TARGET: &str = "assist_gateway::span";

/// The log directive that keeps the spans out of the log lines.
pub const NOT_LOGGED: &str = "assist_gateway::span=off";

static ENABLED: AtomicBool = AtomicBool::new(false);
static CAPTURE: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported (spans are worth filling in).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether content goes on the spans (`telemetry.capture_content`, with traces on).
pub fn capture_content() -> bool {
    CAPTURE.load(Ordering::Relaxed)
}

/// The exporter and its batch processor, flushed by [`Tracing::shutdown`].
pub struct Tracing {
    provider: SdkTracerProvider,
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
        let exporter = match settings.otlp_protocol {
            OtlpProtocol::Http => {
                let client = reqwest::Client::builder()
                    .timeout(settings.export_timeout)
                    .connect_timeout(Duration::from_secs(5))
                    .build()?;
                SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(endpoint)
                    .with_timeout(settings.export_timeout)
                    .with_headers(headers)
                    .with_http_client(OnRuntime {
                        client,
                        handle: tokio::runtime::Handle::current(),
                    })
                    .build()?
            }
            OtlpProtocol::Grpc => {
                use opentelemetry_otlp::WithTonicConfig;
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (k, v) in &headers {
                    let key =
                        tonic::metadata::MetadataKey::from_bytes(k.to_lowercase().as_bytes())?;
                    metadata.insert(key, v.parse()?);
                }
                SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint)
                    .with_timeout(settings.export_timeout)
                    .with_metadata(metadata)
                    .build()?
            }
        };
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(settings.max_queue_spans)
                    .with_max_export_batch_size(512.min(settings.max_queue_spans))
                    .with_scheduled_delay(settings.export_delay)
                    .build(),
            )
            .build();
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        ENABLED.store(true, Ordering::Relaxed);
        CAPTURE.store(settings.capture_content, Ordering::Relaxed);
        Ok(Some(Self { provider }))
    }

    /// The subscriber layer that turns the gateway's spans ([`TARGET`]) into OpenTelemetry
    /// spans (no code locations, threads or busy times: only what the gateway records).
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("assist-gateway"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_level(false)
            // The gateway never reads OpenTelemetry's current context (it asks the span):
            // no context to switch on every poll of an instrumented future.
            .with_context_activation(false)
            .with_filter(Targets::new().with_target(TARGET, LevelFilter::INFO))
    }

    /// Exports what is queued and stops (off the runtime's workers: it blocks).
    pub async fn shutdown(self) {
        let provider = self.provider;
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "traces: the last export failed"),
            Err(e) => tracing::warn!(error = %e, "traces: could not stop the exporter"),
        }
    }
}

/// OTLP/HTTP over the gateway's reqwest client: the SDK's batch thread waits on a task
/// of the gateway's runtime that does the request.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        self.handle
            .spawn(async move {
                let request = reqwest::Request::try_from(request)?;
                let response = client.execute(request).await?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = response.bytes().await?;
                let mut out = http::Response::builder().status(status).body(body)?;
                *out.headers_mut() = headers;
                Ok::<_, opentelemetry_http::HttpError>(out)
            })
            .await?
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
    let name = match dialect {
        "grpc" | "mcp" => std::borrow::Cow::Borrowed(route),
        _ => std::borrow::Cow::Owned(format!("POST {route}")),
    };
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = name.as_ref(),
        otel.kind = "server",
        openinference.span.kind = "CHAIN",
        assist.dialect = dialect,
        gen_ai.request.model = Empty,
        gen_ai.request.stream = Empty,
        assist.key = Empty,
        assist.query_type = Empty,
        assist.editor = Empty,
        assist.outcome = Empty,
        assist.ttft_ms = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
    );
    if let Some(headers) = headers {
        let parent = opentelemetry::global::get_text_map_propagator(|p| {
            p.extract(&opentelemetry_http::HeaderExtractor(headers))
        });
        let _ = span.set_parent(parent);
    }
    span
}

/// Sets an attribute the span did not declare (arrays, JSON, more than tracing's 32
/// fields); nothing when traces are off.
pub fn set(span: &Span, key: &'static str, value: impl Into<opentelemetry::Value>) {
    if enabled() && !span.is_disabled() {
        span.set_attribute(key, value);
    }
}

/// A list of strings as one attribute (`gen_ai.response.finish_reasons`).
pub fn set_strings(span: &Span, key: &'static str, values: &[&str]) {
    if enabled() && !span.is_disabled() {
        let list: Vec<opentelemetry::StringValue> =
            values.iter().map(|v| (*v).to_string().into()).collect();
        span.set_attribute(key, opentelemetry::Value::Array(list.into()));
    }
}

/// Marks the span failed: `error.type` and an error status, both `kind` (an error's
/// code, never its message, which may quote a request or the upstream).
pub fn fail(span: &Span, kind: &str) {
    if enabled() && !span.is_disabled() {
        span.set_attribute("error.type", kind.to_string());
        span.set_status(Status::error(kind.to_string()));
    }
}

/// Marks now as the span's end: the exporter takes a span's last exit as its end, and a
/// span held across an answer (the request's, the upstream's) was last entered when the
/// answer started.
pub fn end_now(span: &Span) {
    if !span.is_disabled() {
        span.in_scope(|| {});
    }
}

/// A point in time on the span (`first token`).
pub fn event(span: &Span, name: &'static str, attributes: Vec<KeyValue>) {
    if enabled() && !span.is_disabled() {
        span.add_event(name, attributes);
    }
}

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
/// `gen_ai.retrieval.documents`, also `assist.retrieval.hits` without content.
pub fn documents_json<'a>(
    hits: impl IntoIterator<Item = (&'a str, f32, Option<&'a str>)>,
) -> String {
    let list: Vec<serde_json::Value> = hits
        .into_iter()
        .map(|(id, score, content)| {
            let score = (f64::from(score) * 1e6).round() / 1e6;
            match content {
                Some(text) => serde_json::json!({"id": id, "score": score, "content": text}),
                None => serde_json::json!({"id": id, "score": score}),
            }
        })
        .collect();
    serde_json::Value::Array(list).to_string()
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
        let m = messages_json([("user", "hi")]);
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(v[0]["parts"][0]["content"], "hi");
    }

    #[test]
    fn spans_are_none_when_traces_are_off() {
        assert!(request_span("openai", "POST /v1/chat/completions", None).is_none());
    }
}

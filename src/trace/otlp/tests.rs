use std::borrow::Cow;

use opentelemetry::trace::{Event, Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
use prost::Message as _;

use super::*;

fn context(trace: u128, span: u64, remote: bool, state: &str) -> SpanContext {
    SpanContext::new(
        TraceId::from(trace),
        SpanId::from(span),
        TraceFlags::SAMPLED,
        remote,
        TraceState::from_key_value(
            state
                .split(',')
                .filter(|p| !p.is_empty())
                .filter_map(|p| p.split_once('=')),
        )
        .unwrap(),
    )
}

pub(in crate::trace) fn span_data(name: &'static str, scope: &InstrumentationScope) -> SpanData {
    let start = UNIX_EPOCH + Duration::from_nanos(1_764_000_000_123_456_789);
    SpanData {
        span_context: context(0xabc, 0x11, false, ""),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Server,
        name: Cow::Borrowed(name),
        start_time: start,
        end_time: start + Duration::from_micros(1_500),
        attributes: vec![KeyValue::new("http.route", "/v1/chat/completions")],
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: scope.clone(),
    }
}

/// Every kind of field a span can hold, across two scopes.
fn batch() -> (Resource, Vec<SpanData>) {
    let gateway = InstrumentationScope::builder("assist-gateway").build();
    let other = InstrumentationScope::builder("other")
        .with_version("1.2.3")
        .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
        .with_attributes([KeyValue::new("scope.attr", true)])
        .build();
    let mut root = span_data("POST /v1/chat/completions", &gateway);
    root.parent_span_id = SpanId::from(0x77);
    root.parent_span_is_remote = true;
    root.span_context = context(0xabc, 0x11, false, "vendor=value,other=x");
    let mut child = span_data("chat qwen2.5-coder", &gateway);
    child.span_kind = SpanKind::Client;
    child.parent_span_id = SpanId::from(0x11);
    child.attributes = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.request.stream", true),
        KeyValue::new("gen_ai.request.stream.off", false),
        KeyValue::new("gen_ai.usage.input_tokens", 1234_i64),
        KeyValue::new("assist.zero", 0_i64),
        KeyValue::new("assist.negative", -5_i64),
        KeyValue::new("gen_ai.request.temperature", 0.2),
        KeyValue::new("assist.empty", ""),
        KeyValue::new("assist.unicode", "¿por qué falla? ✓"),
        KeyValue::new("assist.long", "x".repeat(300)),
        // 127 bytes in all, the longest written with one-byte lengths; then 128.
        KeyValue::new("a", "y".repeat(120)),
        KeyValue::new("a", "y".repeat(121)),
        KeyValue::new("assist.min", i64::MIN),
        KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(Array::String(vec!["stop".into(), "length".into()])),
        ),
        KeyValue::new("assist.ints", Value::Array(Array::I64(vec![0, 7, -1]))),
        KeyValue::new("assist.floats", Value::Array(Array::F64(vec![0.5, 0.0]))),
        KeyValue::new("assist.bools", Value::Array(Array::Bool(vec![true, false]))),
    ];
    child.dropped_attributes_count = 3;
    child.status = Status::error("upstream refused");
    child.events.events.push(Event::new(
        "first token",
        UNIX_EPOCH + Duration::from_nanos(1_764_000_000_200_000_000),
        vec![KeyValue::new("n", 1_i64)],
        2,
    ));
    child.events.dropped_count = 1;
    child.links.links.push(Link::new(
        context(0xdef, 0x22, true, "a=b"),
        vec![KeyValue::new("link.kind", "follows")],
        4,
    ));
    child.links.dropped_count = 5;
    let mut third = span_data("retrieve", &other);
    third.span_kind = SpanKind::Internal;
    third.status = Status::Ok;
    // At the epoch: zero, left out as the SDK's conversion leaves it out.
    third.end_time = UNIX_EPOCH;
    let mut fourth = span_data("fuse", &gateway);
    fourth.span_kind = SpanKind::Producer;
    let mut fifth = span_data("queue", &other);
    fifth.span_kind = SpanKind::Consumer;
    let resource = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "assist-gateway"),
            KeyValue::new("service.version", "0.1.0"),
        ])
        .with_schema_url(
            [KeyValue::new("deployment.environment", "test")],
            "https://opentelemetry.io/schemas/1.30.0",
        )
        .build();
    (resource, vec![root, child, third, fourth, fifth])
}

/// What the SDK's own conversion and prost would send for `spans`.
fn reference(resource: &Resource, spans: Vec<SpanData>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: group_spans_by_resource_and_scope(
            spans,
            &ResourceAttributesWithSchema::from(resource),
        ),
    }
}

/// The requests the queue sends for `spans`: one per scope, in the order the scopes
/// first appear.
fn requests(resource: &Resource, spans: &[SpanData]) -> Vec<bytes::Bytes> {
    let encoded = self::resource(resource);
    let mut batches: Vec<Batch> = Vec::new();
    for s in spans {
        let s = &Ended::from(s);
        match batches.iter_mut().find(|b| b.takes(s)) {
            Some(batch) => batch.push(s),
            None => {
                let mut batch = Batch::new(s.scope, encoded.len(), 0);
                batch.push(s);
                batches.push(batch);
            }
        }
    }
    let schema = resource.schema_url().unwrap_or_default();
    batches
        .into_iter()
        .map(|b| b.finish(&encoded, schema))
        .collect()
}

/// One request of one scope's `spans`.
fn request(resource: &Resource, spans: &[SpanData]) -> bytes::Bytes {
    let mut all = requests(resource, spans);
    assert_eq!(all.len(), 1, "one scope");
    all.remove(0)
}

#[test]
fn the_encoding_is_the_message_the_sdk_sends() {
    // Two scopes: a request each, which together say what the SDK's one request says.
    let (resource, spans) = batch();
    let ours = requests(&resource, &spans);
    assert_eq!(ours.len(), 2);
    let expected = reference(&resource, spans);
    let mut merged = ExportTraceServiceRequest::decode(&ours[0][..]).unwrap();
    let second = ExportTraceServiceRequest::decode(&ours[1][..]).unwrap();
    merged.resource_spans[0]
        .scope_spans
        .extend(second.resource_spans[0].scope_spans.iter().cloned());
    assert_eq!(merged, expected);
    // Byte for byte too, scope by scope: the same fields in the same order, defaults
    // left out alike.
    for (ours, scope) in ours.iter().zip(&expected.resource_spans[0].scope_spans) {
        let mut one = expected.clone();
        one.resource_spans[0].scope_spans = vec![scope.clone()];
        assert_eq!(ours[..], one.encode_to_vec()[..]);
    }
}

#[test]
fn a_resource_set_after_the_first_span_still_heads_the_request() {
    let (resource, spans) = batch();
    let gateway = spans[0].instrumentation_scope.clone();
    let mut batch = Batch::new(&gateway, 0, 0);
    batch.push(&Ended::from(&spans[0]));
    let encoded = self::resource(&resource);
    let ours = batch.finish(&encoded, resource.schema_url().unwrap_or_default());
    let expected = reference(&resource, vec![spans[0].clone()]);
    assert_eq!(ours[..], expected.encode_to_vec()[..]);
}

#[test]
fn headers_come_from_the_environment_then_the_settings_decoded() {
    let configured = std::collections::HashMap::from([(
        "authorization".to_string(),
        "Basic%20cGs6c2s=".to_string(),
    )]);
    let map = headers(
        Some("x-a = 1, authorization=Basic%20ZW52, x-b=two"),
        Some("x-b=three,broken"),
        &configured,
    )
    .unwrap();
    assert_eq!(map["x-a"], "1");
    assert_eq!(
        map["x-b"], "three",
        "the traces' list overrides the general one"
    );
    assert_eq!(
        map["authorization"], "Basic cGs6c2s=",
        "the settings override both"
    );
    assert!(map["authorization"].is_sensitive());
    assert_eq!(map.len(), 3);
    let bad = std::collections::HashMap::from([("x".to_string(), "a\nb".to_string())]);
    assert!(
        headers(None, None, &bad).is_err(),
        "a value with a line break"
    );
}

/// A collector on a free port answering each export with the next of `answers`
/// (status, retry-after), then 200; it keeps every body it was sent.
pub(in crate::trace) async fn collector(
    answers: Vec<(u16, Option<&'static str>)>,
) -> (
    reqwest::Url,
    std::sync::Arc<std::sync::Mutex<Vec<bytes::Bytes>>>,
) {
    use std::sync::{Arc, Mutex};
    let got: Arc<Mutex<Vec<bytes::Bytes>>> = Arc::default();
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let kept = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: bytes::Bytes| {
            let (kept, answers) = (kept.clone(), answers.clone());
            async move {
                kept.lock().unwrap().push(body);
                let (status, after) = answers.lock().unwrap().next().unwrap_or((200, None));
                let mut response = axum::http::Response::builder().status(status);
                if let Some(after) = after {
                    response = response.header("retry-after", after);
                }
                response.body(axum::body::Body::empty()).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (reqwest::Url::parse(&url).unwrap(), got)
}

fn sender(url: reqwest::Url, timeout: Duration) -> Sender {
    Sender::new(
        reqwest::Client::new(),
        url,
        reqwest::header::HeaderMap::new(),
        timeout,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_that_asks_to_slow_down_gets_the_batch_again() {
    let (url, got) = collector(vec![(503, Some("0")), (429, None)]).await;
    let (resource, spans) = batch();
    let body = requests(&resource, &spans).remove(1);
    let sent = sender(url, Duration::from_secs(10)).deliver(body).await;
    assert!(sent.is_ok(), "{sent:?}");
    let bodies = got.lock().unwrap().clone();
    assert_eq!(bodies.len(), 3, "503, then 429, then taken");
    assert!(bodies.iter().all(|b| b == &bodies[0]));
    let request = ExportTraceServiceRequest::decode(bodies[2].as_ref()).unwrap();
    let names: Vec<&str> = request.resource_spans[0].scope_spans[0]
        .spans
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["retrieve", "queue"], "the second scope's spans");
}

/// A collector answering an endless body: the export is done at its status, having
/// read a few kilobytes of it (it read until its timeout, holding all, before).
#[tokio::test(flavor = "multi_thread")]
async fn a_collectors_endless_answer_is_not_read() {
    let sent_bytes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent_bytes.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                let piece = bytes::Bytes::from(vec![b'x'; 64 << 10]);
                let endless = futures::stream::repeat_with(move || {
                    counted.fetch_add(piece.len(), std::sync::atomic::Ordering::Relaxed);
                    Ok::<_, std::io::Error>(piece.clone())
                });
                axum::body::Body::from_stream(endless)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let started = std::time::Instant::now();
    let client = reqwest::Client::new();
    let url = reqwest::Url::parse(&url).unwrap();
    let headers = reqwest::header::HeaderMap::new();
    let done = send(
        &client,
        &url,
        &headers,
        bytes::Bytes::new(),
        Duration::from_secs(30),
    );
    assert!(matches!(done.await, Try::Done));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let sent = sent_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 64 << 20, "the collector sent {sent} bytes");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_batch_is_not_sent_again() {
    let (url, got) = collector(vec![(400, None)]).await;
    let (resource, spans) = batch();
    let body = requests(&resource, &spans).remove(0);
    let sent = sender(url, Duration::from_secs(10)).deliver(body).await;
    assert!(sent.is_err());
    assert_eq!(got.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn tries_stop_at_the_export_timeout() {
    // Always 503, asking for 5 s each time: one try fits in a 1 s timeout.
    let (url, got) = collector(vec![(503, Some("5")); 10]).await;
    let (resource, spans) = batch();
    let body = requests(&resource, &spans).remove(0);
    let started = std::time::Instant::now();
    let sent = sender(url, Duration::from_secs(1)).deliver(body).await;
    assert!(sent.is_err());
    assert_eq!(got.lock().unwrap().len(), 1);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_large_batch_keeps_its_lengths() {
    // Messages past 127 and 16,383 bytes take two- and three-byte lengths.
    let (resource, one) = batch();
    let gateway = one[0].instrumentation_scope.clone();
    let spans: Vec<SpanData> = one
        .iter()
        .cycle()
        .take(600)
        .map(|s| SpanData {
            instrumentation_scope: gateway.clone(),
            ..s.clone()
        })
        .collect();
    let ours = request(&resource, &spans);
    let decoded = ExportTraceServiceRequest::decode(&ours[..]).unwrap();
    let expected = reference(&resource, spans);
    assert_eq!(decoded, expected);
    assert!(ours.len() > 100_000, "{}", ours.len());
}

#[test]
fn one_scope_is_written_byte_for_byte_whatever_the_span_sizes() {
    // The gateway's case: every span of one scope, its `ScopeSpans` opened ahead of
    // the spans; spans under 128 bytes, past 16 KiB, and batches of every length.
    let (resource, all) = batch();
    let gateway = all[0].instrumentation_scope.clone();
    let mut tiny = span_data("p", &gateway);
    tiny.attributes.clear();
    let mut huge = span_data("answer", &gateway);
    huge.attributes
        .push(KeyValue::new("gen_ai.output", "x".repeat(20_000)));
    let mut ordinary = all[1].clone();
    ordinary.instrumentation_scope = gateway.clone();
    let kinds = [tiny, ordinary, huge];
    for n in [1, 2, 3, 40, 300] {
        let spans: Vec<SpanData> = kinds.iter().cycle().take(n).cloned().collect();
        let ours = request(&resource, &spans);
        let expected = reference(&resource, spans).encode_to_vec();
        assert_eq!(ours[..], expected[..], "{n} spans");
    }
    // An empty resource too.
    let empty = Resource::builder_empty().build();
    let spans = kinds.to_vec();
    let ours = request(&empty, &spans);
    assert_eq!(ours[..], reference(&empty, spans).encode_to_vec()[..]);
}

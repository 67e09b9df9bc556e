//! OTLP/HTTP with protobuf, written straight from the spans as they end: each span encoded
//! into the `ExportTraceServiceRequest` it goes in ([`Batch`]), which is then POSTed
//! ([`Sender`]).
//!
//! The SDK's own HTTP exporter first converts every span into the generated protobuf
//! structs (an owned string per attribute key and value, a map to group spans by scope),
//! then prost measures each nested message again at every level it is nested in. For the
//! gateway's spans that cost more CPU than the answer's own work allows for tracing (about
//! 10,000 instructions per span; `benches/trace_cost.rs`); encoding the same fields in
//! place costs a small fraction of it. The bytes decode to the same message the SDK's
//! conversion builds (tested below against `opentelemetry-proto`'s types).
//!
//! Field numbers are those of `opentelemetry/proto/trace/v1/trace.proto`,
//! `common/v1/common.proto` and `resource/v1/resource.proto` (v1.x).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{Event, Link, SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;
use prost::encoding::{encode_varint, WireType};

/// Appends a varint: one byte for most (keys, short lengths), prost's loop for the rest.
#[inline]
fn varint(buf: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        buf.push(value as u8);
    } else {
        encode_varint(value, buf);
    }
}

/// How many bytes `value` takes as a varint.
fn varint_len(value: u64) -> usize {
    prost::encoding::encoded_len_varint(value)
}

/// Appends a field's key (its number and wire type).
#[inline]
fn key(buf: &mut Vec<u8>, field: u32, wire: WireType) {
    varint(buf, u64::from(field << 3 | wire as u32));
}

/// A length-delimited field whose contents `body` writes: its length is known only after,
/// so one byte is kept for it and the contents moved when the length needs more.
fn nested(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    nested_in(buf, field, 1, body);
}

/// [`nested`] with `room` bytes kept for the length (a span's is two: most spans are
/// 128 bytes to 16 KiB); the contents move only when the length needs more or fewer.
fn nested_in(buf: &mut Vec<u8>, field: u32, room: usize, body: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, WireType::LengthDelimited);
    let at = buf.len();
    // One or two bytes: pushed (a `resize` calls memset).
    for _ in 0..room {
        buf.push(0);
    }
    body(buf);
    let end = buf.len();
    let len = end - at - room;
    let need = varint_len(len as u64);
    if need != room {
        // The contents moved along (or back) to fit the length's varint.
        if need > room {
            buf.resize(end + need - room, 0);
        }
        buf.copy_within(at + room..end, at + need);
        buf.truncate(end + need - room);
    }
    put_varint(&mut buf[at..at + need], len as u64);
}

/// Writes `value`'s varint into `out`, exactly its length.
fn put_varint(out: &mut [u8], mut value: u64) {
    let last = out.len() - 1;
    for byte in &mut out[..last] {
        *byte = (value as u8) | 0x80;
        value >>= 7;
    }
    out[last] = value as u8;
}

/// A length-delimited field, left out when empty (proto3's default).
fn bytes(buf: &mut Vec<u8>, field: u32, value: &[u8]) {
    if !value.is_empty() {
        bytes_always(buf, field, value);
    }
}

fn string(buf: &mut Vec<u8>, field: u32, value: &str) {
    bytes(buf, field, value.as_bytes());
}

fn uint(buf: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(buf, field, WireType::Varint);
        varint(buf, value);
    }
}

fn fixed64(buf: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(buf, field, WireType::SixtyFourBit);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

fn fixed32(buf: &mut Vec<u8>, field: u32, value: u32) {
    if value != 0 {
        key(buf, field, WireType::ThirtyTwoBit);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64
}

/// The length of an `AnyValue` holding `value`, when it is a scalar (an array's is
/// known only by writing it).
fn any_value_len(value: &Value) -> Option<usize> {
    Some(match value {
        Value::String(s) => {
            let len = s.as_str().len();
            1 + varint_len(len as u64) + len
        }
        Value::Bool(_) => 2,
        Value::I64(i) => 1 + varint_len(*i as u64),
        Value::F64(_) => 9,
        _ => return None,
    })
}

/// An `AnyValue`'s one field (a oneof: written even when it holds its type's default).
fn any_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => {
            key(buf, 1, WireType::LengthDelimited);
            varint(buf, s.as_str().len() as u64);
            buf.extend_from_slice(s.as_str().as_bytes());
        }
        Value::Bool(b) => {
            key(buf, 2, WireType::Varint);
            buf.push(u8::from(*b));
        }
        Value::I64(i) => {
            key(buf, 3, WireType::Varint);
            varint(buf, *i as u64);
        }
        Value::F64(f) => {
            key(buf, 4, WireType::SixtyFourBit);
            buf.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Array(array) => nested(buf, 5, |buf| array_values(buf, array)),
        // A kind of value newer than this encoder: its text.
        other => {
            let text = other.to_string();
            key(buf, 1, WireType::LengthDelimited);
            varint(buf, text.len() as u64);
            buf.extend_from_slice(text.as_bytes());
        }
    }
}

/// An `ArrayValue`'s values, each an `AnyValue` (field 1).
fn array_values(buf: &mut Vec<u8>, array: &Array) {
    fn each<T: Clone + Into<Value>>(buf: &mut Vec<u8>, values: &[T]) {
        for v in values {
            nested(buf, 1, |buf| any_value(buf, &v.clone().into()));
        }
    }
    match array {
        Array::Bool(v) => each(buf, v),
        Array::I64(v) => each(buf, v),
        Array::F64(v) => each(buf, v),
        Array::String(v) => each(buf, v),
        _ => {}
    }
}

/// Repeated `KeyValue`s (`key` 1, `value` 2) as field `field`.
fn attributes<'a>(
    buf: &mut Vec<u8>,
    field: u32,
    attributes: impl IntoIterator<Item = (&'a str, &'a Value)>,
) {
    for (k, v) in attributes {
        if short_key_value(buf, field, k, v) {
            continue;
        }
        let Some(value) = any_value_len(v) else {
            nested(buf, field, |buf| {
                string(buf, 1, k);
                nested(buf, 2, |buf| any_value(buf, v));
            });
            continue;
        };
        // A scalar's lengths are known before writing it: nothing to move.
        let key_field = if k.is_empty() {
            0
        } else {
            1 + varint_len(k.len() as u64) + k.len()
        };
        let len = key_field + 1 + varint_len(value as u64) + value;
        key(buf, field, WireType::LengthDelimited);
        varint(buf, len as u64);
        string(buf, 1, k);
        key(buf, 2, WireType::LengthDelimited);
        varint(buf, value as u64);
        any_value(buf, v);
    }
}

/// Writes a scalar `KeyValue` whose every length takes one byte (under 128 bytes in all:
/// most attributes), and says whether it did: keys and lengths written four bytes at a
/// time, each a copy of known size, where pushing them one by one checked the buffer's
/// room for every byte.
fn short_key_value(buf: &mut Vec<u8>, field: u32, k: &str, v: &Value) -> bool {
    const LD: u8 = WireType::LengthDelimited as u8;
    const VARINT: u8 = WireType::Varint as u8;
    const FIXED64: u8 = WireType::SixtyFourBit as u8;
    if k.is_empty() || field >= 16 {
        return false;
    }
    let tag = (field as u8) << 3 | LD;
    // The `KeyValue`'s length: its key's field (2 + key), its value's (2 + `AnyValue`).
    let short = |any_value: usize| {
        let len = 2 + k.len() + 2 + any_value;
        (len < 0x80).then_some(len as u8)
    };
    let head = |buf: &mut Vec<u8>, len: u8| {
        buf.extend_from_slice(&[tag, len, 1 << 3 | LD, k.len() as u8]);
        buf.extend_from_slice(k.as_bytes());
    };
    match v {
        Value::String(text) => {
            let text = text.as_str().as_bytes();
            let Some(len) = short(2 + text.len()) else {
                return false;
            };
            head(buf, len);
            let any = 2 + text.len() as u8;
            buf.extend_from_slice(&[2 << 3 | LD, any, 1 << 3 | LD, text.len() as u8]);
            buf.extend_from_slice(text);
        }
        Value::Bool(b) => {
            let Some(len) = short(2) else { return false };
            head(buf, len);
            buf.extend_from_slice(&[2 << 3 | LD, 2, 2 << 3 | VARINT, u8::from(*b)]);
        }
        Value::I64(i) => {
            let any = 1 + varint_len(*i as u64);
            let Some(len) = short(any) else { return false };
            head(buf, len);
            buf.extend_from_slice(&[2 << 3 | LD, any as u8, 3 << 3 | VARINT]);
            varint(buf, *i as u64);
        }
        Value::F64(f) => {
            let Some(len) = short(9) else { return false };
            head(buf, len);
            buf.extend_from_slice(&[2 << 3 | LD, 9, 4 << 3 | FIXED64]);
            buf.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        _ => return false,
    }
    true
}

fn key_values(buf: &mut Vec<u8>, field: u32, kvs: &[KeyValue]) {
    attributes(
        buf,
        field,
        kvs.iter().map(|kv| (kv.key.as_str(), &kv.value)),
    );
}

/// OTLP's span flags: the W3C trace flags, and whether the parent is known to be remote.
fn flags(trace_flags: u8, remote: bool) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    u32::from(trace_flags) | HAS_IS_REMOTE | if remote { IS_REMOTE } else { 0 }
}

/// What encoding a span reads: the SDK's `SpanData` (gRPC's processor hands the queue
/// none, but tests and other processors do), or the recorder's own span where it ends,
/// without first moving it into a `SpanData`.
pub struct Ended<'a> {
    pub span_context: &'a SpanContext,
    pub parent_span_id: SpanId,
    pub parent_span_is_remote: bool,
    pub span_kind: &'a SpanKind,
    pub name: &'a str,
    pub start_time: SystemTime,
    pub end_time: SystemTime,
    pub attributes: &'a [KeyValue],
    pub dropped_attributes_count: u32,
    pub events: &'a [Event],
    pub dropped_events: u32,
    pub links: &'a [Link],
    pub dropped_links: u32,
    pub status: &'a Status,
    pub scope: &'a InstrumentationScope,
}

impl<'a> From<&'a SpanData> for Ended<'a> {
    fn from(span: &'a SpanData) -> Self {
        Self {
            span_context: &span.span_context,
            parent_span_id: span.parent_span_id,
            parent_span_is_remote: span.parent_span_is_remote,
            span_kind: &span.span_kind,
            name: &span.name,
            start_time: span.start_time,
            end_time: span.end_time,
            attributes: &span.attributes,
            dropped_attributes_count: span.dropped_attributes_count,
            events: &span.events.events,
            dropped_events: span.events.dropped_count,
            links: &span.links.links,
            dropped_links: span.links.dropped_count,
            status: &span.status,
            scope: &span.instrumentation_scope,
        }
    }
}

fn span(buf: &mut Vec<u8>, span: &Ended<'_>) {
    let context = span.span_context;
    // The two ids (never empty in a recorded span), keys and lengths, in one copy.
    let mut ids = [0u8; 28];
    ids[..2].copy_from_slice(&[1 << 3 | WireType::LengthDelimited as u8, 16]);
    ids[2..18].copy_from_slice(&context.trace_id().to_bytes());
    ids[18..20].copy_from_slice(&[2 << 3 | WireType::LengthDelimited as u8, 8]);
    ids[20..].copy_from_slice(&context.span_id().to_bytes());
    buf.extend_from_slice(&ids);
    // Most spans have no trace state: no header string made for them.
    if context.trace_state() != &opentelemetry::trace::TraceState::NONE {
        string(buf, 3, &context.trace_state().header());
    }
    if span.parent_span_id != SpanId::INVALID {
        bytes(buf, 4, &span.parent_span_id.to_bytes());
    }
    string(buf, 5, span.name);
    let kind = match *span.span_kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    };
    uint(buf, 6, kind);
    fixed64(buf, 7, nanos(span.start_time));
    fixed64(buf, 8, nanos(span.end_time));
    key_values(buf, 9, span.attributes);
    uint(buf, 10, u64::from(span.dropped_attributes_count));
    for event in span.events {
        nested(buf, 11, |buf| {
            fixed64(buf, 1, nanos(event.timestamp));
            string(buf, 2, &event.name);
            key_values(buf, 3, &event.attributes);
            uint(buf, 4, u64::from(event.dropped_attributes_count));
        });
    }
    uint(buf, 12, u64::from(span.dropped_events));
    for link in span.links {
        nested(buf, 13, |buf| {
            let context = &link.span_context;
            bytes(buf, 1, &context.trace_id().to_bytes());
            bytes(buf, 2, &context.span_id().to_bytes());
            string(buf, 3, &context.trace_state().header());
            key_values(buf, 4, &link.attributes);
            uint(buf, 5, u64::from(link.dropped_attributes_count));
            fixed32(
                buf,
                6,
                flags(context.trace_flags().to_u8(), context.is_remote()),
            );
        });
    }
    uint(buf, 14, u64::from(span.dropped_links));
    // The SDK's conversion always sends a status, `Unset` included.
    nested(buf, 15, |buf| match span.status {
        Status::Error { description } => {
            string(buf, 2, description);
            uint(buf, 3, 2);
        }
        Status::Ok => uint(buf, 3, 1),
        Status::Unset => {}
    });
    fixed32(
        buf,
        16,
        flags(context.trace_flags().to_u8(), span.parent_span_is_remote),
    );
}

fn scope(buf: &mut Vec<u8>, scope: &InstrumentationScope) {
    string(buf, 1, scope.name());
    string(buf, 2, scope.version().unwrap_or_default());
    attributes(
        buf,
        3,
        scope.attributes().map(|kv| (kv.key.as_str(), &kv.value)),
    );
}

/// Whether two spans' scopes are the same: by where their texts are first (the spans of
/// one tracer hold clones of its scope, whose texts are usually static), then by value.
fn same_scope(a: &InstrumentationScope, b: &InstrumentationScope) -> bool {
    let at = |text: Option<&str>| text.map(|t| t as *const str);
    let shared = std::ptr::eq(a.name(), b.name())
        && at(a.version()) == at(b.version())
        && at(a.schema_url()) == at(b.schema_url())
        && a.attributes().next().is_none()
        && b.attributes().next().is_none();
    shared || a == b
}

/// A `Resource` message's contents, encoded once for every export.
pub fn resource(resource: &Resource) -> Vec<u8> {
    let mut buf = Vec::new();
    attributes(&mut buf, 1, resource.iter().map(|(k, v)| (k.as_str(), v)));
    buf
}

/// One scope's spans, encoded one by one as they end, into the request they will be sent
/// in: an `ExportTraceServiceRequest` with one `ResourceSpans` and one `ScopeSpans`.
///
/// The spans are written after room kept for what goes before them (the request's, the
/// resource's and the scope's keys and lengths, the resource and the scope), which
/// [`Batch::finish`] writes into that room once the lengths are known: the bytes are never
/// moved along, however large the batch.
#[derive(Debug)]
pub struct Batch {
    scope: InstrumentationScope,
    /// The scope's field (`InstrumentationScope`, field 1 of `ScopeSpans`), written once.
    scope_field: Vec<u8>,
    room: usize,
    buf: Vec<u8>,
    spans: usize,
}

impl Batch {
    /// An empty batch of `scope`'s spans, for a resource of `resource_len` encoded bytes,
    /// with room for `expected` bytes of spans (the last batch's: the buffer seldom grows,
    /// and growing copies it).
    pub fn new(scope: &InstrumentationScope, resource_len: usize, expected: usize) -> Self {
        let mut scope_field = Vec::new();
        nested(&mut scope_field, 1, |buf| self::scope(buf, scope));
        // Three keys and lengths (at most 1 + 5 bytes each), the resource, the scope.
        let room = 3 * 6 + 6 + resource_len + scope_field.len();
        let mut buf = Vec::with_capacity(room + expected.max(4096));
        buf.resize(room, 0);
        Self {
            scope: scope.clone(),
            scope_field,
            room,
            buf,
            spans: 0,
        }
    }

    /// Whether `span` belongs in this batch (its scope is this batch's).
    pub fn takes(&self, span: &Ended<'_>) -> bool {
        same_scope(&self.scope, span.scope)
    }

    /// Appends `span` (of this batch's scope).
    pub fn push(&mut self, span: &Ended<'_>) {
        debug_assert!(self.takes(span));
        nested_in(&mut self.buf, 2, 2, |buf| self::span(buf, span));
        self.spans += 1;
    }

    /// How many spans the batch holds.
    pub fn spans(&self) -> usize {
        self.spans
    }

    /// How many bytes the batch holds.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// How many bytes the batch's buffer has room for.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The request, from `resource` (as [`resource`] encoded it, `resource_len` bytes at
    /// [`Batch::new`]) with its schema URL.
    pub fn finish(self, resource: &[u8], schema_url: &str) -> bytes::Bytes {
        let Self {
            scope,
            scope_field,
            room,
            mut buf,
            ..
        } = self;
        string(&mut buf, 3, scope.schema_url().unwrap_or_default());
        let scope_spans = scope_field.len() + buf.len() - room;
        string(&mut buf, 3, schema_url);
        // What goes before the spans, now that every length is known.
        let resource_field = 1 + varint_len(resource.len() as u64) + resource.len();
        let ahead = 1 + varint_len(scope_spans as u64) + scope_field.len();
        let resource_spans = resource_field + ahead + (buf.len() - room);
        let mut head = Vec::with_capacity(room);
        key(&mut head, 1, WireType::LengthDelimited);
        varint(&mut head, resource_spans as u64);
        bytes_always(&mut head, 1, resource);
        key(&mut head, 2, WireType::LengthDelimited);
        varint(&mut head, scope_spans as u64);
        head.extend_from_slice(&scope_field);
        if head.len() > room {
            // A resource larger than the one the batch was made for (set after its first
            // span): the spans move once.
            head.extend_from_slice(&buf[room..]);
            return head.into();
        }
        let start = room - head.len();
        buf[start..room].copy_from_slice(&head);
        bytes::Bytes::from(buf).slice(start..)
    }
}

/// A length-delimited field written even when empty (the resource is always sent).
fn bytes_always(buf: &mut Vec<u8>, field: u32, value: &[u8]) {
    key(buf, field, WireType::LengthDelimited);
    varint(buf, value.len() as u64);
    buf.extend_from_slice(value);
}

/// The headers sent with every export: `OTEL_EXPORTER_OTLP_HEADERS`, then
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (both `key=value,key=value`), then the configured
/// `telemetry.otlp_headers`, each overriding the one before; values percent-decoded, as
/// the OpenTelemetry exporters do (`Basic%20…`), and marked sensitive (never shown).
pub fn headers(
    general: Option<&str>,
    traces: Option<&str>,
    configured: &std::collections::HashMap<String, String>,
) -> anyhow::Result<reqwest::header::HeaderMap> {
    use reqwest::header::{HeaderName, HeaderValue};
    let from_env = |list: Option<&str>| -> Vec<(String, String)> {
        list.unwrap_or_default()
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .filter(|(k, _)| !k.is_empty())
            .collect()
    };
    let mut map = reqwest::header::HeaderMap::new();
    let all = from_env(general)
        .into_iter()
        .chain(from_env(traces))
        .chain(configured.iter().map(|(k, v)| (k.clone(), v.clone())));
    for (k, v) in all {
        let decoded = percent_encoding::percent_decode_str(&v)
            .decode_utf8()
            .map_or_else(|_| v.clone(), |d| d.into_owned());
        let mut value = HeaderValue::from_str(&decoded)
            .map_err(|_| anyhow::anyhow!("traces: the value of header {k:?} is not valid"))?;
        value.set_sensitive(true);
        map.insert(HeaderName::from_bytes(k.as_bytes())?, value);
    }
    Ok(map)
}

/// Tries of one export: the first and up to three more, within the export's timeout.
const TRIES: u32 = 4;

/// What sends OTLP/HTTP requests: each POSTed as protobuf to the traces URL, with the
/// configured headers. A collector that asks the sender to slow down (429, 503, with or
/// without `retry-after`), a gateway in front of it that failed (502, 504) and a
/// connection that failed are tried again, after 100 ms, 200 ms, 400 ms (or what
/// `retry-after` asks, up to 5 s), as long as the export's timeout allows; any other
/// answer is final.
#[derive(Debug)]
pub struct Sender {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    timeout: Duration,
}

impl Sender {
    pub fn new(
        client: reqwest::Client,
        endpoint: reqwest::Url,
        headers: reqwest::header::HeaderMap,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            endpoint,
            headers,
            timeout,
        }
    }

    /// The longest one request is tried for.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one request (a [`Batch`]'s), trying again as the collector asks.
    pub async fn deliver(&self, body: bytes::Bytes) -> OTelSdkResult {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut wait = Duration::from_millis(100);
        for tried in 1..=TRIES {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let sent = send(
                &self.client,
                &self.endpoint,
                &self.headers,
                body.clone(),
                left,
            );
            let (kind, status) = match sent.await {
                Try::Done => return Ok(()),
                Try::Failed(kind, status) => (kind, status),
                Try::Again(kind, status, after) => {
                    let pause = after.unwrap_or(wait);
                    let next = tokio::time::Instant::now() + pause;
                    if tried == TRIES || next >= deadline {
                        (kind, status)
                    } else {
                        tokio::time::sleep_until(next).await;
                        wait *= 2;
                        continue;
                    }
                }
            };
            super::export_failed(kind, status);
            return Err(OTelSdkError::InternalFailure(match status {
                Some(code) => format!("OTLP export: status {code}"),
                None => format!("OTLP export: {kind}"),
            }));
        }
        Err(OTelSdkError::InternalFailure("OTLP export: no try".into()))
    }
}

/// How one try of an export ended.
enum Try {
    Done,
    /// Worth another try, after at least this long (the collector's `retry-after`).
    Again(&'static str, Option<u16>, Option<Duration>),
    Failed(&'static str, Option<u16>),
}

/// Most of a collector's answer read (the rest is not: only its status is used).
const MAX_ANSWER_BYTES: usize = 64 << 10;

async fn send(
    client: &reqwest::Client,
    endpoint: &reqwest::Url,
    headers: &reqwest::header::HeaderMap,
    body: bytes::Bytes,
    timeout: Duration,
) -> Try {
    let sent = client
        .post(endpoint.clone())
        .headers(headers.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
        .timeout(timeout)
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(e) if e.is_timeout() => return Try::Again("timeout", None, None),
        Err(e) if e.is_connect() => return Try::Again("connect", None, None),
        Err(_) => return Try::Again("request", None, None),
    };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|secs| Duration::from_secs(secs.min(5)));
    // Read out a small answer so the connection can be used again; a larger one is left
    // (its connection closed): only the status is used, and a collector's answer of any
    // size must not be held.
    let mut response = response;
    let mut read = 0;
    while let Ok(Some(piece)) = response.chunk().await {
        read += piece.len();
        if read > MAX_ANSWER_BYTES {
            break;
        }
    }
    match status.as_u16() {
        200..=299 => Try::Done,
        code @ (429 | 502 | 503 | 504) => Try::Again("status", Some(code), retry_after),
        code => Try::Failed("status", Some(code)),
    }
}

#[cfg(test)]
pub(super) mod tests;

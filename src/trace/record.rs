//! The spans themselves: started, filled in and ended here, each ended one handed to its
//! sink: over OTLP/HTTP the gateway's queue, which encodes it as the recorder holds it
//! ([`super::otlp::Ended`]); over gRPC the SDK's batch processor, as the SDK's `SpanData`.
//! Only spans the sampler samples are recorded (what the SDK's processors export), so a
//! span's sampled flag says whether it records.
//!
//! The SDK's tracer did the same through a span builder, a copy of the tracer in every
//! span, limits looked up per call and a second conversion of the span at its end: about
//! 400 instructions a span more than this (`benches/trace_cost.rs`). What it decided is
//! kept as it was: the sampler, the id generator and the limits are the SDK's own
//! defaults (`Config::default()`, which reads `OTEL_TRACES_SAMPLER`, `OTEL_SPAN_*_LIMIT`
//! and the rest), and a span's context (trace id, flags, trace state) is made as the
//! SDK's tracer made it. Processors are not told when a span starts (neither the queue
//! nor the batch processor looks).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    Config, SamplingDecision, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use super::otlp::Ended;

/// Where ended spans go.
#[derive(Debug)]
pub(super) enum Sink {
    /// The gateway's queue (OTLP/HTTP): given each span where it ends, read in place.
    Queue(super::queue::Queue),
    /// A processor of the SDK's (OTLP/gRPC's batch processor), given the SDK's `SpanData`.
    Processor(Box<dyn SpanProcessor>),
}

impl Sink {
    fn processor(&self) -> &dyn SpanProcessor {
        match self {
            Self::Queue(queue) => queue,
            Self::Processor(processor) => processor.as_ref(),
        }
    }
}

/// Makes spans and hands the ended ones to its sink.
#[derive(Debug)]
pub(super) struct Recorder {
    sink: Sink,
    /// The sampler, the ids and the limits, as the SDK's tracer would have them.
    config: Config,
    scope: InstrumentationScope,
    stopped: AtomicBool,
}

impl Recorder {
    /// A recorder whose spans go to `sink`, sent with `resource`.
    pub(super) fn new(mut sink: Sink, resource: &Resource) -> Self {
        match &mut sink {
            Sink::Queue(queue) => queue.set_resource(resource),
            Sink::Processor(processor) => processor.set_resource(resource),
        }
        Self {
            sink,
            config: Config::default(),
            scope: InstrumentationScope::builder("assist-gateway").build(),
            stopped: AtomicBool::new(false),
        }
    }

    /// A span named `name` under `parent` (its trace, or a new one), as `parent`'s context
    /// with the span in it. Not recorded when the sampler drops it (a client's
    /// `traceparent` that says so), after [`Recorder::stop`], or where the context
    /// suppresses telemetry.
    pub(super) fn start(
        &'static self,
        parent: &Context,
        name: Cow<'static, str>,
        kind: SpanKind,
        mut attributes: Vec<KeyValue>,
    ) -> Context {
        if parent.is_telemetry_suppressed() || self.stopped.load(Ordering::Relaxed) {
            return parent.with_span(Recording {
                context: SpanContext::empty_context(),
                data: None,
                recorder: self,
            });
        }
        let parent_span = parent.span();
        // A parent whose context is not valid is no parent (the SDK's rule).
        let psc = Some(parent_span.span_context())
            .filter(|sc| sc.is_valid())
            .unwrap_or(&SpanContext::NONE);
        let ids = &self.config.id_generator;
        let span_id = ids.new_span_id();
        let trace_id = if psc.is_valid() {
            psc.trace_id()
        } else {
            ids.new_trace_id()
        };
        let sampling = self.config.sampler.should_sample(
            Some(parent),
            trace_id,
            &name,
            &kind,
            &attributes,
            &[],
        );
        // Only sampled spans are recorded: the SDK's processors export only those (a
        // span a sampler would record unsampled is never sent), and a span's sampled
        // flag then says whether it records (`trace::Span::is_recording`).
        let recorded = sampling.decision == SamplingDecision::RecordAndSample;
        let flags = match sampling.decision {
            SamplingDecision::Drop => TraceFlags::default(),
            _ => psc.trace_flags().with_sampled(recorded),
        };
        let context = SpanContext::new(trace_id, span_id, flags, false, sampling.trace_state);
        let data = recorded.then(|| {
            // Most samplers add none (the default's never do): no empty extend.
            if !sampling.attributes.is_empty() {
                attributes.extend(sampling.attributes);
            }
            let dropped_attributes = cut(
                &mut attributes,
                self.config.span_limits.max_attributes_per_span,
            );
            let start = opentelemetry::time::now();
            Data {
                parent_span_id: psc.span_id(),
                parent_is_remote: psc.is_valid() && psc.is_remote(),
                kind,
                name,
                start,
                attributes,
                dropped_attributes,
                events: Vec::new(),
                dropped_events: 0,
                links: Vec::new(),
                dropped_links: 0,
                status: Status::Unset,
            }
        });
        parent.with_span(Recording {
            context,
            data,
            recorder: self,
        })
    }

    /// Ends recording: spans ending later are not sent, and the processor sends what it
    /// holds within `timeout` (blocks).
    pub(super) fn stop(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.stopped.store(true, Ordering::Relaxed);
        self.sink.processor().shutdown_with_timeout(timeout)
    }
}

/// Cuts `attributes` to `limit`; how many were cut (the SDK's rule for a span's, an
/// event's and a link's).
fn cut(attributes: &mut Vec<KeyValue>, limit: u32) -> u32 {
    let limit = limit as usize;
    let dropped = attributes.len().saturating_sub(limit) as u32;
    attributes.truncate(limit);
    dropped
}

/// What a recorded span holds until it ends.
#[derive(Debug)]
struct Data {
    parent_span_id: SpanId,
    parent_is_remote: bool,
    kind: SpanKind,
    name: Cow<'static, str>,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    dropped_attributes: u32,
    events: Vec<Event>,
    dropped_events: u32,
    links: Vec<Link>,
    dropped_links: u32,
    status: Status,
}

/// One span; sent to the processor when it ends (at `end`, or when dropped).
#[derive(Debug)]
pub(super) struct Recording {
    context: SpanContext,
    /// `None` when not recorded, or once ended.
    data: Option<Data>,
    recorder: &'static Recorder,
}

impl Recording {
    fn export(&mut self, end: Option<SystemTime>) {
        let Some(data) = self.data.take() else {
            return;
        };
        if self.recorder.stopped.load(Ordering::Relaxed) {
            return;
        }
        let end_time = end.unwrap_or_else(opentelemetry::time::now);
        let processor = match &self.recorder.sink {
            Sink::Queue(queue) => {
                queue.end(&Ended {
                    span_context: &self.context,
                    parent_span_id: data.parent_span_id,
                    parent_span_is_remote: data.parent_is_remote,
                    span_kind: &data.kind,
                    name: &data.name,
                    start_time: data.start,
                    end_time,
                    attributes: &data.attributes,
                    dropped_attributes_count: data.dropped_attributes,
                    events: &data.events,
                    dropped_events: data.dropped_events,
                    links: &data.links,
                    dropped_links: data.dropped_links,
                    status: &data.status,
                    scope: &self.recorder.scope,
                });
                return;
            }
            Sink::Processor(processor) => processor,
        };
        let mut events = SpanEvents::default();
        events.events = data.events;
        events.dropped_count = data.dropped_events;
        let mut links = SpanLinks::default();
        links.links = data.links;
        links.dropped_count = data.dropped_links;
        processor.on_end(SpanData {
            span_context: self.context.clone(),
            parent_span_id: data.parent_span_id,
            parent_span_is_remote: data.parent_is_remote,
            span_kind: data.kind,
            name: data.name,
            start_time: data.start,
            end_time,
            attributes: data.attributes,
            dropped_attributes_count: data.dropped_attributes,
            events,
            links,
            status: data.status,
            instrumentation_scope: self.recorder.scope.clone(),
        });
    }
}

impl opentelemetry::trace::Span for Recording {
    fn add_event_with_timestamp<T>(
        &mut self,
        name: T,
        timestamp: SystemTime,
        mut attributes: Vec<KeyValue>,
    ) where
        T: Into<Cow<'static, str>>,
    {
        let limits = self.recorder.config.span_limits;
        let Some(data) = &mut self.data else {
            return;
        };
        if data.events.len() >= limits.max_events_per_span as usize {
            data.dropped_events += 1;
            return;
        }
        let dropped = cut(&mut attributes, limits.max_attributes_per_event);
        data.events
            .push(Event::new(name, timestamp, attributes, dropped));
    }

    fn span_context(&self) -> &SpanContext {
        &self.context
    }

    fn is_recording(&self) -> bool {
        self.data.is_some()
    }

    fn set_attribute(&mut self, attribute: KeyValue) {
        let limit = self.recorder.config.span_limits.max_attributes_per_span as usize;
        if let Some(data) = &mut self.data {
            if data.attributes.len() < limit {
                data.attributes.push(attribute);
            } else {
                data.dropped_attributes += 1;
            }
        }
    }

    fn set_status(&mut self, status: Status) {
        if let Some(data) = &mut self.data {
            // Error over Unset, Ok over both (the API's order).
            if status > data.status {
                data.status = status;
            }
        }
    }

    fn update_name<T>(&mut self, new_name: T)
    where
        T: Into<Cow<'static, str>>,
    {
        if let Some(data) = &mut self.data {
            data.name = new_name.into();
        }
    }

    fn add_link(&mut self, span_context: SpanContext, mut attributes: Vec<KeyValue>) {
        let limits = self.recorder.config.span_limits;
        let Some(data) = &mut self.data else {
            return;
        };
        if data.links.len() >= limits.max_links_per_span as usize {
            data.dropped_links += 1;
            return;
        }
        let dropped = cut(&mut attributes, limits.max_attributes_per_link);
        data.links
            .push(Link::new(span_context, attributes, dropped));
    }

    fn end_with_timestamp(&mut self, timestamp: SystemTime) {
        self.export(Some(timestamp));
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.export(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceId, TraceState};
    use std::sync::{Arc, Mutex};

    /// A processor that keeps what it is given.
    #[derive(Debug, Default, Clone)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Kept {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &Context) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().unwrap().push(span);
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: std::time::Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    fn recorder() -> (&'static Recorder, Kept) {
        let kept = Kept::default();
        let resource = Resource::builder_empty().build();
        let recorder = Box::leak(Box::new(Recorder::new(
            Sink::Processor(Box::new(kept.clone())),
            &resource,
        )));
        (recorder, kept)
    }

    fn remote(flags: TraceFlags) -> Context {
        Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736),
            SpanId::from(0x00f0_67aa_0ba9_02b7),
            flags,
            true,
            TraceState::from_key_value([("vendor", "x")]).unwrap(),
        ))
    }

    /// A request's span under `parent` and its upstream call's, which has an attribute, a
    /// `first token` event and a failed status; neither ended.
    fn request_and_chat(recorder: &'static Recorder, parent: &Context) -> (Context, Context) {
        let root = recorder.start(
            parent,
            "POST /v1/chat/completions".into(),
            SpanKind::Server,
            vec![KeyValue::new("assist.dialect", "openai")],
        );
        let child = recorder.start(&root, "chat m".into(), SpanKind::Client, Vec::new());
        child
            .span()
            .set_attribute(KeyValue::new("gen_ai.usage.output_tokens", 20));
        child.span().add_event("first token", Vec::new());
        child.span().set_status(Status::error("timeout"));
        (root, child)
    }

    #[test]
    fn spans_reach_the_processor_as_the_sdk_would_send_them() {
        let (recorder, kept) = recorder();
        let (root, child) = request_and_chat(recorder, &Context::new());
        child.span().set_status(Status::Unset);
        assert!(
            kept.0.lock().unwrap().is_empty(),
            "nothing is sent before its end"
        );
        child.span().end();
        child.span().end();
        drop(child);
        drop(root);
        let spans = kept.0.lock().unwrap();
        assert_eq!(spans.len(), 2, "each span once, when it ends");
        let (child, root) = (&spans[0], &spans[1]);
        assert_eq!(root.name, "POST /v1/chat/completions");
        assert_eq!(root.span_kind, SpanKind::Server);
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        assert!(root.span_context.is_sampled() && root.span_context.trace_id() != TraceId::INVALID);
        assert_eq!(
            root.attributes,
            vec![KeyValue::new("assist.dialect", "openai")]
        );
        assert_eq!(child.span_context.trace_id(), root.span_context.trace_id());
        assert_eq!(child.parent_span_id, root.span_context.span_id());
        assert_ne!(child.span_context.span_id(), root.span_context.span_id());
        assert!(!child.parent_span_is_remote);
        assert_eq!(child.span_kind, SpanKind::Client);
        assert_eq!(child.attributes.len(), 1);
        assert_eq!(child.events.events[0].name, "first token");
        assert_eq!(child.status, Status::error("timeout"));
        assert!(child.start_time <= child.end_time && child.end_time <= root.end_time);
        assert_eq!(child.instrumentation_scope.name(), "assist-gateway");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn spans_reach_the_queue_read_in_place_as_a_processor_gets_them() {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use prost::Message as _;

        let (url, got) = crate::trace::otlp::tests::collector(Vec::new()).await;
        let sender = super::super::otlp::Sender::new(
            reqwest::Client::new(),
            url,
            reqwest::header::HeaderMap::new(),
            std::time::Duration::from_secs(5),
        );
        let queue = super::super::queue::Queue::start(
            sender,
            tokio::runtime::Handle::current(),
            100,
            std::time::Duration::from_secs(3600),
        )
        .unwrap();
        let resource = Resource::builder_empty().build();
        let recorder: &'static Recorder =
            Box::leak(Box::new(Recorder::new(Sink::Queue(queue), &resource)));
        let (root, child) = request_and_chat(recorder, &remote(TraceFlags::SAMPLED));
        let (root_id, child_id) = (
            root.span().span_context().span_id(),
            child.span().span_context().span_id(),
        );
        drop(child);
        drop(root);
        tokio::task::spawn_blocking(move || recorder.stop(std::time::Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap();
        let bodies = got.lock().unwrap().clone();
        assert_eq!(bodies.len(), 1, "one export");
        let request = ExportTraceServiceRequest::decode(&bodies[0][..]).unwrap();
        let scope = &request.resource_spans[0].scope_spans[0];
        assert_eq!(scope.scope.as_ref().unwrap().name, "assist-gateway");
        let [child, root] = &scope.spans[..] else {
            panic!("two spans: {:?}", scope.spans);
        };
        assert_eq!(root.name, "POST /v1/chat/completions");
        assert_eq!(root.kind, 2, "server");
        assert_eq!(root.span_id, root_id.to_bytes());
        assert_eq!(root.parent_span_id, 0x00f0_67aa_0ba9_02b7_u64.to_be_bytes());
        assert_eq!(root.trace_state, "vendor=x");
        assert_eq!(root.flags, 0x301, "sampled, its parent remote");
        assert_eq!(root.attributes[0].key, "assist.dialect");
        assert_eq!(child.name, "chat m");
        assert_eq!(child.kind, 3, "client");
        assert_eq!(child.span_id, child_id.to_bytes());
        assert_eq!(child.parent_span_id, root_id.to_bytes());
        assert_eq!(child.trace_id, root.trace_id);
        assert_eq!(child.flags, 0x101, "sampled, its parent local");
        assert_eq!(child.attributes[0].key, "gen_ai.usage.output_tokens");
        assert_eq!(child.events[0].name, "first token");
        let status = child.status.as_ref().unwrap();
        assert_eq!((status.code, status.message.as_str()), (2, "timeout"));
        assert!(child.start_time_unix_nano <= child.end_time_unix_nano);
        assert!(child.end_time_unix_nano <= root.end_time_unix_nano);
    }

    #[test]
    fn a_client_trace_is_continued_and_its_unsampled_one_not_recorded() {
        let (recorder, kept) = recorder();
        let sampled = recorder.start(
            &remote(TraceFlags::SAMPLED),
            "root".into(),
            SpanKind::Server,
            Vec::new(),
        );
        let context = sampled.span().span_context().clone();
        assert_eq!(
            format!("{:032x}", context.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(context.is_sampled() && !context.is_remote());
        assert_eq!(context.trace_state().header(), "vendor=x");
        drop(sampled);
        {
            let spans = kept.0.lock().unwrap();
            assert_eq!(spans[0].parent_span_id, SpanId::from(0x00f0_67aa_0ba9_02b7));
            assert!(spans[0].parent_span_is_remote);
        }

        // Unsampled: the trace goes on (its ids for the upstream's `traceparent`), not
        // recorded, nothing sent.
        let unsampled = recorder.start(
            &remote(TraceFlags::default()),
            "root".into(),
            SpanKind::Server,
            Vec::new(),
        );
        let span = unsampled.span();
        assert!(!span.is_recording() && !span.span_context().is_sampled());
        assert_eq!(
            span.span_context().trace_id(),
            TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736)
        );
        let child = recorder.start(&unsampled, "chat".into(), SpanKind::Client, Vec::new());
        assert!(!child.span().is_recording());
        drop(child);
        drop(unsampled);
        assert_eq!(kept.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_parent_that_is_not_valid_is_no_parent() {
        let (recorder, kept) = recorder();
        let invalid = Context::new().with_remote_span_context(SpanContext::new(
            TraceId::INVALID,
            SpanId::from(7),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        ));
        drop(recorder.start(&invalid, "root".into(), SpanKind::Server, Vec::new()));
        let spans = kept.0.lock().unwrap();
        assert_eq!(spans[0].parent_span_id, SpanId::INVALID);
        assert!(!spans[0].parent_span_is_remote);
        assert_ne!(spans[0].span_context.trace_id(), TraceId::INVALID);
    }

    #[test]
    fn after_a_stop_nothing_is_sent() {
        let (recorder, kept) = recorder();
        let open = recorder.start(
            &Context::new(),
            "open".into(),
            SpanKind::Internal,
            Vec::new(),
        );
        recorder.stop(std::time::Duration::from_secs(1)).unwrap();
        drop(open);
        let late = recorder.start(
            &Context::new(),
            "late".into(),
            SpanKind::Internal,
            Vec::new(),
        );
        assert!(!late.span().is_recording());
        drop(late);
        assert!(kept.0.lock().unwrap().is_empty());
    }
}

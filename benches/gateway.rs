//! Gateway overhead benchmark: `cargo bench --bench gateway`.
//!
//! Starts the scripted upstream (in this process) and the release `assist-gateway`
//! binary (its own process, so its memory can be read) on 127.0.0.1, then sends the same
//! OpenAI chat requests straight to the upstream and through the gateway, at several
//! concurrencies, and prints latency added by the gateway (p50 / p99), requests per second,
//! and the gateway's resident memory idle and under load.
//!
//! The `brunix` rows run the whole assistant pipeline (rules classifier, reformulator
//! off, BM25 over `examples/knowledge` ingested first). A last run sends streamed
//! assistant turns with editor context and a session id and reads the gateway's own JSON
//! stage logs to report each stage's time before the first token.
//!
//! gRPC beside HTTP, on the same gateway and the same scripted answers: for `brunix`,
//! time to first token and completed streams per second of SSE (`POST
//! /v1/chat/completions`, `stream: true`) against `AskAgentStream`, and whole answers per
//! second of the non-streamed request against `AskAgent`, with the ratio gRPC / HTTP. The
//! two protocols alternate (half the calls of one, all of the other, the other half of
//! the first) so a noisy machine drifts on both alike. SSE goes over HTTP/1.1 keep-alive
//! connections (one per stream in flight); every gRPC client task shares one tonic
//! `Channel`, one HTTP/2 connection multiplexing all the streams. gRPC always has a
//! session (an empty `session_id` is "default"), so both protocols send one per client
//! task; the SSE rows without a session show what that costs.
//!
//! Environment: BENCH_REQUESTS (requests per scenario, default 2000), BENCH_TOKENS
//! (tokens per answer, default 20).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use assist_gateway::grpc::pb::assistance_engine_client::AssistanceEngineClient;
use assist_gateway::grpc::pb::AgentRequest;
use common::{percentile, rss_kib, start_gateway, GatewayOptions, GatewayProcess, RssSampler};
use serde_json::json;
use support::{Reply, ScriptedUpstream, UPSTREAM_MODEL};
use tonic::transport::Channel;

struct Run {
    latencies_us: Vec<u64>,
    /// Time until the first answer token arrived.
    ttft_us: Vec<u64>,
    seconds: f64,
}

impl Run {
    fn percentile(&self, p: f64) -> f64 {
        percentile(&self.latencies_us, p)
    }

    fn ttft(&self, p: f64) -> f64 {
        percentile(&self.ttft_us, p)
    }

    fn rps(&self) -> f64 {
        self.latencies_us.len() as f64 / self.seconds
    }
}

/// Sends `total` requests with `concurrency` workers; every response must be a 200 with
/// the full answer, or the run fails.
/// One request read to the end: microseconds to the first answer token and to the end.
async fn timed_post(client: &reqwest::Client, url: &str, body: &serde_json::Value) -> (u64, u64) {
    let t = Instant::now();
    let mut r = client.post(url).json(body).send().await.expect("request");
    assert_eq!(r.status(), 200);
    let mut text = Vec::new();
    let mut first = None;
    while let Some(chunk) = r.chunk().await.expect("body") {
        text.extend_from_slice(&chunk);
        if first.is_none() && text.windows(4).any(|w| w == b"tok0") {
            first = Some(t.elapsed());
        }
    }
    let first =
        first.unwrap_or_else(|| panic!("no answer in {:.200}", String::from_utf8_lossy(&text)));
    (first.as_micros() as u64, t.elapsed().as_micros() as u64)
}

async fn load(
    client: &reqwest::Client,
    url: &str,
    body: serde_json::Value,
    total: u64,
    concurrency: u64,
) -> Run {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, url, body, next) =
            (client.clone(), url.to_string(), body.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let (mut lat, mut ttft) = (Vec::new(), Vec::new());
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let (first, whole) = timed_post(&client, &url, &body).await;
                ttft.push(first);
                lat.push(whole);
            }
            (lat, ttft)
        }));
    }
    let (mut latencies_us, mut ttft_us) = (Vec::new(), Vec::new());
    for w in workers {
        let (l, t) = w.await.unwrap();
        latencies_us.extend(l);
        ttft_us.extend(t);
    }
    Run {
        latencies_us,
        ttft_us,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Microseconds to the first answer token and to the end of one call, or what went wrong.
type Timed = Result<(u64, u64), String>;

/// Calls of one kind: latencies of the completed ones, the failures, and the wall time.
#[derive(Default)]
struct Calls {
    ttft_us: Vec<u64>,
    latencies_us: Vec<u64>,
    seconds: f64,
    errors: u64,
    first_error: Option<String>,
}

impl Calls {
    fn ttft(&self, p: f64) -> f64 {
        percentile(&self.ttft_us, p)
    }

    fn latency(&self, p: f64) -> f64 {
        percentile(&self.latencies_us, p)
    }

    /// Completed calls per second.
    fn per_second(&self) -> f64 {
        self.latencies_us.len() as f64 / self.seconds
    }

    fn add(&mut self, other: Calls) {
        self.ttft_us.extend(other.ttft_us);
        self.latencies_us.extend(other.latencies_us);
        self.seconds += other.seconds;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }
}

/// `total` calls from `concurrency` client tasks; `call(task)` makes one call.
async fn drive<F, Fut>(total: u64, concurrency: u64, call: Arc<F>) -> Calls
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Timed> + Send + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let (call, next) = (call.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut calls = Calls::default();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                match call(task).await {
                    Ok((first, whole)) => {
                        calls.ttft_us.push(first);
                        calls.latencies_us.push(whole);
                    }
                    Err(e) => {
                        calls.errors += 1;
                        calls.first_error.get_or_insert(e);
                    }
                }
            }
            calls
        }));
    }
    let mut all = Calls::default();
    for t in tasks {
        all.add(t.await.unwrap());
    }
    all.seconds = started.elapsed().as_secs_f64();
    all
}

/// `total` calls of each kind, `a` and `b` alternating: half of `a`, all of `b` in two
/// halves, the other half of `a`; after a warm-up of both.
async fn alternate<FA, FutA, FB, FutB>(
    total: u64,
    concurrency: u64,
    a: Arc<FA>,
    b: Arc<FB>,
) -> (Calls, Calls)
where
    FA: Fn(u64) -> FutA + Send + Sync + 'static,
    FutA: Future<Output = Timed> + Send + 'static,
    FB: Fn(u64) -> FutB + Send + Sync + 'static,
    FutB: Future<Output = Timed> + Send + 'static,
{
    drive(concurrency * 4, concurrency, a.clone()).await;
    drive(concurrency * 4, concurrency, b.clone()).await;
    let half = total / 2;
    let mut ra = drive(half, concurrency, a.clone()).await;
    let mut rb = drive(half, concurrency, b.clone()).await;
    rb.add(drive(total - half, concurrency, b).await);
    ra.add(drive(total - half, concurrency, a).await);
    (ra, rb)
}

/// One OpenAI chat request read to the end; it must be a 200 with the whole answer.
async fn http_call(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
    last_token: &str,
) -> Timed {
    let t = Instant::now();
    let mut r = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let status = r.status();
    let mut text = Vec::new();
    let mut first = None;
    while let Some(chunk) = r.chunk().await.map_err(|e| format!("HTTP body: {e}"))? {
        text.extend_from_slice(&chunk);
        if first.is_none() && text.windows(4).any(|w| w == b"tok0") {
            first = Some(t.elapsed());
        }
    }
    let whole = t.elapsed();
    let text = String::from_utf8_lossy(&text);
    match first {
        Some(first) if status == 200 && text.contains(last_token) => {
            Ok((first.as_micros() as u64, whole.as_micros() as u64))
        }
        _ => Err(format!("HTTP {status}: {:.300}", text)),
    }
}

/// One `AskAgentStream` (`streamed`) or `AskAgent` call read to the end; it must end with
/// a final message, without an `[ENG] Error:`, and hold the whole answer.
async fn grpc_call(
    mut client: AssistanceEngineClient<Channel>,
    request: AgentRequest,
    streamed: bool,
    last_token: &str,
) -> Timed {
    let t = Instant::now();
    let call = if streamed {
        client.ask_agent_stream(request).await
    } else {
        client.ask_agent(request).await
    };
    let mut messages = call.map_err(|s| format!("gRPC status: {s}"))?.into_inner();
    let (mut text, mut first, mut last_final) = (String::new(), None, false);
    while let Some(m) = messages
        .message()
        .await
        .map_err(|s| format!("gRPC status mid-stream: {s}"))?
    {
        text.push_str(&m.text);
        if first.is_none() && text.contains("tok0") {
            first = Some(t.elapsed());
        }
        last_final = m.is_final;
    }
    let whole = t.elapsed();
    match first {
        Some(first) if last_final && text.contains(last_token) && !text.contains("[ENG]") => {
            Ok((first.as_micros() as u64, whole.as_micros() as u64))
        }
        _ => Err(format!(
            "gRPC answer (final message: {last_final}): {:.300}",
            text
        )),
    }
}

/// A ratio, or "-" when either side has nothing.
fn ratio(grpc: f64, http: f64) -> String {
    if grpc.is_finite() && http.is_finite() && http > 0.0 {
        format!("{:.2}", grpc / http)
    } else {
        "-".into()
    }
}

/// gRPC beside HTTP for `brunix`: streamed (TTFT, streams/s) and whole answers (req/s).
async fn grpc_vs_http(
    client: &reqwest::Client,
    gateway: &GatewayProcess,
    total: u64,
    tokens: usize,
) {
    let addr = gateway
        .grpc_addr
        .clone()
        .expect("the gateway logs the gRPC address it listens on (grpc_addr)");
    // One channel: one HTTP/2 connection that every client task's calls share.
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let url = format!("{}/v1/chat/completions", gateway.url);
    let last_token: Arc<str> = format!("tok{}", tokens.saturating_sub(1)).into();
    const QUESTION: &str = "Explain Rust lifetimes briefly.";

    // SSE / non-streamed HTTP; `session` names the client task's session, None = none.
    let http = |stream: bool, session: Option<String>| {
        let (client, url, last) = (client.clone(), url.clone(), last_token.clone());
        Arc::new(move |task: u64| {
            let mut body = json!({"model": "brunix", "stream": stream,
                "messages": [{"role": "user", "content": QUESTION}]});
            if let Some(s) = &session {
                body["session_id"] = json!(format!("{s}-{task}"));
            }
            let (client, url, last) = (client.clone(), url.clone(), last.clone());
            async move { http_call(&client, &url, &body, &last).await }
        })
    };
    let grpc = |streamed: bool, session: String| {
        let (client, last) = (
            AssistanceEngineClient::new(channel.clone()),
            last_token.clone(),
        );
        Arc::new(move |task: u64| {
            let request = AgentRequest {
                query: QUESTION.into(),
                session_id: format!("{session}-{task}"),
                ..Default::default()
            };
            let (client, last) = (client.clone(), last.clone());
            async move { grpc_call(client, request, streamed, &last).await }
        })
    };

    let concurrencies = [1u64, 10, 50];
    let mut streamed = Vec::new();
    let mut whole = Vec::new();
    for conc in concurrencies {
        let (sse, ask_stream) = alternate(
            total,
            conc,
            http(true, Some(format!("sse-{conc}"))),
            grpc(true, format!("grpc-stream-{conc}")),
        )
        .await;
        // The same SSE without a session, as the overhead table's brunix rows send it.
        let plain = drive(total, conc, http(true, None)).await;
        streamed.push((conc, sse, ask_stream, plain));
        let (post, ask) = alternate(
            total,
            conc,
            http(false, Some(format!("http-{conc}"))),
            grpc(false, format!("grpc-whole-{conc}")),
        )
        .await;
        whole.push((conc, post, ask));
    }

    println!();
    println!("gRPC beside HTTP, model brunix: {total} calls per cell, {tokens}-token answers; SSE over HTTP/1.1 keep-alive connections (one per stream in flight), gRPC over one shared tonic Channel (one HTTP/2 connection multiplexing every stream); both send a session_id per client task (gRPC always has a session); the protocols alternate in halves; ratio = gRPC / HTTP");
    println!();
    println!("| streamed | conc | SSE TTFT p50 ms | gRPC TTFT p50 ms | gRPC/SSE | SSE TTFT p99 ms | gRPC TTFT p99 ms | gRPC/SSE | SSE streams/s | gRPC streams/s | gRPC/SSE | SSE without session: TTFT p50 ms, streams/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut failures = Vec::new();
    for (conc, sse, grpc, plain) in &streamed {
        println!(
            "| SSE vs AskAgentStream | {conc} | {:.3} | {:.3} | {} | {:.3} | {:.3} | {} | {:.0} | {:.0} | {} | {:.3}, {:.0} |",
            sse.ttft(0.5), grpc.ttft(0.5), ratio(grpc.ttft(0.5), sse.ttft(0.5)),
            sse.ttft(0.99), grpc.ttft(0.99), ratio(grpc.ttft(0.99), sse.ttft(0.99)),
            sse.per_second(), grpc.per_second(), ratio(grpc.per_second(), sse.per_second()),
            plain.ttft(0.5), plain.per_second(),
        );
        failures.extend([
            ("SSE", conc, sse),
            ("AskAgentStream", conc, grpc),
            ("SSE without session", conc, plain),
        ]);
    }
    println!();
    println!("| whole answer | conc | HTTP p50 ms | gRPC p50 ms | gRPC/HTTP | HTTP p99 ms | gRPC p99 ms | gRPC/HTTP | HTTP req/s | gRPC req/s | gRPC/HTTP |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (conc, post, ask) in &whole {
        println!(
            "| non-streamed POST vs AskAgent | {conc} | {:.3} | {:.3} | {} | {:.3} | {:.3} | {} | {:.0} | {:.0} | {} |",
            post.latency(0.5), ask.latency(0.5), ratio(ask.latency(0.5), post.latency(0.5)),
            post.latency(0.99), ask.latency(0.99), ratio(ask.latency(0.99), post.latency(0.99)),
            post.per_second(), ask.per_second(), ratio(ask.per_second(), post.per_second()),
        );
        failures.extend([("non-streamed POST", conc, post), ("AskAgent", conc, ask)]);
    }
    let failed: Vec<_> = failures.iter().filter(|(_, _, c)| c.errors > 0).collect();
    if !failed.is_empty() {
        println!();
        for (kind, conc, c) in failed {
            println!(
                "FAILED: {kind} at concurrency {conc}: {} of {} calls, first: {}",
                c.errors,
                c.errors + c.latencies_us.len() as u64,
                c.first_error.as_deref().unwrap_or("")
            );
        }
    }
}

/// Streamed assistant turns with editor context and sessions, one at a time; then each
/// stage's time from the gateway's JSON logs.
async fn stages(client: &reqwest::Client, gateway: &GatewayProcess, n: u64) {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let before = std::fs::read_to_string(&gateway.log)
        .unwrap_or_default()
        .len();
    let user = json!({
        "selected_text": b64("let port = env(\"BRISA_PORT\")\nserve(app, port: port)"),
        "editor_content": b64(&"fn handler(req: Request) -> Response { ok() }\n".repeat(40)),
    })
    .to_string();
    let url = format!("{}/v1/chat/completions", gateway.url);
    let questions = [
        "what does this code do?",
        "Which environment variable overrides the server port?",
        "¿Cómo lanzo varias consultas en paralelo?",
        "write an endpoint that returns the current user",
    ];
    let mut ttft = Vec::new();
    for i in 0..n {
        let body = json!({"model": "brunix", "stream": true, "session_id": format!("bench-{}", i % 50),
            "user": user, "messages": [{"role": "user", "content": questions[i as usize % questions.len()]}]});
        ttft.push(timed_post(client, &url, &body).await.0);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = std::fs::read_to_string(&gateway.log).unwrap_or_default();
    let mut by_stage: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in log[before..].lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let fields = &v["fields"];
        if let (Some(stage), Some(ms)) = (fields["stage"].as_str(), fields["ms"].as_f64()) {
            by_stage
                .entry(stage.to_string())
                .or_default()
                .push((ms * 1000.0) as u64);
        }
    }
    println!();
    println!("assistant pipeline stages: {n} streamed turns, one at a time, with editor context and 50 sessions");
    println!();
    println!("| stage | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    for stage in [
        "session",
        "classify",
        "reformulate",
        "retrieve",
        "assemble",
        "generate",
    ] {
        if let Some(v) = by_stage.get(stage) {
            println!(
                "| {stage} | {:.3} | {:.3} |",
                percentile(v, 0.5),
                percentile(v, 0.99)
            );
        }
    }
    println!(
        "| TTFT (client) | {:.3} | {:.3} |",
        percentile(&ttft, 0.5),
        percentile(&ttft, 0.99)
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let total: u64 = std::env::var("BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let tokens: usize = std::env::var("BENCH_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let upstream = ScriptedUpstream::start().await;
    upstream.set_default(Reply::Tokens {
        tokens: (0..tokens).map(|i| format!("tok{i} ")).collect(),
        delay: Duration::ZERO,
        finish: "stop",
    });
    common::kill_children_on_signal();
    let gateway = start_gateway(&upstream, &GatewayOptions::default()).await;
    let pid = gateway.pid();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_rss = rss_kib(pid);

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .build()
        .unwrap();
    let direct = format!("{}/v1/chat/completions", upstream.root());
    let via = format!("{}/v1/chat/completions", gateway.url);

    // Peak memory while under load.
    let sampler = RssSampler::start(pid);

    println!(
        "assist-gateway overhead: {total} requests per row, {tokens}-token answers, OpenAI dialect"
    );
    println!(
        "machine: {} cores; upstream, gateway and load client share them",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!();
    println!("| mode | model | conc | direct p50 ms | via p50 ms | added p50 ms | direct p99 ms | via p99 ms | added p99 ms | added TTFT p50 / p99 ms | direct req/s | via req/s |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for stream in [false, true] {
        for (label, model) in [("passthrough", UPSTREAM_MODEL), ("brunix", "brunix")] {
            for concurrency in [1u64, 8, 64] {
                let direct_body = json!({"model": UPSTREAM_MODEL, "stream": stream,
                    "messages": [{"role": "user", "content": "Explain Rust lifetimes briefly."}]});
                let via_body = json!({"model": model, "stream": stream,
                    "messages": [{"role": "user", "content": "Explain Rust lifetimes briefly."}]});
                // Warm both paths' connection pools.
                load(
                    &client,
                    &direct,
                    direct_body.clone(),
                    concurrency * 4,
                    concurrency,
                )
                .await;
                load(
                    &client,
                    &via,
                    via_body.clone(),
                    concurrency * 4,
                    concurrency,
                )
                .await;
                let d = load(&client, &direct, direct_body, total, concurrency).await;
                let g = load(&client, &via, via_body, total, concurrency).await;
                let ttft = if stream {
                    format!(
                        "{:.3} / {:.3}",
                        g.ttft(0.5) - d.ttft(0.5),
                        g.ttft(0.99) - d.ttft(0.99)
                    )
                } else {
                    "-".to_string()
                };
                println!(
                    "| {} | {label} | {concurrency} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {ttft} | {:.0} | {:.0} |",
                    if stream { "stream" } else { "non-stream" },
                    d.percentile(0.5), g.percentile(0.5), g.percentile(0.5) - d.percentile(0.5),
                    d.percentile(0.99), g.percentile(0.99), g.percentile(0.99) - d.percentile(0.99),
                    d.rps(), g.rps()
                );
            }
        }
    }
    grpc_vs_http(&client, &gateway, total, tokens).await;
    let peak = sampler.stop().await;
    stages(&client, &gateway, total.min(1000)).await;
    println!();
    println!(
        "gateway RSS: idle {:.1} MiB, peak under load {:.1} MiB",
        idle_rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    drop(gateway);
}

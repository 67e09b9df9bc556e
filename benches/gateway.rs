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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile, rss_kib, start_gateway, GatewayOptions, GatewayProcess, RssSampler};
use serde_json::json;
use support::{Reply, ScriptedUpstream, UPSTREAM_MODEL};

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

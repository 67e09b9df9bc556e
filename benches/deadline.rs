//! What a hung embedder costs an answer: DEADLINE_CONCURRENCY (100) streamed questions at
//! once to `brunix` (examples/knowledge, an Ollama embedder that never answers,
//! `retrieval.deadline_ms` = DEADLINE_MS, 500), time to the first token, against the
//! scripted upstream's own first byte at the same concurrency, measured in the same run.
//!
//! ```sh
//! cargo bench --bench deadline
//! DEADLINE_MS=300 DEADLINE_CONCURRENCY=200 cargo bench --bench deadline
//! ```
//!
//! The gateway runs in this process (as in the tests), so the load side shares its cores:
//! the figures are an upper bound. The gateway with the embedder answering is measured in
//! the same run, so what the deadline adds can be told from what the pipeline itself costs
//! at this concurrency.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use assist_gateway::config::{EmbeddingProvider, Provider};
use common::{env_or, percentile};
use serde_json::{json, Value};
use support::{Gateway, Reply, ScriptedUpstream};

/// Microseconds from sending `body` to `url` to the first token of its streamed answer.
async fn first_byte(client: &reqwest::Client, url: &str, body: &Value) -> u64 {
    common::first_piece(client, url, body, b"content").await
}

async fn round(url: &str, body: &Value, n: usize) -> Vec<u64> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(n)
        .build()
        .unwrap();
    let runs = (0..n).map(|_| first_byte(&client, url, body));
    futures::future::join_all(runs).await
}

fn row(name: &str, times: &[u64]) {
    println!(
        "| {name} | {:.1} | {:.1} | {:.1} |",
        percentile(times, 0.5),
        percentile(times, 0.99),
        percentile(times, 1.0),
    );
}

#[tokio::main]
async fn main() {
    let deadline: u64 = env_or("DEADLINE_MS", 500);
    let n: usize = env_or("DEADLINE_CONCURRENCY", 100);
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&["Set ", "BRISA_PORT."]));
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.retrieval.deadline_ms = deadline;
    })
    .await;
    let question = "Which environment variable overrides the server port?";
    let upstream_body = json!({"model": support::UPSTREAM_MODEL, "stream": true,
        "messages": [{"role": "user", "content": question}]});
    let gateway_body = json!({"model": "brunix", "stream": true,
        "messages": [{"role": "user", "content": question}]});
    // Warm both (connections, the gateway's window lookup).
    round(&format!("{}/api/chat", up.root()), &upstream_body, 4).await;
    round(&gw.url("/api/chat"), &gateway_body, 4).await;
    let direct = round(&format!("{}/api/chat", up.root()), &upstream_body, n).await;
    let healthy = round(&gw.url("/api/chat"), &gateway_body, n).await;
    up.slow_embeddings(Duration::from_secs(3600));
    let through = round(&gw.url("/api/chat"), &gateway_body, n).await;
    println!("{n} streamed questions at once, embedder hung, retrieval.deadline_ms = {deadline}");
    println!();
    println!("| first token, ms | p50 | p99 | max |");
    println!("|---|---:|---:|---:|");
    row("upstream alone", &direct);
    row("gateway (brunix), embedder answering", &healthy);
    row("gateway (brunix), embedder hung", &through);
    let over = percentile(&through, 1.0) - deadline as f64 - percentile(&direct, 1.0);
    let over_healthy = percentile(&through, 1.0) - deadline as f64 - percentile(&healthy, 1.0);
    println!();
    println!(
        "slowest first token with the embedder hung, beyond the deadline: {over:.1} ms over the upstream's slowest own first byte, {over_healthy:.1} ms over the gateway's own slowest with the embedder answering"
    );
}

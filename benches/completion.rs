//! What the completion path adds, and how fast an abandoned completion stops the upstream.
//!
//! * Time to the first token of `COMPLETION_N` (200) completions asked one after another
//!   (continue's autocomplete: `/api/generate` with a `suffix`) of `brunix`, over
//!   `examples/knowledge` (the quick start's knowledge: the repository snippets are
//!   searched), against the same completion asked of the scripted upstream directly, in
//!   the same run. Every request's prefix differs, so the recent completions never answer.
//! * The time from a client dropping a streamed completion to the upstream seeing its
//!   request cancelled, `COMPLETION_CANCELS` (50) times.
//!
//! ```sh
//! cargo bench --bench completion
//! ```
//!
//! The gateway and the scripted upstream run in this process, so the load side shares
//! their cores; one request at a time keeps that small.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

mod common;

use std::time::{Duration, Instant};

use assist_gateway::config::Provider;
use common::{env_or, percentile};
use futures::StreamExt;
use serde_json::{json, Value};
use support::{Gateway, Reply, ScriptedUpstream};

/// Microseconds from sending `body` to `url` to the first token of its streamed answer.
async fn first_token(client: &reqwest::Client, url: &str, body: &Value) -> u64 {
    common::first_piece(client, url, body, b"\"response\":").await
}

fn row(name: &str, times: &[u64]) {
    println!(
        "| {name} | {:.2} | {:.2} |",
        // `percentile` takes microseconds and gives milliseconds.
        percentile(times, 0.5),
        percentile(times, 0.99),
    );
}

#[tokio::main]
async fn main() {
    let n: usize = env_or("COMPLETION_N", 200);
    let cancels: usize = env_or("COMPLETION_CANCELS", 50);
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&[
        "    total = compute(a",
        ")\n",
        "    return total\n",
    ]));
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.completion.template = "qwen".into();
    })
    .await;
    let client = reqwest::Client::new();
    let prefix = |i: usize| format!("import server\n\ndef handler_{i}(request):\n");
    let suffix = "    return total\n";
    let direct = |i: usize| {
        json!({"model": support::UPSTREAM_MODEL, "stream": true, "raw": true,
            "prompt": format!("<|fim_prefix|>{}<|fim_suffix|>{suffix}<|fim_middle|>", prefix(i))})
    };
    let through = |i: usize| json!({"model": "brunix", "stream": true, "prompt": prefix(i), "suffix": suffix});
    let (upstream_url, gateway_url) = (
        format!("{}/api/generate", up.root()),
        gw.url("/api/generate"),
    );
    for i in 0..20 {
        first_token(&client, &upstream_url, &direct(i)).await;
        first_token(&client, &gateway_url, &through(i)).await;
    }
    let (mut alone, mut gateway) = (Vec::new(), Vec::new());
    // Interleaved, so that both see the same moments of the machine.
    for i in 0..n {
        alone.push(first_token(&client, &upstream_url, &direct(1000 + i)).await);
        gateway.push(first_token(&client, &gateway_url, &through(1000 + i)).await);
    }
    let added: Vec<u64> = gateway
        .iter()
        .zip(&alone)
        .map(|(g, a)| g.saturating_sub(*a))
        .collect();
    println!("{n} completions one after another, examples/knowledge, repository snippets on");
    println!();
    println!("| first token, ms | p50 | p99 |");
    println!("|---|---:|---:|");
    row("upstream alone", &alone);
    row("gateway (brunix FIM path)", &gateway);
    row("added by the gateway (pairwise)", &added);

    up.set_default(Reply::Endless(Duration::from_millis(5)));
    let mut stops = Vec::new();
    for i in 0..cancels {
        let before = up.cancelled();
        let response = client
            .post(&gateway_url)
            .json(&through(5000 + i))
            .send()
            .await
            .unwrap();
        let mut stream = response.bytes_stream();
        stream.next().await.unwrap().unwrap();
        let dropped = Instant::now();
        drop(stream);
        while up.cancelled() == before {
            assert!(
                dropped.elapsed() < Duration::from_secs(5),
                "never cancelled"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        stops.push(dropped.elapsed().as_micros() as u64);
    }
    println!();
    println!("| abandoned completion: client gone → upstream cancelled, ms | p50 | p99 |");
    println!("|---|---:|---:|");
    row(
        &format!("{cancels} completions dropped after their first piece"),
        &stops,
    );
}

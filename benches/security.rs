//! The gateway under the attacks a keyless client or a hostile upstream can mount, at full
//! scale: what `/health` and a chat answer cost meanwhile, and the gateway's resident
//! memory (now and at its peak). The same attacks run bounded, with their limits asserted,
//! in `tests/it/hostile.rs` on every CI run.
//!
//! ```sh
//! cargo bench --bench security
//! SECURITY_IDLE=2000 SECURITY_SLOW=500 SECURITY_STREAM_MB=2000 SECURITY_HUGE_MB=200 cargo bench --bench security
//! ```
//!
//! Rows:
//! - `idle h2`: SECURITY_IDLE connections (2,000) that sent the HTTP/2 preface and
//!   nothing more, held open, from one client;
//! - `slow h1`: SECURITY_SLOW connections (500) sending request headers a byte a second;
//! - `endless, no session` / `endless, session` / `endless, Responses`: an upstream
//!   streaming 16 KiB tokens as fast as they are taken, read for SECURITY_STREAM_MB
//!   (1,000) MB, without and with a `session_id`, and through `/v1/responses`;
//! - `huge error` / `huge count` / `huge list`: upstream bodies of SECURITY_HUGE_MB (200)
//!   MB: an error page on every attempt, the tokenizer's answer, the model list;
//! - `collector`: the trace collector (OTLP/HTTP, where every answer's spans go) answers
//!   each export with SECURITY_COLLECTOR_MB (500) MB, for SECURITY_COLLECTOR_SECS (20) s
//!   of answers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{env_or, mib, percentile, rss_kib, start_gateway, GatewayOptions, RssSampler};
use serde_json::json;
use support::{Hostile, Reply, ScriptedUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];

struct Row {
    case: String,
    health_p50_ms: f64,
    health_max_ms: f64,
    chat_ms: f64,
    rss_mib: f64,
    peak_mib: f64,
}

/// A trace collector on a loopback port: it answers every export 200, with an empty body,
/// or, while `huge` is set, with a body of `huge_bytes` written as fast as it is taken;
/// `huge_answers` counts the exports answered so.
async fn collector(
    huge: Arc<AtomicBool>,
    huge_bytes: usize,
    huge_answers: Arc<AtomicUsize>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let huge = huge.clone();
            let huge_answers = huge_answers.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    // One export's request (its headers and body arrive in a few reads).
                    match tokio::time::timeout(Duration::from_millis(50), c.read(&mut buf)).await {
                        Ok(Ok(0) | Err(_)) => return,
                        Ok(Ok(_)) => continue,
                        Err(_) => {}
                    }
                    let bytes = if huge.load(Ordering::Relaxed) {
                        huge_bytes
                    } else {
                        0
                    };
                    if bytes > 0 {
                        huge_answers.fetch_add(1, Ordering::Relaxed);
                    }
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {bytes}\r\n\r\n");
                    if c.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let zeros = vec![0u8; 1 << 20];
                    let mut left = bytes;
                    while left > 0 {
                        let n = left.min(zeros.len());
                        if c.write_all(&zeros[..n]).await.is_err() {
                            return;
                        }
                        left -= n;
                    }
                    if bytes > 0 {
                        return;
                    }
                    // Wait for the next request on this connection.
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    url
}

/// `/health` 20 times (p50 and max, ms) and one chat answer (ms) against `url`.
async fn probe(url: &str) -> (f64, f64, f64) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let ok = client
            .get(format!("{url}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        times.push(if ok {
            t.elapsed().as_micros() as u64
        } else {
            10_000_000
        });
    }
    let t = Instant::now();
    let chat = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await;
    let chat_ms = match chat {
        Ok(r) if r.status() == 200 => t.elapsed().as_secs_f64() * 1e3,
        _ => f64::NAN,
    };
    (percentile(&times, 0.5), percentile(&times, 1.0), chat_ms)
}

async fn read_stream(url: &str, session: Option<&str>, bytes: usize, responses: bool) {
    use futures::StreamExt;
    let (path, mut body) = if responses {
        let body = json!({"model": "brunix", "stream": true, "input": "write forever"});
        ("/v1/responses", body)
    } else {
        let body = json!({"model": "brunix", "stream": true,
            "messages": [{"role": "user", "content": "write forever"}]});
        ("/v1/chat/completions", body)
    };
    if let Some(s) = session {
        body["session_id"] = json!(s);
    }
    let response = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut got = 0;
    while let Some(Ok(piece)) = stream.next().await {
        got += piece.len();
        if got >= bytes {
            return;
        }
    }
}

#[tokio::main]
async fn main() {
    common::kill_children_on_signal();
    let idle: usize = env_or("SECURITY_IDLE", 2000);
    let slow: usize = env_or("SECURITY_SLOW", 500);
    let stream_mb: usize = env_or("SECURITY_STREAM_MB", 1000);
    let huge_mb: usize = env_or("SECURITY_HUGE_MB", 200);
    let collector_mb: usize = env_or("SECURITY_COLLECTOR_MB", 500);
    let collector_secs: u64 = env_or("SECURITY_COLLECTOR_SECS", 20);
    let upstream = ScriptedUpstream::start().await;
    upstream.set_default(Reply::tokens(&["fine"]));
    let huge_collector = Arc::new(AtomicBool::new(false));
    let huge_answers = Arc::new(AtomicUsize::new(0));
    let traces = collector(
        huge_collector.clone(),
        collector_mb << 20,
        huge_answers.clone(),
    )
    .await;
    let gw = start_gateway(
        &upstream,
        &GatewayOptions {
            knowledge: false,
            env: vec![("ASSIST__TELEMETRY__OTLP_ENDPOINT".into(), traces)],
            ..GatewayOptions::default()
        },
    )
    .await;
    let pid = gw.pid();
    let mut rows = Vec::new();
    let row = |case: &str, (p50, max, chat): (f64, f64, f64), peak: u64| Row {
        case: case.to_string(),
        health_p50_ms: p50,
        health_max_ms: max,
        chat_ms: chat,
        rss_mib: mib(rss_kib(pid)),
        peak_mib: mib(peak),
    };
    let addr: std::net::SocketAddr = gw.url.trim_start_matches("http://").parse().unwrap();

    let sampler = RssSampler::start(pid);
    rows.push(row("quiet", probe(&gw.url).await, sampler.peak()));

    // Every answer's spans are exported about once a second; each export is answered with
    // collector_mb MB while this row runs.
    huge_collector.store(true, Ordering::Relaxed);
    let collector_sampler = RssSampler::start(pid);
    let until = Instant::now() + Duration::from_secs(collector_secs);
    let mut probed = probe(&gw.url).await;
    while Instant::now() < until {
        probed = probe(&gw.url).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let peak = collector_sampler.stop().await;
    huge_collector.store(false, Ordering::Relaxed);
    let case = format!(
        "collector answering {collector_mb} MB an export, {collector_secs} s ({} exports so answered)",
        huge_answers.load(Ordering::Relaxed)
    );
    rows.push(row(&case, probed, peak));

    let mut held = Vec::new();
    for _ in 0..idle {
        if let Ok(mut c) = TcpStream::connect(addr).await {
            if c.write_all(PREFACE).await.is_ok() && c.write_all(&SETTINGS).await.is_ok() {
                held.push(c);
            }
        }
    }
    let case = format!("idle h2 ×{}", held.len());
    rows.push(row(&case, probe(&gw.url).await, sampler.peak()));
    drop(held);

    let mut slow_conns = Vec::new();
    for _ in 0..slow {
        if let Ok(c) = TcpStream::connect(addr).await {
            slow_conns.push(c);
        }
    }
    let dripping = tokio::spawn(async move {
        let header = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        for i in 0..header.len() {
            for c in &mut slow_conns {
                let _ = c.write_all(&header[i..=i]).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let case = format!("slow h1 ×{slow}");
    rows.push(row(&case, probe(&gw.url).await, sampler.peak()));
    dripping.abort();
    drop(sampler);

    for (session, responses) in [(None, false), (Some("endless"), false), (None, true)] {
        upstream.set_default(Reply::Flood(16 * 1024));
        let sampler = RssSampler::start(pid);
        read_stream(&gw.url, session, stream_mb << 20, responses).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let peak = sampler.stop().await;
        upstream.set_default(Reply::tokens(&["fine"]));
        let case = match (session, responses) {
            (_, true) => format!("endless {stream_mb} MB, Responses"),
            (None, _) => format!("endless {stream_mb} MB, no session"),
            (Some(_), _) => format!("endless {stream_mb} MB, session"),
        };
        rows.push(row(&case, probe(&gw.url).await, peak));
    }

    let huge = huge_mb << 20;
    upstream.set_default(Reply::HugeStatus {
        status: 500,
        bytes: huge,
    });
    let sampler = RssSampler::start(pid);
    let t = Instant::now();
    let _ = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await;
    let took = t.elapsed();
    let peak = sampler.stop().await;
    upstream.set_default(Reply::tokens(&["fine"]));
    let case = format!("huge error {huge_mb} MB ({:.1} s)", took.as_secs_f64());
    rows.push(row(&case, probe(&gw.url).await, peak));

    upstream.hostile(Hostile::Huge(huge));
    let sampler = RssSampler::start(pid);
    let t = Instant::now();
    let counted = probe(&gw.url).await;
    let _ = reqwest::get(format!("{}/v1/models", gw.url)).await;
    let took = t.elapsed();
    let peak = sampler.stop().await;
    let case = format!(
        "huge count and list {huge_mb} MB ({:.1} s)",
        took.as_secs_f64()
    );
    rows.push(row(&case, counted, peak));

    println!(
        "\n| case | /health p50 / max (ms) | chat answer (ms) | RSS after (MiB) | peak RSS (MiB) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.2} / {:.2} | {:.1} | {:.1} | {:.1} |",
            r.case, r.health_p50_ms, r.health_max_ms, r.chat_ms, r.rss_mib, r.peak_mib
        );
    }
}

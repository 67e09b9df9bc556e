//! Side-by-side benchmark against LiteLLM: `benches/side-by-side.sh` (or `cargo bench --bench
//! side_by_side` once `benches/litellm/requirements.txt` is installed).
//!
//! One scripted upstream (in this process, OpenAI SSE byte for byte) and the same client
//! load against four targets, one after the other, each started just before its turn and
//! stopped after it:
//!
//! * `direct`: the scripted upstream itself (the baseline every "added" figure subtracts);
//! * `litellm`: LiteLLM proxy (`litellm --config benches/litellm/config.yaml`), pass-through
//!   `openai/up-model:latest` to the upstream, no database, logging off;
//! * `gateway-passthrough`: the release gateway forwarding `up-model:latest` unchanged;
//! * `gateway-brunix`: the release gateway running the assistant pipeline (rules
//!   classifier, reformulator off, embedded BM25 index of `examples/knowledge`).
//!
//! Load is open-loop: request i is due at start + i / rate whatever happened to earlier
//! ones, and its latency is counted from that due time, so a target that falls behind
//! shows its queueing instead of slowing the client down (no coordinated omission).
//! See the README section "Benchmark against LiteLLM" for what each column means.
//!
//! Environment (defaults in brackets):
//! BENCH_TARGETS [direct,litellm,passthrough,brunix] which rows to run;
//! BENCH_SECS [5] seconds at each fixed rate (100 and 1,000 req/s, and the TTFT run);
//! BENCH_STEP_SECS [2] seconds per step of the throughput ladder;
//! BENCH_LADDER [25,50,100,150,200,300,400,600,800,1000,1500,2000,3000,4000,6000,8000,12000,16000];
//! BENCH_P99_BOUNDS_MS [10,50,250] the p99 bounds of the throughput columns;
//! BENCH_TTFT_RATE [100] stream requests per second for the TTFT run;
//! BENCH_STREAMS [2000] slow streams opened at once; BENCH_HOLD_TOKENS [10] and
//! BENCH_HOLD_DELAY_MS [500] their length; BENCH_TOKENS [20] tokens per answer otherwise;
//! BENCH_TIMEOUT_SECS [10] per-request timeout; BENCH_MAX_INFLIGHT [4000] requests
//! outstanding before the generator sheds (counted as failures);
//! BENCH_LITELLM [~/.cache/assist-gateway/bench-venv/bin/litellm] the proxy's executable;
//! BENCH_LITELLM_WORKERS [number of cores] its worker processes;
//! BENCH_GATEWAY_LOG [warn] the gateway's log level (LiteLLM's logging is off too).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{
    env_or, free_port, mib, percentile, rss_tree_kib, start_gateway, wait_ok, GatewayOptions,
    GatewayProcess, Proc, RssSampler,
};
use serde_json::json;
use support::{Reply, ScriptedUpstream, UPSTREAM_MODEL};
use tokio::time::Instant;

/// A retrieval question: the rules classifier sends it through retrieval in `brunix`.
const QUESTION: &str = "Which environment variable overrides the server port?";

struct Knobs {
    targets: Vec<String>,
    secs: f64,
    step_secs: f64,
    ladder: Vec<f64>,
    bounds_ms: Vec<f64>,
    ttft_rate: f64,
    streams: u64,
    hold_tokens: usize,
    hold_delay: Duration,
    tokens: usize,
    timeout: Duration,
    max_inflight: u64,
    litellm: PathBuf,
    litellm_workers: usize,
    gateway_log: String,
}

fn list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    let raw = std::env::var(name).unwrap_or_else(|_| default.to_string());
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name}: {s:?} is not a valid value"))
        })
        .collect()
}

impl Knobs {
    fn from_env() -> Self {
        let home = std::env::var("HOME").unwrap_or_default();
        Self {
            targets: list("BENCH_TARGETS", "direct,litellm,passthrough,brunix"),
            secs: env_or("BENCH_SECS", 5.0),
            step_secs: env_or("BENCH_STEP_SECS", 2.0),
            ladder: list(
                "BENCH_LADDER",
                "25,50,100,150,200,300,400,600,800,1000,1500,2000,3000,4000,6000,8000,12000,16000",
            ),
            bounds_ms: list("BENCH_P99_BOUNDS_MS", "10,50,250"),
            ttft_rate: env_or("BENCH_TTFT_RATE", 100.0),
            streams: env_or("BENCH_STREAMS", 2000),
            hold_tokens: env_or("BENCH_HOLD_TOKENS", 10),
            hold_delay: Duration::from_millis(env_or("BENCH_HOLD_DELAY_MS", 500)),
            tokens: env_or("BENCH_TOKENS", 20),
            timeout: Duration::from_secs(env_or("BENCH_TIMEOUT_SECS", 10)),
            max_inflight: env_or("BENCH_MAX_INFLIGHT", 4000),
            litellm: env_or(
                "BENCH_LITELLM",
                PathBuf::from(format!(
                    "{home}/.cache/assist-gateway/bench-venv/bin/litellm"
                )),
            ),
            litellm_workers: env_or(
                "BENCH_LITELLM_WORKERS",
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            gateway_log: env_or("BENCH_GATEWAY_LOG", "warn".to_string()),
        }
    }
}

/// What one target needs running while it is measured.
enum Server {
    /// The scripted upstream, in this process.
    InProcess,
    LiteLlm {
        proc_: Proc,
        /// Its working directory and logs, removed with it.
        _dir: tempfile::TempDir,
    },
    Gateway(GatewayProcess),
}

impl Server {
    fn pid(&self) -> Option<u32> {
        match self {
            Server::InProcess => None,
            Server::LiteLlm { proc_, .. } => Some(proc_.pid()),
            Server::Gateway(g) => Some(g.pid()),
        }
    }
}

struct Target {
    name: &'static str,
    /// POST here.
    url: String,
    /// The model the client asks for.
    model: String,
    server: Server,
}

/// The result of one open-loop run.
#[derive(Default)]
struct Step {
    offered: f64,
    /// Microseconds from each request's due time to its last byte (successes only).
    latency_us: Vec<u64>,
    /// Microseconds from each request's due time to its first answer token (successes).
    ttft_us: Vec<u64>,
    errors: u64,
    /// Requests never sent because BENCH_MAX_INFLIGHT were outstanding.
    shed: u64,
    first_error: Option<String>,
    /// Successful requests per second, from the first due time to the last answer.
    achieved: f64,
}

impl Step {
    /// Every request answered in full and the target kept up with the offered rate.
    fn reached(&self) -> bool {
        self.errors == 0 && self.shed == 0 && self.achieved >= 0.9 * self.offered
    }

    fn p(&self, q: f64) -> f64 {
        percentile(&self.latency_us, q)
    }

    fn ttft(&self, q: f64) -> f64 {
        percentile(&self.ttft_us, q)
    }

    fn summary(&self) -> String {
        let mut s = format!(
            "offered {:.0}/s achieved {:.0}/s, p50 {:.3} ms p99 {:.3} ms, {} ok",
            self.offered,
            self.achieved,
            self.p(0.5),
            self.p(0.99),
            self.latency_us.len()
        );
        if self.errors + self.shed > 0 {
            s += &format!(", {} errors, {} shed", self.errors, self.shed);
        }
        if let Some(e) = &self.first_error {
            s += &format!(" (first error: {e})");
        }
        s
    }
}

/// An error with its causes ("error sending request" alone says little).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s += &format!(": {cause}");
        source = cause.source();
    }
    s
}

fn body(model: &str, stream: bool) -> Bytes {
    Bytes::from(
        json!({"model": model, "stream": stream,
               "messages": [{"role": "user", "content": QUESTION}]})
        .to_string(),
    )
}

/// One request read to its end: microseconds from `due` to the first answer token and
/// to the last byte. The answer must hold every scripted token (and a stream its end).
async fn one(
    client: &reqwest::Client,
    url: &str,
    body: Bytes,
    stream: bool,
    last_token: &str,
    due: Instant,
    timeout: Duration,
) -> Result<(u64, u64), String> {
    let mut r = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("send: {}", chain(&e)))?;
    if r.status() != 200 {
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {:.200}", text));
    }
    let mut text = Vec::with_capacity(4096);
    let mut first = None;
    while let Some(chunk) = r
        .chunk()
        .await
        .map_err(|e| format!("body: {}", chain(&e)))?
    {
        text.extend_from_slice(&chunk);
        if first.is_none() && text.windows(4).any(|w| w == b"tok0") {
            first = Some(due.elapsed());
        }
    }
    let whole = due.elapsed();
    let complete = text
        .windows(last_token.len())
        .any(|w| w == last_token.as_bytes())
        && (!stream || text.ends_with(b"data: [DONE]\n\n"));
    match first {
        Some(first) if complete => Ok((first.as_micros() as u64, whole.as_micros() as u64)),
        _ => Err(format!(
            "incomplete answer: {:.200}",
            String::from_utf8_lossy(&text)
        )),
    }
}

/// Sends a target's load.
struct Runner<'a> {
    name: &'a str,
    client: &'a reqwest::Client,
    url: &'a str,
    knobs: &'a Knobs,
}

impl Runner<'_> {
    /// Open-loop load: `rate` requests per second for `secs`, each counted from its due
    /// time, every answer `knobs.tokens` long.
    async fn open_loop(&self, body: &Bytes, stream: bool, rate: f64, secs: f64) -> Step {
        let (client, url, knobs, tokens) = (self.client, self.url, self.knobs, self.knobs.tokens);
        let n = (rate * secs).round().max(1.0) as u64;
        let start = Instant::now() + Duration::from_millis(5);
        let inflight = Arc::new(AtomicU64::new(0));
        let last_done_us = Arc::new(AtomicU64::new(0));
        let last_token = format!("tok{}", tokens - 1);
        let mut tasks = Vec::with_capacity(n as usize);
        let mut shed = 0;
        for i in 0..n {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            tokio::time::sleep_until(due).await;
            if inflight.load(Ordering::Relaxed) >= knobs.max_inflight {
                shed += 1;
                continue;
            }
            inflight.fetch_add(1, Ordering::Relaxed);
            let (client, url, body, inflight, last_done_us, last_token) = (
                client.clone(),
                url.to_string(),
                body.clone(),
                inflight.clone(),
                last_done_us.clone(),
                last_token.clone(),
            );
            let timeout = knobs.timeout;
            tasks.push(tokio::spawn(async move {
                let r = one(&client, &url, body, stream, &last_token, due, timeout).await;
                inflight.fetch_sub(1, Ordering::Relaxed);
                last_done_us.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                r
            }));
        }
        let mut step = Step {
            offered: rate,
            shed,
            ..Default::default()
        };
        for t in tasks {
            match t.await.expect("request task") {
                Ok((first, whole)) => {
                    step.ttft_us.push(first);
                    step.latency_us.push(whole);
                }
                Err(e) => {
                    step.errors += 1;
                    step.first_error.get_or_insert(e);
                }
            }
        }
        let span = (last_done_us.load(Ordering::Relaxed) as f64 / 1e6).max(secs);
        step.achieved = step.latency_us.len() as f64 / span;
        step
    }

    /// A pause after a run. A target that fell behind may still be working through
    /// requests the client gave up on: then single probes until two in a row answer
    /// within a second (at most two minutes), so the next run does not measure a backlog.
    async fn recover(&self, body: &Bytes, step: &Step) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if step.reached() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let last_token = format!("tok{}", self.knobs.tokens - 1);
        let mut quick = 0;
        while quick < 2 && Instant::now() < deadline {
            let due = Instant::now();
            let probe = one(
                self.client,
                self.url,
                body.clone(),
                false,
                &last_token,
                due,
                self.knobs.timeout,
            )
            .await;
            if probe.is_ok() && due.elapsed() < Duration::from_secs(1) {
                quick += 1;
            } else {
                quick = 0;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        eprintln!(
            "{}: {} after falling behind",
            self.name,
            if quick >= 2 {
                "recovered"
            } else {
                "NOT recovered"
            }
        );
    }
}

/// Concurrent slow streams: how many are opened, held at once, and answered in full.
struct Held {
    opened: u64,
    served: u64,
    peak_open: u64,
    first_error: Option<String>,
}

async fn hold_streams(client: &reqwest::Client, target: &Target, knobs: &Knobs) -> Held {
    let n = knobs.streams;
    let body = body(&target.model, true);
    let last_token = format!("tok{}", knobs.hold_tokens - 1);
    let open = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let timeout = knobs.hold_delay * knobs.hold_tokens as u32 + Duration::from_secs(30);
    // Opened over about two seconds: as fast as a crowd of editors reconnecting.
    let rate = (n as f64 / 2.0).max(1.0);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let (client, url, body, last_token, open, peak) = (
            client.clone(),
            target.url.clone(),
            body.clone(),
            last_token.clone(),
            open.clone(),
            peak.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut r = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| format!("send: {}", chain(&e)))?;
            if r.status() != 200 {
                return Err(format!("HTTP {}", r.status()));
            }
            let mut text = Vec::new();
            let mut counted = false;
            let result = loop {
                match r.chunk().await {
                    Ok(Some(c)) => {
                        text.extend_from_slice(&c);
                        if !counted && text.windows(4).any(|w| w == b"tok0") {
                            counted = true;
                            let now = open.fetch_add(1, Ordering::Relaxed) + 1;
                            peak.fetch_max(now, Ordering::Relaxed);
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(format!("body: {}", chain(&e))),
                }
            };
            if counted {
                open.fetch_sub(1, Ordering::Relaxed);
            }
            result?;
            let complete = text
                .windows(last_token.len())
                .any(|w| w == last_token.as_bytes())
                && text.ends_with(b"data: [DONE]\n\n");
            if complete {
                Ok(())
            } else {
                Err("incomplete stream".to_string())
            }
        }));
    }
    let mut held = Held {
        opened: n,
        served: 0,
        peak_open: 0,
        first_error: None,
    };
    for t in tasks {
        match t.await.expect("stream task") {
            Ok(()) => held.served += 1,
            Err(e) => {
                held.first_error.get_or_insert(e);
            }
        }
    }
    held.peak_open = peak.load(Ordering::Relaxed);
    held
}

/// Everything measured for one target.
struct Row {
    name: &'static str,
    /// Ladder steps in order, until the first step over the largest bound.
    ladder: Vec<Step>,
    at100: Step,
    at1000: Step,
    ttft: Step,
    held: Held,
    rss_idle_kib: Option<u64>,
    rss_load_kib: Option<u64>,
}

fn answer(tokens: usize, delay: Duration) -> Reply {
    Reply::Tokens {
        tokens: (0..tokens).map(|i| format!("tok{i} ")).collect(),
        delay,
        finish: "stop",
    }
}

async fn start_litellm(upstream: &ScriptedUpstream, knobs: &Knobs) -> Target {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        knobs.litellm.exists(),
        "no LiteLLM at {}: run benches/side-by-side.sh (it installs benches/litellm/requirements.txt), or set BENCH_LITELLM",
        knobs.litellm.display()
    );
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("litellm.log");
    let mut cmd = Command::new(&knobs.litellm);
    cmd.args(["--config"])
        .arg(here.join("benches/litellm/config.yaml"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--num_workers", &knobs.litellm_workers.to_string()])
        // uvicorn kills a worker that does not answer its health check within 5 s, and a
        // worker needs longer than that to import LiteLLM on a busy 2-core machine.
        .args(["--timeout_worker_healthcheck", "120"])
        .args(["--log_config"])
        .arg(here.join("benches/litellm/log.json"))
        .current_dir(dir.path())
        .env("BENCH_UPSTREAM_BASE", format!("{}/v1", upstream.root()))
        // Local model-cost map: nothing is fetched from the internet at start-up.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_MODE", "PRODUCTION")
        .env("TELEMETRY", "False")
        .env_remove("DATABASE_URL")
        .env_remove("LITELLM_MASTER_KEY")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("litellm.err")).unwrap());
    let mut proc_ = Proc::spawn("litellm", &mut cmd);
    let url = format!("http://127.0.0.1:{port}");
    wait_ok(&format!("{url}/health/liveliness"), 180, &mut proc_).await;
    Target {
        name: "litellm",
        url: format!("{url}/v1/chat/completions"),
        model: UPSTREAM_MODEL.to_string(),
        server: Server::LiteLlm { proc_, _dir: dir },
    }
}

async fn start_target(name: &str, upstream: &ScriptedUpstream, knobs: &Knobs) -> Target {
    let gateway = |passthrough: bool| GatewayOptions {
        passthrough,
        knowledge: !passthrough,
        log_level: knobs.gateway_log.clone(),
        env: Vec::new(),
    };
    match name {
        "direct" => Target {
            name: "direct upstream",
            url: format!("{}/v1/chat/completions", upstream.root()),
            model: UPSTREAM_MODEL.to_string(),
            server: Server::InProcess,
        },
        "litellm" => start_litellm(upstream, knobs).await,
        "passthrough" => {
            let g = start_gateway(upstream, &gateway(true)).await;
            Target {
                name: "gateway passthrough",
                url: format!("{}/v1/chat/completions", g.url),
                model: UPSTREAM_MODEL.to_string(),
                server: Server::Gateway(g),
            }
        }
        "brunix" => {
            let g = start_gateway(upstream, &gateway(false)).await;
            Target {
                name: "gateway brunix",
                url: format!("{}/v1/chat/completions", g.url),
                model: "brunix".to_string(),
                server: Server::Gateway(g),
            }
        }
        other => {
            panic!("BENCH_TARGETS: unknown target {other:?} (direct, litellm, passthrough, brunix)")
        }
    }
}

async fn measure(
    client: &reqwest::Client,
    upstream: &ScriptedUpstream,
    target: &Target,
    knobs: &Knobs,
) -> Row {
    let name = target.name;
    let run = Runner {
        name,
        client,
        url: &target.url,
        knobs,
    };
    let plain = body(&target.model, false);
    let streamed = body(&target.model, true);
    upstream.set_default(answer(knobs.tokens, Duration::ZERO));
    // Warm-up (connections, lazy imports, caches), then idle memory. A few requests one
    // at a time first: LiteLLM's workers initialise on their first requests.
    for _ in 0..20 {
        let due = Instant::now();
        let last_token = format!("tok{}", knobs.tokens - 1);
        let _ = one(
            client,
            &target.url,
            plain.clone(),
            false,
            &last_token,
            due,
            Duration::from_secs(30),
        )
        .await;
    }
    let warm = run.open_loop(&plain, false, 50.0, 2.0).await;
    eprintln!("{name}: warm-up: {}", warm.summary());
    run.recover(&plain, &warm).await;
    let warm = run.open_loop(&streamed, true, 25.0, 1.0).await;
    run.recover(&plain, &warm).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle_kib = target.server.pid().map(rss_tree_kib);
    let sampler = target.server.pid().map(RssSampler::start);
    upstream.clear_requests();

    let at100 = run.open_loop(&plain, false, 100.0, knobs.secs).await;
    eprintln!("{name}: 100 req/s: {}", at100.summary());
    run.recover(&plain, &at100).await;

    let ttft = run
        .open_loop(&streamed, true, knobs.ttft_rate, knobs.secs)
        .await;
    eprintln!(
        "{name}: streams at {} req/s: {}, TTFT p50 {:.3} ms p99 {:.3} ms",
        knobs.ttft_rate,
        ttft.summary(),
        ttft.ttft(0.5),
        ttft.ttft(0.99)
    );
    upstream.clear_requests();
    run.recover(&plain, &ttft).await;

    let at1000 = run.open_loop(&plain, false, 1000.0, knobs.secs).await;
    eprintln!("{name}: 1000 req/s: {}", at1000.summary());
    upstream.clear_requests();
    run.recover(&plain, &at1000).await;

    // Up the ladder until a step is missed or its p99 exceeds the largest bound (such a
    // step is tried once more, so one stray stall does not end the ladder).
    let max_bound = knobs.bounds_ms.iter().cloned().fold(0.0, f64::max);
    let over = |s: &Step| !s.reached() || s.p(0.99) > max_bound;
    let mut ladder = Vec::new();
    for &rate in &knobs.ladder {
        let mut step = run.open_loop(&plain, false, rate, knobs.step_secs).await;
        eprintln!("{name}: ladder: {}", step.summary());
        upstream.clear_requests();
        run.recover(&plain, &step).await;
        if over(&step) {
            step = run.open_loop(&plain, false, rate, knobs.step_secs).await;
            eprintln!("{name}: ladder, again: {}", step.summary());
            upstream.clear_requests();
            run.recover(&plain, &step).await;
        }
        let over = over(&step);
        ladder.push(step);
        if over {
            break;
        }
    }

    upstream.set_default(answer(knobs.hold_tokens, knobs.hold_delay));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = hold_streams(client, target, knobs).await;
    eprintln!(
        "{name}: {} slow streams: {} served in full, {} open at once{}",
        held.opened,
        held.served,
        held.peak_open,
        held.first_error
            .as_deref()
            .map(|e| format!(" (first error: {e})"))
            .unwrap_or_default()
    );
    upstream.set_default(answer(knobs.tokens, Duration::ZERO));
    upstream.clear_requests();
    let rss_load_kib = match sampler {
        Some(s) => Some(s.stop().await),
        None => None,
    };
    Row {
        name,
        ladder,
        at100,
        at1000,
        ttft,
        held,
        rss_idle_kib,
        rss_load_kib,
    }
}

/// The highest ladder rate such that it and every lower step were reached with p99 ≤ bound.
fn max_rate(row: &Row, bound_ms: f64) -> Option<f64> {
    row.ladder
        .iter()
        .take_while(|s| s.reached() && s.p(0.99) <= bound_ms)
        .last()
        .map(|s| s.offered)
}

fn added(target: f64, base: Option<f64>) -> String {
    match base {
        Some(b) => format!("{:.2}", target - b),
        None => format!("{target:.2}"),
    }
}

/// "added p50 / p99" at a fixed rate, or why there is none.
fn latency_cell(step: &Step, base: Option<&Step>, is_base: bool, ttft: bool) -> String {
    let (p50, p99) = if ttft {
        (step.ttft(0.5), step.ttft(0.99))
    } else {
        (step.p(0.5), step.p(0.99))
    };
    if !step.reached() {
        return format!(
            "unreachable ({:.0} req/s achieved, {} failed)",
            step.achieved,
            step.errors + step.shed
        );
    }
    if is_base {
        return format!("({p50:.2} / {p99:.2})");
    }
    let base_of = |q: f64| {
        base.filter(|b| b.reached())
            .map(|b| if ttft { b.ttft(q) } else { b.p(q) })
    };
    format!(
        "{} / {}",
        added(p50, base_of(0.5)),
        added(p99, base_of(0.99))
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let knobs = Knobs::from_env();
    common::kill_children_on_signal();
    let upstream = ScriptedUpstream::start().await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        // Shorter than uvicorn's 5 s keep-alive: never reuse a connection the server is
        // closing at that moment.
        .pool_idle_timeout(Duration::from_secs(3))
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    for name in &knobs.targets {
        let t = std::time::Instant::now();
        let target = start_target(name, &upstream, &knobs).await;
        eprintln!(
            "{}: started in {:.1} s",
            target.name,
            t.elapsed().as_secs_f64()
        );
        rows.push(measure(&client, &upstream, &target, &knobs).await);
        drop(target);
        // Let the closed connections go before the next target.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let base = rows.iter().position(|r| r.name == "direct upstream");

    println!();
    println!(
        "Side by side on 127.0.0.1: {} cores, {:.1} GiB; load client, scripted upstream and the proxy share them. \
         {}-token answers; LiteLLM {} worker(s); gateway log level {}.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        mem_total_gib(),
        knobs.tokens,
        knobs.litellm_workers,
        knobs.gateway_log,
    );
    println!(
        "Latencies in ms, open-loop, counted from each request's due time; \"added\" = target's percentile minus the direct upstream's (direct row: its own, in brackets)."
    );
    println!();
    let bounds: Vec<String> = knobs
        .bounds_ms
        .iter()
        .map(|b| format!("max req/s @ p99 ≤ {b} ms"))
        .collect();
    println!(
        "| target | {} | added p50 / p99 @ 100 req/s | added p50 / p99 @ 1,000 req/s | added TTFT p50 / p99 (streams @ {} req/s) | streams open at once / served in full, of {} | RSS idle MiB | RSS load MiB |",
        bounds.join(" | "),
        knobs.ttft_rate,
        knobs.streams
    );
    println!(
        "|---|{}---:|---:|---:|---:|---:|---:|",
        "---:|".repeat(bounds.len())
    );
    for (i, row) in rows.iter().enumerate() {
        let base_row = base.filter(|b| *b != i).map(|b| &rows[b]);
        let is_base = Some(i) == base;
        let maxes: Vec<String> = knobs
            .bounds_ms
            .iter()
            .map(|b| {
                let ceiling = row
                    .ladder
                    .last()
                    .is_some_and(|s| s.reached() && s.p(0.99) <= *b);
                match max_rate(row, *b) {
                    Some(r) if ceiling => format!("≥ {r:.0}"),
                    Some(r) => format!("{r:.0}"),
                    None => "none".to_string(),
                }
            })
            .collect();
        let rss = |v: Option<u64>| v.map_or("-".to_string(), |k| format!("{:.0}", mib(k)));
        println!(
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} |",
            row.name,
            maxes.join(" | "),
            latency_cell(&row.at100, base_row.map(|b| &b.at100), is_base, false),
            latency_cell(&row.at1000, base_row.map(|b| &b.at1000), is_base, false),
            latency_cell(&row.ttft, base_row.map(|b| &b.ttft), is_base, true),
            row.held.peak_open,
            row.held.served,
            rss(row.rss_idle_kib),
            rss(row.rss_load_kib),
        );
    }
    println!();
    println!(
        "Total run: {:.0} s. Ladder: {} (each {} s); \"≥\" = the ladder's top step still met the bound.",
        started.elapsed().as_secs_f64(),
        knobs
            .ladder
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        knobs.step_secs
    );
}

fn mem_total_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0)
}

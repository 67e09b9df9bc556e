//! Side-by-side benchmark against nginx and LiteLLM: `benches/side-by-side.sh` (or `cargo
//! bench --bench side_by_side` once `benches/litellm/requirements.txt` and Debian's
//! `nginx-light` are installed; the script installs both).
//!
//! One scripted upstream (in this process, OpenAI SSE byte for byte) and the same client
//! load against five targets, one after the other, each started just before its turn and
//! stopped after it:
//!
//! * `direct`: the scripted upstream itself (the baseline every "added" figure subtracts);
//! * `nginx`: nginx as a plain streaming reverse proxy, the floor any proxy is held to: one
//!   process (`master_process off`), generated config in a temp dir, `proxy_buffering off`,
//!   HTTP/1.1 with a keep-alive pool to the upstream, access log off, error log at `warn`;
//! * `litellm`: LiteLLM proxy (`litellm --config benches/litellm/config.yaml`), pass-through
//!   `openai/up-model:latest` to the upstream, no database, logging off;
//! * `gateway-passthrough`: the release gateway forwarding `up-model:latest` unchanged;
//! * `gateway-anthropic`, `gateway-responses` (not run by default): the same passthrough
//!   model asked in the Anthropic Messages and Responses dialects (`/v1/messages`,
//!   `/v1/responses`), each answer read to its dialect's end;
//! * `gateway-brunix`: the release gateway running the assistant pipeline (rules
//!   classifier, reformulator off, embedded BM25 index of `examples/knowledge`);
//! * `passthrough-traced`, `brunix-traced` (not run by default): the same two with traces
//!   on (`telemetry.otlp_endpoint`), exported over OTLP/HTTP to a local receiver in this
//!   process (it takes each batch and answers 200, as a collector does); after the table,
//!   each traced row against its untraced one (docs/tracing.md, "What tracing costs").
//!
//! Load is open-loop: request i is due at start + i / rate whatever happened to earlier
//! ones, and its latency is counted from that due time, so a target that falls behind
//! shows its queueing instead of slowing the client down (no coordinated omission).
//! Throughput at a fixed concurrency is closed-loop on top of that: c clients, each
//! sending its next request when its last answer is complete (req/s at c=32 non-streamed,
//! streams/s at c=50 and c=200). After the table, every row against nginx's: throughput
//! ratios and p50 differences.
//! See the README section "Benchmark against LiteLLM" for what each column means.
//!
//! Pinning (BENCH_PIN=on, the default, when at least 2 CPUs are allowed): the target under
//! test runs on the first allowed CPU, this process (load client and scripted upstream) on
//! the others. The target is started as `taskset -c CPU program …` (taskset execs the
//! program, so its pid is the target's, and every thread and worker process it starts
//! inherits the mask). This process pins itself with `taskset -a -p -c CPUS <own pid>` as
//! the first thing `main` does, before the tokio runtime exists: it has one thread then,
//! and every thread started later (runtime workers, blocking pool) inherits the mask. That
//! needs no re-exec (no argv or environment to carry over) and no unsafe
//! `sched_setaffinity`. The runtimes size themselves from the mask
//! (`available_parallelism`): one worker thread each on a 2-CPU machine.
//!
//! Environment (defaults in brackets):
//! BENCH_TARGETS [direct,nginx,litellm,passthrough,brunix] which rows to run (also:
//! anthropic, responses, passthrough-traced, brunix-traced);
//! BENCH_PIN [on] / off: the target on one CPU, load client and upstream on the others;
//! BENCH_SECS [5] seconds at each fixed rate (100 and 1,000 req/s, and the TTFT run);
//! BENCH_STEP_SECS [2] seconds per step of the throughput ladder;
//! BENCH_LADDER [25,50,100,150,200,300,400,600,800,1000,1500,2000,3000,4000,6000,8000,12000,16000];
//! BENCH_P99_BOUNDS_MS [10,50,250] the p99 bounds of the throughput columns;
//! BENCH_TTFT_RATE [100] stream requests per second for the TTFT run;
//! BENCH_CONCURRENCY [32] clients of the closed-loop non-streamed run;
//! BENCH_STREAM_CONCURRENCY [50,200] clients of the closed-loop streamed runs (BENCH_SECS
//! each, after 0.5 s of ramp-up);
//! BENCH_STREAMS [2000] slow streams opened at once; BENCH_HOLD_TOKENS [10] and
//! BENCH_HOLD_DELAY_MS [500] their length; BENCH_TOKENS [20] tokens per answer otherwise;
//! BENCH_TIMEOUT_SECS [10] per-request timeout; BENCH_MAX_INFLIGHT [4000] requests
//! outstanding before the generator sheds (counted as failures);
//! BENCH_LITELLM [~/.cache/assist-gateway/bench-venv/bin/litellm] the proxy's executable;
//! BENCH_LITELLM_WORKERS [1 when pinned, else the number of cores] its worker processes;
//! BENCH_NGINX [nginx on PATH, else /usr/sbin/nginx] nginx's executable;
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{
    command_on, env_or, free_port, mib, percentile, rss_tree_kib, start_gateway_on, wait_ok,
    GatewayOptions, GatewayProcess, Proc, RssSampler,
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
    concurrency: usize,
    stream_concurrency: Vec<usize>,
    streams: u64,
    hold_tokens: usize,
    hold_delay: Duration,
    tokens: usize,
    timeout: Duration,
    max_inflight: u64,
    litellm: PathBuf,
    litellm_workers: usize,
    nginx: PathBuf,
    gateway_log: String,
    pin: bool,
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
        let pin = match env_or("BENCH_PIN", "on".to_string()).as_str() {
            "on" | "1" | "true" | "yes" => true,
            "off" | "0" | "false" | "no" => false,
            other => panic!("BENCH_PIN={other:?}: on or off"),
        };
        Self {
            targets: list("BENCH_TARGETS", "direct,nginx,litellm,passthrough,brunix"),
            secs: env_or("BENCH_SECS", 5.0),
            step_secs: env_or("BENCH_STEP_SECS", 2.0),
            ladder: list(
                "BENCH_LADDER",
                "25,50,100,150,200,300,400,600,800,1000,1500,2000,3000,4000,6000,8000,12000,16000",
            ),
            bounds_ms: list("BENCH_P99_BOUNDS_MS", "10,50,250"),
            ttft_rate: env_or("BENCH_TTFT_RATE", 100.0),
            concurrency: env_or("BENCH_CONCURRENCY", 32),
            stream_concurrency: list("BENCH_STREAM_CONCURRENCY", "50,200"),
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
            // One core to itself when pinned: one worker, as the gateway gets one core.
            litellm_workers: env_or(
                "BENCH_LITELLM_WORKERS",
                if pin {
                    1
                } else {
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                },
            ),
            nginx: env_or("BENCH_NGINX", find_nginx()),
            gateway_log: env_or("BENCH_GATEWAY_LOG", "warn".to_string()),
            pin,
        }
    }
}

/// `nginx` on PATH (Debian puts it in /usr/sbin, often not on a user's PATH), else
/// /usr/sbin/nginx.
fn find_nginx() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("nginx"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

/// Where the target and the load run (CPU lists as taskset takes them).
struct Pinning {
    /// The target under test (nginx, the gateway, LiteLLM).
    target: Option<String>,
    /// For the table's header.
    note: String,
}

/// The CPUs this process may run on (`Cpus_allowed_list`, e.g. "0-1" or "0,2-3").
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Vec::new();
    };
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().unwrap(), b.parse().unwrap());
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// Pins this process to every allowed CPU but the first, which is left to the targets
/// (see the module doc). Must run before any other thread is started.
fn pin_self(knobs: &Knobs) -> Pinning {
    let cpus = allowed_cpus();
    let unpinned = |why: &str| Pinning {
        target: None,
        note: format!(
            "not pinned ({why}): load client, scripted upstream and the target share the CPUs"
        ),
    };
    if !knobs.pin {
        return unpinned("BENCH_PIN=off");
    }
    if cpus.len() < 2 {
        return unpinned(&format!("{} CPU allowed", cpus.len()));
    }
    let join = |c: &[u32]| c.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let (target, load) = (join(&cpus[..1]), join(&cpus[1..]));
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", &load, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("taskset (util-linux) to pin the load, or BENCH_PIN=off: {e}"));
    assert!(status.success(), "taskset -a -p -c {load} failed: {status}");
    let now = join(&allowed_cpus());
    assert_eq!(now, load, "this process's CPUs after taskset");
    Pinning {
        note: format!(
            "pinned with taskset: the target (nginx, gateway, LiteLLM) on CPU {target}, load client and scripted upstream on CPU {load} (the direct row has no target: client and upstream share CPU {load})"
        ),
        target: Some(target),
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
    Nginx {
        proc_: Proc,
        /// Its config, pid file, error log and temp paths, removed with it.
        dir: tempfile::TempDir,
    },
    Gateway(GatewayProcess),
}

impl Server {
    fn pid(&self) -> Option<u32> {
        match self {
            Server::InProcess => None,
            Server::LiteLlm { proc_, .. } | Server::Nginx { proc_, .. } => Some(proc_.pid()),
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

/// A request for `url`'s dialect: chat completions, Anthropic Messages (`/v1/messages`,
/// `max_tokens` required) or the Responses API (`/v1/responses`).
fn body(url: &str, model: &str, stream: bool) -> Bytes {
    let body = if url.ends_with("/v1/messages") {
        json!({"model": model, "stream": stream, "max_tokens": 4096,
               "messages": [{"role": "user", "content": QUESTION}]})
    } else if url.ends_with("/v1/responses") {
        json!({"model": model, "stream": stream, "input": QUESTION})
    } else {
        json!({"model": model, "stream": stream,
               "messages": [{"role": "user", "content": QUESTION}]})
    };
    Bytes::from(body.to_string())
}

/// A stream that ended as its dialect ends one: OpenAI's `[DONE]`, Anthropic's
/// `message_stop`, the Responses API's `response.completed` event.
fn stream_complete(text: &[u8]) -> bool {
    if text.ends_with(b"data: [DONE]\n\n")
        || text.ends_with(b"data: {\"type\":\"message_stop\"}\n\n")
    {
        return true;
    }
    let Some(events) = text.strip_suffix(b"\n\n") else {
        return false;
    };
    let last = events
        .windows(2)
        .rposition(|w| w == b"\n\n")
        .map_or(0, |i| i + 2);
    events[last..].starts_with(b"event: response.completed\n")
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
        && (!stream || stream_complete(&text));
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

    /// Closed loop: `concurrency` clients, each sending its next request as soon as its
    /// last answer is complete (or 10 ms after a failure), for 0.5 s of ramp-up and then
    /// `secs` counted: whole answers per second over the counted part.
    async fn closed_loop(
        &self,
        body: &Bytes,
        stream: bool,
        concurrency: usize,
        secs: f64,
    ) -> Closed {
        let (client, url, knobs) = (self.client, self.url, self.knobs);
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let first_error = Arc::new(Mutex::new(None::<String>));
        let last_token = format!("tok{}", knobs.tokens - 1);
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, url, body, last_token) = (
                    client.clone(),
                    url.to_string(),
                    body.clone(),
                    last_token.clone(),
                );
                let (done, failed, stop, first_error) = (
                    done.clone(),
                    failed.clone(),
                    stop.clone(),
                    first_error.clone(),
                );
                let timeout = knobs.timeout;
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let due = Instant::now();
                        match one(
                            &client,
                            &url,
                            body.clone(),
                            stream,
                            &last_token,
                            due,
                            timeout,
                        )
                        .await
                        {
                            Ok(_) => {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                first_error.lock().unwrap().get_or_insert(e);
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (done0, failed0, t0) = (
            done.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
            Instant::now(),
        );
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let (done1, failed1, span) = (
            done.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
            t0.elapsed().as_secs_f64(),
        );
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("closed-loop client");
        }
        let first_error = first_error.lock().unwrap().take();
        Closed {
            concurrency,
            rate: (done1 - done0) as f64 / span,
            errors: failed1 - failed0,
            first_error,
        }
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

/// A closed-loop run: whole answers per second at a fixed concurrency.
struct Closed {
    concurrency: usize,
    rate: f64,
    /// Failed requests in the counted part.
    errors: u64,
    first_error: Option<String>,
}

impl Closed {
    fn summary(&self) -> String {
        let mut s = format!("c={}: {:.0}/s", self.concurrency, self.rate);
        if self.errors > 0 {
            s += &format!(", {} failed", self.errors);
        }
        if let Some(e) = &self.first_error {
            s += &format!(" (first error: {e})");
        }
        s
    }

    /// For `Runner::recover`: a run with failures may have left a backlog behind.
    fn as_step(&self) -> Step {
        Step {
            errors: self.errors,
            ..Default::default()
        }
    }

    /// The rate, when every request of the counted part succeeded.
    fn clean_rate(&self) -> Option<f64> {
        (self.errors == 0 && self.rate > 0.0).then_some(self.rate)
    }

    fn cell(&self) -> String {
        match self.clean_rate() {
            Some(r) => thousands(r),
            None => format!("{} ({} failed)", thousands(self.rate), self.errors),
        }
    }
}

/// 16840.4 → "16,840".
fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    let digits = (v.round() as u64).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
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
    let body = body(&target.url, &target.model, true);
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
                && stream_complete(&text);
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
    /// The target's CPU milliseconds per 1,000 answers at 1,000 req/s (utime + stime).
    cpu_ms_per_1000: Option<f64>,
    /// Ladder steps in order, until the first step over the largest bound.
    ladder: Vec<Step>,
    at100: Step,
    at1000: Step,
    ttft: Step,
    /// Closed loop, non-streamed, at BENCH_CONCURRENCY.
    closed: Closed,
    /// Closed loop, streamed, at each of BENCH_STREAM_CONCURRENCY.
    streams: Vec<Closed>,
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

async fn start_litellm(upstream: &ScriptedUpstream, knobs: &Knobs, cpus: Option<&str>) -> Target {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        knobs.litellm.exists(),
        "no LiteLLM at {}: run benches/side-by-side.sh (it installs benches/litellm/requirements.txt), or set BENCH_LITELLM",
        knobs.litellm.display()
    );
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("litellm.log");
    let mut cmd = command_on(cpus, &knobs.litellm);
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

/// nginx as a plain streaming reverse proxy in front of the upstream: one process
/// (`master_process off`: the worker's event loop without a master, no user switch),
/// generated config, pid file, error log (`warn`) and temp paths in a temp dir.
async fn start_nginx(upstream: &ScriptedUpstream, knobs: &Knobs, cpus: Option<&str>) -> Target {
    assert!(
        knobs.nginx.exists(),
        "no nginx at {}: run benches/side-by-side.sh (it installs Debian's nginx-light), or set BENCH_NGINX",
        knobs.nginx.display()
    );
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    // Temp paths of the modules this build has (nginx-light leaves some out); nginx
    // creates them at start, and the compiled-in ones are not writable without root.
    let built = nginx_version(&knobs.nginx);
    let temp_paths: String = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
        .iter()
        .filter(|m| !built.contains(&format!("--without-http_{m}_module")))
        .map(|m| format!("    {m}_temp_path {d}/{m};\n"))
        .collect();
    // Two connections per request in flight (client and upstream side), and some spare.
    let connections = 2 * knobs.streams.max(knobs.max_inflight) + 1024;
    let config = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections {connections};
}}
http {{
    access_log off;
{temp_paths}    keepalive_requests 1000000;
    upstream scripted {{
        server {upstream};
        keepalive 1024;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://scripted;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"#,
        upstream = upstream.addr,
    );
    let conf = dir.path().join("nginx.conf");
    std::fs::write(&conf, config).unwrap();
    let mut cmd = command_on(cpus, &knobs.nginx);
    // -e: the error log before the config is read (the compiled-in one is /var/log/nginx).
    cmd.arg("-p")
        .arg(format!("{d}/"))
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .arg("-c")
        .arg(&conf)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("nginx.out")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("nginx.err")).unwrap());
    let mut proc_ = Proc::spawn("nginx", &mut cmd);
    let url = format!("http://127.0.0.1:{port}");
    // Through nginx to the upstream: proxying works, not only the listener.
    wait_ok(&format!("{url}/v1/models"), 30, &mut proc_).await;
    Target {
        name: "nginx",
        url: format!("{url}/v1/chat/completions"),
        model: UPSTREAM_MODEL.to_string(),
        server: Server::Nginx { proc_, dir },
    }
}

/// `nginx -V`: version and configure arguments (printed on stderr).
fn nginx_version(nginx: &Path) -> String {
    let out = Command::new(nginx)
        .arg("-V")
        .output()
        .unwrap_or_else(|e| panic!("{} -V: {e}", nginx.display()));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An OTLP/HTTP receiver in this process for the traced rows: takes each export (a
/// protobuf `ExportTraceServiceRequest`), counts it, and answers 200 with an empty
/// `ExportTraceServiceResponse`, as a collector does.
struct OtlpSink {
    url: String,
    exports: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl OtlpSink {
    async fn start() -> Self {
        let exports = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let (e, b) = (exports.clone(), bytes.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let (e, b) = (e.clone(), b.clone());
                async move {
                    e.fetch_add(1, Ordering::Relaxed);
                    b.fetch_add(body.len() as u64, Ordering::Relaxed);
                    ([("content-type", "application/x-protobuf")], Bytes::new())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            exports,
            bytes,
        }
    }

    /// Exports and bytes received so far.
    fn received(&self) -> (u64, u64) {
        (
            self.exports.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

async fn start_target(
    name: &str,
    upstream: &ScriptedUpstream,
    knobs: &Knobs,
    cpus: Option<&str>,
    sink: Option<&OtlpSink>,
) -> Target {
    let traced = name.ends_with("-traced");
    let env = match (traced, sink) {
        (true, Some(sink)) => vec![(
            "ASSIST__TELEMETRY__OTLP_ENDPOINT".to_string(),
            sink.url.clone(),
        )],
        _ => Vec::new(),
    };
    let gateway = |passthrough: bool| GatewayOptions {
        passthrough,
        knowledge: !passthrough,
        log_level: knobs.gateway_log.clone(),
        env: env.clone(),
    };
    match name {
        "direct" => Target {
            name: "direct upstream",
            url: format!("{}/v1/chat/completions", upstream.root()),
            model: UPSTREAM_MODEL.to_string(),
            server: Server::InProcess,
        },
        "nginx" => start_nginx(upstream, knobs, cpus).await,
        "litellm" => start_litellm(upstream, knobs, cpus).await,
        "passthrough" | "passthrough-traced" => {
            let g = start_gateway_on(upstream, &gateway(true), cpus).await;
            Target {
                name: if traced {
                    "gateway passthrough, traced"
                } else {
                    "gateway passthrough"
                },
                url: format!("{}/v1/chat/completions", g.url),
                model: UPSTREAM_MODEL.to_string(),
                server: Server::Gateway(g),
            }
        }
        "anthropic" | "responses" => {
            let g = start_gateway_on(upstream, &gateway(true), cpus).await;
            let (name, path) = if name == "anthropic" {
                ("gateway passthrough, Anthropic", "/v1/messages")
            } else {
                ("gateway passthrough, Responses", "/v1/responses")
            };
            Target {
                name,
                url: format!("{}{path}", g.url),
                model: UPSTREAM_MODEL.to_string(),
                server: Server::Gateway(g),
            }
        }
        "brunix" | "brunix-traced" => {
            let g = start_gateway_on(upstream, &gateway(false), cpus).await;
            Target {
                name: if traced {
                    "gateway brunix, traced"
                } else {
                    "gateway brunix"
                },
                url: format!("{}/v1/chat/completions", g.url),
                model: "brunix".to_string(),
                server: Server::Gateway(g),
            }
        }
        other => {
            panic!("BENCH_TARGETS: unknown target {other:?} (direct, nginx, litellm, passthrough, anthropic, responses, brunix, passthrough-traced, brunix-traced)")
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
    let plain = body(&target.url, &target.model, false);
    let streamed = body(&target.url, &target.model, true);
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

    let cpu_before = target.server.pid().and_then(cpu_ticks);
    let at1000 = run.open_loop(&plain, false, 1000.0, knobs.secs).await;
    // The target's own CPU time per answer at a fixed rate: what tracing adds to each
    // request, less sensitive to a busy machine than throughput.
    let cpu_ms_per_1000 = cpu_before
        .zip(target.server.pid().and_then(cpu_ticks))
        .filter(|_| !at1000.latency_us.is_empty())
        .map(|(a, b)| {
            (b - a) as f64 * 1000.0 / clock_ticks() / at1000.latency_us.len() as f64 * 1000.0
        });
    eprintln!("{name}: 1000 req/s: {}", at1000.summary());
    upstream.clear_requests();
    run.recover(&plain, &at1000).await;

    let closed = run
        .closed_loop(&plain, false, knobs.concurrency, knobs.secs)
        .await;
    eprintln!("{name}: closed loop, non-streamed, {}", closed.summary());
    upstream.clear_requests();
    run.recover(&plain, &closed.as_step()).await;
    let mut streams = Vec::new();
    for &c in &knobs.stream_concurrency {
        let s = run.closed_loop(&streamed, true, c, knobs.secs).await;
        eprintln!("{name}: closed loop, streams, {}", s.summary());
        upstream.clear_requests();
        run.recover(&plain, &s.as_step()).await;
        streams.push(s);
    }

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
        cpu_ms_per_1000,
        name,
        ladder,
        at100,
        at1000,
        ttft,
        closed,
        streams,
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
    let knobs = Knobs::from_env();
    // The machine's size, before pinning narrows what this process sees.
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    // Before the runtime: its threads inherit the mask (see the module doc).
    let pinning = pin_self(&knobs);
    eprintln!("bench: {}", pinning.note);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(knobs, pinning, cores));
}

async fn bench(knobs: Knobs, pinning: Pinning, cores: usize) {
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
    let sink = match knobs.targets.iter().any(|t| t.ends_with("-traced")) {
        true => Some(OtlpSink::start().await),
        false => None,
    };
    let mut rows = Vec::new();
    let mut exported = Vec::new();
    for name in &knobs.targets {
        let t = std::time::Instant::now();
        let target = start_target(
            name,
            &upstream,
            &knobs,
            pinning.target.as_deref(),
            sink.as_ref(),
        )
        .await;
        let before = sink.as_ref().map(OtlpSink::received);
        eprintln!(
            "{}: started in {:.1} s",
            target.name,
            t.elapsed().as_secs_f64()
        );
        rows.push(measure(&client, &upstream, &target, &knobs).await);
        if let Server::Nginx { dir, .. } = &target.server {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            if let Some(first) = log.lines().next() {
                eprintln!(
                    "nginx: {} lines in its error log; the first: {first}",
                    log.lines().count()
                );
            }
        }
        drop(target);
        // Let the closed connections go before the next target.
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let (Some(sink), Some((e0, b0))) = (&sink, before) {
            let (e1, b1) = sink.received();
            exported.push((name.clone(), e1 - e0, b1 - b0));
        }
    }
    let base = rows.iter().position(|r| r.name == "direct upstream");

    println!();
    let nginx = knobs
        .targets
        .iter()
        .any(|t| t == "nginx")
        .then(|| nginx_version(&knobs.nginx))
        .and_then(|v| {
            v.lines()
                .find_map(|l| l.strip_prefix("nginx version: nginx/"))
                .map(|v| format!("nginx {v} (one process, buffering off, access log off); "))
        })
        .unwrap_or_default();
    println!(
        "Side by side on 127.0.0.1: {cores} cores, {:.1} GiB; {}. \
         {}-token answers; {nginx}LiteLLM {} worker(s); gateway log level {}.",
        mem_total_gib(),
        pinning.note,
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
    let closed_heads: Vec<String> =
        std::iter::once(format!("req/s, c={}, non-stream", knobs.concurrency))
            .chain(
                knobs
                    .stream_concurrency
                    .iter()
                    .map(|c| format!("streams/s, c={c}")),
            )
            .collect();
    println!(
        "| target | {} | {} | added p50 / p99 @ 100 req/s | added p50 / p99 @ 1,000 req/s | added TTFT p50 / p99 (streams @ {} req/s) | streams open at once / served in full, of {} | RSS idle MiB | RSS load MiB |",
        bounds.join(" | "),
        closed_heads.join(" | "),
        knobs.ttft_rate,
        knobs.streams
    );
    println!(
        "|---|{}---:|---:|---:|---:|---:|---:|",
        "---:|".repeat(bounds.len() + closed_heads.len())
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
        let closed: Vec<String> = std::iter::once(&row.closed)
            .chain(&row.streams)
            .map(Closed::cell)
            .collect();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} | {} |",
            row.name,
            maxes.join(" | "),
            closed.join(" | "),
            latency_cell(&row.at100, base_row.map(|b| &b.at100), is_base, false),
            latency_cell(&row.at1000, base_row.map(|b| &b.at1000), is_base, false),
            latency_cell(&row.ttft, base_row.map(|b| &b.ttft), is_base, true),
            row.held.peak_open,
            row.held.served,
            rss(row.rss_idle_kib),
            rss(row.rss_load_kib),
        );
    }
    print_against_nginx(&rows, &knobs, &closed_heads);
    print_tracing_cost(&rows, &knobs, &closed_heads, &exported);
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

/// Every row against nginx's: throughput as a ratio, p50 at a fixed rate as a difference.
fn print_against_nginx(rows: &[Row], knobs: &Knobs, closed_heads: &[String]) {
    let Some(floor) = rows.iter().find(|r| r.name == "nginx") else {
        println!();
        println!("No nginx row (BENCH_TARGETS): no ratios against it.");
        return;
    };
    let bound = knobs.bounds_ms.iter().cloned().fold(0.0, f64::max);
    let ratio = |v: Option<f64>, base: Option<f64>| match (v, base) {
        (Some(v), Some(b)) => format!("{} ({:.2}×)", thousands(v), v / b),
        (Some(v), None) => thousands(v),
        (None, _) => "failures".to_string(),
    };
    // The ladder's top step met, as a number ("≥" is said in the cell).
    let ladder = |row: &Row| -> (Option<f64>, bool) {
        let ceiling = row
            .ladder
            .last()
            .is_some_and(|s| s.reached() && s.p(0.99) <= bound);
        (max_rate(row, bound), ceiling)
    };
    let p50_diff = |step: &Step, base: &Step| -> String {
        if !step.reached() {
            return format!("unreachable ({:.0} req/s achieved)", step.achieved);
        }
        if !base.reached() {
            return format!("({:.2}; nginx's unreachable)", step.p(0.5));
        }
        format!("{:+.2}", step.p(0.5) - base.p(0.5))
    };
    println!();
    println!(
        "Against nginx: throughput and its ratio to nginx's (×); p50 latency minus nginx's at the same rate, ms (nginx row: its own p50, in brackets). \
         Closed-loop columns: whole answers per second with c clients, each sending its next request when its answer is complete ({} s counted each). \
         The ladder column is the open-loop \"max req/s @ p99 ≤ {bound} ms\" above.",
        knobs.secs
    );
    println!();
    println!(
        "| target | {} | max req/s @ p99 ≤ {bound} ms (ladder) | p50 − nginx's @ 100 req/s | p50 − nginx's @ 1,000 req/s |",
        closed_heads.join(" | ")
    );
    println!("|---|{}---:|---:|---:|", "---:|".repeat(closed_heads.len()));
    let floor_closed: Vec<Option<f64>> = std::iter::once(&floor.closed)
        .chain(&floor.streams)
        .map(Closed::clean_rate)
        .collect();
    let (floor_ladder, _) = ladder(floor);
    for row in rows {
        let closed: Vec<String> = std::iter::once(&row.closed)
            .chain(&row.streams)
            .zip(&floor_closed)
            .map(|(c, base)| ratio(c.clean_rate(), *base))
            .collect();
        let (max, ceiling) = ladder(row);
        let ladder_cell = match max {
            Some(_) => format!(
                "{}{}",
                if ceiling { "≥ " } else { "" },
                ratio(max, floor_ladder)
            ),
            None => "none".to_string(),
        };
        let (at100, at1000) = if row.name == floor.name {
            (
                format!("({:.2})", row.at100.p(0.5)),
                format!("({:.2})", row.at1000.p(0.5)),
            )
        } else {
            (
                p50_diff(&row.at100, &floor.at100),
                p50_diff(&row.at1000, &floor.at1000),
            )
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            row.name,
            closed.join(" | "),
            ladder_cell,
            at100,
            at1000
        );
    }
}

/// A process's CPU time so far (user + system, all threads), in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name (in parentheses, which may hold spaces): fields 3 on.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Each traced row against the same target untraced, in the same run: throughput as a
/// ratio (1.00× = no loss), p50 at a fixed rate as a difference, and what was exported.
fn print_tracing_cost(
    rows: &[Row],
    knobs: &Knobs,
    closed_heads: &[String],
    exported: &[(String, u64, u64)],
) {
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter_map(|traced| {
            let base = traced.name.strip_suffix(", traced")?;
            Some((rows.iter().find(|r| r.name == base)?, traced))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    let bound = knobs.bounds_ms.iter().cloned().fold(0.0, f64::max);
    let ratio = |traced: Option<f64>, base: Option<f64>| match (traced, base) {
        (Some(t), Some(b)) => format!("{} vs {} ({:.3}×)", thousands(t), thousands(b), t / b),
        _ => "failures".to_string(),
    };
    println!();
    println!(
        "Tracing on against off, same run: throughput traced vs untraced (ratio; 1.000× = no loss), p50 traced minus untraced at a fixed rate (ms).          Spans exported over OTLP/HTTP to a receiver in the load process."
    );
    println!();
    println!(
        "| target | {} | max req/s @ p99 ≤ {bound} ms | p50 traced − untraced @ 100 req/s | @ 1,000 req/s | target CPU ms per 1,000 answers @ 1,000 req/s | exports (bytes) |",
        closed_heads.join(" | ")
    );
    println!(
        "|---|{}---:|---:|---:|---:|---:|",
        "---:|".repeat(closed_heads.len())
    );
    let p50_diff = |t: &Step, b: &Step| {
        if t.reached() && b.reached() {
            format!("{:+.2}", t.p(0.5) - b.p(0.5))
        } else {
            "unreachable".to_string()
        }
    };
    for (base, traced) in pairs {
        let closed: Vec<String> = std::iter::once((&traced.closed, &base.closed))
            .chain(traced.streams.iter().zip(&base.streams))
            .map(|(t, b)| ratio(t.clean_rate(), b.clean_rate()))
            .collect();
        let sent = exported
            .iter()
            .find(|(name, _, _)| {
                name.strip_suffix("-traced")
                    .is_some_and(|base| traced.name.contains(base))
            })
            .map_or("-".to_string(), |(_, e, b)| {
                format!("{e} ({})", thousands(*b as f64))
            });
        let cpu = match (traced.cpu_ms_per_1000, base.cpu_ms_per_1000) {
            (Some(t), Some(b)) => format!("{t:.0} vs {b:.0} ({:+.1} %)", (t / b - 1.0) * 100.0),
            _ => "-".to_string(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            base.name,
            closed.join(" | "),
            ratio(max_rate(traced, bound), max_rate(base, bound)),
            p50_diff(&traced.at100, &base.at100),
            p50_diff(&traced.at1000, &base.at1000),
            cpu,
            sent,
        );
    }
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

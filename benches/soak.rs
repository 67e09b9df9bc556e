//! Soak: `cargo bench --bench soak`. Exits non-zero when a check fails.
//!
//! The release gateway (its own process, `brunix` pipeline: rules classifier, reformulator
//! off, embedded BM25 index of `examples/knowledge`, embedded session store) in front of
//! the scripted upstream, which streams each answer token by token. A fixed plan of
//! BENCH_SOAK_REQUESTS mixed requests runs at BENCH_SOAK_CONCURRENCY clients:
//!
//! * multi-turn sessions (`session_id`, only the new question sent each turn, turns sent
//!   one after another), OpenAI or Ollama dialect, each turn streamed or not; two API
//!   keys share the gateway, and every session id is used by both (two conversations);
//! * single questions, both dialects, streamed or not;
//! * about BENCH_SOAK_DISCONNECT of all requests are streams the client drops on purpose
//!   after the first answer token.
//!
//! Checks (any failure exits 1): every request other than the deliberate disconnects got a
//! 200 and its whole answer in the dialect's shape; every session's turn k reached the
//! upstream with that session's questions 1..k-1 and their k-1 answers before it, in order
//! (read back from the requests the scripted upstream recorded), and no turn of the other
//! key's session of the same id; the gateway still answers `/health` at the end.
//! Reported: errors, deliberate disconnects (and upstream streams the gateway cancelled),
//! turns that crossed callers, requests per second, gateway RSS at start, end and peak.
//!
//! Environment (defaults in brackets): BENCH_SOAK_REQUESTS [10000],
//! BENCH_SOAK_CONCURRENCY [100], BENCH_SOAK_DISCONNECT [0.05], BENCH_SOAK_SESSION_SHARE
//! [0.5] (share of requests that are session turns), BENCH_SOAK_TURNS [5] (most turns per
//! session), BENCH_SOAK_TOKENS [20], BENCH_SOAK_TOKEN_DELAY_MS [1] (upstream pace),
//! BENCH_SOAK_LOG [info] (the gateway's log level), BENCH_SOAK_SEED [1].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{env_or, mib, rss_kib, start_gateway, GatewayOptions, RssSampler};
use serde_json::{json, Value};
use support::{Reply, ScriptedUpstream};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    OpenAi,
    Ollama,
}

#[derive(Clone, Debug)]
enum Job {
    /// Turns of one session, sent one after another; `streams[k]` says whether turn k+1
    /// is streamed.
    Session {
        id: usize,
        dialect: Dialect,
        streams: Vec<bool>,
    },
    Single {
        dialect: Dialect,
        stream: bool,
    },
    /// A stream the client drops after the first answer token.
    Disconnect {
        dialect: Dialect,
    },
}

/// SplitMix64: a small deterministic generator, so every run sends the same plan.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }

    fn dialect(&mut self) -> Dialect {
        if self.coin() {
            Dialect::OpenAi
        } else {
            Dialect::Ollama
        }
    }
}

struct Plan {
    jobs: Vec<Job>,
    session_turns: usize,
    singles: usize,
    disconnects: usize,
    sessions: usize,
}

fn plan(total: usize, disconnect: f64, session_share: f64, max_turns: usize, seed: u64) -> Plan {
    let mut rng = Rng(seed);
    let disconnects = (total as f64 * disconnect).round() as usize;
    let mut session_turns = (total as f64 * session_share).round() as usize;
    session_turns = session_turns.min(total - disconnects);
    let singles = total - disconnects - session_turns;
    let mut jobs = Vec::new();
    let mut left = session_turns;
    let mut id = 0;
    while left > 0 {
        let turns = (2 + rng.below(max_turns.max(2) as u64 - 1) as usize).min(left);
        let streams = (0..turns).map(|_| rng.coin()).collect();
        jobs.push(Job::Session {
            id,
            dialect: rng.dialect(),
            streams,
        });
        id += 1;
        left -= turns;
    }
    for _ in 0..singles {
        jobs.push(Job::Single {
            dialect: rng.dialect(),
            stream: rng.coin(),
        });
    }
    for _ in 0..disconnects {
        jobs.push(Job::Disconnect {
            dialect: rng.dialect(),
        });
    }
    // Fisher–Yates, so the kinds interleave.
    for i in (1..jobs.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        jobs.swap(i, j);
    }
    Plan {
        jobs,
        session_turns,
        singles,
        disconnects,
        sessions: id,
    }
}

const QUESTIONS: [&str; 4] = [
    "Which environment variable overrides the server port?",
    "How do I run several queries in parallel?",
    "¿Cómo configuro el puerto del servidor?",
    "Explain how the retry policy works",
];

/// The marker that identifies a session's turn in what the upstream receives.
fn marker(session: usize, turn: usize) -> String {
    format!("[soak s{session} t{turn}]")
}

/// The two callers' keys; session job `id` is the caller `id % 2`'s conversation under
/// the session id `soak-{id / 2}`, which the other caller uses too.
const KEYS: [&str; 2] = ["soak-key-alice", "soak-key-bob"];

fn key_of(id: usize) -> &'static str {
    KEYS[id % 2]
}

fn session_of(id: usize) -> String {
    format!("soak-{}", id / 2)
}

struct Gateway {
    url: String,
    tokens: usize,
}

impl Gateway {
    fn request(
        &self,
        dialect: Dialect,
        stream: bool,
        content: String,
        session: Option<String>,
    ) -> (String, Value) {
        // The same body in both dialects; only the path and the answer's shape differ.
        let mut body = json!({"model": "brunix", "stream": stream,
            "messages": [{"role": "user", "content": content}]});
        if let Some(s) = session {
            body["session_id"] = json!(s);
        }
        let path = match dialect {
            Dialect::OpenAi => "/v1/chat/completions",
            Dialect::Ollama => "/api/chat",
        };
        (format!("{}{path}", self.url), body)
    }

    /// The answer's text, checked against the dialect's shape; an error says what was wrong.
    fn answer_text(&self, dialect: Dialect, stream: bool, body: &str) -> Result<String, String> {
        let bad = |why: &str| format!("{why}: {:.300}", body);
        let text = match (dialect, stream) {
            (Dialect::OpenAi, false) => {
                let v: Value = serde_json::from_str(body).map_err(|_| bad("not JSON"))?;
                v["choices"][0]["message"]["content"]
                    .as_str()
                    .ok_or_else(|| bad("no choices[0].message.content"))?
                    .to_string()
            }
            (Dialect::OpenAi, true) => {
                if !body.ends_with("data: [DONE]\n\n") {
                    return Err(bad("SSE stream does not end with [DONE]"));
                }
                let mut text = String::new();
                for event in body.split("\n\n").filter(|e| !e.is_empty()) {
                    let data = event
                        .strip_prefix("data: ")
                        .ok_or_else(|| bad("event without data:"))?;
                    if data == "[DONE]" {
                        continue;
                    }
                    let v: Value = serde_json::from_str(data).map_err(|_| bad("event not JSON"))?;
                    if v.get("error").is_some() {
                        return Err(bad("error event"));
                    }
                    if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                        text.push_str(t);
                    }
                }
                text
            }
            (Dialect::Ollama, false) => {
                let v: Value = serde_json::from_str(body).map_err(|_| bad("not JSON"))?;
                if v["done"] != json!(true) {
                    return Err(bad("not done"));
                }
                v["message"]["content"]
                    .as_str()
                    .ok_or_else(|| bad("no message.content"))?
                    .to_string()
            }
            (Dialect::Ollama, true) => {
                let mut text = String::new();
                let mut done = false;
                for line in body.lines() {
                    let v: Value = serde_json::from_str(line).map_err(|_| bad("line not JSON"))?;
                    if v.get("error").is_some() {
                        return Err(bad("error line"));
                    }
                    if let Some(t) = v["message"]["content"].as_str() {
                        text.push_str(t);
                    }
                    done = v["done"] == json!(true);
                }
                if !done {
                    return Err(bad("NDJSON stream does not end with done: true"));
                }
                text
            }
        };
        let expected: String = (0..self.tokens).map(|i| format!("tok{i} ")).collect();
        if !text.contains(expected.trim_end()) {
            return Err(bad("answer text incomplete"));
        }
        Ok(text)
    }

    /// One request read to its end and checked.
    #[allow(clippy::too_many_arguments)]
    async fn ask(
        &self,
        client: &reqwest::Client,
        key: &str,
        dialect: Dialect,
        stream: bool,
        content: String,
        session: Option<String>,
    ) -> Result<(), String> {
        let (url, body) = self.request(dialect, stream, content, session);
        let r = client
            .post(&url)
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = r.status();
        let text = r.text().await.map_err(|e| format!("body: {e}"))?;
        if status != 200 {
            return Err(format!("HTTP {status}: {text:.300}"));
        }
        self.answer_text(dialect, stream, &text).map(|_| ())
    }

    /// A stream dropped on purpose once the first answer token arrived.
    async fn disconnect(
        &self,
        client: &reqwest::Client,
        key: &str,
        dialect: Dialect,
        content: String,
    ) -> Result<(), String> {
        let (url, body) = self.request(dialect, true, content, None);
        let mut r = client
            .post(&url)
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("send: {e}"))?;
        if r.status() != 200 {
            return Err(format!("HTTP {}", r.status()));
        }
        let mut seen = Vec::new();
        while let Some(c) = r.chunk().await.map_err(|e| format!("body: {e}"))? {
            seen.extend_from_slice(&c);
            if seen.windows(4).any(|w| w == b"tok0") {
                return Ok(()); // dropping `r` closes the connection mid-stream
            }
        }
        Err("the stream ended before its first token".into())
    }
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    disconnects: AtomicU64,
    errors: AtomicU64,
    first_errors: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, r: Result<(), String>, deliberate: bool) {
        match r {
            Ok(()) if deliberate => self.disconnects.fetch_add(1, Ordering::Relaxed),
            Ok(()) => self.ok.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                let mut first = self.first_errors.lock().unwrap();
                if first.len() < 5 {
                    first.push(e);
                }
                self.errors.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// Checks every session's turns against what the upstream received. Returns how many were
/// checked, how many held a turn of the other caller's session of the same id, and the
/// problems.
fn check_sessions(upstream: &ScriptedUpstream, plan: &Plan) -> (usize, usize, Vec<String>) {
    // Upstream requests by the marker of the question they answer.
    let mut by_marker: HashMap<String, Vec<Value>> = HashMap::new();
    for r in upstream.requests() {
        let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
        let Some(last) = messages.last().and_then(|m| m["content"].as_str()) else {
            continue;
        };
        if let Some(at) = last.find("[soak s") {
            if let Some(end) = last[at..].find(']') {
                by_marker
                    .entry(last[at..=at + end].to_string())
                    .or_default()
                    .push(r.body["messages"].clone());
            }
        }
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut crossed = 0;
    for job in &plan.jobs {
        let Job::Session { id, streams, .. } = job else {
            continue;
        };
        for k in 1..=streams.len() {
            checked += 1;
            let m = marker(*id, k);
            let seen = by_marker.get(&m).map(Vec::as_slice).unwrap_or(&[]);
            let [messages] = seen else {
                problems.push(format!(
                    "{m}: the upstream received it {} times",
                    seen.len()
                ));
                continue;
            };
            let messages = messages.as_array().cloned().unwrap_or_default();
            // The other caller's session of the same id has the job id of the other parity.
            let other = id ^ 1;
            let foreign = format!("[soak s{other} t");
            if messages
                .iter()
                .any(|x| x["content"].as_str().is_some_and(|c| c.contains(&foreign)))
            {
                crossed += 1;
            }
            // The conversation before the new question: user/assistant pairs in order.
            let earlier = &messages[..messages.len().saturating_sub(1)];
            let users: Vec<&str> = earlier
                .iter()
                .filter(|x| x["role"] == "user")
                .filter_map(|x| x["content"].as_str())
                .collect();
            let answers = earlier
                .iter()
                .filter(|x| x["role"] == "assistant")
                .filter(|x| x["content"].as_str().is_some_and(|c| c.contains("tok0")))
                .count();
            let expected: Vec<String> = (1..k).map(|j| marker(*id, j)).collect();
            let in_order = users.len() == expected.len()
                && users
                    .iter()
                    .zip(&expected)
                    .all(|(u, e)| u.contains(e.as_str()));
            if !in_order || answers != k - 1 {
                let found: Vec<String> = users
                    .iter()
                    .map(|u| {
                        u.find("[soak")
                            .map_or("?".into(), |a| u[a..].chars().take(16).collect())
                    })
                    .collect();
                problems.push(format!(
                    "{m}: earlier questions {found:?} and {answers} answers, expected {expected:?} and {} answers",
                    k - 1
                ));
            }
        }
    }
    (checked, crossed, problems)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ok = runtime.block_on(soak());
    drop(runtime);
    if !ok {
        std::process::exit(1);
    }
}

async fn soak() -> bool {
    let total: usize = env_or("BENCH_SOAK_REQUESTS", 10_000);
    let concurrency: usize = env_or("BENCH_SOAK_CONCURRENCY", 100);
    let disconnect: f64 = env_or("BENCH_SOAK_DISCONNECT", 0.05);
    let session_share: f64 = env_or("BENCH_SOAK_SESSION_SHARE", 0.5);
    let max_turns: usize = env_or("BENCH_SOAK_TURNS", 5);
    let tokens: usize = env_or("BENCH_SOAK_TOKENS", 20);
    let delay = Duration::from_millis(env_or("BENCH_SOAK_TOKEN_DELAY_MS", 1));
    let log_level: String = env_or("BENCH_SOAK_LOG", "info".to_string());
    let seed: u64 = env_or("BENCH_SOAK_SEED", 1);
    common::kill_children_on_signal();

    let plan = Arc::new(plan(total, disconnect, session_share, max_turns, seed));
    let upstream = ScriptedUpstream::start().await;
    upstream.set_default(Reply::Tokens {
        tokens: (0..tokens).map(|i| format!("tok{i} ")).collect(),
        delay,
        finish: "stop",
    });
    let gateway = start_gateway(
        &upstream,
        &GatewayOptions {
            passthrough: false,
            knowledge: true,
            log_level,
            // Every earlier turn of a session fits in the window the model gets; two
            // callers, each with its own key.
            env: vec![
                (
                    "ASSIST__SESSIONS__WINDOW_TURNS".into(),
                    (max_turns + 1).to_string(),
                ),
                ("ASSIST__SERVER__API_KEYS".into(), KEYS.join(",")),
            ],
            ..GatewayOptions::default()
        },
    )
    .await;
    let pid = gateway.pid();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_start = rss_kib(pid);
    let sampler = RssSampler::start(pid);

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency * 2)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let gw = Arc::new(Gateway {
        url: gateway.url.clone(),
        tokens,
    });
    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicUsize::new(0));
    eprintln!(
        "soak: {total} requests ({} session turns in {} sessions, {} single questions, {} deliberate disconnects), {concurrency} clients",
        plan.session_turns, plan.sessions, plan.singles, plan.disconnects
    );
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (plan, gw, tally, next, client) = (
            plan.clone(),
            gw.clone(),
            tally.clone(),
            next.clone(),
            client.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut n = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = plan.jobs.get(i) else {
                    break;
                };
                n += 1;
                let q = QUESTIONS[n % QUESTIONS.len()];
                match job {
                    Job::Session {
                        id,
                        dialect,
                        streams,
                    } => {
                        for (k, stream) in streams.iter().enumerate() {
                            let content = format!("{} {q}", marker(*id, k + 1));
                            let r = gw
                                .ask(
                                    &client,
                                    key_of(*id),
                                    *dialect,
                                    *stream,
                                    content,
                                    Some(session_of(*id)),
                                )
                                .await;
                            tally.record(r, false);
                        }
                    }
                    Job::Single { dialect, stream } => {
                        let r = gw
                            .ask(&client, KEYS[n % 2], *dialect, *stream, q.to_string(), None)
                            .await;
                        tally.record(r, false);
                    }
                    Job::Disconnect { dialect } => {
                        let r = gw
                            .disconnect(&client, KEYS[n % 2], *dialect, q.to_string())
                            .await;
                        tally.record(r, true);
                    }
                }
            }
        }));
    }
    let mut progress = tokio::time::interval(Duration::from_secs(10));
    progress.tick().await;
    let all = futures::future::join_all(workers);
    tokio::pin!(all);
    loop {
        tokio::select! {
            done = &mut all => {
                for w in done {
                    w.expect("soak worker");
                }
                break;
            }
            _ = progress.tick() => {
                let done = tally.ok.load(Ordering::Relaxed) + tally.errors.load(Ordering::Relaxed)
                    + tally.disconnects.load(Ordering::Relaxed);
                eprintln!("soak: {done} / {total} after {:.0} s, RSS {:.1} MiB", started.elapsed().as_secs_f64(), mib(rss_kib(pid)));
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    // Let cancelled streams and session writes settle before reading memory and records.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_end = rss_kib(pid);
    let rss_peak = sampler.stop().await;
    let healthy = reqwest::get(format!("{}/health", gateway.url))
        .await
        .is_ok_and(|r| r.status() == 200);
    let (checked, crossed, problems) = check_sessions(&upstream, &plan);

    let ok = tally.ok.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    let disconnects = tally.disconnects.load(Ordering::Relaxed);
    println!();
    println!(
        "Soak: {total} requests at {concurrency} clients through the gateway (brunix pipeline, OpenAI + Ollama dialects, streams and non-streams), {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| figure | value |");
    println!("|---|---:|");
    println!("| requests answered in full | {ok} |");
    println!("| errors | {errors} |");
    println!(
        "| deliberate disconnects | {disconnects} of {} |",
        plan.disconnects
    );
    println!(
        "| upstream streams the gateway cancelled | {} |",
        upstream.cancelled()
    );
    println!(
        "| session turns in order | {} of {checked} ({} sessions, two keys sharing each id) |",
        checked - problems.len(),
        plan.sessions
    );
    println!("| turns that crossed callers | {crossed} |");
    println!("| requests/s | {:.0} |", total as f64 / seconds);
    println!("| duration | {seconds:.1} s |");
    println!(
        "| gateway RSS start / end / peak | {:.1} / {:.1} / {:.1} MiB |",
        mib(rss_start),
        mib(rss_end),
        mib(rss_peak)
    );
    println!(
        "| /health at the end | {} |",
        if healthy { "200" } else { "FAILED" }
    );
    let mut passed = true;
    if errors > 0 {
        passed = false;
        println!();
        println!("FAILED: {errors} requests failed; first: ");
        for e in tally.first_errors.lock().unwrap().iter() {
            println!("  {e}");
        }
    }
    if disconnects != plan.disconnects as u64 && errors == 0 {
        passed = false;
        println!(
            "FAILED: {disconnects} deliberate disconnects of {}",
            plan.disconnects
        );
    }
    if !problems.is_empty() {
        passed = false;
        println!();
        println!(
            "FAILED: {} session turns out of order; first:",
            problems.len()
        );
        for p in problems.iter().take(5) {
            println!("  {p}");
        }
    }
    if crossed > 0 {
        passed = false;
        println!("FAILED: {crossed} turns held the other caller's conversation");
    }
    if !healthy {
        passed = false;
        println!("FAILED: the gateway no longer answers /health");
    }
    println!();
    println!("{}", if passed { "soak passed" } else { "soak FAILED" });
    drop(gateway);
    passed
}

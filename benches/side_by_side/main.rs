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
//! * `hyper`, `axum` (not run by default): the floor of the gateway's own HTTP stack, two
//!   proxies with no gateway in them (hyper's server and client; axum's router in front of
//!   reqwest), run from this executable (`floor`), writing the events of a stream that are
//!   ready at once in one write, as nginx and the gateway do;
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
//! ratios and p50 differences; then each target's CPU time per answer in the closed loops
//! and nginx's over it, the ratio of what one core serves, which needs no load side
//! faster than nginx (on two cores the load side is not: nginx's core was about half
//! idle in the closed loops, 2026-11-28). A closed-loop throughput counts as a target's
//! ceiling only when its CPU time filled its core (`report::SATURATED`).
//! See docs/benchmarks.md, "Against LiteLLM and nginx", for what each column means.
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
//! hyper, axum, anthropic, responses, passthrough-traced, brunix-traced);
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
//! BENCH_GATEWAY_LOG [warn] the gateway's log level (LiteLLM's logging is off too);
//! BENCH_OHA [~/.cache/assist-gateway/oha/bin/oha when there] oha's executable, which then
//! drives the closed-loop columns (`off`: the bench's own client);
//! BENCH_RATES [20,100,1000] the fixed rates of the latency columns (the target's CPU and
//! stages are read at the last).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../../tests/it/support/mod.rs"]
mod support;

#[path = "../common/mod.rs"]
mod common;
mod floor;
mod knobs;
mod load;
mod report;
mod targets;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{
    command_on, env_or, free_port, mib, percentile, process_tree, rss_tree_kib, start_gateway_on,
    thousands, wait_ok, GatewayOptions, GatewayProcess, OtlpSink, Proc, RssSampler,
};
use serde_json::json;
use support::{Reply, ScriptedUpstream, UPSTREAM_MODEL};
use tokio::time::Instant;

use floor::start_floor;
use knobs::*;
use load::*;
use report::*;
use targets::*;

/// A retrieval question: the rules classifier sends it through retrieval in `brunix`.
const QUESTION: &str = "Which environment variable overrides the server port?";

/// Everything measured for one target.
struct Row {
    name: &'static str,
    /// The target's CPU milliseconds per 1,000 answers at the highest fixed rate (utime +
    /// stime).
    cpu_ms_per_1000: Option<f64>,
    /// What the rest of the machine did during the fixed-rate runs.
    elsewhere: Option<Elsewhere>,
    /// The gateway's pipeline stages at the highest fixed rate: (stage, milliseconds per 1,000
    /// answers), from its `/metrics` before and after (gateway rows only).
    stages: Vec<(String, f64)>,
    /// Ladder steps in order, until the first step over the largest bound.
    ladder: Vec<Step>,
    /// One open-loop run at each of `Knobs::rates`, in order.
    fixed: Vec<Step>,
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

/// `target_cpus`: how many CPUs the target may use (one when pinned).
async fn measure(
    client: &reqwest::Client,
    upstream: &ScriptedUpstream,
    target: &Target,
    target_cpus: f64,
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

    // The fixed rates, lowest first; the target's CPU and its stages at the highest.
    let mut fixed = Vec::new();
    let (mut stages, mut cpu_ms_per_1000) = (Vec::new(), None);
    let machine_before = MachineReading::now();
    for (i, &rate) in knobs.rates.iter().enumerate() {
        let top = i + 1 == knobs.rates.len();
        let stages_before = stage_seconds(client, &target.server).await;
        let cpu_before = target.server.pid().and_then(cpu_ticks);
        let step = run.open_loop(&plain, false, rate, knobs.secs).await;
        if top {
            let answers = step.latency_us.len();
            stages = per_1000_answers(
                &stages_before,
                &stage_seconds(client, &target.server).await,
                answers,
            );
            // The target's own CPU time per answer at a fixed rate: what tracing adds to
            // each request, less sensitive to a busy machine than throughput.
            // (µs per answer = ms per 1,000 answers.)
            cpu_ms_per_1000 = cpu_before
                .zip(target.server.pid().and_then(cpu_ticks))
                .and_then(|(a, b)| CpuPerAnswer::between(a, b, answers as u64))
                .map(|cpu| cpu.total_us());
        }
        eprintln!("{name}: {rate} req/s: {}", step.summary());
        upstream.clear_requests();
        run.recover(&plain, &step).await;
        fixed.push(step);
    }
    let elsewhere = machine_before
        .zip(MachineReading::now())
        .and_then(|(a, b)| a.until(&b));

    let closed = closed_loop(&run, target, target_cpus, &plain, false, knobs.concurrency).await;
    eprintln!("{name}: closed loop, non-streamed, {}", closed.summary());
    upstream.clear_requests();
    run.recover(&plain, &closed.as_step()).await;
    let mut streams = Vec::new();
    for &c in &knobs.stream_concurrency {
        let s = closed_loop(&run, target, target_cpus, &streamed, true, c).await;
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
        elsewhere,
        stages,
        name,
        ladder,
        fixed,
        ttft,
        closed,
        streams,
        held,
        rss_idle_kib,
        rss_load_kib,
    }
}

/// A closed-loop run, with the target's CPU time per answer over it (none for the direct
/// row, whose upstream is this process).
async fn closed_loop(
    run: &Runner<'_>,
    target: &Target,
    target_cpus: f64,
    body: &Bytes,
    stream: bool,
    concurrency: usize,
) -> Closed {
    let pid = target.server.pid();
    let before = pid.and_then(cpu_ticks);
    let mut closed = run
        .closed_loop(body, stream, concurrency, run.knobs.secs)
        .await;
    let after = pid.and_then(cpu_ticks);
    closed.cpu = before
        .zip(after)
        .and_then(|(a, b)| CpuPerAnswer::between(a, b, closed.answered));
    closed.target_cpus = target_cpus;
    closed
}

/// The gateway's allocator, for the floor proxies this executable also runs (`floor`). It
/// is the load client's and the in-process upstream's allocator too (since 2026-12-06;
/// before, the system's): figures of earlier runs compare with that in mind.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Started again as a floor proxy: that, and nothing else.
    floor::serve_if_asked();
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
    // Unpinned, a target may use every CPU of the machine.
    let target_cpus = match pinning.target {
        Some(_) => 1.0,
        None => cores.max(1) as f64,
    };
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
        rows.push(measure(&client, &upstream, &target, target_cpus, &knobs).await);
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
    let rate_heads: Vec<String> = knobs
        .rates
        .iter()
        .map(|r| format!("added p50 / p99 @ {} req/s", thousands(*r)))
        .collect();
    println!(
        "| target | {} | {} | {} | added TTFT p50 / p99 (streams @ {} req/s) | streams open at once / served in full, of {} | RSS idle MiB | RSS load MiB |",
        bounds.join(" | "),
        closed_heads.join(" | "),
        rate_heads.join(" | "),
        knobs.ttft_rate,
        knobs.streams
    );
    println!(
        "|---|{}---:|---:|---:|---:|",
        "---:|".repeat(bounds.len() + closed_heads.len() + rate_heads.len())
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
        let fixed: Vec<String> = row
            .fixed
            .iter()
            .enumerate()
            .map(|(i, step)| latency_cell(step, base_row.map(|b| &b.fixed[i]), is_base, false))
            .collect();
        println!(
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} |",
            row.name,
            maxes.join(" | "),
            closed.join(" | "),
            fixed.join(" | "),
            latency_cell(&row.ttft, base_row.map(|b| &b.ttft), is_base, true),
            row.held.peak_open,
            row.held.served,
            rss(row.rss_idle_kib),
            rss(row.rss_load_kib),
        );
    }
    print_against_nginx(&rows, &knobs, &closed_heads);
    print_cpu_per_answer(&rows, &closed_heads);
    print_tracing_cost(&rows, &knobs, &closed_heads, &exported);
    print_stages(&rows);
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

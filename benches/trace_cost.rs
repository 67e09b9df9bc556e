//! What tracing costs the gateway, counted in instructions: `benches/trace-cost.sh` (or
//! `cargo bench --bench trace_cost` with valgrind installed).
//!
//! Throughput and CPU time per answer scatter by ±20 % between runs on a virtual machine,
//! more than the 5 % to be shown, so this benchmark counts what does not scatter: the
//! instructions the gateway's process executes (every thread: the runtime's workers and
//! the exporter's), under valgrind's `callgrind` (no cache simulation).
//!
//! For each target (`passthrough`: the upstream's model forwarded; `brunix`: the assistant
//! pipeline, rules classifier, BM25 over `examples/knowledge`), untraced and traced (spans
//! exported over OTLP/HTTP to a receiver in this process, which answers as a collector
//! does), the release gateway is started under callgrind with its counting off; it answers
//! `TRACE_COST_WARM` (100) questions, then counting is switched on (`callgrind_control
//! -i on`) for `TRACE_COST_N` (2,000) more, and off again; their count over
//! `TRACE_COST_N` is the instructions one answer costs. Start-up and warm-up are not
//! counted at all: the earlier way (two runs of 100 and 2,100 answers, subtracted) kept
//! the scatter of work done once at start, such as the metrics clock's calibration,
//! whose length is timed in wall-clock time (up to about 2,000 instructions an answer
//! between two runs, a tenth of what tracing costs). Traced, each switch waits for the
//! exporter's next export, so the count holds the sending of the counted answers' spans
//! (give or take a span or two at each end, [`next_export`]). Answers
//! alternate streamed and whole, four at a time, 20 tokens each from the scripted
//! upstream (in this process, OpenAI's SSE byte for byte).
//! `TRACE_COST_REPEAT` (3) runs per row show how steady the count is.
//! `TRACE_COST_ANSWERS=streamed` (or `whole`) counts one kind of answer alone, to see
//! where a stream's cost goes apart from a whole answer's.
//!
//! Environment: TRACE_COST_N, TRACE_COST_WARM, TRACE_COST_REPEAT, TRACE_COST_TARGETS
//! [passthrough,brunix], TRACE_COST_ANSWERS [mixed; streamed; whole],
//! TRACE_COST_VALGRIND [valgrind], TRACE_COST_KEEP [none]: a
//! directory to keep callgrind's counts per function in (`{target}-{traced|untraced}-
//! {run}.callgrind`, for `callgrind_annotate`: where the difference goes).
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

use common::{env_or, start_gateway_on, thousands, GatewayOptions, OtlpSink};
use futures::StreamExt;
use serde_json::json;
use support::{Reply, ScriptedUpstream, UPSTREAM_MODEL};

/// A retrieval question: the rules classifier sends it through retrieval in `brunix`.
const QUESTION: &str = "Which environment variable overrides the server port?";
/// Answers in flight at once.
const CLIENTS: usize = 4;

/// The instructions callgrind counted, from its output's `totals:` line (its `summary:`
/// says 0 when counting started switched off).
fn instructions(out: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(out).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("totals:"))
        .unwrap_or_else(|| panic!("no instruction count in {}", out.display()));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Switches callgrind's counting in process `pid` `on` or off; returns once it is done.
fn switch(valgrind: &str, pid: u32, on: bool) {
    // callgrind_control comes with valgrind, beside it.
    let control = std::path::Path::new(valgrind)
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map_or_else(
            || "callgrind_control".into(),
            |dir| dir.join("callgrind_control"),
        );
    let status = std::process::Command::new(&control)
        .args(["-i", if on { "on" } else { "off" }, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", control.display()));
    assert!(status.success(), "callgrind_control -i failed: {status}");
}

/// Waits for the exporter's next export, which sends every span it holds (it exports
/// every second): at most 10 s, for when it holds none and so sends nothing. An export
/// already on its way when this starts counts too, so a span or two that ended just
/// before may still be queued: at the switch on (warm-up spans counted) as at the switch
/// off (counted spans not), which cancel out on average. Waiting for a second export
/// would not: the queue is then empty, nothing is sent, and the wait counts 10 s of the
/// gateway idle (timers, the exporter's wake-ups; the run that tried it counted about
/// 2,000 instructions a traced answer more).
async fn next_export(sink: &OtlpSink) {
    let exports = sink.received().0;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while sink.received().0 == exports && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Which answers are asked for: `TRACE_COST_ANSWERS`.
#[derive(Clone, Copy)]
enum Answers {
    /// Streamed and whole in turn.
    Mixed,
    Streamed,
    Whole,
}

impl Answers {
    fn from_env() -> Self {
        match env_or("TRACE_COST_ANSWERS", "mixed".to_string()).as_str() {
            "mixed" => Self::Mixed,
            "streamed" => Self::Streamed,
            "whole" => Self::Whole,
            other => panic!("TRACE_COST_ANSWERS={other}: mixed, streamed or whole"),
        }
    }

    fn streamed(self, i: usize) -> bool {
        match self {
            Self::Mixed => i.is_multiple_of(2),
            Self::Streamed => true,
            Self::Whole => false,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Mixed => "half streamed",
            Self::Streamed => "all streamed",
            Self::Whole => "all whole",
        }
    }
}

/// Answer `n` questions of `model` at `url`, `CLIENTS` at a time, streamed or whole as
/// `answers` says; each must come back complete.
async fn answer(client: &reqwest::Client, url: &str, model: &str, n: usize) {
    let answers = Answers::from_env();
    futures::stream::iter(0..n)
        .for_each_concurrent(CLIENTS, |i| async move {
            let stream = answers.streamed(i);
            let body = json!({"model": model, "stream": stream,
                "messages": [{"role": "user", "content": QUESTION}]});
            let response = client.post(url).json(&body).send().await.unwrap();
            assert_eq!(response.status(), 200, "answer {i}");
            let text = response.text().await.unwrap();
            if stream {
                assert!(text.ends_with("data: [DONE]\n\n"), "stream {i}: {text}");
            } else {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert!(v["choices"][0]["message"]["content"].is_string(), "{text}");
            }
        })
        .await;
}

/// The instructions the gateway under callgrind executes for `n` questions, after `warm`.
#[allow(clippy::too_many_arguments)]
async fn count(
    upstream: &ScriptedUpstream,
    client: &reqwest::Client,
    valgrind: &str,
    target: &str,
    sink: Option<&OtlpSink>,
    warm: usize,
    n: usize,
    run: usize,
) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("valgrind.log");
    let out = dir.path().join("callgrind.out");
    let passthrough = target == "passthrough";
    let kind = if sink.is_some() { "traced" } else { "untraced" };
    let mut env = Vec::new();
    if let Some(sink) = sink {
        env.push((
            "ASSIST__TELEMETRY__OTLP_ENDPOINT".to_string(),
            sink.url.clone(),
        ));
    }
    let opts = GatewayOptions {
        passthrough,
        knowledge: !passthrough,
        log_level: "warn".into(),
        env,
        wrapper: vec![
            valgrind.to_string(),
            "--tool=callgrind".into(),
            "--instr-atstart=no".into(),
            format!("--callgrind-out-file={}", out.display()),
            format!("--log-file={}", log.display()),
        ],
        ready_secs: 300,
    };
    let mut gateway = start_gateway_on(upstream, &opts, None).await;
    let model = if passthrough {
        UPSTREAM_MODEL
    } else {
        "brunix"
    };
    let url = format!("{}/v1/chat/completions", gateway.url);
    let pid = gateway.pid();
    answer(client, &url, model, warm).await;
    // Traced, counting starts and stops with nothing queued: the warm-up's spans sent
    // before, the counted answers' last ones sent within.
    if let Some(sink) = sink {
        next_export(sink).await;
    }
    switch(valgrind, pid, true);
    let before = sink.map(|s| s.received().0);
    answer(client, &url, model, n).await;
    if let Some(sink) = sink {
        next_export(sink).await;
    }
    switch(valgrind, pid, false);
    if let (Some(sink), Some(before)) = (sink, before) {
        assert!(sink.received().0 > before, "a traced run exported no spans");
    }
    assert!(
        gateway.proc_.terminate(300),
        "the gateway did not stop on SIGTERM"
    );
    if let Some(keep) = std::env::var_os("TRACE_COST_KEEP") {
        let kept = std::path::Path::new(&keep).join(format!("{target}-{kind}-{run}.callgrind"));
        std::fs::copy(&out, kept).unwrap();
    }
    instructions(&out)
}

#[tokio::main]
async fn main() {
    common::kill_children_on_signal();
    let n: usize = env_or("TRACE_COST_N", 2000);
    let warm: usize = env_or("TRACE_COST_WARM", 100);
    let repeat: usize = env_or("TRACE_COST_REPEAT", 3);
    let valgrind: String = env_or("TRACE_COST_VALGRIND", "valgrind".to_string());
    let targets: String = env_or("TRACE_COST_TARGETS", "passthrough,brunix".to_string());
    let upstream = ScriptedUpstream::start().await;
    upstream.set_default(Reply::Tokens {
        tokens: (0..20).map(|i| format!("tok{i} ")).collect(),
        delay: Duration::ZERO,
        finish: "stop",
    });
    let sink = OtlpSink::start().await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    println!(
        "Instructions per answer (valgrind callgrind, every thread of the gateway; {n} answers \
         counted after {warm} of warm-up, {}, {CLIENTS} at a time; {repeat} runs each)\n",
        Answers::from_env().describe()
    );
    println!("| target | untraced, per run | traced, per run | traced ÷ untraced (medians) |");
    println!("|---|---:|---:|---:|");
    for target in targets.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let mut per = [Vec::new(), Vec::new()];
        for r in 0..repeat {
            for (traced, runs) in per.iter_mut().enumerate() {
                let sink = (traced == 1).then_some(&sink);
                let counted =
                    count(&upstream, &client, &valgrind, target, sink, warm, n, r + 1).await;
                let each = counted as f64 / n as f64;
                eprintln!(
                    "{target}, {}, run {}: {} instructions per answer",
                    if traced == 1 { "traced" } else { "untraced" },
                    r + 1,
                    thousands(each)
                );
                runs.push(each);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            let m = v.len() / 2;
            if v.len().is_multiple_of(2) {
                (v[m - 1] + v[m]) / 2.0
            } else {
                v[m]
            }
        };
        let show = |v: &[f64]| {
            v.iter()
                .map(|x| thousands(*x))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let (untraced, traced) = (show(&per[0]), show(&per[1]));
        let ratio = median(&mut per[1]) / median(&mut per[0]);
        println!(
            "| {target} | {untraced} | {traced} | {ratio:.3} ({:+.1} %) |",
            (ratio - 1.0) * 100.0
        );
    }
    let (exports, bytes) = sink.received();
    println!(
        "\nThe receiver took {exports} exports, {:.1} MB.",
        bytes as f64 / 1e6
    );
}

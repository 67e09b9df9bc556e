//! Retrieval benchmark: `cargo bench --bench retrieval`.
//!
//! Builds a synthetic knowledge base of N chunks (English-like text from a fixed
//! vocabulary, 384-dimensional vectors) in the real tantivy index and the real embedded
//! Qdrant engine, in a temporary folder, then reports ingestion throughput (indexing
//! only: no embedding model) and search latency p50/p99 for BM25, vectors and the fused
//! hybrid, excluding the query embedding.
//!
//! A second table times long questions (1 KB, 100 KB, 1 MB of distinct words) against a
//! 10,000-chunk BM25 index: the search a request runs (which reads at most
//! `retrieval.max_query_chars` of the question), and the whole text through BM25 (which
//! shows the query analysis is linear in its length).
//!
//! Environment: BENCH_CHUNKS (comma-separated sizes, default "10000,100000"),
//! BENCH_QUERIES (default 300), BENCH_LONG_RUNS (default 10).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::sync::Arc;
use std::time::Instant;

use assist_gateway::config::{EmbeddingProvider, Settings};
use assist_gateway::embed;
use assist_gateway::retrieval::edge::EdgeStore;
use assist_gateway::retrieval::hybrid::{Mode, Retriever};
use assist_gateway::retrieval::lexical::TantivyIndex;
use assist_gateway::retrieval::{
    DocType, KnowledgeChunk, Lang, Languages, LexicalIndex, VectorPoint, VectorStore,
};

const DIM: usize = 384;
const WORDS: &[&str] = &[
    "endpoint",
    "register",
    "param",
    "result",
    "handler",
    "route",
    "query",
    "database",
    "select",
    "insert",
    "update",
    "delete",
    "transaction",
    "error",
    "retry",
    "timeout",
    "task",
    "channel",
    "spawn",
    "await",
    "config",
    "deploy",
    "health",
    "metric",
    "log",
    "token",
    "user",
    "order",
    "payment",
    "cache",
    "index",
    "search",
    "vector",
    "chunk",
    "session",
    "stream",
    "request",
    "response",
    "header",
    "body",
    "status",
    "json",
    "schema",
    "field",
    "record",
    "enum",
    "match",
    "loop",
    "function",
    "module",
    "import",
    "test",
];

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f32 {
        (self.next() % 20_001) as f32 / 10_000.0 - 1.0
    }

    fn words(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| WORDS[(self.next() % WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn vector(&mut self) -> Vec<f32> {
        let v: Vec<f32> = (0..DIM).map(|_| self.unit()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    }
}

/// Segments the lexical index in `dir` has committed (its meta.json).
fn lexical_segments(dir: &std::path::Path) -> usize {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    meta["segments"].as_array().map_or(0, Vec::len)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let sizes: Vec<usize> = std::env::var("BENCH_CHUNKS")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let queries: usize = std::env::var("BENCH_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut settings = Settings::load_without_env(None).unwrap();
    // The retriever needs an embedder to search vectors, but the queries' vectors are
    // given here, so this one is never called.
    settings.embeddings.provider = EmbeddingProvider::Ollama;
    settings.embeddings.base_url = Some("http://127.0.0.1:9".into());
    let top_n = settings.retrieval.candidates;
    println!("retrieval benchmark: {} cores, {DIM}-dim vectors, {queries} queries, {top_n} candidates per list",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0));
    println!();
    println!("| chunks | BM25 index s | chunks/s | BM25 segments, merge s | vectors upsert s | HNSW build s | BM25 p50/p99 ms | vectors p50/p99 ms | hybrid p50/p99 ms | hybrid, split by language p50/p99 ms |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
        let chunks: Vec<KnowledgeChunk> = (0..n)
            .map(|i| KnowledgeChunk {
                chunk_id: format!("c{i}"),
                source_file: format!("docs/file{}.md", i / 20),
                start_line: 1,
                end_line: 20,
                doc_type: if i % 3 == 0 {
                    DocType::Code
                } else {
                    DocType::Narrative
                },
                block_type: "section".into(),
                section: rng.words(3),
                // A quarter in the second language (for the split dense list).
                language: if i % 4 == 1 { "es" } else { "en" }.into(),
                text: rng.words(120),
                defines: Vec::new(),
            })
            .collect();
        let mut files: Vec<(String, Vec<KnowledgeChunk>)> = Vec::new();
        for c in &chunks {
            match files.last_mut() {
                Some((f, v)) if *f == c.source_file => v.push(c.clone()),
                _ => files.push((c.source_file.clone(), vec![c.clone()])),
            }
        }

        let lexical = Arc::new(TantivyIndex::open(&dir.path().join("lexical")).unwrap());
        let t = Instant::now();
        for batch in files.chunks(500) {
            lexical.replace_files(batch).unwrap();
        }
        let lexical_secs = t.elapsed().as_secs_f64();
        // What ingestion does last: one segment for an index this small, else nothing.
        let segments = || lexical_segments(&dir.path().join("lexical"));
        let before = segments();
        let t = Instant::now();
        lexical.optimize().unwrap();
        let merge = format!(
            "{} → {}, {:.1}",
            before,
            segments(),
            t.elapsed().as_secs_f64()
        );

        let store = EdgeStore::open(&dir.path().join("vectors")).unwrap();
        store.ensure_collection(DIM).await.unwrap();
        let points: Vec<VectorPoint> = chunks
            .iter()
            .map(|c| VectorPoint {
                chunk: c.clone(),
                vector: rng.vector(),
            })
            .collect();
        let t = Instant::now();
        for batch in points.chunks(2000) {
            store.upsert(batch.to_vec()).await.unwrap();
        }
        let upsert_secs = t.elapsed().as_secs_f64();
        let t = Instant::now();
        store.optimize().await.unwrap();
        let hnsw_secs = t.elapsed().as_secs_f64();

        let store: Arc<dyn VectorStore> = Arc::new(store);
        let embedder = embed::from_settings(&settings.embeddings, &settings.llm)
            .unwrap()
            .unwrap();
        let retriever = Retriever::new(
            lexical.clone(),
            Some((embedder.clone(), store.clone())),
            settings.retrieval.clone(),
            vec![Lang::En],
        );
        // An embedder that reads both languages: the dense list is searched in two halves.
        let bilingual = Retriever::new(
            lexical.clone(),
            Some((embedder, store.clone())),
            settings.retrieval.clone(),
            vec![Lang::En, Lang::Es],
        );
        let (mut bm25, mut dense, mut hybrid, mut split) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..queries {
            let q = rng.words(4);
            let v = rng.vector();
            let t = Instant::now();
            let l = lexical.search(&q, Lang::En, top_n).unwrap();
            bm25.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let d = store.search(&v, top_n, Languages::All).await.unwrap();
            dense.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let h = retriever
                .search_with_vector(&q, Some(&v), Mode::Hybrid, settings.retrieval.top_k)
                .await
                .unwrap();
            hybrid.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let s = bilingual
                .search_with_vector(&q, Some(&v), Mode::Hybrid, settings.retrieval.top_k)
                .await
                .unwrap();
            split.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(!l.is_empty() && !d.is_empty() && !h.is_empty() && !s.is_empty());
        }
        println!(
            "| {n} | {lexical_secs:.1} | {:.0} | {merge} | {upsert_secs:.1} | {hnsw_secs:.1} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} |",
            n as f64 / lexical_secs,
            percentile(&mut bm25, 0.5), percentile(&mut bm25, 0.99),
            percentile(&mut dense, 0.5), percentile(&mut dense, 0.99),
            percentile(&mut hybrid, 0.5), percentile(&mut hybrid, 0.99),
            percentile(&mut split, 0.5), percentile(&mut split, 0.99),
        );
    }
    println!();
    println!("(hybrid = the retriever: BM25 and vectors at once, fused; the query embedding is not included;");
    println!(" split by language = the same with an embedder that reads English and Spanish: two filtered vector searches, a quarter of the chunks Spanish)");
    long_questions(&settings).await;
}

/// Search time of long questions: linear in their length, and bounded for a request.
async fn long_questions(settings: &Settings) {
    let runs: usize = std::env::var("BENCH_LONG_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut rng = Rng(0x5eed);
    let lexical = Arc::new(TantivyIndex::in_memory().unwrap());
    let files: Vec<(String, Vec<KnowledgeChunk>)> = (0..500)
        .map(|f| {
            let name = format!("docs/file{f}.md");
            let chunks = (0..20)
                .map(|i| KnowledgeChunk {
                    chunk_id: format!("c{f}-{i}"),
                    source_file: name.clone(),
                    start_line: 1,
                    end_line: 20,
                    doc_type: DocType::Narrative,
                    block_type: "section".into(),
                    section: rng.words(3),
                    language: "en".into(),
                    text: rng.words(120),
                    defines: Vec::new(),
                })
                .collect();
            (name, chunks)
        })
        .collect();
    lexical.replace_files(&files).unwrap();
    let retriever = Retriever::new(
        lexical.clone(),
        None,
        settings.retrieval.clone(),
        vec![Lang::En],
    );
    println!();
    println!(
        "Long questions, 10,000 chunks, BM25 (p50 of {runs}; the search reads {} characters):",
        settings.retrieval.max_query_chars
    );
    println!();
    println!("| question | distinct words | search of a request ms | × 1 KB | whole text through BM25 ms | × 1 KB |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut base = None;
    for (label, bytes) in [
        ("1 KB", 1usize << 10),
        ("100 KB", 100 << 10),
        ("1 MB", 1 << 20),
    ] {
        let mut q = String::from("how do I register an endpoint");
        let mut n = 0u64;
        while q.len() < bytes {
            q.push_str(&format!(" w{n:x}q"));
            n += 1;
        }
        let (mut bounded, mut whole) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            retriever.find(&q).await.unwrap();
            bounded.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            lexical.search(&q, Lang::En, 40).unwrap();
            whole.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (b, w) = (percentile(&mut bounded, 0.5), percentile(&mut whole, 0.5));
        let (b1, w1) = *base.get_or_insert((b, w));
        println!(
            "| {label} | {n} | {b:.2} | {:.1} | {w:.1} | {:.0} |",
            b / b1,
            w / w1
        );
    }
}

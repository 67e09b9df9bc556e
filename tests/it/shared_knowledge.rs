//! Many replicas, one knowledge base: with a Qdrant server, BM25 lives there too (sparse
//! vectors with Qdrant's IDF, `retrieval::qdrant_lexical`) beside the dense vectors, with
//! the record of what is indexed. Two gateways that share Redis and the Qdrant server both
//! serve what an `ingest` from a third data folder wrote, and keep no index files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::live_knowledge::{page, served};
use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider, SessionBackend, Settings};
use assist_gateway::ingest::chunk::{chunk_file, ChunkConfig};
use assist_gateway::ingest::Quiet;
use assist_gateway::retrieval::lexical::TantivyIndex;
use assist_gateway::retrieval::qdrant_lexical::QdrantLexical;
use assist_gateway::retrieval::{Lang, LexicalIndex};

/// Every file under `dir` (the index files a gateway would keep there).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_serve_an_ingest_neither_ran() {
    let (Some(redis), Some(qdrant)) = (RedisServer::start(), QdrantTestServer::start()) else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&["fine"]));
    let collection = format!("kb{}", uuid::Uuid::new_v4().simple());
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let embed_url = up.root();
    let shared = |s: &mut Settings| {
        s.qdrant.url = Some(qdrant.url.clone());
        s.qdrant.collection = collection.clone();
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.embeddings.base_url = Some(embed_url.clone());
        s.embeddings.languages = vec!["en".into(), "es".into()];
        s.sessions.backend = SessionBackend::Redis;
        s.sessions.redis_url = Some(redis.url());
        s.sessions.redis_prefix = prefix.clone();
    };
    let a = Gateway::start(&up, Provider::Ollama, shared).await;
    let b = Gateway::start(&up, Provider::Ollama, shared).await;

    // An ingest from a third data folder: neither replica runs it or is told of it.
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("zorblat.md"), page("zorblat")).unwrap();
    std::fs::write(docs.path().join("other.md"), page("plimsoll")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let mut third = Settings::load_without_env(None).unwrap();
    third.data_dir = elsewhere.path().to_path_buf();
    shared(&mut third);
    let roots = [docs.path().to_path_buf()];
    let first = assist_gateway::app::ingest(&third, &roots, false, &Quiet)
        .await
        .unwrap();
    assert_eq!(
        (first.files_indexed, first.chunks_total),
        (2, 2),
        "{first:?}"
    );
    for gw in [&a, &b] {
        served(gw, "zorblat", "zorblat.md", true, Duration::from_secs(5)).await;
    }

    // An edit, an addition and a deletion, ingested again there: both serve the change
    // within 5 s.
    std::fs::remove_file(docs.path().join("zorblat.md")).unwrap();
    std::fs::write(docs.path().join("quorvane.md"), page("quorvane")).unwrap();
    std::fs::write(docs.path().join("other.md"), page("brantock")).unwrap();
    let second = assist_gateway::app::ingest(&third, &roots, false, &Quiet)
        .await
        .unwrap();
    assert_eq!(
        (
            second.files_indexed,
            second.files_removed,
            second.chunks_total
        ),
        (2, 1, 2),
        "{second:?}"
    );
    for gw in [&a, &b] {
        served(gw, "quorvane", "quorvane.md", true, Duration::from_secs(5)).await;
        served(gw, "brantock", "other.md", true, Duration::from_secs(5)).await;
        served(gw, "zorblat", "zorblat.md", false, Duration::from_secs(5)).await;
    }

    // The record of what is indexed is shared: an ingest of the same folder from a fourth
    // data folder finds everything in place and embeds nothing.
    let embed_calls = up
        .requests()
        .iter()
        .filter(|r| r.path.contains("embed"))
        .count();
    let fourth_dir = tempfile::tempdir().unwrap();
    let mut fourth = third.clone();
    fourth.data_dir = fourth_dir.path().to_path_buf();
    let again = assist_gateway::app::ingest(&fourth, &roots, false, &Quiet)
        .await
        .unwrap();
    assert_eq!(
        (
            again.files_indexed,
            again.files_unchanged,
            again.chunks_total
        ),
        (0, 2, 2),
        "{again:?}"
    );
    let embedded_since = up
        .requests()
        .iter()
        .filter(|r| r.path.contains("embed"))
        .count()
        - embed_calls;
    // Only the questions asked meanwhile: none for the ingest.
    assert_eq!(embedded_since, 0);

    // A rebuild of a shared index writes every file again in place: served throughout.
    let rebuilt = assist_gateway::app::ingest(&fourth, &roots, true, &Quiet)
        .await
        .unwrap();
    assert_eq!(
        (rebuilt.files_indexed, rebuilt.chunks_total),
        (2, 2),
        "{rebuilt:?}"
    );
    for gw in [&a, &b] {
        served(gw, "quorvane", "quorvane.md", true, Duration::from_secs(5)).await;
    }

    // Neither replica keeps index files: the knowledge is in Qdrant.
    for gw in [&a, &b] {
        let index_files: Vec<PathBuf> = files_under(&gw.settings.data_dir.join("index"))
            .into_iter()
            .filter(|p| {
                p.components()
                    .any(|c| matches!(c.as_os_str().to_str(), Some("lexical" | "vectors")))
            })
            .collect();
        assert!(index_files.is_empty(), "{index_files:?}");
    }
}

/// The chunks of `examples/knowledge`, as an ingest cuts them.
fn example_chunks() -> Vec<(String, Vec<assist_gateway::retrieval::KnowledgeChunk>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/knowledge");
    files_under(&root)
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            let key = path.strip_prefix(&root).ok()?.to_string_lossy().to_string();
            let chunks = chunk_file(&key, &text, &ChunkConfig::default());
            (!chunks.is_empty()).then_some((key, chunks))
        })
        .collect()
}

/// BM25 in Qdrant ranks as BM25 in tantivy does: the same fields, analyzers and boosts,
/// only the fields' average lengths fixed. Over `examples/knowledge`, questions in both
/// languages find the same first file in both, and the index keeps its records.
#[tokio::test(flavor = "multi_thread")]
async fn bm25_in_qdrant_finds_what_tantivy_finds() {
    let Some(qdrant) = QdrantTestServer::start() else {
        return;
    };
    let files = example_chunks();
    let url = qdrant.url.clone();
    let (tantivy, shared) = tokio::task::spawn_blocking(move || {
        let tantivy = TantivyIndex::in_memory().unwrap();
        tantivy.replace_files(&files).unwrap();
        let shared = QdrantLexical::connect(&url, None, "bm25-contract").unwrap();
        shared.replace_files(&files).unwrap();
        (Arc::new(tantivy), Arc::new(shared))
    })
    .await
    .unwrap();
    let questions = [
        ("How do I configure the retry policy?", Lang::En),
        ("What does mean() do with an empty list?", Lang::En),
        ("How is the service deployed with containers?", Lang::En),
        ("¿Cómo se despliega el servicio?", Lang::Es),
        ("¿Qué hace la función de reintentos?", Lang::Es),
        ("parse config file", Lang::En),
    ];
    let shared2 = shared.clone();
    let compared = tokio::task::spawn_blocking(move || {
        assert_eq!(shared2.len().unwrap(), tantivy.len().unwrap());
        questions
            .iter()
            .map(|(q, lang)| {
                let first = |index: &dyn LexicalIndex| {
                    index.search(q, *lang, 5).unwrap()[0]
                        .chunk
                        .source_file
                        .clone()
                };
                (q.to_string(), first(&*tantivy), first(&*shared2))
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (q, in_tantivy, in_qdrant) in &compared {
        assert_eq!(in_tantivy, in_qdrant, "first file for {q:?}");
    }

    // Removing a file removes its chunks; a chunk is read back by id; records are kept
    // apart from chunks.
    tokio::task::spawn_blocking(move || {
        let records = shared.records().expect("a shared index keeps its records");
        records
            .put(&[("a.md".into(), serde_json::json!({"sha256": "x"}))])
            .unwrap();
        let before = shared.len().unwrap();
        let (file, chunks) = example_chunks().remove(0);
        shared.remove_files(std::slice::from_ref(&file)).unwrap();
        assert_eq!(shared.len().unwrap(), before - chunks.len() as u64);
        assert!(shared.chunk(&chunks[0].chunk_id).unwrap().is_none());
        let (_, others) = example_chunks().remove(1);
        let read = shared.chunk(&others[0].chunk_id).unwrap().unwrap();
        assert_eq!(*read, others[0]);
        assert_eq!(
            records.load().unwrap().get("a.md"),
            Some(&serde_json::json!({"sha256": "x"}))
        );
        records.remove(&["a.md".into()]).unwrap();
        assert!(records.load().unwrap().is_empty());
    })
    .await
    .unwrap();
}

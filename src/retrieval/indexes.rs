//! The knowledge indexes one search reads: BM25 always, vectors when an embedder is
//! configured. The retriever holds them as one value that a refresh replaces whole (a
//! rebuilt index, the writable index taken over from an `ingest`), so a search that has
//! started reads one index to its end, never half of one and half of another.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{LexicalIndex, VectorStore};
use crate::embed::{Embedder, TextKind};

/// The indexes searched together.
#[derive(Clone)]
pub struct Indexes {
    pub lexical: Arc<dyn LexicalIndex>,
    pub dense: Option<(Arc<dyn Embedder>, Arc<dyn VectorStore>)>,
    /// Why there is no index where one should be (readiness says it).
    pub missing: Option<String>,
}

/// What the probes of `/ready` found: each part's state, and the dense half's failure.
pub(super) struct Probed {
    pub lexical_index: Value,
    pub embedder: Value,
    pub vector_store: Value,
    /// The first failure of the dense half (`None`: it answered, or there is none).
    pub failure: Option<String>,
}

impl Indexes {
    /// Chunks in the lexical index, counted off the async threads.
    pub async fn lexical_len(&self) -> anyhow::Result<u64> {
        let index = self.lexical.clone();
        tokio::task::spawn_blocking(move || index.len()).await?
    }

    /// Chunks in each index (lexical, vectors), each asked for at most `wait`.
    pub async fn sizes(&self, wait: Duration) -> (Option<u64>, Option<u64>) {
        let lexical = async {
            tokio::time::timeout(wait, self.lexical_len())
                .await
                .ok()
                .and_then(Result::ok)
        };
        let vectors = async {
            let (_, store) = self.dense.as_ref()?;
            tokio::time::timeout(wait, store.count())
                .await
                .ok()
                .and_then(Result::ok)
        };
        tokio::join!(lexical, vectors)
    }

    /// Each part probed afresh (the embedder with a tiny text, each store for its size),
    /// each probe bounded by `wait`.
    pub(super) async fn probe(&self, wait: Duration) -> Probed {
        let secs = wait.as_secs_f64();
        let lexical_index = match tokio::time::timeout(wait, self.lexical_len()).await {
            _ if self.missing.is_some() => {
                json!({"status": "degraded", "chunks": 0, "reason": self.missing})
            }
            Ok(Ok(0)) => {
                json!({"status": "degraded", "chunks": 0, "reason": "the knowledge base is empty: run `assist-gateway ingest PATH` or set knowledge.sources"})
            }
            Ok(Ok(n)) => json!({"status": "ok", "chunks": n}),
            Ok(Err(e)) => json!({"status": "degraded", "reason": format!("{e:#}")}),
            Err(_) => json!({"status": "degraded", "reason": format!("no answer within {secs} s")}),
        };
        let Some((embedder, store)) = &self.dense else {
            return Probed {
                lexical_index,
                embedder: json!({"status": "disabled", "reason": "embeddings.provider = \"none\": BM25 only"}),
                vector_store: json!({"status": "disabled", "reason": "no embedder: BM25 only"}),
                failure: None,
            };
        };
        let name = embedder.describe();
        let probe_text = ["readiness probe".to_string()];
        let (probe, count) = tokio::join!(
            tokio::time::timeout(wait, embedder.embed(&probe_text, TextKind::Query)),
            tokio::time::timeout(wait, store.count()),
        );
        let mut failure = None;
        let embedder = match probe {
            Ok(Ok(v)) => {
                json!({"status": "ok", "embedder": name, "dimension": v.first().map_or(0, Vec::len)})
            }
            Ok(Err(e)) => {
                let reason = format!("embedder {name}: {e}");
                failure = Some(reason.clone());
                json!({"status": "degraded", "embedder": name, "reason": reason})
            }
            Err(_) => {
                let reason = format!("embedder {name} did not answer within {secs} s");
                failure = Some(reason.clone());
                json!({"status": "degraded", "embedder": name, "reason": reason})
            }
        };
        let vector_store = match count {
            Ok(Ok(0)) => {
                json!({"status": "degraded", "points": 0, "reason": "the vector store is empty: run `assist-gateway ingest PATH` or set knowledge.sources"})
            }
            Ok(Ok(n)) => json!({"status": "ok", "points": n}),
            Ok(Err(e)) => {
                let reason = format!("vector store: {e:#}");
                failure.get_or_insert(reason.clone());
                json!({"status": "degraded", "reason": reason})
            }
            Err(_) => {
                let reason = format!("vector store: no answer within {secs} s");
                failure.get_or_insert(reason.clone());
                json!({"status": "degraded", "reason": reason})
            }
        };
        Probed {
            lexical_index,
            embedder,
            vector_store,
            failure,
        }
    }
}

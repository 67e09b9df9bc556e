//! The hybrid retriever: BM25 and dense candidates fused with weighted RRF, boosted by
//! document type for definition questions, deduplicated, spread over files (at most
//! `max_chunks_per_file` of one file while others have candidates), cut to `top_k`. When the
//! embedder or the vector store fails, BM25 answers alone and readiness says why.
//!
//! With an embedder that reads more than one language, the dense list is searched in two
//! halves by the chunks' language, with the same query vector: the chunks in the question's
//! language (and code, which questions in every language ask about), and the chunks in the
//! other languages, whose similarities are raised by `retrieval.cross_language_offset`
//! before both halves make one list. A multilingual model scores a passage in the
//! question's own language above the same passage translated, so without the offset a
//! passage in the other language that holds the answer seldom reaches the top; with it,
//! each passage ranks about where its translation would.
//!
//! BM25 reads the question's words in its own language and, through the glossary
//! (`glossary.txt`), their translations in the other; its weight can differ by the
//! question's language (`retrieval.bm25_weight_by_language`) when the embedder reads it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::fusion::{definitions_first, id_map, rrf, IdMap, Ranked};
use super::indexes::Indexes;
use super::{DocType, Hit, KnowledgeChunk, Lang, Languages, LexicalIndex, VectorStore};
use crate::config::RetrievalSettings;
use crate::embed::{Embedder, TextKind};
use crate::telemetry;
use crate::trace;
use opentelemetry::KeyValue;

/// A BM25 search over at most this many chunks, of a question of at most
/// `INLINE_SEARCH_BYTES`, runs on the request's own task: it takes tens of microseconds
/// (36 µs over `examples/knowledge`), less than handing it to a blocking thread and back.
/// Larger searches go to the blocking pool, so as not to hold up the worker's other
/// requests.
const INLINE_SEARCH_DOCS: u64 = 2_000;
const INLINE_SEARCH_BYTES: usize = 500;

/// Which lists a search uses (the evaluation compares all three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Hybrid,
    Lexical,
    Dense,
}

/// A fused result: the chunk (shared with the index's cache, not copied) and its final
/// score.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub chunk: Arc<KnowledgeChunk>,
    pub score: f32,
}

/// A search's results and how many candidates each list gave (for the logs).
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub hits: Vec<Scored>,
    pub lexical: usize,
    pub dense: usize,
    /// Of the dense candidates, those in other natural languages than the question's.
    pub across: usize,
}

/// How much each list counts in one search (0 = not searched), and how the dense list is
/// searched.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Weights {
    lexical: f32,
    dense: f32,
    /// The offset added to the similarity of chunks in other natural languages than the
    /// query's, searched as a half of their own; `None` = one search over every chunk.
    cross_offset: Option<f32>,
    /// A hybrid search: when the dense list gives nothing (embedder or store failing),
    /// BM25 answers alone whatever its weight.
    bm25_stands_in: bool,
}

impl Weights {
    fn wants_vector(&self) -> bool {
        self.dense > 0.0
    }
}

/// Each part's state for `/ready`: JSON objects with a `status` (`ok`, `degraded`,
/// `disabled`) and a `reason` when not ok.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    pub lexical_index: serde_json::Value,
    pub embedder: serde_json::Value,
    pub vector_store: serde_json::Value,
}

/// The state of the dense half, for `/ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenseState {
    /// No embedder configured: BM25 only, by choice.
    Disabled,
    Ok,
    /// Configured but failing: BM25 answers alone.
    Degraded(String),
}

pub struct Retriever {
    /// The indexes searched, replaced whole by a refresh (`swap`).
    indexes: ArcSwap<Indexes>,
    settings: RetrievalSettings,
    /// Languages the embedder reads well.
    embed_langs: Vec<Lang>,
    degraded: Mutex<Option<String>>,
}

impl Retriever {
    pub fn new(
        lexical: Arc<dyn LexicalIndex>,
        dense: Option<(Arc<dyn Embedder>, Arc<dyn VectorStore>)>,
        settings: RetrievalSettings,
        embed_langs: Vec<Lang>,
    ) -> Self {
        Self {
            indexes: ArcSwap::from_pointee(Indexes {
                lexical,
                dense,
                missing: None,
            }),
            settings,
            embed_langs,
            degraded: Mutex::new(None),
        }
    }

    /// The same retriever over an index that should be there and is not: readiness says
    /// why.
    pub fn missing_index(self, why: String) -> Self {
        let mut indexes = Indexes::clone(&self.indexes.load());
        indexes.missing = Some(why);
        self.indexes.store(Arc::new(indexes));
        self
    }

    /// The indexes searched now.
    pub fn indexes(&self) -> Arc<Indexes> {
        self.indexes.load_full()
    }

    /// Searches from now on read `indexes`; searches under way finish on the ones they
    /// started with.
    pub fn swap(&self, indexes: Indexes) {
        self.indexes.store(Arc::new(indexes));
        self.recover();
    }

    pub fn dense_state(&self) -> DenseState {
        match (
            &self.indexes.load().dense,
            self.degraded.lock().map(|d| d.clone()),
        ) {
            (None, _) => DenseState::Disabled,
            (Some(_), Ok(Some(reason))) => DenseState::Degraded(reason),
            (Some(_), _) => DenseState::Ok,
        }
    }

    /// Each part's state for `/ready`, probed afresh (the embedder with a tiny text,
    /// each store for its size), each probe bounded by `wait`. The probes also reset the
    /// dense half's state: a failing one degrades it, all answering recovers it.
    pub async fn readiness(&self, wait: Duration) -> Readiness {
        let probed = self.indexes().probe(wait).await;
        match probed.failure {
            Some(reason) => self.degrade(reason),
            None if self.indexes.load().dense.is_some() => self.recover(),
            None => {}
        }
        Readiness {
            lexical_index: probed.lexical_index,
            embedder: probed.embedder,
            vector_store: probed.vector_store,
        }
    }

    /// Chunks in each index (lexical, vectors), each asked for at most `wait`; `None`
    /// when it did not answer (or, for vectors, when there is no vector store).
    pub async fn sizes(&self, wait: Duration) -> (Option<u64>, Option<u64>) {
        self.indexes().sizes(wait).await
    }

    /// Records a dense failure; logs it the first time (and when the reason changes).
    fn degrade(&self, reason: String) {
        if let Ok(mut d) = self.degraded.lock() {
            if d.as_deref() != Some(reason.as_str()) {
                tracing::warn!(reason = %reason, "dense retrieval unavailable: BM25 answers alone");
            }
            *d = Some(reason);
        }
    }

    fn recover(&self) {
        if let Ok(mut d) = self.degraded.lock() {
            if d.take().is_some() {
                tracing::info!("dense retrieval is back");
            }
        }
    }

    /// The chunk with this id (a cited source), if the index holds it.
    pub async fn source(&self, chunk_id: &str) -> anyhow::Result<Option<Arc<KnowledgeChunk>>> {
        let index = self.indexes.load().lexical.clone();
        let id = chunk_id.to_string();
        tokio::task::spawn_blocking(move || index.chunk(&id)).await?
    }

    /// The best `retrieval.top_k` chunks for `query`.
    pub async fn search(&self, query: &str, mode: Mode) -> anyhow::Result<Vec<Scored>> {
        self.search_top(query, mode, self.settings.top_k).await
    }

    /// The best `retrieval.top_k` chunks (hybrid), with each list's candidate count.
    pub async fn find(&self, query: &str) -> anyhow::Result<Found> {
        self.found(query, Mode::Hybrid, self.settings.top_k).await
    }

    /// The best `top` chunks for `query`.
    pub async fn search_top(
        &self,
        query: &str,
        mode: Mode,
        top: usize,
    ) -> anyhow::Result<Vec<Scored>> {
        self.found(query, mode, top).await.map(|f| f.hits)
    }

    async fn found(&self, query: &str, mode: Mode, top: usize) -> anyhow::Result<Found> {
        let query = bounded(query, self.settings.max_query_chars);
        let query = query.as_ref();
        let lang = Lang::detect(query);
        let ix = self.indexes();
        let weights = self.weights(&ix, mode, lang);
        // No embedding call when no dense list would count. The query is embedded while
        // BM25 searches: the dense half's deadline covers both its steps.
        let started = Instant::now();
        let vector = async {
            if weights.wants_vector() {
                self.query_vector(&ix, query).await
            } else {
                None
            }
        };
        let embedding = (weights.wants_vector() && ix.dense.is_some()).then_some(started);
        self.search_prepared(&ix, query, lang, vector, weights, top, embedding)
            .await
    }

    /// Like `search_top` with the query's vector already computed (benchmarks, callers
    /// that embed in batches); `None` searches BM25 only.
    pub async fn search_with_vector(
        &self,
        query: &str,
        vector: Option<&[f32]>,
        mode: Mode,
        top: usize,
    ) -> anyhow::Result<Vec<Scored>> {
        let query = bounded(query, self.settings.max_query_chars);
        let query = query.as_ref();
        let lang = Lang::detect(query);
        let ix = self.indexes();
        let weights = self.weights(&ix, mode, lang);
        let vector = async { vector.map(<[f32]>::to_vec) };
        self.search_prepared(&ix, query, lang, vector, weights, top, None)
            .await
            .map(|f| f.hits)
    }

    fn weights(&self, ix: &Indexes, mode: Mode, lang: Lang) -> Weights {
        let reads_query = ix.dense.is_some() && self.embed_langs.contains(&lang);
        let dense = if reads_query {
            self.settings.dense_weight
        } else {
            self.settings.foreign_dense_weight
        };
        // Ranking other languages' chunks against the query takes a model that reads both.
        let crosses = reads_query && self.embed_langs.iter().any(|l| *l != lang);
        let cross_offset = crosses.then_some(self.settings.cross_language_offset);
        // BM25 reads only the question's own words; how much it adds beside a dense list
        // that reads the question's language was measured per language (docs/knowledge.md).
        let by_language = &self.settings.bm25_weight_by_language;
        let lexical = match lang {
            Lang::En => by_language.en,
            Lang::Es => by_language.es,
        }
        .filter(|_| reads_query)
        .unwrap_or(self.settings.bm25_weight);
        let (lexical, dense) = match mode {
            Mode::Hybrid => (lexical, dense),
            Mode::Lexical => (1.0, 0.0),
            Mode::Dense => (0.0, 1.0),
        };
        Weights {
            lexical,
            dense,
            cross_offset,
            bm25_stands_in: mode == Mode::Hybrid,
        }
    }

    /// Every list at once, then the fusion. `vector` gives the query's vector; the dense
    /// half (it, then the vector store) has `retrieval.deadline_ms`, past which BM25
    /// answers alone. `embedding` is when the query's embedding was asked for, when it was
    /// (part of the dense lists' time).
    #[allow(clippy::too_many_arguments)]
    async fn search_prepared(
        &self,
        ix: &Indexes,
        query: &str,
        lang: Lang,
        vector: impl std::future::Future<Output = Option<Vec<f32>>>,
        weights: Weights,
        top: usize,
        embedding: Option<Instant>,
    ) -> anyhow::Result<Found> {
        let n = self.settings.candidates.max(top);
        let lexical_span = trace::Span::start("retrieve lexical (bm25)", || {
            vec![KeyValue::new("assist.weight", f64::from(weights.lexical))]
        });
        let lexical = lexical_span.within(async {
            if weights.lexical <= 0.0 {
                return Ok(Vec::new());
            }
            let hits = self.lexical_hits(ix, query, lang, n).await;
            if let Ok(hits) = &hits {
                lexical_span.set("assist.candidates", hits.len() as i64);
            }
            hits
        });
        let dense_span = trace::Span::start("retrieve dense (vectors)", || {
            vec![KeyValue::new("assist.weight", f64::from(weights.dense))]
        });
        let dense = async {
            let vector = vector.await;
            let started = Instant::now();
            let embedding = embedding.map(|at| started.duration_since(at));
            let Some(v) = vector.as_deref().filter(|_| weights.wants_vector()) else {
                // An embedding asked for that failed still took its time.
                if let Some(took) = embedding {
                    telemetry::retrieval("dense", took);
                }
                return (Vec::new(), 0);
            };
            let hits = match weights.cross_offset {
                None => (self.vector_hits(ix, v, n, Languages::All).await, 0),
                Some(offset) => {
                    let others: Vec<&str> = Lang::ALL
                        .iter()
                        .filter(|l| **l != lang)
                        .map(|l| l.code())
                        .collect();
                    let (own, across) = tokio::join!(
                        self.vector_hits(ix, v, n, Languages::NotIn(&others)),
                        self.vector_hits(ix, v, n, Languages::In(&others)),
                    );
                    let merged = with_offset(own, across, offset, n);
                    let across = merged
                        .iter()
                        .filter(|h| others.contains(&h.chunk.language.as_str()))
                        .count();
                    (merged, across)
                }
            };
            telemetry::retrieval("dense", embedding.unwrap_or_default() + started.elapsed());
            hits
        };
        let deadline = Duration::from_millis(self.settings.deadline_ms);
        let dense = dense_span.within(async {
            match tokio::time::timeout(deadline, dense).await {
                Ok(found) => {
                    dense_span.set("assist.candidates", found.0.len() as i64);
                    found
                }
                Err(_) => {
                    dense_span.set("assist.deadline_missed", true);
                    telemetry::retrieval_deadline();
                    self.degrade(format!(
                        "the dense half did not answer within retrieval.deadline_ms ({} ms)",
                        self.settings.deadline_ms
                    ));
                    (Vec::new(), 0)
                }
            }
        });
        let (lexical, (dense, across)) = tokio::join!(lexical, dense);
        drop((lexical_span, dense_span));
        let (lexical_weight, lexical) =
            if weights.bm25_stands_in && weights.lexical <= 0.0 && dense.is_empty() {
                (1.0, self.lexical_hits(ix, query, lang, n).await?)
            } else {
                (weights.lexical, lexical?)
            };
        let started = Instant::now();
        let fuse = trace::Span::start("fuse (rrf)", || {
            vec![KeyValue::new(
                "assist.rrf_k",
                f64::from(self.settings.rrf_k),
            )]
        });
        let hits = self.fuse(
            query,
            &[
                (lexical_weight, lexical.as_slice()),
                (weights.dense, dense.as_slice()),
            ],
            top,
        );
        fuse.set("assist.hits", hits.len() as i64);
        drop(fuse);
        telemetry::retrieval("fusion", started.elapsed());
        Ok(Found {
            hits,
            lexical: lexical.len(),
            dense: dense.len(),
            across,
        })
    }

    /// BM25's `n` best chunks for `query`, read as `lang`.
    async fn lexical_hits(
        &self,
        ix: &Indexes,
        query: &str,
        lang: Lang,
        n: usize,
    ) -> anyhow::Result<Vec<Hit>> {
        let started = Instant::now();
        let small = query.len() <= INLINE_SEARCH_BYTES
            && !ix.lexical.remote()
            && ix
                .lexical
                .len()
                .is_ok_and(|docs| docs <= INLINE_SEARCH_DOCS);
        let hits = if small {
            ix.lexical.search(query, lang, n)
        } else {
            let index = ix.lexical.clone();
            let q = query.to_string();
            // A request dropped (its client gone) before the search started skips it.
            let wanted = Arc::new(AtomicBool::new(true));
            let _dropped = ClearOnDrop(wanted.clone());
            tokio::task::spawn_blocking(move || {
                if wanted.load(Ordering::Relaxed) {
                    index.search(&q, lang, n)
                } else {
                    Ok(Vec::new())
                }
            })
            .await?
        };
        telemetry::retrieval("lexical", started.elapsed());
        hits
    }

    /// The query's vector, or `None` (and degraded) when the embedder fails.
    async fn query_vector(&self, ix: &Indexes, query: &str) -> Option<Vec<f32>> {
        let (embedder, _) = ix.dense.as_ref()?;
        match embedder.embed(&[query.to_string()], TextKind::Query).await {
            Ok(mut v) if !v.is_empty() => Some(v.swap_remove(0)),
            Ok(_) => {
                self.degrade(format!("{} returned no vector", embedder.describe()));
                None
            }
            Err(e) => {
                self.degrade(format!("embedder {}: {e}", embedder.describe()));
                None
            }
        }
    }

    async fn vector_hits(
        &self,
        ix: &Indexes,
        vector: &[f32],
        n: usize,
        languages: Languages<'_>,
    ) -> Vec<Hit> {
        let Some((_, store)) = &ix.dense else {
            return Vec::new();
        };
        match store.search(vector, n, languages).await {
            Ok(hits) => {
                self.recover();
                hits
            }
            Err(e) => {
                self.degrade(format!("vector store: {e:#}"));
                Vec::new()
            }
        }
    }

    /// Weighted RRF of the (weight, list) pairs, doc-type boosts for definition questions,
    /// dedupe, top_k.
    fn fuse(&self, query: &str, lists: &[(f32, &[Hit])], top: usize) -> Vec<Scored> {
        let ids: Vec<Vec<&str>> = lists
            .iter()
            .map(|(_, hits)| hits.iter().map(|h| h.chunk.chunk_id.as_str()).collect())
            .collect();
        let ranked_lists: Vec<Ranked<'_, &str>> = lists
            .iter()
            .zip(&ids)
            .map(|((weight, _), items)| Ranked {
                weight: *weight,
                items,
            })
            .collect();
        let fused = rrf(&ranked_lists, self.settings.rrf_k);
        let definition = is_definition_question(query);
        let mut by_id: IdMap<&str, &Arc<KnowledgeChunk>> =
            id_map(lists.iter().map(|(_, hits)| hits.len()).sum());
        for (_, hits) in lists {
            for h in hits.iter() {
                by_id.entry(h.chunk.chunk_id.as_str()).or_insert(&h.chunk);
            }
        }
        let find = |id: &str| by_id.get(id).copied();
        let mut ranked: Vec<(&Arc<KnowledgeChunk>, f32)> = fused
            .into_iter()
            .filter_map(|(id, score)| {
                let chunk = find(id)?;
                let boost = if definition {
                    self.boost(chunk.doc_type)
                } else {
                    1.0
                };
                Some((chunk, score * boost))
            })
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        definitions_first(&mut ranked, &super::analyzers::named_identifiers(query));
        // The same text under two ids once. Compared by length first: hashing every
        // candidate's whole text cost more than the rest of the fusion.
        let mut kept: Vec<&str> = Vec::with_capacity(ranked.len());
        ranked.retain(|(chunk, _)| {
            let text = chunk.text.trim();
            let repeated = kept.iter().any(|k| k.len() == text.len() && *k == text);
            if !repeated {
                kept.push(text);
            }
            !repeated
        });
        spread_over_files(ranked, top, self.settings.max_chunks_per_file)
            .into_iter()
            .map(|(chunk, score)| Scored {
                chunk: Arc::clone(chunk),
                score,
            })
            .collect()
    }

    fn boost(&self, doc_type: DocType) -> f32 {
        match doc_type {
            DocType::Spec => self.settings.spec_boost,
            DocType::Narrative => self.settings.narrative_boost,
            DocType::CodeExample => self.settings.code_example_boost,
            DocType::Code => self.settings.code_boost,
        }
    }
}

/// What a search reads of a query: all of it up to `max` characters, else its first and
/// last `max / 2` (a question's own words sit at the end of a message that carries pasted
/// code before it, or at its start before a pasted log).
pub fn bounded(query: &str, max: usize) -> Cow<'_, str> {
    let Some((cut, _)) = query.char_indices().nth(max) else {
        return Cow::Borrowed(query);
    };
    let head = &query[..query.char_indices().nth(max / 2).map_or(cut, |(i, _)| i)];
    let tail_chars = max - max / 2;
    let tail_from = query
        .char_indices()
        .rev()
        .nth(tail_chars.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    Cow::Owned(format!("{head} {}", &query[tail_from..]))
}

/// One dense list of the best `n` of both halves: the question's language (and code), and
/// the other languages, whose similarities count `offset` more. Each hit keeps its own
/// similarity; on a tie the question's own language comes first.
fn with_offset(own: Vec<Hit>, across: Vec<Hit>, offset: f32, n: usize) -> Vec<Hit> {
    let mut all: Vec<(f32, Hit)> = own
        .into_iter()
        .map(|h| (h.score, h))
        .chain(across.into_iter().map(|h| (h.score + offset, h)))
        .collect();
    // A stable sort: the own half was added first.
    all.sort_by(|a, b| b.0.total_cmp(&a.0));
    all.into_iter().take(n).map(|(_, h)| h).collect()
}

/// The best `top` of `ranked` (best first) taking at most `per_file` chunks of one file
/// while other files have candidates left; when that leaves fewer than `top`, the best
/// chunks passed over fill the rest (a knowledge base of one file still gives `top`).
/// The result stays in score order. `per_file` 0 = no limit.
///
/// The next chunk of a file already found mostly repeats what the reader has (windows of
/// one section overlap), while another file's best chunk may hold the answer: on the
/// Debian benchmark one chunk per file raised every mode's recall@8 and nDCG@10 (hybrid
/// with e5 0.675 → 0.733 nDCG), on `examples/knowledge` hybrid 0.899 → 0.924.
fn spread_over_files(
    ranked: Vec<(&Arc<KnowledgeChunk>, f32)>,
    top: usize,
    per_file: usize,
) -> Vec<(&Arc<KnowledgeChunk>, f32)> {
    if per_file == 0 {
        return ranked.into_iter().take(top).collect();
    }
    let mut taken: IdMap<&str, usize> = id_map(top);
    let mut chosen = Vec::with_capacity(top);
    let mut passed = Vec::new();
    for (position, (chunk, score)) in ranked.into_iter().enumerate() {
        if chosen.len() == top {
            break;
        }
        let n = taken.entry(chunk.source_file.as_str()).or_default();
        if *n < per_file {
            *n += 1;
            chosen.push((position, chunk, score));
        } else {
            passed.push((position, chunk, score));
        }
    }
    let missing = top - chosen.len();
    chosen.extend(passed.into_iter().take(missing));
    chosen.sort_by_key(|(position, _, _)| *position);
    chosen
        .into_iter()
        .map(|(_, chunk, score)| (chunk, score))
        .collect()
}

/// Sets its flag to false when dropped.
struct ClearOnDrop(Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// "What is …", "define …", "qué es …": questions that want a definition, which
/// specifications and prose answer better than raw code.
pub fn is_definition_question(query: &str) -> bool {
    let q = query.to_lowercase();
    let q = q.trim_start_matches(['¿', ' ']);
    [
        "what is",
        "what's",
        "what are",
        "what does",
        "define",
        "definition",
        "meaning of",
        "explain",
        "qué es",
        "que es",
        "qué son",
        "que son",
        "qué significa",
        "que significa",
        "definición",
        "definicion",
        "explica",
        "para qué sirve",
        "para que sirve",
    ]
    .iter()
    .any(|p| {
        // At the start, or as words of their own (" what is "), found without writing
        // the padded phrase out for each of them.
        q.starts_with(p)
            || q.match_indices(p)
                .any(|(at, _)| q[..at].ends_with(' ') && q[at + p.len()..].starts_with(' '))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_languages_similarities_count_the_offset_more() {
        let hit = |id: &str, score: f32| Hit {
            chunk: Arc::new(KnowledgeChunk::sample(id, id)),
            score,
        };
        let ids = |hits: Vec<Hit>| -> Vec<String> {
            hits.into_iter().map(|h| h.chunk.chunk_id.clone()).collect()
        };
        let own = vec![hit("es-near", 0.90), hit("es-far", 0.80)];
        let across = vec![hit("en-answer", 0.875), hit("en-off", 0.70)];
        // Raw similarities: the question's own language first.
        assert_eq!(
            ids(with_offset(own.clone(), across.clone(), 0.0, 4)),
            ["es-near", "en-answer", "es-far", "en-off"]
        );
        // The answer written in the other language passes the near miss; a passage that
        // is far off stays below the question's language.
        let merged = with_offset(own, across, 0.05, 3);
        assert_eq!(merged[0].score, 0.875, "each hit keeps its own similarity");
        assert_eq!(ids(merged), ["en-answer", "es-near", "es-far"]);
        // A tie goes to the question's own language.
        assert_eq!(
            ids(with_offset(
                vec![hit("own", 0.5)],
                vec![hit("other", 0.25)],
                0.25,
                1
            )),
            ["own"]
        );
    }

    #[test]
    fn long_queries_are_read_by_their_ends() {
        assert_eq!(bounded("short question", 100), "short question");
        let long = format!("START {} the real question END", "x ".repeat(5000));
        let b = bounded(&long, 60);
        assert!(b.starts_with("START"), "{b}");
        assert!(b.ends_with("the real question END"), "{b}");
        assert!(b.chars().count() <= 61);
        // Characters, not bytes: a multi-byte text is cut on its boundaries.
        let accents = "ñ".repeat(1000);
        assert_eq!(bounded(&accents, 10).chars().count(), 11);
    }

    fn spread(files: &[&str], top: usize, per_file: usize) -> Vec<String> {
        let chunks: Vec<Arc<KnowledgeChunk>> = files
            .iter()
            .enumerate()
            .map(|(i, f)| Arc::new(KnowledgeChunk::sample(&format!("{f}{i}"), f)))
            .collect();
        let ranked = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| (c, 1.0 / (i + 1) as f32))
            .collect();
        spread_over_files(ranked, top, per_file)
            .into_iter()
            .map(|(c, _)| c.chunk_id.clone())
            .collect()
    }

    #[test]
    fn results_spread_over_files_and_fill_from_what_was_passed_over() {
        // a a a b a c: one per file gives a, b, c, then the best passed over (a1, a2).
        let ranked = ["a", "a", "a", "b", "a", "c"];
        assert_eq!(spread(&ranked, 3, 1), ["a0", "b3", "c5"]);
        assert_eq!(spread(&ranked, 5, 1), ["a0", "a1", "a2", "b3", "c5"]);
        assert_eq!(spread(&ranked, 4, 2), ["a0", "a1", "b3", "c5"]);
        // No limit: the ranking as it is.
        assert_eq!(spread(&ranked, 4, 0), ["a0", "a1", "a2", "b3"]);
        // One file only: still `top` chunks.
        assert_eq!(spread(&["a", "a", "a"], 2, 1), ["a0", "a1"]);
        assert_eq!(spread(&ranked, 0, 1), Vec::<String>::new());
    }

    #[test]
    fn definition_questions() {
        assert!(is_definition_question("What is a closure?"));
        assert!(is_definition_question("¿Qué es un endpoint?"));
        assert!(is_definition_question("explica el bucle"));
        assert!(!is_definition_question("write a function that adds"));
        assert!(!is_definition_question("getUserName"));
        // Inside the question as words of their own, not as parts of words.
        assert!(is_definition_question("so what is a closure?"));
        assert!(is_definition_question("ok, y qué es un trait?"));
        assert!(!is_definition_question("a somewhat isolated test"));
        assert!(!is_definition_question("so what isn't covered"));
    }
}

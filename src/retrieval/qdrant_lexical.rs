//! BM25 in a Qdrant server, for a knowledge base shared by several gateways: each chunk
//! is a point of sparse vector `bm25`, whose dimensions are the chunk's terms (the same
//! fields and analyzers as the tantivy index, `analyzers`) and whose values are BM25's
//! term-frequency part; the collection's IDF modifier makes Qdrant weigh each term by
//! how rare it is among the stored chunks at query time, so the score of a query is
//! BM25's own. Nothing of it is kept in a gateway's data folder: whatever any gateway or
//! `ingest` writes, every gateway searches at once.
//!
//! The only difference from tantivy's BM25 is the average length BM25 normalises each
//! field's length against: tantivy reads it off the index, a shared index cannot (a
//! chunk's values are written once, by whichever process indexed it), so each field has a
//! fixed average measured on the benchmark corpora (`AVERAGE_TERMS`).
//!
//! The same collection keeps the record of what is indexed (ingest's manifest), as points
//! without vectors, so every process writing the index reads one record.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use qdrant_client::qdrant::{
    Condition, CountPointsBuilder, CreateCollectionBuilder, CreateFieldIndexCollectionBuilder,
    DeletePointsBuilder, FieldType, Filter, GetPointsBuilder, Modifier, PointId, PointStruct,
    PointsIdsList, Query, QueryPointsBuilder, ScrollPointsBuilder, SparseVectorParamsBuilder,
    SparseVectorsConfigBuilder, UpsertPointsBuilder, Vector, VectorInput,
};
use qdrant_client::{Payload, Qdrant};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::analyzers::{Analyzers, Field};
use super::edge::point_number;
use super::{Hit, KnowledgeChunk, Lang, LexicalIndex, Records};

/// The sparse vector's name.
const VECTOR: &str = "bm25";
/// BM25's parameters, tantivy's.
const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Each field's average length in terms, in the order of `Field::ALL` (measured over
/// `examples/knowledge` and the Debian benchmark together, with the default chunking).
/// The names a chunk defines: about two for code, none for prose.
const AVERAGE_TERMS: [f32; 6] = [9.0, 9.0, 75.0, 75.0, 100.0, 2.0];
const UPSERT_BATCH: usize = 256;
/// Records read per page.
const SCROLL_PAGE: u32 = 1_000;
/// The payload field that marks a record (not a chunk).
const RECORD: &str = "record_key";

pub struct QdrantLexical {
    /// Drives the client: the trait is synchronous and is called from async tasks'
    /// blocking threads and from the ingest's thread alike.
    runtime: Option<tokio::runtime::Runtime>,
    client: Qdrant,
    collection: String,
    url: String,
    analyzers: Analyzers,
    /// The collection is known to exist.
    exists: AtomicBool,
}

impl QdrantLexical {
    /// The lexical index in collection `collection` of the Qdrant server at `url`
    /// (created at the first write).
    pub fn connect(url: &str, api_key: Option<&str>, collection: &str) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("qdrant-bm25")
            .enable_all()
            .build()
            .context("starting the Qdrant client's threads")?;
        let client = {
            let _inside = runtime.enter();
            let mut config = Qdrant::from_url(url).timeout(std::time::Duration::from_secs(30));
            if let Some(key) = api_key {
                config = config.api_key(key.to_string());
            }
            config
                .build()
                .with_context(|| format!("cannot set up the Qdrant client for {url}"))?
        };
        Ok(Self {
            runtime: Some(runtime),
            client,
            collection: collection.to_string(),
            url: url.to_string(),
            analyzers: Analyzers::new()?,
            exists: AtomicBool::new(false),
        })
    }

    /// Runs `call` with the client on the index's own threads and waits for it.
    fn run<T, F>(&self, call: impl FnOnce(Qdrant, String) -> F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Future<Output = anyhow::Result<T>> + Send + 'static,
    {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| anyhow!("the Qdrant client has stopped"))?;
        let task = runtime.spawn(call(self.client.clone(), self.collection.clone()));
        futures::executor::block_on(task)
            .map_err(|e| anyhow!("a Qdrant call stopped: {e}"))?
            .map_err(|e| anyhow!("Qdrant {} ({}): {e:#}", self.url, self.collection))
    }

    /// Whether the collection exists (once it does, it is not asked again).
    fn exists(&self) -> anyhow::Result<bool> {
        if self.exists.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let exists = self.run(|client, collection| async move {
            Ok(client.collection_exists(collection.as_str()).await?)
        })?;
        self.exists.store(exists, Ordering::Relaxed);
        Ok(exists)
    }

    /// Creates the collection when it does not exist.
    fn ensure(&self) -> anyhow::Result<()> {
        if self.exists()? {
            return Ok(());
        }
        self.run(|client, collection| async move {
            let mut sparse = SparseVectorsConfigBuilder::default();
            sparse.add_named_vector_params(
                VECTOR,
                SparseVectorParamsBuilder::default().modifier(Modifier::Idf as i32),
            );
            let created = client
                .create_collection(
                    CreateCollectionBuilder::new(collection.as_str()).sparse_vectors_config(sparse),
                )
                .await;
            // Another process may have created it meanwhile.
            if let Err(e) = created {
                if !client.collection_exists(collection.as_str()).await? {
                    return Err(e.into());
                }
            }
            for field in ["source_file", RECORD] {
                client
                    .create_field_index(
                        CreateFieldIndexCollectionBuilder::new(
                            collection.as_str(),
                            field,
                            FieldType::Keyword,
                        )
                        .wait(true),
                    )
                    .await?;
            }
            Ok(())
        })?;
        self.exists.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The chunk's sparse vector: each field's terms with BM25's term-frequency part.
    fn document(&self, chunk: &KnowledgeChunk) -> anyhow::Result<Vector> {
        let mut values: BTreeMap<u32, f32> = BTreeMap::new();
        for (field, average) in Field::ALL.into_iter().zip(AVERAGE_TERMS) {
            let tokens = self
                .analyzers
                .tokens(field.analyzer(), &field.text(chunk))?;
            let length = tokens.len() as f32;
            let mut counts: HashMap<&str, f32> = HashMap::new();
            for t in &tokens {
                *counts.entry(t.as_str()).or_default() += 1.0;
            }
            let norm = K1 * (1.0 - B + B * length / average);
            for (term, tf) in counts {
                *values.entry(dimension(field, term)).or_default() += tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let (indices, values): (Vec<u32>, Vec<f32>) = values.into_iter().unzip();
        Ok(Vector::new_sparse(indices, values))
    }

    fn point(&self, chunk: &KnowledgeChunk) -> anyhow::Result<PointStruct> {
        let payload = Payload::try_from(serde_json::to_value(chunk)?)
            .map_err(|e| anyhow!("chunk payload: {e}"))?;
        let vectors = HashMap::from([(VECTOR.to_string(), self.document(chunk)?)]);
        Ok(PointStruct::new(
            point_number(&chunk.chunk_id),
            vectors,
            payload,
        ))
    }
}

impl Drop for QdrantLexical {
    fn drop(&mut self) {
        // Dropped from async tasks too, where waiting for the threads is not allowed.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The sparse dimension of a field's term: the first four bytes of the SHA-256 of both,
/// the same in every process and version.
fn dimension(field: Field, term: &str) -> u32 {
    let mut hash = Sha256::new();
    hash.update(field.name().as_bytes());
    hash.update([0]);
    hash.update(term.as_bytes());
    let digest = hash.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

fn record_point(key: &str) -> u64 {
    point_number(&format!("record\0{key}"))
}

fn chunk_of(
    payload: HashMap<String, qdrant_client::qdrant::Value>,
) -> anyhow::Result<KnowledgeChunk> {
    serde_json::from_value(Value::from(Payload::from(payload)))
        .context("a Qdrant point's payload is not a chunk")
}

/// Removes the points `filter` selects, waiting until they are gone.
async fn delete(client: &Qdrant, collection: &str, filter: Filter) -> anyhow::Result<()> {
    client
        .delete_points(
            DeletePointsBuilder::new(collection)
                .points(filter)
                .wait(true),
        )
        .await?;
    Ok(())
}

/// Chunks, not records.
fn chunks_only() -> Filter {
    Filter::must_not([Condition::is_empty("chunk_id")])
}

impl LexicalIndex for QdrantLexical {
    fn replace_files(&self, files: &[(String, Vec<KnowledgeChunk>)]) -> anyhow::Result<()> {
        self.ensure()?;
        let points = files
            .iter()
            .flat_map(|(_, chunks)| chunks.iter().map(|c| self.point(c)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let keep: Vec<(String, Vec<PointId>)> = files
            .iter()
            .map(|(file, chunks)| {
                let ids = chunks
                    .iter()
                    .map(|c| point_number(&c.chunk_id).into())
                    .collect();
                (file.clone(), ids)
            })
            .collect();
        // The new points first, then the files' others: a search meanwhile finds the file.
        self.run(|client, collection| async move {
            let mut points = points;
            while !points.is_empty() {
                let rest = points.split_off(points.len().min(UPSERT_BATCH));
                client
                    .upsert_points(UpsertPointsBuilder::new(collection.as_str(), points).wait(true))
                    .await?;
                points = rest;
            }
            for (file, ids) in keep {
                let mut filter = Filter::must([Condition::matches("source_file", file)]);
                if !ids.is_empty() {
                    filter.must_not = vec![Condition::has_id(ids)];
                }
                delete(&client, &collection, filter).await?;
            }
            Ok(())
        })
    }

    fn remove_files(&self, files: &[String]) -> anyhow::Result<()> {
        if files.is_empty() || !self.exists()? {
            return Ok(());
        }
        let files = files.to_vec();
        self.run(|client, collection| async move {
            let filter = Filter::must([Condition::matches("source_file", files)]);
            delete(&client, &collection, filter).await
        })
    }

    fn search(&self, query: &str, lang: Lang, top_n: usize) -> anyhow::Result<Vec<Hit>> {
        let mut wanted: BTreeMap<u32, f32> = BTreeMap::new();
        for t in self.analyzers.query_terms(query, lang)? {
            *wanted.entry(dimension(t.field, &t.term)).or_default() += t.boost;
        }
        if wanted.is_empty() || top_n == 0 || !self.exists()? {
            return Ok(Vec::new());
        }
        let (indices, values): (Vec<u32>, Vec<f32>) = wanted.into_iter().unzip();
        let found = self.run(move |client, collection| async move {
            let request = QueryPointsBuilder::new(collection.as_str())
                .query(Query::new_nearest(VectorInput::new_sparse(indices, values)))
                .using(VECTOR)
                .limit(top_n as u64)
                .with_payload(true);
            Ok(client.query(request).await?.result)
        })?;
        found
            .into_iter()
            .map(|p| {
                Ok(Hit {
                    chunk: Arc::new(chunk_of(p.payload)?),
                    score: p.score,
                })
            })
            .collect()
    }

    fn chunk(&self, chunk_id: &str) -> anyhow::Result<Option<Arc<KnowledgeChunk>>> {
        if !self.exists()? {
            return Ok(None);
        }
        let id = point_number(chunk_id);
        let found = self.run(move |client, collection| async move {
            let request = GetPointsBuilder::new(collection.as_str(), vec![PointId::from(id)])
                .with_payload(true)
                .with_vectors(false);
            Ok(client.get_points(request).await?.result)
        })?;
        let Some(point) = found.into_iter().next() else {
            return Ok(None);
        };
        let chunk = chunk_of(point.payload)?;
        Ok((chunk.chunk_id == chunk_id).then(|| Arc::new(chunk)))
    }

    fn len(&self) -> anyhow::Result<u64> {
        if !self.exists()? {
            return Ok(0);
        }
        self.run(|client, collection| async move {
            let request = CountPointsBuilder::new(collection.as_str())
                .filter(chunks_only())
                .exact(true);
            Ok(client.count(request).await?.result.map_or(0, |r| r.count))
        })
    }

    fn optimize(&self) -> anyhow::Result<()> {
        // The server indexes on its own schedule.
        Ok(())
    }

    fn remote(&self) -> bool {
        true
    }

    fn records(&self) -> Option<&dyn Records> {
        Some(self)
    }
}

impl Records for QdrantLexical {
    fn load(&self) -> anyhow::Result<BTreeMap<String, Value>> {
        if !self.exists()? {
            return Ok(BTreeMap::new());
        }
        self.run(|client, collection| async move {
            let mut out = BTreeMap::new();
            let mut offset: Option<PointId> = None;
            loop {
                let mut request = ScrollPointsBuilder::new(collection.as_str())
                    .filter(Filter::must_not([Condition::is_empty(RECORD)]))
                    .limit(SCROLL_PAGE)
                    .with_payload(true)
                    .with_vectors(false);
                if let Some(at) = offset.take() {
                    request = request.offset(at);
                }
                let page = client.scroll(request).await?;
                for point in page.result {
                    let payload = Value::from(Payload::from(point.payload));
                    if let (Some(key), Some(value)) =
                        (payload[RECORD].as_str(), payload.get("value"))
                    {
                        out.insert(key.to_string(), value.clone());
                    }
                }
                match page.next_page_offset {
                    Some(next) if next.point_id_options.is_some() => offset = Some(next),
                    _ => return Ok(out),
                }
            }
        })
    }

    fn put(&self, records: &[(String, Value)]) -> anyhow::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.ensure()?;
        let mut points = records
            .iter()
            .map(|(key, value)| {
                let payload = Payload::try_from(json!({ RECORD: key, "value": value }))
                    .map_err(|e| anyhow!("record payload: {e}"))?;
                Ok(PointStruct::new(
                    record_point(key),
                    HashMap::<String, Vector>::new(),
                    payload,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.run(|client, collection| async move {
            while !points.is_empty() {
                let rest = points.split_off(points.len().min(UPSERT_BATCH));
                client
                    .upsert_points(UpsertPointsBuilder::new(collection.as_str(), points).wait(true))
                    .await?;
                points = rest;
            }
            Ok(())
        })
    }

    fn remove(&self, keys: &[String]) -> anyhow::Result<()> {
        if keys.is_empty() || !self.exists()? {
            return Ok(());
        }
        let ids: Vec<PointId> = keys.iter().map(|k| record_point(k).into()).collect();
        self.run(|client, collection| async move {
            client
                .delete_points(
                    DeletePointsBuilder::new(collection.as_str())
                        .points(PointsIdsList { ids })
                        .wait(true),
                )
                .await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terms_dimension_is_the_same_in_every_process_and_differs_by_field() {
        assert_eq!(
            dimension(Field::Code, "retry"),
            dimension(Field::Code, "retry")
        );
        assert_ne!(
            dimension(Field::Code, "retry"),
            dimension(Field::Body(Lang::En), "retry")
        );
        // Fixed: a shared index written by one version is read by the next.
        // The first four bytes of SHA-256("code\0retry"), as any SHA-256 tool gives them.
        assert_eq!(dimension(Field::Code, "retry"), 0x1576_28f9);
    }
}

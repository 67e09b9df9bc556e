//! The embedded Qdrant engine (`qdrant-edge`): the default vector store, persisted under
//! `data_dir`, with the same payload and filter model as a Qdrant server.
//!
//! One process at a time may hold a store folder open: the serving gateway holds its own
//! and writes into it itself (`ingest` beside it hands its work to the gateway).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::{anyhow, bail, Context};
use qdrant_edge::external::serde_json::{self as edge_json};
use qdrant_edge::{
    Condition, CountRequest, CreateIndex, Distance, EdgeConfig, EdgeOptimizersConfig, EdgeShard,
    EdgeVectorParams, FieldCondition, FieldIndexOperations, Filter, HasIdCondition, JsonPath,
    Match, NamedQuery, PayloadFieldSchema, PayloadSchemaType, PointId, PointInsertOperations,
    PointOperations, PointStruct, QueryEnum, QueryRequestBuilder, RetrieveRequest, ScoringQuery,
    SearchParams, UpdateOperation, VectorInternal, VectorStructInternal, Vectors,
    WithPayloadInterface, WithVector,
};
use sha2::{Digest, Sha256};

use super::{Hit, KnowledgeChunk, Languages, VectorPoint, VectorStore};

const VECTOR: &str = "dense";
/// HNSW beam width; filtered searches lose recall with a small beam, so theirs is wider.
const HNSW_EF: usize = 128;
const HNSW_EF_FILTERED: usize = 256;
/// Payload fields with a keyword index: deletes go by file, searches may leave out a
/// language, and a Qdrant server's filters by document type stay cheap.
pub(crate) const INDEXED_FIELDS: [&str; 3] = ["doc_type", "source_file", "language"];
/// Points per update operation.
const UPSERT_BATCH: usize = 256;

pub struct EdgeStore {
    dir: PathBuf,
    shard: RwLock<Option<Arc<EdgeShard>>>,
}

/// The numeric point id of a chunk id (first 8 bytes of its SHA-256), shared by both
/// Qdrant stores so a collection can move between them.
pub(crate) fn point_number(chunk_id: &str) -> u64 {
    let digest = Sha256::digest(chunk_id.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(bytes)
}

fn point_id(chunk_id: &str) -> PointId {
    PointId::NumId(point_number(chunk_id))
}

/// `field` equals `value` (one value, or any of several).
fn keyword_condition(field: &str, value: impl Into<Match>) -> anyhow::Result<Condition> {
    let key: JsonPath = field
        .parse()
        .map_err(|_| anyhow!("bad payload path {field}"))?;
    Ok(Condition::Field(FieldCondition::new_match(
        key,
        value.into(),
    )))
}

fn keyword(field: &str, value: &str) -> anyhow::Result<Filter> {
    Ok(Filter::new_must(keyword_condition(
        field,
        value.to_string(),
    )?))
}

impl EdgeStore {
    /// A store in `dir`; the collection is opened (or created) by `ensure_collection`,
    /// or opened right away when it already exists.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let store = Self {
            dir: dir.to_path_buf(),
            shard: RwLock::new(None),
        };
        if dir.join("edge_config.json").exists() {
            let shard = EdgeShard::load(dir, None)
                .map_err(|e| anyhow!("cannot open the vector store in {}: {e}", dir.display()))?;
            *store.shard.write().map_err(|_| anyhow!("poisoned"))? = Some(Arc::new(shard));
        }
        Ok(store)
    }

    fn shard(&self) -> anyhow::Result<Arc<EdgeShard>> {
        self.shard
            .read()
            .map_err(|_| anyhow!("the vector store lock was poisoned"))?
            .clone()
            .ok_or_else(|| {
                anyhow!(
                    "the vector store in {} is empty: run `ingest` first",
                    self.dir.display()
                )
            })
    }

    /// The dimension of the existing collection, if any.
    fn dimension(shard: &EdgeShard) -> Option<usize> {
        shard.config().vectors.get(VECTOR).map(|v| v.size)
    }

    /// Runs blocking shard work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(Arc<EdgeShard>) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let shard = self.shard()?;
        tokio::task::spawn_blocking(move || work(shard))
            .await
            .map_err(|e| anyhow!("vector store task failed: {e}"))?
    }
}

#[async_trait::async_trait]
impl VectorStore for EdgeStore {
    async fn ensure_collection(&self, dimension: usize) -> anyhow::Result<()> {
        if let Ok(shard) = self.shard() {
            return match Self::dimension(&shard) {
                Some(d) if d == dimension => Ok(()),
                Some(d) => bail!(
                    "the vector store in {} holds {d}-dimensional vectors but the embedder makes {dimension}: re-ingest with --rebuild",
                    self.dir.display()
                ),
                None => bail!("the vector store in {} has no '{VECTOR}' vectors", self.dir.display()),
            };
        }
        let dir = self.dir.clone();
        let shard = tokio::task::spawn_blocking(move || -> anyhow::Result<EdgeShard> {
            std::fs::create_dir_all(&dir)?;
            let config = EdgeConfig::builder()
                .vector(
                    VECTOR,
                    EdgeVectorParams::builder(dimension, Distance::Cosine).build(),
                )
                .optimizers(EdgeOptimizersConfig {
                    // Build HNSW for every segment when optimize() runs (the default waits
                    // for 10 MB segments and searches smaller ones by full scan).
                    indexing_threshold: Some(1),
                    ..Default::default()
                })
                .build();
            let shard = EdgeShard::new(&dir, config)
                .map_err(|e| anyhow!("cannot create the vector store in {}: {e}", dir.display()))?;
            for field in INDEXED_FIELDS {
                shard
                    .update(UpdateOperation::FieldIndexOperation(
                        FieldIndexOperations::CreateIndex(CreateIndex {
                            field_name: field.parse().map_err(|_| anyhow!("bad field {field}"))?,
                            field_schema: Some(PayloadFieldSchema::FieldType(
                                PayloadSchemaType::Keyword,
                            )),
                        }),
                    ))
                    .map_err(|e| anyhow!("cannot index the payload field {field}: {e}"))?;
            }
            Ok(shard)
        })
        .await??;
        *self.shard.write().map_err(|_| anyhow!("poisoned"))? = Some(Arc::new(shard));
        Ok(())
    }

    async fn upsert(&self, points: Vec<VectorPoint>) -> anyhow::Result<()> {
        self.blocking(move |shard| {
            for batch in points.chunks(UPSERT_BATCH) {
                let structs = batch
                    .iter()
                    .map(|p| {
                        let payload = edge_json::to_value(&p.chunk).context("chunk payload")?;
                        Ok(PointStruct::new(
                            point_id(&p.chunk.chunk_id),
                            Vectors::new_named([(VECTOR, p.vector.clone())]),
                            payload,
                        )
                        .into())
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                shard
                    .update(UpdateOperation::PointOperation(
                        PointOperations::UpsertPoints(PointInsertOperations::PointsList(structs)),
                    ))
                    .map_err(|e| anyhow!("vector upsert failed: {e}"))?;
            }
            shard
                .flush()
                .map_err(|e| anyhow!("vector store flush failed: {e}"))
        })
        .await
    }

    async fn remove_files_except(&self, files: &[String], keep: &[String]) -> anyhow::Result<()> {
        if self.shard().is_err() {
            return Ok(()); // nothing stored yet
        }
        let files = files.to_vec();
        let keep: HasIdCondition = keep.iter().map(|id| point_id(id)).collect();
        self.blocking(move |shard| {
            for file in &files {
                let mut filter = keyword("source_file", file)?;
                if !keep.has_id.is_empty() {
                    filter.must_not = Some(vec![Condition::HasId(keep.clone())]);
                }
                shard
                    .update(UpdateOperation::PointOperation(
                        PointOperations::DeletePointsByFilter(filter),
                    ))
                    .map_err(|e| anyhow!("vector delete failed: {e}"))?;
            }
            shard
                .flush()
                .map_err(|e| anyhow!("vector store flush failed: {e}"))
        })
        .await
    }

    async fn vectors(&self, chunk_ids: &[String]) -> anyhow::Result<HashMap<String, Vec<f32>>> {
        if chunk_ids.is_empty() || self.shard().is_err() {
            return Ok(HashMap::new());
        }
        let by_number: HashMap<u64, String> = chunk_ids
            .iter()
            .map(|id| (point_number(id), id.clone()))
            .collect();
        self.blocking(move |shard| {
            let ids = by_number.keys().map(|n| PointId::NumId(*n)).collect();
            let mut request = RetrieveRequest::new(ids);
            request.with_payload = Some(WithPayloadInterface::Bool(false));
            request.with_vector = Some(WithVector::Selector(vec![VECTOR.into()]));
            let records = shard
                .retrieve(request)
                .map_err(|e| anyhow!("vector retrieve failed: {e}"))?;
            Ok(records
                .into_iter()
                .filter_map(|r| {
                    let PointId::NumId(n) = r.id else {
                        return None;
                    };
                    let VectorStructInternal::Named(mut named) = r.vector? else {
                        return None;
                    };
                    let VectorInternal::Dense(vector) = named.remove(VECTOR)? else {
                        return None;
                    };
                    Some((by_number.get(&n)?.clone(), vector))
                })
                .collect())
        })
        .await
    }

    async fn search(
        &self,
        vector: &[f32],
        top_n: usize,
        languages: Languages<'_>,
    ) -> anyhow::Result<Vec<Hit>> {
        let vector = vector.to_vec();
        let languages = languages.listed();
        self.blocking(move |shard| {
            let mut request = QueryRequestBuilder::new(top_n)
                .query(ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery::new(
                    VectorInternal::from(vector),
                    VECTOR,
                ))))
                .params(SearchParams {
                    hnsw_ef: Some(if languages.is_some() {
                        HNSW_EF_FILTERED
                    } else {
                        HNSW_EF
                    }),
                    ..Default::default()
                })
                .with_payload(WithPayloadInterface::Bool(true));
            if let Some((codes, wanted)) = languages {
                let condition = keyword_condition("language", codes)?;
                request = request.filter(if wanted {
                    Filter::new_must(condition)
                } else {
                    Filter::new_must_not(condition)
                });
            }
            let points = shard
                .query(request.build())
                .map_err(|e| anyhow!("vector search failed: {e}"))?;
            points
                .into_iter()
                .map(|p| {
                    let payload = p
                        .payload
                        .ok_or_else(|| anyhow!("a vector point has no payload"))?;
                    let chunk: KnowledgeChunk =
                        edge_json::from_value(edge_json::Value::Object(payload.0))
                            .context("a vector point's payload is not a chunk")?;
                    Ok(Hit {
                        chunk: Arc::new(chunk),
                        score: p.score,
                    })
                })
                .collect()
        })
        .await
    }

    async fn count(&self) -> anyhow::Result<u64> {
        if self.shard().is_err() {
            return Ok(0);
        }
        self.blocking(|shard| {
            shard
                .count(CountRequest::new())
                .map(|n| n as u64)
                .map_err(|e| anyhow!("vector count failed: {e}"))
        })
        .await
    }

    async fn optimize(&self) -> anyhow::Result<()> {
        self.blocking(|shard| {
            shard
                .optimize()
                .map_err(|e| anyhow!("building the vector index failed: {e}"))?;
            shard
                .flush()
                .map_err(|e| anyhow!("vector store flush failed: {e}"))
        })
        .await
    }
}

//! A Qdrant server (or cluster) over gRPC with `qdrant-client`: for production and for
//! several gateway replicas sharing one knowledge base. Same payload and filters as the
//! embedded engine; the server builds its own HNSW index.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use qdrant_client::qdrant::{
    point_id, vector_output, vectors_config, vectors_output, Condition, CountPointsBuilder,
    CreateCollectionBuilder, CreateFieldIndexCollectionBuilder, DeletePointsBuilder, Distance,
    FieldType, Filter, GetPointsBuilder, PointId, PointStruct, SearchParamsBuilder,
    SearchPointsBuilder, UpsertPointsBuilder, VectorParamsBuilder,
};
use qdrant_client::{Payload, Qdrant};

use super::edge::{point_number, INDEXED_FIELDS};
use super::{Hit, KnowledgeChunk, Languages, VectorPoint, VectorStore};

const HNSW_EF: u64 = 128;
const HNSW_EF_FILTERED: u64 = 256;
const UPSERT_BATCH: usize = 256;

pub struct QdrantServerStore {
    client: Qdrant,
    collection: String,
    url: String,
}

impl QdrantServerStore {
    pub fn connect(url: &str, api_key: Option<&str>, collection: &str) -> anyhow::Result<Self> {
        let mut config = Qdrant::from_url(url).timeout(std::time::Duration::from_secs(30));
        if let Some(key) = api_key {
            config = config.api_key(key.to_string());
        }
        let client = config
            .build()
            .with_context(|| format!("cannot set up the Qdrant client for {url}"))?;
        Ok(Self {
            client,
            collection: collection.to_string(),
            url: url.to_string(),
        })
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> anyhow::Error {
        anyhow!("Qdrant {} ({}): {what}: {e}", self.url, self.collection)
    }

    async fn exists(&self) -> anyhow::Result<bool> {
        self.client
            .collection_exists(self.collection.as_str())
            .await
            .map_err(|e| self.err("collection check failed", e))
    }
}

#[async_trait::async_trait]
impl VectorStore for QdrantServerStore {
    async fn ensure_collection(&self, dimension: usize) -> anyhow::Result<()> {
        if self.exists().await? {
            let info = self
                .client
                .collection_info(self.collection.as_str())
                .await
                .map_err(|e| self.err("collection info failed", e))?;
            let size = info
                .result
                .and_then(|r| r.config)
                .and_then(|c| c.params)
                .and_then(|p| p.vectors_config)
                .and_then(|v| v.config)
                .and_then(|c| match c {
                    vectors_config::Config::Params(p) => Some(p.size as usize),
                    vectors_config::Config::ParamsMap(_) => None,
                });
            return match size {
                Some(d) if d == dimension => Ok(()),
                Some(d) => bail!(
                    "Qdrant collection {} holds {d}-dimensional vectors but the embedder makes {dimension}: re-ingest with --rebuild or use another qdrant.collection",
                    self.collection
                ),
                None => bail!("Qdrant collection {} has no single dense vector", self.collection),
            };
        }
        self.client
            .create_collection(
                CreateCollectionBuilder::new(self.collection.as_str())
                    .vectors_config(VectorParamsBuilder::new(dimension as u64, Distance::Cosine)),
            )
            .await
            .map_err(|e| self.err("create collection failed", e))?;
        for field in INDEXED_FIELDS {
            self.client
                .create_field_index(
                    CreateFieldIndexCollectionBuilder::new(
                        self.collection.as_str(),
                        field,
                        FieldType::Keyword,
                    )
                    .wait(true),
                )
                .await
                .map_err(|e| self.err("payload index failed", e))?;
        }
        Ok(())
    }

    async fn upsert(&self, points: Vec<VectorPoint>) -> anyhow::Result<()> {
        for batch in points.chunks(UPSERT_BATCH) {
            let structs = batch
                .iter()
                .map(|p| {
                    let payload = Payload::try_from(serde_json::to_value(&p.chunk)?)
                        .map_err(|e| anyhow!("chunk payload: {e}"))?;
                    Ok(PointStruct::new(
                        point_number(&p.chunk.chunk_id),
                        p.vector.clone(),
                        payload,
                    ))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            self.client
                .upsert_points(
                    UpsertPointsBuilder::new(self.collection.as_str(), structs).wait(true),
                )
                .await
                .map_err(|e| self.err("upsert failed", e))?;
        }
        Ok(())
    }

    async fn remove_files_except(&self, files: &[String], keep: &[String]) -> anyhow::Result<()> {
        if files.is_empty() || !self.exists().await? {
            return Ok(());
        }
        let keep: Vec<PointId> = keep.iter().map(|id| point_number(id).into()).collect();
        for file in files {
            let mut filter = Filter::must([Condition::matches("source_file", file.clone())]);
            if !keep.is_empty() {
                filter.must_not = vec![Condition::has_id(keep.clone())];
            }
            self.client
                .delete_points(
                    DeletePointsBuilder::new(self.collection.as_str())
                        .points(filter)
                        .wait(true),
                )
                .await
                .map_err(|e| self.err("delete failed", e))?;
        }
        Ok(())
    }

    async fn vectors(&self, chunk_ids: &[String]) -> anyhow::Result<HashMap<String, Vec<f32>>> {
        if chunk_ids.is_empty() || !self.exists().await? {
            return Ok(HashMap::new());
        }
        let by_number: HashMap<u64, &String> =
            chunk_ids.iter().map(|id| (point_number(id), id)).collect();
        let ids: Vec<PointId> = by_number.keys().map(|n| (*n).into()).collect();
        let response = self
            .client
            .get_points(
                GetPointsBuilder::new(self.collection.as_str(), ids)
                    .with_vectors(true)
                    .with_payload(false),
            )
            .await
            .map_err(|e| self.err("retrieve failed", e))?;
        Ok(response
            .result
            .into_iter()
            .filter_map(|p| {
                let Some(point_id::PointIdOptions::Num(n)) = p.id?.point_id_options else {
                    return None;
                };
                let output = match p.vectors?.vectors_options? {
                    vectors_output::VectorsOptions::Vector(v) => v,
                    vectors_output::VectorsOptions::Vectors(_) => return None,
                };
                let vector_output::Vector::Dense(dense) = output.into_vector() else {
                    return None;
                };
                Some((by_number.get(&n)?.to_string(), dense.data))
            })
            .collect())
    }

    async fn search(
        &self,
        vector: &[f32],
        top_n: usize,
        languages: Languages<'_>,
    ) -> anyhow::Result<Vec<Hit>> {
        let languages = languages.listed();
        let ef = if languages.is_some() {
            HNSW_EF_FILTERED
        } else {
            HNSW_EF
        };
        let mut request =
            SearchPointsBuilder::new(self.collection.as_str(), vector.to_vec(), top_n as u64)
                .with_payload(true)
                .params(SearchParamsBuilder::default().hnsw_ef(ef));
        if let Some((codes, wanted)) = languages {
            let condition = [Condition::matches("language", codes)];
            request = request.filter(if wanted {
                Filter::must(condition)
            } else {
                Filter::must_not(condition)
            });
        }
        let response = self
            .client
            .search_points(request)
            .await
            .map_err(|e| self.err("search failed", e))?;
        response
            .result
            .into_iter()
            .map(|p| {
                let payload = serde_json::Value::from(Payload::from(p.payload));
                let chunk: KnowledgeChunk = serde_json::from_value(payload)
                    .context("a Qdrant point's payload is not a chunk")?;
                Ok(Hit {
                    chunk: Arc::new(chunk),
                    score: p.score,
                })
            })
            .collect()
    }

    async fn count(&self) -> anyhow::Result<u64> {
        if !self.exists().await? {
            return Ok(0);
        }
        let response = self
            .client
            .count(CountPointsBuilder::new(self.collection.as_str()).exact(true))
            .await
            .map_err(|e| self.err("count failed", e))?;
        Ok(response.result.map_or(0, |r| r.count))
    }

    async fn optimize(&self) -> anyhow::Result<()> {
        // The server indexes on its own schedule.
        Ok(())
    }
}

//! The knowledge base: `[embeddings]`, `[qdrant]`, `[retrieval]`, `[ingest]` and
//! `[knowledge]`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{
    check, check_upstream_url, list_or_comma_string, millis, unset_if_empty, SettingsError,
};

/// The embedding model an `ollama` or `openai` embedder asks for when `embeddings.model`
/// is unset.
pub const DEFAULT_EMBEDDING_MODEL: &str = "nomic-embed-text";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "EmbeddingToml", into = "EmbeddingToml")]
pub struct EmbeddingSettings {
    pub provider: EmbeddingProvider,
    /// Unset = `llm.base_url`.
    pub base_url: Option<String>,
    /// The model's name: what an `ollama` or `openai` upstream is asked for, and what the
    /// embedding endpoints serve it as. `embeddings.model` unset: `DEFAULT_EMBEDDING_MODEL`
    /// here, and the local embedder is served under the name of the model in its folder.
    pub model: String,
    /// Whether `embeddings.model` was set (in a file or the environment); see `model_is_set`.
    pub model_set: bool,
    pub path: Option<PathBuf>,
    /// Unset = `llm.api_key`.
    pub api_key: Option<String>,
    pub batch_size: usize,
    pub languages: Vec<String>,
}

/// `[embeddings]` as written, where `model = ""` means unset.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbeddingToml {
    provider: EmbeddingProvider,
    #[serde(default, with = "unset_if_empty")]
    base_url: Option<String>,
    #[serde(default)]
    model: String,
    #[serde(default, with = "unset_if_empty")]
    path: Option<PathBuf>,
    #[serde(default, with = "unset_if_empty")]
    api_key: Option<String>,
    batch_size: usize,
    #[serde(deserialize_with = "list_or_comma_string")]
    languages: Vec<String>,
}

impl From<EmbeddingToml> for EmbeddingSettings {
    fn from(t: EmbeddingToml) -> Self {
        let model = t.model.trim();
        Self {
            provider: t.provider,
            base_url: t.base_url,
            model: if model.is_empty() {
                DEFAULT_EMBEDDING_MODEL.to_string()
            } else {
                model.to_string()
            },
            model_set: !model.is_empty(),
            path: t.path,
            api_key: t.api_key,
            batch_size: t.batch_size,
            languages: t.languages,
        }
    }
}

impl From<EmbeddingSettings> for EmbeddingToml {
    fn from(s: EmbeddingSettings) -> Self {
        Self {
            model: if s.model_is_set() {
                s.model
            } else {
                String::new()
            },
            provider: s.provider,
            base_url: s.base_url,
            path: s.path,
            api_key: s.api_key,
            batch_size: s.batch_size,
            languages: s.languages,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingProvider {
    None,
    Local,
    Ollama,
    Openai,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QdrantSettings {
    /// Unset = the embedded engine under `data_dir`.
    #[serde(default, with = "unset_if_empty")]
    pub url: Option<String>,
    pub collection: String,
    #[serde(default, with = "unset_if_empty")]
    pub api_key: Option<String>,
    /// With a server: BM25 lives there too (sparse vectors), shared by every gateway.
    pub lexical: bool,
}

impl QdrantSettings {
    /// The collection of the BM25 side, beside the vectors'.
    pub fn lexical_collection(&self) -> String {
        format!("{}-lexical", self.collection)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalSettings {
    pub top_k: usize,
    /// Characters of a search query the search reads: its beginning and its end.
    pub max_query_chars: usize,
    pub rrf_k: f32,
    pub candidates: usize,
    pub bm25_weight: f32,
    /// BM25's weight for questions in a language the embedder reads, in place of
    /// `bm25_weight`.
    pub bm25_weight_by_language: LanguageWeights,
    pub dense_weight: f32,
    pub foreign_dense_weight: f32,
    /// Added to the similarity of chunks in other languages than the query's before the
    /// dense list is ranked (with an embedder that reads more than one language).
    pub cross_language_offset: f32,
    /// Most chunks of one file in a search's results while other files have candidates
    /// (0 = no limit).
    pub max_chunks_per_file: usize,
    pub spec_boost: f32,
    pub narrative_boost: f32,
    pub code_example_boost: f32,
    pub code_boost: f32,
    /// Longest wait for the dense half of a search (embedding the query and the vector
    /// store's answer), in milliseconds; past it BM25 answers alone.
    pub deadline_ms: u64,
}

/// A number per natural language the retriever tells apart; unset = the general setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageWeights {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub en: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub es: Option<f32>,
}

/// `[knowledge]`: what the serving gateway indexes itself, and whether it watches it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeSettings {
    /// Folders and files indexed at start and on every refresh, as `ingest` takes them.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub sources: Vec<String>,
    /// Re-index what changes under the sources while serving.
    pub watch: bool,
    /// Quiet time after the last change seen before a watched refresh starts.
    #[serde(rename = "watch_debounce_ms", with = "millis")]
    pub watch_debounce: std::time::Duration,
}

impl KnowledgeSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.sources.iter().all(|s| !s.trim().is_empty()),
            "knowledge.sources",
            "a source is a folder or file path",
        )?;
        check(
            !self.watch || !self.sources.is_empty(),
            "knowledge.watch",
            "watching needs knowledge.sources",
        )?;
        check(
            self.watch_debounce <= std::time::Duration::from_secs(60),
            "knowledge.watch_debounce_ms",
            "at most 60000",
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSettings {
    pub chunk_chars: usize,
    pub overlap_chars: usize,
    pub max_file_bytes: u64,
    /// Globs of files never indexed, beside `.gitignore`'s.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub exclude: Vec<String>,
}

impl QdrantSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            !self.collection.trim().is_empty(),
            "qdrant.collection",
            "must not be empty",
        )
    }
}

impl IngestSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.chunk_chars >= 200 && self.overlap_chars < self.chunk_chars,
            "ingest.chunk_chars / ingest.overlap_chars",
            "chunk_chars must be at least 200 and larger than overlap_chars",
        )
    }
}

impl EmbeddingSettings {
    /// Whether the model was named in the settings (a file, the environment, or code that
    /// changed `model`), rather than left to its default.
    pub fn model_is_set(&self) -> bool {
        self.model_set || self.model != DEFAULT_EMBEDDING_MODEL
    }

    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.provider != EmbeddingProvider::Local || self.path.is_some(),
            "embeddings.path",
            "the local embedder needs the model folder",
        )?;
        if let Some(url) = &self.base_url {
            check_upstream_url("embeddings.base_url", url)?;
        }
        check(
            self.batch_size > 0,
            "embeddings.batch_size",
            "must be at least 1",
        )
    }
}

impl RetrievalSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.top_k > 0 && self.candidates >= self.top_k,
            "retrieval.top_k / retrieval.candidates",
            "top_k must be at least 1 and candidates at least top_k",
        )?;
        check(self.rrf_k > 0.0, "retrieval.rrf_k", "must be positive")?;
        check(
            self.max_query_chars >= 16,
            "retrieval.max_query_chars",
            "must be at least 16",
        )?;
        check(
            (0.0..=1.0).contains(&self.cross_language_offset),
            "retrieval.cross_language_offset",
            "must be a number from 0 to 1",
        )?;
        let by_language = &self.bm25_weight_by_language;
        let weights = [
            ("retrieval.bm25_weight", self.bm25_weight),
            (
                "retrieval.bm25_weight_by_language.en",
                by_language.en.unwrap_or(0.0),
            ),
            (
                "retrieval.bm25_weight_by_language.es",
                by_language.es.unwrap_or(0.0),
            ),
            ("retrieval.dense_weight", self.dense_weight),
            ("retrieval.foreign_dense_weight", self.foreign_dense_weight),
            ("retrieval.spec_boost", self.spec_boost),
            ("retrieval.narrative_boost", self.narrative_boost),
            ("retrieval.code_example_boost", self.code_example_boost),
            ("retrieval.code_boost", self.code_boost),
        ];
        match weights.iter().find(|(_, w)| !w.is_finite() || *w < 0.0) {
            Some((key, _)) => Err(SettingsError::new(key, "must be a number ≥ 0")),
            None => Ok(()),
        }
    }
}

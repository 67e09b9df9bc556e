//! Knowledge retrieval: what a chunk of knowledge is, the lexical (BM25) index, and
//! rank fusion. The dense-vector store and the hybrid retriever that fuses both lists
//! join here (issue 3); ingestion fills the indexes.

pub mod analyzers;
pub mod edge;
pub mod fusion;
mod glossary;
pub mod hybrid;
pub mod indexes;
pub mod lang;
pub mod lexical;
pub mod qdrant_lexical;
pub mod qdrant_server;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use lang::Lang;

/// What kind of document a chunk comes from; used for boosts and filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocType {
    /// Reference material: language or API specifications.
    Spec,
    /// Prose: guides, tutorials, READMEs.
    Narrative,
    /// Source code.
    Code,
    /// Code inside documentation (a fenced example).
    CodeExample,
}

impl DocType {
    pub fn as_str(self) -> &'static str {
        match self {
            DocType::Spec => "spec",
            DocType::Narrative => "narrative",
            DocType::Code => "code",
            DocType::CodeExample => "code_example",
        }
    }
}

/// One searchable piece of the knowledge base, with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeChunk {
    /// Stable across runs for unchanged content.
    pub chunk_id: String,
    pub source_file: String,
    /// 1-based, inclusive.
    pub start_line: usize,
    pub end_line: usize,
    pub doc_type: DocType,
    /// `section`, `function`, `class`, `impl`, `code_block`, `window`, …
    pub block_type: String,
    /// Heading path, e.g. `Guide > Installation`.
    pub section: String,
    /// Natural language (`en`, `es`) for prose, the programming language for code.
    pub language: String,
    pub text: String,
    /// The names this chunk's code defines (functions, methods, classes, types,
    /// constants), found by the grammar's tags query; empty for prose. A question or a
    /// completion that names one finds its definition first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defines: Vec<String>,
}

#[cfg(test)]
impl KnowledgeChunk {
    /// A one-line narrative chunk of `file` whose text is its id (unit tests).
    pub(crate) fn sample(id: &str, file: &str) -> Self {
        Self {
            chunk_id: id.into(),
            source_file: file.into(),
            start_line: 1,
            end_line: 1,
            doc_type: DocType::Narrative,
            block_type: "section".into(),
            section: String::new(),
            language: "en".into(),
            text: id.into(),
            defines: Vec::new(),
        }
    }
}

/// A chunk found by a search, with the searcher's own score.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Shared with the index's cache of decoded chunks (a search reads tens of them).
    pub chunk: Arc<KnowledgeChunk>,
    pub score: f32,
}

/// Full-text search over the knowledge base.
pub trait LexicalIndex: Send + Sync {
    /// Replaces everything indexed for each given file with its new chunks, atomically
    /// (a crash leaves the previous state).
    fn replace_files(&self, files: &[(String, Vec<KnowledgeChunk>)]) -> anyhow::Result<()>;
    /// Removes every chunk of these files.
    fn remove_files(&self, files: &[String]) -> anyhow::Result<()>;
    /// The best `top_n` chunks for a query written in `lang`.
    fn search(&self, query: &str, lang: Lang, top_n: usize) -> anyhow::Result<Vec<Hit>>;
    /// The chunk with this id, if the index holds it.
    fn chunk(&self, chunk_id: &str) -> anyhow::Result<Option<Arc<KnowledgeChunk>>>;
    /// Number of chunks indexed.
    fn len(&self) -> anyhow::Result<u64>;
    /// Compacts the index after a run of changes (searches read fewer parts).
    fn optimize(&self) -> anyhow::Result<()>;
    fn is_empty(&self) -> anyhow::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Whether its calls leave the process (a server): they are never made on a
    /// request's own task.
    fn remote(&self) -> bool {
        false
    }
    /// The record of what is indexed (ingest's manifest: each file's hash), when the
    /// index keeps it itself so that every process writing one shared index reads the
    /// same record; `None`: the record is a file beside the index.
    fn records(&self) -> Option<&dyn Records> {
        None
    }
}

/// Records kept with a shared index, by key (JSON values; what they mean is the
/// ingest's business).
pub trait Records: Send + Sync {
    fn load(&self) -> anyhow::Result<std::collections::BTreeMap<String, serde_json::Value>>;
    /// Writes these records, replacing any of the same keys.
    fn put(&self, records: &[(String, serde_json::Value)]) -> anyhow::Result<()>;
    fn remove(&self, keys: &[String]) -> anyhow::Result<()>;
}

/// Which chunks a vector search considers, by their `language`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Languages<'a> {
    All,
    /// Only chunks written in one of these.
    In(&'a [&'a str]),
    /// Every chunk but those written in one of these.
    NotIn(&'a [&'a str]),
}

impl Languages<'_> {
    /// The chunk languages named, and whether they are the ones let through (`None` for
    /// `All`).
    pub fn listed(self) -> Option<(Vec<String>, bool)> {
        let owned = |codes: &[&str]| codes.iter().map(|c| c.to_string()).collect();
        match self {
            Languages::All => None,
            Languages::In(codes) => Some((owned(codes), true)),
            Languages::NotIn(codes) => Some((owned(codes), false)),
        }
    }
}

/// A chunk with its dense vector, as stored in the vector store.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorPoint {
    pub chunk: KnowledgeChunk,
    pub vector: Vec<f32>,
}

/// Dense-vector search over the knowledge base (Qdrant: a server or the embedded engine).
#[async_trait::async_trait]
pub trait VectorStore: Send + Sync {
    /// Creates the collection for vectors of `dimension` if it does not exist; an existing
    /// collection of another dimension is an error (re-ingest with `--rebuild`).
    async fn ensure_collection(&self, dimension: usize) -> anyhow::Result<()>;
    /// Inserts or replaces points (keyed by chunk id).
    async fn upsert(&self, points: Vec<VectorPoint>) -> anyhow::Result<()>;
    /// Removes every point of these files.
    async fn remove_files(&self, files: &[String]) -> anyhow::Result<()> {
        self.remove_files_except(files, &[]).await
    }
    /// Removes every point of these files but the chunks `keep` names (what a changed
    /// file still holds, written before its old points go).
    async fn remove_files_except(&self, files: &[String], keep: &[String]) -> anyhow::Result<()>;
    /// The stored vectors of those of these chunks that are stored, by chunk id: a chunk
    /// id is a hash of its file, section and text, so a chunk found keeps its vector and
    /// is not embedded again.
    async fn vectors(
        &self,
        chunk_ids: &[String],
    ) -> anyhow::Result<std::collections::HashMap<String, Vec<f32>>>;
    /// The `top_n` nearest chunks among those `languages` lets through.
    async fn search(
        &self,
        vector: &[f32],
        top_n: usize,
        languages: Languages<'_>,
    ) -> anyhow::Result<Vec<Hit>>;
    /// Number of points stored.
    async fn count(&self) -> anyhow::Result<u64>;
    /// Builds the search index (HNSW) after a bulk load; may take a while.
    async fn optimize(&self) -> anyhow::Result<()>;
}

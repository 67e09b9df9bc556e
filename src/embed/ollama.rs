//! Ollama's `/api/embed`.

use async_trait::async_trait;
use serde_json::json;

use super::{embed_in_batches, Embedder, TextKind};
use crate::llm::http::Upstream;
use crate::llm::{UpstreamError, UpstreamErrorKind};

/// Ollama's `/api/embed`.
pub struct OllamaEmbedder {
    up: Upstream,
    model: String,
    batch: usize,
}

impl OllamaEmbedder {
    pub(crate) fn new(up: Upstream, model: &str, batch: usize) -> Self {
        Self {
            up,
            model: model.to_string(),
            batch,
        }
    }
}

#[async_trait]
impl Embedder for OllamaEmbedder {
    fn describe(&self) -> String {
        format!("ollama {} at {}", self.model, self.up.shown())
    }

    async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, UpstreamError> {
        embed_in_batches(texts, self.batch, |input| async move {
            let body = json!({"model": self.model, "input": input});
            let response = self.up.send(self.up.post_json("/api/embed", &body)).await?;
            let v = self
                .up
                .json(
                    response,
                    self.up.max_line_bytes(),
                    self.up.first_byte_timeout(),
                )
                .await?;
            serde_json::from_value(v["embeddings"].clone()).map_err(|e| {
                self.up.error(
                    UpstreamErrorKind::Protocol,
                    format!("embeddings in an unexpected shape: {e}"),
                )
            })
        })
        .await
    }
}

//! An OpenAI-compatible `/embeddings` endpoint.

use async_trait::async_trait;
use serde_json::json;

use super::{embed_in_batches, Embedder, TextKind};
use crate::llm::http::Upstream;
use crate::llm::{UpstreamError, UpstreamErrorKind};

/// An OpenAI-compatible `/embeddings` endpoint.
pub struct OpenAiEmbedder {
    up: Upstream,
    model: String,
    batch: usize,
}

impl OpenAiEmbedder {
    pub(crate) fn new(up: Upstream, model: &str, batch: usize) -> Self {
        Self {
            up,
            model: model.to_string(),
            batch,
        }
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn describe(&self) -> String {
        format!("openai {} at {}", self.model, self.up.shown())
    }

    async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, UpstreamError> {
        embed_in_batches(texts, self.batch, |input| async move {
            let body = json!({"model": self.model, "input": input, "encoding_format": "float"});
            let response = self
                .up
                .send(self.up.post_json("/embeddings", &body))
                .await?;
            let v = self
                .up
                .json(
                    response,
                    self.up.max_line_bytes(),
                    self.up.first_byte_timeout(),
                )
                .await?;
            let mut data: Vec<(usize, Vec<f32>)> = v["data"]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, d)| {
                            let index = d["index"].as_u64().map_or(i, |n| n as usize);
                            let vector = serde_json::from_value(d["embedding"].clone());
                            vector.map(|v| (index, v))
                        })
                        .collect::<Result<_, _>>()
                })
                .transpose()
                .map_err(|e| {
                    self.up.error(
                        UpstreamErrorKind::Protocol,
                        format!("embeddings in an unexpected shape: {e}"),
                    )
                })?
                .unwrap_or_default();
            data.sort_by_key(|(i, _)| *i);
            Ok(data.into_iter().map(|(_, v)| v).collect())
        })
        .await
    }
}

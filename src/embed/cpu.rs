//! What the in-process embedders (`local`, `e5`) share: how a batch is cut into forward
//! passes within fixed budgets, and the run slots that keep their CPU-bound matrix work to
//! one batch per core.

use std::ops::Range;
use std::sync::Arc;

use anyhow::anyhow;

use super::embed_in_batches;
use crate::llm::{UpstreamError, UpstreamErrorKind};

/// One forward pass of an in-process model holds at most this many tokens (texts × padded
/// length) and this many attention scores (texts × heads × length²): its activations stay
/// within a few tens of MiB however long a batch's texts are.
const TOKEN_BUDGET: usize = 4096;
const SCORE_BUDGET: usize = 4 << 20;

/// The forward passes a batch of texts takes, as runs of `lengths` (sorted, shortest
/// first; in tokens) padded to their longest: as many texts as the budgets allow; a text
/// over them alone.
pub(super) fn passes(lengths: &[usize], heads: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < lengths.len() {
        let mut end = start + 1;
        while let Some(&len) = lengths.get(end) {
            let texts = end + 1 - start;
            if texts * len > TOKEN_BUDGET || texts * heads * len * len > SCORE_BUDGET {
                break;
            }
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// The run slots of a model computed in process: one batch at a time per core, since its
/// matrix work is CPU-bound.
#[derive(Clone)]
pub(super) struct CpuRuns(Arc<tokio::sync::Semaphore>);

impl CpuRuns {
    pub(super) fn per_core() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self(Arc::new(tokio::sync::Semaphore::new(cores)))
    }
}

/// Embeds batch by batch, each on a blocking thread holding one of the model's run slots
/// until it ends: a request dropped mid-way stops before its next batch, and the one
/// already running still counts against the CPU the model may take.
pub(super) async fn embed_on_cpu<F>(
    texts: &[String],
    batch: usize,
    runs: &CpuRuns,
    embed: F,
) -> Result<Vec<Vec<f32>>, UpstreamError>
where
    F: Fn(Vec<String>) -> anyhow::Result<Vec<Vec<f32>>> + Clone + Send + 'static,
{
    embed_in_batches(texts, batch, |part| {
        let runs = runs.0.clone();
        let embed = embed.clone();
        async move {
            let failed =
                |e: String| UpstreamError::new(UpstreamErrorKind::Stream, "local embedder", e);
            let run = runs
                .acquire_owned()
                .await
                .map_err(|e| failed(e.to_string()))?;
            tokio::task::spawn_blocking(move || {
                let _run = run;
                embed(part)
            })
            .await
            .map_err(|e| anyhow!("the embedding task failed: {e}"))
            .and_then(|r| r)
            .map_err(|e| failed(format!("{e:#}")))
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_take_their_forward_passes_a_few_at_a_time() {
        // 32 texts of 256 tokens (a batch of MiniLM's longest): with 12 heads, all at once
        // would hold 32 × 12 × 256² scores (400 MB of f32) per attention product.
        let long = passes(&[256; 32], 12);
        assert!(long.len() > 1);
        for pass in &long {
            let texts = pass.len();
            assert!(texts * 256 <= TOKEN_BUDGET && texts * 12 * 256 * 256 <= SCORE_BUDGET);
        }
        // Every text once, in order.
        let covered: Vec<usize> = long.iter().flat_map(|p| p.clone()).collect();
        assert_eq!(covered, (0..32).collect::<Vec<_>>());
        // Short texts run together; one over the budgets runs alone.
        assert_eq!(passes(&[8; 64], 12), vec![0..64]);
        assert_eq!(passes(&[4, 9000], 12), vec![0..1, 1..2]);
        assert!(passes(&[], 12).is_empty());
    }
}

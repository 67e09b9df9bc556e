//! A sentence-transformers BERT model folder run in process with candle: token
//! embeddings averaged over the attention mask, then L2-normalised — the recipe
//! sentence-transformers uses for models such as all-MiniLM-L6-v2. Nothing is
//! downloaded: the folder must hold `config.json`, `tokenizer.json` and
//! `model.safetensors`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Tokenizer, TruncationParams};

use super::cpu::{embed_on_cpu, passes, CpuRuns};
use super::{Embedder, TextKind};
use crate::llm::UpstreamError;

/// sentence-transformers truncates these models at 256 tokens.
const MAX_TOKENS: usize = 256;
const REQUIRED: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    heads: usize,
    pad: u32,
    device: Device,
}

pub struct LocalEmbedder {
    model: Arc<Model>,
    /// The model's own name (`model_name`).
    name: String,
    folder: PathBuf,
    batch: usize,
    runs: CpuRuns,
}

impl LocalEmbedder {
    /// Loads the model folder; the error names every missing file.
    pub fn load(folder: &Path, batch: usize) -> anyhow::Result<Self> {
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|f| !folder.join(f).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(anyhow!(
                "embeddings.path {} is not a sentence-transformers model folder: missing {}",
                folder.display(),
                missing.join(", ")
            ));
        }
        let device = Device::Cpu;
        let config: Config = serde_json::from_str(
            &std::fs::read_to_string(folder.join("config.json")).context("config.json")?,
        )
        .context("config.json is not a BERT configuration")?;
        let mut tokenizer = Tokenizer::from_file(folder.join("tokenizer.json"))
            .map_err(|e| anyhow!("tokenizer.json: {e}"))?;
        // The folder's tokenizer pads every input to a fixed length; each forward pass pads
        // its texts to the longest of them instead (`Model::embed`), and truncates where
        // sentence-transformers does.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| anyhow!("tokenizer.json: {e}"))?;
        // SAFETY: the weights file is memory-mapped read-only; the gateway never
        // writes to the model folder while it runs. (candle offers no safe way to map a
        // file; reading 90 MB into memory instead would double the resident size.)
        #[allow(unsafe_code)]
        let vars = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[folder.join("model.safetensors")],
                DType::F32,
                &device,
            )
        }
        .context("model.safetensors")?;
        let bert =
            BertModel::load(vars, &config).context("model.safetensors does not fit config.json")?;
        let name = model_name(folder);
        tracing::info!(model = %name, folder = %folder.display(), "local embedding model loaded");
        Ok(Self {
            model: Arc::new(Model {
                bert,
                tokenizer,
                heads: config.num_attention_heads.max(1),
                pad: u32::try_from(config.pad_token_id).context("config.json: pad_token_id")?,
                device,
            }),
            name,
            folder: folder.to_path_buf(),
            batch,
            runs: CpuRuns::per_core(),
        })
    }
}

/// Most of a model card read for its name.
const CARD_BYTES: u64 = 64 * 1024;

/// The name of the model in a sentence-transformers folder: the title of its model card
/// (`README.md`, `# all-MiniLM-L6-v2`, as Hugging Face ships them), else the folder's name
/// (the repository's name for a Hugging Face cache snapshot,
/// `models--org--name/snapshots/<commit>`). `config.json` does not name it: its
/// `_name_or_path` is the model it was trained from.
pub fn model_name(folder: &Path) -> String {
    card_title(folder)
        .or_else(|| snapshot_name(folder))
        .or_else(|| folder.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "local".to_string())
}

/// The first top-level heading of the model card, when it looks like a model's name.
fn card_title(folder: &Path) -> Option<String> {
    use std::io::Read;
    let mut card = Vec::new();
    std::fs::File::open(folder.join("README.md"))
        .ok()?
        .take(CARD_BYTES)
        .read_to_end(&mut card)
        .ok()?;
    let card = String::from_utf8_lossy(&card);
    let mut lines = card.lines();
    let mut body = card.lines();
    // YAML front matter first, between two `---` lines.
    if lines.next().map(str::trim) == Some("---") {
        lines.position(|l| l.trim() == "---")?;
        body = lines;
    }
    let mut fenced = false;
    let title = body
        .find_map(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            l.strip_prefix("# ").filter(|_| !fenced)
        })?
        .trim();
    let plausible = !title.is_empty()
        && title.len() <= 128
        && title
            .chars()
            .all(|c| c.is_alphanumeric() || "-_.:/+".contains(c));
    plausible.then(|| title.to_string())
}

/// `…/models--org--name/snapshots/<commit>` → `name`.
fn snapshot_name(folder: &Path) -> Option<String> {
    let snapshots = folder.parent()?;
    if snapshots.file_name()? != "snapshots" {
        return None;
    }
    let repo = snapshots.parent()?.file_name()?.to_str()?;
    let name = repo.strip_prefix("models--")?.rsplit("--").next()?;
    (!name.is_empty()).then(|| name.to_string())
}

impl Model {
    fn embed(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| anyhow!("tokenizing: {e}"))?;
        // Similar lengths run together (little padding), within the budgets.
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let lengths: Vec<usize> = order
            .iter()
            .map(|&i| encodings[i].get_ids().len())
            .collect();
        let mut out = vec![Vec::new(); encodings.len()];
        for pass in passes(&lengths, self.heads) {
            let cols = lengths[pass.end - 1];
            let group = &order[pass];
            let mut ids = Vec::with_capacity(group.len() * cols);
            let mut mask = Vec::with_capacity(group.len() * cols);
            for &i in group {
                let text = encodings[i].get_ids();
                ids.extend_from_slice(text);
                ids.extend(std::iter::repeat_n(self.pad, cols - text.len()));
                mask.extend(std::iter::repeat_n(1u32, text.len()));
                mask.extend(std::iter::repeat_n(0u32, cols - text.len()));
            }
            let vectors = self.forward(ids, mask, (group.len(), cols))?;
            for (&i, v) in group.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Mean-pooled, L2-normalised vectors of `shape.0` texts of `shape.1` ids each (the
    /// mask 0 over padding).
    fn forward(
        &self,
        ids: Vec<u32>,
        mask: Vec<u32>,
        shape: (usize, usize),
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        let ids = Tensor::from_vec(ids, shape, &self.device)?;
        let mask = Tensor::from_vec(mask, shape, &self.device)?;
        let type_ids = ids.zeros_like()?;
        let hidden = self.bert.forward(&ids, &type_ids, Some(&mask))?; // (rows, cols, dim)
        let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (rows, cols, 1)
        let summed = hidden.broadcast_mul(&weights)?.sum(1)?; // (rows, dim)
        let counts = weights.sum(1)?; // (rows, 1); at least 2: [CLS] and [SEP]
        let mean = summed.broadcast_div(&counts)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
        Ok(mean.broadcast_div(&norm)?.to_vec2::<f32>()?)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn describe(&self) -> String {
        format!("local {} in {}", self.name, self.folder.display())
    }

    /// The model reads text as it is: a query and a passage are embedded alike.
    async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, UpstreamError> {
        let model = self.model.clone();
        embed_on_cpu(texts, self.batch, &self.runs, move |part| {
            model.embed(&part)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_named_by_its_card_then_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("model");
        std::fs::create_dir(&folder).unwrap();
        assert_eq!(model_name(&folder), "model");
        let card = |text: &str| std::fs::write(folder.join("README.md"), text).unwrap();
        card(
            "---\nlanguage: en\ntags:\n- sentence-transformers\n---\n\n# all-MiniLM-L6-v2\nThis is a model.\n## Usage\n",
        );
        assert_eq!(model_name(&folder), "all-MiniLM-L6-v2");
        card("# A model that maps sentences\n");
        assert_eq!(model_name(&folder), "model", "a sentence is not a name");
        card("---\nno end of the front matter\n# x\n");
        assert_eq!(model_name(&folder), "model");
        card("```python\n# all-mpnet-base-v2\n```\n# all-MiniLM-L12-v2\n");
        assert_eq!(
            model_name(&folder),
            "all-MiniLM-L12-v2",
            "not a comment in code"
        );
        card("\u{0}\u{ff}garbage");
        assert_eq!(model_name(&folder), "model");

        let snapshot = dir
            .path()
            .join("models--sentence-transformers--all-mpnet-base-v2/snapshots/0123abcd");
        std::fs::create_dir_all(&snapshot).unwrap();
        assert_eq!(model_name(&snapshot), "all-mpnet-base-v2");
        assert_eq!(model_name(Path::new("/")), "local");
    }

    #[test]
    fn a_folder_without_the_model_files_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let err = LocalEmbedder::load(dir.path(), 8)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("tokenizer.json") && err.contains("model.safetensors"),
            "{err}"
        );
        assert!(!err.contains("config.json,"), "{err}");
    }
}

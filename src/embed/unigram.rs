//! SentencePiece's unigram segmentation over a vocabulary of scored pieces: every word,
//! marked `▁` at its start, split into the pieces whose scores sum highest (Viterbi), a
//! character no piece covers counted as `<unk>`, and a run of such characters as one.
//!
//! It segments exactly as the `tokenizers` crate's `Unigram` model behind a `Metaspace`
//! pre-tokenizer (`▁`, always prepended, split) does — the tests hold the two equal —
//! in a small part of its memory: the crate keeps a trie of hash maps, 256 MB for the
//! 250,002 pieces of multilingual-e5-small, more than the model's weights; this keeps one
//! map from piece to id (about 15 MB) and looks up every length a word allows, up to the
//! longest piece.

use std::collections::HashMap;

use anyhow::bail;

/// What marks a word's start (a space, and the text's start).
const MARK: char = '▁';
/// How far below the lowest piece an unknown character scores (SentencePiece's value).
const UNK_PENALTY: f64 = 10.0;

pub struct Unigram {
    ids: HashMap<Box<str>, u32>,
    scores: Vec<f64>,
    /// The longest piece, in bytes.
    longest: usize,
    unk: u32,
    unk_score: f64,
}

/// The best split of a word's first bytes: its score, where its last piece starts, and
/// that piece's id.
#[derive(Clone, Copy)]
struct Best {
    score: f64,
    start: usize,
    id: u32,
}

impl Unigram {
    /// `pieces` in id order with their scores; a piece listed twice takes the later id.
    pub fn new(pieces: Vec<(String, f64)>, unk: usize) -> anyhow::Result<Self> {
        if unk >= pieces.len() {
            bail!(
                "the unknown piece's id {unk} lies outside a vocabulary of {}",
                pieces.len()
            );
        }
        let mut ids = HashMap::with_capacity(pieces.len());
        let mut scores = Vec::with_capacity(pieces.len());
        let mut longest = 0;
        let mut lowest = f64::INFINITY;
        for (id, (piece, score)) in pieces.into_iter().enumerate() {
            longest = longest.max(piece.len());
            lowest = lowest.min(score);
            scores.push(score);
            ids.insert(piece.into_boxed_str(), u32::try_from(id)?);
        }
        Ok(Self {
            ids,
            scores,
            longest,
            unk: u32::try_from(unk)?,
            unk_score: lowest - UNK_PENALTY,
        })
    }

    /// The ids of `text`'s pieces: spaces become `▁`, one is put first when the text does
    /// not begin with one, and every `▁` starts a word of its own.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut marked = String::with_capacity(text.len() + MARK.len_utf8());
        if !text.is_empty() && !text.starts_with([' ', MARK]) {
            marked.push(MARK);
        }
        marked.extend(text.chars().map(|c| if c == ' ' { MARK } else { c }));
        let mut ids = Vec::new();
        // One lattice for every word: a text is segmented without an allocation per word.
        let mut best = Vec::new();
        let mut start = 0;
        for (at, _) in marked.match_indices(MARK).skip_while(|(at, _)| *at == 0) {
            self.word(&marked[start..at], &mut best, &mut ids);
            start = at;
        }
        self.word(&marked[start..], &mut best, &mut ids);
        ids
    }

    /// Appends the ids of `word`'s best split; `best` is the lattice, reused.
    fn word(&self, word: &str, best: &mut Vec<Option<Best>>, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        // best[i]: the best split of word[..i]; None where no piece ends.
        best.clear();
        best.resize(word.len() + 1, None);
        for (start, ch) in word.char_indices() {
            let before = best[start].map_or(0.0, |b| b.score);
            let single = start + ch.len_utf8();
            let mut covered = false;
            // Every piece starting here, shortest first; a split that only ties with the one
            // kept does not replace it (the crate's order: the earlier start wins).
            let ends = word[start..]
                .char_indices()
                .skip(1)
                .map(|(i, _)| start + i)
                .chain(std::iter::once(word.len()))
                .take_while(|end| end - start <= self.longest);
            for end in ends {
                if let Some(&id) = self.ids.get(&word[start..end]) {
                    offer(best, end, before + self.scores[id as usize], start, id);
                    covered |= end == single;
                }
            }
            if !covered {
                offer(best, single, before + self.unk_score, start, self.unk);
            }
        }
        // Back from the end; neighbouring unknown pieces become one.
        let mut found: Vec<(usize, usize, u32)> = Vec::new();
        let mut end = word.len();
        while end > 0 {
            let Some(b) = best[end] else { break };
            match found.last_mut() {
                Some(last) if b.id == self.unk && last.2 == self.unk => last.0 = b.start,
                _ => found.push((b.start, end, b.id)),
            }
            end = b.start;
        }
        out.extend(found.iter().rev().map(|&(start, end, id)| {
            if id == self.unk {
                self.ids.get(&word[start..end]).copied().unwrap_or(self.unk)
            } else {
                id
            }
        }));
    }
}

/// Keeps the split ending at `at` through piece `id` if it scores higher than the one kept.
fn offer(best: &mut [Option<Best>], at: usize, score: f64, start: usize, id: u32) {
    if best[at].is_none_or(|b| score > b.score) {
        best[at] = Some(Best { score, start, id });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The `tokenizers` crate's unigram model behind its Metaspace pre-tokenizer, as the
    /// e5 embedder used it before: the segmentation this module must equal.
    pub(crate) fn crate_tokenizer(pieces: &[(String, f64)], unk: usize) -> tokenizers::Tokenizer {
        use tokenizers::models::unigram::Unigram as CrateUnigram;
        use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
        let model = CrateUnigram::from(pieces.to_vec(), Some(unk), false).unwrap();
        let mut t = tokenizers::Tokenizer::new(model);
        t.with_pre_tokenizer(Some(Metaspace::new(MARK, PrependScheme::Always, true)));
        t
    }

    fn crate_ids(pieces: &[(String, f64)], unk: usize, text: &str) -> Vec<u32> {
        let t = crate_tokenizer(pieces, unk);
        t.encode(text, false).unwrap().get_ids().to_vec()
    }

    fn vocab(pieces: &[(&str, f64)]) -> Vec<(String, f64)> {
        pieces.iter().map(|(p, s)| (p.to_string(), *s)).collect()
    }

    #[test]
    fn the_split_with_the_highest_total_wins() {
        let pieces = vocab(&[
            ("<unk>", 0.0),
            ("▁un", -2.0),
            ("related", -2.0),
            ("▁unrelated", -5.0),
            ("▁", -1.0),
            ("r", -3.0),
        ]);
        let u = Unigram::new(pieces.clone(), 0).unwrap();
        // -2 + -2 beats -5 for the whole word.
        assert_eq!(u.encode("unrelated"), vec![1, 2]);
        assert_eq!(u.encode("unrelated"), crate_ids(&pieces, 0, "unrelated"));
    }

    #[test]
    fn a_run_of_unknown_characters_is_one_unknown_piece() {
        let pieces = vocab(&[("<unk>", 0.0), ("▁a", -1.0), ("▁", -1.0), ("a", -1.0)]);
        let u = Unigram::new(pieces.clone(), 0).unwrap();
        for text in ["a xyz a", "azz", "é漢字", "", " ", "  a", "a▁▁a", "<unk>"] {
            assert_eq!(u.encode(text), crate_ids(&pieces, 0, text), "{text:?}");
        }
        assert_eq!(u.encode("a xyz a"), vec![1, 2, 0, 1]);
    }

    #[test]
    fn an_unknown_id_outside_the_vocabulary_is_an_error() {
        assert!(Unigram::new(vocab(&[("a", -1.0)]), 1).is_err());
    }

    const ALPHABET: &[char] = &['a', 'b', 'é', '漢', '▁', ' '];

    fn piece() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(ALPHABET), 1..5)
            .prop_map(|cs| cs.into_iter().filter(|c| *c != ' ').collect::<String>())
            .prop_filter("a piece is not empty", |p| !p.is_empty())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any vocabulary (pieces repeated, scores tied) and any text (unknown characters,
        /// `▁` and spaces in a row, newlines): the same ids as the crate.
        #[test]
        fn it_segments_as_the_tokenizers_crate(
            pieces in prop::collection::vec(
                (piece(), prop::sample::select(vec![-1.0, -2.0, -3.0, -4.5])), 0..24),
            unk_at in 0usize..3,
            text in prop::collection::vec(
                prop::sample::select(vec!['a', 'b', 'é', '漢', '▁', ' ', 'z', '\n', 'ñ']), 0..24)
        ) {
            let mut pieces = pieces;
            let unk = unk_at.min(pieces.len());
            pieces.insert(unk, ("<unk>".to_string(), 0.0));
            let text: String = text.into_iter().collect();
            let u = Unigram::new(pieces.clone(), unk).unwrap();
            prop_assert_eq!(u.encode(&text), crate_ids(&pieces, unk, &text));
        }
    }
}

//! A bilingual glossary for the lexical search: a question in one language looks for the
//! other language's words of the same meaning too, so that BM25 alone finds an English
//! page for a Spanish question ("¿cómo borro un directorio?" → delete, remove,
//! directory). The words are in `glossary.txt`, one meaning a line, each side's items
//! apart by commas; an item of several words ("copia de seguridad") is found only when
//! the question holds all of them.

use std::collections::{HashMap, HashSet};

use super::Lang;

/// One line's items, each the stems its words make in its own language.
struct Meaning {
    sides: [Vec<Vec<String>>; 2],
}

/// The glossary, read once into stems by the language analyzers.
#[derive(Default)]
pub struct Glossary {
    meanings: Vec<Meaning>,
    /// By language and an item's first stem: the meanings holding such an item.
    by_stem: [HashMap<String, Vec<usize>>; 2],
}

const TEXT: &str = include_str!("glossary.txt");

fn side(lang: Lang) -> usize {
    match lang {
        Lang::Es => 0,
        Lang::En => 1,
    }
}

impl Glossary {
    /// Reads the glossary, cutting each item into stems with `stems(lang, item)`.
    pub fn new(
        mut stems: impl FnMut(Lang, &str) -> anyhow::Result<Vec<String>>,
    ) -> anyhow::Result<Self> {
        let mut meanings = Vec::new();
        let mut by_stem: [HashMap<String, Vec<usize>>; 2] = Default::default();
        for line in TEXT.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((es, en)) = line.split_once('|') else {
                anyhow::bail!("glossary line without '|': {line}");
            };
            let mut sides: [Vec<Vec<String>>; 2] = Default::default();
            for (lang, items) in [(Lang::Es, es), (Lang::En, en)] {
                for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    let item_stems = stems(lang, item)?;
                    if let Some(first) = item_stems.first() {
                        let at = &mut by_stem[side(lang)].entry(first.clone()).or_default();
                        if at.last() != Some(&meanings.len()) {
                            at.push(meanings.len());
                        }
                        sides[side(lang)].push(item_stems);
                    }
                }
            }
            meanings.push(Meaning { sides });
        }
        Ok(Self { meanings, by_stem })
    }

    /// The other language's stems for a question in `lang` whose stems are `question`:
    /// every item of each meaning one of whose items the question holds whole. Each stem
    /// once, in the glossary's order.
    pub fn translate(&self, lang: Lang, question: &[String]) -> Vec<String> {
        let own = side(lang);
        let held: HashSet<&str> = question.iter().map(String::as_str).collect();
        let mut found: Vec<usize> = question
            .iter()
            .filter_map(|stem| self.by_stem[own].get(stem))
            .flatten()
            .copied()
            .filter(|&m| {
                self.meanings[m].sides[own]
                    .iter()
                    .any(|item| item.iter().all(|s| held.contains(s.as_str())))
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for m in found {
            for stem in self.meanings[m].sides[1 - own].iter().flatten() {
                if seen.insert(stem.as_str()) {
                    out.push(stem.clone());
                }
            }
        }
        out
    }
}

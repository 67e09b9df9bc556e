//! Understanding a turn without a model call, in English and Spanish: whether the message
//! points at the code in the editor, whether the whole message is small talk, and whether
//! it is a follow-up whose subject is in the turns before it.
//!
//! Each decision says which rule made it (logged and counted, never the text). Measured on
//! `examples/eval/turns.jsonl` with `assist-gateway eval turns` (see docs/understanding.md).
//!
//! - **The editor.** A selection is the user's explicit pointer: with one, the message is
//!   about it unless it is plainly a question of its own (a how-to, a definition, a request
//!   for new code with an object of its own). The message is about the editor's code when
//!   it points at it (this / it / here / these lines / esto / aquí / explícalo), names an
//!   identifier that is in it, names the code by its kind with a definite article ("the
//!   handler", "la migración"), or says nothing but what to do or ask of it ("explain",
//!   "tests pls", "any bugs?", "¿por qué falla?"). With an open file and no selection the
//!   same signals count, without the benefit of the doubt.
//! - **Small talk** only when nothing is left once greetings, thanks and acknowledgements
//!   are taken away, or when the message asks about the conversation itself ("say that
//!   again, shorter").
//! - **Follow-ups.** A message that does not carry its subject (short, generic, anaphoric,
//!   or starting "and …" / "y …") is searched together with the earlier user messages that
//!   do.
//!
//! Each in a file: `small_talk`, `editor` (with `code`: the editor's code as the rules read
//! it) and `follow_up`; the word helpers they share are here.

mod code;
mod editor;
mod follow_up;
mod small_talk;

use code::*;
pub use editor::editor_reference;
use editor::*;
pub use follow_up::{brings_subject_from_history, follow_up_query, lacks_subject};
use small_talk::*;
pub use small_talk::{conversation_only, small_talk};

/// A list of words looked up as a set: the lists run to hundreds of words, and each word
/// of a message is looked up in several of them (scanning them was a tenth of a turn's
/// cost in the pipeline). The same `contains` as the slice it replaces.
pub(super) struct WordSet {
    list: &'static [&'static str],
    set: std::sync::OnceLock<std::collections::HashSet<&'static str, foldhash::fast::FixedState>>,
}

impl WordSet {
    pub(super) const fn new(list: &'static [&'static str]) -> Self {
        Self {
            list,
            set: std::sync::OnceLock::new(),
        }
    }

    pub(super) fn contains(&self, word: &&str) -> bool {
        self.set
            .get_or_init(|| self.list.iter().copied().collect())
            .contains(*word)
    }
}

/// A decision and the rule that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Why {
    pub yes: bool,
    pub rule: &'static str,
}

const fn yes(rule: &'static str) -> Why {
    Why { yes: true, rule }
}

const fn no(rule: &'static str) -> Why {
    Why { yes: false, rule }
}

/// Lowercase, without accents (á → a, ñ → n, ü → u), so that a word is found however it
/// was typed; chat shorthand written out ("q hace" → "que hace", "xq" → "porque").
fn fold(text: &str) -> String {
    if text.is_ascii() {
        // Nothing to take accents from: lowercase a byte at a time.
        return written_out(text.to_ascii_lowercase());
    }
    let folded: String = text
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| match c {
            'á' | 'à' | 'ä' | 'â' => 'a',
            'é' | 'è' | 'ë' | 'ê' => 'e',
            'í' | 'ì' | 'ï' | 'î' => 'i',
            'ó' | 'ò' | 'ö' | 'ô' => 'o',
            'ú' | 'ù' | 'ü' | 'û' => 'u',
            'ñ' => 'n',
            other => other,
        })
        .collect();
    written_out(folded)
}

/// Shorthand of chat typing, as the words it stands for. A one-letter "q" is written out
/// only with a word after it ("q hace", "q diferencia hay"): alone it may be a variable
/// ("what is q?").
const SHORTHAND: &[(&str, &str)] = &[
    ("q", "que"),
    ("xq", "porque"),
    ("pq", "porque"),
    ("porq", "porque"),
    ("tmb", "tambien"),
];

/// `text` (folded) with each whole word of [`SHORTHAND`] written out.
fn written_out(text: String) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let short = |w: &str| SHORTHAND.iter().find(|(s, _)| *s == w).map(|(_, l)| *l);
    if !text
        .split(|c: char| !is_word(c))
        .any(|w| short(w).is_some())
    {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        let next_is_word = after
            .strip_prefix(' ')
            .and_then(|a| a.chars().next())
            .is_some_and(is_word);
        match short(word) {
            Some(long) if word != "q" || next_is_word => out.push_str(long),
            _ => out.push_str(word),
        }
        // The separator up to the next word, as it was.
        let sep = after.find(is_word).unwrap_or(after.len());
        out.push_str(&after[..sep]);
        rest = &after[sep..];
    }
    out
}

/// The words of a message as typed (lowercase, accents kept), split on anything that is
/// not a letter, a digit or `_`.
fn words_of(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The message as folded words.
fn folded_words(text: &str) -> Vec<String> {
    words_of(text).iter().map(|w| fold(w)).collect()
}

/// The phrases of `list` (folded) that stand in `text` (folded) as whole words, each once,
/// found in one pass of `automaton` (built over `list`, in its order); without one, phrase
/// by phrase.
fn phrases_in(
    text: &str,
    list: &'static [&'static str],
    automaton: Option<&aho_corasick::AhoCorasick>,
) -> Vec<&'static str> {
    let Some(automaton) = automaton else {
        return list
            .iter()
            .filter(|p| contains_phrase(text, p))
            .copied()
            .collect();
    };
    let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
    let mut found: Vec<&'static str> = automaton
        .find_overlapping_iter(text)
        .filter(|m| {
            boundary(text[..m.start()].chars().next_back())
                && boundary(text[m.end()..].chars().next())
        })
        .filter_map(|m| list.get(m.pattern().as_usize()).copied())
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// An automaton over a phrase list, for `phrases_in` (`None` if it cannot be built).
fn phrase_automaton(list: &[&str]) -> Option<aho_corasick::AhoCorasick> {
    aho_corasick::AhoCorasick::new(list).ok()
}

/// Whether `phrase` (folded) stands in `text` (folded) as whole words.
fn contains_phrase(text: &str, phrase: &str) -> bool {
    let mut from = 0;
    while let Some(at) = text[from..].find(phrase) {
        let start = from + at;
        let end = start + phrase.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
        if boundary(before) && boundary(after) {
            return true;
        }
        from = start + phrase.len().max(1);
        if from >= text.len() {
            break;
        }
        while !text.is_char_boundary(from) {
            from += 1;
        }
    }
    false
}

/// Whether a folded text starts with a folded phrase, past a greeting or politeness.
fn starts_with_phrase(text: &str, phrase: &str) -> bool {
    let mut rest = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    for _ in 0..8 {
        if rest.starts_with(phrase)
            && rest[phrase.len()..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric())
        {
            return true;
        }
        // Past one leading word of greeting or politeness ("hey, how do I …").
        let first = rest
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("");
        let skippable = SMALL_TALK.contains(&first)
            || matches!(
                first,
                "can"
                    | "could"
                    | "would"
                    | "will"
                    | "u"
                    | "you"
                    | "please"
                    | "pls"
                    | "plz"
                    | "kindly"
                    | "i"
                    | "need"
                    | "want"
                    | "puedes"
                    | "podrias"
                    | "podes"
                    | "me"
                    | "necesito"
                    | "quiero"
                    | "ok"
                    | "okay"
                    | "btw"
                    | "hmm"
                    | "oh"
                    | "wait"
                    | "disculpa"
                    | "disculpe"
                    | "perdon"
                    | "sorry"
                    | "por"
                    | "favor"
                    | "porfa"
            )
            || matches!(
                first,
                "so" | "and"
                    | "but"
                    | "also"
                    | "quick"
                    | "question"
                    | "q"
                    | "y"
                    | "pero"
                    | "entonces"
                    | "oye"
                    | "una"
                    | "pregunta"
                    | "otra"
                    | "another"
                    | "one"
                    | "more"
                    | "btw"
                    | "pues"
                    | "mira"
            );
        if !skippable || first.is_empty() {
            return false;
        }
        rest = rest[first.len()..].trim_start_matches(|c: char| !c.is_alphanumeric());
    }
    false
}

#[cfg(test)]
mod tests;

//! The words BM25 counts, the same for every lexical index (tantivy in process, Qdrant's
//! sparse vectors when the knowledge base is shared): which fields a chunk has, how each
//! field's text is cut into terms, and which terms a query looks for in which field, with
//! how much each field counts.
//!
//! Prose is read twice, once per language analyzer (English and Spanish: lowercase, stop
//! words, Snowball stemming, accent folding), and every chunk once more with a code
//! analyzer whose text has its identifiers split (`getUserName` → `get user name`,
//! `user_name` → `user name`). A query is searched in the fields of its own language plus
//! the code field, so a Spanish query meets Spanish stems and an English one English stems.

use std::collections::HashSet;
use std::sync::Arc;

use anyhow::anyhow;
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
    StopWordFilter, TextAnalyzer, TokenizerManager, WhitespaceTokenizer,
};

use super::glossary::Glossary;
use super::{KnowledgeChunk, Lang};

/// The fields of an indexed chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    Section(Lang),
    Body(Lang),
    /// Heading and text with identifiers split, read by the code analyzer.
    Code,
    /// The names the chunk's code defines, whole (`retry_with_backoff`, and
    /// `retrywithbackoff` for a name spelled out in words).
    Defines,
}

impl Field {
    /// Every field a chunk is indexed in.
    pub const ALL: [Field; 6] = [
        Field::Section(Lang::En),
        Field::Section(Lang::Es),
        Field::Body(Lang::En),
        Field::Body(Lang::Es),
        Field::Code,
        Field::Defines,
    ];

    /// The field's name in an index (tantivy's schema; the prefix of its terms in Qdrant).
    pub fn name(self) -> &'static str {
        match self {
            Field::Section(Lang::En) => "section_en",
            Field::Section(Lang::Es) => "section_es",
            Field::Body(Lang::En) => "body_en",
            Field::Body(Lang::Es) => "body_es",
            Field::Code => "code",
            Field::Defines => "defines",
        }
    }

    /// The analyzer that cuts the field's text into terms when it is indexed.
    pub fn analyzer(self) -> &'static str {
        match self {
            Field::Section(Lang::En) | Field::Body(Lang::En) => EN,
            Field::Section(Lang::Es) | Field::Body(Lang::Es) => ES,
            Field::Code => CODE,
            Field::Defines => DEFINES,
        }
    }

    /// The text of `chunk` this field reads.
    pub fn text(self, chunk: &KnowledgeChunk) -> String {
        match self {
            Field::Section(_) => chunk.section.clone(),
            Field::Body(_) => chunk.text.clone(),
            Field::Code => split_identifiers(&format!("{} {}", chunk.section, chunk.text)),
            Field::Defines => chunk
                .defines
                .iter()
                .flat_map(|name| {
                    let joined = name.replace('_', "");
                    let spelled = (joined != *name && !joined.is_empty()).then_some(joined);
                    std::iter::once(name.clone()).chain(spelled)
                })
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// How much a match in each field counts.
const BODY_BOOST: f32 = 1.0;
const SECTION_BOOST: f32 = 1.5;
const CODE_BOOST: f32 = 0.8;
/// The glossary's words in the other language, against the question's own: a little
/// less, so that of a page and its translation the question's own language tends to come
/// first. Chosen on the three retrieval sets together (BM25 nDCG@10, `examples/knowledge`
/// · Debian · reference pages): 0 gave 0.932 · 0.740 · 0.457, 0.5 0.948 · 0.803 · 0.502,
/// 0.8 0.951 · 0.830 · 0.532, 1.0 0.941 · 0.844 · 0.542, 1.3 0.934 · 0.846 · 0.542; and
/// on the real model's golden answers (tests/it/real_model.rs), which at 1.0 fell to 10 of
/// 13 (at least 11 asked) and at 0.8 passed, one run each.
const CROSS_BOOST: f32 = 0.8;
/// A whole identifier spelled out in the query ("get user name" → getUserName).
const IDENTIFIER_BOOST: f32 = 2.0;
/// A name the query writes as code (`retry_with_backoff`, `mean(`) that a chunk defines.
const DEFINES_BOOST: f32 = 2.0;
/// Words written apart that spell a name a chunk defines ("retry with backoff").
const SPELLED_DEFINES_BOOST: f32 = 1.0;

const EN: &str = "assist_en";
const ES: &str = "assist_es";
const CODE: &str = "assist_code";
/// Names kept whole, lowercased: `retry_with_backoff` is one term.
const DEFINES: &str = "assist_defines";
/// The code field's analyzer for a Spanish query: the same tokens less Spanish function
/// words. "de", "la", "que" name nothing in code but sit in every Spanish chunk's code
/// field, where a question's many function words outweighed its real terms. English
/// queries keep theirs: "for", "if", "in", "not", "this", "as" are code keywords too.
const CODE_QUERY_ES: &str = "assist_code_query_es";

/// One term a query looks for: in which field, and how much a match counts.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryTerm {
    pub field: Field,
    pub term: String,
    pub boost: f32,
}

/// The analyzers, registered under their names, and the glossary read through them.
#[derive(Clone)]
pub struct Analyzers {
    manager: TokenizerManager,
    glossary: Arc<Glossary>,
}

impl Analyzers {
    pub fn new() -> anyhow::Result<Self> {
        let stop = |lang| {
            StopWordFilter::new(lang)
                .ok_or_else(|| anyhow!("tantivy has no stop words for {lang:?}"))
        };
        let english = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .filter(stop(Language::English)?)
            .filter(Stemmer::new(Language::English))
            .build();
        // Spanish stop words and the Snowball stemmer expect accents; fold after them.
        let spanish = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .filter(stop(Language::Spanish)?)
            .filter(Stemmer::new(Language::Spanish))
            .filter(AsciiFoldingFilter)
            .build();
        let code = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(60))
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .build();
        let code_query_es = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(60))
            .filter(LowerCaser)
            .filter(stop(Language::Spanish)?)
            .filter(AsciiFoldingFilter)
            .build();
        let defines = TextAnalyzer::builder(WhitespaceTokenizer::default())
            .filter(RemoveLongFilter::limit(100))
            .filter(LowerCaser)
            .build();
        let manager = TokenizerManager::default();
        manager.register(DEFINES, defines);
        manager.register(EN, english);
        manager.register(ES, spanish);
        manager.register(CODE, code);
        manager.register(CODE_QUERY_ES, code_query_es);
        let mut analyzers = Self {
            manager,
            glossary: Arc::new(Glossary::default()),
        };
        let glossary =
            Glossary::new(|lang, item| analyzers.tokens(Field::Body(lang).analyzer(), item))?;
        analyzers.glossary = Arc::new(glossary);
        Ok(analyzers)
    }

    /// Registers every analyzer with a tantivy index.
    pub fn register(&self, index: &tantivy::Index) -> anyhow::Result<()> {
        for name in [EN, ES, CODE, CODE_QUERY_ES, DEFINES] {
            index.tokenizers().register(name, self.get(name)?);
        }
        Ok(())
    }

    fn get(&self, name: &str) -> anyhow::Result<TextAnalyzer> {
        self.manager
            .get(name)
            .ok_or_else(|| anyhow!("no analyzer {name}"))
    }

    /// Every term `analyzer` makes of `text`, repeats included, in order.
    pub fn tokens(&self, analyzer: &str, text: &str) -> anyhow::Result<Vec<String>> {
        let mut analyzer = self.get(analyzer)?;
        let mut out = Vec::new();
        analyzer
            .token_stream(text)
            .process(&mut |t| out.push(t.text.clone()));
        Ok(out)
    }

    /// The terms a query written in `lang` looks for: its words in the body and heading
    /// fields of its language and in the code field, and runs of its words glued
    /// together as one identifier would be. Each (field, term) once (linear in the
    /// query: a question of 25,000 distinct words took seconds when repeats were found
    /// by scanning).
    pub fn query_terms(&self, query: &str, lang: Lang) -> anyhow::Result<Vec<QueryTerm>> {
        let code_query_analyzer = match lang {
            Lang::En => CODE,
            Lang::Es => CODE_QUERY_ES,
        };
        let code_query = split_identifiers(query);
        let mut seen: HashSet<(Field, String)> = HashSet::new();
        let mut out = Vec::new();
        let mut add = |field: Field, term: String, boost: f32| {
            if seen.insert((field, term.clone())) {
                out.push(QueryTerm { field, term, boost });
            }
        };
        for (field, analyzer, text, boost) in [
            (
                Field::Body(lang),
                Field::Body(lang).analyzer(),
                query,
                BODY_BOOST,
            ),
            (
                Field::Section(lang),
                Field::Section(lang).analyzer(),
                query,
                SECTION_BOOST,
            ),
            (
                Field::Code,
                code_query_analyzer,
                code_query.as_str(),
                CODE_BOOST,
            ),
        ] {
            for term in self.tokens(analyzer, text)? {
                add(field, term, boost);
            }
        }
        // The other language's words of the same meaning, below the question's own.
        let other = match lang {
            Lang::En => Lang::Es,
            Lang::Es => Lang::En,
        };
        let own_stems = self.tokens(Field::Body(lang).analyzer(), query)?;
        for term in self.glossary.translate(lang, &own_stems) {
            add(Field::Body(other), term.clone(), BODY_BOOST * CROSS_BOOST);
            add(Field::Section(other), term, SECTION_BOOST * CROSS_BOOST);
        }
        // Words written apart may name one identifier: "get user name" → getusername.
        // Kept apart from the code field's own terms: both count when both match.
        let mut joined_seen = HashSet::new();
        for joined in joined_words(query) {
            if joined_seen.insert(joined.clone()) {
                out.push(QueryTerm {
                    field: Field::Code,
                    term: joined.clone(),
                    boost: IDENTIFIER_BOOST,
                });
                out.push(QueryTerm {
                    field: Field::Defines,
                    term: joined,
                    boost: SPELLED_DEFINES_BOOST,
                });
            }
        }
        // Names written as code find the chunk that defines them.
        for name in named_identifiers(query) {
            if !joined_seen.contains(&name) {
                out.push(QueryTerm {
                    field: Field::Defines,
                    term: name,
                    boost: DEFINES_BOOST,
                });
            }
        }
        Ok(out)
    }
}

/// Runs of 2 or 3 adjacent query words glued together and lowercased, as an identifier
/// made of them would be indexed in the code field; each once (linear in the query).
fn joined_words(query: &str) -> Vec<String> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for n in 2..=3 {
        for w in words.windows(n) {
            let joined = w.concat();
            if seen.insert(joined.clone()) {
                out.push(joined);
            }
        }
    }
    out
}

/// The names a text writes as code, lowercased, each once: words with an underscore or a
/// capital past their first letter (`retry_with_backoff`, `BrisaClient`), a word right
/// before `(` (`mean(`), and words between backticks.
pub fn named_identifiers(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut quoted = false;
    let mut word_start = None;
    let bytes = text.as_bytes();
    let mut push = |word: &str, quoted: bool, called: bool| {
        let shaped = word.trim_matches('_').contains('_')
            || word.chars().skip(1).any(char::is_uppercase)
            || word.starts_with('_') && word.len() > 2;
        let plain = word.chars().count() >= 2 && word.chars().any(char::is_alphabetic);
        if plain && (shaped || quoted || called) && word.len() <= 100 {
            let name = word.to_lowercase();
            if !out.contains(&name) {
                out.push(name);
            }
        }
    };
    for (i, c) in text.char_indices() {
        let inside = c.is_alphanumeric() || c == '_';
        match (inside, word_start) {
            (true, None) => word_start = Some(i),
            (false, Some(start)) => {
                push(&text[start..i], quoted, bytes[i] == b'(');
                word_start = None;
            }
            _ => {}
        }
        if c == '`' {
            quoted = !quoted;
        }
    }
    if let Some(start) = word_start {
        push(&text[start..], quoted, false);
    }
    out
}

/// Adds the parts of every compound identifier after it: `getUserName` →
/// `getUserName get User Name`, `MAX_RETRIES` → `MAX_RETRIES MAX RETRIES`.
pub fn split_identifiers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.is_empty() {
            return;
        }
        out.push_str(word);
        let parts = identifier_parts(word);
        if parts.len() > 1 {
            for p in parts {
                out.push(' ');
                out.push_str(p);
            }
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// `getUserName` → [get, User, Name]; `HTTPServer2` → [HTTP, Server2]; `a_b` → [a, b].
fn identifier_parts(word: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, cur) = (chars[i - 1].1, chars[i].1);
            let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
            let boundary = (prev.is_lowercase() && cur.is_uppercase())
                || (prev.is_uppercase() && cur.is_uppercase() && next_lower);
            if boundary {
                parts.push(&piece[start..chars[i].0]);
                start = chars[i].0;
            }
        }
        parts.push(&piece[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_identifiers() {
        assert_eq!(identifier_parts("getUserName"), ["get", "User", "Name"]);
        assert_eq!(identifier_parts("HTTPServer2"), ["HTTP", "Server2"]);
        assert_eq!(
            identifier_parts("lookup_display_name"),
            ["lookup", "display", "name"]
        );
        assert_eq!(identifier_parts("plain"), ["plain"]);
        assert_eq!(
            split_identifiers("x = getUser();"),
            "x = getUser get User();"
        );
    }

    #[test]
    fn a_query_looks_in_its_languages_fields_and_the_code_field() {
        let a = Analyzers::new().unwrap();
        let terms = a
            .query_terms("¿Cómo se configuran los servidores?", Lang::Es)
            .unwrap();
        let fields: HashSet<Field> = terms.iter().map(|t| t.field).collect();
        assert_eq!(
            fields,
            HashSet::from([
                Field::Body(Lang::Es),
                Field::Section(Lang::Es),
                Field::Code,
                // Words run together, as a name spelled out would be defined.
                Field::Defines,
                // The glossary's English for "configuran" and "servidores".
                Field::Body(Lang::En),
                Field::Section(Lang::En),
            ])
        );
        // Spanish function words are not looked for in code.
        assert!(!terms
            .iter()
            .any(|t| t.field == Field::Code && t.term == "los"));
        assert!(terms
            .iter()
            .any(|t| t.field == Field::Body(Lang::Es) && t.term == "servidor"));
        let glued = a.query_terms("get user name", Lang::En).unwrap();
        assert!(glued
            .iter()
            .any(|t| t.term == "getusername" && t.boost == IDENTIFIER_BOOST));
    }

    #[test]
    fn a_question_looks_for_the_other_languages_words_of_its_meaning_too() {
        let a = Analyzers::new().unwrap();
        let other = |q: &str, lang: Lang, field: Field| -> Vec<(String, f32)> {
            a.query_terms(q, lang)
                .unwrap()
                .into_iter()
                .filter(|t| t.field == field)
                .map(|t| (t.term, t.boost))
                .collect()
        };
        let en = other(
            "¿Cómo elimino una carpeta vacía?",
            Lang::Es,
            Field::Body(Lang::En),
        );
        for stem in ["delet", "remov", "directori", "folder", "empti"] {
            assert!(
                en.iter()
                    .any(|(t, b)| t == stem && *b == BODY_BOOST * CROSS_BOOST),
                "{stem} in {en:?}"
            );
        }
        let es = other(
            "How do I delete an empty folder?",
            Lang::En,
            Field::Section(Lang::Es),
        );
        for stem in ["borr", "carpet", "vaci"] {
            assert!(es.iter().any(|(t, _)| t == stem), "{stem} in {es:?}");
        }
        // An item of several words counts only whole: "seguridad" alone is security.
        let backup = other("copia de seguridad diaria", Lang::Es, Field::Body(Lang::En));
        assert!(backup.iter().any(|(t, _)| t == "backup"), "{backup:?}");
        let security = other("la seguridad del servidor", Lang::Es, Field::Body(Lang::En));
        assert!(security.iter().any(|(t, _)| t == "secur"), "{security:?}");
        assert!(!security.iter().any(|(t, _)| t == "backup"), "{security:?}");
        // Words the glossary does not hold bring nothing.
        assert!(other("zzz qqq", Lang::Es, Field::Body(Lang::En)).is_empty());
    }

    #[test]
    fn names_written_as_code_are_looked_up_among_definitions() {
        assert_eq!(
            named_identifiers(
                "what does `retry` return, and retry_with_backoff? BrisaClient or mean(x)"
            ),
            ["retry", "retry_with_backoff", "brisaclient", "mean"]
        );
        // Plain words, a sentence's capital and lone letters name nothing.
        assert!(named_identifiers("How do I list the files in a folder? (x)").is_empty());
        let a = Analyzers::new().unwrap();
        let terms = a
            .query_terms("what does retry_with_backoff return?", Lang::En)
            .unwrap();
        assert!(terms.iter().any(|t| t.field == Field::Defines
            && t.term == "retry_with_backoff"
            && t.boost == DEFINES_BOOST));
        // A chunk's names are indexed whole, and run together for a name spelled out.
        let mut chunk = KnowledgeChunk::sample("c", "client.py");
        chunk.defines = vec!["retry_with_backoff".into(), "Client".into()];
        let indexed = a
            .tokens(Field::Defines.analyzer(), &Field::Defines.text(&chunk))
            .unwrap();
        assert_eq!(
            indexed,
            ["retry_with_backoff", "retrywithbackoff", "client"]
        );
    }
}

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

use anyhow::anyhow;
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
    StopWordFilter, TextAnalyzer, TokenizerManager,
};

use super::{KnowledgeChunk, Lang};

/// The fields of an indexed chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    Section(Lang),
    Body(Lang),
    /// Heading and text with identifiers split, read by the code analyzer.
    Code,
}

impl Field {
    /// Every field a chunk is indexed in.
    pub const ALL: [Field; 5] = [
        Field::Section(Lang::En),
        Field::Section(Lang::Es),
        Field::Body(Lang::En),
        Field::Body(Lang::Es),
        Field::Code,
    ];

    /// The field's name in an index (tantivy's schema; the prefix of its terms in Qdrant).
    pub fn name(self) -> &'static str {
        match self {
            Field::Section(Lang::En) => "section_en",
            Field::Section(Lang::Es) => "section_es",
            Field::Body(Lang::En) => "body_en",
            Field::Body(Lang::Es) => "body_es",
            Field::Code => "code",
        }
    }

    /// The analyzer that cuts the field's text into terms when it is indexed.
    pub fn analyzer(self) -> &'static str {
        match self {
            Field::Section(Lang::En) | Field::Body(Lang::En) => EN,
            Field::Section(Lang::Es) | Field::Body(Lang::Es) => ES,
            Field::Code => CODE,
        }
    }

    /// The text of `chunk` this field reads.
    pub fn text(self, chunk: &KnowledgeChunk) -> String {
        match self {
            Field::Section(_) => chunk.section.clone(),
            Field::Body(_) => chunk.text.clone(),
            Field::Code => split_identifiers(&format!("{} {}", chunk.section, chunk.text)),
        }
    }
}

/// How much a match in each field counts.
const BODY_BOOST: f32 = 1.0;
const SECTION_BOOST: f32 = 1.5;
const CODE_BOOST: f32 = 0.8;
/// A whole identifier spelled out in the query ("get user name" → getUserName).
const IDENTIFIER_BOOST: f32 = 2.0;

const EN: &str = "assist_en";
const ES: &str = "assist_es";
const CODE: &str = "assist_code";
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

/// The analyzers, registered under their names.
#[derive(Clone)]
pub struct Analyzers {
    manager: TokenizerManager,
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
        let manager = TokenizerManager::default();
        manager.register(EN, english);
        manager.register(ES, spanish);
        manager.register(CODE, code);
        manager.register(CODE_QUERY_ES, code_query_es);
        Ok(Self { manager })
    }

    /// Registers every analyzer with a tantivy index.
    pub fn register(&self, index: &tantivy::Index) -> anyhow::Result<()> {
        for name in [EN, ES, CODE, CODE_QUERY_ES] {
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
        // Words written apart may name one identifier: "get user name" → getusername.
        // Kept apart from the code field's own terms: both count when both match.
        let mut joined_seen = HashSet::new();
        for joined in joined_words(query) {
            if joined_seen.insert(joined.clone()) {
                out.push(QueryTerm {
                    field: Field::Code,
                    term: joined,
                    boost: IDENTIFIER_BOOST,
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
            HashSet::from([Field::Body(Lang::Es), Field::Section(Lang::Es), Field::Code])
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
}

//! Definitions by name: the functions, methods, classes, types and constants a source
//! file defines, found with each grammar's own tags query (tree-sitter's tags, the
//! `@definition.*` captures and their `@name`). Each code chunk carries the names it
//! defines, so a question or a completion that names one finds its definition.

use std::collections::HashMap;
use std::sync::LazyLock;

use tree_sitter::{Language, Query, QueryCursor, StreamingIterator, Tree};

/// One definition: its name and the 0-based line where its node starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub name: String,
    pub line: usize,
}

/// Each language's tags query, compiled once. TypeScript's own query names only what
/// TypeScript adds; it reads JavaScript's too, as tree-sitter's tags tool does.
static QUERIES: LazyLock<HashMap<&'static str, Query>> = LazyLock::new(|| {
    let js = tree_sitter_javascript::TAGS_QUERY;
    let ts = format!("{js}\n{}", tree_sitter_typescript::TAGS_QUERY);
    let sources: [(&str, Language, &str); 7] = [
        (
            "rust",
            tree_sitter_rust::LANGUAGE.into(),
            tree_sitter_rust::TAGS_QUERY,
        ),
        (
            "python",
            tree_sitter_python::LANGUAGE.into(),
            tree_sitter_python::TAGS_QUERY,
        ),
        ("javascript", tree_sitter_javascript::LANGUAGE.into(), js),
        (
            "typescript",
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            &ts,
        ),
        ("tsx", tree_sitter_typescript::LANGUAGE_TSX.into(), &ts),
        (
            "go",
            tree_sitter_go::LANGUAGE.into(),
            tree_sitter_go::TAGS_QUERY,
        ),
        (
            "java",
            tree_sitter_java::LANGUAGE.into(),
            tree_sitter_java::TAGS_QUERY,
        ),
    ];
    sources
        .into_iter()
        .filter_map(|(lang, grammar, source)| {
            // A query the grammar does not accept leaves that language without names
            // (its chunks are still indexed by their words).
            let query = Query::new(&grammar, source)
                .or_else(|_| Query::new(&grammar, source.rsplit_once(js).map_or(source, |x| x.1)))
                .ok()?;
            Some((lang, query))
        })
        .collect()
});

/// The definitions in `tree` (parsed from `text` by the grammar of `lang`), in the order
/// they start; none for a language without a tags query.
pub fn in_tree(tree: &Tree, text: &str, lang: &str) -> Vec<Definition> {
    let Some(query) = QUERIES.get(lang) else {
        return Vec::new();
    };
    let names = query.capture_names();
    let name_at = names.iter().position(|n| *n == "name");
    let is_definition: Vec<bool> = names.iter().map(|n| n.starts_with("definition.")).collect();
    let mut out = Vec::new();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, tree.root_node(), text.as_bytes());
    while let Some(m) = matches.next() {
        let Some(whole) = m
            .captures()
            .iter()
            .find(|c| is_definition[c.index as usize])
        else {
            continue;
        };
        let name = m
            .captures()
            .iter()
            .find(|c| Some(c.index as usize) == name_at)
            .and_then(|c| c.node.utf8_text(text.as_bytes()).ok());
        if let Some(name) = name.filter(|n| is_name(n)) {
            out.push(Definition {
                name: name.to_string(),
                line: whole.node.start_position().row,
            });
        }
    }
    out.sort_by_key(|d| d.line);
    out.dedup();
    out
}

/// A name worth finding a definition by: an identifier of two characters or more.
fn is_name(name: &str) -> bool {
    name.chars().count() >= 2
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
}

/// The names of `definitions` that start within lines `start..end`, each once.
pub fn between(definitions: &[Definition], start: usize, end: usize) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for d in definitions
        .iter()
        .filter(|d| (start..end).contains(&d.line))
    {
        if !names.contains(&d.name) {
            names.push(d.name.clone());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str, lang: &str, grammar: Language) -> Vec<String> {
        let mut parser = tree_sitter::Parser::new();
        parser.set_language(&grammar).unwrap();
        let tree = parser.parse(text, None).unwrap();
        in_tree(&tree, text, lang)
            .into_iter()
            .map(|d| d.name)
            .collect()
    }

    #[test]
    fn every_grammar_names_its_definitions() {
        let python = "MAX = 3\n\ndef retry_with_backoff(call, base_delay=0.5):\n    return call()\n\nclass Client:\n    def get_user(self, user_id):\n        return retry_with_backoff(lambda: 1)\n";
        assert_eq!(
            names(python, "python", tree_sitter_python::LANGUAGE.into()),
            ["MAX", "retry_with_backoff", "Client", "get_user"]
        );
        let rust = "pub struct User { name: String }\nimpl User {\n    pub fn get_user_name(&self) -> &str { &self.name }\n}\nconst LIMIT: usize = 4;\nfn main() { let u = User::default(); }\n";
        let found = names(rust, "rust", tree_sitter_rust::LANGUAGE.into());
        for name in ["User", "get_user_name", "main"] {
            assert!(found.contains(&name.to_string()), "{name}: {found:?}");
        }
        let ts = "export interface Options { retries: number }\nexport function fetchUser(id: string): Promise<User> { return get(id); }\nclass Cache { lookup(key: string) { return 1; } }\n";
        let found = names(
            ts,
            "typescript",
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        );
        for name in ["Options", "fetchUser", "Cache", "lookup"] {
            assert!(found.contains(&name.to_string()), "{name}: {found:?}");
        }
        let go = "package p\n\nfunc Parse(args []string) error { return nil }\n\ntype FlagSet struct{}\n\nfunc (f *FlagSet) Lookup(name string) *Flag { return nil }\n";
        let found = names(go, "go", tree_sitter_go::LANGUAGE.into());
        for name in ["Parse", "FlagSet", "Lookup"] {
            assert!(found.contains(&name.to_string()), "{name}: {found:?}");
        }
        let java = "class Store { int count(String key) { return 0; } }\n";
        let found = names(java, "java", tree_sitter_java::LANGUAGE.into());
        for name in ["Store", "count"] {
            assert!(found.contains(&name.to_string()), "{name}: {found:?}");
        }
        // Calls are references, not definitions.
        assert!(
            !names(python, "python", tree_sitter_python::LANGUAGE.into())
                .contains(&"call".to_string())
        );
    }
}

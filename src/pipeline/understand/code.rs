//! The code in the editor as the rules read it: its words, the identifiers it defines or
//! calls, and whether a message names one of them.

use super::*;
use crate::context::EditorContext;

/// The text of the code a message may refer to.
pub(super) fn editor_code(editor: &EditorContext) -> String {
    let mut code = String::new();
    for part in [
        &editor.selected_text,
        &editor.editor_content,
        &editor.extra_context,
    ] {
        code.push_str(part);
        code.push('\n');
    }
    for item in &editor.items {
        code.push_str(&item.content);
        code.push('\n');
    }
    code
}

/// The words of code, folded, with identifiers split into their parts
/// (`readinessProbe` → readinessprobe, readiness, probe).
pub(super) fn code_words(code: &str) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for word in code.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.len() < 4 {
            continue;
        }
        out.insert(fold(word));
        let mut part = String::new();
        let mut previous_lower = false;
        for c in word.chars() {
            if c == '_' || (c.is_uppercase() && previous_lower) {
                if part.len() >= 4 {
                    out.insert(fold(&part));
                }
                part.clear();
            }
            if c != '_' {
                part.push(c);
            }
            previous_lower = c.is_lowercase();
        }
        if part.len() >= 4 {
            out.insert(fold(&part));
        }
    }
    out
}

/// Whether the message shares two words of its own (or its only one) with the code, as a
/// word or by the start of one ("probes" / readinessProbe, "peticiones" in a string).
pub(super) fn shares_words(folded: &[String], code: &str) -> bool {
    let own: Vec<&String> = folded
        .iter()
        .filter(|w| {
            w.len() >= 4
                && w.as_str() != "brisa"
                && !FILLER.contains(&w.as_str())
                && !SMALL_TALK.contains(&w.as_str())
                && !ABOUT_CODE.contains(&w.as_str())
        })
        .collect();
    if own.is_empty() || code.trim().is_empty() {
        return false;
    }
    let words = code_words(code);
    let stems: std::collections::HashSet<&str> = words
        .iter()
        .filter(|w| w.len() >= 5)
        .filter_map(|w| w.get(..5))
        .collect();
    let shared = own
        .iter()
        .filter(|w| {
            words.contains(w.as_str())
                || w.get(..5)
                    .is_some_and(|s| w.len() >= 5 && stems.contains(s))
        })
        .count();
    shared >= 2 || (shared == 1 && own.len() == 1)
}

/// Whether the message names an identifier of the code: a word that looks like one
/// (camelCase, snake_case, a call) found in the code, or any word of five letters or more
/// that the code uses as an identifier.
pub(super) fn names_an_identifier(message: &str, code: &str) -> bool {
    if code.trim().is_empty() {
        return false;
    }
    // Code quoted in backticks that the code holds: "what's the `?` doing in `row?[\"qty\"]`".
    // All of them looked for in one pass over the code (one search each took the number
    // of quotes times the code's length), each once (the automaton's build is quadratic
    // in a pattern's repeats).
    let quotes: std::collections::BTreeSet<&str> = message
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .collect();
    if !quotes.is_empty()
        && aho_corasick::AhoCorasick::new(&quotes).is_ok_and(|quoted| quoted.is_match(code))
    {
        return true;
    }
    let words: std::collections::HashSet<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.len() >= 3)
        .collect();
    let named = defined_or_called(code);
    message
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.len() >= 3 && !w.eq_ignore_ascii_case("brisa"))
        .any(|w| {
            (looks_like_identifier(w) && words.contains(w))
                || (w.len() >= 4 && !is_common_word(w) && named.contains(w))
                // A number of three digits or more that the code holds (a port, a status).
                || (w.len() >= 3 && w.chars().all(|c| c.is_ascii_digit()) && words.contains(w))
        })
}

/// camelCase, snake_case, letters with digits: a name only code gives.
pub(super) fn looks_like_identifier(w: &str) -> bool {
    w.len() >= 3
        && (w.contains('_')
            || w.chars().skip(1).any(char::is_uppercase)
            || (w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(char::is_alphabetic)))
}

/// The names code defines (`fn x`, `def x`, `let x`, `class X`, …) or calls (`x(`), where a
/// plain word ("total", "ventas") is an identifier and not prose in a comment.
pub(super) fn defined_or_called(code: &str) -> std::collections::HashSet<&str> {
    const KEYWORDS: &[&str] = &[
        "fn",
        "def",
        "function",
        "func",
        "let",
        "const",
        "var",
        "class",
        "struct",
        "record",
        "enum",
        "type",
        "interface",
        "mut",
        "async",
        "pub",
        "static",
        "val",
        "trait",
        "impl",
    ];
    let mut names = std::collections::HashSet::new();
    let mut previous = "";
    let mut rest = code;
    while let Some(start) = rest.find(|c: char| c.is_alphanumeric() || c == '_') {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let word = &tail[..end];
        if KEYWORDS.contains(&previous) || tail[end..].trim_start().starts_with('(') {
            names.insert(word);
        }
        previous = word;
        rest = &tail[end..];
    }
    names
}

/// Words of five letters or more that code and prose share ("return", "error"), which
/// name no identifier of their own.
pub(super) fn is_common_word(w: &str) -> bool {
    let f = fold(w);
    ABOUT_CODE.contains(&f.as_str())
        || FILLER.contains(&f.as_str())
        || CODE_NOUNS.contains(&f.as_str())
        || matches!(
            f.as_str(),
            "const"
                | "while"
                | "false"
                | "async"
                | "await"
                | "import"
                | "export"
                | "class"
                | "struct"
                | "print"
                | "string"
                | "number"
                | "value"
                | "param"
                | "params"
                | "request"
                | "response"
                | "where"
                | "select"
                | "update"
                | "delete"
                | "insert"
                | "limit"
                | "order"
                | "table"
                | "users"
                | "items"
                | "total"
                | "count"
                | "start"
                | "stop"
                | "first"
                | "other"
                | "every"
                | "after"
                | "before"
                | "which"
                | "there"
                | "their"
                | "about"
                | "these"
                | "those"
                | "would"
                | "could"
                | "should"
        )
}

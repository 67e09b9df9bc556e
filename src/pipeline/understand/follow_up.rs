//! Follow-ups: a message that does not carry its subject is searched together with the
//! earlier user messages that do.

use super::*;
use std::collections::HashSet;

use crate::llm::{Message, Role};

/// Words that say "the same subject as before" and nothing of their own.
#[rustfmt::skip]
pub(super) static FOLLOW_UP_WORDS: WordSet = WordSet::new(&[
    "example", "examples", "sample", "show", "more", "details", "detail", "another", "other",
    "same", "also", "else", "again", "instead", "case", "cases", "one", "ones", "way", "ways",
    "option", "options", "alternative", "alternatives", "difference", "explain", "elaborate",
    "expand", "continue", "go", "on", "further", "deeper", "test", "use", "using", "usage",
    "undo", "configure", "config", "set", "change", "handle", "fails", "fail", "error",
    "errors", "return", "returns", "work", "works", "mean", "why", "what", "how", "when",
    "where", "which", "who", "about", "and", "but", "then", "if", "or", "ejemplo", "ejemplos",
    "muestra", "muestrame", "ensename", "dame", "mas", "detalles", "otro", "otra", "otros",
    "otras", "mismo", "misma", "tambien", "caso", "casos", "forma", "formas", "manera",
    "opcion", "opciones", "alternativa", "diferencia", "explica", "explicame", "sigue",
    "continua", "prueba", "pruebo", "probar", "usa", "uso", "usar", "deshacer", "deshago",
    "configura", "configuro", "cambio", "cambiar", "maneja", "manejo", "falla", "fallar",
    "falle", "error", "errores", "devuelve", "devolver", "funciona", "significa", "porque",
    "que", "como", "cuando", "donde", "cual", "quien", "sobre", "y", "pero", "entonces", "si",
    "o", "hago", "hacer", "puedo", "pasa", "ocurre",
    "das", "dar", "give", "gives", "do", "does", "did", "make", "get", "gets", "got", "have", "has", "had", "then", "there", "puede", "pueden", "se", "tiene", "tienen", "hace", "hacen", "sirve", "need", "needs", "necesito", "quiero", "want", "back", "possible", "posible",
    "any", "some", "know", "should", "must", "alguna", "alguno", "algun", "deba", "debo", "conocer", "saber", "sepa", "compruebo", "comprobar", "check", "checks", "verify", "verifico", "verificar", "funcionado", "worked", "working", "tip", "tips", "trick", "tricks", "gotcha", "gotchas", "caveat", "caveats", "consejo", "consejos", "truco", "trucos", "pega", "pegas", "cuidado", "careful", "watch",
]);

/// Pronouns that stand for the subject of the turn before.
#[rustfmt::skip]
pub(super) static ANAPHORA: WordSet = WordSet::new(&[
    "it", "that", "this", "them", "those", "these", "they", "its", "one", "eso", "esto", "ese",
    "esa", "esos", "esas", "lo", "la", "los", "las", "le", "les", "ello",
]);

/// A message's own words: not filler, not small talk, not generic follow-up words.
pub(super) fn own_words(message: &str) -> Vec<String> {
    folded_words(message)
        .into_iter()
        .filter(|w| {
            !FILLER.contains(&w.as_str())
                && !SMALL_TALK.contains(&w.as_str())
                && !FOLLOW_UP_WORDS.contains(&w.as_str())
                && !infinitive_with_clitic(w)
        })
        .collect()
}

/// Openings that continue the turn before: "and …", "y …", "what about …".
pub(super) const CONTINUING: &[&str] = &[
    "and ",
    "y ",
    "what about",
    "how about",
    "and what",
    "e ",
    "tambien ",
    "also ",
    "then ",
    "entonces ",
    "pero ",
    "but ",
];

/// Whether the message needs the turns before it for its subject: it starts "and …" /
/// "y …" / "what about …"; or it names no identifier and has at most one word of its
/// own ("¿se puede cambiar el prefijo?", "is there a shorter way?"), or at most three
/// with a pronoun standing for the subject before ("what does the client get back when
/// it's empty?").
pub fn lacks_subject(message: &str) -> bool {
    let folded = folded_words(message);
    let text = fold(message);
    let mut text = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    // Past "ok", "vale", "thanks": "vale, ¿y cómo deshago la última?".
    while let Some(first) = text.split(|c: char| !c.is_alphanumeric()).next() {
        if first.is_empty() || !SMALL_TALK.contains(&first) || first == "and" {
            break;
        }
        text = text[first.len()..].trim_start_matches(|c: char| !c.is_alphanumeric());
    }
    if CONTINUING.iter().any(|p| text.starts_with(p)) {
        return true;
    }
    let names_something = message
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(looks_like_identifier);
    if names_something {
        return false;
    }
    let own = own_words(message).len();
    let anaphoric = folded
        .iter()
        .any(|w| ANAPHORA.contains(&w.as_str()) || infinitive_with_clitic(w));
    own <= 1 || (anaphoric && own <= 3)
}

/// "hacerlo", "probarla", "usarlos": a Spanish infinitive carrying its object as a pronoun.
pub(super) fn infinitive_with_clitic(w: &str) -> bool {
    ["los", "las", "lo", "la"].iter().any(|c| {
        w.strip_suffix(c).is_some_and(|stem| {
            stem.len() >= 4 && ["ar", "er", "ir"].iter().any(|e| stem.ends_with(e))
        })
    })
}

/// Whether `rewrite`, a model's search query for `message`, brings in a subject from the
/// conversation: a word of its own that the message does not hold and one of the last
/// earlier user messages does. Otherwise the rewrite only restates a question that
/// carries its own subject.
pub fn brings_subject_from_history(rewrite: &str, message: &str, history: &[Message]) -> bool {
    let asked: HashSet<String> = folded_words(message).into_iter().collect();
    let earlier: HashSet<String> = history
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .take(FOLLOW_UP_REACH)
        .flat_map(|m| folded_words(&m.content))
        .collect();
    own_words(rewrite)
        .iter()
        .any(|w| !asked.contains(w) && earlier.contains(w))
}

/// Most earlier user messages a follow-up's search reaches back over.
pub(super) const FOLLOW_UP_REACH: usize = 3;

/// The search query for a message whose subject is in the conversation: the message with
/// the earlier user messages back to (and including) the last one that carries its own
/// subject; `None` when the message carries its own, or there is nothing before it.
pub fn follow_up_query(message: &str, history: &[Message]) -> Option<String> {
    if !lacks_subject(message) {
        return None;
    }
    let mut earlier = Vec::new();
    for m in history
        .iter()
        .rev()
        .filter(|m| m.role == Role::User && !m.content.trim().is_empty())
        .take(FOLLOW_UP_REACH)
    {
        if small_talk(&m.content).is_some() {
            continue;
        }
        earlier.push(m.content.trim());
        if !lacks_subject(&m.content) {
            break;
        }
    }
    if earlier.is_empty() {
        return None;
    }
    // The subject first; of the follow-up, only its own words ("example", "show me"
    // would find every page with an example in it).
    earlier.reverse();
    let mut query = earlier.join("\n");
    let own = own_words(message);
    if !own.is_empty() {
        query.push('\n');
        query.push_str(&own.join(" "));
    }
    Some(query)
}

//! Deciding what kind of question a turn is (`RETRIEVAL`, `CODE_GENERATION`,
//! `CONVERSATIONAL`) and whether it refers to the code in the editor.
//!
//! Two implementations of [`Classifier`]: `RulesClassifier` needs no model call (English
//! and Spanish patterns); `LlmClassifier` asks the upstream model for two words
//! (`RETRIEVAL EDITOR`, …), parses them strictly and falls back to the rules on a timeout,
//! an error or any other answer. The flag reported is "the words refer to the editor"; the
//! pipeline sets EDITOR only when that holds *and* there is editor code to refer to.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::llm::{self, ChatModel, GenParams, Message, Role, UpstreamRequest};
use crate::pipeline::prompts::render;

/// The three kinds of turn the reference distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueryType {
    /// A question answered from the knowledge base.
    Retrieval,
    /// A request to write or change code.
    CodeGeneration,
    /// Small talk and follow-ups about the conversation itself: no retrieval.
    Conversational,
}

impl QueryType {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryType::Retrieval => "RETRIEVAL",
            QueryType::CodeGeneration => "CODE_GENERATION",
            QueryType::Conversational => "CONVERSATIONAL",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_uppercase().as_str() {
            "RETRIEVAL" => Some(QueryType::Retrieval),
            "CODE_GENERATION" => Some(QueryType::CodeGeneration),
            "CONVERSATIONAL" => Some(QueryType::Conversational),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub query_type: QueryType,
    /// The query's words point at the editor ("this code", "qué hace esto", …).
    pub refers_to_editor: bool,
}

/// What a classifier looks at.
pub struct ClassifyInput<'a> {
    /// The latest user message.
    pub query: &'a str,
    /// The conversation before it (oldest first).
    pub history: &'a [Message],
    /// The editor selection, possibly empty.
    pub selection: &'a str,
}

/// A classification and what made it (`rules`, `llm`, or `rules-fallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub classification: Classification,
    pub by: &'static str,
}

impl Decision {
    /// The upstream model was asked (its answer used or not).
    pub fn asked_model(&self) -> bool {
        matches!(self.by, "llm" | "rules-fallback")
    }
}

#[async_trait]
pub trait Classifier: Send + Sync {
    async fn classify(&self, input: &ClassifyInput<'_>) -> Decision;
}

/// Words that point at code the user is looking at.
const EDITOR_REFERENCES: &[&str] = &[
    "this code",
    "this function",
    "this method",
    "this class",
    "this file",
    "this snippet",
    "this block",
    "this line",
    "this loop",
    "this query",
    "this endpoint",
    "this test",
    "this script",
    "this module",
    "this struct",
    "this error",
    "this bug",
    "selected code",
    "the selection",
    "selected text",
    "the code above",
    "the code below",
    "my code",
    "fix this",
    "explain this",
    "refactor this",
    "improve this",
    "optimize this",
    "what does this",
    "what is this doing",
    "why is this",
    "why does this",
    "is this correct",
    "the error here",
    "here?",
    "in here",
    "document this",
    "test this",
    "simplify this",
    "este código",
    "este codigo",
    "esta función",
    "esta funcion",
    "este método",
    "este metodo",
    "esta clase",
    "este archivo",
    "este fichero",
    "este bloque",
    "esta línea",
    "esta linea",
    "este bucle",
    "este endpoint",
    "este test",
    "este script",
    "este módulo",
    "este error",
    "lo seleccionado",
    "código seleccionado",
    "codigo seleccionado",
    "el texto seleccionado",
    "mi código",
    "mi codigo",
    "qué hace esto",
    "que hace esto",
    "arregla esto",
    "explica esto",
    "explícame esto",
    "explicame esto",
    "mejora esto",
    "cómo mejoro esto",
    "como mejoro esto",
    "refactoriza esto",
    "optimiza esto",
    "simplifica esto",
    "documenta esto",
    "corrige esto",
    "por qué falla esto",
    "por que falla esto",
    "aquí?",
    "aqui?",
    "esto está bien",
    "esto esta bien",
];

/// Requests to write or change code.
const CODE_GENERATION: &[&str] = &[
    "write ",
    "create ",
    "generate ",
    "implement ",
    "build ",
    "make a ",
    "make me ",
    "give me code",
    "code for ",
    "code that ",
    "show me code",
    "show me an example",
    "an example of",
    "example code",
    "fix ",
    "refactor",
    "rewrite ",
    "convert ",
    "add a ",
    "add an ",
    "add error handling",
    "optimize ",
    "improve ",
    "translate this code",
    "port this",
    "scaffold",
    "snippet that",
    "function that",
    "script that",
    "simplify ",
    "document ",
    "add tests",
    "write tests",
    "unit test for",
    "escribe",
    "crea ",
    "créame",
    "creame",
    "genera ",
    "implementa",
    "hazme",
    "haz una",
    "haz un",
    "dame código",
    "dame codigo",
    "dame un ejemplo",
    "un ejemplo de código",
    "un ejemplo de codigo",
    "código para",
    "codigo para",
    "código que",
    "codigo que",
    "función que",
    "funcion que",
    "script que",
    "programa que",
    "arregla",
    "corrige",
    "refactoriza",
    "reescribe",
    "convierte",
    "añade",
    "agrega",
    "optimiza",
    "mejora",
    "simplifica",
    "documenta",
    "muéstrame un ejemplo",
    "muestrame un ejemplo",
    "escribe pruebas",
    "pruebas unitarias para",
];

/// Small talk and turns about the conversation itself.
const CONVERSATIONAL: &[&str] = &[
    "thanks",
    "thank you",
    "hello",
    "hi ",
    "hi!",
    "hey",
    "good morning",
    "good afternoon",
    "great",
    "awesome",
    "perfect",
    "got it",
    "ok",
    "okay",
    "cool",
    "nice",
    "you're welcome",
    "who are you",
    "what can you do",
    "how are you",
    "can you repeat",
    "repeat that",
    "say that again",
    "explain that again",
    "what did you mean",
    "what do you mean by that",
    "summarize your answer",
    "summarize that",
    "shorter please",
    "make it shorter",
    "in spanish please",
    "in english please",
    "your previous answer",
    "your last answer",
    "as you said",
    "bye",
    "goodbye",
    "never mind",
    "nevermind",
    "gracias",
    "muchas gracias",
    "hola",
    "buenos días",
    "buenos dias",
    "buenas tardes",
    "vale",
    "perfecto",
    "genial",
    "entendido",
    "de acuerdo",
    "quién eres",
    "quien eres",
    "qué puedes hacer",
    "que puedes hacer",
    "cómo estás",
    "como estas",
    "repite",
    "repítelo",
    "repitelo",
    "no entendí",
    "no entendi",
    "qué quisiste decir",
    "que quisiste decir",
    "resume tu respuesta",
    "resúmelo",
    "resumelo",
    "más corto",
    "mas corto",
    "en inglés por favor",
    "en ingles por favor",
    "tu respuesta anterior",
    "lo que dijiste",
    "adiós",
    "adios",
    "olvídalo",
    "olvidalo",
];

fn normalize(query: &str) -> String {
    let mut q = query.trim().to_lowercase();
    q = q.trim_start_matches(['¿', '¡']).to_string();
    // A trailing space lets "hi " and "write " match at the end too.
    q.push(' ');
    q
}

fn matches_any(q: &str, patterns: &[&str]) -> bool {
    patterns.iter().any(|p| {
        if p.len() <= 4 {
            // Short words must stand alone ("ok", "hey"), not inside "token" or "they".
            q.split(|c: char| !c.is_alphanumeric() && c != '\'')
                .any(|w| w == p.trim_end_matches(['!', ' ']))
                || q.starts_with(p)
        } else {
            q.contains(p)
        }
    })
}

/// Classifies without a model call.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesClassifier;

impl RulesClassifier {
    pub fn classify(&self, query: &str) -> Classification {
        let q = normalize(query);
        let refers_to_editor = matches_any(&q, EDITOR_REFERENCES);
        let words = q.split_whitespace().count();
        let code = matches_any(&q, CODE_GENERATION);
        // Small talk is short; a long message that says "thanks" usually asks something too.
        let conversational = !code && words <= 8 && matches_any(&q, CONVERSATIONAL);
        let query_type = if conversational {
            QueryType::Conversational
        } else if code {
            QueryType::CodeGeneration
        } else {
            QueryType::Retrieval
        };
        Classification {
            query_type,
            refers_to_editor,
        }
    }
}

#[async_trait]
impl Classifier for RulesClassifier {
    async fn classify(&self, input: &ClassifyInput<'_>) -> Decision {
        Decision {
            classification: RulesClassifier::classify(self, input.query),
            by: "rules",
        }
    }
}

/// Asks the upstream model (the reference's two-word prompt).
pub struct LlmClassifier {
    pub chat: Arc<dyn ChatModel>,
    pub model: String,
    pub template: String,
    pub timeout: Duration,
    /// Latest messages of the conversation shown to the model.
    pub history_messages: usize,
}

/// Longest selection shown to the classifier, in characters.
const SELECTION_CHARS: usize = 2000;

impl LlmClassifier {
    fn prompt(&self, input: &ClassifyInput<'_>) -> String {
        let from = input.history.len().saturating_sub(self.history_messages);
        let history = format_history(&input.history[from..], 500);
        let selection = if input.selection.trim().is_empty() {
            String::new()
        } else {
            format!(
                "<editor_selection>\n{}\n</editor_selection>\n",
                truncate_chars(input.selection, SELECTION_CHARS)
            )
        };
        render(
            &self.template,
            &[
                ("history", &history),
                ("selection", &selection),
                ("query", input.query),
            ],
        )
    }
}

#[async_trait]
impl Classifier for LlmClassifier {
    async fn classify(&self, input: &ClassifyInput<'_>) -> Decision {
        let request = UpstreamRequest {
            params: GenParams {
                max_tokens: Some(8),
                temperature: Some(0.0),
                ..GenParams::default()
            },
            ..UpstreamRequest::question(self.model.clone(), self.prompt(input))
        };
        let answer =
            tokio::time::timeout(self.timeout, llm::complete(self.chat.as_ref(), request)).await;
        let reason = match answer {
            Ok(Ok(text)) => match parse_two_words(&text) {
                Some(classification) => {
                    return Decision {
                        classification,
                        by: "llm",
                    }
                }
                None => format!("unparsable answer ({} chars)", text.len()),
            },
            Ok(Err(e)) => format!("upstream error: {e}"),
            Err(_) => format!("no answer within {} ms", self.timeout.as_millis()),
        };
        tracing::warn!(reason = %reason, "classifier: falling back to the rules");
        Decision {
            classification: RulesClassifier.classify(input.query),
            by: "rules-fallback",
        }
    }
}

/// `TYPE SIGNAL` and nothing else: `RETRIEVAL EDITOR`, `CONVERSATIONAL NO_EDITOR`, …
pub fn parse_two_words(answer: &str) -> Option<Classification> {
    let mut words = answer.split_whitespace();
    let (Some(kind), Some(signal), None) = (words.next(), words.next(), words.next()) else {
        return None;
    };
    let query_type = match kind {
        "RETRIEVAL" => QueryType::Retrieval,
        "CODE_GENERATION" => QueryType::CodeGeneration,
        "CONVERSATIONAL" => QueryType::Conversational,
        _ => return None,
    };
    let refers_to_editor = match signal {
        "EDITOR" => true,
        "NO_EDITOR" => false,
        _ => return None,
    };
    Some(Classification {
        query_type,
        refers_to_editor,
    })
}

/// `user: …` / `assistant: …` lines, each message cut to `max_chars`; `(none)` if empty.
pub(crate) fn format_history(messages: &[Message], max_chars: usize) -> String {
    let lines: Vec<String> = messages
        .iter()
        .filter(|m| matches!(m.role, Role::User | Role::Assistant) && !m.content.trim().is_empty())
        .map(|m| {
            format!(
                "{}: {}",
                m.role.as_str(),
                truncate_chars(m.content.trim(), max_chars)
            )
        })
        .collect();
    if lines.is_empty() {
        "(none)".to_string()
    } else {
        lines.join("\n")
    }
}

/// The first `max` characters of `text`, with an ellipsis when cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((at, _)) => format!("{}…", &text[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_words_stand_alone() {
        let c = RulesClassifier;
        assert_eq!(
            c.classify("How do tokens expire?").query_type,
            QueryType::Retrieval
        );
        assert_eq!(c.classify("ok").query_type, QueryType::Conversational);
        assert_eq!(
            c.classify("¡Gracias!").query_type,
            QueryType::Conversational
        );
        assert!(c.classify("¿Qué hace esto?").refers_to_editor);
        assert!(!c.classify("¿Qué es un endpoint?").refers_to_editor);
    }

    #[test]
    fn two_words_are_parsed_strictly() {
        let ok = parse_two_words(" CODE_GENERATION EDITOR\n").unwrap();
        assert_eq!(ok.query_type, QueryType::CodeGeneration);
        assert!(ok.refers_to_editor);
        assert!(
            !parse_two_words("RETRIEVAL NO_EDITOR")
                .unwrap()
                .refers_to_editor
        );
        for bad in [
            "",
            "RETRIEVAL",
            "retrieval no_editor",
            "RETRIEVAL NO_EDITOR.",
            "RETRIEVAL EDITOR because",
            "The answer is RETRIEVAL",
            "SEARCH EDITOR",
        ] {
            assert_eq!(parse_two_words(bad), None, "{bad:?}");
        }
    }
}

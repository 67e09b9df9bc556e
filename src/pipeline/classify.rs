//! Deciding what kind of question a turn is (`RETRIEVAL`, `CODE_GENERATION`,
//! `CONVERSATIONAL`) and whether it refers to the code in the editor.
//!
//! Two implementations of [`Classifier`]: `RulesClassifier` needs no model call (English
//! and Spanish rules of `understand`); `LlmClassifier` asks the upstream model for two words
//! (`RETRIEVAL EDITOR`, …), parses them strictly and falls back to the rules on a timeout,
//! an error or any other answer. The flag reported is "the words refer to the editor"; the
//! pipeline sets EDITOR only when that holds *and* there is editor code to refer to.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::context::EditorContext;
use crate::llm::{self, ChatModel, GenParams, Message, Role, UpstreamRequest};
use crate::pipeline::prompts::render;
use crate::pipeline::understand;

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
    /// What the editor shows: the selection, the open file, extra context, items.
    pub editor: &'a EditorContext,
}

/// A classification and what made it (`rules`, `llm`, or `rules-fallback`), with the
/// rules behind the editor decision and the route (for the log and the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub classification: Classification,
    pub by: &'static str,
    pub editor_rule: &'static str,
    pub route_rule: &'static str,
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

/// Classifies without a model call (see `understand`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesClassifier;

impl RulesClassifier {
    /// The query type of a message, and whether its words point at code with a selection
    /// at hand (what the labelled sets measure without editor content).
    /// The query type of a message with no editor context, and whether its words point
    /// at code (as they would at a file open in the editor, with no selection to give the
    /// benefit of the doubt): what the labelled sets measure without editor content.
    pub fn classify(&self, query: &str) -> Classification {
        let (c, _, _) = self.classify_turn(query, &EditorContext::default());
        let open_file = EditorContext {
            editor_content: "…".into(),
            ..EditorContext::default()
        };
        Classification {
            refers_to_editor: c.query_type != QueryType::Conversational
                && understand::editor_reference(query, &open_file).yes,
            ..c
        }
    }

    /// The classification of a message with this editor context, and the rules that
    /// decided it: (editor rule, route rule).
    pub fn classify_turn(
        &self,
        query: &str,
        editor: &EditorContext,
    ) -> (Classification, &'static str, &'static str) {
        let editor_why = understand::editor_reference(query, editor);
        if let Some(rule) = understand::conversation_only(query, editor) {
            let c = Classification {
                query_type: QueryType::Conversational,
                refers_to_editor: false,
            };
            return (c, editor_why.rule, rule);
        }
        let q = normalize(query);
        let (query_type, rule) = if matches_any(&q, CODE_GENERATION) {
            (QueryType::CodeGeneration, "code-request")
        } else {
            (QueryType::Retrieval, "question")
        };
        let c = Classification {
            query_type,
            refers_to_editor: editor_why.yes,
        };
        (c, editor_why.rule, rule)
    }
}

#[async_trait]
impl Classifier for RulesClassifier {
    async fn classify(&self, input: &ClassifyInput<'_>) -> Decision {
        let (classification, editor_rule, route_rule) =
            self.classify_turn(input.query, input.editor);
        Decision {
            classification,
            by: "rules",
            editor_rule,
            route_rule,
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
        let selection = if input.editor.selected_text.trim().is_empty() {
            String::new()
        } else {
            format!(
                "<editor_selection>\n{}\n</editor_selection>\n",
                truncate_chars(&input.editor.selected_text, SELECTION_CHARS)
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
                        editor_rule: "llm",
                        route_rule: "llm",
                    }
                }
                None => format!("unparsable answer ({} chars)", text.len()),
            },
            Ok(Err(e)) => format!("upstream error: {e}"),
            Err(_) => format!("no answer within {} ms", self.timeout.as_millis()),
        };
        tracing::warn!(reason = %reason, "classifier: falling back to the rules");
        let (classification, editor_rule, route_rule) =
            RulesClassifier.classify_turn(input.query, input.editor);
        Decision {
            classification,
            by: "rules-fallback",
            editor_rule,
            route_rule,
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
    if text.len() <= max {
        // No more characters than bytes: nothing to count.
        return text.to_string();
    }
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
        assert_eq!(
            c.classify("ok, how do tokens expire?").query_type,
            QueryType::Retrieval
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

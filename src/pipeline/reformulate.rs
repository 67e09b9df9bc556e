//! Turning the user's message into the search query.
//!
//! `off` searches the message as asked (a follow-up with its subject from the
//! conversation); `llm` adds the upstream model's rewrite to the query of a message the
//! rules take as carrying its own subject (a follow-up they resolve keeps their query),
//! written for the kind of question (compressed for RETRIEVAL, mapped to the knowledge
//! base's commands for CODE_GENERATION; CONVERSATIONAL is never rewritten) and searched
//! only when it brings in a subject from the conversation. Either way the query stays in
//! the user's language, and when the message is about the selected code the search is
//! anchored on it: the selection's identifiers are added to the query (the model sees the
//! selection too). Any failure leaves the message as it was asked.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::llm::{self, ChatModel, GenParams, Message, UpstreamRequest};
use crate::pipeline::classify::{format_history, truncate_chars, QueryType};
use crate::pipeline::prompts::render;
use crate::pipeline::understand;
use crate::retrieval::Lang;

pub enum Reformulator {
    Off,
    Llm(LlmReformulator),
}

pub struct LlmReformulator {
    pub chat: Arc<dyn ChatModel>,
    pub model: String,
    pub template: String,
    pub timeout: Duration,
}

/// The search query and how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reformulation {
    pub query: String,
    /// The selected code shaped the query.
    pub anchored: bool,
    /// `as-asked`, `history`, `anchored`, `llm`, `llm-restated` (the model's rewrite only
    /// restated the message and was not searched) or `fallback` (the model failed; logged).
    pub by: &'static str,
}

impl Reformulation {
    /// The upstream model was asked (its rewrite used or not).
    pub fn asked_model(&self) -> bool {
        matches!(self.by, "llm" | "llm-restated" | "fallback")
    }
}

/// Identifiers taken from the selection when there is no model to rewrite the query.
const ANCHOR_IDENTIFIERS: usize = 16;
/// Longest selection shown to the model, in characters.
const ANCHOR_CHARS: usize = 2000;
/// Longest rewrite accepted, in characters.
const MAX_QUERY_CHARS: usize = 400;

impl Reformulator {
    /// `selection` is the selected code when the message is about it (EDITOR), else `None`.
    pub async fn reformulate(
        &self,
        query: &str,
        query_type: QueryType,
        history: &[Message],
        selection: Option<&str>,
    ) -> Reformulation {
        let selection = selection.filter(|s| !s.trim().is_empty());
        if query_type == QueryType::Conversational {
            return as_asked(query);
        }
        let from_history = understand::follow_up_query(query, history);
        match self {
            Reformulator::Off => without_model(query, from_history, selection),
            // A follow-up the rules resolve from the history is searched with the rules'
            // query, the model not asked: on the Debian follow-ups adding a 0.5B or 1.5B
            // model's rewrite to it found a relevant file for 0.847 of them, against
            // 0.862 without. The model rewrites what the rules take as self-contained,
            // which is where the history they did not use can still matter.
            Reformulator::Llm(_) if from_history.is_some() => {
                without_model(query, from_history, selection)
            }
            Reformulator::Llm(model) => {
                match model.rewrite(query, query_type, history, selection).await {
                    // A rewrite is used when it brings the conversation's subject into a
                    // message the rules took as self-contained; added to the rules' query,
                    // never replacing it (on the Debian follow-ups a small model's rewrite
                    // alone found a relevant file for 0.464 of follow-ups and 0.602 of
                    // self-contained questions, against 0.862 for both without it). One
                    // that only restates the message is not searched: added to
                    // self-contained questions, the 0.5B model's restatements lost 3 points
                    // of recall@3.
                    Ok(rewritten)
                        if understand::brings_subject_from_history(&rewritten, query, history) =>
                    {
                        Reformulation {
                            query: format!(
                                "{}\n{rewritten}",
                                without_model(query, None, selection).query
                            ),
                            anchored: selection.is_some(),
                            by: "llm",
                        }
                    }
                    Ok(_) => Reformulation {
                        by: "llm-restated",
                        ..without_model(query, None, selection)
                    },
                    Err(reason) => {
                        tracing::warn!(reason = %reason, "reformulate: the model's rewrite is not used");
                        Reformulation {
                            by: "fallback",
                            ..without_model(query, None, selection)
                        }
                    }
                }
            }
        }
    }
}

/// The message as asked; a follow-up that does not carry its subject with the earlier
/// messages that do (`understand::follow_up_query`); anchored on the selection's
/// identifiers when there is one.
/// `from_history` is `understand::follow_up_query`'s answer for the message.
fn without_model(
    query: &str,
    from_history: Option<String>,
    selection: Option<&str>,
) -> Reformulation {
    let (text, by) = match from_history {
        Some(with_history) => (with_history, "history"),
        None => (query.to_string(), "as-asked"),
    };
    match selection {
        Some(code) => Reformulation {
            query: anchor_on_identifiers(&text, code),
            anchored: true,
            by: "anchored",
        },
        None => Reformulation {
            query: text,
            anchored: false,
            by,
        },
    }
}

fn as_asked(query: &str) -> Reformulation {
    Reformulation {
        query: query.to_string(),
        anchored: false,
        by: "as-asked",
    }
}

impl LlmReformulator {
    async fn rewrite(
        &self,
        query: &str,
        query_type: QueryType,
        history: &[Message],
        selection: Option<&str>,
    ) -> Result<String, String> {
        let anchor = match selection {
            Some(code) => format!(
                "- The message is about this selected code; search for what the code uses:\n<selected_code>\n{}\n</selected_code>\n",
                truncate_chars(code, ANCHOR_CHARS)
            ),
            None => String::new(),
        };
        let from = history.len().saturating_sub(6);
        let prompt = render(
            &self.template,
            &[
                ("anchor", &anchor),
                ("history", &format_history(&history[from..], 500)),
                ("mode", query_type.as_str()),
                ("query", query),
            ],
        );
        let request = UpstreamRequest {
            params: GenParams {
                max_tokens: Some(96),
                temperature: Some(0.0),
                ..GenParams::default()
            },
            ..UpstreamRequest::question(self.model.clone(), prompt)
        };
        let answer = tokio::time::timeout(self.timeout, llm::complete(self.chat.as_ref(), request))
            .await
            .map_err(|_| format!("no answer within {} ms", self.timeout.as_millis()))?
            .map_err(|e| format!("upstream error: {e}"))?;
        clean_rewrite(query, &answer)
    }
}

/// The model's query line, or why it cannot be used.
fn clean_rewrite(original: &str, answer: &str) -> Result<String, String> {
    let line = answer
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or("empty answer")?;
    let line = line
        .strip_prefix("Query:")
        .or_else(|| line.strip_prefix("query:"))
        .unwrap_or(line)
        .trim()
        .trim_matches(['"', '\'', '`', '«', '»'])
        .trim();
    if line.is_empty() {
        return Err("empty answer".into());
    }
    if line.chars().count() > MAX_QUERY_CHARS {
        return Err(format!("answer too long ({} chars)", line.len()));
    }
    // Never translated: a rewrite that reads as the other language is not used.
    let asked = Lang::detect(original);
    let (es, en) = Lang::evidence(line);
    let translated = match asked {
        Lang::Es => en > es,
        Lang::En => es > en,
    };
    if translated {
        return Err(format!(
            "the rewrite is not in the message's language ({})",
            asked.code()
        ));
    }
    Ok(line.to_string())
}

/// The message followed by the distinct identifiers of the selected code.
fn anchor_on_identifiers(query: &str, code: &str) -> String {
    let mut seen = HashSet::new();
    let mut out = query.trim().to_string();
    let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
    for word in words {
        if out.len() > MAX_QUERY_CHARS || seen.len() >= ANCHOR_IDENTIFIERS {
            break;
        }
        let starts_well = word
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_');
        if word.chars().count() >= 3 && starts_well && seen.insert(word.to_string()) {
            out.push(' ');
            out.push_str(word);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_are_cleaned_and_kept_in_the_language_asked() {
        assert_eq!(
            clean_rewrite(
                "¿Cómo declaro una variable?",
                "\n\"declarar variable addVar\"\n"
            )
            .unwrap(),
            "declarar variable addVar"
        );
        assert_eq!(
            clean_rewrite("how do retries work", "Query: retry policy backoff").unwrap(),
            "retry policy backoff"
        );
        assert!(
            clean_rewrite("¿Cómo declaro una variable?", "How do I declare a variable").is_err()
        );
        assert!(clean_rewrite(
            "How do I declare a variable?",
            "cómo se declara una variable"
        )
        .is_err());
        assert!(clean_rewrite("x", "   \n ").is_err());
    }

    #[test]
    fn selection_identifiers_anchor_the_query() {
        let q = anchor_on_identifiers(
            "what does this do?",
            "let r = retry_policy(max_attempts, 3);\nr.run()",
        );
        assert_eq!(q, "what does this do? let retry_policy max_attempts run");
    }

    #[tokio::test]
    async fn off_keeps_the_message_unless_anchored() {
        let r = Reformulator::Off;
        let plain = r
            .reformulate("¿Qué es un DSL?", QueryType::Retrieval, &[], None)
            .await;
        assert_eq!(plain, as_asked("¿Qué es un DSL?"));
        let chat = r
            .reformulate(
                "thanks",
                QueryType::Conversational,
                &[],
                Some("fn main() {}"),
            )
            .await;
        assert!(!chat.anchored);
        let anchored = r
            .reformulate(
                "fix this",
                QueryType::CodeGeneration,
                &[],
                Some("open_stream(url)"),
            )
            .await;
        assert!(anchored.anchored);
        assert_eq!(anchored.query, "fix this open_stream url");
    }
}

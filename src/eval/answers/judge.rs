//! The judge: a language model asked short questions whose answers must be one JSON
//! object of a known shape. A reply that is not is asked again once (the bad reply and
//! what was wrong with it are shown to the model); a second bad reply makes the
//! judgement missing, which is reported and never counted as a score.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::{AssistantSettings, JudgeSettings, LlmSettings, SettingsError};
use crate::llm::{
    self, ChatModel, GenParams, Input, Message, Role, UpstreamError, UpstreamErrorKind,
};
use crate::pipeline::prompts::{render, template};

/// The judge's templates (`config/prompts/judge_*.txt`, replaceable in `prompts_dir`).
#[derive(Debug, Clone)]
pub struct JudgePrompts {
    /// `{question}`, `{answer}`.
    pub statements: String,
    /// `{context}`, `{statements}`, `{count}`.
    pub faithfulness: String,
    /// `{answer}`, `{count}`.
    pub relevancy: String,
    /// `{question}`, `{questions}`, `{count}`.
    pub same_question: String,
    /// `{question}`, `{context}`, `{sentences}`, `{count}`.
    pub context_recall: String,
    /// `{question}`, `{ground_truth}`, `{passages}`, `{count}`.
    pub context_precision: String,
}

const BUILT_IN: [(&str, &str); 6] = [
    (
        "judge_statements.txt",
        include_str!("../../../config/prompts/judge_statements.txt"),
    ),
    (
        "judge_faithfulness.txt",
        include_str!("../../../config/prompts/judge_faithfulness.txt"),
    ),
    (
        "judge_relevancy.txt",
        include_str!("../../../config/prompts/judge_relevancy.txt"),
    ),
    (
        "judge_same_question.txt",
        include_str!("../../../config/prompts/judge_same_question.txt"),
    ),
    (
        "judge_context_recall.txt",
        include_str!("../../../config/prompts/judge_context_recall.txt"),
    ),
    (
        "judge_context_precision.txt",
        include_str!("../../../config/prompts/judge_context_precision.txt"),
    ),
];

impl JudgePrompts {
    pub fn load(settings: &AssistantSettings) -> Result<Self, SettingsError> {
        let read = |i: usize| template(settings, BUILT_IN[i].0, BUILT_IN[i].1);
        Ok(Self {
            statements: read(0)?,
            faithfulness: read(1)?,
            relevancy: read(2)?,
            same_question: read(3)?,
            context_recall: read(4)?,
            context_precision: read(5)?,
        })
    }
}

/// A judgement: the parsed reply, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged<T> {
    Ok(T),
    Missing(String),
}

/// What a run asked of the judge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JudgeStats {
    /// Requests sent (retries included).
    pub calls: u64,
    /// Replies that did not parse or had the wrong shape (each one, retried or not).
    pub malformed_replies: u64,
    /// Judgements given up after the retry.
    pub missing: u64,
}

pub struct Judge {
    chat: Arc<dyn ChatModel>,
    model: String,
    prompts: JudgePrompts,
    max_tokens: u32,
    json_mode: bool,
    timeout: Duration,
    relevancy_questions: usize,
    calls: AtomicU64,
    malformed: AtomicU64,
    missing: AtomicU64,
}

impl Judge {
    /// The judge of `[judge]`, falling back to `[llm]` where its keys are unset.
    pub fn from_settings(
        judge: &JudgeSettings,
        llm: &LlmSettings,
        assistant: &AssistantSettings,
        model_override: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut connection = judge.connection(llm);
        if let Some(m) = model_override.filter(|m| !m.trim().is_empty()) {
            connection.model = m.trim().to_string();
        }
        Ok(Self {
            chat: llm::from_settings(&connection)?,
            model: connection.model,
            prompts: JudgePrompts::load(assistant)?,
            max_tokens: judge.max_tokens,
            json_mode: judge.json_mode,
            timeout: judge.timeout,
            relevancy_questions: judge.relevancy_questions,
            calls: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            missing: AtomicU64::new(0),
        })
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn prompts(&self) -> &JudgePrompts {
        &self.prompts
    }

    pub fn relevancy_questions(&self) -> usize {
        self.relevancy_questions
    }

    pub fn stats(&self) -> JudgeStats {
        JudgeStats {
            calls: self.calls.load(Ordering::Relaxed),
            malformed_replies: self.malformed.load(Ordering::Relaxed),
            missing: self.missing.load(Ordering::Relaxed),
        }
    }

    /// Asks `template` filled with `values`; `parse` checks the reply's JSON object. A
    /// failed connection or an upstream error is an `Err` (the run cannot go on); a
    /// reply that does not parse, or a judgement that times out, is asked once more,
    /// then `Missing`.
    pub async fn ask<T>(
        &self,
        what: &'static str,
        template: &str,
        values: &[(&str, &str)],
        parse: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<Judged<T>, UpstreamError> {
        let prompt = render(template, values);
        let mut messages = vec![Message::text(Role::User, prompt)];
        let mut problem = String::new();
        for attempt in 0..2 {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let outcome = match self.complete(messages.clone()).await? {
                Err(unusable) => Err(unusable),
                Ok(text) => match json_object(&text) {
                    Ok(v) => parse(&v).map_err(|e| (e, text)),
                    Err(e) => Err((e, text)),
                }
                .map_err(|(e, text)| {
                    messages.push(Message::text(Role::Assistant, text));
                    messages.push(Message::text(
                        Role::User,
                        format!("That reply cannot be used: {e}. Reply again with only the JSON object asked for, in the exact shape shown."),
                    ));
                    e
                }),
            };
            match outcome {
                Ok(v) => {
                    metrics::counter!("assist_eval_judgements_total", "outcome" => "ok")
                        .increment(1);
                    return Ok(Judged::Ok(v));
                }
                Err(e) => {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("assist_eval_judge_unusable_replies_total").increment(1);
                    tracing::warn!(judgement = what, attempt = attempt + 1, problem = %e, "unusable judgement");
                    problem = e;
                }
            }
        }
        self.missing.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("assist_eval_judgements_total", "outcome" => "missing").increment(1);
        Ok(Judged::Missing(format!(
            "{what}: judge reply unusable twice ({problem})"
        )))
    }

    /// The whole reply; `Ok(Err(why))` when there is no usable one: a timeout, or the
    /// server refused this request (a prompt longer than its window, say). Failures that
    /// would fail every judgement (unreachable, unknown model, server errors) are `Err`.
    async fn complete(
        &self,
        messages: Vec<Message>,
    ) -> Result<Result<String, String>, UpstreamError> {
        let request = llm::UpstreamRequest {
            model: self.model.clone(),
            input: Input::Chat(messages),
            params: GenParams {
                max_tokens: Some(self.max_tokens),
                temperature: Some(0.0),
                response_format: self
                    .json_mode
                    .then(|| serde_json::json!({"type": "json_object"})),
                ..GenParams::default()
            },
            tools: Vec::new(),
            tool_choice: None,
            whole: false,
            relay: None,
            template_peers: Vec::new(),
        };
        let timed_out = || {
            format!(
                "no complete reply within {} s (judge.timeout_secs)",
                self.timeout.as_secs()
            )
        };
        match tokio::time::timeout(self.timeout, llm::complete(self.chat.as_ref(), request)).await {
            Ok(Ok(text)) => Ok(Ok(text)),
            Ok(Err(e)) => match e.kind {
                UpstreamErrorKind::Timeout => Ok(Err(timed_out())),
                UpstreamErrorKind::Status(400 | 413 | 422) => {
                    Ok(Err(format!("the judge's server refused the request: {e}")))
                }
                _ => Err(e),
            },
            Err(_) => Ok(Err(timed_out())),
        }
    }
}

/// The reply as one JSON object: the whole text, or the whole content of a single
/// ```-fenced block. Anything else around it makes the reply unusable.
pub fn json_object(reply: &str) -> Result<Value, String> {
    let text = reply.trim();
    let body = match text.strip_prefix("```") {
        Some(rest) => {
            let rest = rest.strip_prefix("json").unwrap_or(rest);
            rest.strip_suffix("```")
                .ok_or("an unclosed ``` block")?
                .trim()
        }
        None => text,
    };
    if body.is_empty() {
        return Err("an empty reply".into());
    }
    match serde_json::from_str::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("JSON that is not an object".into()),
        Err(e) => Err(format!("not a JSON object ({e})")),
    }
}

/// `{key: [0|1, …]}` with exactly `count` verdicts.
pub fn verdicts(v: &Value, key: &str, count: usize) -> Result<Vec<bool>, String> {
    let list = v
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no \"{key}\" list"))?;
    if list.len() != count {
        return Err(format!(
            "{} verdicts for {count} items; exactly {count} are needed",
            list.len()
        ));
    }
    list.iter()
        .map(|x| match x.as_u64() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(format!("verdict {x} is not 0 or 1")),
        })
        .collect()
}

/// `{"statements": [text, …]}` (possibly empty).
pub fn statements(v: &Value) -> Result<Vec<String>, String> {
    strings(v, "statements").map(|s| s.into_iter().filter(|s| !s.is_empty()).collect())
}

/// `{"questions": [exactly count texts], "noncommittal": 0|1}`.
pub fn questions(v: &Value, count: usize) -> Result<(Vec<String>, bool), String> {
    let qs = strings(v, "questions")?;
    if qs.len() != count || qs.iter().any(String::is_empty) {
        return Err(format!(
            "{} questions; exactly {count} non-empty ones are needed",
            qs.len()
        ));
    }
    let noncommittal = match v.get("noncommittal").and_then(Value::as_u64) {
        Some(0) => false,
        Some(1) => true,
        _ => return Err("\"noncommittal\" is not 0 or 1".into()),
    };
    Ok((qs, noncommittal))
}

fn strings(v: &Value, key: &str) -> Result<Vec<String>, String> {
    v.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no \"{key}\" list"))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(|s| s.trim().to_string())
                .ok_or_else(|| format!("\"{key}\" holds {s}, not text"))
        })
        .collect()
}

/// Items numbered from 1, one a line, for the prompts.
pub fn numbered(items: &[String]) -> String {
    items
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}. {}", i + 1, s.replace('\n', " ")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_json_object_is_a_reply() {
        assert_eq!(
            json_object(" {\"verdicts\": [1]} \n").unwrap(),
            json!({"verdicts": [1]})
        );
        assert_eq!(
            json_object("```json\n{\"verdicts\": [0]}\n```").unwrap(),
            json!({"verdicts": [0]})
        );
        for bad in [
            "",
            "Sure! {\"verdicts\": [1]}",
            "{\"verdicts\": [1]} hope this helps",
            "[1, 0]",
            "```json\n{\"verdicts\": [1]}",
            "{verdicts: [1]}",
        ] {
            assert!(json_object(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn shapes_are_checked() {
        let v = json!({"verdicts": [1, 0, 1], "reason": "extra keys are ignored"});
        assert_eq!(verdicts(&v, "verdicts", 3).unwrap(), [true, false, true]);
        assert!(verdicts(&v, "verdicts", 2)
            .unwrap_err()
            .contains("exactly 2"));
        assert!(verdicts(&json!({"verdicts": [1, 2]}), "verdicts", 2).is_err());
        assert!(verdicts(&json!({"verdicts": [true]}), "verdicts", 1).is_err());
        assert!(verdicts(&json!({"verdict": [1]}), "verdicts", 1).is_err());
        assert_eq!(
            questions(&json!({"questions": ["a?", "b?"], "noncommittal": 1}), 2).unwrap(),
            (vec!["a?".to_string(), "b?".to_string()], true)
        );
        assert!(questions(&json!({"questions": ["a?"], "noncommittal": 0}), 2).is_err());
        assert!(questions(&json!({"questions": ["a?"]}), 1).is_err());
        assert_eq!(
            statements(&json!({"statements": []})).unwrap(),
            Vec::<String>::new()
        );
        assert!(statements(&json!({"statements": [1]})).is_err());
    }

    #[test]
    fn built_in_templates_carry_their_placeholders() {
        let settings = AssistantSettings {
            model: "brunix".into(),
            passthrough: false,
            system_prompt_file: None,
            prompts_dir: None,
            context_tokens: 8192,
            answer_reserve_tokens: 1024,
            cite_sources: false,
            editor_context: true,
        };
        let p = JudgePrompts::load(&settings).unwrap();
        let want: [(&str, &[&str]); 6] = [
            (&p.statements, &["{question}", "{answer}"]),
            (&p.faithfulness, &["{context}", "{statements}", "{count}"]),
            (&p.relevancy, &["{answer}", "{count}"]),
            (&p.same_question, &["{question}", "{questions}", "{count}"]),
            (
                &p.context_recall,
                &["{question}", "{context}", "{sentences}", "{count}"],
            ),
            (
                &p.context_precision,
                &["{question}", "{ground_truth}", "{passages}", "{count}"],
            ),
        ];
        for (text, names) in want {
            for n in names {
                assert!(text.contains(n), "a judge template lacks {n}");
            }
        }
    }
}

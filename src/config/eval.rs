//! `[judge]` (the model that grades answers) and `[eval]`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    check, check_upstream_url, secs, unset_if_empty, LlmSettings, Provider, SettingsError,
};

/// The model that judges answers in `eval answers` and `POST /v1/eval`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSettings {
    /// Used with `base_url`; an unset `base_url` takes the whole connection from `[llm]`.
    pub provider: Provider,
    #[serde(default, with = "unset_if_empty")]
    pub base_url: Option<String>,
    /// Unset = `llm.model`.
    #[serde(default, with = "unset_if_empty")]
    pub model: Option<String>,
    #[serde(default, with = "unset_if_empty")]
    pub api_key: Option<String>,
    #[serde(rename = "connect_timeout_secs", with = "secs")]
    pub connect_timeout: Duration,
    #[serde(rename = "first_byte_timeout_secs", with = "secs")]
    pub first_byte_timeout: Duration,
    /// Longest one judgement may take, whole answer included.
    #[serde(rename = "timeout_secs", with = "secs")]
    pub timeout: Duration,
    pub max_tokens: u32,
    /// Ask for JSON output (`response_format` / Ollama `format`).
    pub json_mode: bool,
    /// Questions generated from an answer for answer relevancy.
    pub relevancy_questions: usize,
}

impl JudgeSettings {
    /// The connection settings the judge uses: its own, or `[llm]`'s where unset.
    pub fn connection(&self, llm: &LlmSettings) -> LlmSettings {
        let (provider, base_url, api_key) = match &self.base_url {
            Some(url) => (self.provider, url.clone(), self.api_key.clone()),
            None => (llm.provider, llm.base_url.clone(), llm.api_key.clone()),
        };
        LlmSettings {
            provider,
            base_url,
            model: self.model.clone().unwrap_or_else(|| llm.model.clone()),
            api_key,
            connect_timeout: self.connect_timeout,
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.timeout,
            max_answer: self.timeout,
            // One judge, no fallbacks: a judgement from another model would not be
            // comparable. Retries and cooldown as the answering model has them.
            fallbacks: Vec::new(),
            ..llm.clone()
        }
    }
}

/// Answer evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSettings {
    /// Golden dataset `POST /v1/eval` evaluates. Unset = the endpoint is off (503).
    #[serde(default, with = "unset_if_empty")]
    pub dataset: Option<PathBuf>,
    /// `max_tokens` of each evaluated answer; 0 = the assistant's own default.
    pub answer_max_tokens: u32,
    /// Reports of `POST /v1/eval` kept under `data_dir/eval`; older ones are deleted.
    pub keep_reports: usize,
}

impl EvalSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.keep_reports > 0,
            "eval.keep_reports",
            "must be at least 1",
        )
    }
}

impl JudgeSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        if let Some(url) = &self.base_url {
            check_upstream_url("judge.base_url", url)?;
        }
        check(
            !self.connect_timeout.is_zero()
                && !self.first_byte_timeout.is_zero()
                && !self.timeout.is_zero(),
            "judge.connect_timeout_secs / judge.first_byte_timeout_secs / judge.timeout_secs",
            "must be at least 1 second",
        )?;
        check(
            self.max_tokens >= 16,
            "judge.max_tokens",
            "must be at least 16",
        )?;
        check(
            (1..=10).contains(&self.relevancy_questions),
            "judge.relevancy_questions",
            "must be between 1 and 10",
        )
    }
}

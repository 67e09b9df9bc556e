//! `[llm]`: the upstream model, its fallbacks, retries and time limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check, check_upstream_url, millis, secs, unset_if_empty, SettingsError};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    pub provider: Provider,
    pub base_url: String,
    pub model: String,
    #[serde(default, with = "unset_if_empty")]
    pub api_key: Option<String>,
    #[serde(rename = "connect_timeout_secs", with = "secs")]
    pub connect_timeout: Duration,
    #[serde(rename = "first_byte_timeout_secs", with = "secs")]
    pub first_byte_timeout: Duration,
    #[serde(rename = "idle_timeout_secs", with = "secs")]
    pub idle_timeout: Duration,
    /// Upstreams tried, in order, when the primary fails for the assistant's model.
    pub fallbacks: Vec<FallbackSettings>,
    pub retries: u32,
    #[serde(rename = "retry_base_ms", with = "millis")]
    pub retry_base: Duration,
    #[serde(rename = "retry_max_ms", with = "millis")]
    pub retry_max: Duration,
    pub cooldown_failures: u32,
    #[serde(rename = "cooldown_secs", with = "secs")]
    pub cooldown: Duration,
    #[serde(rename = "max_answer_secs", with = "secs")]
    pub max_answer: Duration,
    pub max_chunk_bytes: usize,
    /// Ollama's `keep_alive` for the assistant's requests; unset = not sent (the
    /// upstream's own default), whatever a client asks.
    #[serde(default, with = "unset_if_empty")]
    pub keep_alive: Option<String>,
    /// How the assistant's prompts are measured against the model's window.
    pub tokenizer: Tokenizer,
}

/// `llm.tokenizer`: count with the upstream's own tokenizer when it has one, or only
/// estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tokenizer {
    Upstream,
    Estimate,
}

/// One `[[llm.fallbacks]]` table: another upstream that can answer for the assistant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackSettings {
    pub provider: Provider,
    pub base_url: String,
    pub model: String,
    #[serde(default, with = "unset_if_empty")]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Ollama,
    Openai,
}

impl LlmSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check_upstream_url("llm.base_url", &self.base_url)?;
        check(
            !self.model.trim().is_empty(),
            "llm.model",
            "must not be empty",
        )?;
        check(
            !self.connect_timeout.is_zero()
                && !self.first_byte_timeout.is_zero()
                && !self.idle_timeout.is_zero(),
            "llm.connect_timeout_secs / llm.first_byte_timeout_secs / llm.idle_timeout_secs",
            "must be at least 1 second",
        )?;
        for (i, f) in self.fallbacks.iter().enumerate() {
            check_upstream_url(&format!("llm.fallbacks[{i}].base_url"), &f.base_url)?;
            check(
                !f.model.trim().is_empty(),
                &format!("llm.fallbacks[{i}].model"),
                "must not be empty",
            )?;
        }
        check(self.retries <= 10, "llm.retries", "must be at most 10")?;
        check(
            !self.retry_base.is_zero() && self.retry_max >= self.retry_base,
            "llm.retry_base_ms / llm.retry_max_ms",
            "retry_base_ms must be at least 1 and retry_max_ms at least retry_base_ms",
        )?;
        check(
            self.retry_max <= Duration::from_secs(600),
            "llm.retry_max_ms",
            "must be at most 600000 (10 minutes)",
        )?;
        check(
            self.cooldown_failures == 0 || !self.cooldown.is_zero(),
            "llm.cooldown_secs",
            "must be at least 1 (or set llm.cooldown_failures = 0 to never cool down)",
        )?;
        check(
            !self.max_answer.is_zero(),
            "llm.max_answer_secs",
            "must be at least 1 second",
        )?;
        check(
            self.max_chunk_bytes >= 1024,
            "llm.max_chunk_bytes",
            "must be at least 1024",
        )
    }
}

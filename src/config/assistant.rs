//! What the assistant does with a turn: `[assistant]`, `[context]` (the client's editor
//! context), `[privacy]`, `[completion]` (fill-in-the-middle), `[classifier]` and
//! `[reformulator]`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check, list_or_comma_string, millis, unset_if_empty, SettingsError};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantSettings {
    pub model: String,
    pub passthrough: bool,
    #[serde(default, with = "unset_if_empty")]
    pub system_prompt_file: Option<PathBuf>,
    #[serde(default, with = "unset_if_empty")]
    pub prompts_dir: Option<PathBuf>,
    pub context_tokens: u32,
    pub answer_reserve_tokens: u32,
    pub cite_sources: bool,
    /// false: the editor's context (selection, open file, extra context, items,
    /// diagnostics, edits) is never used.
    pub editor_context: bool,
}

/// What of the client's context a turn may use (`[context]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSettings {
    pub items: bool,
    pub diagnostics: bool,
    pub recent_edits: bool,
    pub max_item_bytes: usize,
    pub max_items_bytes: usize,
    pub max_items: usize,
    pub max_diagnostics: usize,
    pub max_recent_edits: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassifierMode {
    Rules,
    Llm,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierSettings {
    pub mode: ClassifierMode,
    #[serde(rename = "timeout_ms", with = "millis")]
    pub timeout: Duration,
    pub history_messages: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReformulatorMode {
    Off,
    Llm,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReformulatorSettings {
    pub mode: ReformulatorMode,
    #[serde(rename = "timeout_ms", with = "millis")]
    pub timeout: Duration,
}

/// The FIM template families `completion.template` may name.
pub const COMPLETION_TEMPLATES: [&str; 6] = [
    "qwen",
    "codellama",
    "deepseek",
    "starcoder",
    "codestral",
    "codegemma",
];

/// Fill-in-the-middle completion (`[completion]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionSettings {
    /// The upstream model that completes code; empty = `llm.model`.
    pub model: String,
    /// `auto` (from the model's name), a family ([`COMPLETION_TEMPLATES`]), or `none`
    /// (the gateway writes no FIM template: the suffix goes to the upstream as sent).
    pub template: String,
    /// Tokens of repository snippets in a completion prompt (0: none).
    pub context_tokens: usize,
    /// Longest wait for the repository search, in milliseconds.
    pub deadline_ms: u64,
}

/// Secrets and excluded paths (`[privacy]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacySettings {
    pub redact_secrets: bool,
    /// A TOML file of more `[[rule]]`s (see config/secrets.toml).
    #[serde(default, with = "unset_if_empty")]
    pub extra_rules: Option<PathBuf>,
    /// Globs of paths whose editor context and items are never used.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub exclude: Vec<String>,
}

impl ContextSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.max_item_bytes >= 1024,
            "context.max_item_bytes",
            "must be at least 1024",
        )?;
        check(
            self.max_items_bytes >= self.max_item_bytes,
            "context.max_items_bytes",
            "must be at least context.max_item_bytes",
        )
    }
}

impl AssistantSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        let model = self.model.trim();
        check(
            !model.is_empty() && !model.contains(char::is_whitespace),
            "assistant.model",
            "must be a non-empty name without spaces",
        )?;
        check(
            self.context_tokens >= 256,
            "assistant.context_tokens",
            "must be at least 256",
        )?;
        check(
            self.answer_reserve_tokens < self.context_tokens,
            "assistant.answer_reserve_tokens",
            "must be smaller than assistant.context_tokens",
        )
    }
}

impl CompletionSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        let template = self.template.trim().to_ascii_lowercase();
        check(
            matches!(template.as_str(), "" | "auto" | "none")
                || COMPLETION_TEMPLATES.contains(&template.as_str()),
            "completion.template",
            &format!(
                "must be auto, none or one of {}",
                COMPLETION_TEMPLATES.join(", ")
            ),
        )
    }
}

impl ClassifierSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            !self.timeout.is_zero(),
            "classifier.timeout_ms",
            "must be at least 1",
        )
    }
}

impl ReformulatorSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            !self.timeout.is_zero(),
            "reformulator.timeout_ms",
            "must be at least 1",
        )
    }
}

//! Typed settings: the embedded `config/default.toml`, then an optional `--config` file,
//! then environment variables named `ASSIST__SECTION__KEY`.
//!
//! The TOML and environment contract is plain values: `""` means "not set", durations are
//! whole seconds (`*_secs`) or milliseconds (`*_ms`). They are read here, once, into
//! `Option`s and `Duration`s, and each section checks what its types alone cannot.

mod assistant;
mod eval;
mod retrieval;
mod server;
mod sessions;
mod telemetry;
mod upstream;

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use serde::{Deserialize, Deserializer, Serialize};

pub use assistant::{
    AssistantSettings, ClassifierMode, ClassifierSettings, CompletionSettings, ContextSettings,
    PrivacySettings, ReformulatorMode, ReformulatorSettings, COMPLETION_TEMPLATES,
};
pub use eval::{EvalSettings, JudgeSettings};
pub use retrieval::{
    EmbeddingProvider, EmbeddingSettings, IngestSettings, KnowledgeSettings, LanguageWeights,
    QdrantSettings, RetrievalSettings, DEFAULT_EMBEDDING_MODEL,
};
pub use server::{ApiKey, GrpcSettings, LogFormat, LogSettings, ServerSettings};
pub use sessions::{SessionBackend, SessionSettings};
pub use telemetry::{OtlpProtocol, TelemetrySettings};
pub use upstream::{FallbackSettings, LlmSettings, Provider, Tokenizer};

/// The defaults, compiled in so the binary runs from any directory.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub server: ServerSettings,
    pub grpc: GrpcSettings,
    pub log: LogSettings,
    pub telemetry: TelemetrySettings,
    pub assistant: AssistantSettings,
    pub context: ContextSettings,
    pub privacy: PrivacySettings,
    pub completion: CompletionSettings,
    pub classifier: ClassifierSettings,
    pub reformulator: ReformulatorSettings,
    pub sessions: SessionSettings,
    pub llm: LlmSettings,
    pub embeddings: EmbeddingSettings,
    pub qdrant: QdrantSettings,
    pub retrieval: RetrievalSettings,
    pub ingest: IngestSettings,
    pub knowledge: KnowledgeSettings,
    pub judge: JudgeSettings,
    pub eval: EvalSettings,
}

/// A setting that cannot be used, with the key it belongs to.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting {key}: {reason}")]
pub struct SettingsError {
    pub key: String,
    pub reason: String,
}

impl SettingsError {
    pub fn new(key: &str, reason: impl Into<String>) -> Self {
        Self {
            key: key.to_string(),
            reason: reason.into(),
        }
    }
}

/// Whether `addr` reads as host:port.
fn is_host_port(addr: &str) -> bool {
    matches!(addr.rsplit_once(':'),
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok())
}

/// `Err` naming `key` unless `ok`.
fn check(ok: bool, key: &str, reason: &str) -> Result<(), SettingsError> {
    if ok {
        Ok(())
    } else {
        Err(SettingsError::new(key, reason))
    }
}

impl Settings {
    /// Defaults < `file` < environment (`ASSIST__SECTION__KEY`).
    pub fn load(file: Option<&Path>) -> Result<Self, SettingsError> {
        Self::load_with_env(file, Env::prefixed("ASSIST__").split("__"))
    }

    /// Defaults < `file`, ignoring the environment (tests, tools).
    pub fn load_without_env(file: Option<&Path>) -> Result<Self, SettingsError> {
        Self::load_with_env(file, Env::prefixed("ASSIST_UNUSED_NEVER_SET__"))
    }

    fn load_with_env(file: Option<&Path>, env: Env) -> Result<Self, SettingsError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(SettingsError::new(
                    "--config",
                    format!("file {} does not exist", path.display()),
                ));
            }
            figment = figment.merge(Toml::file(path));
        }
        let mut settings: Settings = figment.merge(env).extract().map_err(|e| {
            let key = if e.path.is_empty() {
                "(file)".to_string()
            } else {
                e.path.join(".")
            };
            SettingsError::new(&key, e.kind.to_string())
        })?;
        settings.server.read_keys_file()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Where `ingest` writes and the gateway reads the knowledge indexes.
    pub fn index_dir(&self) -> PathBuf {
        self.data_dir.join("index")
    }

    /// Checks what types alone cannot, section by section, naming the key at fault.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.server.validate()?;
        self.grpc.validate()?;
        self.telemetry.validate()?;
        self.assistant.validate()?;
        self.context.validate()?;
        self.completion.validate()?;
        self.classifier.validate()?;
        self.reformulator.validate()?;
        self.sessions.validate()?;
        self.llm.validate()?;
        self.embeddings.validate()?;
        self.qdrant.validate()?;
        self.retrieval.validate()?;
        self.ingest.validate()?;
        self.knowledge.validate()?;
        self.judge.validate()?;
        self.eval.validate()
    }
}

/// An upstream root: an http or https URL.
fn check_upstream_url(key: &str, value: &str) -> Result<(), SettingsError> {
    match reqwest::Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(()),
        Ok(url) => Err(SettingsError::new(
            key,
            format!("scheme '{}' is not http or https", url.scheme()),
        )),
        Err(e) => Err(SettingsError::new(
            key,
            format!("'{value}' is not a URL: {e}"),
        )),
    }
}

/// Accepts `["a", "b"]` (TOML) as well as `"a,b"` (environment variables).
fn list_or_comma_string<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrString {
        List(Vec<String>),
        Str(String),
    }
    Ok(match ListOrString::deserialize(d)? {
        ListOrString::List(v) => v,
        ListOrString::Str(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
    })
}

/// A text setting where `""` (or only spaces) means "not set"; a set value is trimmed.
mod unset_if_empty {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: From<String>,
    {
        let text = Option::<String>::deserialize(d)?;
        Ok(text
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .map(T::from))
    }

    pub fn serialize<S, T>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
        T: AsRef<std::ffi::OsStr>,
    {
        let text = value
            .as_ref()
            .map(|v| v.as_ref().to_string_lossy().into_owned());
        s.serialize_str(text.as_deref().unwrap_or(""))
    }
}

/// The longest duration a setting takes: ten years. Any wait is counted from now, and a
/// longer one (`u64::MAX` seconds meant as "never") would overflow the clock's arithmetic.
const MAX_DURATION_SECS: u64 = 10 * 365 * 86_400;

/// A duration of at most [`MAX_DURATION_SECS`], or a clear error naming the limit.
fn bounded<E: serde::de::Error>(d: std::time::Duration) -> Result<std::time::Duration, E> {
    if d.as_secs() > MAX_DURATION_SECS {
        return Err(E::custom(format_args!(
            "a duration must be at most {MAX_DURATION_SECS} seconds (ten years)"
        )));
    }
    Ok(d)
}

/// A duration written as whole seconds.
mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        super::bounded(Duration::from_secs(u64::deserialize(d)?))
    }

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(value.as_secs())
    }
}

/// A duration written as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        super::bounded(Duration::from_millis(u64::deserialize(d)?))
    }

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests;

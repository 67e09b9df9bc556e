//! Typed settings: the embedded `config/default.toml`, then an optional `--config` file,
//! then environment variables named `ASSIST__SECTION__KEY`.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use serde::{Deserialize, Deserializer, Serialize};

/// The defaults, compiled in so the binary runs from any directory.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub server: ServerSettings,
    pub log: LogSettings,
    pub assistant: AssistantSettings,
    pub classifier: ClassifierSettings,
    pub reformulator: ReformulatorSettings,
    pub sessions: SessionSettings,
    pub llm: LlmSettings,
    pub embeddings: EmbeddingSettings,
    pub qdrant: QdrantSettings,
    pub retrieval: RetrievalSettings,
    pub ingest: IngestSettings,
    pub judge: JudgeSettings,
    pub eval: EvalSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub addr: String,
    #[serde(deserialize_with = "list_or_comma_string")]
    pub api_keys: Vec<String>,
    /// A file with more keys, one a line (`#` comments and blank lines ignored), read at
    /// start-up and added to `api_keys`.
    pub api_keys_file: String,
    #[serde(deserialize_with = "list_or_comma_string")]
    pub cors_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub max_messages: usize,
    pub max_message_chars: usize,
    /// Most texts one embedding request may carry.
    pub max_embedding_inputs: usize,
    pub shutdown_grace_secs: u64,
    pub ollama_version: String,
    /// Requests per minute per API key (per client IP without keys); 0 = no limit.
    pub rate_limit_per_minute: u32,
    /// Streamed answers open at once per API key (per client IP without keys); 0 = no limit.
    pub max_streams_per_key: u32,
    /// PEM certificate chain and private key: both set = HTTPS (HTTP/1.1 and HTTP/2).
    pub tls_cert: String,
    pub tls_key: String,
    /// A connection must deliver a request's headers (and a TLS handshake) within this.
    pub header_read_timeout_secs: u64,
    /// A request's body must arrive within this; slower → 408.
    pub body_read_timeout_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub level: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantSettings {
    pub model: String,
    pub passthrough: bool,
    pub system_prompt_file: String,
    pub prompts_dir: String,
    pub context_tokens: u32,
    pub answer_reserve_tokens: u32,
    pub cite_sources: bool,
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
    pub timeout_ms: u64,
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
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionBackend {
    Embedded,
    Redis,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSettings {
    pub backend: SessionBackend,
    pub redis_url: String,
    pub redis_prefix: String,
    pub window_turns: usize,
    pub max_turns: usize,
    pub ttl_secs: u64,
    pub max_sessions: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    pub provider: Provider,
    pub base_url: String,
    pub model: String,
    pub api_key: String,
    pub connect_timeout_secs: u64,
    pub first_byte_timeout_secs: u64,
    pub idle_timeout_secs: u64,
    /// Upstreams tried, in order, when the primary fails for the assistant's model.
    pub fallbacks: Vec<FallbackSettings>,
    pub retries: u32,
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    pub cooldown_failures: u32,
    pub cooldown_secs: u64,
    pub max_answer_secs: u64,
    pub max_chunk_bytes: usize,
}

/// One `[[llm.fallbacks]]` table: another upstream that can answer for the assistant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackSettings {
    pub provider: Provider,
    pub base_url: String,
    pub model: String,
    #[serde(default)]
    pub api_key: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingSettings {
    pub provider: EmbeddingProvider,
    pub base_url: String,
    pub model: String,
    pub path: String,
    pub api_key: String,
    pub batch_size: usize,
    #[serde(deserialize_with = "list_or_comma_string")]
    pub languages: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingProvider {
    None,
    Local,
    Ollama,
    Openai,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QdrantSettings {
    pub url: String,
    pub collection: String,
    pub api_key: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalSettings {
    pub top_k: usize,
    pub rrf_k: f32,
    pub candidates: usize,
    pub bm25_weight: f32,
    pub dense_weight: f32,
    pub foreign_dense_weight: f32,
    pub spec_boost: f32,
    pub narrative_boost: f32,
    pub code_example_boost: f32,
    pub code_boost: f32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSettings {
    pub chunk_chars: usize,
    pub overlap_chars: usize,
    pub max_file_bytes: u64,
}

/// The model that judges answers in `eval answers` and `POST /v1/eval`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSettings {
    /// Used with `base_url`; an empty `base_url` takes the whole connection from `[llm]`.
    pub provider: Provider,
    pub base_url: String,
    /// Empty = `llm.model`.
    pub model: String,
    pub api_key: String,
    pub connect_timeout_secs: u64,
    pub first_byte_timeout_secs: u64,
    /// Longest one judgement may take, whole answer included.
    pub timeout_secs: u64,
    pub max_tokens: u32,
    /// Ask for JSON output (`response_format` / Ollama `format`).
    pub json_mode: bool,
    /// Questions generated from an answer for answer relevancy.
    pub relevancy_questions: usize,
}

impl JudgeSettings {
    /// The connection settings the judge uses: its own, or `[llm]`'s where left empty.
    pub fn connection(&self, llm: &LlmSettings) -> LlmSettings {
        let own_server = !self.base_url.trim().is_empty();
        LlmSettings {
            provider: if own_server {
                self.provider
            } else {
                llm.provider
            },
            base_url: if own_server {
                self.base_url.clone()
            } else {
                llm.base_url.clone()
            },
            model: if self.model.trim().is_empty() {
                llm.model.clone()
            } else {
                self.model.clone()
            },
            api_key: if own_server {
                self.api_key.clone()
            } else {
                llm.api_key.clone()
            },
            connect_timeout_secs: self.connect_timeout_secs,
            first_byte_timeout_secs: self.first_byte_timeout_secs,
            idle_timeout_secs: self.timeout_secs,
            max_answer_secs: self.timeout_secs,
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
    /// Golden dataset `POST /v1/eval` evaluates. Empty = the endpoint is off (503).
    pub dataset: String,
    /// `max_tokens` of each evaluated answer; 0 = the assistant's own default.
    pub answer_max_tokens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Ollama,
    Openai,
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
        settings.read_keys_file()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Adds the keys of `server.api_keys_file` to `server.api_keys`.
    fn read_keys_file(&mut self) -> Result<(), SettingsError> {
        let path = self.server.api_keys_file.trim();
        if path.is_empty() {
            return Ok(());
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| SettingsError::new("server.api_keys_file", format!("{path}: {e}")))?;
        let keys: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect();
        if keys.is_empty() {
            return Err(SettingsError::new(
                "server.api_keys_file",
                format!("{path} has no keys"),
            ));
        }
        self.server.api_keys.extend(keys);
        Ok(())
    }

    /// Checks what types alone cannot, naming the key at fault.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let addr = &self.server.addr;
        match addr.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => {
                return Err(SettingsError::new(
                    "server.addr",
                    format!("'{addr}' is not host:port"),
                ))
            }
        }
        if self.server.max_messages == 0
            || self.server.max_message_chars == 0
            || self.server.max_embedding_inputs == 0
        {
            return Err(SettingsError::new(
                "server.max_messages / server.max_message_chars / server.max_embedding_inputs",
                "must be at least 1",
            ));
        }
        if self.server.max_body_bytes < 1024 {
            return Err(SettingsError::new(
                "server.max_body_bytes",
                "must be at least 1024",
            ));
        }
        if self.server.tls_cert.trim().is_empty() != self.server.tls_key.trim().is_empty() {
            return Err(SettingsError::new(
                "server.tls_cert / server.tls_key",
                "set both (PEM files) for HTTPS, or neither for plain HTTP",
            ));
        }
        for (key, path) in [
            ("server.tls_cert", &self.server.tls_cert),
            ("server.tls_key", &self.server.tls_key),
        ] {
            if !path.trim().is_empty() && !Path::new(path.trim()).is_file() {
                return Err(SettingsError::new(
                    key,
                    format!("file {path} does not exist"),
                ));
            }
        }
        if self.server.header_read_timeout_secs == 0 || self.server.body_read_timeout_secs == 0 {
            return Err(SettingsError::new(
                "server.header_read_timeout_secs / server.body_read_timeout_secs",
                "must be at least 1 second",
            ));
        }
        if self.server.api_keys.iter().any(|k| k.trim().is_empty()) {
            return Err(SettingsError::new(
                "server.api_keys",
                "keys must not be empty",
            ));
        }
        for origin in &self.server.cors_origins {
            let ok = origin == "*"
                || (origin.starts_with("http://") || origin.starts_with("https://"))
                    && axum::http::HeaderValue::from_str(origin).is_ok()
                    && !origin.ends_with('/');
            if !ok {
                return Err(SettingsError::new(
                    "server.cors_origins",
                    format!("'{origin}' is not \"*\" or an origin like https://chat.example.com"),
                ));
            }
        }
        let model = self.assistant.model.trim();
        if model.is_empty() || model.contains(char::is_whitespace) {
            return Err(SettingsError::new(
                "assistant.model",
                "must be a non-empty name without spaces",
            ));
        }
        if self.assistant.context_tokens < 256 {
            return Err(SettingsError::new(
                "assistant.context_tokens",
                "must be at least 256",
            ));
        }
        match reqwest::Url::parse(&self.llm.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(url) => {
                return Err(SettingsError::new(
                    "llm.base_url",
                    format!("scheme '{}' is not http or https", url.scheme()),
                ))
            }
            Err(e) => {
                return Err(SettingsError::new(
                    "llm.base_url",
                    format!("'{}' is not a URL: {e}", self.llm.base_url),
                ))
            }
        }
        if self.llm.model.trim().is_empty() {
            return Err(SettingsError::new("llm.model", "must not be empty"));
        }
        self.validate_resilience()?;
        if self.embeddings.provider == EmbeddingProvider::Local
            && self.embeddings.path.trim().is_empty()
        {
            return Err(SettingsError::new(
                "embeddings.path",
                "the local embedder needs the model folder",
            ));
        }
        if self.qdrant.collection.trim().is_empty() {
            return Err(SettingsError::new("qdrant.collection", "must not be empty"));
        }
        if self.embeddings.batch_size == 0 {
            return Err(SettingsError::new(
                "embeddings.batch_size",
                "must be at least 1",
            ));
        }
        let r = &self.retrieval;
        if r.top_k == 0 || r.candidates < r.top_k {
            return Err(SettingsError::new(
                "retrieval.top_k / retrieval.candidates",
                "top_k must be at least 1 and candidates at least top_k",
            ));
        }
        if r.rrf_k <= 0.0 {
            return Err(SettingsError::new("retrieval.rrf_k", "must be positive"));
        }
        let weights = [
            ("retrieval.bm25_weight", r.bm25_weight),
            ("retrieval.dense_weight", r.dense_weight),
            ("retrieval.foreign_dense_weight", r.foreign_dense_weight),
            ("retrieval.spec_boost", r.spec_boost),
            ("retrieval.narrative_boost", r.narrative_boost),
            ("retrieval.code_example_boost", r.code_example_boost),
            ("retrieval.code_boost", r.code_boost),
        ];
        if let Some((key, _)) = weights.iter().find(|(_, w)| !w.is_finite() || *w < 0.0) {
            return Err(SettingsError::new(key, "must be a number ≥ 0"));
        }
        if self.ingest.chunk_chars < 200 || self.ingest.overlap_chars >= self.ingest.chunk_chars {
            return Err(SettingsError::new(
                "ingest.chunk_chars / ingest.overlap_chars",
                "chunk_chars must be at least 200 and larger than overlap_chars",
            ));
        }
        if self.assistant.answer_reserve_tokens >= self.assistant.context_tokens {
            return Err(SettingsError::new(
                "assistant.answer_reserve_tokens",
                "must be smaller than assistant.context_tokens",
            ));
        }
        if self.classifier.timeout_ms == 0 || self.reformulator.timeout_ms == 0 {
            return Err(SettingsError::new(
                "classifier.timeout_ms / reformulator.timeout_ms",
                "must be at least 1",
            ));
        }
        let sessions = &self.sessions;
        if sessions.max_turns == 0 || sessions.window_turns > sessions.max_turns {
            return Err(SettingsError::new(
                "sessions.window_turns / sessions.max_turns",
                "max_turns must be at least 1 and at least window_turns",
            ));
        }
        if sessions.max_sessions == 0 || sessions.ttl_secs == 0 {
            return Err(SettingsError::new(
                "sessions.max_sessions / sessions.ttl_secs",
                "must be at least 1",
            ));
        }
        if sessions.backend == SessionBackend::Redis && sessions.redis_url.trim().is_empty() {
            return Err(SettingsError::new(
                "sessions.redis_url",
                "the redis backend needs a URL, e.g. redis://127.0.0.1:6379",
            ));
        }
        if self.llm.connect_timeout_secs == 0
            || self.llm.first_byte_timeout_secs == 0
            || self.llm.idle_timeout_secs == 0
        {
            return Err(SettingsError::new(
                "llm.connect_timeout_secs / llm.first_byte_timeout_secs / llm.idle_timeout_secs",
                "must be at least 1 second",
            ));
        }
        let judge = &self.judge;
        if !judge.base_url.trim().is_empty() {
            match reqwest::Url::parse(&judge.base_url) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {}
                _ => {
                    return Err(SettingsError::new(
                        "judge.base_url",
                        format!(
                            "'{}' is not an http(s) URL (empty = llm.base_url)",
                            judge.base_url
                        ),
                    ))
                }
            }
        }
        if judge.connect_timeout_secs == 0
            || judge.first_byte_timeout_secs == 0
            || judge.timeout_secs == 0
        {
            return Err(SettingsError::new(
                "judge.connect_timeout_secs / judge.first_byte_timeout_secs / judge.timeout_secs",
                "must be at least 1 second",
            ));
        }
        if judge.max_tokens < 16 {
            return Err(SettingsError::new(
                "judge.max_tokens",
                "must be at least 16",
            ));
        }
        if !(1..=10).contains(&judge.relevancy_questions) {
            return Err(SettingsError::new(
                "judge.relevancy_questions",
                "must be between 1 and 10",
            ));
        }
        Ok(())
    }
}

impl Settings {
    /// Fallback upstreams, retries, cooldown and the answer bounds.
    fn validate_resilience(&self) -> Result<(), SettingsError> {
        let llm = &self.llm;
        for (i, f) in llm.fallbacks.iter().enumerate() {
            check_upstream_url(&format!("llm.fallbacks[{i}].base_url"), &f.base_url)?;
            if f.model.trim().is_empty() {
                return Err(SettingsError::new(
                    &format!("llm.fallbacks[{i}].model"),
                    "must not be empty",
                ));
            }
        }
        if llm.retries > 10 {
            return Err(SettingsError::new("llm.retries", "must be at most 10"));
        }
        if llm.retry_base_ms == 0 || llm.retry_max_ms < llm.retry_base_ms {
            return Err(SettingsError::new(
                "llm.retry_base_ms / llm.retry_max_ms",
                "retry_base_ms must be at least 1 and retry_max_ms at least retry_base_ms",
            ));
        }
        if llm.retry_max_ms > 600_000 {
            return Err(SettingsError::new(
                "llm.retry_max_ms",
                "must be at most 600000 (10 minutes)",
            ));
        }
        if llm.cooldown_failures > 0 && llm.cooldown_secs == 0 {
            return Err(SettingsError::new(
                "llm.cooldown_secs",
                "must be at least 1 (or set llm.cooldown_failures = 0 to never cool down)",
            ));
        }
        if llm.max_answer_secs == 0 {
            return Err(SettingsError::new(
                "llm.max_answer_secs",
                "must be at least 1 second",
            ));
        }
        if llm.max_chunk_bytes < 1024 {
            return Err(SettingsError::new(
                "llm.max_chunk_bytes",
                "must be at least 1024",
            ));
        }
        Ok(())
    }
}

/// An upstream root: an http or https URL (as `llm.base_url` is checked above).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(toml: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), toml).unwrap();
        f
    }

    #[test]
    fn embedded_defaults_are_valid() {
        let s = Settings::load_without_env(None).unwrap();
        assert_eq!(s.server.addr, "127.0.0.1:8080");
        assert_eq!(s.assistant.model, "brunix");
        assert_eq!(s.llm.provider, Provider::Ollama);
        assert!(s.server.api_keys.is_empty());
        assert_eq!(s.classifier.mode, ClassifierMode::Rules);
        assert_eq!(s.reformulator.mode, ReformulatorMode::Off);
        assert_eq!(s.sessions.backend, SessionBackend::Embedded);
        assert!(s.sessions.window_turns <= s.sessions.max_turns);
    }

    #[test]
    fn file_overrides_only_the_keys_it_sets() {
        let f = write("[llm]\nprovider = \"openai\"\nbase_url = \"http://h:1/v1\"\n");
        let s = Settings::load_without_env(Some(f.path())).unwrap();
        assert_eq!(s.llm.provider, Provider::Openai);
        assert_eq!(s.llm.base_url, "http://h:1/v1");
        assert_eq!(s.server.addr, "127.0.0.1:8080");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
    fn environment_overrides_file() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", "[server]\naddr = \"127.0.0.1:9000\"\n")?;
            jail.set_env("ASSIST__SERVER__ADDR", "0.0.0.0:7000");
            jail.set_env("ASSIST__SERVER__API_KEYS", "k1, k2");
            jail.set_env("ASSIST__DATA_DIR", "/tmp/x");
            let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
            assert_eq!(s.server.addr, "0.0.0.0:7000");
            assert_eq!(s.server.api_keys, vec!["k1", "k2"]);
            assert_eq!(s.data_dir, PathBuf::from("/tmp/x"));
            Ok(())
        });
    }

    #[test]
    fn api_keys_come_from_the_list_and_the_file() {
        let keys = write("# team keys\nkey-one\n\n  key-two  \n");
        let f = write(&format!(
            "[server]\napi_keys = [\"inline\"]\napi_keys_file = \"{}\"\n",
            keys.path().display()
        ));
        let s = Settings::load_without_env(Some(f.path())).unwrap();
        assert_eq!(s.server.api_keys, ["inline", "key-one", "key-two"]);
        let f = write("[server]\napi_keys_file = \"/nonexistent/keys\"\n");
        let e = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert_eq!(e.key, "server.api_keys_file");
    }

    #[test]
    fn cors_origins_are_checked() {
        let f = write("[server]\ncors_origins = [\"chat.example.com\"]\n");
        let e = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert_eq!(e.key, "server.cors_origins");
        let f = write("[server]\ncors_origins = [\"*\", \"http://localhost:3000\"]\n");
        assert_eq!(
            Settings::load_without_env(Some(f.path()))
                .unwrap()
                .server
                .cors_origins
                .len(),
            2
        );
    }

    #[test]
    fn tls_needs_both_files() {
        let cert = write("not checked here");
        let f = write(&format!(
            "[server]\ntls_cert = \"{}\"\n",
            cert.path().display()
        ));
        let e = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert_eq!(e.key, "server.tls_cert / server.tls_key");
        let f = write(
            "[server]\ntls_cert = \"/nonexistent/c.pem\"\ntls_key = \"/nonexistent/k.pem\"\n",
        );
        let e = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert_eq!(e.key, "server.tls_cert");
        let s = Settings::load_without_env(None).unwrap();
        assert_eq!(
            s.server.rate_limit_per_minute, 0,
            "limits are off by default"
        );
        assert_eq!(s.server.max_streams_per_key, 0);
        assert!(s.server.tls_cert.is_empty());
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("[llm]\nprovider = \"bedrock\"\n", "llm.provider"),
            ("[server]\naddr = \"nonsense\"\n", "server.addr"),
            (
                "[server]\nmax_body_bytes = \"big\"\n",
                "server.max_body_bytes",
            ),
            ("[llm]\nbase_url = \"ftp://x\"\n", "llm.base_url"),
            ("[llm]\nmodle = \"x\"\n", "llm"),
            ("[assistant]\nmodel = \"\"\n", "assistant.model"),
        ];
        for (toml, key) in cases {
            let f = write(toml);
            let err = Settings::load_without_env(Some(f.path())).unwrap_err();
            assert!(
                err.to_string().contains(key),
                "{toml:?}: error '{err}' does not name {key}"
            );
        }
    }

    #[test]
    fn fallbacks_and_retries_are_read_and_checked() {
        let f = write(
            "[llm]\nretries = 1\n\n[[llm.fallbacks]]\nprovider = \"openai\"\nbase_url = \"http://b:1/v1\"\nmodel = \"m2\"\n",
        );
        let s = Settings::load_without_env(Some(f.path())).unwrap();
        assert_eq!(s.llm.retries, 1);
        assert_eq!(s.llm.fallbacks.len(), 1);
        assert_eq!(s.llm.fallbacks[0].provider, Provider::Openai);
        assert_eq!(s.llm.fallbacks[0].api_key, "");
        let cases = [
            (
                "[[llm.fallbacks]]\nprovider = \"openai\"\nbase_url = \"ftp://b\"\nmodel = \"m\"\n",
                "llm.fallbacks[0].base_url",
            ),
            (
                "[[llm.fallbacks]]\nprovider = \"ollama\"\nbase_url = \"http://b\"\nmodel = \" \"\n",
                "llm.fallbacks[0].model",
            ),
            (
                "[[llm.fallbacks]]\nprovider = \"ollama\"\nbase_url = \"http://b\"\nmodle = \"m\"\n",
                "llm.fallbacks",
            ),
            ("[llm]\nretry_max_ms = 10\n", "llm.retry_base_ms / llm.retry_max_ms"),
            ("[llm]\nretries = 99\n", "llm.retries"),
            ("[llm]\nmax_answer_secs = 0\n", "llm.max_answer_secs"),
            ("[llm]\nmax_chunk_bytes = 10\n", "llm.max_chunk_bytes"),
            ("[llm]\ncooldown_secs = 0\n", "llm.cooldown_secs"),
        ];
        for (toml, key) in cases {
            let err = Settings::load_without_env(Some(write(toml).path())).unwrap_err();
            assert!(
                err.to_string().contains(key),
                "{toml:?}: error '{err}' does not name {key}"
            );
        }
    }

    #[test]
    fn the_judge_falls_back_to_the_llm_section() {
        let s = Settings::load_without_env(None).unwrap();
        let c = s.judge.connection(&s.llm);
        assert_eq!(
            (c.provider, c.base_url.as_str(), c.model.as_str()),
            (
                s.llm.provider,
                s.llm.base_url.as_str(),
                s.llm.model.as_str()
            )
        );
        let f = write(
            "[judge]\nprovider = \"openai\"\nbase_url = \"http://j:1/v1\"\nmodel = \"big\"\napi_key = \"k\"\n",
        );
        let s = Settings::load_without_env(Some(f.path())).unwrap();
        let c = s.judge.connection(&s.llm);
        assert_eq!(c.provider, Provider::Openai);
        assert_eq!(
            (c.base_url.as_str(), c.model.as_str(), c.api_key.as_str()),
            ("http://j:1/v1", "big", "k")
        );
        for (toml, key) in [
            ("[judge]\nbase_url = \"ftp://x\"\n", "judge.base_url"),
            (
                "[judge]\nrelevancy_questions = 0\n",
                "judge.relevancy_questions",
            ),
            ("[eval]\ndatset = \"x\"\n", "eval"),
        ] {
            let err = Settings::load_without_env(Some(write(toml).path())).unwrap_err();
            assert!(err.to_string().contains(key), "{toml:?}: {err}");
        }
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let err = Settings::load_without_env(Some(Path::new("/nonexistent/x.toml"))).unwrap_err();
        assert!(err.to_string().contains("does not exist"));
    }
}

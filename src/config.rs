//! Typed settings: the embedded `config/default.toml`, then an optional `--config` file,
//! then environment variables named `ASSIST__SECTION__KEY`.
//!
//! The TOML and environment contract is plain values: `""` means "not set", durations are
//! whole seconds (`*_secs`) or milliseconds (`*_ms`). They are read here, once, into
//! `Option`s and `Duration`s, and each section checks what its types alone cannot.

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    pub judge: JudgeSettings,
    pub eval: EvalSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub addr: String,
    #[serde(deserialize_with = "api_key_list")]
    pub api_keys: Vec<ApiKey>,
    /// A file with more keys, one a line (`key`, or `name key`; `#` comments and blank
    /// lines ignored), read at start-up and added to `api_keys`.
    #[serde(default, with = "unset_if_empty")]
    pub api_keys_file: Option<PathBuf>,
    #[serde(deserialize_with = "list_or_comma_string")]
    pub cors_origins: Vec<String>,
    /// Host names (or addresses) requests may be addressed to, besides the localhost
    /// names and the bound address.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    pub max_messages: usize,
    pub max_message_chars: usize,
    /// Most texts one embedding request may carry.
    pub max_embedding_inputs: usize,
    /// Embedding requests served at once; more → 429.
    pub max_concurrent_embeddings: usize,
    #[serde(rename = "shutdown_grace_secs", with = "secs")]
    pub shutdown_grace: Duration,
    pub ollama_version: String,
    /// Requests per minute per API key (per client IP without keys); 0 = no limit.
    pub rate_limit_per_minute: u32,
    /// Streamed answers open at once per API key (per client IP without keys); 0 = no limit.
    pub max_streams_per_key: u32,
    /// PEM certificate chain and private key: both set = HTTPS (HTTP/1.1 and HTTP/2).
    #[serde(default, with = "unset_if_empty")]
    pub tls_cert: Option<PathBuf>,
    #[serde(default, with = "unset_if_empty")]
    pub tls_key: Option<PathBuf>,
    /// A connection must deliver a request's headers (and a TLS handshake) within this.
    #[serde(rename = "header_read_timeout_secs", with = "secs")]
    pub header_read_timeout: Duration,
    /// A request's body must arrive within this; slower → 408.
    #[serde(rename = "body_read_timeout_secs", with = "secs")]
    pub body_read_timeout: Duration,
    /// A client must take each part of a streamed answer within this, or the stream ends.
    #[serde(rename = "write_timeout_secs", with = "secs")]
    pub write_timeout: Duration,
    /// A connection (HTTP/1.1 or HTTP/2) with no request in flight this long is closed.
    #[serde(rename = "idle_timeout_secs", with = "secs")]
    pub idle_timeout: Duration,
    /// Most connections open at once per listener (HTTP, gRPC); one more evicts the
    /// connection idle longest, or is refused when all are busy.
    pub max_connections: usize,
    /// Request headers that name the conversation when the body has no `session_id`
    /// (the first one present counts), e.g. Open WebUI's `X-OpenWebUI-Chat-Id`.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub session_headers: Vec<String>,
    /// The gateway's address as clients' users reach it (`https://gw.example.com`), for
    /// the links of cited sources; empty = the request's own scheme and `Host`.
    #[serde(default, with = "unset_if_empty")]
    pub public_url: Option<String>,
}

/// One accepted API key: the secret, the name it is counted and reported under (never
/// the secret), and its own limits. In TOML a plain string or a table
/// `{ name, key, tokens_per_day, requests_per_minute }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ApiKeyEntry")]
pub struct ApiKey {
    /// Its name in usage reports and metrics; `None`: `key-` and the start of the key's
    /// SHA-256 digest (see `serve::access`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub key: String,
    /// Prompt and answer tokens the key may use per UTC day; 0 = no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens_per_day: u64,
    /// Answers the key may ask for per minute, counted across replicas; 0 = no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requests_per_minute: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ApiKeyEntry {
    Plain(String),
    Named(NamedKey),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedKey {
    #[serde(default)]
    name: Option<String>,
    key: String,
    #[serde(default)]
    tokens_per_day: u64,
    #[serde(default)]
    requests_per_minute: u64,
}

impl From<ApiKeyEntry> for ApiKey {
    fn from(entry: ApiKeyEntry) -> Self {
        match entry {
            ApiKeyEntry::Plain(key) => key.into(),
            ApiKeyEntry::Named(k) => Self {
                name: k.name.map(|n| n.trim().to_string()),
                key: k.key,
                tokens_per_day: k.tokens_per_day,
                requests_per_minute: k.requests_per_minute,
            },
        }
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self {
            name: None,
            key,
            tokens_per_day: 0,
            requests_per_minute: 0,
        }
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        key.to_string().into()
    }
}

impl PartialEq<&str> for ApiKey {
    fn eq(&self, other: &&str) -> bool {
        self.name.is_none() && self.key == *other
    }
}

/// `api_keys`: a list of plain keys and `{ name, key, … }` tables, or (from the
/// environment) one comma-separated string of plain keys.
fn api_key_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ApiKey>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrString {
        List(Vec<ApiKey>),
        Str(String),
    }
    Ok(match ListOrString::deserialize(d)? {
        ListOrString::List(v) => v,
        ListOrString::Str(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(ApiKey::from)
            .collect(),
    })
}

/// Traces over OTLP (OpenTelemetry): one trace per request, a span per stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// Where traces go: an OTLP/HTTP traces URL (`http://collector:4318/v1/traces`, used
    /// as it is) or, with `otlp_protocol = "grpc"`, an OTLP/gRPC address
    /// (`http://collector:4317`). `None`: no traces.
    #[serde(default, with = "unset_if_empty")]
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: OtlpProtocol,
    /// Headers sent with every export (a collector's or Langfuse's `Authorization`).
    #[serde(default)]
    pub otlp_headers: std::collections::BTreeMap<String, String>,
    /// Messages, prompts, answers and chunk texts on the spans (redacted); off: sizes,
    /// ids, scores and decisions only.
    pub capture_content: bool,
    /// `service.name` of the traces.
    pub service_name: String,
    /// Finished spans waiting for export; more are dropped (never waited for).
    pub max_queue_spans: usize,
    /// How often the queue is exported.
    #[serde(rename = "export_delay_ms", with = "millis")]
    pub export_delay: Duration,
    /// Longest one export may take.
    #[serde(rename = "export_timeout_secs", with = "secs")]
    pub export_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies.
    Http,
    /// OTLP/gRPC.
    Grpc,
}

impl TelemetrySettings {
    fn validate(&self) -> Result<(), SettingsError> {
        if let Some(url) = &self.otlp_endpoint {
            check(
                url.starts_with("http://") || url.starts_with("https://"),
                "telemetry.otlp_endpoint",
                "must be an http:// or https:// URL (e.g. http://127.0.0.1:4318/v1/traces)",
            )?;
        }
        for (name, value) in &self.otlp_headers {
            check(
                axum::http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                    && axum::http::HeaderValue::from_str(value).is_ok(),
                "telemetry.otlp_headers",
                "each entry must be a valid HTTP header name and value",
            )?;
        }
        check(
            self.max_queue_spans >= 64,
            "telemetry.max_queue_spans",
            "must be at least 64",
        )?;
        check(
            !self.export_delay.is_zero() && !self.export_timeout.is_zero(),
            "telemetry.export_delay_ms / telemetry.export_timeout_secs",
            "must be more than 0",
        )?;
        check(
            !self.service_name.trim().is_empty(),
            "telemetry.service_name",
            "must not be empty",
        )
    }
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
    #[serde(default, with = "unset_if_empty")]
    pub redis_url: Option<String>,
    pub redis_prefix: String,
    pub window_turns: usize,
    pub max_turns: usize,
    /// Bytes of one session's stored turns.
    pub max_session_bytes: usize,
    #[serde(rename = "ttl_secs", with = "secs")]
    pub ttl: Duration,
    pub max_sessions: usize,
    /// Sessions one API key keeps (the shared namespace of a gateway without keys has all).
    pub max_sessions_per_caller: usize,
    /// Longest a turn waits for the session's earlier turn to finish.
    #[serde(rename = "wait_secs", with = "secs")]
    pub wait: Duration,
}

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

/// The embedding model an `ollama` or `openai` embedder asks for when `embeddings.model`
/// is unset.
pub const DEFAULT_EMBEDDING_MODEL: &str = "nomic-embed-text";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "EmbeddingToml", into = "EmbeddingToml")]
pub struct EmbeddingSettings {
    pub provider: EmbeddingProvider,
    /// Unset = `llm.base_url`.
    pub base_url: Option<String>,
    /// The model's name: what an `ollama` or `openai` upstream is asked for, and what the
    /// embedding endpoints serve it as. `embeddings.model` unset: `DEFAULT_EMBEDDING_MODEL`
    /// here, and the local embedder is served under the name of the model in its folder.
    pub model: String,
    /// Whether `embeddings.model` was set (in a file or the environment); see `model_is_set`.
    pub model_set: bool,
    pub path: Option<PathBuf>,
    /// Unset = `llm.api_key`.
    pub api_key: Option<String>,
    pub batch_size: usize,
    pub languages: Vec<String>,
}

/// `[embeddings]` as written, where `model = ""` means unset.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbeddingToml {
    provider: EmbeddingProvider,
    #[serde(default, with = "unset_if_empty")]
    base_url: Option<String>,
    #[serde(default)]
    model: String,
    #[serde(default, with = "unset_if_empty")]
    path: Option<PathBuf>,
    #[serde(default, with = "unset_if_empty")]
    api_key: Option<String>,
    batch_size: usize,
    #[serde(deserialize_with = "list_or_comma_string")]
    languages: Vec<String>,
}

impl From<EmbeddingToml> for EmbeddingSettings {
    fn from(t: EmbeddingToml) -> Self {
        let model = t.model.trim();
        Self {
            provider: t.provider,
            base_url: t.base_url,
            model: if model.is_empty() {
                DEFAULT_EMBEDDING_MODEL.to_string()
            } else {
                model.to_string()
            },
            model_set: !model.is_empty(),
            path: t.path,
            api_key: t.api_key,
            batch_size: t.batch_size,
            languages: t.languages,
        }
    }
}

impl From<EmbeddingSettings> for EmbeddingToml {
    fn from(s: EmbeddingSettings) -> Self {
        Self {
            model: if s.model_is_set() {
                s.model
            } else {
                String::new()
            },
            provider: s.provider,
            base_url: s.base_url,
            path: s.path,
            api_key: s.api_key,
            batch_size: s.batch_size,
            languages: s.languages,
        }
    }
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
    /// Unset = the embedded engine under `data_dir`.
    #[serde(default, with = "unset_if_empty")]
    pub url: Option<String>,
    pub collection: String,
    #[serde(default, with = "unset_if_empty")]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalSettings {
    pub top_k: usize,
    /// Characters of a search query the search reads: its beginning and its end.
    pub max_query_chars: usize,
    pub rrf_k: f32,
    pub candidates: usize,
    pub bm25_weight: f32,
    /// BM25's weight for questions in a language the embedder reads, in place of
    /// `bm25_weight`.
    pub bm25_weight_by_language: LanguageWeights,
    pub dense_weight: f32,
    pub foreign_dense_weight: f32,
    /// Added to the similarity of chunks in other languages than the query's before the
    /// dense list is ranked (with an embedder that reads more than one language).
    pub cross_language_offset: f32,
    /// Most chunks of one file in a search's results while other files have candidates
    /// (0 = no limit).
    pub max_chunks_per_file: usize,
    pub spec_boost: f32,
    pub narrative_boost: f32,
    pub code_example_boost: f32,
    pub code_boost: f32,
    /// Longest wait for the dense half of a search (embedding the query and the vector
    /// store's answer), in milliseconds; past it BM25 answers alone.
    pub deadline_ms: u64,
}

/// A number per natural language the retriever tells apart; unset = the general setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageWeights {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub en: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub es: Option<f32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSettings {
    pub chunk_chars: usize,
    pub overlap_chars: usize,
    pub max_file_bytes: u64,
    /// Globs of files never indexed, beside `.gitignore`'s.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub exclude: Vec<String>,
}

/// Fill-in-the-middle completion (`[completion]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionSettings {
    /// The upstream model that completes code; empty = `llm.model`.
    pub model: String,
    /// `auto` (from the model's name) or a family: qwen, codellama, deepseek, starcoder,
    /// codestral, codegemma.
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

/// The gRPC service `brunix.AssistanceEngine`, served beside HTTP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcSettings {
    /// host:port; empty = no gRPC.
    pub addr: String,
    /// `avap_code` of `AskAgent`'s answer.
    pub avap_code: String,
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
        self.classifier.validate()?;
        self.reformulator.validate()?;
        self.sessions.validate()?;
        self.llm.validate()?;
        self.embeddings.validate()?;
        self.qdrant.validate()?;
        self.retrieval.validate()?;
        self.ingest.validate()?;
        self.judge.validate()?;
        self.eval.validate()
    }
}

impl ServerSettings {
    /// Adds the keys of `api_keys_file` to `api_keys`.
    fn read_keys_file(&mut self) -> Result<(), SettingsError> {
        let Some(path) = &self.api_keys_file else {
            return Ok(());
        };
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| SettingsError::new("server.api_keys_file", format!("{shown}: {e}")))?;
        let keys: Vec<ApiKey> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    [name, key] => ApiKey {
                        name: Some(name.to_string()),
                        ..ApiKey::from(key)
                    },
                    _ => ApiKey::from(line),
                },
            )
            .collect();
        if keys.is_empty() {
            return Err(SettingsError::new(
                "server.api_keys_file",
                format!("{shown} has no keys"),
            ));
        }
        self.api_keys.extend(keys);
        Ok(())
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let addr = &self.addr;
        if !is_host_port(addr) {
            return Err(SettingsError::new(
                "server.addr",
                format!("'{addr}' is not host:port"),
            ));
        }
        check(
            self.max_messages > 0 && self.max_message_chars > 0 && self.max_embedding_inputs > 0,
            "server.max_messages / server.max_message_chars / server.max_embedding_inputs",
            "must be at least 1",
        )?;
        check(
            self.max_body_bytes >= 1024,
            "server.max_body_bytes",
            "must be at least 1024",
        )?;
        check(
            self.tls_cert.is_some() == self.tls_key.is_some(),
            "server.tls_cert / server.tls_key",
            "set both (PEM files) for HTTPS, or neither for plain HTTP",
        )?;
        for (key, path) in [
            ("server.tls_cert", &self.tls_cert),
            ("server.tls_key", &self.tls_key),
        ] {
            if let Some(path) = path.as_deref().filter(|p| !p.is_file()) {
                return Err(SettingsError::new(
                    key,
                    format!("file {} does not exist", path.display()),
                ));
            }
        }
        check(
            !self.header_read_timeout.is_zero()
                && !self.body_read_timeout.is_zero()
                && !self.write_timeout.is_zero(),
            "server.header_read_timeout_secs / server.body_read_timeout_secs / server.write_timeout_secs",
            "must be at least 1 second",
        )?;
        check(
            !self.idle_timeout.is_zero(),
            "server.idle_timeout_secs",
            "must be at least 1 second",
        )?;
        check(
            self.max_connections >= 16,
            "server.max_connections",
            "must be at least 16",
        )?;
        check(
            self.max_concurrent_embeddings > 0,
            "server.max_concurrent_embeddings",
            "must be at least 1",
        )?;
        for host in &self.allowed_hosts {
            // A name or an address, without a port (the port is not checked): an IPv6
            // address is the one kind with colons.
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let ok = !host.is_empty()
                && !host.contains(['/', ' ', '@'])
                && (!bare.contains(':') || bare.parse::<std::net::Ipv6Addr>().is_ok())
                && axum::http::HeaderValue::from_str(host).is_ok();
            if !ok {
                return Err(SettingsError::new(
                    "server.allowed_hosts",
                    format!(
                        "'{host}' is not a host name or address without a port (e.g. gateway.internal, 10.0.0.5, fd00::5)"
                    ),
                ));
            }
        }
        check(
            self.api_keys.iter().all(|k| !k.key.trim().is_empty()),
            "server.api_keys",
            "keys must not be empty",
        )?;
        let mut names = std::collections::HashSet::new();
        for name in self.api_keys.iter().filter_map(|k| k.name.as_deref()) {
            check(
                !name.is_empty()
                    && name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)),
                "server.api_keys",
                "a key's name is 1 to 64 ASCII letters, digits and - _ . @",
            )?;
            check(
                names.insert(name),
                "server.api_keys",
                "two keys have the same name",
            )?;
            check(
                !self.api_keys.iter().any(|k| k.key == name),
                "server.api_keys",
                "a key's name must not be a key (names are shown in metrics and reports)",
            )?;
        }
        for origin in &self.cors_origins {
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
        for name in &self.session_headers {
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(SettingsError::new(
                    "server.session_headers",
                    format!("'{name}' is not a header name"),
                ));
            }
        }
        if let Some(url) = &self.public_url {
            let ok = (url.starts_with("http://") || url.starts_with("https://"))
                && url
                    .parse::<axum::http::Uri>()
                    .is_ok_and(|u| u.host().is_some());
            if !ok {
                return Err(SettingsError::new(
                    "server.public_url",
                    format!("'{url}' is not a URL like https://gw.example.com"),
                ));
            }
        }
        Ok(())
    }
}

impl ContextSettings {
    fn validate(&self) -> Result<(), SettingsError> {
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
    fn validate(&self) -> Result<(), SettingsError> {
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

impl ClassifierSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        check(
            !self.timeout.is_zero(),
            "classifier.timeout_ms",
            "must be at least 1",
        )
    }
}

impl ReformulatorSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        check(
            !self.timeout.is_zero(),
            "reformulator.timeout_ms",
            "must be at least 1",
        )
    }
}

impl QdrantSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        check(
            !self.collection.trim().is_empty(),
            "qdrant.collection",
            "must not be empty",
        )
    }
}

impl IngestSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.chunk_chars >= 200 && self.overlap_chars < self.chunk_chars,
            "ingest.chunk_chars / ingest.overlap_chars",
            "chunk_chars must be at least 200 and larger than overlap_chars",
        )
    }
}

impl GrpcSettings {
    /// The address to serve gRPC on, when it is on.
    pub fn addr(&self) -> Option<&str> {
        let addr = self.addr.trim();
        (!addr.is_empty()).then_some(addr)
    }

    fn validate(&self) -> Result<(), SettingsError> {
        match self.addr() {
            Some(addr) if !is_host_port(addr) => Err(SettingsError::new(
                "grpc.addr",
                format!("'{addr}' is not host:port (empty turns gRPC off)"),
            )),
            _ => Ok(()),
        }
    }
}

impl EvalSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.keep_reports > 0,
            "eval.keep_reports",
            "must be at least 1",
        )
    }
}

impl SessionSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.max_turns > 0 && self.window_turns <= self.max_turns,
            "sessions.window_turns / sessions.max_turns",
            "max_turns must be at least 1 and at least window_turns",
        )?;
        check(
            self.max_sessions > 0 && !self.ttl.is_zero() && !self.wait.is_zero(),
            "sessions.max_sessions / sessions.ttl_secs / sessions.wait_secs",
            "must be at least 1",
        )?;
        check(
            self.max_sessions_per_caller > 0,
            "sessions.max_sessions_per_caller",
            "must be at least 1",
        )?;
        check(
            self.max_session_bytes >= 4096,
            "sessions.max_session_bytes",
            "must be at least 4096",
        )?;
        check(
            self.backend != SessionBackend::Redis || self.redis_url.is_some(),
            "sessions.redis_url",
            "the redis backend needs a URL, e.g. redis://127.0.0.1:6379",
        )
    }
}

impl LlmSettings {
    fn validate(&self) -> Result<(), SettingsError> {
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

impl EmbeddingSettings {
    /// Whether the model was named in the settings (a file, the environment, or code that
    /// changed `model`), rather than left to its default.
    pub fn model_is_set(&self) -> bool {
        self.model_set || self.model != DEFAULT_EMBEDDING_MODEL
    }

    fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.provider != EmbeddingProvider::Local || self.path.is_some(),
            "embeddings.path",
            "the local embedder needs the model folder",
        )?;
        if let Some(url) = &self.base_url {
            check_upstream_url("embeddings.base_url", url)?;
        }
        check(
            self.batch_size > 0,
            "embeddings.batch_size",
            "must be at least 1",
        )
    }
}

impl RetrievalSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.top_k > 0 && self.candidates >= self.top_k,
            "retrieval.top_k / retrieval.candidates",
            "top_k must be at least 1 and candidates at least top_k",
        )?;
        check(self.rrf_k > 0.0, "retrieval.rrf_k", "must be positive")?;
        check(
            self.max_query_chars >= 16,
            "retrieval.max_query_chars",
            "must be at least 16",
        )?;
        check(
            (0.0..=1.0).contains(&self.cross_language_offset),
            "retrieval.cross_language_offset",
            "must be a number from 0 to 1",
        )?;
        let by_language = &self.bm25_weight_by_language;
        let weights = [
            ("retrieval.bm25_weight", self.bm25_weight),
            (
                "retrieval.bm25_weight_by_language.en",
                by_language.en.unwrap_or(0.0),
            ),
            (
                "retrieval.bm25_weight_by_language.es",
                by_language.es.unwrap_or(0.0),
            ),
            ("retrieval.dense_weight", self.dense_weight),
            ("retrieval.foreign_dense_weight", self.foreign_dense_weight),
            ("retrieval.spec_boost", self.spec_boost),
            ("retrieval.narrative_boost", self.narrative_boost),
            ("retrieval.code_example_boost", self.code_example_boost),
            ("retrieval.code_boost", self.code_boost),
        ];
        match weights.iter().find(|(_, w)| !w.is_finite() || *w < 0.0) {
            Some((key, _)) => Err(SettingsError::new(key, "must be a number ≥ 0")),
            None => Ok(()),
        }
    }
}

impl JudgeSettings {
    fn validate(&self) -> Result<(), SettingsError> {
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

/// A duration written as whole seconds.
mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
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
        u64::deserialize(d).map(Duration::from_millis)
    }

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }
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
    #[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
    fn per_language_weights_are_set_one_language_at_a_time() {
        figment::Jail::expect_with(|jail| {
            let defaults = Settings::load_without_env(None).unwrap().retrieval;
            assert_eq!(defaults.bm25_weight_by_language.en, None);
            assert_eq!(defaults.bm25_weight_by_language.es, Some(0.2));
            jail.create_file(
                "c.toml",
                "[retrieval]\nbm25_weight_by_language = { en = 0.8 }\n",
            )?;
            let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
            let by_language = s.retrieval.bm25_weight_by_language;
            assert_eq!(by_language.en, Some(0.8));
            assert_eq!(
                by_language.es,
                Some(0.2),
                "the default's other languages stay"
            );
            jail.set_env("ASSIST__RETRIEVAL__BM25_WEIGHT_BY_LANGUAGE__ES", "1");
            let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
            assert_eq!(s.retrieval.bm25_weight_by_language.es, Some(1.0));
            assert_eq!(s.retrieval.bm25_weight_by_language.en, Some(0.8));
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
    fn keys_have_names_and_limits_checked() {
        let keys = write("ci sk-ci-1\nsk-plain\n");
        let f = write(&format!(
            "[server]\napi_keys = [\"k1\", {{ name = \"alice\", key = \"sk-a\", tokens_per_day = 100, requests_per_minute = 5 }}]\napi_keys_file = \"{}\"\n",
            keys.path().display()
        ));
        let s = Settings::load_without_env(Some(f.path())).unwrap();
        let k = &s.server.api_keys;
        assert_eq!(k[0], "k1");
        assert_eq!(k[1].name.as_deref(), Some("alice"));
        assert_eq!((k[1].tokens_per_day, k[1].requests_per_minute), (100, 5));
        assert_eq!(
            (k[2].name.as_deref(), k[2].key.as_str()),
            (Some("ci"), "sk-ci-1")
        );
        assert_eq!(k[3], "sk-plain");
        // Written back as TOML (tests spawn the binary so), read the same.
        let again: Settings = toml::from_str(&toml::to_string(&s).unwrap()).unwrap();
        assert_eq!(again.server.api_keys, s.server.api_keys);
        for (bad, why) in [
            ("{ name = \"a b\", key = \"k\" }", "ASCII"),
            (
                "{ name = \"x\", key = \"k\" }, { name = \"x\", key = \"j\" }",
                "same name",
            ),
            (
                "{ name = \"k2\", key = \"k\" }, \"k2\"",
                "must not be a key",
            ),
            ("{ name = \"x\", key = \"k\", tokens = 3 }", "unknown"),
        ] {
            let f = write(&format!("[server]\napi_keys = [{bad}]\n"));
            let e = Settings::load_without_env(Some(f.path())).unwrap_err();
            assert!(e.key.starts_with("server.api_keys"), "{bad}: {e}");
            let _ = why;
        }
    }

    #[test]
    fn telemetry_settings_are_checked() {
        let s = Settings::load_without_env(None).unwrap();
        assert!(
            s.telemetry.otlp_endpoint.is_none(),
            "traces are off by default"
        );
        assert!(!s.telemetry.capture_content, "no content by default");
        for bad in [
            "otlp_endpoint = \"collector:4318\"",
            "otlp_protocol = \"thrift\"",
            "max_queue_spans = 1",
            "otlp_headers = { \"bad header\" = \"x\" }",
        ] {
            let f = write(&format!("[telemetry]\n{bad}\n"));
            let e = Settings::load_without_env(Some(f.path())).unwrap_err();
            assert!(e.key.starts_with("telemetry"), "{bad}: {e}");
        }
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
    fn allowed_hosts_are_names_or_addresses_without_ports() {
        let f = write("[server]\nallowed_hosts = [\"gw.internal\", \"10.0.0.5\", \"fd00::5\", \"[fd00::6]\", \"*.corp.example\"]\n");
        assert_eq!(
            Settings::load_without_env(Some(f.path()))
                .unwrap()
                .server
                .allowed_hosts
                .len(),
            5
        );
        for bad in ["gw.internal:8080", "http://gw", "a b", ""] {
            let f = write(&format!("[server]\nallowed_hosts = [\"{bad}\"]\n"));
            let e = Settings::load_without_env(Some(f.path())).unwrap_err();
            assert_eq!(e.key, "server.allowed_hosts", "{bad}");
        }
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
        assert!(s.server.tls_cert.is_none());
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
            (
                "[retrieval]\nbm25_weight_by_language = { fr = 0.5 }\n",
                "retrieval.bm25_weight_by_language",
            ),
            (
                "[retrieval]\nbm25_weight_by_language = { es = -1 }\n",
                "retrieval.bm25_weight_by_language.es",
            ),
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
        assert_eq!(s.llm.fallbacks[0].api_key, None);
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
            (c.base_url.as_str(), c.model.as_str(), c.api_key.as_deref()),
            ("http://j:1/v1", "big", Some("k"))
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
    #[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
    fn empty_means_unset_and_durations_are_read_once() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "[server]\nheader_read_timeout_secs = 7\ntls_cert = \"  \"\n\n[llm]\nretry_base_ms = 250\napi_key = \" sk-x \"\n",
            )?;
            jail.set_env("ASSIST__QDRANT__URL", "");
            jail.set_env("ASSIST__EMBEDDINGS__BASE_URL", "http://e:1");
            let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
            assert_eq!(s.server.header_read_timeout, Duration::from_secs(7));
            assert_eq!(s.llm.retry_base, Duration::from_millis(250));
            assert_eq!(s.server.tls_cert, None, "blank is unset");
            assert_eq!(s.llm.api_key.as_deref(), Some("sk-x"), "values are trimmed");
            assert_eq!(s.qdrant.url, None);
            assert_eq!(s.embeddings.base_url.as_deref(), Some("http://e:1"));
            assert_eq!(s.sessions.ttl, Duration::from_secs(604_800));
            Ok(())
        });
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let err = Settings::load_without_env(Some(Path::new("/nonexistent/x.toml"))).unwrap_err();
        assert!(err.to_string().contains("does not exist"));
    }
}

//! The upstream language model: the `ChatModel` port, the neutral request and chunk
//! types every adapter speaks, and the adapters (Ollama native, OpenAI-compatible).
//! Sentence embedders live in `embed`, which uses this module's HTTP client and errors.

pub(crate) mod http;
pub mod ollama;
pub mod openai;
mod relay;
pub mod resilient;
pub(crate) mod sse;
pub mod tokenize;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::{Map, Value};

use crate::config::{LlmSettings, Provider, Tokenizer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One conversation message, whichever dialect it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Images as `data:` URLs, plain base64 (Ollama) or http(s) URLs (OpenAI).
    pub images: Vec<String>,
    pub tool_calls: Vec<ToolCall>,
    /// On tool results: the call being answered (OpenAI) …
    pub tool_call_id: Option<String>,
    /// … and the function's name (Ollama).
    pub tool_name: Option<String>,
    /// Where the client wrote the text, for an error about it (`system`, `instructions`,
    /// `messages.2.content`, `input[3].content`); `None`: `messages[i].content`, the
    /// message's place in the list (OpenAI, Ollama: one message a message).
    pub field: Option<String>,
}

impl Message {
    /// The text its tool calls add to a prompt: each call's name and arguments, a line
    /// each (empty, and not allocated, when it made none).
    pub fn calls_text(&self) -> String {
        let mut text = String::new();
        for call in &self.tool_calls {
            text.push_str(&call.name);
            text.push(' ');
            text.push_str(&call.arguments_text());
            text.push('\n');
        }
        text
    }

    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            images: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            field: None,
        }
    }

    /// `self`, written by the client at `field` (see [`Message::field`]).
    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

/// A complete function call requested by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// A JSON object when the model produced valid JSON; otherwise the raw text as a string.
    pub arguments: Value,
}

impl ToolCall {
    /// Arguments as OpenAI sends them: a JSON document in a string.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// Arguments as Ollama sends them: an object.
    pub fn arguments_object(&self) -> Value {
        match &self.arguments {
            Value::Object(_) => self.arguments.clone(),
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => Value::Object(Map::new()),
            },
            _ => Value::Object(Map::new()),
        }
    }

    /// Parses OpenAI's string form, keeping unparsable text as it is.
    pub fn parse_arguments(text: &str) -> Value {
        if text.trim().is_empty() {
            return Value::Object(Map::new());
        }
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
    }

    /// A call as a client or upstream sent it: arguments as a JSON string (OpenAI) or an
    /// object (Ollama), the id when there is one.
    pub fn from_wire(id: Option<String>, name: String, arguments: Option<Value>) -> Self {
        Self {
            id: id.unwrap_or_else(Self::new_id),
            name,
            arguments: match arguments {
                Some(Value::String(s)) => Self::parse_arguments(&s),
                Some(v) => v,
                None => Value::Object(Map::new()),
            },
        }
    }

    /// OpenAI's shape of a complete call.
    pub fn openai_json(&self) -> Value {
        serde_json::json!({"id": self.id, "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_text()}})
    }

    /// Ollama's shape of a complete call.
    pub fn ollama_json(&self, index: usize) -> Value {
        serde_json::json!({"id": self.id,
            "function": {"index": index, "name": self.name, "arguments": self.arguments_object()}})
    }

    pub fn new_id() -> String {
        format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..24])
    }
}

/// What the model is asked to continue.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A conversation (`/api/chat`, `/chat/completions`).
    Chat(Vec<Message>),
    /// A raw prompt (`/api/generate`, `/completions`): used for passthrough completions.
    Prompt {
        prompt: String,
        suffix: Option<String>,
        system: Option<String>,
        raw: bool,
        images: Vec<String>,
    },
}

impl Input {
    /// The input as chat messages (a raw prompt becomes a user message, after its system
    /// text).
    pub fn into_messages(self) -> Vec<Message> {
        match self {
            Input::Chat(messages) => messages,
            Input::Prompt {
                prompt,
                system,
                images,
                ..
            } => {
                let mut out = Vec::new();
                if let Some(s) = system.filter(|s| !s.trim().is_empty()) {
                    out.push(Message::text(Role::System, s));
                }
                let mut user = Message::text(Role::User, prompt);
                user.images = images;
                out.push(user);
                out
            }
        }
    }
}

/// Sampling and output controls; `None` = the upstream's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenParams {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    /// OpenAI `response_format`; Ollama's `format` is mapped to and from it.
    pub response_format: Option<Value>,
    /// Ollama options the neutral fields do not cover (`num_ctx`, `top_k`, …), forwarded
    /// to an Ollama upstream as they are.
    pub extra_options: Map<String, Value>,
    /// Ollama `keep_alive` and `think`, forwarded to an Ollama upstream.
    pub keep_alive: Option<Value>,
    pub think: Option<Value>,
}

/// A request as it goes to the upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamRequest {
    pub model: String,
    pub input: Input,
    pub params: GenParams,
    /// Function tools in OpenAI's shape (`{"type":"function","function":{…}}`); Ollama
    /// accepts the same shape.
    pub tools: Vec<Value>,
    pub tool_choice: Option<Value>,
    /// Ask for the answer in one piece (the upstream's non-streamed form), for a caller
    /// that takes it whole and needs no token before the last: the chunks then arrive
    /// all at once, after the upstream's whole answer. Bounded by `llm.max_answer_secs`
    /// alone (no first token to wait for).
    pub whole: bool,
    /// Pass the upstream's own events on as they came (same-dialect passthrough), when the
    /// upstream can ([`ChatModel::relays`]).
    pub relay: Option<Relay>,
    /// A prompt written in the model's own template (`raw`) goes to a fallback upstream
    /// only when it serves the same model or one named here (a model that reads the same
    /// template): to any other, the template's tokens are text.
    pub template_peers: Vec<String>,
}

/// A client that speaks the upstream's own dialect (OpenAI's to an OpenAI-compatible
/// upstream, Ollama's to Ollama) gets the upstream's events as they came, as
/// [`Chunk::Verbatim`]: each is scanned for what the gateway must know (usage, finish,
/// errors, tool calls), and read only when it may hold one of them (`relay`); none is
/// parsed and written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relay {
    /// The client asked for the usage event (the gateway always asks the upstream for it,
    /// to count it; it is passed on only when asked).
    pub usage: bool,
}

impl UpstreamRequest {
    /// One user message to `model`, streamed, default parameters, no tools.
    pub fn question(model: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            input: Input::Chat(vec![Message::text(Role::User, text.into())]),
            params: GenParams::default(),
            tools: Vec::new(),
            tool_choice: None,
            whole: false,
            relay: None,
            template_peers: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    /// Ollama's answer to a request with no messages: the model was loaded.
    Load,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Load => "load",
        }
    }

    /// Reads both dialects' names; anything unknown is a normal stop.
    pub fn parse(s: &str) -> Self {
        match s {
            "length" | "max_tokens" => FinishReason::Length,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "load" => FinishReason::Load,
            _ => FinishReason::Stop,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// An upstream's wire format, as far as relaying goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI's chat and text completions (SSE, or one JSON body).
    OpenAi,
    /// Ollama's `/api/chat` and `/api/generate` (NDJSON, or one JSON body).
    Ollama,
}

/// One piece of an upstream answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    Text(String),
    ToolCalls(Vec<ToolCall>),
    /// Relayed ([`Relay`]): the upstream's own bytes as the client takes them (its SSE
    /// events framed again, or a whole answer's body), `deltas` of them with content.
    Verbatim {
        bytes: bytes::Bytes,
        deltas: u32,
    },
    /// Always the last item of a stream that ended well; usage when the upstream told.
    Done {
        finish: FinishReason,
        usage: Option<Usage>,
    },
}

pub type ChunkStream = BoxStream<'static, Result<Chunk, UpstreamError>>;

/// Whether two model names are one model: `name` and `name:latest` are (Ollama's tags).
pub fn same_model(a: &str, b: &str) -> bool {
    fn bare(name: &str) -> &str {
        name.strip_suffix(":latest").unwrap_or(name)
    }
    bare(a) == bare(b)
}

/// A model the upstream serves.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamModel {
    pub id: String,
    pub created: i64,
    pub owned_by: String,
    pub modified_at: Option<String>,
    pub size: u64,
    pub digest: String,
    /// Ollama's `details` object (family, parameter size, …) when the upstream gave one.
    pub details: Option<Value>,
}

/// What the upstream says about one model (`/api/show`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelCard {
    pub context_length: Option<u64>,
    pub details: Option<Value>,
    pub parameters: Option<String>,
    pub template: Option<String>,
    pub capabilities: Vec<String>,
    pub model_info: Option<Value>,
}

/// The upstream language model.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// The upstream's base URL, for messages and readiness.
    fn base_url(&self) -> &str;
    /// Streams the answer. Resolves once the upstream accepted the request (its headers
    /// arrived), so failures before the first byte are returned here, not in the stream.
    /// Dropping the stream cancels the upstream request.
    async fn stream(&self, request: &UpstreamRequest) -> Result<ChunkStream, UpstreamError>;
    /// The upstream's own models.
    async fn models(&self) -> Result<Vec<UpstreamModel>, UpstreamError>;
    /// Details of one upstream model; a 404 status when it does not exist.
    async fn show(&self, model: &str) -> Result<ModelCard, UpstreamError>;
    /// The wire whose events a request's [`Relay`] passes on, when every upstream behind
    /// this model speaks the same one.
    fn relays(&self) -> Option<Wire> {
        None
    }
    /// Whether each upstream behind this model answers (for readiness), primary first.
    /// Each probe waits at most `wait`.
    async fn probe(&self, wait: Duration) -> Vec<UpstreamProbe> {
        vec![UpstreamProbe::run("primary", self, wait, false).await]
    }
}

/// The state of one upstream, as readiness reports it.
#[derive(Debug, Clone)]
pub struct UpstreamProbe {
    /// `primary` or `fallback`.
    pub role: &'static str,
    pub url: String,
    /// Skipped for now after repeated failures (`llm.cooldown_*`).
    pub cooling_down: bool,
    /// How many models it lists, or why it does not answer.
    pub models: Result<usize, String>,
}

impl UpstreamProbe {
    /// Lists the upstream's models, at most `wait`.
    pub async fn run<C: ChatModel + ?Sized>(
        role: &'static str,
        chat: &C,
        wait: Duration,
        cooling_down: bool,
    ) -> Self {
        let url = chat.base_url().to_string();
        let models = match tokio::time::timeout(wait, chat.models()).await {
            Ok(Ok(models)) => Ok(models.len()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "upstream {url} did not answer within {} s",
                wait.as_secs_f32()
            )),
        };
        Self {
            role,
            url,
            cooling_down,
            models,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamErrorKind {
    /// Connection refused, DNS failure, TLS failure.
    Unreachable,
    /// No response headers in time.
    Timeout,
    /// The upstream answered with this HTTP status.
    Status(u16),
    /// The upstream reported an error inside the stream.
    Stream,
    /// The upstream sent something that is not its wire format.
    Protocol,
    /// The stream ended before the upstream said it was done.
    Closed,
    /// The request cannot be expressed for this upstream.
    Unsupported,
}

/// Every way an upstream call can fail, with the upstream's URL for the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct UpstreamError {
    pub kind: UpstreamErrorKind,
    pub url: String,
    pub detail: String,
    /// The upstream's `Retry-After` on a 429 or 503, when it sent one.
    pub retry_after: Option<Duration>,
}

impl UpstreamError {
    pub fn new(kind: UpstreamErrorKind, url: &str, detail: impl Into<String>) -> Self {
        Self {
            kind,
            url: url.to_string(),
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// Whether the upstream refused the prompt as longer than the model's window, in any
    /// of the ways real servers say it: an HTTP 400 (OpenAI, vLLM, llama.cpp and
    /// llama-cpp-python: `context_length_exceeded`, `exceed_context_size_error`, "maximum
    /// context length"), or Ollama's error ("input length exceeds the context length").
    pub fn is_context_overflow(&self) -> bool {
        if !matches!(
            self.kind,
            UpstreamErrorKind::Status(400 | 413 | 422 | 500) | UpstreamErrorKind::Stream
        ) {
            return false;
        }
        let detail = self.detail.to_ascii_lowercase();
        [
            "context_length_exceeded",
            "context length",
            "context window",
            "context size",
            "exceed_context",
            "maximum context",
            "n_ctx",
            "prompt is too long",
            "too many tokens",
        ]
        .iter()
        .any(|needle| detail.contains(needle))
    }

    fn describe(&self) -> String {
        let (url, detail) = (&self.url, &self.detail);
        match &self.kind {
            UpstreamErrorKind::Unreachable => format!("upstream {url} is unreachable: {detail}"),
            UpstreamErrorKind::Timeout => format!("upstream {url} timed out: {detail}"),
            UpstreamErrorKind::Status(404) => detail.clone(),
            UpstreamErrorKind::Status(s) => format!("upstream {url} answered HTTP {s}: {detail}"),
            UpstreamErrorKind::Stream => format!("upstream {url} failed: {detail}"),
            UpstreamErrorKind::Protocol => {
                format!("upstream {url} sent an invalid stream: {detail}")
            }
            UpstreamErrorKind::Closed => {
                format!("upstream {url} closed the stream before finishing: {detail}")
            }
            UpstreamErrorKind::Unsupported => detail.clone(),
        }
    }
}

/// A whole text answer (the pipeline's own short calls: classify, reformulate).
pub async fn complete(
    chat: &dyn ChatModel,
    request: UpstreamRequest,
) -> Result<String, UpstreamError> {
    let url = chat.base_url().to_string();
    let mut chunks = chat.stream(&request).await?;
    let mut text = String::new();
    while let Some(chunk) = chunks.next().await {
        match chunk? {
            Chunk::Text(t) => text.push_str(&t),
            // Never asked for: these requests are the gateway's own.
            Chunk::ToolCalls(_) | Chunk::Verbatim { .. } => {}
            Chunk::Done { .. } => return Ok(text),
        }
    }
    Err(UpstreamError::new(
        UpstreamErrorKind::Closed,
        &url,
        "stream ended early",
    ))
}

/// Builds the configured upstreams (`llm` and its `fallbacks`) behind one `ChatModel`
/// that retries, falls back, cools failing upstreams down and bounds every answer.
pub fn from_settings(settings: &LlmSettings) -> anyhow::Result<Arc<dyn ChatModel>> {
    let adapter = |provider: Provider, base_url: &str, api_key: Option<&str>| {
        let client = http::Upstream::new(
            base_url,
            api_key,
            settings.connect_timeout,
            settings.first_byte_timeout,
        )?
        .with_max_line_bytes(settings.max_chunk_bytes);
        Ok::<Arc<dyn ChatModel>, anyhow::Error>(match provider {
            Provider::Ollama => Arc::new(ollama::OllamaChat::new(client)),
            Provider::Openai => Arc::new(openai::OpenAiChat::new(client)),
        })
    };
    let mut upstreams = vec![resilient::Target::new(
        adapter(
            settings.provider,
            &settings.base_url,
            settings.api_key.as_deref(),
        )?,
        &settings.model,
    )];
    for f in &settings.fallbacks {
        upstreams.push(resilient::Target::new(
            adapter(f.provider, &f.base_url, f.api_key.as_deref())?,
            &f.model,
        ));
    }
    Ok(Arc::new(resilient::Resilient::new(
        upstreams,
        resilient::Policy::from_settings(settings),
    )))
}

/// The upstream's tokenizer, for counting prompts: OpenAI-compatible upstreams may have
/// one (llama.cpp, llama-cpp-python, vLLM); Ollama has none. `None` with
/// `llm.tokenizer = "estimate"`.
pub fn tokenizer_from_settings(
    settings: &LlmSettings,
) -> anyhow::Result<Option<Arc<dyn tokenize::TokenCounter>>> {
    if settings.provider != Provider::Openai || settings.tokenizer != Tokenizer::Upstream {
        return Ok(None);
    }
    let root = tokenize::UpstreamTokenizer::root_of(&settings.base_url);
    let up = http::Upstream::new(
        root,
        settings.api_key.as_deref(),
        settings.connect_timeout,
        settings.first_byte_timeout,
    )?;
    Ok(Some(Arc::new(tokenize::UpstreamTokenizer::new(
        up,
        &settings.model,
    ))))
}

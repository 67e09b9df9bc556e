//! The pipeline every chat endpoint shares. A turn goes in, a stream of events comes out;
//! the HTTP dialects only parse turns and render events.
//!
//! For the assistant model a turn goes through: session (wait for the session's earlier
//! turns, load its window) → classify → reformulate → retrieve → assemble → generate →
//! save the turn. Each stage logs one line with its time and decision (sizes and flags,
//! never content). Other models, with passthrough on, go straight to the upstream.

pub mod assemble;
pub mod classify;
pub mod fill;
pub mod prompts;
pub mod reformulate;
pub mod understand;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tracing::field::Empty;
use tracing::Instrument;

use crate::context::budget::Estimator;
use crate::context::{EditorContext, UsedItem};
use crate::error::GatewayError;
use crate::llm::tokenize::TokenCounter;
use crate::llm::{
    ChatModel, Chunk, ChunkStream, FinishReason, Input, Message, ModelCard, Role, ToolCall,
    UpstreamError, UpstreamErrorKind, UpstreamModel, UpstreamProbe, UpstreamRequest, Usage,
};
use crate::privacy::{Cleaned, Privacy};
use crate::retrieval::hybrid::{Retriever, Scored};
use crate::sessions::{Held, Owner, SessionKey, Sessions, Turn};
use crate::telemetry::{self, UpstreamClock};
use crate::trace;
use classify::{Classifier, ClassifyInput, QueryType};
use prompts::Prompts;
use reformulate::Reformulator;

/// What a chat request asks for, whichever dialect it came in.
#[derive(Debug, Clone)]
pub struct ChatTurn {
    /// `request.model` is the model the client named.
    pub request: UpstreamRequest,
    /// The conversation key, from the request's top-level `session_id`.
    pub session_id: Option<String>,
    /// What the user is looking at in the editor, read at the edge.
    pub editor: EditorContext,
}

impl ChatTurn {
    /// A turn as a client sent it: the editor context is read from every place a client
    /// may have put it (the `user` field, `additional_context` items, continue-style
    /// blocks in the last user message); what cannot be read is empty, never an error.
    pub fn from_client(
        request: UpstreamRequest,
        session_id: Option<String>,
        user: Option<&Value>,
        additional_context: Option<&Value>,
    ) -> Self {
        let last_user = match &request.input {
            Input::Chat(messages) => messages
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .map_or("", |m| m.content.as_str()),
            Input::Prompt { prompt, .. } => prompt.as_str(),
        };
        let editor = EditorContext::from_request(user, additional_context, last_user);
        Self {
            request,
            session_id,
            editor,
        }
    }
}

/// What a turn means: its type, whether it is about the editor's code (and why), and,
/// unless it is small talk, the search query and what it found.
#[derive(Debug, Clone)]
pub struct Understood {
    pub query_type: QueryType,
    pub use_editor: bool,
    pub editor_rule: &'static str,
    pub route_rule: &'static str,
    /// `None`: no search (small talk).
    pub search: Option<reformulate::Reformulation>,
    pub hits: Vec<Scored>,
}

/// A knowledge chunk the answer was given, as clients receive it in `sources`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Source {
    pub id: String,
    pub file: String,
    pub section: String,
    pub lines: [usize; 2],
    pub doc_type: &'static str,
    pub score: f32,
    /// The chunk's text, for answer evaluation; never sent to clients.
    #[serde(skip)]
    pub text: String,
}

impl Source {
    /// How a citation names it: `file § section (lines a–b)`.
    pub fn title(&self) -> String {
        let [start, end] = self.lines;
        if self.section.is_empty() {
            format!("{} (lines {start}–{end})", self.file)
        } else {
            format!("{} § {} (lines {start}–{end})", self.file, self.section)
        }
    }

    fn of(hit: &Scored) -> Self {
        let c = &hit.chunk;
        Self {
            id: c.chunk_id.clone(),
            file: c.source_file.clone(),
            section: c.section.clone(),
            lines: [c.start_line, c.end_line],
            doc_type: c.doc_type.as_str(),
            score: hit.score,
            text: c.text.clone(),
        }
    }
}

/// What the pipeline streams back. `Done` or `Error` is always the last event. The
/// assistant sends `Sources` first (possibly empty); passthrough never does.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Sources(Vec<Source>),
    /// The context items the client attached that the prompt held (after `Sources`, only
    /// when there are some).
    Items(Vec<UsedItem>),
    Delta(String),
    ToolCalls(Vec<ToolCall>),
    Done {
        finish: FinishReason,
        usage: Usage,
    },
    Error(GatewayError),
}

pub type EventStream = BoxStream<'static, Event>;

/// A whole answer, for non-streaming responses.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// `None` for passthrough models.
    pub sources: Option<Vec<Source>>,
    /// The attached context items the prompt held.
    pub context_items: Vec<UsedItem>,
    pub finish: FinishReason,
    pub usage: Usage,
}

/// A model the gateway serves.
#[derive(Debug, Clone, PartialEq)]
pub enum ServedModel {
    /// The assistant pipeline.
    Assistant { name: String },
    /// An upstream model forwarded unchanged.
    Upstream(UpstreamModel),
}

impl ServedModel {
    pub fn id(&self) -> &str {
        match self {
            ServedModel::Assistant { name } => name,
            ServedModel::Upstream(m) => &m.id,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Assistant,
    Passthrough,
}

pub struct Pipeline {
    chat: Arc<dyn ChatModel>,
    config: PipelineConfig,
    classifier: Box<dyn Classifier>,
    reformulator: Reformulator,
    retriever: Arc<Retriever>,
    sessions: Option<Arc<Sessions>>,
    /// The upstream model's context window, once it was learned.
    window: tokio::sync::OnceCell<usize>,
    /// The upstream's model names, as it last listed them (passthrough).
    upstream_models: std::sync::RwLock<KnownModels>,
    /// One listing at a time when the cached one is stale.
    listing: tokio::sync::Mutex<()>,
    /// The upstream's tokenizer, when it has one.
    tokens: Option<Arc<dyn TokenCounter>>,
    privacy: Arc<Privacy>,
    /// Tokens the upstream counted per estimated token (an `f64`'s bits), learned from
    /// the prompts it counted.
    scale: std::sync::atomic::AtomicU64,
    /// The upstream's host and port, as its spans name them (`server.*`).
    server: (String, i64),
}

/// Model names an upstream listed, and when.
#[derive(Default)]
struct KnownModels {
    names: HashSet<String>,
    listed: Option<Instant>,
    /// Whether the last listing succeeded (a failed one leaves names as they were).
    answered: bool,
}

/// How long a listing of the upstream's models is trusted before a name it lacks makes
/// the gateway ask again.
const MODEL_LIST_TTL: Duration = Duration::from_secs(60);

/// Most the estimate reads over a real tokenizer's count (1.05–1.5× on the texts
/// measured, README "Fitting the window"): a prompt estimated at more than this times the
/// room is too long for certain.
const ESTIMATE_OVERCOUNT: f64 = 1.5;

/// The Ollama options a client may set for the assistant: sampling only. Any other
/// (`num_gpu`, `num_thread`, `num_batch`, `use_mmap`, `rope_frequency_base`, …) may make
/// Ollama load the shared model again, so it is not forwarded.
const SAMPLING_OPTIONS: &[&str] = &[
    "num_keep",
    "seed",
    "num_predict",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "tfs_z",
    "repeat_last_n",
    "temperature",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "penalize_newline",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "stop",
];

/// How a pipeline is set up (built from settings in `app`).
pub struct PipelineConfig {
    pub assistant_model: String,
    pub upstream_model: String,
    pub passthrough: bool,
    pub prompts: Prompts,
    /// The window when the upstream reports none, and the cap on the one it reports.
    pub context_tokens: u32,
    /// What of the client's context a turn may use.
    pub context_policy: crate::context::Policy,
    /// Fill-in-the-middle: the model, its template setting, the repository snippets'
    /// room (characters) and the search's deadline.
    pub completion_model: String,
    pub completion_template: String,
    pub completion_context_chars: usize,
    pub completion_deadline: Duration,
    pub answer_reserve_tokens: u32,
    pub cite_sources: bool,
    /// Send the budgeted window as Ollama's `options.num_ctx`.
    pub send_num_ctx: bool,
    /// Ollama's `keep_alive` for the assistant's requests (`llm.keep_alive`).
    pub keep_alive: Option<String>,
    /// Longest wait for the next piece of an answer.
    pub idle_timeout: Duration,
}

/// The parts a pipeline runs.
pub struct Stages {
    pub classifier: Box<dyn Classifier>,
    pub reformulator: Reformulator,
    pub retriever: Arc<Retriever>,
    /// `None`: no conversation memory (e.g. `ask`).
    pub sessions: Option<Arc<Sessions>>,
    /// The upstream's tokenizer; `None`: prompts are estimated.
    pub tokens: Option<Arc<dyn TokenCounter>>,
    /// Secrets, excluded paths and invisible characters (`[privacy]`).
    pub privacy: Arc<Privacy>,
}

impl Pipeline {
    pub fn new(chat: Arc<dyn ChatModel>, config: PipelineConfig, stages: Stages) -> Self {
        let server = reqwest::Url::parse(chat.base_url()).map_or_else(
            |_| (String::new(), 0),
            |u| {
                let host = u.host_str().unwrap_or_default().to_string();
                (host, u.port_or_known_default().map_or(0, i64::from))
            },
        );
        Self {
            chat,
            config,
            classifier: stages.classifier,
            reformulator: stages.reformulator,
            retriever: stages.retriever,
            sessions: stages.sessions,
            window: tokio::sync::OnceCell::new(),
            upstream_models: std::sync::RwLock::default(),
            listing: tokio::sync::Mutex::new(()),
            tokens: stages.tokens,
            privacy: stages.privacy,
            scale: std::sync::atomic::AtomicU64::new(1.0f64.to_bits()),
            server,
        }
    }

    /// The privacy rules every prompt, source and stored turn goes through.
    pub fn privacy(&self) -> &Arc<Privacy> {
        &self.privacy
    }

    pub fn sessions(&self) -> Option<&Arc<Sessions>> {
        self.sessions.as_ref()
    }

    pub fn assistant_model(&self) -> &str {
        &self.config.assistant_model
    }

    pub fn upstream_url(&self) -> &str {
        self.chat.base_url()
    }

    /// `brunix` and `brunix:latest` are the same model.
    pub fn is_assistant(&self, model: &str) -> bool {
        let name = self.config.assistant_model.as_str();
        model == name || model.strip_suffix(":latest") == Some(name)
    }

    fn route(&self, model: &str) -> Result<Route, GatewayError> {
        if self.is_assistant(model) {
            Ok(Route::Assistant)
        } else if self.config.passthrough && !model.is_empty() {
            Ok(Route::Passthrough)
        } else {
            Err(GatewayError::model_not_found(model))
        }
    }

    /// Runs a turn of `owner` (whose session `turn.session_id` names). Errors before the
    /// upstream accepted the request are returned here (the client gets an HTTP error);
    /// later ones arrive as `Event::Error`.
    pub async fn run(&self, turn: ChatTurn, owner: &Owner) -> Result<EventStream, GatewayError> {
        self.run_timed(turn, owner, Arc::default()).await
    }

    /// Like `run`, adding the time spent waiting on the upstream model to `clock`.
    pub async fn run_timed(
        &self,
        turn: ChatTurn,
        owner: &Owner,
        clock: Arc<UpstreamClock>,
    ) -> Result<EventStream, GatewayError> {
        match self.route(&turn.request.model)? {
            Route::Passthrough => {
                // Only what the upstream serves: servers that answer any name (llama.cpp)
                // would otherwise answer for models that do not exist.
                if !self.learn_models(&turn.request.model).await {
                    return Err(GatewayError::model_not_found(&turn.request.model));
                }
                let mut turn = turn;
                self.protect_input(&mut turn.request.input);
                for tool in &mut turn.request.tools {
                    self.privacy.clean_json(tool).count("passthrough");
                }
                let prompt_estimate = estimate_tokens(&turn.request.input);
                let span = self.chat_span("chat", &turn.request);
                let chunks = clock
                    .time(self.chat.stream(turn.request))
                    .instrument(span.clone())
                    .await
                    .inspect_err(|e| trace::fail(&span, upstream_kind(e)))?;
                Ok(answer_events(
                    chunks,
                    self.upstream(clock, span),
                    prompt_estimate,
                    None,
                ))
            }
            Route::Assistant if is_fill(&turn.request.input) => self.run_fill(turn, clock).await,
            Route::Assistant => self.run_assistant(turn, owner, clock).await,
        }
    }

    /// The assistant's stages, each logging one line with its time and decision:
    /// session → classify → reformulate and retrieve → assemble → generate.
    async fn run_assistant(
        &self,
        turn: ChatTurn,
        owner: &Owner,
        clock: Arc<UpstreamClock>,
    ) -> Result<EventStream, GatewayError> {
        let started = Instant::now();
        let ChatTurn {
            mut request,
            session_id,
            mut editor,
        } = turn;
        let applied = self.config.context_policy.apply(&mut editor)?;
        applied.count(&editor);
        let mut messages =
            client_messages(std::mem::replace(&mut request.input, Input::Chat(vec![])));
        let mut cleaned = self.protect(&mut editor, &mut messages);
        let query = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.clone())
            .unwrap_or_default();
        let session = session_id.map(|id| SessionKey {
            owner: owner.clone(),
            id,
        });
        let (held, mut history) = self.session(session, &messages, &editor).await?;
        for m in &mut history {
            cleaned.add(self.privacy.clean(&mut m.content));
        }
        if !cleaned.is_empty() {
            tracing::info!(
                secrets = ?cleaned.secrets,
                invisible = cleaned.invisible,
                "redacted before the prompt"
            );
            cleaned.count("prompt");
        }
        let conversation: Vec<Message> = history
            .iter()
            .chain(messages.iter().take(messages.len().saturating_sub(1)))
            .cloned()
            .collect();
        let Understood {
            query_type,
            use_editor,
            mut hits,
            ..
        } = self
            .understand(&query, &conversation, &editor, &clock)
            .await;
        let root = tracing::Span::current();
        root.record("assist.query_type", query_type.as_str());
        root.record("assist.editor", use_editor);
        if trace::capture_content() {
            trace::set(&root, "input.value", query.clone());
        }
        self.protect_hits(&mut hits);
        // The window is the upstream's (asked once, then known), or less when the client
        // asks for less (Ollama's num_ctx); never more.
        let window = clock.time(self.window()).await;
        let asked = request.params.extra_options.get("num_ctx");
        let window = asked
            .and_then(Value::as_u64)
            .map_or(window, |n| (n as usize).clamp(256, window));
        // The room kept for the answer: a client's max_tokens (forwarded as it is, a cap
        // for most servers) up to half the window, else the configured reserve up to a
        // quarter (a client's small num_ctx still leaves room for the prompt).
        let answer_tokens = match request.params.max_tokens {
            Some(n) => (n as usize).min(window / 2),
            None => (self.config.answer_reserve_tokens as usize).min(window / 4),
        };
        let tools = if request.tools.is_empty() {
            String::new()
        } else {
            Value::Array(request.tools.clone()).to_string()
        };
        let base =
            |with_tools: bool, history: Vec<Message>, messages: Vec<Message>| assemble::Request {
                prompts: &self.config.prompts,
                query_type,
                use_editor,
                editor: &editor,
                hits: &hits,
                history,
                messages,
                window_tokens: window,
                answer_tokens,
                tools: if with_tools { tools.as_str() } else { "" },
                estimate: self.estimator(),
            };
        // The client's tools count in the prompt. When they alone make it overflow the
        // window (Open WebUI offers its dozen built-in tools, thousands of tokens, to every
        // model), the question is answered without them rather than refused: the model
        // cannot call a tool, but the user gets an answer.
        let first = if tools.is_empty() {
            self.assemble(base(true, history, messages)).await
        } else {
            match self
                .assemble(base(true, history.clone(), messages.clone()))
                .await
            {
                Err(e) if e.code == Some("context_length_exceeded") => {
                    let without = self.assemble(base(false, history, messages)).await;
                    if without.is_ok() {
                        tracing::warn!(
                            stage = "assemble",
                            tools = request.tools.len(),
                            tool_chars = tools.len(),
                            "the client's tools do not fit the window: answered without them"
                        );
                        request.tools.clear();
                        request.tool_choice = None;
                    }
                    without
                }
                other => other,
            }
        };
        let Fitted {
            messages: assembled,
            smaller,
            counted,
            tokens: prompt_tokens,
            used_items,
        } = first?;
        request.model = self.config.upstream_model.clone();
        request.input = Input::Chat(assembled);
        // The shared upstream's model is the gateway's to load: no reloads, no other
        // keep_alive than the configured one, the window it was budgeted for.
        let options = &mut request.params.extra_options;
        options.retain(|k, _| SAMPLING_OPTIONS.contains(&k.as_str()));
        if self.config.send_num_ctx {
            options.insert("num_ctx".into(), Value::from(window));
        }
        request.params.keep_alive = self.config.keep_alive.as_deref().map(keep_alive);
        let memory = match (held, &self.sessions) {
            (Some(held), Some(sessions)) => Some(Memory {
                sessions: sessions.clone(),
                held: Some(held),
                privacy: self.privacy.clone(),
                question: query,
                attached: used_items.iter().map(UsedItem::reference).collect(),
                answer: String::new(),
                cut: false,
            }),
            _ => None,
        };
        let fallback = smaller.map(|messages| UpstreamRequest {
            input: Input::Chat(messages),
            ..request.clone()
        });
        let retry = fallback.map(|request| Retry {
            request,
            // An empty stream means "too long" only when the prompt was not counted.
            on_close: !counted,
        });
        let prompt = Prompt {
            request,
            tokens: prompt_tokens,
            retry,
        };
        self.generate(prompt, &hits, used_items, memory, clock, started)
            .await
    }

    /// Session: waits for the session's earlier turns to finish (at most
    /// `sessions.wait_secs`: 409 `session_busy` then) and loads its history, unless the
    /// client sent its own conversation (any assistant message): the stored one is for
    /// clients that send only the new message.
    async fn session(
        &self,
        session: Option<SessionKey>,
        messages: &[Message],
        editor: &EditorContext,
    ) -> Result<(Option<Held>, Vec<Message>), GatewayError> {
        let span = tracing::info_span!(target: trace::TARGET, "session",
            assist.session = session.is_some(), assist.history.turns = Empty);
        let t = Instant::now();
        let held = match (&self.sessions, session) {
            (Some(sessions), Some(key)) if !key.id.is_empty() => Some(
                sessions
                    .hold(key)
                    .instrument(span.clone())
                    .await
                    .map_err(|busy| {
                        tracing::warn!(stage = "session", ms = ms(t), "the session is busy");
                        trace::fail(&span, "session_busy");
                        GatewayError::session_busy(busy.to_string())
                    })?,
            ),
            _ => None,
        };
        let client_has_history = messages.iter().any(|m| m.role == Role::Assistant);
        let history: Vec<Message> = match &held {
            Some(h) if !client_has_history => h.history.iter().flat_map(Turn::messages).collect(),
            _ => Vec::new(),
        };
        span.record("assist.history.turns", history.len() as i64 / 2);
        tracing::info!(
            stage = "session",
            ms = ms(t),
            session = held.is_some(),
            stored_turns = held.as_ref().map_or(0, |h| h.history.len()),
            used_messages = history.len(),
            client_messages = messages.len(),
            selected_chars = editor.selected_text.len(),
            editor_chars = editor.editor_content.len(),
            extra_chars = editor.extra_context.len(),
            items = editor.items.len(),
            items_disabled = editor.skipped.disabled,
            items_duplicate = editor.skipped.duplicates,
            diagnostics = editor.diagnostics.len(),
            edits = editor.edits.len(),
            cursor = editor.cursor.is_some(),
            "stage"
        );
        telemetry::stage("session", t.elapsed());
        Ok((held, history))
    }

    /// What a turn means, as the assistant answers it: classify (the query's type, whether
    /// it refers to the code in the editor), then, unless it is small talk, the search
    /// query (from the conversation too) and what it finds. The same stages `eval turns`
    /// measures.
    pub async fn understand_turn(
        &self,
        query: &str,
        conversation: &[Message],
        editor: &EditorContext,
    ) -> Understood {
        self.understand(query, conversation, editor, &UpstreamClock::default())
            .await
    }

    async fn understand(
        &self,
        query: &str,
        conversation: &[Message],
        editor: &EditorContext,
        clock: &UpstreamClock,
    ) -> Understood {
        let decision = self.classify(query, conversation, editor, clock).await;
        let query_type = decision.classification.query_type;
        let use_editor = decision.classification.refers_to_editor && editor.has_code();
        let (search, hits) = if query_type == QueryType::Conversational {
            (None, Vec::new())
        } else {
            let selection = use_editor.then_some(editor.selected_text.as_str());
            let (search, hits) = self
                .retrieve(query, query_type, conversation, selection, clock)
                .await;
            (Some(search), hits)
        };
        Understood {
            query_type,
            use_editor,
            editor_rule: decision.editor_rule,
            route_rule: decision.route_rule,
            search,
            hits,
        }
    }

    /// Classify: the query's type, and whether it refers to the code in the editor
    /// (only when there is code to refer to). The log line says the decisions and the
    /// rules that made them; `assist_turn_decisions_total` counts them.
    async fn classify(
        &self,
        query: &str,
        conversation: &[Message],
        editor: &EditorContext,
        clock: &UpstreamClock,
    ) -> classify::Decision {
        let t = Instant::now();
        let span = tracing::info_span!(target: trace::TARGET, "classify",
            assist.query_type = Empty, assist.editor = Empty, assist.editor_rule = Empty,
            assist.route_rule = Empty, assist.by = Empty);
        let decision = self
            .classifier
            .classify(&ClassifyInput {
                query,
                history: conversation,
                editor,
            })
            .instrument(span.clone())
            .await;
        if decision.asked_model() {
            clock.since(t);
        }
        telemetry::stage("classify", t.elapsed());
        let query_type = decision.classification.query_type;
        let use_editor = decision.classification.refers_to_editor && editor.has_code();
        let retrieve = query_type != QueryType::Conversational;
        telemetry::turn_decision("editor", use_editor, decision.editor_rule);
        telemetry::turn_decision("retrieve", retrieve, decision.route_rule);
        span.record("assist.query_type", query_type.as_str());
        span.record("assist.editor", use_editor);
        span.record("assist.editor_rule", decision.editor_rule);
        span.record("assist.route_rule", decision.route_rule);
        span.record("assist.by", decision.by);
        tracing::info!(
            stage = "classify",
            ms = ms(t),
            query_type = query_type.as_str(),
            editor = if use_editor { "EDITOR" } else { "NO_EDITOR" },
            editor_rule = decision.editor_rule,
            retrieve,
            route_rule = decision.route_rule,
            by = decision.by,
            "stage"
        );
        decision
    }

    /// Reformulate, then retrieve: the search query and the knowledge chunks it finds;
    /// none (and a warning) when retrieval fails.
    async fn retrieve(
        &self,
        query: &str,
        query_type: QueryType,
        conversation: &[Message],
        selection: Option<&str>,
        clock: &UpstreamClock,
    ) -> (reformulate::Reformulation, Vec<Scored>) {
        let t = Instant::now();
        let span = tracing::info_span!(target: trace::TARGET, "reformulate",
            assist.by = Empty, assist.anchored = Empty, assist.search_chars = Empty);
        let search = self
            .reformulator
            .reformulate(query, query_type, conversation, selection)
            .instrument(span.clone())
            .await;
        span.record("assist.by", search.by);
        span.record("assist.anchored", search.anchored);
        span.record("assist.search_chars", search.query.chars().count() as i64);
        drop(span);
        tracing::info!(
            stage = "reformulate",
            ms = ms(t),
            query_chars = query.chars().count(),
            search_chars = search.query.chars().count(),
            anchored = search.anchored,
            by = search.by,
            "stage"
        );
        if search.asked_model() {
            clock.since(t);
        }
        telemetry::stage("reformulate", t.elapsed());
        let t = Instant::now();
        let span = tracing::info_span!(target: trace::TARGET, "retrieve",
            otel.name = "retrieval knowledge", gen_ai.operation.name = "retrieval",
            gen_ai.data_source.id = "knowledge", assist.retrieval.count = Empty);
        let found = self
            .retriever
            .find(&search.query)
            .instrument(span.clone())
            .await;
        telemetry::stage("retrieve", t.elapsed());
        match &found {
            Ok(found) => self.trace_hits(&span, &search.query, &found.hits),
            Err(_) => trace::fail(&span, "retrieval"),
        }
        let hits = match found {
            Ok(found) => {
                tracing::info!(
                    stage = "retrieve",
                    ms = ms(t),
                    lexical = found.lexical,
                    dense = found.dense,
                    across = found.across,
                    fused = found.hits.len(),
                    "stage"
                );
                found.hits
            }
            Err(e) => {
                tracing::warn!(stage = "retrieve", ms = ms(t), error = %e, "retrieval failed: answering without knowledge");
                Vec::new()
            }
        };
        (search, hits)
    }

    /// Assemble: the messages the upstream model gets, within its window, measured with
    /// the upstream's tokenizer when it has one (the estimate scaled by what it counted,
    /// then checked: cut further while the count is over), else estimated. Also, for a
    /// prompt that fills most of the window, a smaller one (half the room for context) to
    /// retry with if the upstream still finds it too long. An error when even the client's
    /// own messages and the answer do not fit. Also whether the prompt was counted, and
    /// its size (counted, else estimated).
    async fn assemble(&self, request: assemble::Request<'_>) -> Result<Fitted, GatewayError> {
        let span = tracing::info_span!(target: trace::TARGET, "assemble",
            assist.window.tokens = request.window_tokens as i64,
            assist.answer.tokens = request.answer_tokens as i64,
            assist.prompt.tokens = Empty, assist.prompt.counted = Empty,
            assist.sections = Empty, assist.history.dropped = Empty);
        let fitted = self.assemble_in(request).instrument(span.clone()).await;
        match &fitted {
            Ok(f) => {
                span.record("assist.prompt.tokens", f.tokens as i64);
                span.record("assist.prompt.counted", f.counted);
            }
            Err(e) => trace::fail(&span, e.code.unwrap_or(e.kind)),
        }
        fitted
    }

    async fn assemble_in(&self, request: assemble::Request<'_>) -> Result<Fitted, GatewayError> {
        let t = Instant::now();
        let window = request.window_tokens;
        let answer = request.answer_tokens;
        let limit = window.saturating_sub(answer);
        let mut estimate = request.estimate;
        let mut counted = None;
        let mut rounds = 0;
        // Counting is worth a few seconds at most, whatever the upstream's tokenizer does.
        let deadline = t + Duration::from_secs(3);
        let assembled = loop {
            let assembled = assemble::assemble(assemble::Request {
                history: request.history.clone(),
                messages: request.messages.clone(),
                estimate,
                ..request
            });
            let total = if Instant::now() < deadline {
                self.count(&assembled.messages, request.tools).await
            } else {
                None
            };
            let Some(total) = total else {
                if counted.is_none() && estimate.scale < 1.0 {
                    // Not checked: the estimate as it is (it errs high), not as learned.
                    estimate.scale = 1.0;
                    continue;
                }
                if counted.is_none()
                    && assembled.estimated_tokens as f64 > limit as f64 * ESTIMATE_OVERCOUNT
                {
                    // Only the client's own messages are left, and they are over the
                    // window by more than the estimate can overcount: forwarded, they
                    // would be cut by the upstream (Ollama drops the start of a prompt
                    // longer than num_ctx) or refused. Nearer the window, the upstream's
                    // own refusal decides (and a shorter prompt is tried once).
                    tracing::warn!(
                        stage = "assemble",
                        window,
                        answer_tokens = answer,
                        estimated_tokens = assembled.estimated_tokens,
                        "the client's messages alone do not fit the window (estimated)"
                    );
                    return Err(GatewayError::context_length_exceeded(format!(
                        "this model's window is {window} tokens: the prompt (the messages and \
                         the assistant's instructions) takes about {} by the gateway's \
                         estimate and the answer {answer} more; shorten the messages or ask \
                         for fewer tokens",
                        assembled.estimated_tokens
                    )));
                }
                break assembled;
            };
            counted = Some(total);
            if rounds == 0 {
                self.learn_scale(total, assembled.estimated_tokens, estimate.scale);
            }
            if total <= limit {
                break assembled;
            }
            if !assembled.can_shrink {
                tracing::warn!(
                    stage = "assemble",
                    window,
                    answer_tokens = answer,
                    prompt_tokens = total,
                    "the client's messages alone do not fit the window"
                );
                return Err(GatewayError::context_length_exceeded(format!(
                    "this model's window is {window} tokens: the prompt (the messages and the \
                     assistant's instructions) takes {total} and the answer {answer} more; \
                     shorten the messages or ask for fewer tokens"
                )));
            }
            rounds += 1;
            estimate.scale = if rounds >= 3 {
                // Nothing but the client's own messages.
                1e6
            } else {
                estimate.scale * total as f64 / limit as f64 * 1.05
            };
        };
        // Retrying is worth it only for a long prompt with something left to cut.
        let long = assembled.estimated_tokens.max(counted.unwrap_or(0)) * 2 >= limit;
        let smaller = (long && assembled.can_shrink).then(|| {
            assemble::assemble(assemble::Request {
                estimate: Estimator {
                    scale: estimate.scale * 2.0,
                },
                ..request
            })
            .messages
        });
        let cut: Vec<&str> = assembled
            .sections
            .iter()
            .filter(|r| r.kept_chars < r.chars)
            .map(|r| r.tag)
            .collect();
        let span = tracing::Span::current();
        trace::set_strings(&span, "assist.context.cut", &cut);
        span.record("assist.sections", assembled.sections.len() as i64);
        span.record("assist.history.dropped", assembled.history_dropped as i64);
        tracing::info!(
            stage = "assemble",
            ms = ms(t),
            window,
            context_budget = assembled.context_budget,
            estimated_tokens = assembled.estimated_tokens,
            counted_tokens = counted,
            rounds,
            sections = assembled.sections.len(),
            cut = ?cut,
            history_dropped = assembled.history_dropped,
            messages = assembled.messages.len(),
            "stage"
        );
        telemetry::stage("assemble", t.elapsed());
        Ok(Fitted {
            tokens: counted.unwrap_or(assembled.estimated_tokens),
            counted: counted.is_some(),
            messages: assembled.messages,
            smaller,
            used_items: assembled.used_items,
        })
    }

    /// The prompt's tokens by the upstream's tokenizer, chat template included; `None`
    /// when it has no tokenizer or did not answer.
    async fn count(&self, messages: &[Message], tools: &str) -> Option<usize> {
        let counter = self.tokens.as_ref()?;
        let size = tools.len() + messages.iter().map(|m| m.content.len() + 1).sum::<usize>();
        let mut text = String::with_capacity(size);
        for m in messages {
            text.push_str(&m.content);
            text.push('\n');
        }
        text.push_str(tools);
        let n = counter.count(&text).await?;
        Some(n + assemble::template_tokens(messages.len()))
    }

    /// The tokens of a conversation and its tools as a client sends them (Anthropic's
    /// `count_tokens`): by the upstream's tokenizer when it has one, else the estimate
    /// scaled to what the tokenizer was seen to count.
    pub async fn count_prompt(&self, messages: &[Message], tools: &[Value]) -> u64 {
        let tools = if tools.is_empty() {
            String::new()
        } else {
            Value::Array(tools.to_vec()).to_string()
        };
        if let Some(n) = self.count(messages, &tools).await {
            return n as u64;
        }
        let estimate = self.estimator();
        let text: usize = messages.iter().map(|m| estimate.tokens(&m.content)).sum();
        (text + estimate.tokens(&tools) + assemble::template_tokens(messages.len())) as u64
    }

    /// Estimates scaled to the upstream's tokenizer, as far as it was seen.
    fn estimator(&self) -> Estimator {
        let learned = f64::from_bits(self.scale.load(std::sync::atomic::Ordering::Relaxed));
        Estimator {
            // A little over what was seen: counts vary with the text.
            scale: learned * 1.05,
        }
    }

    /// Learns how the upstream's counts compare with the estimate, from one prompt that
    /// was estimated at `estimated` with `scale` and counted at `counted`.
    fn learn_scale(&self, counted: usize, estimated: usize, scale: f64) {
        let raw = estimated as f64 / scale;
        if raw < 64.0 || !raw.is_finite() {
            return;
        }
        let seen = (counted as f64 / raw).clamp(0.2, 4.0);
        let cell = &self.scale;
        let _ = cell.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |bits| {
                let old = f64::from_bits(bits);
                // Quick to follow a higher count (overflow), slow to trust a lower one; one
                // odd prompt moves it by a quarter at most.
                let next = if seen > old {
                    seen.min(old * 1.25)
                } else {
                    old * 0.8 + seen * 0.2
                };
                Some(next.to_bits())
            },
        );
    }

    /// Generate: the upstream's answer as events, with the sources first and the turn
    /// saved to its session when the answer ends (or is cut off). When the upstream finds
    /// the prompt too long, the retry's smaller one is sent instead, once.
    async fn generate(
        &self,
        prompt: Prompt,
        hits: &[Scored],
        items: Vec<UsedItem>,
        memory: Option<Memory>,
        clock: Arc<UpstreamClock>,
        started: Instant,
    ) -> Result<EventStream, GatewayError> {
        let Prompt {
            request,
            tokens,
            retry,
        } = prompt;
        let sources: Vec<Source> = hits.iter().map(Source::of).collect();
        let span = self.chat_span("chat", &request);
        let chunks = match clock
            .time(self.chat.stream(request))
            .instrument(span.clone())
            .await
        {
            // The upstream said so, or (llama-cpp-python, on an uncounted prompt) ended
            // the stream before a word.
            Err(e)
                if retry.as_ref().is_some_and(|r| {
                    e.is_context_overflow() || (r.on_close && e.kind == UpstreamErrorKind::Closed)
                }) =>
            {
                tracing::warn!(
                    stage = "generate",
                    "the upstream found the prompt too long: retrying with less context"
                );
                let smaller = retry.ok_or_else(|| GatewayError::from(e))?.request;
                trace::event(&span, "retry with less context", Vec::new());
                clock
                    .time(self.chat.stream(smaller))
                    .instrument(span.clone())
                    .await
                    .inspect_err(|e| trace::fail(&span, upstream_kind(e)))?
            }
            other => other.inspect_err(|e| trace::fail(&span, upstream_kind(e)))?,
        };
        tracing::debug!(ms = ms(started), "upstream accepted the assistant turn");
        Ok(answer_events(
            chunks,
            self.upstream(clock, span),
            tokens as u64,
            Some(Assistant {
                sources,
                items,
                cite: self.config.cite_sources,
                memory,
                started,
            }),
        ))
    }

    /// Fill-in-the-middle: the completion model's FIM prompt with repository snippets,
    /// sent raw; the middle ended by the gateway's rules (see `fill`). No classifier, no
    /// reformulator, no session: this path is about latency.
    async fn run_fill(
        &self,
        turn: ChatTurn,
        clock: Arc<UpstreamClock>,
    ) -> Result<EventStream, GatewayError> {
        let started = Instant::now();
        let mut request = turn.request;
        let Input::Prompt {
            prompt,
            suffix,
            system,
            ..
        } = &mut request.input
        else {
            return Err(GatewayError::internal("a completion without a prompt"));
        };
        let mut suffix = match suffix.take() {
            Some(s) => s,
            None => {
                let (p, s) = fill::split_templated(prompt).unwrap_or_default();
                *prompt = p;
                s
            }
        };
        let mut cleaned = self.privacy.clean(prompt);
        cleaned.add(self.privacy.clean(&mut suffix));
        if let Some(system) = system.as_mut() {
            cleaned.add(self.privacy.clean(system));
        }
        if !cleaned.is_empty() {
            cleaned.count("completion");
        }
        let prefix = prompt.clone();
        request.model = self.config.completion_model.clone();
        let Some(template) =
            fill::Template::choose(&self.config.completion_template, &request.model)
        else {
            // A family the gateway does not know: the upstream's own FIM (Ollama renders
            // the model's template with the suffix).
            if let Input::Prompt { suffix: s, .. } = &mut request.input {
                *s = Some(suffix);
            }
            let estimate = estimate_tokens(&request.input);
            let span = self.chat_span("text_completion", &request);
            let chunks = clock
                .time(self.chat.stream(request))
                .instrument(span.clone())
                .await
                .inspect_err(|e| trace::fail(&span, upstream_kind(e)))?;
            return Ok(answer_events(
                chunks,
                self.upstream(clock, span),
                estimate,
                None,
            ));
        };
        let repo = if self.config.completion_context_chars == 0 {
            Vec::new()
        } else {
            let query = fill::query(&prefix, &suffix);
            let search = self
                .retriever
                .search(&query, crate::retrieval::hybrid::Mode::Lexical);
            match tokio::time::timeout(self.config.completion_deadline, search).await {
                Ok(Ok(mut hits)) => {
                    self.protect_hits(&mut hits);
                    fill::repository(
                        &hits,
                        &prefix,
                        &suffix,
                        self.config.completion_context_chars,
                    )
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %format!("{e:#}"), "completion: the repository search failed");
                    Vec::new()
                }
                Err(_) => {
                    tracing::info!("completion: the repository search missed its deadline");
                    Vec::new()
                }
            }
        };
        let text = template.render(&prefix, &suffix, &repo);
        tracing::info!(
            stage = "fill",
            ms = ms(started),
            template = ?template,
            prefix_chars = prefix.len(),
            suffix_chars = suffix.len(),
            snippets = repo.len(),
            "stage"
        );
        request.input = Input::Prompt {
            prompt: text,
            suffix: None,
            system: None,
            raw: true,
            images: Vec::new(),
        };
        for stop in template.stops() {
            if !request.params.stop.iter().any(|s| s == stop) {
                request.params.stop.push((*stop).to_string());
            }
        }
        let estimate = estimate_tokens(&request.input);
        let span = self.chat_span("text_completion", &request);
        let chunks = clock
            .time(self.chat.stream(request))
            .instrument(span.clone())
            .await
            .inspect_err(|e| trace::fail(&span, upstream_kind(e)))?;
        let events = answer_events(chunks, self.upstream(clock, span), estimate, None);
        Ok(ended(events, fill::Ender::new(template, &prefix, &suffix)))
    }

    /// The client's context and messages (their tool calls too) with `[privacy]` applied.
    fn protect(&self, editor: &mut EditorContext, messages: &mut [Message]) -> Cleaned {
        let mut texts: Vec<String> = messages
            .iter_mut()
            .map(|m| std::mem::take(&mut m.content))
            .collect();
        let mut protected = crate::context::protect::protect(editor, &mut texts, &self.privacy);
        for (m, text) in messages.iter_mut().zip(texts) {
            m.content = text;
            for call in &mut m.tool_calls {
                protected
                    .cleaned
                    .add(self.privacy.clean_json(&mut call.arguments));
            }
        }
        protected.cleaned
    }

    /// Retrieved chunks with `[privacy]` applied: those from excluded paths left out, the
    /// rest cleaned (indexes written before redaction, or with other rules, hold what they
    /// held; a file name may carry invisible characters).
    fn protect_hits(&self, hits: &mut Vec<Scored>) {
        hits.retain(|h| !self.privacy.excluded(&h.chunk.source_file));
        let mut cleaned = Cleaned::default();
        for hit in hits.iter_mut() {
            let c = &mut hit.chunk;
            cleaned.add(self.privacy.clean(&mut c.text));
            cleaned.add(self.privacy.clean(&mut c.section));
            cleaned.add(self.privacy.clean(&mut c.source_file));
        }
        if !cleaned.is_empty() {
            cleaned.count("knowledge");
        }
    }

    /// A passthrough request's texts, cleaned.
    fn protect_input(&self, input: &mut Input) {
        let mut cleaned = Cleaned::default();
        match input {
            Input::Chat(messages) => {
                for m in messages {
                    cleaned.add(self.privacy.clean(&mut m.content));
                    for call in &mut m.tool_calls {
                        cleaned.add(self.privacy.clean_json(&mut call.arguments));
                    }
                }
            }
            Input::Prompt {
                prompt,
                suffix,
                system,
                ..
            } => {
                cleaned.add(self.privacy.clean(prompt));
                for text in [suffix, system].into_iter().flatten() {
                    cleaned.add(self.privacy.clean(text));
                }
            }
        }
        if !cleaned.is_empty() {
            tracing::info!(
                secrets = ?cleaned.secrets,
                invisible = cleaned.invisible,
                "redacted before the upstream"
            );
            cleaned.count("passthrough");
        }
    }

    fn upstream(&self, clock: Arc<UpstreamClock>, span: tracing::Span) -> Upstream {
        let traced = !span.is_disabled();
        Upstream {
            url: self.chat.base_url().to_string(),
            idle_timeout: self.config.idle_timeout,
            clock,
            span,
            asked: Instant::now(),
            privacy: (traced && trace::capture_content()).then(|| self.privacy.clone()),
        }
    }

    /// The span of one request to the upstream model (`chat qwen2.5-coder`), after the
    /// GenAI conventions; with content capture, the messages it is given.
    fn chat_span(&self, operation: &'static str, request: &UpstreamRequest) -> tracing::Span {
        if !trace::enabled() {
            return tracing::Span::none();
        }
        let span = tracing::info_span!(target: trace::TARGET, "chat",
            otel.name = format!("{operation} {}", request.model).as_str(),
            otel.kind = "client",
            gen_ai.operation.name = operation,
            gen_ai.provider.name = if self.config.send_num_ctx { "ollama" } else { "openai" },
            gen_ai.request.model = request.model.as_str(),
            gen_ai.request.stream = true,
            server.address = self.server.0.as_str(),
            server.port = self.server.1,
            gen_ai.request.max_tokens = request.params.max_tokens.map(i64::from),
            gen_ai.request.temperature = request.params.temperature,
            // The upstream does not say which model answered: the one asked.
            gen_ai.response.model = request.model.as_str(),
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.response.time_to_first_chunk = Empty,
            assist.tools = request.tools.len() as i64,
        );
        if trace::capture_content() {
            let messages = match &request.input {
                Input::Chat(messages) => trace::messages_json(
                    messages
                        .iter()
                        .map(|m| (m.role.as_str(), m.content.as_str())),
                ),
                Input::Prompt { prompt, .. } => trace::messages_json([("user", prompt.as_str())]),
            };
            trace::set(&span, "gen_ai.input.messages", messages);
        }
        span
    }

    /// A search's hits on its span: ids and scores (`assist.retrieval.hits`, and as
    /// `gen_ai.retrieval.documents`, with their cleaned texts and the query when content
    /// is captured). Hits of excluded paths are left out, as they are from the prompt.
    fn trace_hits(&self, span: &tracing::Span, query: &str, hits: &[Scored]) {
        if span.is_disabled() {
            return;
        }
        let kept: Vec<&Scored> = hits
            .iter()
            .filter(|h| !self.privacy.excluded(&h.chunk.source_file))
            .collect();
        span.record("assist.retrieval.count", kept.len() as i64);
        let ids = trace::documents_json(
            kept.iter()
                .map(|h| (h.chunk.chunk_id.as_str(), h.score, None)),
        );
        trace::set(span, "assist.retrieval.hits", ids.clone());
        if trace::capture_content() {
            let texts: Vec<String> = kept
                .iter()
                .map(|h| {
                    let mut text = h.chunk.text.clone();
                    let _ = self.privacy.clean(&mut text);
                    text
                })
                .collect();
            let docs = trace::documents_json(
                kept.iter()
                    .zip(&texts)
                    .map(|(h, t)| (h.chunk.chunk_id.as_str(), h.score, Some(t.as_str()))),
            );
            trace::set(span, "gen_ai.retrieval.documents", docs);
            let mut query = query.to_string();
            let _ = self.privacy.clean(&mut query);
            trace::set(span, "gen_ai.retrieval.query.text", query);
        } else {
            trace::set(span, "gen_ai.retrieval.documents", ids);
        }
    }

    /// The upstream model's context window: Ollama's `num_ctx`, else its trained length
    /// (both capped by `assistant.context_tokens`), else `assistant.context_tokens`.
    /// Learned once; an upstream that cannot tell yet is asked again next time.
    async fn window(&self) -> usize {
        let configured = self.config.context_tokens as usize;
        if let Some(w) = self.window.get() {
            return *w;
        }
        match tokio::time::timeout(
            Duration::from_secs(2),
            self.chat.show(&self.config.upstream_model),
        )
        .await
        {
            Ok(Ok(card)) => {
                let reported = num_ctx(&card).or(card.context_length.map(|n| n as usize));
                let window = reported.map_or(configured, |n| n.clamp(256, configured));
                let _ = self.window.set(window);
                window
            }
            _ => configured,
        }
    }

    /// The assistant, then (with passthrough) the upstream's models. An unreachable
    /// upstream leaves the assistant listed alone.
    pub async fn models(&self) -> Vec<ServedModel> {
        let mut out = vec![ServedModel::Assistant {
            name: self.config.assistant_model.clone(),
        }];
        if self.config.passthrough {
            match self.chat.models().await {
                Ok(models) => {
                    self.remember_models(&models);
                    out.extend(
                        models
                            .into_iter()
                            .filter(|m| !self.is_assistant(&m.id))
                            .map(ServedModel::Upstream),
                    )
                }
                Err(e) => tracing::warn!(error = %e, "could not list the upstream's models"),
            }
        }
        out
    }

    /// The metric label of a model a client named: the name itself when it is served
    /// (the assistant, or a model the upstream listed, with passthrough), else `other`,
    /// so that clients cannot make up label values.
    pub fn model_label(&self, asked: &str) -> String {
        if self.is_assistant(asked) || (self.config.passthrough && self.lists(asked)) {
            asked.to_string()
        } else {
            "other".to_string()
        }
    }

    /// Whether the upstream's last listing has this model (with or without `:latest`).
    fn lists(&self, name: &str) -> bool {
        let known = self
            .upstream_models
            .read()
            .unwrap_or_else(|e| e.into_inner());
        self.lists_in(&known, name)
    }

    fn lists_in(&self, known: &KnownModels, name: &str) -> bool {
        let bare = name.strip_suffix(":latest").unwrap_or(name);
        known.names.contains(name)
            || known.names.contains(bare)
            || known.names.contains(&format!("{bare}:latest"))
    }

    fn remember_models(&self, models: &[UpstreamModel]) {
        let mut known = self
            .upstream_models
            .write()
            .unwrap_or_else(|e| e.into_inner());
        known.names = models.iter().map(|m| m.id.clone()).collect();
        known.listed = Some(Instant::now());
        known.answered = true;
    }

    /// Whether the upstream serves `name`: listed, or not known otherwise because the
    /// upstream could not list its models (then its own answer decides). Lists the
    /// upstream's models again when `name` is not among those it listed and the listing
    /// is older than a minute (at most once a minute).
    async fn learn_models(&self, name: &str) -> bool {
        if self.lists(name) {
            return true;
        }
        // Requests that find the listing stale wait for one refresh, then look again.
        let _one_at_a_time = self.listing.lock().await;
        let stale = {
            let known = self
                .upstream_models
                .read()
                .unwrap_or_else(|e| e.into_inner());
            known.listed.is_none_or(|at| at.elapsed() > MODEL_LIST_TTL)
        };
        if stale && !self.lists(name) {
            // Requests wait on this listing: a slow upstream is taken as one that could
            // not list (its own answer then decides).
            let listed = tokio::time::timeout(Duration::from_secs(5), self.chat.models()).await;
            if let Ok(Ok(models)) = listed {
                self.remember_models(&models);
            } else {
                // Not again for a minute.
                let mut known = self
                    .upstream_models
                    .write()
                    .unwrap_or_else(|e| e.into_inner());
                known.listed = Some(Instant::now());
                known.answered = false;
            }
        }
        let known = self
            .upstream_models
            .read()
            .unwrap_or_else(|e| e.into_inner());
        !known.answered || self.lists_in(&known, name)
    }

    /// One served model by name, or 404.
    pub async fn model(&self, name: &str) -> Result<ServedModel, GatewayError> {
        if self.is_assistant(name) {
            return Ok(ServedModel::Assistant {
                name: self.config.assistant_model.clone(),
            });
        }
        self.route(name)?;
        let models = self.chat.models().await?;
        self.remember_models(&models);
        models
            .into_iter()
            .find(|m| m.id == name || m.id.strip_suffix(":latest") == Some(name))
            .map(ServedModel::Upstream)
            .ok_or_else(|| GatewayError::model_not_found(name))
    }

    /// What `/api/show` tells about a model.
    pub async fn show(&self, name: &str) -> Result<ModelCard, GatewayError> {
        match self.route(name)? {
            Route::Assistant => Ok(ModelCard {
                context_length: Some(u64::from(self.config.context_tokens)),
                details: None,
                parameters: Some(format!("num_ctx {}", self.config.context_tokens)),
                template: None,
                capabilities: vec!["completion".into(), "tools".into()],
                model_info: None,
            }),
            Route::Passthrough => Ok(self.chat.show(name).await?),
        }
    }

    /// Whether the upstream answers at all (for `/ready`).
    /// Whether each upstream (primary, then fallbacks) answers, each within `wait`.
    pub async fn upstream_ready(&self, wait: Duration) -> Vec<UpstreamProbe> {
        self.chat.probe(wait).await
    }
}

/// An assembled prompt, fitted to the window.
struct Fitted {
    messages: Vec<Message>,
    /// A smaller one for when the upstream finds this one too long.
    smaller: Option<Vec<Message>>,
    /// Its size was counted by the upstream's tokenizer (else estimated).
    counted: bool,
    tokens: usize,
    /// The attached context items in it.
    used_items: Vec<UsedItem>,
}

/// The assistant's extras around an answer.
struct Assistant {
    sources: Vec<Source>,
    /// The attached context items the prompt held.
    items: Vec<UsedItem>,
    cite: bool,
    memory: Option<Memory>,
    started: Instant,
}

/// The assistant's prompt, as it goes to the upstream.
struct Prompt {
    request: UpstreamRequest,
    /// Its size (counted, else estimated), for upstreams that report no usage.
    tokens: usize,
    retry: Option<Retry>,
}

/// A shorter prompt for when the upstream finds the first one too long.
struct Retry {
    request: UpstreamRequest,
    /// Also when the stream ends before its first token (how llama-cpp-python refuses a
    /// streamed prompt), which is taken as "too long" only for prompts not counted.
    on_close: bool,
}

/// The turn being answered, saved to its session when the answer ends, or, when the
/// stream is dropped first (the client went away), saved as interrupted with what was
/// streamed so far.
/// The answer is kept only to `sessions.max_session_bytes` (with the question) while it
/// streams: an answer that never ends cannot grow the gateway's memory.
struct Memory {
    sessions: Arc<Sessions>,
    /// The answer is cleaned before it is kept (a model may repeat what it was shown).
    privacy: Arc<Privacy>,
    held: Option<Held>,
    question: String,
    /// The attached items the question came with, named (`file src/a.rs`).
    attached: Vec<String>,
    answer: String,
    /// Part of the answer was not kept.
    cut: bool,
}

/// What ends a turn whose answer was longer than the session may keep.
const CUT_MARK: &str = " [answer cut: longer than sessions.max_session_bytes]";

impl Memory {
    /// Keeps `text` as the answer's next piece, as far as the turn has room.
    fn keep(&mut self, text: &str) {
        if self.cut {
            return;
        }
        let used = self.question.len() + self.answer.len();
        let room = self.sessions.max_turn_bytes().saturating_sub(used);
        if text.len() <= room {
            self.answer.push_str(text);
            return;
        }
        let mut end = room;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.answer.push_str(&text[..end]);
        self.cut = true;
    }

    fn turn(&mut self, interrupted: bool) -> Turn {
        let mut assistant = std::mem::take(&mut self.answer);
        let cleaned = self.privacy.clean(&mut assistant);
        if !cleaned.is_empty() {
            cleaned.count("session");
        }
        if self.cut {
            assistant.push_str(CUT_MARK);
        }
        Turn {
            attached: std::mem::take(&mut self.attached),
            interrupted,
            ..Turn::new(std::mem::take(&mut self.question), assistant)
        }
    }

    async fn save(mut self, interrupted: bool) {
        if let Some(held) = self.held.take() {
            let turn = self.turn(interrupted);
            self.sessions.save(held, turn).await;
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        let turn = self.turn(true);
        let sessions = self.sessions.clone();
        tracing::info!(
            answer_chars = turn.assistant.len(),
            "the answer was interrupted: saving what was streamed"
        );
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { sessions.save(held, turn).await });
            }
            Err(_) => tracing::error!("no runtime to save the interrupted turn"),
        }
    }
}

/// Where an answer streams from, for its errors.
struct Upstream {
    url: String,
    idle_timeout: Duration,
    /// Time spent awaiting the next chunk is upstream time.
    clock: Arc<UpstreamClock>,
    /// The span of the request to the upstream, ended with the answer.
    span: tracing::Span,
    /// When the upstream was asked (for the time to the first token).
    asked: Instant,
    /// With content capture: the rules the answer is cleaned by before it is recorded.
    privacy: Option<Arc<Privacy>>,
}

impl Drop for Upstream {
    /// The upstream's span ends with its answer (ended, failed, or dropped).
    fn drop(&mut self) {
        trace::end_now(&self.span);
    }
}

impl Upstream {
    /// The first piece of the answer arrived.
    fn first_token(&self) {
        let secs = self.asked.elapsed().as_secs_f64();
        self.span
            .record("gen_ai.response.time_to_first_chunk", secs);
        trace::event(&self.span, "first token", Vec::new());
    }

    /// The answer ended well: its usage and why it stopped, and (captured) the answer.
    fn done(&self, finish: FinishReason, usage: Usage, answer: &mut String) {
        let span = &self.span;
        if span.is_disabled() {
            return;
        }
        span.record("gen_ai.usage.input_tokens", usage.prompt_tokens as i64);
        span.record("gen_ai.usage.output_tokens", usage.completion_tokens as i64);
        trace::set_strings(span, "gen_ai.response.finish_reasons", &[finish.as_str()]);
        if let Some(privacy) = &self.privacy {
            let _ = privacy.clean(answer);
            let messages = serde_json::json!([{"role": "assistant",
                "parts": [{"type": "text", "content": answer}], "finish_reason": finish.as_str()}]);
            trace::set(span, "gen_ai.output.messages", messages.to_string());
            trace::set(span, "output.value", std::mem::take(answer));
        }
    }
}

/// Upstream chunks → pipeline events; usage is estimated when the upstream gave none. An
/// upstream silent for longer than the idle timeout ends the answer with a timeout error
/// (dropping the chunk stream cancels the upstream request).
fn answer_events(
    mut chunks: ChunkStream,
    upstream: Upstream,
    prompt_estimate: u64,
    assistant: Option<Assistant>,
) -> EventStream {
    async_stream::stream! {
        let (sources, items, cite, mut memory, started) = match assistant {
            Some(a) => (Some(a.sources), a.items, a.cite, a.memory, Some(a.started)),
            None => (None, Vec::new(), false, None, None),
        };
        if let Some(sources) = &sources {
            yield Event::Sources(sources.clone());
        }
        if !items.is_empty() {
            yield Event::Items(items);
        }
        let mut deltas = 0u64;
        // The answer as the span records it (content capture only).
        let mut answer = String::new();
        loop {
            let waiting = Instant::now();
            let next = tokio::time::timeout(upstream.idle_timeout, chunks.next()).await;
            upstream.clock.since(waiting);
            let item = match next {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(_) => Err(UpstreamError::new(
                    UpstreamErrorKind::Timeout,
                    &upstream.url,
                    format!("no token for {} s", upstream.idle_timeout.as_secs_f64()),
                )),
            };
            match item {
                Ok(Chunk::Text(text)) => {
                    if deltas == 0 {
                        upstream.first_token();
                    }
                    deltas += 1;
                    if let Some(m) = memory.as_mut() {
                        m.keep(&text);
                    }
                    if upstream.privacy.is_some() && answer.len() < MAX_TRACED_ANSWER_BYTES {
                        answer.push_str(&text);
                    }
                    yield Event::Delta(text);
                }
                Ok(Chunk::ToolCalls(calls)) => yield Event::ToolCalls(calls),
                Ok(Chunk::Done { finish, usage }) => {
                    if let Some(list) = sources.as_deref().filter(|s| cite && !s.is_empty()) {
                        let text = citation(list);
                        if let Some(m) = memory.as_mut() {
                            m.keep(&text);
                        }
                        yield Event::Delta(text);
                    }
                    if let Some(m) = memory.take() {
                        m.save(false).await;
                    }
                    let usage = usage.unwrap_or(Usage {
                        prompt_tokens: prompt_estimate,
                        completion_tokens: deltas,
                    });
                    upstream.done(finish, usage, &mut answer);
                    if let Some(started) = started {
                        tracing::info!(
                            stage = "generate",
                            ms = ms(started),
                            deltas,
                            prompt_tokens = usage.prompt_tokens,
                            completion_tokens = usage.completion_tokens,
                            finish = finish.as_str(),
                            "stage"
                        );
                    }
                    yield Event::Done { finish, usage };
                    return;
                }
                Err(e) => {
                    trace::fail(&upstream.span, upstream_kind(&e));
                    if let Some(m) = memory.take() {
                        m.save(true).await;
                    }
                    yield Event::Error(e.into());
                    return;
                }
            }
        }
        if let Some(m) = memory.take() {
            m.save(true).await;
        }
        let closed = UpstreamError::new(UpstreamErrorKind::Closed, &upstream.url, "stream ended early");
        trace::fail(&upstream.span, "closed");
        yield Event::Error(closed.into());
    }
    .boxed()
}

/// The "Sources:" list appended to the answer with `assistant.cite_sources`.
fn citation(sources: &[Source]) -> String {
    let mut text = String::from("\n\nSources:");
    for s in sources {
        text.push_str(&format!("\n- {}", s.file));
        if !s.section.is_empty() {
            text.push_str(&format!(" § {}", s.section));
        }
        text.push_str(&format!(" (lines {}-{})", s.lines[0], s.lines[1]));
    }
    text
}

/// The client's turn as chat messages (`/api/generate` prompts become a user message).
fn client_messages(input: Input) -> Vec<Message> {
    match input {
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

/// A completion request with a suffix: fill-in-the-middle.
fn is_fill(input: &Input) -> bool {
    matches!(
        input,
        Input::Prompt {
            suffix: Some(_),
            ..
        }
    )
}

/// A completion's events, the middle cut where `ender` says it ends (then the upstream
/// request is dropped, which cancels it); what could still turn into an end is held back
/// until it is known not to.
fn ended(mut events: EventStream, ender: fill::Ender) -> EventStream {
    Box::pin(async_stream::stream! {
        let mut text = String::new();
        let mut sent = 0;
        while let Some(event) = events.next().await {
            match event {
                Event::Delta(piece) => {
                    text.push_str(&piece);
                    if let Some(end) = ender.end(&text) {
                        if end > sent {
                            yield Event::Delta(text[sent..end].to_string());
                        }
                        yield Event::Done { finish: FinishReason::Stop, usage: Usage::default() };
                        return;
                    }
                    let safe = ender.safe(&text);
                    if safe > sent {
                        yield Event::Delta(text[sent..safe].to_string());
                        sent = safe;
                    }
                }
                Event::Done { finish, usage } => {
                    if text.len() > sent {
                        yield Event::Delta(text[sent..].to_string());
                    }
                    yield Event::Done { finish, usage };
                    return;
                }
                other => yield other,
            }
        }
    })
}

/// Ollama's `keep_alive` as configured: a number of seconds (`-1`: for ever, `0`: unload
/// at once) goes as a number, anything else (`30m`) as a duration string.
fn keep_alive(setting: &str) -> Value {
    setting
        .parse::<i64>()
        .map_or_else(|_| Value::from(setting), Value::from)
}

/// `num_ctx` from an Ollama model's parameters.
fn num_ctx(card: &ModelCard) -> Option<usize> {
    card.parameters.as_deref()?.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("num_ctx")).then(|| words.next()?.parse().ok())?
    })
}

fn ms(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 1e5).round() / 100.0
}

/// Estimated prompt tokens, for upstreams that report no usage.
fn estimate_tokens(input: &Input) -> u64 {
    use crate::context::budget::estimate_tokens as tokens;
    let n: usize = match input {
        Input::Chat(messages) => messages.iter().map(|m| tokens(&m.content)).sum(),
        Input::Prompt { prompt, system, .. } => {
            tokens(prompt) + system.as_deref().map_or(0, tokens)
        }
    };
    n as u64
}

/// An upstream error's kind, as spans name it (`error.type`).
fn upstream_kind(e: &UpstreamError) -> &'static str {
    telemetry::upstream_error_kind(&e.kind).unwrap_or("unsupported")
}

/// Most bytes of an answer a span records (content capture).
const MAX_TRACED_ANSWER_BYTES: usize = 64 << 10;

/// Most bytes of an answer a caller that takes it whole is given (an upstream that never
/// stops must not grow the gateway's memory until `llm.max_answer_secs`).
pub const MAX_WHOLE_ANSWER_BYTES: usize = 16 << 20;

/// The error for an answer longer than `MAX_WHOLE_ANSWER_BYTES`.
pub fn answer_too_long() -> GatewayError {
    GatewayError::from(UpstreamError::new(
        UpstreamErrorKind::Protocol,
        "",
        format!(
            "the answer is longer than {} MiB: ask for it streamed, or for fewer tokens",
            MAX_WHOLE_ANSWER_BYTES >> 20
        ),
    ))
}

/// Collects a whole answer (at most `MAX_WHOLE_ANSWER_BYTES`); an error event becomes the
/// error.
pub async fn collect(mut events: EventStream) -> Result<Answer, GatewayError> {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut sources = None;
    let mut context_items = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            Event::Sources(s) => sources = Some(s),
            Event::Items(i) => context_items = i,
            Event::Delta(t) => {
                if text.len() + t.len() > MAX_WHOLE_ANSWER_BYTES {
                    return Err(answer_too_long());
                }
                text.push_str(&t);
            }
            Event::ToolCalls(calls) => tool_calls.extend(calls),
            Event::Done { finish, usage } => {
                return Ok(Answer {
                    text,
                    tool_calls,
                    sources,
                    context_items,
                    finish,
                    usage,
                });
            }
            Event::Error(e) => return Err(e),
        }
    }
    Err(GatewayError::internal(
        "the answer ended without a final event",
    ))
}

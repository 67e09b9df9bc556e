//! The pipeline every chat endpoint shares. A turn goes in, a stream of events comes out;
//! the HTTP dialects only parse turns and render events.
//!
//! For the assistant model a turn goes through: session (wait for the session's earlier
//! turns, load its window) → classify → reformulate → retrieve → assemble → generate →
//! save the turn. Each stage logs one line with its time and decision (sizes and flags,
//! never content). Other models, with passthrough on, go straight to the upstream.
//!
//! This file is the stage sequence. Each concern it calls on has a file of its own:
//! `catalogue` (the models served, `:latest`, what the upstream listed), `window` (the
//! window, token counting and the assemble stage that fits the prompt in), `memory` (the
//! session stage and the turn saved after the answer), `stream` (the answer stream and
//! whole answers), `protect` (`[privacy]` on what goes to the model), `completion` (the
//! fill-in-the-middle path); `classify`, `understand`, `reformulate`, `assemble`,
//! `prompts` and `fill` are the stages' own rules.

pub mod assemble;
mod catalogue;
pub mod classify;
mod completion;
pub mod fill;
mod memory;
pub mod prompts;
mod protect;
pub mod reformulate;
mod spans;
mod stream;
mod tools;
pub mod understand;
mod window;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use opentelemetry::KeyValue;
use serde::Serialize;
use serde_json::Value;

use crate::context::{EditorContext, UsedItem};
use crate::error::GatewayError;
use crate::llm::tokenize::TokenCounter;
use crate::llm::{
    ChatModel, FinishReason, Input, Message, Role, ToolCall, UpstreamErrorKind, UpstreamRequest,
    Usage,
};
use crate::privacy::Privacy;
use crate::retrieval::hybrid::{Retriever, Scored};
use crate::sessions::{Owner, SessionKey, Sessions};
use crate::telemetry::{self, UpstreamClock};
use crate::trace;
use classify::{Classifier, ClassifyInput, QueryType};
use prompts::Prompts;
use reformulate::Reformulator;

pub use catalogue::ServedModel;
use catalogue::{KnownModels, Route};
use completion::is_fill;
use memory::Memory;
use stream::{answer_events, Assistant};
pub use stream::{answer_too_long, collect, Answer, MAX_WHOLE_ANSWER_BYTES};
use window::{estimate_tokens, Fitted};

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
    /// Sent as the f64 it widens to, the same bytes whether a dialect writes its answer
    /// from its fields or through a JSON tree.
    #[serde(serialize_with = "as_f64")]
    pub score: f32,
    /// The chunk's text, for answer evaluation; never sent to clients.
    #[serde(skip)]
    pub text: String,
}

fn as_f64<S: serde::Serializer>(score: &f32, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(f64::from(*score))
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
    /// The upstream's own bytes, relayed to a client of its dialect
    /// ([`crate::llm::Relay`]); `deltas` of its events carried content.
    Verbatim {
        bytes: bytes::Bytes,
        deltas: u32,
    },
    Done {
        finish: FinishReason,
        usage: Usage,
    },
    Error(GatewayError),
}

pub type EventStream = BoxStream<'static, Event>;

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
    server: (std::sync::Arc<str>, i64),
    /// Completions answered lately, for the same request again.
    recent_fills: Arc<completion::recent::Recent>,
    /// Retrieved chunks as `[privacy]` left them, by chunk id (`protect_hits`).
    clean_chunks: protect::CleanChunks,
}

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
    /// The fallback upstreams' models (`llm.fallbacks`): those of the completion model's
    /// family may take its fill-in-the-middle prompt.
    pub fallback_models: Vec<String>,
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
        let server = spans::server_of(chat.base_url());
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
            recent_fills: Arc::default(),
            clean_chunks: protect::CleanChunks::default(),
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

    /// The upstream's wire when a turn would be relayed to a client that speaks it
    /// ([`crate::llm::Relay`]): a passthrough model on upstreams that relay, without
    /// tools (their calls reach clients in OpenAI's one form, whatever form the upstream
    /// streamed them in), without content capture (which records the answer's text), and
    /// not a middle the gateway fills itself.
    pub fn relays(&self, request: &UpstreamRequest) -> Option<crate::llm::Wire> {
        let relayed = request.tools.is_empty()
            && !trace::capture_content()
            && matches!(self.route(&request.model), Ok(Route::Passthrough))
            && self.own_fill(request).is_none();
        self.chat.relays().filter(|_| relayed)
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
                let mut turn = turn;
                match self.learn_models(&turn.request.model).await {
                    catalogue::Listed::NotServed => {
                        return Err(GatewayError::model_not_found(&turn.request.model));
                    }
                    // `name` and `name:latest` are one model here; the upstream gets the
                    // name it listed (an OpenAI-compatible server knows only its own).
                    catalogue::Listed::As(listed) => turn.request.model = listed,
                    catalogue::Listed::AsAsked => {}
                }
                if self.own_fill(&turn.request).is_some() {
                    return Box::pin(self.run_fill(turn, owner, clock, false)).await;
                }
                self.protect_request(&mut turn.request);
                let prompt_estimate = estimate_tokens(&turn.request.input);
                let span = self.chat_span("chat", &turn.request);
                let asked = Instant::now();
                let chunks = span
                    .within(clock.time(self.chat.stream(&turn.request)))
                    .await
                    .inspect_err(|e| span.fail(spans::upstream_kind(e)))?;
                Ok(answer_events(
                    chunks,
                    self.upstream(clock, span, asked),
                    prompt_estimate,
                    None,
                ))
            }
            // The assistant's stages are boxed: their state is most of a chat request's
            // future, which every request (passthrough's too) would otherwise carry and
            // copy as it is boxed by the server.
            Route::Assistant if is_fill(&turn.request.input) => {
                Box::pin(self.run_fill(turn, owner, clock, true)).await
            }
            Route::Assistant => Box::pin(self.run_assistant(turn, owner, clock)).await,
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
            std::mem::replace(&mut request.input, Input::Chat(vec![])).into_messages();
        let mut cleaned = self.protect(&mut editor, &mut messages);
        for tool in &mut request.tools {
            cleaned.add(self.privacy.clean_json(tool));
        }
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
        cleaned.report("prompt", "the prompt");
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
        let root = trace::Span::current();
        root.set_all([
            KeyValue::new("assist.query_type", query_type.as_str()),
            KeyValue::new("assist.editor", use_editor),
        ]);
        if trace::capture_content() {
            root.set("input.value", query.clone());
        }
        let hit_tokens = self.protect_hits(&mut hits);
        let (window, answer_tokens) = self.window_and_answer(&request.params, &clock).await;
        let agent = !request.tools.is_empty();
        tools::fit(&mut request.tools, window, &self.estimator());
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
                hit_tokens: &hit_tokens,
                history,
                messages,
                window_tokens: window,
                answer_tokens,
                tools: if with_tools { tools.as_str() } else { "" },
                agent,
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
        let span = trace::Span::start("classify", Vec::new);
        let decision = span
            .within(self.classifier.classify(&ClassifyInput {
                query,
                history: conversation,
                editor,
            }))
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
        if span.is_recording() {
            span.set_all([
                KeyValue::new("assist.query_type", query_type.as_str()),
                KeyValue::new("assist.editor", use_editor),
                KeyValue::new("assist.editor_rule", decision.editor_rule),
                KeyValue::new("assist.route_rule", decision.route_rule),
                KeyValue::new("assist.by", decision.by),
            ]);
        }
        drop(span);
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
        let span = trace::Span::start("reformulate", Vec::new);
        let search = span
            .within(
                self.reformulator
                    .reformulate(query, query_type, conversation, selection),
            )
            .await;
        if span.is_recording() {
            span.set_all([
                KeyValue::new("assist.by", search.by),
                KeyValue::new("assist.anchored", search.anchored),
                KeyValue::new("assist.search_chars", search.query.chars().count() as i64),
            ]);
        }
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
        let span = trace::Span::start("retrieval knowledge", || {
            vec![
                KeyValue::new("gen_ai.operation.name", "retrieval"),
                KeyValue::new("gen_ai.data_source.id", "knowledge"),
            ]
        });
        let found = span.within(self.retriever.find(&search.query)).await;
        telemetry::stage("retrieve", t.elapsed());
        match &found {
            Ok(found) => self.trace_hits(&span, &search.query, &found.hits),
            Err(_) => span.fail("retrieval"),
        }
        drop(span);
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
        let asked = Instant::now();
        let chunks = match span.within(clock.time(self.chat.stream(&request))).await {
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
                span.event("retry with less context");
                span.within(clock.time(self.chat.stream(&smaller)))
                    .await
                    .inspect_err(|e| span.fail(spans::upstream_kind(e)))?
            }
            other => other.inspect_err(|e| span.fail(spans::upstream_kind(e)))?,
        };
        tracing::debug!(ms = ms(started), "upstream accepted the assistant turn");
        Ok(answer_events(
            chunks,
            self.upstream(clock, span, asked),
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

/// Ollama's `keep_alive` as configured: a number of seconds (`-1`: for ever, `0`: unload
/// at once) goes as a number, anything else (`30m`) as a duration string.
fn keep_alive(setting: &str) -> Value {
    setting
        .parse::<i64>()
        .map_or_else(|_| Value::from(setting), Value::from)
}

fn ms(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 1e5).round() / 100.0
}

//! The pipeline every chat endpoint shares. A turn goes in, a stream of events comes out;
//! the HTTP dialects only parse turns and render events.
//!
//! Today the assistant model is generate-only (system prompt + the client's messages →
//! upstream). Classification, reformulation, retrieval, assembly and sessions slot in
//! inside `Pipeline::run` without touching the HTTP layer.

pub mod classify;

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::Value;

use crate::context::EditorContext;
use crate::error::GatewayError;
use crate::llm::{
    ChatModel, Chunk, ChunkStream, FinishReason, Input, Message, ModelCard, Role, ToolCall,
    UpstreamError, UpstreamErrorKind, UpstreamModel, UpstreamRequest, Usage,
};

/// What a chat request asks for, whichever dialect it came in.
#[derive(Debug, Clone)]
pub struct ChatTurn {
    /// `request.model` is the model the client named.
    pub request: UpstreamRequest,
    /// The conversation key, from the request's top-level `session_id`.
    pub session_id: Option<String>,
    /// The raw OpenAI `user` field (editor context arrives here).
    pub user: Option<Value>,
    /// IDE context items (`additional_context`), as sent.
    pub additional_context: Option<Value>,
}

impl ChatTurn {
    /// The editor context, from every place a client may have put it.
    pub fn editor_context(&self) -> EditorContext {
        let last_user = match &self.request.input {
            Input::Chat(messages) => messages
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .map_or("", |m| m.content.as_str()),
            Input::Prompt { prompt, .. } => prompt.as_str(),
        };
        EditorContext::from_request(
            self.user.as_ref(),
            self.additional_context.as_ref(),
            last_user,
        )
    }
}

/// What the pipeline streams back. `Done` or `Error` is always the last event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Delta(String),
    ToolCalls(Vec<ToolCall>),
    Done { finish: FinishReason, usage: Usage },
    Error(GatewayError),
}

pub type EventStream = BoxStream<'static, Event>;

/// A whole answer, for non-streaming responses.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
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
    assistant_model: String,
    upstream_model: String,
    passthrough: bool,
    system_prompt: String,
    context_tokens: u32,
}

/// How a pipeline is set up (built from settings in `app`).
pub struct PipelineConfig {
    pub assistant_model: String,
    pub upstream_model: String,
    pub passthrough: bool,
    pub system_prompt: String,
    pub context_tokens: u32,
}

impl Pipeline {
    pub fn new(chat: Arc<dyn ChatModel>, config: PipelineConfig) -> Self {
        Self {
            chat,
            assistant_model: config.assistant_model,
            upstream_model: config.upstream_model,
            passthrough: config.passthrough,
            system_prompt: config.system_prompt,
            context_tokens: config.context_tokens,
        }
    }

    pub fn assistant_model(&self) -> &str {
        &self.assistant_model
    }

    pub fn upstream_url(&self) -> &str {
        self.chat.base_url()
    }

    /// `brunix` and `brunix:latest` are the same model.
    pub fn is_assistant(&self, model: &str) -> bool {
        model == self.assistant_model
            || model.strip_suffix(":latest") == Some(self.assistant_model.as_str())
    }

    fn route(&self, model: &str) -> Result<Route, GatewayError> {
        if self.is_assistant(model) {
            Ok(Route::Assistant)
        } else if self.passthrough && !model.is_empty() {
            Ok(Route::Passthrough)
        } else {
            Err(GatewayError::model_not_found(model))
        }
    }

    /// Runs a turn. Errors before the upstream accepted the request are returned here
    /// (the client gets an HTTP error); later ones arrive as `Event::Error`.
    pub async fn run(&self, turn: ChatTurn) -> Result<EventStream, GatewayError> {
        let route = self.route(&turn.request.model)?;
        if route == Route::Assistant {
            let editor = turn.editor_context();
            tracing::debug!(
                selected_chars = editor.selected_text.len(),
                editor_chars = editor.editor_content.len(),
                extra_chars = editor.extra_context.len(),
                items = editor.items.len(),
                has_user_info = editor.user_info.is_some(),
                session = turn.session_id.is_some(),
                "editor context"
            );
        }
        let mut request = turn.request;
        if route == Route::Assistant {
            request.model = self.upstream_model.clone();
            request.input = self.assistant_input(request.input);
        }
        let prompt_estimate = estimate_tokens(&request.input);
        let chunks = self.chat.stream(request).await?;
        Ok(events(chunks, prompt_estimate))
    }

    /// The assistant's conversation: its system prompt, then what the client sent.
    fn assistant_input(&self, input: Input) -> Input {
        let mut messages = vec![Message::text(Role::System, self.system_prompt.clone())];
        match input {
            Input::Chat(client) => messages.extend(client),
            Input::Prompt {
                prompt,
                system,
                images,
                ..
            } => {
                if let Some(s) = system.filter(|s| !s.trim().is_empty()) {
                    messages.push(Message::text(Role::System, s));
                }
                let mut user = Message::text(Role::User, prompt);
                user.images = images;
                messages.push(user);
            }
        }
        Input::Chat(messages)
    }

    /// The assistant, then (with passthrough) the upstream's models. An unreachable
    /// upstream leaves the assistant listed alone.
    pub async fn models(&self) -> Vec<ServedModel> {
        let mut out = vec![ServedModel::Assistant {
            name: self.assistant_model.clone(),
        }];
        if self.passthrough {
            match self.chat.models().await {
                Ok(models) => out.extend(
                    models
                        .into_iter()
                        .filter(|m| !self.is_assistant(&m.id))
                        .map(ServedModel::Upstream),
                ),
                Err(e) => tracing::warn!(error = %e, "could not list the upstream's models"),
            }
        }
        out
    }

    /// One served model by name, or 404.
    pub async fn model(&self, name: &str) -> Result<ServedModel, GatewayError> {
        if self.is_assistant(name) {
            return Ok(ServedModel::Assistant {
                name: self.assistant_model.clone(),
            });
        }
        self.route(name)?;
        let models = self.chat.models().await?;
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
                context_length: Some(u64::from(self.context_tokens)),
                details: None,
                parameters: Some(format!("num_ctx {}", self.context_tokens)),
                template: None,
                capabilities: vec!["completion".into(), "tools".into()],
                model_info: None,
            }),
            Route::Passthrough => Ok(self.chat.show(name).await?),
        }
    }

    /// Whether the upstream answers at all (for `/ready`).
    pub async fn upstream_ready(&self) -> Result<usize, UpstreamError> {
        self.chat.models().await.map(|m| m.len())
    }
}

/// Upstream chunks → pipeline events; usage is estimated when the upstream gave none.
fn events(mut chunks: ChunkStream, prompt_estimate: u64) -> EventStream {
    async_stream::stream! {
        let mut deltas = 0u64;
        while let Some(item) = chunks.next().await {
            match item {
                Ok(Chunk::Text(text)) => {
                    deltas += 1;
                    yield Event::Delta(text);
                }
                Ok(Chunk::ToolCalls(calls)) => yield Event::ToolCalls(calls),
                Ok(Chunk::Done { finish, usage }) => {
                    let usage = usage.unwrap_or(Usage {
                        prompt_tokens: prompt_estimate,
                        completion_tokens: deltas,
                    });
                    yield Event::Done { finish, usage };
                    return;
                }
                Err(e) => {
                    yield Event::Error(e.into());
                    return;
                }
            }
        }
        let closed = UpstreamError::new(UpstreamErrorKind::Closed, "upstream", "stream ended early");
        yield Event::Error(closed.into());
    }
    .boxed()
}

/// Rough token count (4 characters a token) for upstreams that report no usage.
fn estimate_tokens(input: &Input) -> u64 {
    let chars: usize = match input {
        Input::Chat(messages) => messages.iter().map(|m| m.content.chars().count()).sum(),
        Input::Prompt { prompt, system, .. } => {
            prompt.chars().count() + system.as_deref().map_or(0, |s| s.chars().count())
        }
    };
    (chars as u64).div_ceil(4)
}

/// Collects a whole answer; an error event becomes the error.
pub async fn collect(mut events: EventStream) -> Result<Answer, GatewayError> {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            Event::Delta(t) => text.push_str(&t),
            Event::ToolCalls(calls) => tool_calls.extend(calls),
            Event::Done { finish, usage } => {
                return Ok(Answer {
                    text,
                    tool_calls,
                    finish,
                    usage,
                })
            }
            Event::Error(e) => return Err(e),
        }
    }
    Err(GatewayError::internal(
        "the answer ended without a final event",
    ))
}

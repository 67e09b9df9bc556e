//! Stored responses (the Responses API's `store` and `previous_response_id`): a response
//! created with `store: true` keeps its conversation (the one it continued, its input and
//! its output, function calls included) in the session store, under the caller's key and
//! the response's id, so a later request continues it by naming the id, on any replica
//! sharing the store (Redis). Nothing is kept without `store: true`. A chain keeps the
//! session window's latest turns (`sessions.window_turns`), with the session store's own
//! bounds on bytes, sessions per key and time to live.

use std::sync::{Arc, Mutex};

use futures::StreamExt;

use crate::error::GatewayError;
use crate::llm::{Input, Message, Role};
use crate::pipeline::{ChatTurn, Event, EventStream};
use crate::privacy::Privacy;
use crate::sessions::{self, Call, CallResult, Owner, SessionKey, Sessions, Turn};

/// What a request asks of the store.
#[derive(Debug, Default, Clone)]
pub struct Thread {
    /// The stored response this one continues.
    pub continues: Option<String>,
    /// Keep this response under this id.
    pub keep_as: Option<String>,
}

/// A response being kept: the turns it continues, its own input, and its output as it
/// streams (bounded like a session's turn).
pub struct Keeper {
    sessions: Arc<Sessions>,
    /// What is kept is cleaned of secrets first, as every stored turn.
    privacy: Arc<Privacy>,
    key: SessionKey,
    earlier: Vec<Turn>,
    turn: Turn,
    cut: bool,
}

/// Continues `thread.continues` (its conversation goes before the request's own
/// messages, after the system message) and returns what keeps this response, if asked.
pub async fn prepare(
    sessions: Option<&Arc<Sessions>>,
    privacy: &Arc<Privacy>,
    owner: &Owner,
    turn: &mut ChatTurn,
    thread: Thread,
) -> Result<Option<Keeper>, GatewayError> {
    if thread.continues.is_none() && thread.keep_as.is_none() {
        return Ok(None);
    }
    let Some(sessions) = sessions else {
        if thread.continues.is_some() {
            return Err(GatewayError::invalid(
                "previous_response_id",
                "previous_response_id needs the session store, and sessions are off on this \
                 gateway: send the whole conversation in 'input'",
            ));
        }
        return Ok(None);
    };
    let earlier = match thread.continues {
        Some(id) => {
            let not_found = || {
                GatewayError::invalid(
                    "previous_response_id",
                    format!(
                        "Previous response with id '{}' not found (responses are kept only \
                         when created with store: true, under the same key)",
                        id.chars().take(80).collect::<String>()
                    ),
                )
            };
            sessions::check_id(&id).map_err(|_| not_found())?;
            let key = SessionKey {
                owner: owner.clone(),
                id: id.clone(),
            };
            let turns = sessions
                .store()
                .recent(&key, sessions.window_turns())
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "stored responses: the store could not be read");
                    GatewayError::unavailable(
                        "store_unavailable",
                        "the response store could not be read",
                    )
                })?;
            if turns.is_empty() {
                return Err(not_found());
            }
            turns
        }
        None => Vec::new(),
    };
    let Input::Chat(messages) = &mut turn.request.input else {
        return Ok(None);
    };
    let own = new_turn(messages);
    if !earlier.is_empty() {
        let system = messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .count();
        let before: Vec<Message> = earlier.iter().flat_map(Turn::messages).collect();
        messages.splice(system..system, before);
        // A function's output names its function (Ollama's shape) even when the call was
        // in the stored part.
        let names: std::collections::HashMap<String, String> = messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        for m in messages.iter_mut().filter(|m| m.role == Role::Tool) {
            if m.tool_name.is_none() {
                m.tool_name = m
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| names.get(id))
                    .cloned();
            }
        }
    }
    Ok(thread.keep_as.map(|id| Keeper {
        sessions: sessions.clone(),
        privacy: privacy.clone(),
        key: SessionKey {
            owner: owner.clone(),
            id,
        },
        earlier,
        turn: own,
        cut: false,
    }))
}

/// The request's own input as a stored turn: its questions and the function outputs it
/// answers (its instructions are not carried on, as in the Responses API).
fn new_turn(messages: &[Message]) -> Turn {
    let user: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .collect();
    let mut turn = Turn::new(user.join("\n\n"), String::new());
    turn.results = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| CallResult {
            call_id: m.tool_call_id.clone().unwrap_or_default(),
            output: m.content.clone(),
        })
        .collect();
    turn
}

impl Keeper {
    /// The answer's events, kept as they pass; the conversation is saved when the answer
    /// ends (not when it fails or the client goes away).
    /// The end of the answer reaches the client once the response is kept, so that the
    /// next request may continue it at once.
    pub fn tap(self, events: EventStream) -> EventStream {
        let keeper = Arc::new(Mutex::new(Some(self)));
        events
            .then(move |event| {
                let keeper = keeper.clone();
                async move {
                    let done = {
                        let mut slot = keeper.lock().unwrap_or_else(|e| e.into_inner());
                        match (&event, slot.as_mut()) {
                            (Event::Delta(text), Some(k)) => k.keep(text),
                            (Event::ToolCalls(calls), Some(k)) => {
                                k.turn.calls.extend(calls.iter().map(|c| Call {
                                    id: c.id.clone(),
                                    name: c.name.clone(),
                                    arguments: c.arguments_text(),
                                }));
                            }
                            (Event::Error(_), _) => {
                                slot.take();
                            }
                            _ => {}
                        }
                        match event {
                            Event::Done { .. } => slot.take(),
                            _ => None,
                        }
                    };
                    if let Some(k) = done {
                        k.save().await;
                    }
                    event
                }
            })
            .boxed()
    }

    fn keep(&mut self, text: &str) {
        if self.cut {
            return;
        }
        let room = self
            .sessions
            .max_turn_bytes()
            .saturating_sub(self.turn.user.len() + self.turn.assistant.len());
        let mut end = text.len().min(room);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.turn.assistant.push_str(&text[..end]);
        self.cut = end < text.len();
    }

    /// The conversation it continued, then this turn (cleaned), under the new id.
    async fn save(mut self) {
        let privacy = &self.privacy;
        let turn = &mut self.turn;
        let mut cleaned = privacy.clean(&mut turn.user);
        cleaned.add(privacy.clean(&mut turn.assistant));
        for r in &mut turn.results {
            cleaned.add(privacy.clean(&mut r.output));
        }
        for c in &mut turn.calls {
            cleaned.add(privacy.clean(&mut c.arguments));
        }
        if !cleaned.is_empty() {
            cleaned.count("session");
        }
        let store = self.sessions.store();
        for turn in self.earlier.into_iter().chain([self.turn]) {
            if let Err(e) = store.append(&self.key, turn).await {
                tracing::error!(error = %e, "stored responses: the response could not be kept");
                return;
            }
        }
    }
}

//! Memory, as the pipeline uses the sessions: the session stage (wait for the session's
//! earlier turns, load its history) and the turn saved when the answer ends or is cut off.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;

use super::{ms, Pipeline};
use crate::context::EditorContext;
use crate::error::GatewayError;
use crate::llm::{Message, Role};
use crate::privacy::Privacy;
use crate::sessions::{Held, SessionKey, Sessions, Turn};
use crate::telemetry;
use crate::trace;

impl Pipeline {
    /// Session: waits for the session's earlier turns to finish (at most
    /// `sessions.wait_secs`: 409 `session_busy` then) and loads its history, unless the
    /// client sent its own conversation (any assistant message): the stored one is for
    /// clients that send only the new message.
    pub(super) async fn session(
        &self,
        session: Option<SessionKey>,
        messages: &[Message],
        editor: &EditorContext,
    ) -> Result<(Option<Held>, Vec<Message>), GatewayError> {
        let has_session = session.is_some();
        let span = trace::Span::start("session", || {
            vec![KeyValue::new("assist.session", has_session)]
        });
        let t = Instant::now();
        let held = match (&self.sessions, session) {
            (Some(sessions), Some(key)) if !key.id.is_empty() => {
                Some(span.within(sessions.hold(key)).await.map_err(|busy| {
                    tracing::warn!(stage = "session", ms = ms(t), "the session is busy");
                    span.fail("session_busy");
                    GatewayError::session_busy(busy.to_string())
                })?)
            }
            _ => None,
        };
        let client_has_history = messages.iter().any(|m| m.role == Role::Assistant);
        let history: Vec<Message> = match &held {
            Some(h) if !client_has_history => h.history.iter().flat_map(Turn::messages).collect(),
            _ => Vec::new(),
        };
        span.set("assist.history.turns", history.len() as i64 / 2);
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
}

/// The turn being answered, saved to its session when the answer ends, or, when the
/// stream is dropped first (the client went away), saved as interrupted with what was
/// streamed so far.
/// The answer is kept only to `sessions.max_session_bytes` (with the question) while it
/// streams: an answer that never ends cannot grow the gateway's memory.
pub(super) struct Memory {
    pub(super) sessions: Arc<Sessions>,
    /// The answer is cleaned before it is kept (a model may repeat what it was shown).
    pub(super) privacy: Arc<Privacy>,
    pub(super) held: Option<Held>,
    pub(super) question: String,
    /// The attached items the question came with, named (`file src/a.rs`).
    pub(super) attached: Vec<String>,
    pub(super) answer: String,
    /// Part of the answer was not kept.
    pub(super) cut: bool,
}

/// What ends a turn whose answer was longer than the session may keep.
pub(super) const CUT_MARK: &str = " [answer cut: longer than sessions.max_session_bytes]";

impl Memory {
    /// Keeps `text` as the answer's next piece, as far as the turn has room.
    pub(super) fn keep(&mut self, text: &str) {
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

    pub(super) fn turn(&mut self, interrupted: bool) -> Turn {
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

    pub(super) async fn save(mut self, interrupted: bool) {
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

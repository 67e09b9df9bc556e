//! `[privacy]` as the pipeline applies it: the client's context and messages, retrieved
//! chunks and passthrough requests, cleaned before they reach a prompt.

use super::Pipeline;
use crate::context::EditorContext;
use crate::llm::{Input, Message};
use crate::privacy::Cleaned;
use crate::retrieval::hybrid::Scored;

impl Pipeline {
    /// The client's context and messages (their tool calls too) with `[privacy]` applied.
    pub(super) fn protect(&self, editor: &mut EditorContext, messages: &mut [Message]) -> Cleaned {
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
    pub(super) fn protect_hits(&self, hits: &mut Vec<Scored>) {
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
    pub(super) fn protect_input(&self, input: &mut Input) {
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
}

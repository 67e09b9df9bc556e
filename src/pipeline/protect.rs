//! `[privacy]` as the pipeline applies it: the client's context and messages, retrieved
//! chunks and passthrough requests, cleaned before they reach a prompt.

use std::sync::Arc;

use super::Pipeline;
use crate::context::EditorContext;
use crate::llm::{Input, Message, UpstreamRequest};
use crate::privacy::Cleaned;
use crate::retrieval::hybrid::Scored;
use crate::retrieval::KnowledgeChunk;

/// Chunks kept cleaned: most retrievals find the same few hundred chunks again, and
/// scanning each one for secrets and invisible characters on every request was an eighth
/// of a `brunix` answer's CPU.
const CLEAN_CHUNKS: usize = 1024;

/// Retrieved chunks as cleaning left them, by chunk id. An entry is used only for a chunk
/// whose fields are byte for byte those it was made from (an id is a hash of them, but a
/// vector store's payload is not the gateway's to trust).
pub(super) struct CleanChunks(quick_cache::sync::Cache<String, Arc<CleanChunk>>);

impl Default for CleanChunks {
    fn default() -> Self {
        Self(quick_cache::sync::Cache::new(CLEAN_CHUNKS))
    }
}

/// A chunk's text, section and file name as retrieved, as cleaned (`None`: unchanged),
/// what cleaning found, and the cleaned text's estimate (`estimate_tokens` without
/// trailing whitespace: what fitting the prompt measures).
pub(super) struct CleanChunk {
    came: [String; 3],
    cleaned: Option<[String; 3]>,
    found: Cleaned,
    tokens: usize,
}

fn fields(c: &KnowledgeChunk) -> [&str; 3] {
    [&c.text, &c.section, &c.source_file]
}

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
    /// held; a file name may carry invisible characters). Gives each hit's text's
    /// estimate, in order, measured once while the chunk stays the same.
    pub(super) fn protect_hits(&self, hits: &mut Vec<Scored>) -> Vec<usize> {
        hits.retain(|h| !self.privacy.excluded(&h.chunk.source_file));
        let mut tokens = Vec::with_capacity(hits.len());
        let mut cleaned = Cleaned::default();
        for hit in hits.iter_mut() {
            let c = &hit.chunk;
            let known = self
                .clean_chunks
                .0
                .get(&c.chunk_id)
                .filter(|known| known.came.iter().map(String::as_str).eq(fields(c)));
            let entry = match known {
                Some(entry) => entry,
                None => {
                    let entry = Arc::new(self.clean_chunk(c));
                    self.clean_chunks
                        .0
                        .insert(c.chunk_id.clone(), entry.clone());
                    entry
                }
            };
            if let Some([text, section, source_file]) = &entry.cleaned {
                // Copied out of the index's cache only when something in it changes.
                let c = Arc::make_mut(&mut hit.chunk);
                c.text.clone_from(text);
                c.section.clone_from(section);
                c.source_file.clone_from(source_file);
            }
            cleaned.add(entry.found.clone());
            tokens.push(entry.tokens);
        }
        if !cleaned.is_empty() {
            cleaned.count("knowledge");
        }
        tokens
    }

    fn clean_chunk(&self, c: &KnowledgeChunk) -> CleanChunk {
        let came = fields(c).map(str::to_string);
        let mut cleaned = came.clone();
        let mut found = Cleaned::default();
        for field in &mut cleaned {
            found.add(self.privacy.clean(field));
        }
        let tokens = crate::context::budget::estimate_tokens(cleaned[0].trim_end());
        CleanChunk {
            cleaned: (cleaned != came).then_some(cleaned),
            came,
            found,
            tokens,
        }
    }

    /// A passthrough request's texts and tools, cleaned.
    pub(super) fn protect_request(&self, request: &mut UpstreamRequest) {
        let mut cleaned = Cleaned::default();
        for tool in &mut request.tools {
            cleaned.add(self.privacy.clean_json(tool));
        }
        match &mut request.input {
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
        cleaned.report("passthrough", "the upstream");
    }
}

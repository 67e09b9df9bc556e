//! The client's context with `[privacy]` applied: what comes from an excluded path is
//! dropped (attached items, the open file and its selection, diagnostics, edits,
//! continue's file blocks in the message), and everything left is cleaned (invisible
//! characters stripped, secrets redacted) before it can reach a prompt.

use super::editor::without_blocks;
use super::EditorContext;
use crate::privacy::{Cleaned, Privacy};

/// What protecting a turn's context did, for the log line and metrics.
#[derive(Debug, Default)]
pub struct Protected {
    pub cleaned: Cleaned,
    /// Pieces dropped by `privacy.exclude`.
    pub excluded: usize,
}

/// Applies `privacy` to the editor context and to the client's message texts.
pub fn protect(ctx: &mut EditorContext, messages: &mut [String], privacy: &Privacy) -> Protected {
    let mut out = Protected::default();
    let excluded = |path: Option<&str>| path.is_some_and(|p| privacy.excluded(p));
    if excluded(ctx.file_path.as_deref()) {
        out.excluded += 1;
        ctx.editor_content.clear();
        ctx.selected_text.clear();
        ctx.file_in_message = false;
    }
    let before = ctx.items.len();
    ctx.items
        .retain(|i| !excluded(i.path.as_deref()) && !excluded(Some(i.id.as_str())));
    out.excluded += before - ctx.items.len();
    let before = ctx.diagnostics.len();
    ctx.diagnostics.retain(|d| !excluded(d.file.as_deref()));
    out.excluded += before - ctx.diagnostics.len();
    let before = ctx.edits.len();
    ctx.edits.retain(|e| !excluded(e.file.as_deref()));
    out.excluded += before - ctx.edits.len();
    for message in messages.iter_mut() {
        if let Some((kept, dropped)) = without_blocks(message, |p| privacy.excluded(p)) {
            *message = kept;
            out.excluded += dropped;
        }
    }
    if out.excluded > 0 {
        tracing::info!(
            excluded = out.excluded,
            "context from paths in privacy.exclude dropped"
        );
    }
    let mut clean = |text: &mut String| out.cleaned.add(privacy.clean(text));
    clean(&mut ctx.selected_text);
    clean(&mut ctx.editor_content);
    clean(&mut ctx.extra_context);
    if let Some(path) = ctx.file_path.as_mut() {
        clean(path);
    }
    for item in &mut ctx.items {
        clean(&mut item.content);
        clean(&mut item.id);
        clean(&mut item.category);
        if let Some(path) = item.path.as_mut() {
            clean(path);
        }
        for (key, value) in &mut item.meta {
            clean(key);
            clean(value);
        }
    }
    for d in &mut ctx.diagnostics {
        clean(&mut d.message);
        clean(&mut d.severity);
        if let Some(file) = d.file.as_mut() {
            clean(file);
        }
    }
    for e in &mut ctx.edits {
        clean(&mut e.diff);
        if let Some(file) = e.file.as_mut() {
            clean(file);
        }
    }
    for message in messages.iter_mut() {
        clean(message);
    }
    out
}

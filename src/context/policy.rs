//! What of the client's context a turn may use: the switches and limits of `[context]`
//! and `assistant.editor_context`, applied to what was read before anything else runs.

use super::items::cut_to;
use super::EditorContext;
use crate::error::GatewayError;

/// The switches and limits, from settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// false: no editor context at all (selection, open file, extra context, items,
    /// diagnostics, edits).
    pub editor: bool,
    pub items: bool,
    pub diagnostics: bool,
    pub recent_edits: bool,
    /// Longest item (or diff), in bytes; longer ones are cut.
    pub max_item_bytes: usize,
    /// Most bytes all attached items may carry; more is refused (413).
    pub max_items_bytes: usize,
    pub max_items: usize,
    pub max_diagnostics: usize,
    pub max_recent_edits: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            editor: true,
            items: true,
            diagnostics: true,
            recent_edits: true,
            max_item_bytes: 256 * 1024,
            max_items_bytes: 2 * 1024 * 1024,
            max_items: 64,
            max_diagnostics: 50,
            max_recent_edits: 20,
        }
    }
}

/// What applying the policy left out or cut, for the log line and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    pub cut: usize,
    pub over_count: usize,
    pub switched_off: usize,
}

impl Applied {
    /// Counts a turn's context items in the metrics, by what became of them.
    pub fn count(&self, editor: &EditorContext) {
        let attached = editor.items.iter().filter(|i| !i.from_message).count()
            + editor
                .diagnostics
                .iter()
                .filter(|d| d.item.is_some())
                .count()
            + editor.edits.iter().filter(|e| e.item.is_some()).count();
        let skipped = editor.skipped;
        crate::telemetry::context_items(&[
            ("read", attached),
            ("disabled", skipped.disabled),
            ("duplicate", skipped.duplicates),
            ("empty", skipped.empty),
            ("cut", self.cut),
            ("over_limit", self.over_count),
            ("switched_off", self.switched_off),
        ]);
    }
}

impl Policy {
    /// The policy of `[context]`, with `assistant.editor_context`.
    pub fn from_settings(s: &crate::config::ContextSettings, editor_context: bool) -> Self {
        Self {
            editor: editor_context,
            items: s.items,
            diagnostics: s.diagnostics,
            recent_edits: s.recent_edits,
            max_item_bytes: s.max_item_bytes,
            max_items_bytes: s.max_items_bytes,
            max_items: s.max_items,
            max_diagnostics: s.max_diagnostics,
            max_recent_edits: s.max_recent_edits,
        }
    }

    /// Applies the switches and limits to `ctx`; a request whose items are larger than
    /// `max_items_bytes` is refused.
    pub fn apply(&self, ctx: &mut EditorContext) -> Result<Applied, GatewayError> {
        if ctx.items_bytes > self.max_items_bytes {
            return Err(GatewayError::payload_too_large(self.max_items_bytes)
                .with_message(format!(
                    "the context items carry {} bytes; at most {} are accepted (context.max_items_bytes)",
                    ctx.items_bytes, self.max_items_bytes
                )));
        }
        let mut applied = Applied::default();
        if !self.editor {
            let had = usize::from(ctx.has_code());
            applied.switched_off += had;
            *ctx = EditorContext {
                user_info: ctx.user_info.take(),
                skipped: ctx.skipped,
                ..EditorContext::default()
            };
            return Ok(applied);
        }
        // Items read from the user's message are in the message whatever happens here.
        let attached = |from_message: bool| !from_message;
        if !self.items {
            let before = ctx.items.len();
            ctx.items.retain(|i| !attached(i.from_message));
            applied.switched_off += before - ctx.items.len();
        }
        if !self.diagnostics {
            applied.switched_off += ctx.diagnostics.len();
            ctx.diagnostics.clear();
        }
        if !self.recent_edits {
            applied.switched_off += ctx.edits.len();
            ctx.edits.clear();
        }
        let mut kept = 0;
        ctx.items.retain(|i| {
            if i.from_message {
                return true;
            }
            kept += 1;
            kept <= self.max_items
        });
        applied.over_count += kept.saturating_sub(self.max_items);
        applied.over_count += ctx.diagnostics.len().saturating_sub(self.max_diagnostics);
        ctx.diagnostics.truncate(self.max_diagnostics);
        // The latest edits matter most: clients list them oldest first.
        let extra = ctx.edits.len().saturating_sub(self.max_recent_edits);
        applied.over_count += extra;
        ctx.edits.drain(..extra);
        for item in ctx.items.iter_mut().filter(|i| !i.from_message) {
            if cut_to(&mut item.content, self.max_item_bytes) {
                item.cut = true;
                applied.cut += 1;
            }
        }
        for edit in &mut ctx.edits {
            if cut_to(&mut edit.diff, self.max_item_bytes) {
                edit.cut = true;
                applied.cut += 1;
            }
        }
        if applied != Applied::default() {
            tracing::info!(
                cut = applied.cut,
                over_count = applied.over_count,
                switched_off = applied.switched_off,
                "context items limited by [context]"
            );
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_cut_count_and_refuse() {
        let items: Vec<_> = (0..5)
            .map(|i| json!({"id": format!("s{i}"), "category": "snippet", "content": "x".repeat(100)}))
            .collect();
        let mut ctx = EditorContext::from_request(None, Some(&json!(items)), "q");
        let policy = Policy {
            max_item_bytes: 40,
            max_items: 3,
            ..Policy::default()
        };
        let applied = policy.apply(&mut ctx).unwrap();
        assert_eq!(ctx.items.len(), 3);
        assert!(ctx.items.iter().all(|i| i.cut && i.content.len() < 100));
        assert_eq!((applied.cut, applied.over_count), (3, 2));
        let mut ctx = EditorContext::from_request(None, Some(&json!(items)), "q");
        let small = Policy {
            max_items_bytes: 300,
            ..Policy::default()
        };
        let e = small.apply(&mut ctx).unwrap_err();
        assert_eq!(e.status.as_u16(), 413);
        let mut ctx = EditorContext::from_request(None, Some(&json!(items)), "q");
        let off = Policy {
            editor: false,
            ..Policy::default()
        };
        off.apply(&mut ctx).unwrap();
        assert!(!ctx.has_code());
    }
}

//! What the user is looking at in the editor, from whatever the client sent:
//!
//! - the OpenAI `user` field as a JSON string (the reference VS Code extension):
//!   `editor_content`, `selected_text` and `extra_context` in base64 of UTF-8, and
//!   `user_info` as an object (kept as metadata, never trusted for access);
//! - `additional_context` items (`{category, id, content, metadata}`, GitLab-style);
//! - continue-style context in the last user message: fenced blocks headed
//!   `lang path (start-end)`, and "This is the currently open file:".
//!
//! Nothing here is ever an error: a field that cannot be read is empty and a warning is
//! logged with its name and size, never its content.

use base64::Engine;
use serde_json::Value;

use super::items::{self, ContextItem, Cursor, Diagnostic, RecentEdit, Skipped};

/// Most fenced blocks of the user's message read as context (items, problems, edits,
/// the open file).
const MAX_MESSAGE_BLOCKS: usize = 256;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EditorContext {
    pub selected_text: String,
    pub editor_content: String,
    /// The open file's path, when a client said which file it is.
    pub file_path: Option<String>,
    /// The open file came inside the user's message (continue-style).
    pub file_in_message: bool,
    pub extra_context: String,
    /// Client identity metadata (`dev_id`, `project_id`, `org_id`): informational only.
    pub user_info: Option<Value>,
    pub items: Vec<ContextItem>,
    /// Compiler and linter findings (the `user` field's `diagnostics`, `diagnostics`
    /// items, continue's problems blocks).
    pub diagnostics: Vec<Diagnostic>,
    /// Recent changes as diffs (`recent_edits`, `recent_edit` items, `diff` blocks).
    pub edits: Vec<RecentEdit>,
    pub cursor: Option<Cursor>,
    /// Items left out while reading (disabled by the client, duplicates, empty).
    pub skipped: Skipped,
    /// Bytes the attached items carried, as sent.
    pub items_bytes: usize,
}

impl EditorContext {
    /// Whether there is any editor code a question could refer to (extra context counts:
    /// a client may send the code, or the error, only there).
    pub fn has_code(&self) -> bool {
        !self.selected_text.trim().is_empty()
            || !self.editor_content.trim().is_empty()
            || !self.extra_context.trim().is_empty()
            || !self.items.is_empty()
            || !self.diagnostics.is_empty()
            || !self.edits.is_empty()
    }

    /// Whether a diagnostic is about the code the user is at: inside the selection (its
    /// line of the open file is in the selected text) or within a few lines of the
    /// cursor, in the open file.
    pub fn is_near(&self, d: &Diagnostic) -> bool {
        const NEAR_LINES: usize = 5;
        let same_file = match (&d.file, &self.file_path) {
            (Some(f), Some(open)) => f.ends_with(open.as_str()) || open.ends_with(f.as_str()),
            _ => true,
        };
        let Some(line) = d.line.filter(|_| same_file) else {
            return false;
        };
        if let Some(cursor) = self.cursor {
            if line.abs_diff(cursor.line) <= NEAR_LINES {
                return true;
            }
        }
        let selected = self.selected_text.trim();
        let text = self
            .editor_content
            .lines()
            .nth(line.saturating_sub(1))
            .map(str::trim)
            .unwrap_or_default();
        !selected.is_empty() && text.len() >= 3 && selected.contains(text)
    }

    /// Reads every source; `last_user_message` is the text of the latest user turn.
    pub fn from_request(
        user: Option<&Value>,
        additional_context: Option<&Value>,
        last_user_message: &str,
    ) -> Self {
        let mut ctx = Self::from_user_field(user);
        if let Some(items) = additional_context {
            let read = items::read(items);
            ctx.items.extend(read.items);
            ctx.diagnostics.extend(read.diagnostics);
            ctx.edits.extend(read.edits);
            ctx.skipped = read.skipped;
            ctx.items_bytes = read.bytes;
        }
        ctx.add_message_blocks(last_user_message);
        ctx
    }

    /// The `user` field: a JSON string (or, leniently, an object) with the editor fields.
    pub fn from_user_field(user: Option<&Value>) -> Self {
        let mut ctx = Self::default();
        let object = match user {
            None | Some(Value::Null) => return ctx,
            Some(Value::Object(o)) => o.clone(),
            Some(Value::String(s)) => {
                match serde_json::from_str::<Value>(s) {
                    Ok(Value::Object(o)) => o,
                    _ if s.trim_start().starts_with('{') => {
                        tracing::warn!(size = s.len(), "the user field looks like JSON but does not parse: editor context ignored");
                        return ctx;
                    }
                    // A plain string is the ordinary OpenAI meaning: an end-user id.
                    _ => return ctx,
                }
            }
            Some(other) => {
                tracing::warn!(
                    kind = crate::json::kind(other),
                    "the user field is neither a string nor an object: ignored"
                );
                return ctx;
            }
        };
        ctx.selected_text = decoded(&object, "selected_text");
        ctx.editor_content = decoded(&object, "editor_content");
        ctx.extra_context = decoded(&object, "extra_context");
        ctx.file_path = object
            .get("file_path")
            .or_else(|| object.get("filePath"))
            .and_then(Value::as_str)
            .filter(|p| !p.trim().is_empty())
            .map(str::to_string);
        (ctx.diagnostics, ctx.edits, ctx.cursor) = items::from_user_field(&object);
        ctx.user_info = match object.get("user_info") {
            None | Some(Value::Null) => None,
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => Some(v),
                _ => {
                    tracing::warn!(size = s.len(), "user_info is not a JSON object: ignored");
                    None
                }
            },
            Some(other) => {
                tracing::warn!(
                    kind = crate::json::kind(other),
                    "user_info is not an object: ignored"
                );
                None
            }
        };
        ctx
    }

    /// continue-style blocks inside the user's message.
    fn add_message_blocks(&mut self, message: &str) {
        const OPEN_FILE: &str = "this is the currently open file:";
        // ASCII lowercasing keeps byte offsets, so they stay valid in `message`.
        let lower = message.to_ascii_lowercase();
        // Where the text after the open-file line starts, and where the message's text
        // ends: found once, so each block is checked against them in constant time (a
        // message of many blocks and much whitespace took minutes when each block
        // scanned the whitespace again).
        let open_file_at = lower.find(OPEN_FILE).map(|i| {
            let at = i + OPEN_FILE.len();
            (at, message.len() - message[at..].trim_start().len())
        });
        let text_end = message.trim_end().len();
        // The first blocks only: they are in the message the model gets whatever is taken
        // here, and each taken is a copy (a message of 250,000 blocks was read into as many
        // items, twenty times its size).
        for block in fenced_blocks(message).into_iter().take(MAX_MESSAGE_BLOCKS) {
            let header = parse_header(block.info);
            let is_open_file =
                open_file_at.is_some_and(|(at, first)| block.start >= at && block.start <= first);
            if is_open_file && self.editor_content.is_empty() {
                self.editor_content = block.body.to_string();
                self.file_path = header.0.clone();
                self.file_in_message = true;
                continue;
            }
            // continue's diff context: the working tree's changes.
            let info = block.info.to_ascii_lowercase();
            if matches!(info.as_str(), "diff" | "git diff" | "patch") {
                self.edits.push(RecentEdit {
                    file: None,
                    diff: block.body.to_string(),
                    item: None,
                    cut: false,
                    from_message: true,
                });
                continue;
            }
            // Only blocks that name a file are context; other fences are the user's own text.
            if let (Some(path), lines) = header {
                // continue's problems: the lines around a problem, then its message on
                // the very next line (a user's own question after a block is not one).
                if let Some(problem) = problem_after(message, block.end, text_end) {
                    self.diagnostics.push(Diagnostic {
                        file: Some(path.clone()),
                        line: lines.map(|(a, _)| a),
                        severity: "error".into(),
                        message: problem.to_string(),
                        item: None,
                        from_message: true,
                    });
                }
                self.items.push(ContextItem {
                    category: "snippet".into(),
                    id: path.clone(),
                    path: Some(path),
                    lines,
                    meta: Vec::new(),
                    content: block.body.to_string(),
                    from_message: true,
                    cut: false,
                });
            }
        }
    }
}

/// `message` without the fenced blocks whose header names a path `drop` says to leave
/// out (each replaced by a line saying so); `None` when there is none.
pub fn without_blocks(message: &str, drop: impl Fn(&str) -> bool) -> Option<(String, usize)> {
    let mut out = String::with_capacity(message.len());
    let mut at = 0;
    let mut dropped = 0;
    for block in fenced_blocks(message) {
        let Some(path) = parse_header(block.info).0 else {
            continue;
        };
        if drop(&path) {
            out.push_str(&message[at..block.start]);
            out.push_str("[context from an excluded path left out]");
            at = block.end;
            dropped += 1;
        }
    }
    if dropped == 0 {
        return None;
    }
    out.push_str(&message[at..]);
    Some((out, dropped))
}

/// The message of a continue problems block: one line right after the block (which ends
/// at `from`), then a blank line or the end, that does not ask anything. `text_end` is
/// where `message` ends without its trailing whitespace.
fn problem_after(message: &str, from: usize, text_end: usize) -> Option<&str> {
    let rest = &message[from..];
    let rest = rest.strip_prefix('\n').unwrap_or(rest);
    let (line, after) = rest.split_once('\n').unwrap_or((rest, ""));
    let line = line.trim();
    // Only whitespace after the line: it starts at or past the end of the text.
    let after_at = message.len() - after.len();
    let ends_paragraph =
        after_at >= text_end || after.starts_with('\n') || after.starts_with("\r\n");
    let is_problem = !line.is_empty()
        && !line.starts_with("```")
        && !line.starts_with("~~~")
        && !line.ends_with('?')
        && ends_paragraph;
    is_problem.then_some(line)
}

/// A base64 field as UTF-8 text; empty (with a warning) when it cannot be read.
fn decoded(object: &serde_json::Map<String, Value>, field: &str) -> String {
    let raw = match object.get(field) {
        None | Some(Value::Null) => return String::new(),
        Some(Value::String(s)) => s,
        Some(other) => {
            tracing::warn!(
                field,
                kind = crate::json::kind(other),
                "editor field is not a string: ignored"
            );
            return String::new();
        }
    };
    let compact: String = raw.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&compact)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(&compact))
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(&compact))
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&compact));
    match bytes {
        Err(_) => {
            tracing::warn!(
                field,
                size = raw.len(),
                "editor field is not valid base64: ignored"
            );
            String::new()
        }
        Ok(b) => String::from_utf8(b).unwrap_or_else(|e| {
            tracing::warn!(
                field,
                size = e.as_bytes().len(),
                "editor field is not UTF-8 text: ignored"
            );
            String::new()
        }),
    }
}

struct Fence<'a> {
    /// Byte offset of the opening fence line.
    start: usize,
    /// Byte offset just after the closing fence (its line break excluded).
    end: usize,
    info: &'a str,
    body: &'a str,
}

/// Fenced code blocks (``` or ~~~) of a message, with their info strings.
fn fenced_blocks(text: &str) -> Vec<Fence<'_>> {
    let mut out = Vec::new();
    let mut offset = 0;
    let mut open: Option<(usize, &str, usize, char, usize)> = None; // (start, info, body_start, marker, len)
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        match (open, marker) {
            (None, Some(m)) if run >= 3 => {
                let info = trimmed[run..].trim();
                open = Some((offset, info, offset + line.len(), m, run));
            }
            (Some((start, info, body_start, m, n)), Some(m2))
                if m2 == m && run >= n && trimmed[run..].trim().is_empty() =>
            {
                out.push(Fence {
                    start,
                    end: offset + line.trim_end_matches(['\n', '\r']).len(),
                    info,
                    body: text[body_start..offset].trim_end_matches('\n'),
                });
                open = None;
            }
            _ => {}
        }
        offset += line.len();
    }
    out
}

/// `lang path (start-end)` → (path, lines). The first word is the language when more follow.
fn parse_header(info: &str) -> (Option<String>, Option<(usize, usize)>) {
    let (rest, lines) = match info.rfind('(') {
        Some(i) if info.ends_with(')') => {
            let range = &info[i + 1..info.len() - 1];
            let lines = range
                .split_once('-')
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
            if lines.is_some() {
                (info[..i].trim(), lines)
            } else {
                (info, None)
            }
        }
        _ => (info, None),
    };
    let words: Vec<&str> = rest.split_whitespace().collect();
    let path = match words.as_slice() {
        [_lang, path, ..] => Some((*path).to_string()),
        [single] if single.contains('/') || single.contains('.') => Some((*single).to_string()),
        _ => None,
    };
    (path, lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;

    fn user(v: Value) -> Value {
        Value::String(v.to_string())
    }

    #[test]
    fn the_reference_user_field() {
        let u = user(json!({
            "editor_content": STANDARD.encode("fn main() {}\n"),
            "selected_text": STANDARD.encode("¿qué hace esto?"),
            "extra_context": STANDARD.encode("file: src/main.rs"),
            "user_info": {"dev_id": 1, "project_id": 2, "org_id": 3},
        }));
        let ctx = EditorContext::from_user_field(Some(&u));
        assert_eq!(ctx.editor_content, "fn main() {}\n");
        assert_eq!(ctx.selected_text, "¿qué hace esto?");
        assert_eq!(ctx.extra_context, "file: src/main.rs");
        assert_eq!(
            ctx.user_info,
            Some(json!({"dev_id": 1, "project_id": 2, "org_id": 3}))
        );
        assert!(ctx.has_code());
    }

    #[test]
    fn anything_unreadable_is_empty_never_an_error() {
        let cases = [
            None,
            Some(Value::Null),
            Some(json!("alice")),
            Some(json!("{not json")),
            Some(json!(42)),
            Some(user(json!({"editor_content": 5, "selected_text": ["x"]}))),
            Some(user(json!({"editor_content": "%%%not base64%%%"}))),
            Some(user(
                json!({"selected_text": STANDARD.encode([0xff, 0xfe, 0xfd])}),
            )),
            Some(user(json!({"user_info": "not an object"}))),
        ];
        for u in cases {
            let ctx = EditorContext::from_user_field(u.as_ref());
            assert!(!ctx.has_code(), "{u:?}: {ctx:?}");
            assert!(ctx.user_info.is_none());
        }
        // One bad field does not spoil the others; padding and line breaks are tolerated.
        let ctx = EditorContext::from_user_field(Some(&user(json!({
            "editor_content": "@@@",
            "selected_text": "aGVs\nbG8",
            "user_info": "{\"dev_id\": 7}",
        }))));
        assert_eq!(
            (ctx.editor_content.as_str(), ctx.selected_text.as_str()),
            ("", "hello")
        );
        assert_eq!(ctx.user_info, Some(json!({"dev_id": 7})));
    }

    #[test]
    fn additional_context_items() {
        let items = json!([
            {"category": "FILE", "id": "file://repo/src/a.ts", "content": "export const a = 1;",
             "metadata": {"relativeFilePath": "src/a.ts"}},
            {"category": "snippet", "id": "s1", "content": "let x = 2;"},
            {"category": "file", "id": "empty", "content": ""},
            "garbage",
        ]);
        let ctx = EditorContext::from_request(None, Some(&items), "question");
        assert_eq!(ctx.items.len(), 2);
        assert_eq!(ctx.items[0].category, "file");
        assert_eq!(ctx.items[0].path.as_deref(), Some("src/a.ts"));
        assert_eq!(ctx.items[1].content, "let x = 2;");
        assert!(ctx.has_code());
        assert!(
            EditorContext::from_request(None, Some(&json!({"not": "a list"})), "")
                .items
                .is_empty()
        );
    }

    #[test]
    fn continue_style_blocks_in_the_message() {
        let msg = "```rust src/lib.rs (10-12)\nfn add(a: i32) -> i32 {\n    a\n}\n```\n\nThis is the currently open file:\n\n```python app/main.py\nprint('hi')\n```\n\nWhy does add return a?\n\n```\nplain code the user typed\n```";
        let ctx = EditorContext::from_request(None, None, msg);
        assert_eq!(ctx.editor_content, "print('hi')");
        assert_eq!(ctx.file_path.as_deref(), Some("app/main.py"));
        assert_eq!(ctx.items.len(), 1, "{:?}", ctx.items);
        let snippet = &ctx.items[0];
        assert_eq!(snippet.path.as_deref(), Some("src/lib.rs"));
        assert_eq!(snippet.lines, Some((10, 12)));
        assert_eq!(snippet.content, "fn add(a: i32) -> i32 {\n    a\n}");
        // The user field wins over the message for the open file.
        let u = user(json!({"editor_content": STANDARD.encode("from the field")}));
        let ctx = EditorContext::from_request(Some(&u), None, msg);
        assert_eq!(ctx.editor_content, "from the field");
        // A message of many blocks gives its first ones as items, not a copy of each.
        let many = "```x src/a.rs\nfn a() {}\n```\n".repeat(10_000);
        let ctx = EditorContext::from_request(None, None, &many);
        assert_eq!(ctx.items.len(), MAX_MESSAGE_BLOCKS);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_any_user_field(s in ".{0,400}") {
            let _ = EditorContext::from_request(Some(&Value::String(s.clone())), None, &s);
        }

        #[test]
        fn never_panics_on_any_json_shape(
            editor in proptest::option::of(".{0,80}"),
            selected in proptest::option::of("[A-Za-z0-9+/=\\n]{0,80}"),
            info in proptest::option::of(".{0,40}"),
            msg in "(```[a-z]{0,5} [a-z/._]{0,12} \\(?[0-9-]{0,6}\\)?\n.{0,40}\n```\n?){0,3}.{0,40}",
        ) {
            let u = json!({"editor_content": editor, "selected_text": selected, "user_info": info});
            let ctx = EditorContext::from_request(Some(&user(u)), Some(&json!([{"content": msg}])), &msg);
            proptest::prop_assert!(ctx.items.iter().all(|i| !i.content.is_empty() || i.category == "snippet"));
        }
    }
}

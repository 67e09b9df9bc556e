//! Context items as IDE clients attach them (GitLab's `AiContextItem`: `{id, category,
//! content, metadata, isEnabled}`), diagnostics, recent edits and the cursor.
//!
//! An item the client disabled (`isEnabled: false`) never reaches the model, a second
//! item with an `id` already seen is the same item, and an item without content is kept
//! when its metadata says something (a merge request's title and description). Each
//! category keeps the metadata that makes it useful, as `key: value` lines; unknown
//! categories are generic text.

use serde::Serialize;
use serde_json::Value;

/// One piece of context an IDE attached (a file, a snippet, a merge request, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextItem {
    /// Normalised: `file`, `snippet`, `merge_request`, `issue`, `dependency`,
    /// `terminal`, `local_git`, or what the client called it (lowercased).
    pub category: String,
    pub id: String,
    pub path: Option<String>,
    /// 1-based inclusive line range, when the client gave one.
    pub lines: Option<(usize, usize)>,
    /// The metadata worth showing the model, in order.
    pub meta: Vec<(String, String)>,
    pub content: String,
    /// Read from the user's message (continue-style), so the model sees it there already.
    pub from_message: bool,
    /// Cut to `context.max_item_bytes`.
    pub cut: bool,
}

/// A compiler's or linter's finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: Option<String>,
    /// 1-based.
    pub line: Option<usize>,
    /// `error`, `warning`, `info` or `hint`.
    pub severity: String,
    pub message: String,
    /// The id of the item it came in, when it came as one.
    pub item: Option<String>,
    /// Read from the user's message (continue's problems), so the model sees it there.
    pub from_message: bool,
}

/// A change the user made recently, as a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentEdit {
    pub file: Option<String>,
    pub diff: String,
    pub item: Option<String>,
    pub cut: bool,
    pub from_message: bool,
}

/// Where the caret is (1-based line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub line: usize,
    pub column: usize,
}

/// An attached item the answer was given, as clients receive it (`context_items`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsedItem {
    pub id: String,
    pub category: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Only part of it reached the model (the item or the window was too small).
    pub cut: bool,
}

impl UsedItem {
    /// How a later turn names it: `file src/a.rs`, `merge_request gitlab_mr_1`.
    pub fn reference(&self) -> String {
        format!(
            "{} {}",
            self.category,
            self.path.as_deref().unwrap_or(&self.id)
        )
    }
}

/// What reading the items left out, for logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    pub disabled: usize,
    pub duplicates: usize,
    pub empty: usize,
}

/// The items of one request, read.
#[derive(Debug, Default)]
pub struct Read {
    pub items: Vec<ContextItem>,
    pub diagnostics: Vec<Diagnostic>,
    pub edits: Vec<RecentEdit>,
    pub skipped: Skipped,
    /// Bytes of text the items carried (content and metadata), as sent.
    pub bytes: usize,
}

/// The category as the gateway names it.
pub fn category(raw: &str) -> String {
    let c = raw.trim().to_lowercase().replace(['-', ' '], "_");
    match c.as_str() {
        "files" | "open_tabs" | "local_file_search" => "file".into(),
        "snippets" | "selection" => "snippet".into(),
        "mr" | "mergerequest" | "merge_requests" => "merge_request".into(),
        "issues" | "work_item" | "workitem" => "issue".into(),
        "dependencies" | "deps" => "dependency".into(),
        "git" | "local_git_diff" | "commit" => "local_git".into(),
        "shell" | "terminal_output" => "terminal".into(),
        "diagnostic" | "problems" | "problem" | "errors" => "diagnostics".into(),
        "recent_edits" | "edit" | "edits" | "diff" => "recent_edit".into(),
        _ => c,
    }
}

/// Metadata keys never shown: identity and bookkeeping, not knowledge.
const HIDDEN: &[&str] = &[
    "author",
    "email",
    "created_at",
    "updated_at",
    "createdat",
    "updatedat",
    "icon",
    "iconurl",
    "secondarytext",
    "subtype",
    "subtitle",
    "enabled",
    "isenabled",
    "disabledreasons",
    "disabled_reasons",
    "schemaversion",
    "project",
    "web_url",
    "weburl",
    "url",
    "uri",
];
/// Keys shown first, in this order.
const FIRST: &[&str] = &[
    "iid",
    "title",
    "name",
    "version",
    "command",
    "cwd",
    "exit_code",
    "source_branch",
    "target_branch",
    "state",
    "labels",
    "description",
];
/// Longest metadata value kept, in characters, and most fields per item.
const MAX_META_CHARS: usize = 4000;
const MAX_META_FIELDS: usize = 16;

/// `additional_context` (or GitLab's `additionalContext`): a list of items.
pub fn read(items: &Value) -> Read {
    let mut out = Read::default();
    let Some(list) = items.as_array() else {
        tracing::warn!(
            kind = crate::json::kind(items),
            "additional_context is not a list: ignored"
        );
        return out;
    };
    let mut seen = std::collections::HashSet::new();
    for (index, item) in list.iter().enumerate() {
        let text = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_string);
        // GitLab puts the flag on the item (`isEnabled`) or in its metadata (`enabled`).
        let flag = |v: Option<&Value>, keys: &[&str]| {
            keys.iter()
                .find_map(|k| v?.get(*k).and_then(Value::as_bool))
        };
        let enabled = flag(Some(item), &["isEnabled", "is_enabled"]).or_else(|| {
            flag(
                item.get("metadata"),
                &["enabled", "isEnabled", "is_enabled"],
            )
        });
        if enabled == Some(false) {
            out.skipped.disabled += 1;
            continue;
        }
        let id = text("id").unwrap_or_default();
        if !id.is_empty() && !seen.insert(id.clone()) {
            out.skipped.duplicates += 1;
            continue;
        }
        let content = text("content").unwrap_or_default();
        let metadata = item.get("metadata");
        let meta = metadata.map(shown_metadata).unwrap_or_default();
        out.bytes += content.len() + meta.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        let category = category(
            &text("category")
                .or_else(|| text("type"))
                .unwrap_or_else(|| "file".into()),
        );
        let meta_text = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| metadata?.get(*k)?.as_str().map(str::to_string))
        };
        let path = meta_text(&[
            "relativeFilePath",
            "relative_path",
            "file_path",
            "filePath",
            "path",
            "file",
        ]);
        match category.as_str() {
            "diagnostics" => {
                let mut d = metadata.map(diagnostic).unwrap_or_else(|| Diagnostic {
                    file: None,
                    line: None,
                    severity: "error".into(),
                    message: String::new(),
                    item: None,
                    from_message: false,
                });
                if d.message.is_empty() {
                    d.message = content;
                }
                if d.message.trim().is_empty() {
                    out.skipped.empty += 1;
                    continue;
                }
                d.file = d.file.or(path);
                d.item = Some(if id.is_empty() {
                    format!("diagnostics-{index}")
                } else {
                    id
                });
                out.diagnostics.push(d);
            }
            "recent_edit" => {
                let diff = if content.is_empty() {
                    meta_text(&["diff", "patch"]).unwrap_or_default()
                } else {
                    content
                };
                if diff.trim().is_empty() {
                    out.skipped.empty += 1;
                    continue;
                }
                out.edits.push(RecentEdit {
                    file: path,
                    diff,
                    item: Some(if id.is_empty() {
                        format!("edit-{index}")
                    } else {
                        id
                    }),
                    cut: false,
                    from_message: false,
                });
            }
            _ => {
                // Without content, an item is worth its metadata only when it has some to
                // say beyond where it lives.
                if content.trim().is_empty()
                    && meta.iter().all(|(k, _)| k == "path" || k == "language")
                {
                    out.skipped.empty += 1;
                    continue;
                }
                let id = if id.is_empty() {
                    path.clone()
                        .unwrap_or_else(|| format!("{category}-{index}"))
                } else {
                    id
                };
                out.items.push(ContextItem {
                    category,
                    id,
                    path,
                    lines: None,
                    meta,
                    content,
                    from_message: false,
                    cut: false,
                });
            }
        }
    }
    // One line for all of them: a list of millions of empty items had written a line each.
    if out.skipped.empty > 0 {
        tracing::warn!(
            items = out.skipped.empty,
            "additional_context items with nothing to use (no content, no metadata): ignored"
        );
    }
    out
}

/// The scalar metadata worth showing (strings, numbers, booleans, lists of strings),
/// known keys first, without identity or bookkeeping keys, bounded.
fn shown_metadata(metadata: &Value) -> Vec<(String, String)> {
    let Some(object) = metadata.as_object() else {
        return Vec::new();
    };
    let mut fields: Vec<(String, String)> = object
        .iter()
        .filter(|(k, _)| !HIDDEN.contains(&k.to_lowercase().as_str()))
        .filter_map(|(k, v)| {
            let value = match v {
                Value::String(s) => s.trim().to_string(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Array(a) => a
                    .iter()
                    .filter_map(|x| match x {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => String::new(),
            };
            let key = match k.as_str() {
                "relativeFilePath" | "relative_path" | "file_path" | "filePath" => "path",
                "languageId" | "language_id" => "language",
                other => other,
            };
            (!value.is_empty()).then(|| (key.to_string(), bounded(&value, MAX_META_CHARS)))
        })
        .collect();
    let rank = |k: &str| FIRST.iter().position(|f| *f == k).unwrap_or(FIRST.len());
    fields.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then_with(|| a.0.cmp(&b.0)));
    fields.dedup_by(|a, b| a.0 == b.0);
    fields.truncate(MAX_META_FIELDS);
    fields
}

fn bounded(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A diagnostic from an object with LSP-like or plain keys.
pub fn diagnostic(v: &Value) -> Diagnostic {
    let text = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| v.get(*k)?.as_str().map(str::to_string))
    };
    let number = |keys: &[&str]| keys.iter().find_map(|k| v.get(*k)?.as_u64());
    let line = number(&["line", "startLine", "start_line", "lineNumber"]).or_else(|| {
        // LSP ranges are 0-based.
        v.pointer("/range/start/line")
            .and_then(Value::as_u64)
            .map(|l| l.saturating_add(1))
    });
    let severity = match v.get("severity") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(1) => "error",
            Some(2) => "warning",
            Some(3) => "info",
            _ => "hint",
        }
        .to_string(),
        Some(Value::String(s)) => {
            let s = s.to_lowercase();
            match s.as_str() {
                "err" | "error" | "fatal" => "error".into(),
                "warn" | "warning" => "warning".into(),
                "information" | "info" | "note" => "info".into(),
                "hint" => "hint".into(),
                _ => bounded(&s, 16),
            }
        }
        _ => "error".into(),
    };
    let source = text(&["source"]);
    let mut message = bounded(
        &text(&["message", "msg", "text"]).unwrap_or_default(),
        MAX_META_CHARS,
    );
    if let Some(source) = source.filter(|s| !s.is_empty()) {
        message = format!("[{}] {message}", bounded(&source, 40));
    }
    Diagnostic {
        file: text(&[
            "file",
            "path",
            "filePath",
            "file_path",
            "relativeFilePath",
            "uri",
        ]),
        line: line.and_then(|l| usize::try_from(l).ok()),
        severity,
        message,
        item: None,
        from_message: false,
    }
}

/// `diagnostics`, `recent_edits` and `cursor` of the `user` field.
pub fn from_user_field(
    object: &serde_json::Map<String, Value>,
) -> (Vec<Diagnostic>, Vec<RecentEdit>, Option<Cursor>) {
    let list = |k: &str| {
        object
            .get(k)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    let diagnostics = list("diagnostics")
        .iter()
        .filter(|v| v.is_object())
        .map(diagnostic)
        .filter(|d| !d.message.trim().is_empty())
        .collect();
    let edits = list("recent_edits")
        .iter()
        .filter_map(|v| {
            let diff = v.get("diff").and_then(Value::as_str)?.to_string();
            (!diff.trim().is_empty()).then(|| RecentEdit {
                file: v
                    .get("file")
                    .or_else(|| v.get("path"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                diff,
                item: None,
                cut: false,
                from_message: false,
            })
        })
        .collect();
    let cursor = object.get("cursor").and_then(|c| {
        let line = usize::try_from(c.get("line")?.as_u64()?).ok()?;
        let column = c
            .get("column")
            .or_else(|| c.get("character"))
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        Some(Cursor { line, column })
    });
    (diagnostics, edits, cursor)
}

impl ContextItem {
    /// The line naming the item in the prompt: what it is and where it comes from.
    pub fn label(&self) -> String {
        let get = |k: &str| {
            self.meta
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        let name = self.path.as_deref().unwrap_or(&self.id);
        match self.category.as_str() {
            "file" => match get("language") {
                Some(lang) => format!("File: {name} ({lang})"),
                None => format!("File: {name}"),
            },
            "snippet" => match self.lines {
                Some((a, b)) => format!("Snippet: {name} (lines {a}-{b})"),
                None => format!("Snippet: {name}"),
            },
            "merge_request" | "issue" => {
                let (word, mark) = if self.category == "issue" {
                    ("Issue", "#")
                } else {
                    ("Merge request", "!")
                };
                let number = get("iid")
                    .map(|n| format!(" {mark}{n}"))
                    .unwrap_or_default();
                match get("title") {
                    Some(t) => format!("{word}{number}: {t}"),
                    None => format!("{word}{number} {}", self.id),
                }
            }
            "dependency" => {
                let name = get("name").unwrap_or(name);
                match get("version") {
                    Some(v) => format!("Dependency: {name} {v}"),
                    None => format!("Dependency: {name}"),
                }
            }
            "terminal" => match get("command") {
                Some(c) => format!("Terminal: $ {c}"),
                None => "Terminal output".into(),
            },
            "local_git" => format!("Git: {name}"),
            other => format!("{other}: {name}"),
        }
    }

    /// The item's text for the prompt: the metadata the label did not say, then its
    /// content.
    pub fn body(&self) -> String {
        let in_label: &[&str] = match self.category.as_str() {
            "file" => &["path", "language"],
            "snippet" => &["path"],
            "merge_request" | "issue" => &["iid", "title", "path"],
            "dependency" => &["name", "version", "path"],
            "terminal" => &["command", "path"],
            _ => &["path"],
        };
        let mut out = String::new();
        for (k, v) in &self.meta {
            if !in_label.contains(&k.as_str()) {
                out.push_str(&format!("{k}: {v}\n"));
            }
        }
        if !self.content.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&self.content);
        }
        out.trim_end().to_string()
    }
}

impl Diagnostic {
    /// `ERROR src/a.rs:12: message`.
    pub fn line_text(&self) -> String {
        let place = match (&self.file, self.line) {
            (Some(f), Some(l)) => format!(" {f}:{l}"),
            (Some(f), None) => format!(" {f}"),
            (None, Some(l)) => format!(" line {l}"),
            (None, None) => String::new(),
        };
        format!("{}{place}: {}", self.severity.to_uppercase(), self.message)
    }
}

/// Cuts `text` to at most `max` bytes (on a character boundary); whether it was cut.
pub fn cut_to(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("\n[… cut: longer than context.max_item_bytes]");
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gitlab_items_disabled_duplicates_and_metadata_only() {
        let read = read(&json!([
            {"id": "file://repo/src/a.ts", "category": "file", "content": "export const a = 1;",
             "isEnabled": true, "metadata": {"relativeFilePath": "src/a.ts", "project": "p"}},
            {"id": "file://repo/src/a.ts", "category": "file", "content": "export const a = 1;"},
            {"id": "gitlab_mr_789012", "category": "merge_request", "isEnabled": false,
             "metadata": {"iid": 42, "title": "Hidden"}},
            {"id": "gitlab_mr_1", "category": "MERGE_REQUEST", "metadata": {
                "iid": 7, "title": "Implement new feature X",
                "description": "We need to add feature X", "author": "jane@example.com",
                "labels": ["enhancement", "priority-medium"]}},
            {"id": "dep", "category": "dependency", "metadata": {"name": "serde", "version": "1.0.228"}},
            {"id": "nothing", "category": "snippet", "content": "", "metadata": {"relativeFilePath": "x"}},
        ]));
        assert_eq!(
            read.skipped,
            Skipped {
                disabled: 1,
                duplicates: 1,
                empty: 1
            }
        );
        assert_eq!(read.items.len(), 3);
        let mr = &read.items[1];
        assert_eq!(mr.category, "merge_request");
        assert_eq!(mr.label(), "Merge request !7: Implement new feature X");
        let body = mr.body();
        assert!(
            body.contains("description: We need to add feature X"),
            "{body}"
        );
        assert!(
            body.contains("labels: enhancement, priority-medium"),
            "{body}"
        );
        assert!(!body.contains("jane@"), "{body}");
        assert_eq!(read.items[2].label(), "Dependency: serde 1.0.228");
        assert_eq!(read.items[0].label(), "File: src/a.ts");
    }

    #[test]
    fn diagnostics_in_lsp_and_plain_shapes() {
        let lsp = diagnostic(&json!({"range": {"start": {"line": 9}}, "severity": 1,
            "message": "cannot find value `x`", "source": "rustc"}));
        assert_eq!(lsp.line, Some(10));
        assert_eq!(
            lsp.line_text(),
            "ERROR line 10: [rustc] cannot find value `x`"
        );
        let plain = diagnostic(
            &json!({"file": "a.py", "line": 3, "severity": "Warning", "message": "unused"}),
        );
        assert_eq!(plain.line_text(), "WARNING a.py:3: unused");
        // The last line an LSP range can name is not wrapped round to line 0.
        let last = diagnostic(&json!({"range": {"start": {"line": u64::MAX}}, "message": "x"}));
        assert_eq!(last.line.map(|l| l as u64), Some(u64::MAX));
    }

    #[test]
    fn cuts_on_a_character_boundary() {
        let mut s = "ñññ".to_string();
        assert!(cut_to(&mut s, 3));
        assert!(s.starts_with('ñ') && s.contains("cut"));
    }
}

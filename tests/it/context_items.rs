//! Context items the way IDE clients send them, through the HTTP API, asserted on what the
//! upstream model receives and on what the client gets back: GitLab's `AiContextItem`
//! (camelCase key, disabled items, duplicates, categories with their metadata), the
//! editor's diagnostics, recent edits and cursor, continue's problems and diff blocks,
//! limits and switches, the items a follow-up remembers, and a deadline for gathering
//! context when the embedder hangs. The examples of docs/assistant.md run as written.

use std::time::{Duration, Instant};

use assist_gateway::config::{EmbeddingProvider, Provider};
use base64::Engine;
use serde_json::{json, Value};

use crate::support::*;

/// The JSON body of docs/assistant.md's example `name` (its curl heredoc).
fn doc_example(name: &str) -> Value {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/assistant.md"))
        .expect("docs/assistant.md");
    let body = doc
        .split(&format!("<!-- example: {name} -->"))
        .nth(1)
        .and_then(|rest| rest.split("<<'EOF'\n").nth(1))
        .and_then(|rest| rest.split("\nEOF").next())
        .unwrap_or_else(|| panic!("docs/assistant.md has the {name} example"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("the {name} example is JSON: {e}"))
}

async fn ask(gw: &Gateway, path: &str, body: &Value) -> Value {
    let (status, _, text) = post(&gw.url(path), body.clone()).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn position(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not in the prompt:\n{text}"))
}

#[tokio::test]
async fn gitlab_items_disabled_duplicate_and_metadata_only() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let body = doc_example("gitlab-items");
    let answer = ask(&gw, "/v1/chat/completions", &body).await;
    let prompt = prompt_text(&up.last_request());
    // The disabled item never reaches the model; the duplicate comes once.
    assert!(!prompt.contains("not-for-the-model"), "{prompt}");
    assert_eq!(
        prompt.matches("export const MAX_RETRIES = 3;").count(),
        1,
        "{prompt}"
    );
    assert!(
        prompt.contains("File: src/retry.ts (typescript)"),
        "{prompt}"
    );
    // The merge request, with metadata only, is kept with what makes it useful.
    let mr = position(
        &prompt,
        "<work_items>\nMerge request !42: Retry failed uploads",
    );
    assert!(prompt[mr..].contains(
        "description: Uploads are retried up to MAX_RETRIES times with exponential backoff."
    ));
    assert!(prompt[mr..].contains("labels: enhancement"));
    assert!(!prompt.contains("jane.doe"), "identity metadata stays out");
    // Nothing attached lands in the selection's section.
    assert!(!prompt.contains("<selected_code>"), "{prompt}");
    assert_eq!(
        answer["context_items"],
        json!([
            {"id": "file:///work/app/src/retry.ts", "category": "file", "path": "src/retry.ts", "cut": false},
            {"id": "gitlab_mr_42", "category": "merge_request", "cut": false},
        ])
    );
    // The snake_case key and Ollama's API read the same items.
    let mut snake = body.clone();
    let items = snake
        .as_object_mut()
        .unwrap()
        .remove("additionalContext")
        .unwrap();
    snake["additional_context"] = items;
    let ollama = ask(&gw, "/api/chat", &snake).await;
    assert_eq!(ollama["context_items"], answer["context_items"]);
    assert!(!prompt_text(&up.last_request()).contains("not-for-the-model"));
}

#[tokio::test]
async fn each_category_has_its_own_section_in_priority_order() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let body = json!({"model": "brunix", "stream": false,
    "messages": [{"role": "user", "content": "How do I configure the server port?"}],
    "additional_context": [
        {"id": "s1", "category": "snippet", "content": "let port = env(\"BRISA_PORT\")",
         "metadata": {"relativeFilePath": "src/main.brisa"}},
        {"id": "t1", "category": "terminal", "content": "error: port 8080 already in use",
         "metadata": {"command": "brisa serve"}},
        {"id": "d1", "category": "dependency", "metadata": {"name": "serde", "version": "1.0.228"}},
        {"id": "i1", "category": "issue", "metadata": {"iid": 7, "title": "Port conflicts",
          "description": "Two servers fight over 8080."}},
        {"id": "x1", "category": "custom_thing", "content": "something the IDE knows"},
    ]});
    let answer = ask(&gw, "/v1/chat/completions", &body).await;
    let prompt = prompt_text(&up.last_request());
    let snippets = position(
        &prompt,
        "<attached_snippets>\nSnippet: src/main.brisa\nlet port = env(\"BRISA_PORT\")",
    );
    let terminal = position(
        &prompt,
        "<terminal>\nTerminal: $ brisa serve\nerror: port 8080 already in use",
    );
    let issue = position(
        &prompt,
        "<work_items>\nIssue #7: Port conflicts\ndescription: Two servers fight over 8080.",
    );
    let knowledge = position(&prompt, "<knowledge>");
    let dependency = position(&prompt, "<dependencies>\nDependency: serde 1.0.228");
    let other = position(
        &prompt,
        "<attached_context>\ncustom_thing: x1\nsomething the IDE knows",
    );
    assert!(snippets < terminal && terminal < issue && issue < knowledge);
    assert!(knowledge < dependency && dependency < other);
    assert!(!prompt.contains("<selected_code>"));
    let used: Vec<&str> = answer["context_items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["category"].as_str().unwrap())
        .collect();
    assert_eq!(
        used,
        ["snippet", "terminal", "dependency", "issue", "custom_thing"]
    );
}

#[tokio::test]
async fn diagnostics_at_the_cursor_rank_with_the_selection_and_edits_come_too() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let body = doc_example("user-diagnostics");
    ask(&gw, "/v1/chat/completions", &body).await;
    let prompt = prompt_text(&up.last_request());
    let near = position(
        &prompt,
        "<diagnostics>\nERROR src/upload.py:3: undefined name 'retries'",
    );
    let open = position(&prompt, "<open_file>\nFile: src/upload.py");
    let far = position(
        &prompt,
        "<other_diagnostics>\nWARNING src/cli.py:40: unused import 'os'",
    );
    let edits = position(
        &prompt,
        "<recent_edits>\nEdit: src/upload.py\n-def upload_all(paths):",
    );
    assert!(near < open && open < far && far < edits, "{prompt}");
    // A question that is not about the code: the editor's own diagnostics stay out.
    let mut general = body.clone();
    general["messages"][0]["content"] = json!("How do I configure the server port?");
    ask(&gw, "/v1/chat/completions", &general).await;
    let prompt = prompt_text(&up.last_request());
    assert!(!prompt.contains("undefined name"), "{prompt}");
    // The same diagnostics as items are attached: always used, and listed.
    let items = json!({"model": "brunix", "stream": false,
    "messages": [{"role": "user", "content": "How do I configure the server port?"}],
    "additional_context": [
        {"id": "diag-1", "category": "diagnostics", "metadata": {"file": "src/a.rs",
         "range": {"start": {"line": 11}}, "severity": 1, "message": "mismatched types", "source": "rustc"}},
        {"id": "edit-1", "category": "recent_edit", "content": "-let a = 1;\n+let a = 2;",
         "metadata": {"relativeFilePath": "src/a.rs"}},
    ]});
    let answer = ask(&gw, "/v1/chat/completions", &items).await;
    let prompt = prompt_text(&up.last_request());
    assert!(
        prompt.contains("ERROR src/a.rs:12: [rustc] mismatched types"),
        "{prompt}"
    );
    assert!(prompt.contains("+let a = 2;"));
    assert_eq!(
        answer["context_items"],
        json!([
            {"id": "diag-1", "category": "diagnostics", "path": "src/a.rs", "cut": false},
            {"id": "edit-1", "category": "recent_edit", "path": "src/a.rs", "cut": false},
        ])
    );
}

#[tokio::test]
async fn continue_problems_and_diff_blocks_arrive_once() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let body = doc_example("continue-problems");
    let answer = ask(&gw, "/v1/chat/completions", &body).await;
    assert!(
        answer.get("context_items").is_none(),
        "nothing attached beside the message"
    );
    let prompt = prompt_text(&up.last_request());
    assert_eq!(
        prompt.matches("undefined name 'retries'").count(),
        1,
        "{prompt}"
    );
    assert_eq!(
        prompt
            .matches("+def upload_all(paths, max_retries=3):")
            .count(),
        1
    );
}

#[tokio::test]
async fn items_over_the_limits_are_cut_or_refused_in_each_apis_shape() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.context.max_item_bytes = 1024;
        s.context.max_items_bytes = 8192;
    })
    .await;
    let item = |id: &str, bytes: usize| json!({"id": id, "category": "snippet", "content": "x".repeat(bytes)});
    let body = json!({"model": "brunix", "stream": false,
        "messages": [{"role": "user", "content": "what is this?"}],
        "additional_context": [item("big", 5000), item("small", 100)]});
    let answer = ask(&gw, "/v1/chat/completions", &body).await;
    assert_eq!(answer["context_items"][0]["cut"], true);
    assert_eq!(answer["context_items"][1]["cut"], false);
    let prompt = prompt_text(&up.last_request());
    assert!(prompt.contains("[… cut: longer than context.max_item_bytes]"));
    assert!(!prompt.contains(&"x".repeat(1100)));
    let sent = up.requests().len();
    let huge = json!({"model": "brunix", "stream": true,
        "messages": [{"role": "user", "content": "what is this?"}],
        "additional_context": [item("a", 5000), item("b", 5000)]});
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), huge.clone()).await;
    assert_eq!(status, 413, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["code"], "request_too_large");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("context.max_items_bytes"));
    let (status, _, text) = post(&gw.url("/api/chat"), huge).await;
    assert_eq!(status, 413, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert!(error["error"]
        .as_str()
        .unwrap()
        .contains("context.max_items_bytes"));
    assert_eq!(up.requests().len(), sent, "nothing was sent upstream");
}

#[tokio::test]
async fn a_follow_up_knows_the_items_of_the_turn_before() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let first = json!({"model": "brunix", "stream": false, "session_id": "items-1",
        "messages": [{"role": "user", "content": "what does this file export?"}],
        "additionalContext": [{"id": "file:///app/src/retry.ts", "category": "file",
            "content": "export const MAX_RETRIES = 3;", "metadata": {"relativeFilePath": "src/retry.ts"}}]});
    ask(&gw, "/v1/chat/completions", &first).await;
    let second = json!({"model": "brunix", "stream": false, "session_id": "items-1",
        "messages": [{"role": "user", "content": "and who imports that file?"}]});
    ask(&gw, "/v1/chat/completions", &second).await;
    let messages = up.last_request().body["messages"].clone();
    let earlier = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user" && m["content"].as_str().unwrap().contains("export?"))
        .expect("the first turn is in the history");
    assert!(
        earlier["content"]
            .as_str()
            .unwrap()
            .ends_with("[attached: file src/retry.ts]"),
        "{earlier}"
    );
}

#[tokio::test]
async fn switches_turn_editor_context_and_items_off() {
    let up = ScriptedUpstream::start().await;
    let body = json!({"model": "brunix", "stream": false,
        "messages": [{"role": "user", "content": "what does this do?"}],
        "user": json!({"selected_text": b64("let SELECTED = 1")}).to_string(),
        "additional_context": [{"id": "s", "category": "snippet", "content": "let ATTACHED = 2"}]});
    let off = Gateway::start(&up, Provider::Ollama, |s| {
        s.assistant.editor_context = false
    })
    .await;
    let answer = ask(&off, "/v1/chat/completions", &body).await;
    let prompt = prompt_text(&up.last_request());
    assert!(
        !prompt.contains("SELECTED") && !prompt.contains("ATTACHED"),
        "{prompt}"
    );
    assert!(answer.get("context_items").is_none());
    let no_items = Gateway::start(&up, Provider::Ollama, |s| s.context.items = false).await;
    ask(&no_items, "/v1/chat/completions", &body).await;
    let prompt = prompt_text(&up.last_request());
    assert!(
        prompt.contains("SELECTED") && !prompt.contains("ATTACHED"),
        "{prompt}"
    );
}

/// A hung embedder: the answer comes with BM25's results after `retrieval.deadline_ms`,
/// not after the embedder's own timeout; the miss is counted and `/ready` says so.
#[tokio::test]
async fn a_hung_embedder_costs_the_deadline_not_the_answer() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.retrieval.deadline_ms = 300;
    })
    .await;
    up.slow_embeddings(Duration::from_secs(600));
    let body = json!({"model": "brunix", "stream": false,
        "messages": [{"role": "user", "content": "Which environment variable overrides the server port?"}]});
    let started = Instant::now();
    ask(&gw, "/v1/chat/completions", &body).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "answered after {took:?} with a hung embedder"
    );
    let prompt = prompt_text(&up.last_request());
    assert!(
        prompt.contains("<knowledge>"),
        "BM25 still answered: {prompt}"
    );
    let metrics = client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("assist_retrieval_deadline_total 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("deadline"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let (_, ready) = get_json(&gw.url("/ready")).await;
    assert_eq!(ready["checks"]["embedder"]["status"], "degraded", "{ready}");
}

//! What each fuzz target checks, shared by the targets in `fuzz_targets/` (cargo-fuzz,
//! libFuzzer) and by the integration test that replays every input of `corpus/` and
//! `regressions/` on each test run (`tests/it/fuzz_corpus.rs`): the same functions, fed
//! the same bytes, with no instrumented build.
//!
//! - `openai_request` / `ollama_request` / `anthropic_request` / `responses_request`: a body either becomes the pipeline's input or
//!   an error a client can read, in its dialect's shape and with a 4xx status; never a
//!   panic.
//! - `user_field`: the editor context from any `user` field, `additional_context` and
//!   message; see its own comment.
#![allow(dead_code)]

use std::sync::OnceLock;

use assist_gateway::config::{ServerSettings, Settings};
use assist_gateway::context::EditorContext;
use assist_gateway::http::fuzzing::{parse_chat_request, render_error, ChatRoute};
use assist_gateway::llm::Input;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use serde::de::IgnoredAny;
use serde_json::{json, Value};

/// `POST /v1/chat/completions` and `POST /v1/completions`: any body bytes.
pub fn openai_request(body: &[u8]) {
    check(ChatRoute::OpenAiChat, body);
    check(ChatRoute::OpenAiCompletions, body);
}

/// `POST /api/chat` and `POST /api/generate`: any body bytes.
pub fn ollama_request(body: &[u8]) {
    check(ChatRoute::OllamaChat, body);
    check(ChatRoute::OllamaGenerate, body);
}

/// `POST /v1/messages` (Anthropic): any body bytes.
pub fn anthropic_request(body: &[u8]) {
    check(ChatRoute::AnthropicMessages, body);
}

/// `POST /v1/responses`: any body bytes.
pub fn responses_request(body: &[u8]) {
    check(ChatRoute::Responses, body);
}

/// The compiled-in defaults (`config/default.toml`), as a fresh gateway runs.
fn server() -> &'static ServerSettings {
    static SERVER: OnceLock<ServerSettings> = OnceLock::new();
    SERVER.get_or_init(|| {
        Settings::load_without_env(None)
            .expect("the default settings load")
            .server
    })
}

fn check(route: ChatRoute, body: &[u8]) {
    match parse_chat_request(route, body, server()) {
        Ok(parsed) => {
            // Only one whole JSON object is ever accepted (serde_json reading the text
            // without keeping it: a lone surrogate escape, which JSON's grammar allows,
            // passes there as in the fields the gateway ignores) ...
            serde_json::from_slice::<IgnoredAny>(body).expect("an accepted body is JSON");
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            assert_eq!(first, Some(&b'{'), "an accepted body is an object");
            // ... and the model is the one it names.
            let model = &parsed.turn.request.model;
            assert!(
                !model.trim().is_empty(),
                "an accepted request names a model"
            );
            if let Ok(value) = serde_json::from_slice::<Value>(body) {
                assert_eq!(value["model"].as_str(), Some(model.as_str()));
            }
            if !parsed.load {
                let server = server();
                match &parsed.turn.request.input {
                    Input::Chat(messages) => {
                        assert!(!messages.is_empty());
                        assert!(messages.len() <= server.max_messages);
                        for m in messages {
                            assert!(m.content.chars().count() <= server.max_message_chars);
                        }
                    }
                    Input::Prompt { prompt, .. } => {
                        assert!(prompt.chars().count() <= server.max_message_chars)
                    }
                }
            }
            // What the pipeline reads first: the editor context from every place a client
            // may put it (`user`, `additional_context`, the last user message).
            let ctx = &parsed.turn.editor;
            assert!(ctx
                .items
                .iter()
                .all(|i| !i.content.is_empty() || i.from_message));
        }
        Err(e) => {
            assert!(e.status.is_client_error(), "{}: {}", e.status, e.message);
            let (status, rendered) = render_error(route, &e);
            assert_eq!(status, e.status);
            let object = rendered.as_object().expect("an error body is an object");
            if route.is_anthropic() {
                assert_eq!(object.len(), 2, "{rendered}");
                assert_eq!(rendered["type"], "error");
                let error = &rendered["error"];
                assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
                assert!(error["type"].as_str().is_some_and(|t| !t.is_empty()));
                return;
            }
            assert_eq!(object.len(), 1, "{rendered}");
            if route.is_openai() {
                let error = &rendered["error"];
                assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
                assert!(error["type"].as_str().is_some_and(|t| !t.is_empty()));
                assert!(error["param"].is_string() || error["param"].is_null());
                assert!(error.get("code").is_some(), "{rendered}");
            } else {
                assert!(rendered["error"].as_str().is_some_and(|m| !m.is_empty()));
            }
        }
    }
}

const FIELDS: [&str; 3] = ["editor_content", "selected_text", "extra_context"];

/// The editor context: the OpenAI `user` field (a JSON string holding base64 fields),
/// `additional_context` items and continue-style blocks in the last user message.
///
/// The first byte picks what the rest is:
/// - 0: a `user` string as a client sends it, also read as the user's message;
/// - 1: any JSON value, as the `user` field and as `additional_context`;
/// - else: three texts (split at 0xFF, which UTF-8 never holds) sent base64-encoded in
///   the `user` field, in one of the four base64 alphabets/paddings and maybe wrapped at
///   76 columns: each must come back exactly when it is UTF-8, and empty otherwise.
pub fn user_field(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        0 => {
            let text = String::from_utf8_lossy(rest);
            let ctx =
                EditorContext::from_request(Some(&Value::String(text.to_string())), None, &text);
            message_blocks_come_from_the_message(&ctx, &text);
        }
        1 => {
            let Ok(value) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let ctx = EditorContext::from_request(Some(&value), Some(&value), "");
            let listed = value.as_array().map_or(0, Vec::len);
            assert!(ctx.items.len() <= listed);
            assert!(ctx
                .items
                .iter()
                .all(|i| !i.content.is_empty() && !i.from_message));
            if let Some(info) = &ctx.user_info {
                assert!(info.is_object());
            }
        }
        how => {
            let texts: Vec<&[u8]> = rest.splitn(3, |&b| b == 0xff).collect();
            let engine = match how % 4 {
                0 => &STANDARD,
                1 => &STANDARD_NO_PAD,
                2 => &URL_SAFE,
                _ => &URL_SAFE_NO_PAD,
            };
            let wrap = how & 0x80 != 0;
            let mut fields = serde_json::Map::new();
            for (field, text) in FIELDS.iter().zip(&texts) {
                let mut encoded = engine.encode(text);
                if wrap {
                    encoded = encoded
                        .as_bytes()
                        .chunks(76)
                        .map(|line| std::str::from_utf8(line).unwrap())
                        .collect::<Vec<_>>()
                        .join("\r\n");
                }
                fields.insert(field.to_string(), Value::String(encoded));
            }
            fields.insert("user_info".into(), json!({"dev_id": 1}));
            let user = Value::String(Value::Object(fields).to_string());
            let ctx = EditorContext::from_user_field(Some(&user));
            let read = [&ctx.editor_content, &ctx.selected_text, &ctx.extra_context];
            for (i, got) in read.iter().enumerate() {
                let want = texts
                    .get(i)
                    .map_or(Some(""), |t| std::str::from_utf8(t).ok());
                assert_eq!(got.as_str(), want.unwrap_or(""), "{}", FIELDS[i]);
            }
            assert_eq!(ctx.user_info, Some(json!({"dev_id": 1})));
        }
    }
}

/// Blocks read from the message are parts of it, each naming its file.
fn message_blocks_come_from_the_message(ctx: &EditorContext, message: &str) {
    for item in ctx.items.iter().filter(|i| i.from_message) {
        assert!(message.contains(&item.content));
        let path = item
            .path
            .as_deref()
            .expect("a block from the message names its file");
        assert!(!path.is_empty() && message.contains(path));
        if let Some((a, b)) = item.lines {
            assert!(message.contains(&a.to_string()) && message.contains(&b.to_string()));
        }
    }
    if ctx.file_in_message {
        assert!(message.contains(&ctx.editor_content));
    }
}

//! What every request target checks: a body either becomes the pipeline's input or an
//! error a client can read, in its dialect's shape and with a 4xx status; never a panic.

use std::sync::OnceLock;

use assist_gateway::config::{ServerSettings, Settings};
use assist_gateway::http::fuzzing::{parse_chat_request, render_error, ChatRoute};
use assist_gateway::http::Dialect;
use assist_gateway::llm::Input;
use serde::de::IgnoredAny;
use serde_json::Value;

/// The compiled-in defaults (`config/default.toml`), as a fresh gateway runs.
fn server() -> &'static ServerSettings {
    static SERVER: OnceLock<ServerSettings> = OnceLock::new();
    SERVER.get_or_init(|| {
        Settings::load_without_env(None)
            .expect("the default settings load")
            .server
    })
}

pub fn check(route: ChatRoute, body: &[u8]) {
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
            let ctx = parsed.turn.editor_context();
            assert!(ctx
                .items
                .iter()
                .all(|i| !i.content.is_empty() || i.from_message));
        }
        Err(e) => {
            assert!(e.status.is_client_error(), "{}: {}", e.status, e.message);
            let (status, rendered) = render_error(route.dialect(), &e);
            assert_eq!(status, e.status);
            let object = rendered.as_object().expect("an error body is an object");
            assert_eq!(object.len(), 1, "{rendered}");
            match route.dialect() {
                Dialect::OpenAi => {
                    let error = &rendered["error"];
                    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
                    assert!(error["type"].as_str().is_some_and(|t| !t.is_empty()));
                    assert!(error["param"].is_string() || error["param"].is_null());
                    assert!(error.get("code").is_some(), "{rendered}");
                }
                Dialect::Ollama => {
                    assert!(rendered["error"].as_str().is_some_and(|m| !m.is_empty()));
                }
            }
        }
    }
}

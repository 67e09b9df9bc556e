//! The assistant's prompt against the model's real window: counted with the upstream's
//! tokenizer when it has one, cut further and sent once more when the upstream still finds
//! it too long, and refused in the dialect's shape when the client's own messages do not
//! fit. Also: with passthrough, only models the upstream lists are forwarded.

use crate::support::*;
use assist_gateway::config::{Provider, Settings};
use serde_json::{json, Value};

const WINDOW: usize = 2048;
const ANSWER: usize = 256;

fn small_window(s: &mut Settings) {
    s.assistant.context_tokens = WINDOW as u32;
    s.assistant.answer_reserve_tokens = ANSWER as u32;
}

/// A question whose knowledge (examples/knowledge's code and manuals) fills the window.
fn question(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user",
        "content": "How do I declare a route with a rate limiter and handle database errors?"}]})
}

fn chat_requests(up: &ScriptedUpstream) -> Vec<Recorded> {
    up.requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions") || r.path == "/api/chat")
        .collect()
}

/// A tokenizer that counts `chars_per_token` (two: as SmolLM2's does dense code; four
/// characters a token, the old estimate, overflows it; 1.3: denser than anything the
/// gateway's estimate expects).
fn dense(tokenizer: bool, overflow: Overflow, chars_per_token: f64) -> Window {
    Window {
        tokens: WINDOW,
        chars_per_token,
        tokenizer,
        overflow,
    }
}

#[tokio::test]
async fn the_prompt_is_counted_by_the_upstreams_tokenizer_and_fits_its_window() {
    let up = ScriptedUpstream::start().await;
    let window = dense(true, Overflow::Status, 2.0);
    up.limit_window(window.clone());
    let gw = Gateway::with_knowledge(&up, Provider::Openai, small_window).await;
    for i in 0..3 {
        let mut ask = question("brunix", false);
        ask["messages"][0]["content"] = json!(format!("{} ({i})", ask["messages"][0]["content"]));
        let (status, _, body) = post(&gw.url("/v1/chat/completions"), ask).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert!(!v["sources"].as_array().unwrap().is_empty());
    }
    let chats = chat_requests(&up);
    assert_eq!(chats.len(), 3, "each answer in one request, none refused");
    for chat in &chats {
        let prompt = window.prompt_tokens(&chat.body);
        assert!(prompt + ANSWER <= WINDOW, "{prompt} tokens sent");
        // The knowledge filled most of what the window leaves (not a timid cut).
        assert!(
            prompt * 10 >= (WINDOW - ANSWER) * 6,
            "only {prompt} tokens sent"
        );
        assert!(prompt_text(chat).contains("<knowledge>"));
    }
    // Found with a fixed text, then asked for each whole prompt.
    let counted = up.tokenized();
    assert_eq!(
        counted.first().map(String::as_str),
        Some("hello"),
        "{counted:?}"
    );
    assert!(
        counted.len() >= 4,
        "the tokenizer was asked ({})",
        counted.len()
    );
    assert!(
        counted[1..].iter().all(|t| t.contains("<knowledge>")),
        "whole prompts were counted"
    );
}

#[tokio::test]
async fn an_upstream_without_a_tokenizer_that_refuses_the_prompt_gets_a_shorter_one_once() {
    let up = ScriptedUpstream::start().await;
    up.limit_window(dense(false, Overflow::Status, 1.3));
    let gw = Gateway::with_knowledge(&up, Provider::Openai, small_window).await;
    let (status, _, body) = post(&gw.url("/v1/chat/completions"), question("brunix", false)).await;
    assert_eq!(status, 200, "{body}");
    let chats = chat_requests(&up);
    assert_eq!(chats.len(), 2, "refused once, then answered");
    let (first, second) = (prompt_text(&chats[0]), prompt_text(&chats[1]));
    assert!(second.len() < first.len());
    // The client's question is never what is cut.
    assert!(second.contains("How do I declare a route with a rate limiter"));
}

#[tokio::test]
async fn an_empty_stream_after_a_long_prompt_is_retried_with_less_context() {
    // llama-cpp-python answers a streamed request whose prompt overflows with 200 and an
    // empty event stream.
    let up = ScriptedUpstream::start().await;
    up.limit_window(dense(false, Overflow::EmptyStream, 1.3));
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        small_window(s);
        s.llm.retries = 0;
    })
    .await;
    let (status, _, body) = post(&gw.url("/v1/chat/completions"), question("brunix", true)).await;
    assert_eq!(status, 200);
    let events = sse_events(&body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
    assert_eq!(sse_text(&events), "Hello from upstream");
    assert_eq!(chat_requests(&up).len(), 2);

    // The same server asked for a whole answer (as the assistant asks for a client that
    // does not stream) refuses with 400 instead: also retried once, with less context.
    let (status, _, body) = post(&gw.url("/v1/chat/completions"), question("brunix", false)).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from upstream");
    let chats = chat_requests(&up);
    assert_eq!(chats.len(), 4);
    assert_eq!(chats[2].body["stream"], false);
    assert!(prompt_text(&chats[3]).len() < prompt_text(&chats[2]).len());
}

#[tokio::test]
async fn messages_that_alone_overflow_the_window_are_refused_in_each_dialects_shape() {
    let long = "let total = items.iter().map(|x| x.price * x.qty).sum::<u64>();\n".repeat(120);
    let ask = |model: &str| {
        json!({"model": model, "stream": false,
            "messages": [{"role": "user", "content": format!("Why is this slow?\n{long}")}]})
    };
    // Counted by the upstream's tokenizer: refused before the upstream is asked.
    let up = ScriptedUpstream::start().await;
    up.limit_window(dense(true, Overflow::Status, 2.0));
    let gw = Gateway::with_knowledge(&up, Provider::Openai, small_window).await;
    let (status, _, body) = post(&gw.url("/v1/chat/completions"), ask("brunix")).await;
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{body}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("2048"));
    let (status, _, body) = post(&gw.url("/api/chat"), ask("brunix")).await;
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["error"].as_str().unwrap().contains("window"), "{body}");
    // Anthropic's words, which Claude Code reads to compact its conversation, with the
    // numbers it sizes what to drop by: the prompt's tokens over the room it has.
    let mut anthropic = ask("brunix");
    anthropic["max_tokens"] = json!(256);
    let (status, _, body) = post(&gw.url("/v1/messages"), anthropic).await;
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");
    let message = v["error"]["message"].as_str().unwrap();
    let numbers = message
        .strip_prefix("prompt is too long: ")
        .and_then(|rest| rest.split_once(" tokens > "))
        .and_then(|(n, rest)| {
            Some((
                n.parse::<u64>().ok()?,
                rest.split_once(" maximum")?.0.parse::<u64>().ok()?,
            ))
        });
    let (prompt, room) = numbers.unwrap_or_else(|| panic!("not Anthropic's words: {message}"));
    assert!(prompt > room && room == 2048 - 256, "{message}");
    assert!(chat_requests(&up).is_empty(), "nothing was sent upstream");
    // A max_tokens over the window is forwarded (most servers take it as a cap); this
    // upstream reserves it, refuses, and the client hears why.
    let mut big = question("brunix", false);
    big["max_tokens"] = json!(4096);
    let (status, _, body) = post(&gw.url("/v1/chat/completions"), big).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("context_length_exceeded"), "{body}");
    assert_eq!(chat_requests(&up).last().unwrap().body["max_tokens"], 4096);

    // No tokenizer: the upstream's own refusal, once the gateway had nothing left to cut,
    // comes back as the same error.
    // Too long by the gateway's own estimate: refused before anything is sent (forwarded,
    // it would be cut or refused upstream).
    let up = ScriptedUpstream::start().await;
    up.limit_window(dense(false, Overflow::Status, 1.0));
    let gw = Gateway::with_knowledge(&up, Provider::Openai, small_window).await;
    let (status, _, body) = post(&gw.url("/v1/chat/completions"), ask("brunix")).await;
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{body}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("estimate"),
        "{body}"
    );
    assert!(chat_requests(&up).is_empty(), "nothing was sent upstream");
    // Fitting by the estimate, too long for this upstream's denser tokenizer: its own
    // refusal, once the gateway had nothing left to cut, comes back as the same error.
    let shorter = "let total = items.iter().map(|x| x.price * x.qty).sum::<u64>();\n".repeat(40);
    let ask_shorter = json!({"model": "brunix", "stream": false,
        "messages": [{"role": "user", "content": format!("Why is this slow?\n{shorter}")}]});
    let (status, _, body) = post(&gw.url("/v1/chat/completions"), ask_shorter).await;
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{body}");
    // The question went whole in every attempt, and was not retried as it was.
    let chats = chat_requests(&up);
    assert!(
        !chats.is_empty() && chats.len() <= 2,
        "{} attempts",
        chats.len()
    );
    for chat in chats {
        assert!(prompt_text(&chat).contains(&shorter));
    }
}

/// The calls a conversation replays count in the window: 20,000 small calls, together far
/// over it, had gone upstream whole (only the messages' text was counted), and one such
/// request held a one-model server for minutes. Refused before anything is sent, to the
/// tokenizer too.
#[tokio::test]
async fn tool_calls_count_in_the_window() {
    let up = ScriptedUpstream::start().await;
    up.limit_window(dense(true, Overflow::Status, 2.0));
    let gw = Gateway::with_knowledge(&up, Provider::Openai, small_window).await;
    let calls: Vec<Value> = (0..20_000)
        .map(|i| {
            json!({"id": format!("c{i}"), "type": "function",
                "function": {"name": "f", "arguments": "{}"}})
        })
        .collect();
    let body = json!({"model": "brunix", "stream": false, "messages": [
        {"role": "user", "content": "run them all"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "user", "content": "and now?"}]});
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{text}");
    assert!(chat_requests(&up).is_empty(), "nothing was sent upstream");
    for r in up.requests() {
        let size = r.body.to_string().len();
        assert!(size < 100_000, "{} got {size} bytes", r.path);
    }
}

/// A message the estimate reads far over the window but the upstream's tokenizer counts
/// within it (Cyrillic: the estimate takes 1.5 tokens a letter, a multilingual tokenizer
/// far fewer) is counted and answered, not refused by the estimate.
#[tokio::test]
async fn a_message_the_tokenizer_counts_within_the_window_is_answered() {
    let up = ScriptedUpstream::start().await;
    up.limit_window(dense(true, Overflow::Status, 4.0));
    let gw = Gateway::with_knowledge(&up, Provider::Openai, small_window).await;
    let text = "привет ".repeat(330);
    let (status, _, body) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "stream": false,
            "messages": [{"role": "user", "content": text}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(chat_requests(&up).len(), 1);
}

/// A client's tools that alone overflow the window (Open WebUI offers its built-in tools,
/// thousands of tokens, to every model) are left out and the question is answered; tools
/// that fit are sent.
#[tokio::test]
async fn tools_that_overflow_the_window_are_left_out_and_the_question_is_answered() {
    let up = ScriptedUpstream::start().await;
    up.limit_window(dense(true, Overflow::Status, 2.0));
    let gw = Gateway::with_knowledge(&up, Provider::Openai, small_window).await;
    let tool = |i: usize| {
        json!({"type": "function", "function": {"name": format!("builtin_tool_{i}"),
            "description": "Searches the user's notes, memories and files for the query and \
                returns the matching items with their metadata. ".repeat(4),
            "parameters": {"type": "object", "required": ["query"],
                "properties": {"query": {"type": "string", "description": "what to look for"}}}}})
    };
    let sent_tools = |up: &ScriptedUpstream| {
        chat_requests(up).last().unwrap().body["tools"]
            .as_array()
            .map_or(0, Vec::len)
    };
    for (tools, kept) in [(40, 0), (1, 1)] {
        let mut body = question("brunix", false);
        body["tools"] = json!((0..tools).map(tool).collect::<Vec<_>>());
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(status, 200, "{tools} tools: {text}");
        assert_eq!(sent_tools(&up), kept, "{tools} tools offered");
    }
}

#[tokio::test]
async fn with_passthrough_only_models_the_upstream_lists_are_forwarded() {
    for provider in [Provider::Openai, Provider::Ollama] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        let ask = |model: &str| {
            json!({"model": model, "stream": false,
                "messages": [{"role": "user", "content": "hi"}]})
        };
        let (status, _, body) = post(&gw.url("/v1/chat/completions"), ask("no-such-model")).await;
        assert_eq!(status, 404, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "model_not_found");
        let (status, _, body) = post(&gw.url("/api/chat"), ask("no-such-model")).await;
        assert_eq!(status, 404, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"], "model 'no-such-model' not found");
        assert!(
            chat_requests(&up).is_empty(),
            "an unknown name never reaches the upstream"
        );
        // What it lists is forwarded.
        let (status, _, body) = post(&gw.url("/v1/chat/completions"), ask(UPSTREAM_MODEL)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(chat_requests(&up).len(), 1);
    }
}

//! Sources where clients look for them: `url_citation` annotations (streamed and whole)
//! read by the real openai package, `/v1/sources/{id}` behind the keys, and conversations
//! keyed by a request header (Open WebUI's chat id) for clients that send no session_id.

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

const QUESTION: &str = "Which environment variable overrides the server port?";

async fn ask(
    gw: &Gateway,
    key: &str,
    headers: &[(&str, &str)],
    messages: Value,
    stream: bool,
) -> (u16, String) {
    let mut rb = client()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({"model": "brunix", "stream": stream, "messages": messages}));
    for (name, value) in headers {
        rb = rb.header(*name, *value);
    }
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test]
async fn the_openai_python_sdk_reads_annotations_and_follows_their_links() {
    let Some(python) = python_for("the citation client test") else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-a".into()];
    })
    .await;
    up.push(Reply::tokens(&["Set ", "BRISA_PORT."]));
    up.push(Reply::tokens(&["Set ", "BRISA_PORT."]));
    let base = gw.url("");
    run_client_script(
        &python,
        "citations.py",
        &[&base, "sk-a"],
        "all citation checks passed",
    )
    .await;
}

#[tokio::test]
async fn source_links_are_behind_the_keys_and_answer_json_or_html() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-a".into()];
        s.server.public_url = Some("https://gw.example.com/".into());
    })
    .await;
    let (status, body) = ask(&gw, "sk-a", &[], user(QUESTION), false).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let annotations = answer["choices"][0]["message"]["annotations"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    let source = &answer["sources"][0];
    let id = source["id"].as_str().unwrap();
    // The configured public address is the links' base.
    assert_eq!(
        annotations[0]["url_citation"]["url"],
        format!("https://gw.example.com/v1/sources/{id}")
    );
    let url = gw.url(&format!("/v1/sources/{id}"));

    let r = client().get(&url).bearer_auth("sk-a").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let chunk: Value = r.json().await.unwrap();
    assert_eq!(chunk["file"], source["file"]);
    assert_eq!(chunk["section"], source["section"]);
    assert_eq!(chunk["lines"], source["lines"]);
    assert!(chunk["text"].as_str().is_some_and(|t| !t.is_empty()));

    let r = client()
        .get(&url)
        .bearer_auth("sk-a")
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(r.headers().contains_key("content-security-policy"));
    let html = r.text().await.unwrap();
    assert!(html.contains(source["file"].as_str().unwrap()), "{html}");

    for key in [None, Some("sk-wrong")] {
        let mut rb = client().get(&url);
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        let r = rb.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{key:?}");
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].is_string(), "{v}");
    }
    for unknown in [
        "0123456789abcdef",
        "..%2F..%2Fetc%2Fpasswd",
        &"a".repeat(5000),
    ] {
        let r = client()
            .get(gw.url(&format!("/v1/sources/{unknown}")))
            .bearer_auth("sk-a")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404, "{unknown}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "source_not_found", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    }
}

/// An answer that used no knowledge cites nothing.
#[tokio::test]
async fn answers_without_knowledge_carry_no_annotations() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, body) = ask(&gw, "", &[], user("hello there"), false).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert!(
        answer["choices"][0]["message"].get("annotations").is_none(),
        "{answer}"
    );
    let (status, body) = ask(&gw, "", &[], user("hello there"), true).await;
    assert_eq!(status, 200);
    assert!(!body.contains("annotations"), "{body}");
}

#[tokio::test]
async fn a_chat_id_header_keys_the_conversation_per_caller() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-a".into(), "sk-b".into()];
    })
    .await;
    let header = "X-OpenWebUI-Chat-Id";
    up.push(Reply::tokens(&["Hello ", "Ana."]));
    let (status, _) = ask(
        &gw,
        "sk-a",
        &[(header, "chat-1")],
        user("my name is Ana"),
        false,
    )
    .await;
    assert_eq!(status, 200);

    // Another chat of the same caller: nothing of chat-1.
    ask(
        &gw,
        "sk-a",
        &[(header, "chat-2")],
        user("what is my name?"),
        false,
    )
    .await;
    assert!(!prompt_text(&up.last_request()).contains("Ana"));
    // The same chat id under another key: another conversation.
    ask(
        &gw,
        "sk-b",
        &[(header, "chat-1")],
        user("what is my name?"),
        false,
    )
    .await;
    assert!(!prompt_text(&up.last_request()).contains("Ana"));
    // No header: no memory.
    ask(&gw, "sk-a", &[], user("what is my name?"), false).await;
    assert!(!prompt_text(&up.last_request()).contains("Ana"));
    // A value that is not a session id is left out, not refused.
    let (status, _) = ask(&gw, "sk-a", &[(header, "chat 1/..")], user("hi"), false).await;
    assert_eq!(status, 200);

    // The same chat, sending only its new message: the conversation is remembered.
    ask(
        &gw,
        "sk-a",
        &[(header, "chat-1")],
        user("what is my name?"),
        true,
    )
    .await;
    let prompt = prompt_text(&up.last_request());
    assert!(
        prompt.contains("my name is Ana") && prompt.contains("Hello Ana."),
        "{prompt}"
    );

    // Open WebUI sends the whole conversation with the header: nothing is added twice.
    let whole = json!([
        {"role": "user", "content": "my name is Ana"},
        {"role": "assistant", "content": "Hello Ana."},
        {"role": "user", "content": "what is my name?"},
        {"role": "assistant", "content": "Hello from upstream"},
        {"role": "user", "content": "and again?"},
    ]);
    ask(&gw, "sk-a", &[(header, "chat-1")], whole, false).await;
    let prompt = prompt_text(&up.last_request());
    assert_eq!(prompt.matches("my name is Ana").count(), 1, "{prompt}");
    assert_eq!(prompt.matches("Hello Ana.").count(), 1, "{prompt}");

    // A body's own session_id wins over the header.
    let r = client()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("sk-a")
        .header(header, "chat-1")
        .json(&json!({"model": "brunix", "session_id": "own-1",
            "messages": [{"role": "user", "content": "what is my name?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(!prompt_text(&up.last_request()).contains("Ana"));
}

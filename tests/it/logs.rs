//! What the gateway writes to its log: sizes, flags and decisions, never a key, a
//! question, an answer, editor content or file contents.
//!
//! The gateway runs as the real binary (`Spawned`), logging every event of its own code
//! at every level, as JSON for a collector; the test reads what it wrote to stderr.

use assist_gateway::config::Provider;
use base64::Engine;
use serde_json::{json, Value};

use crate::support::*;

const GATEWAY_KEY: &str = "gw-key-SECRET-7731";
const WRONG_KEY: &str = "gw-key-WRONG-5512";
const UPSTREAM_KEY: &str = "up-key-SECRET-9046";
const OPEN_FILE: &str = "fn open_file_MARKER_1() { load_config_MARKER_2() }";
const SELECTION: &str = "load_config_MARKER_2()";
const EXTRA: &str = "file: src/extra_MARKER_3.rs";
const QUESTION: &str = "what does this selected code do QUESTION_MARKER_4?";
const ANSWER: [&str; 2] = ["It loads ", "ANSWER_MARKER_5."];
const EMBEDDED: &str = "embed me EMBED_MARKER_6";

async fn send(url: &str, key: &str, body: Value) -> (u16, String) {
    let r = client()
        .post(url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn logs_hold_sizes_and_flags_never_keys_or_content() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start_with_env(
        &up,
        Provider::Openai,
        true,
        |s| {
            s.server.api_keys = vec![GATEWAY_KEY.into()];
            s.llm.api_key = Some(UPSTREAM_KEY.to_string());
        },
        &[("RUST_LOG", "assist_gateway=trace")],
    )
    .await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user = json!({
        "editor_content": b64(OPEN_FILE),
        "selected_text": b64(SELECTION),
        "extra_context": b64(EXTRA),
        "user_info": {"dev_id": 1, "project_id": 2, "org_id": 3},
    })
    .to_string();

    // An editor turn streamed in the OpenAI dialect, then one in Ollama's.
    up.set_default(Reply::tokens(&ANSWER));
    let (status, body) = send(
        &gw.url("/v1/chat/completions"),
        GATEWAY_KEY,
        json!({"model": "brunix", "stream": true, "session_id": "logs", "user": user,
            "messages": [{"role": "user", "content": QUESTION}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(sse_text(&sse_events(&body)).contains("ANSWER_MARKER_5"));
    let prompt = up.last_request().body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.contains(SELECTION) && prompt.contains("open_file_MARKER_1"),
        "the editor content reached the model: the log had it to leak"
    );
    assert_eq!(
        up.last_request().headers["authorization"],
        format!("Bearer {UPSTREAM_KEY}"),
        "the upstream key was used"
    );
    let (status, body) = send(
        &gw.url("/api/chat"),
        GATEWAY_KEY,
        json!({"model": "brunix", "stream": false, "user": user,
            "messages": [{"role": "user", "content": QUESTION}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // A wrong key, an embedding request and a rejected request.
    let (status, _) = send(
        &gw.url("/v1/chat/completions"),
        WRONG_KEY,
        json!({"model": "brunix", "messages": [{"role": "user", "content": QUESTION}]}),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = send(
        &gw.url("/v1/embeddings"),
        GATEWAY_KEY,
        json!({"model": "brunix", "input": EMBEDDED}),
    )
    .await;
    assert!(status == 200 || status == 400 || status == 404, "{body}");
    let (status, _) = send(
        &gw.url("/v1/chat/completions"),
        GATEWAY_KEY,
        json!({"model": "brunix", "messages": [{"role": "wizard", "content": QUESTION}]}),
    )
    .await;
    assert_eq!(status, 400);
    let log = gw.stop();
    let probe = user_b64_probe();
    // The log did record these requests: the stages with their decisions and sizes.
    assert!(log.contains("\"editor\":\"EDITOR\""), "{log}");
    assert!(log.contains("\"stage\":\"retrieve\""), "{log}");
    assert!(
        log.contains(&format!("\"selected_chars\":{}", SELECTION.len())),
        "{log}"
    );
    for secret in [
        GATEWAY_KEY,
        WRONG_KEY,
        UPSTREAM_KEY,
        "MARKER_1",
        "MARKER_2",
        "MARKER_3",
        "MARKER_4",
        "MARKER_5",
        "MARKER_6",
        probe.as_str(),
    ] {
        assert!(!log.contains(secret), "the log holds {secret}:\n{log}");
    }
}

/// A piece of the base64 the selection travels in: the log must not hold that either.
fn user_b64_probe() -> String {
    base64::engine::general_purpose::STANDARD.encode(SELECTION)[..16].to_string()
}

/// A request of many things to leave out writes a line for all of them, not one each: ten
/// thousand empty context items had written ten thousand warnings (a list of millions,
/// hundreds of megabytes of log), and a thousand server tools a thousand lines.
#[tokio::test]
async fn one_request_writes_a_bounded_number_of_lines() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Openai, |_| {}).await;
    let before = gw.log().lines().count();
    let empty: Vec<Value> = (0..10_000).map(|_| json!({})).collect();
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}],
            "additional_context": empty}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let server_tools: Vec<Value> = (0..1_000)
        .map(|_| json!({"type": "web_search_20250305", "name": "web_search"}))
        .collect();
    let (status, _, text) = post(
        &gw.url("/v1/messages"),
        json!({"model": "brunix", "max_tokens": 8, "tools": server_tools,
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let hosted: Vec<Value> = (0..1_000).map(|_| json!({"type": "web_search"})).collect();
    let (status, _, text) = post(
        &gw.url("/v1/responses"),
        json!({"model": "brunix", "tools": hosted, "input": "hi"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let log = gw.stop();
    let lines = log.lines().count() - before;
    assert!(lines < 200, "{lines} lines for three requests");
    assert!(log.contains("nothing to use"), "{log}");
    assert!(log.contains("server tools dropped"), "{log}");
    assert!(log.contains("hosted tools dropped"), "{log}");
}

//! Same-dialect passthrough: an OpenAI client asking a passthrough model of an
//! OpenAI-compatible upstream, or an Ollama client asking one of Ollama, gets the
//! upstream's own events and bodies as they came (its ids, its extra fields, its
//! spacing), while the gateway still counts the answer's usage and ends a broken stream
//! in the dialect's error shape. A client that asks for OpenAI's usage event, other
//! dialects, other upstreams and requests with tools are rendered by the gateway as
//! before.

use assist_gateway::config::{ApiKey, Provider};
use serde_json::{json, Value};

use crate::support::*;

const KEY: &str = "sk-relay-SECRET-5521";

/// A llama.cpp-style stream: Python's separators, fields the gateway never writes
/// (`system_fingerprint`, `timings`, `reasoning_content`), a role event with `null`
/// content, an escaped text, the finish event, then the usage event.
const EVENTS: [&str; 6] = [
    r#"{"id": "chatcmpl-up-77", "object": "chat.completion.chunk", "created": 1700000000, "model": "up-model:latest", "system_fingerprint": "b4567-up", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "finish_reason": null}]}"#,
    r#"{"id": "chatcmpl-up-77", "object": "chat.completion.chunk", "created": 1700000000, "model": "up-model:latest", "system_fingerprint": "b4567-up", "choices": [{"index": 0, "delta": {"reasoning_content": "the user greets"}, "finish_reason": null}]}"#,
    r#"{"id": "chatcmpl-up-77", "object": "chat.completion.chunk", "created": 1700000000, "model": "up-model:latest", "system_fingerprint": "b4567-up", "choices": [{"index": 0, "delta": {"content": "Hello \"error\": "}, "finish_reason": null}]}"#,
    r#"{"id": "chatcmpl-up-77", "object": "chat.completion.chunk", "created": 1700000000, "model": "up-model:latest", "system_fingerprint": "b4567-up", "choices": [{"index": 0, "delta": {"content": "world ✓"}, "finish_reason": null}]}"#,
    r#"{"id": "chatcmpl-up-77", "object": "chat.completion.chunk", "created": 1700000000, "model": "up-model:latest", "system_fingerprint": "b4567-up", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "timings": {"predicted_ms": 12.5}}"#,
    r#"{"id": "chatcmpl-up-77", "object": "chat.completion.chunk", "created": 1700000000, "model": "up-model:latest", "choices": [], "usage": {"prompt_tokens": 31, "completion_tokens": 17, "total_tokens": 48}}"#,
];

fn sse_body() -> String {
    let mut body: String = EVENTS.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

async fn relaying_gateway(up: &ScriptedUpstream) -> Gateway {
    gateway_of(up, Provider::Openai).await
}

async fn gateway_of(up: &ScriptedUpstream, provider: Provider) -> Gateway {
    Gateway::start(up, provider, |s| {
        s.assistant.passthrough = true;
        s.llm.retry_base = std::time::Duration::from_millis(5);
        s.llm.retry_max = std::time::Duration::from_millis(50);
        s.server.api_keys = vec![ApiKey {
            name: Some(format!(
                "relay-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            )),
            key: KEY.into(),
            tokens_per_day: 0,
            requests_per_minute: 0,
        }];
    })
    .await
}

async fn ask(gw: &Gateway, path: &str, body: Value) -> (u16, String) {
    let r = client()
        .post(gw.url(path))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The upstream's next reply: this body as it is.
fn raw(content_type: &'static str, body: impl Into<String>) -> Reply {
    Reply::Raw {
        content_type,
        body: body.into(),
    }
}

/// `body` asked at `path` once the upstream's next reply is `reply`.
async fn ask_after(
    gw: &Gateway,
    up: &ScriptedUpstream,
    reply: Reply,
    path: &str,
    body: Value,
) -> (u16, String) {
    up.push(reply);
    ask(gw, path, body).await
}

async fn usage_totals(gw: &Gateway, requests: u64) -> Value {
    for _ in 0..100 {
        let r = client()
            .get(gw.url("/v1/usage"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        if v["totals"]["requests"] == requests {
            return v["totals"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the answers were never counted");
}

#[tokio::test]
async fn an_openai_client_gets_the_upstreams_own_events_and_its_usage_is_counted() {
    let up = ScriptedUpstream::start().await;
    let gw = relaying_gateway(&up).await;
    let messages = json!([{"role": "user", "content": "hi"}]);

    // Without usage asked: every event as the upstream wrote it, but the usage event.
    let (status, text) = ask_after(
        &gw,
        &up,
        raw("text/event-stream", sse_body()),
        "/v1/chat/completions",
        json!({"model": UPSTREAM_MODEL, "messages": messages, "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let mut expected: Vec<String> = EVENTS[..5].iter().map(|e| e.to_string()).collect();
    expected.push("[DONE]".into());
    assert_eq!(sse_events(&text), expected);
    // The gateway still asked the upstream for the usage, to count it.
    assert_eq!(
        up.last_request().body["stream_options"],
        json!({"include_usage": true})
    );

    // With usage asked: rendered by the gateway, whose usage event carries the upstream's
    // counts; an upstream that ignores `stream_options` (llama.cpp's Python server) still
    // gives the client a usage event, with the gateway's estimate.
    for (body, usage) in [
        (sse_body(), Some(31)),
        (
            EVENTS[..5]
                .iter()
                .map(|e| format!("data: {e}\n\n"))
                .collect::<String>()
                + "data: [DONE]\n\n",
            None,
        ),
    ] {
        let (status, text) = ask_after(
            &gw,
            &up,
            raw("text/event-stream", body),
            "/v1/chat/completions",
            json!({"model": UPSTREAM_MODEL, "messages": messages, "stream": true,
                   "stream_options": {"include_usage": true}}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let events = sse_events(&text);
        assert!(!text.contains("chatcmpl-up-77"), "{text}");
        assert_eq!(sse_text(&events), "Hello \"error\": world ✓");
        let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
        let prompt = last["usage"]["prompt_tokens"].as_u64();
        match usage {
            Some(tokens) => assert_eq!(prompt, Some(tokens), "{text}"),
            None => assert!(prompt.is_some_and(|t| t > 0), "{text}"),
        }
    }

    // The first two answers counted with the upstream's own usage, the last estimated.
    let totals = usage_totals(&gw, 3).await;
    assert!(
        totals["input_tokens"].as_u64().unwrap() > 62
            && totals["output_tokens"].as_u64().unwrap() > 34,
        "{totals}"
    );
}

#[tokio::test]
async fn a_whole_answer_is_the_upstreams_body() {
    let up = ScriptedUpstream::start().await;
    let gw = relaying_gateway(&up).await;
    let body = r#"{"id": "chatcmpl-up-9", "object": "chat.completion", "created": 1700000000, "model": "up-model:latest", "system_fingerprint": "b4567-up", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi ✓", "reasoning_content": "short"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}}"#;
    let (status, text) = ask_after(
        &gw,
        &up,
        raw("application/json", body),
        "/v1/chat/completions",
        json!({"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!((status, text.as_str()), (200, body));
    assert_eq!(up.last_request().body["stream"], false);
    let totals = usage_totals(&gw, 1).await;
    assert_eq!(
        (&totals["input_tokens"], &totals["output_tokens"]),
        (&json!(9), &json!(4))
    );
}

#[tokio::test]
async fn text_completions_are_relayed_too() {
    let up = ScriptedUpstream::start().await;
    let gw = relaying_gateway(&up).await;
    let events = [
        r#"{"id":"cmpl-up","object":"text_completion","created":1,"model":"up-model:latest","choices":[{"index":0,"text":"    return a + b","logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"cmpl-up","object":"text_completion","created":1,"model":"up-model:latest","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}]}"#,
        r#"{"id":"cmpl-up","object":"text_completion","created":1,"model":"up-model:latest","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6}}"#,
    ];
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    let (status, text) = ask_after(
        &gw,
        &up,
        raw("text/event-stream", body + "data: [DONE]\n\n"),
        "/v1/completions",
        json!({"model": UPSTREAM_MODEL, "prompt": "def add(a, b):\n", "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(sse_events(&text), [events[0], events[1], "[DONE]"]);
    let totals = usage_totals(&gw, 1).await;
    assert_eq!(totals["output_tokens"], 6, "{totals}");
}

#[tokio::test]
async fn what_the_gateway_must_know_still_ends_a_relayed_stream() {
    let up = ScriptedUpstream::start().await;
    let gw = relaying_gateway(&up).await;
    let ask_streamed = || {
        ask(
            &gw,
            "/v1/chat/completions",
            json!({"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "hi"}],
                   "stream": true}),
        )
    };
    // An error event in the middle: the text before it, then OpenAI's error shape, no
    // [DONE].
    up.push(raw(
        "text/event-stream",
        format!(
            "data: {}\n\ndata: {}\n\n",
            EVENTS[2], r#"{"error": {"message": "the model crashed", "code": 500}}"#
        ),
    ));
    let (status, text) = ask_streamed().await;
    assert_eq!(status, 200, "{text}");
    let events = sse_events(&text);
    assert_eq!(events[0], EVENTS[2]);
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the model crashed"),
        "{text}"
    );
    assert!(!text.contains("[DONE]"));

    // A line that is not an OpenAI event is refused, not passed on.
    up.push(raw(
        "text/event-stream",
        format!("data: {}\n\ndata: <html>oops</html>\n\n", EVENTS[3]),
    ));
    let (_, text) = ask_streamed().await;
    assert!(!text.contains("<html>"), "{text}");
    assert!(text.contains("\"error\""), "{text}");

    // A stream that ends without a finish is an error, as without the relay.
    up.push(raw("text/event-stream", format!("data: {}\n\n", EVENTS[3])));
    let (_, text) = ask_streamed().await;
    assert!(text.contains("\"error\""), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
}

#[tokio::test]
async fn an_upstream_that_fails_before_its_first_token_is_retried_with_nothing_sent() {
    let up = ScriptedUpstream::start().await;
    let gw = relaying_gateway(&up).await;
    // The role event, then the connection closes: nothing of it reaches the client, and
    // the next attempt answers.
    let (status, text) = ask_after(
        &gw,
        &up,
        raw("text/event-stream", format!("data: {}\n\n", EVENTS[0])),
        "/v1/chat/completions",
        json!({"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "hi"}],
               "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = sse_events(&text);
    assert_eq!(sse_text(&events), "Hello from upstream");
    assert_eq!(
        events.iter().filter(|e| e.contains("\"role\"")).count(),
        1,
        "{text}"
    );
    assert!(!text.contains("chatcmpl-up-77"), "{text}");
    assert_eq!(up.requests().len(), 2);
}

#[tokio::test]
async fn tools_other_dialects_and_the_assistant_are_rendered_by_the_gateway() {
    let up = ScriptedUpstream::start().await;
    let gw = relaying_gateway(&up).await;
    let messages = json!([{"role": "user", "content": "hi"}]);
    // Tools offered: the calls reach the client in OpenAI's one form, so the gateway
    // renders the answer (its own id).
    let tool = json!({"type": "function", "function": {"name": "f", "parameters": {}}});
    for body in [
        json!({"model": UPSTREAM_MODEL, "messages": messages, "stream": true, "tools": [tool]}),
        json!({"model": "brunix", "messages": messages, "stream": true}),
    ] {
        let (status, text) = ask_after(
            &gw,
            &up,
            raw("text/event-stream", sse_body()),
            "/v1/chat/completions",
            body,
        )
        .await;
        assert_eq!(status, 200, "{text}");
        assert!(!text.contains("chatcmpl-up-77"), "{text}");
        assert!(!text.contains("system_fingerprint\": \"b4567"), "{text}");
    }
    // Ollama's dialect against the same upstream: Ollama's lines.
    let (status, text) = ask_after(
        &gw,
        &up,
        raw("text/event-stream", sse_body()),
        "/api/chat",
        json!({"model": UPSTREAM_MODEL, "messages": messages}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let lines = ndjson_lines(&text);
    assert_eq!(lines.last().unwrap()["done"], true, "{text}");
    assert!(!text.contains("chatcmpl-up-77"));
}

/// Ollama's lines as a real Ollama writes them (its `created_at`, its durations, a
/// thinking model's `thinking`), a text with escapes, the final line with its counts.
const LINES: [&str; 4] = [
    r#"{"model":"up-model:latest","created_at":"2026-11-27T10:00:00.1Z","message":{"role":"assistant","content":"","thinking":"greeting"},"done":false}"#,
    r#"{"model":"up-model:latest","created_at":"2026-11-27T10:00:00.2Z","message":{"role":"assistant","content":"Hi \"done\": true"},"done":false}"#,
    r#"{"model":"up-model:latest","created_at":"2026-11-27T10:00:00.3Z","message":{"role":"assistant","content":" ✓"},"done":false}"#,
    r#"{"model":"up-model:latest","created_at":"2026-11-27T10:00:00.4Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":812345,"load_duration":1200,"prompt_eval_count":21,"prompt_eval_duration":3000,"eval_count":5,"eval_duration":7000}"#,
];

#[tokio::test]
async fn an_ollama_client_gets_ollamas_own_lines() {
    let up = ScriptedUpstream::start().await;
    let gw = gateway_of(&up, Provider::Ollama).await;
    let body: String = LINES.iter().map(|l| format!("{l}\n")).collect();
    up.push(raw("application/x-ndjson", body.clone()));
    let messages = json!([{"role": "user", "content": "hi"}]);
    let (status, text) = ask(
        &gw,
        "/api/chat",
        json!({"model": UPSTREAM_MODEL, "messages": messages}),
    )
    .await;
    assert_eq!((status, text.as_str()), (200, body.as_str()));

    // A whole answer: Ollama's one object, as it came.
    let whole = LINES[3].replace(r#""content":"""#, r#""content":"Hi ✓""#);
    let (status, text) = ask_after(
        &gw,
        &up,
        raw("application/json", whole.clone()),
        "/api/chat",
        json!({"model": UPSTREAM_MODEL, "messages": messages, "stream": false}),
    )
    .await;
    assert_eq!((status, text.as_str()), (200, whole.as_str()));
    assert_eq!(up.last_request().body["stream"], false);

    let totals = usage_totals(&gw, 2).await;
    assert_eq!(
        (&totals["input_tokens"], &totals["output_tokens"]),
        (&json!(42), &json!(10)),
        "{totals}"
    );

    // An error line: the lines before it, then Ollama's error shape; a stream that stops
    // before its final line ends with an error too.
    for (tail, says) in [
        (
            r#"{"error":"out of memory"}"#.to_string() + "\n",
            "out of memory",
        ),
        (String::new(), "done"),
    ] {
        let (status, text) = ask_after(
            &gw,
            &up,
            raw("application/x-ndjson", format!("{}\n{tail}", LINES[1])),
            "/api/chat",
            json!({"model": UPSTREAM_MODEL, "messages": messages}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let lines = ndjson_lines(&text);
        assert_eq!(lines[0], serde_json::from_str::<Value>(LINES[1]).unwrap());
        let error = lines.last().unwrap()["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{text}");
    }

    // An OpenAI client of the same Ollama upstream: the gateway's own OpenAI events.
    up.push(raw("application/x-ndjson", body));
    let (status, text) = ask(
        &gw,
        "/v1/chat/completions",
        json!({"model": UPSTREAM_MODEL, "messages": messages, "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(sse_text(&sse_events(&text)), "Hi \"done\": true ✓");
}

//! Every error path, in each dialect's own shape and status, and upstream faults.

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

const PROVIDERS: [Provider; 2] = [Provider::Ollama, Provider::Openai];

/// OpenAI's error shape; returns the inner object.
fn openai_error(status: u16, expected: u16, text: &str) -> Value {
    assert_eq!(status, expected, "{text}");
    let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    let e = &v["error"];
    assert!(e["message"].is_string() && e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    e.clone()
}

/// Ollama's error shape; returns the message.
fn ollama_error(status: u16, expected: u16, text: &str) -> String {
    assert_eq!(status, expected, "{text}");
    let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error string: {v}"))
        .to_string()
}

#[tokio::test]
async fn bad_requests_are_400_naming_the_field() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let chat = gw.url("/v1/chat/completions");
    let cases: Vec<(crate::support::Payload, &str)> = vec![
        ("{not json".into(), "body"),
        ("".into(), "body"),
        (json!({"model": "brunix"}).into(), "messages"),
        (json!({"model": "brunix", "messages": []}).into(), "messages"),
        (json!({"model": "brunix", "messages": "hi"}).into(), "messages"),
        (json!({"messages": [{"role": "user", "content": "x"}]}).into(), "model"),
        (json!({"model": "brunix", "messages": [{"role": "wizard", "content": "x"}]}).into(), "messages[0].role"),
        (json!({"model": "brunix", "messages": [{"role": "user", "content": 42}]}).into(), "messages[0].content"),
        (json!({"model": "brunix", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}).into(), "messages[0].content[0].type"),
        (json!({"model": "brunix", "n": 2, "messages": [{"role": "user", "content": "x"}]}).into(), "n"),
        (json!({"model": "brunix", "temperature": 7, "messages": [{"role": "user", "content": "x"}]}).into(), "temperature"),
        (json!({"model": "brunix", "max_tokens": "ten", "messages": [{"role": "user", "content": "x"}]}).into(), "max_tokens"),
        (json!({"model": "brunix", "stop": 3, "messages": [{"role": "user", "content": "x"}]}).into(), "stop"),
        (json!([1, 2, 3]).into(), "body"),
        // Was forwarded upstream as it was.
        (json!({"model": "brunix", "tools": [1, 2], "messages": [{"role": "user", "content": "x"}]}).into(), "tools[0]"),
    ];
    for (body, field) in cases {
        let (status, _, text) = post(&chat, body).await;
        let e = openai_error(status, 400, &text);
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(field.trim_end_matches(".type"))
                || e["param"] == field,
            "error does not name {field}: {e}"
        );
        assert_eq!(e["type"], "invalid_request_error");
    }
    let cases: Vec<(crate::support::Payload, &str)> = vec![
        ("{not json".into(), "JSON"),
        (json!({"messages": []}).into(), "model"),
        (json!({"model": "brunix", "messages": [{"role": "user", "content": ["a"]}]}).into(), "messages[0].content"),
        (json!({"model": "brunix", "messages": [{"role": "user", "content": "x"}], "options": {"temperature": "hot"}}).into(), "options.temperature"),
    ];
    for (body, field) in cases {
        let (status, _, text) = post(&gw.url("/api/chat"), body).await;
        let msg = ollama_error(status, 400, &text);
        assert!(msg.contains(field), "'{msg}' does not name {field}");
    }
    assert!(
        up.requests().is_empty(),
        "no bad request reaches the upstream"
    );
}

#[tokio::test]
async fn unknown_model_is_404_in_both_shapes() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    let e = openai_error(status, 404, &text);
    assert_eq!(e["code"], "model_not_found");
    assert!(e["message"].as_str().unwrap().contains("gpt-9"));
    let (status, _, text) = post(
        &gw.url("/api/chat"),
        json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(ollama_error(status, 404, &text), "model 'gpt-9' not found");
    // With passthrough, the upstream decides, and its 404 stays a 404.
    let gw = Gateway::start(&up, Provider::Ollama, |s| s.assistant.passthrough = true).await;
    up.push(Reply::Status {
        status: 404,
        body: r#"{"error":"model 'gpt-9' not found"}"#.into(),
    });
    let (status, _, text) = post(
        &gw.url("/api/chat"),
        json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(ollama_error(status, 404, &text), "model 'gpt-9' not found");
}

#[tokio::test]
async fn unreachable_upstream_is_502_naming_the_url() {
    // A port with nothing listening.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{port}")
    })
    .await;
    let body =
        json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body.clone()).await;
    let e = openai_error(status, 502, &text);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{port}")),
        "{e}"
    );
    let (status, _, text) = post(&gw.url("/api/chat"), body).await;
    assert!(ollama_error(status, 502, &text).contains(&format!("127.0.0.1:{port}")));
}

#[tokio::test]
async fn upstream_statuses_map_to_client_statuses() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        // One attempt: what the client sees of each status (retries are in tests/it/faults.rs).
        let gw = Gateway::start(&up, provider, |s| s.llm.retries = 0).await;
        let cases = [
            (
                500,
                r#"{"error":"llama runner crashed"}"#,
                502,
                Some("llama runner crashed"),
            ),
            (500, "", 502, Some("HTTP 500")),
            (503, "Service Unavailable", 502, Some("Service Unavailable")),
            (
                429,
                r#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
                429,
                Some("slow down"),
            ),
            (
                400,
                r#"{"error":"invalid option"}"#,
                400,
                Some("invalid option"),
            ),
        ];
        for (upstream_status, body, expected, needle) in cases {
            up.push(Reply::Status {
                status: upstream_status,
                body: body.into(),
            });
            let (status, _, text) = post(&gw.url("/v1/chat/completions"),
                json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": "x"}]})).await;
            let e = openai_error(status, expected, &text);
            if let Some(n) = needle {
                assert!(
                    e["message"].as_str().unwrap().contains(n),
                    "{provider:?} {upstream_status}: {e}"
                );
            }
        }
    }
}

#[tokio::test]
async fn upstream_silence_before_headers_times_out_with_504() {
    let up = ScriptedUpstream::start().await;
    up.push(Reply::HangBeforeHeaders(Duration::from_secs(30)));
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.llm.first_byte_timeout = std::time::Duration::from_secs(1);
        s.llm.retries = 0;
    })
    .await;
    let started = std::time::Instant::now();
    let (status, _, text) = post(
        &gw.url("/api/chat"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert!(ollama_error(status, 504, &text).contains("no response within"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the client is not left hanging"
    );
}

/// The text and the terminal error of a failed SSE stream.
fn failed_sse(text: &str) -> (String, Value) {
    let events = sse_events(text);
    assert_ne!(events.last().unwrap(), "[DONE]", "no [DONE] after an error");
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    (sse_text(&events), last["error"].clone())
}

#[tokio::test]
async fn failures_mid_stream_end_with_an_error_event() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        // The fault, what a stream's error event says, what a whole answer's error says.
        let faults = [
            (
                Reply::DropAfter(vec!["partial".into()]),
                "closed the stream",
                "connection closed",
            ),
            (
                Reply::ErrorAfter(vec!["partial".into()], "CUDA out of memory".into()),
                "CUDA out of memory",
                "CUDA out of memory",
            ),
            (
                Reply::GarbageAfter(vec!["partial".into()]),
                "invalid stream",
                "sent an invalid",
            ),
        ];
        for (fault, needle, whole_needle) in faults {
            up.push(fault.clone());
            let (status, _, text) = post(&gw.url("/v1/chat/completions"),
                json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": "x"}]})).await;
            assert_eq!(
                status, 200,
                "the stream had started: {provider:?} {fault:?} {text}"
            );
            let (content, error) = failed_sse(&text);
            assert_eq!(content, "partial", "{provider:?} {fault:?}");
            assert!(
                error["message"].as_str().unwrap().contains(needle),
                "{provider:?}: {error}"
            );
            assert_eq!(error["type"], "upstream_error");

            up.push(fault.clone());
            let (status, _, text) = post(
                &gw.url("/api/chat"),
                json!({"model": "brunix", "messages": [{"role": "user", "content": "x"}]}),
            )
            .await;
            assert_eq!(status, 200);
            let lines = ndjson_lines(&text);
            assert_eq!(lines[0]["message"]["content"], "partial");
            let last = lines.last().unwrap();
            assert!(
                last["error"].as_str().unwrap().contains(needle),
                "{provider:?}: {last}"
            );

            // Not streaming: the upstream is asked for a whole answer and nothing was sent
            // yet, so a fault is retried (llm.retries = 2: three attempts), and the client
            // gets a proper error status when every attempt failed.
            let whole = json!({"model": "brunix", "messages": [{"role": "user", "content": "x"}]});
            up.push(fault.clone());
            let (status, _, text) = post(&gw.url("/v1/chat/completions"), whole.clone()).await;
            assert_eq!(status, 200, "{provider:?} {fault:?}: {text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["choices"][0]["message"]["content"], "Hello from upstream");
            for _ in 0..3 {
                up.push(fault.clone());
            }
            let (status, _, text) = post(&gw.url("/v1/chat/completions"), whole).await;
            let e = openai_error(status, 502, &text);
            assert!(
                e["message"].as_str().unwrap().contains(whole_needle),
                "{provider:?}: {e}"
            );
        }
    }
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_request() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        for (n, path) in ["/v1/chat/completions", "/api/chat"]
            .into_iter()
            .enumerate()
        {
            up.push(Reply::Endless(Duration::from_millis(20)));
            let mut response = client()
                .post(gw.url(path))
                .json(&json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": "x"}]}))
                .send()
                .await
                .unwrap();
            let got = read_some(&mut response, 600).await;
            assert!(got.contains("tick"), "{got}");
            assert_eq!(up.cancelled(), n);
            drop(response);
            assert!(
                eventually(5, || up.cancelled() == n + 1).await,
                "{provider:?} {path}: the upstream saw no cancellation"
            );
        }
        // The gateway is not poisoned: the next request works.
        let (status, _, text) = post(
            &gw.url("/v1/chat/completions"),
            json!({"model": "brunix", "messages": [{"role": "user", "content": "again"}]}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
    }
}

#[tokio::test]
async fn oversized_bodies_are_413_in_the_dialect_shape() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| s.server.max_body_bytes = 4096).await;
    let big = "x".repeat(10_000);
    let body = json!({"model": "brunix", "messages": [{"role": "user", "content": big}]});
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body.clone()).await;
    let e = openai_error(status, 413, &text);
    assert!(e["message"].as_str().unwrap().contains("4096"));
    let (status, _, text) = post(&gw.url("/api/chat"), body).await;
    assert!(ollama_error(status, 413, &text).contains("4096"));
}

#[tokio::test]
async fn odd_bodies_never_crash_the_gateway() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let bodies = [
        "null", "0", "\"str\"", "true", "{}", "[]", &deep, "{\"model\":null}", "{\"model\":\"brunix\",\"messages\":[null]}",
        "{\"model\":\"brunix\",\"messages\":[{}]}", "{\"model\":\"brunix\",\"messages\":[{\"role\":\"user\",\"content\":null}],\"stream\":\"yes\"}",
        "{\"model\":\"brunix\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
        "{\"model\":\"\\ud800\",\"messages\":[]}", "\u{feff}{}",
    ];
    for path in [
        "/v1/chat/completions",
        "/v1/completions",
        "/api/chat",
        "/api/generate",
        "/api/show",
    ] {
        for body in bodies {
            let (status, _, text) = post(&gw.url(path), body).await;
            // Some of these are valid for some routes (an Ollama load request, say);
            // none may fail on the server's side, and every refusal is in the API's shape.
            assert!(
                status == 200 || (400..500).contains(&status),
                "{path} {body:.40}: {status} {text}"
            );
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not JSON: {text}"));
            assert_eq!(v.get("error").is_some(), status != 200, "{path}: {v}");
        }
    }
    let (status, _) = get_json(&gw.url("/health")).await;
    assert_eq!(status, 200, "still alive");
}

/// One streamed question to a gateway whose idle timeout is 1 s, answered by `reply`:
/// the status, how long the answer took, its body.
async fn asked_with_a_1s_idle_timeout(provider: Provider, reply: Reply) -> (u16, Duration, String) {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, provider, |s| {
        s.llm.idle_timeout = std::time::Duration::from_secs(1)
    })
    .await;
    up.push(reply);
    let started = std::time::Instant::now();
    let (status, _, body) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "stream": true,
            "messages": [{"role": "user", "content": "slowly, please"}]}),
    )
    .await;
    (status, started.elapsed(), body)
}

/// The idle timeout counts from the last token, not from the answer's start: an answer
/// longer than it, whose tokens each come within it, arrives whole.
#[tokio::test]
async fn a_slow_answer_whose_tokens_come_within_the_idle_timeout_is_not_cut() {
    for provider in PROVIDERS {
        let (status, took, body) = asked_with_a_1s_idle_timeout(
            provider,
            Reply::Tokens {
                tokens: ["one ", "two ", "three ", "four ", "five"]
                    .map(String::from)
                    .to_vec(),
                delay: Duration::from_millis(450),
                finish: "stop",
            },
        )
        .await;
        assert_eq!(status, 200);
        assert!(took > Duration::from_secs(2), "{provider:?}");
        let events = sse_events(&body);
        assert_eq!(
            sse_text(&events),
            "one two three four five",
            "{provider:?}: {body}"
        );
        assert!(!body.contains("upstream_timeout"), "{provider:?}: {body}");
    }
}

/// Tokens that come within the idle timeout, then silence: the answer ends one idle
/// timeout after the last token, with every token before it.
#[tokio::test]
async fn silence_after_slow_tokens_ends_the_answer_one_idle_timeout_after_the_last() {
    for provider in PROVIDERS {
        let (status, took, body) = asked_with_a_1s_idle_timeout(
            provider,
            Reply::SlowThenStall {
                tokens: ["a ", "b ", "c ", "d"].map(String::from).to_vec(),
                delay: Duration::from_millis(450),
                silence: Duration::from_secs(6),
            },
        )
        .await;
        assert_eq!(status, 200);
        // The last token at about 1.8 s, the timeout 1 s later.
        assert!(
            took > Duration::from_millis(2600) && took < Duration::from_millis(4500),
            "{provider:?}: {took:?}"
        );
        let (text, error) = failed_sse(&body);
        assert_eq!(text, "a b c d", "{provider:?}");
        assert_eq!(error["code"], "upstream_timeout", "{provider:?}: {body}");
    }
}

#[tokio::test]
async fn an_upstream_silent_mid_answer_ends_with_a_timeout_event_and_keeps_the_partial_turn() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| {
            s.llm.idle_timeout = std::time::Duration::from_secs(1)
        })
        .await;
        // Two tokens reach the client, then the upstream goes silent past the idle timeout.
        up.push(Reply::StallAfter(
            vec!["par".into(), "tial".into()],
            Duration::from_secs(4),
        ));
        let started = std::time::Instant::now();
        let (status, _, body) = post(
            &gw.url("/v1/chat/completions"),
            json!({"model": "brunix", "stream": true, "session_id": "idle",
                "messages": [{"role": "user", "content": "hello?"}]}),
        )
        .await;
        assert_eq!(status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{provider:?}: the client is not left hanging"
        );
        let (text, error) = failed_sse(&body);
        assert_eq!(
            text, "partial",
            "{provider:?}: the tokens before the silence"
        );
        assert_eq!(error["code"], "upstream_timeout", "{provider:?}: {body}");
        assert!(error["message"]
            .as_str()
            .unwrap()
            .contains("no token for 1 s"));
        assert!(
            eventually(3, || up.cancelled() == 1).await,
            "{provider:?}: the upstream request was cancelled"
        );

        // The session keeps the question and what was streamed, marked interrupted, and
        // the next turn goes through.
        post(
            &gw.url("/v1/chat/completions"),
            json!({"model": "brunix", "session_id": "idle",
                "messages": [{"role": "user", "content": "still there?"}]}),
        )
        .await;
        let sent = up.last_request().body["messages"].clone();
        let text = |m: &Value| m["content"].as_str().unwrap_or_default().to_string();
        let n = sent.as_array().unwrap().len();
        assert_eq!(text(&sent[n - 3]), "hello?", "{provider:?}: {sent}");
        assert_eq!(text(&sent[n - 2]), "partial [answer interrupted]");
        assert_eq!(text(&sent[n - 1]), "still there?");

        // Ollama dialect: the same, as an {"error"} line after the tokens.
        up.push(Reply::StallAfter(
            vec!["half".into()],
            Duration::from_secs(4),
        ));
        let (status, _, body) = post(
            &gw.url("/api/chat"),
            json!({"model": "brunix", "messages": [{"role": "user", "content": "hello?"}]}),
        )
        .await;
        assert_eq!(status, 200);
        let lines = ndjson_lines(&body);
        assert_eq!(
            lines[0]["message"]["content"], "half",
            "{provider:?}: {body}"
        );
        assert!(
            lines.last().unwrap()["error"]
                .as_str()
                .unwrap()
                .contains("timed out"),
            "{provider:?}: {body}"
        );
    }
}

#[tokio::test]
async fn no_first_token_within_the_first_token_timeout_ends_the_answer() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        // Headers at once, then a long silence before the first token (a slow prompt).
        // The idle timeout between tokens is long: the first token has its own bound.
        let gw = Gateway::start(&up, provider, |s| {
            s.llm.first_byte_timeout = std::time::Duration::from_secs(1);
            s.llm.idle_timeout = std::time::Duration::from_secs(60);
        })
        .await;
        up.push(Reply::Tokens {
            tokens: vec!["slow".into()],
            delay: Duration::from_secs(5),
            finish: "stop",
        });
        let started = std::time::Instant::now();
        let (status, _, body) = post(
            &gw.url("/v1/chat/completions"),
            json!({"model": "brunix", "stream": true, "session_id": "ttft",
                "messages": [{"role": "user", "content": "a long prompt"}]}),
        )
        .await;
        assert_eq!(status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{provider:?}: ended by the first-token timeout, not the idle one"
        );
        let (text, error) = failed_sse(&body);
        assert_eq!(text, "");
        assert_eq!(error["code"], "upstream_timeout", "{provider:?}: {body}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("no first token within 1 s"),
            "{error}"
        );
        let answers = up
            .requests()
            .iter()
            .filter(|r| r.path.contains("chat"))
            .count();
        assert_eq!(
            answers, 1,
            "{provider:?}: a busy upstream is not asked twice"
        );
        assert!(
            eventually(3, || up.cancelled() == 1).await,
            "{provider:?}: the upstream request was cancelled"
        );
    }
}

#[tokio::test]
async fn too_many_or_too_long_messages_are_400_naming_the_field() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.max_messages = 3;
        s.server.max_message_chars = 100;
    })
    .await;
    let many: Vec<Value> = (0..4)
        .map(|i| json!({"role": "user", "content": format!("m{i}")}))
        .collect();
    let long = json!([{"role": "user", "content": "x".repeat(101)}]);
    for (path, messages, field) in [
        ("/v1/chat/completions", json!(many), "messages"),
        ("/v1/chat/completions", long.clone(), "messages[0].content"),
        ("/api/chat", json!(many), "messages"),
        ("/api/chat", long, "messages[0].content"),
    ] {
        let (status, _, text) = post(
            &gw.url(path),
            json!({"model": "brunix", "stream": false, "messages": messages}),
        )
        .await;
        assert_eq!(status, 400, "{path}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = if path.starts_with("/v1") {
            assert_eq!(v["error"]["param"], field);
            v["error"]["message"].as_str().unwrap().to_string()
        } else {
            v["error"].as_str().unwrap().to_string()
        };
        assert!(message.contains(field), "{message}");
    }
    let (status, _, text) = post(
        &gw.url("/api/generate"),
        json!({"model": "brunix", "stream": false, "prompt": "y".repeat(101)}),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    // A completion's suffix and a generate's system text are held to the same length.
    for (path, body, field) in [
        (
            "/v1/completions",
            json!({"model": "brunix", "prompt": "def f(", "suffix": "z".repeat(101)}),
            "suffix",
        ),
        (
            "/api/generate",
            json!({"model": "brunix", "stream": false, "prompt": "def f(",
                "suffix": "z".repeat(101)}),
            "suffix",
        ),
        (
            "/api/generate",
            json!({"model": "brunix", "stream": false, "prompt": "hi",
                "system": "s".repeat(101)}),
            "system",
        ),
        // Texts the Anthropic and Responses dialects hold outside their message lists are
        // named as the client wrote them (both were named `messages[0].content`), and so
        // are the messages after them.
        (
            "/v1/messages",
            json!({"model": "brunix", "max_tokens": 10, "system": "s".repeat(101),
                "messages": [{"role": "user", "content": "hi"}]}),
            "system",
        ),
        (
            "/v1/messages",
            json!({"model": "brunix", "max_tokens": 10, "system": "be brief",
                "messages": [{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": [{"type": "text", "text": "q".repeat(101)}]}]}),
            "messages.2.content",
        ),
        (
            "/v1/responses",
            json!({"model": "brunix", "instructions": "s".repeat(101), "input": "hi"}),
            "instructions",
        ),
        (
            "/v1/responses",
            json!({"model": "brunix", "instructions": "be brief",
                "input": [{"role": "user", "content": "q".repeat(101)}]}),
            "input[0].content",
        ),
    ] {
        let (status, _, text) = post(&gw.url(path), body).await;
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains(field), "{path}: {text}");
    }
    assert!(up.requests().is_empty(), "nothing reached the upstream");
}

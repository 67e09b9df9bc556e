//! A client that asks for a whole answer, of a passthrough model or of the assistant,
//! gets it from the upstream's own non-streamed form (`"stream": false`), as a plain
//! proxy would forward it; every streamed answer still streams from the upstream.

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

const PROVIDERS: [Provider; 2] = [Provider::Ollama, Provider::Openai];

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn a_whole_answer_is_asked_whole() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;

        // OpenAI chat, text completion, Ollama chat and generate, each asked whole.
        up.push(Reply::tokens(&["Whole", " answer"]));
        let (status, _, text) =
            post(&gw.url("/v1/chat/completions"), chat(UPSTREAM_MODEL, false)).await;
        assert_eq!(status, 200, "{provider:?} {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "Whole answer");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        // The upstream's own count of the answer.
        assert_eq!(v["usage"]["prompt_tokens"], 11, "{provider:?} {v}");
        assert_eq!(v["usage"]["completion_tokens"], 2, "{provider:?} {v}");
        let sent = up.last_request().body;
        assert_eq!(sent["stream"], false, "{provider:?} {sent}");
        assert!(sent.get("stream_options").is_none(), "{sent}");

        up.push(Reply::tokens(&["def", " f"]));
        let (status, _, text) = post(
            &gw.url("/v1/completions"),
            json!({"model": UPSTREAM_MODEL, "prompt": "x"}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["text"], "def f");
        assert_eq!(up.last_request().body["stream"], false);

        up.push(Reply::tokens(&["Ollama", " whole"]));
        let (status, _, text) = post(&gw.url("/api/chat"), chat(UPSTREAM_MODEL, false)).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["message"]["content"], "Ollama whole");
        assert_eq!(
            (v["done"].clone(), v["eval_count"].clone()),
            (json!(true), json!(2))
        );
        assert_eq!(up.last_request().body["stream"], false);

        up.push(Reply::tokens(&["gen"]));
        let (status, _, text) = post(
            &gw.url("/api/generate"),
            json!({"model": UPSTREAM_MODEL, "prompt": "x", "stream": false}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["response"], "gen");
        assert_eq!(up.last_request().body["stream"], false);

        // A streamed answer streams from the upstream, the assistant's included; the
        // assistant's whole answer is asked whole, in both dialects.
        for model in [UPSTREAM_MODEL, "brunix"] {
            let (status, _, _) = post(&gw.url("/v1/chat/completions"), chat(model, true)).await;
            assert_eq!(status, 200);
            assert_eq!(up.last_request().body["stream"], true, "{model}");
        }
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), chat("brunix", false)).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "Hello from upstream");
        assert_eq!(up.last_request().body["stream"], false);
        let (status, _, text) = post(&gw.url("/api/chat"), chat("brunix", false)).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["message"]["content"], "Hello from upstream");
        assert_eq!(up.last_request().body["stream"], false);
    }
}

#[tokio::test]
async fn tool_calls_and_failures_of_a_whole_answer() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| {
            s.assistant.passthrough = true;
            s.llm.retries = 0;
        })
        .await;

        up.push(Reply::ToolCall {
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        });
        let mut body = chat(UPSTREAM_MODEL, false);
        body["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(status, 200, "{provider:?} {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather", "{v}");
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"city": "Paris"}));
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

        // The upstream's failures, in the dialect's error shape with its own words.
        let faults = [
            (
                Reply::ErrorAfter(vec![], "CUDA out of memory".into()),
                "CUDA out of memory",
            ),
            (Reply::GarbageAfter(vec![]), ""),
            (Reply::DropAfter(vec![]), ""),
        ];
        for (fault, words) in faults {
            up.push(fault.clone());
            let (status, _, text) =
                post(&gw.url("/v1/chat/completions"), chat(UPSTREAM_MODEL, false)).await;
            assert!(status >= 500, "{provider:?} {fault:?}: {status} {text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains(words), "{provider:?} {fault:?}: {message}");
            assert!(v["error"]["type"].is_string(), "{v}");
        }
    }
}

/// No first token ever comes before a whole answer's last: the first-byte timeout does
/// not cut a slow whole answer short, `llm.max_answer_secs` bounds it, and a client that
/// goes away cancels the upstream request.
#[tokio::test]
async fn a_whole_answer_is_bounded_by_the_answer_time_and_cancelled_with_its_client() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.assistant.passthrough = true;
        s.llm.retries = 0;
        s.llm.first_byte_timeout = Duration::from_secs(1);
        s.llm.max_answer = Duration::from_secs(3);
    })
    .await;

    // Two seconds of generation: past the first-byte timeout, within the answer's time.
    up.push(Reply::Tokens {
        tokens: vec![
            "slow".into(),
            " but".into(),
            " whole".into(),
            " answer".into(),
        ],
        delay: Duration::from_millis(500),
        finish: "stop",
    });
    let (status, _, text) =
        post(&gw.url("/v1/chat/completions"), chat(UPSTREAM_MODEL, false)).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "slow but whole answer"
    );

    // An upstream that never answers: ended after llm.max_answer_secs.
    up.push(Reply::Endless(Duration::from_millis(20)));
    let started = std::time::Instant::now();
    let (status, _, text) =
        post(&gw.url("/v1/chat/completions"), chat(UPSTREAM_MODEL, false)).await;
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("llm.max_answer_secs"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(2900));

    // A client that goes away: the upstream request is cancelled.
    let before = up.cancelled();
    up.push(Reply::Endless(Duration::from_millis(20)));
    let url = gw.url("/v1/chat/completions");
    let asking = tokio::spawn(async move { post(&url, chat(UPSTREAM_MODEL, false)).await });
    assert!(eventually(5, || up.requests().len() >= 3).await);
    asking.abort();
    assert!(
        eventually(5, || up.cancelled() > before).await,
        "the upstream request was not cancelled"
    );
}

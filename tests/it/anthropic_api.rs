//! The Anthropic Messages dialect (`/v1/messages`, Claude Code's API) as its clients see
//! it: the exact streamed event sequence, whole messages, tool round trips translated to
//! the upstream and back, `count_tokens`, the model list in Anthropic's shape, and every
//! error in Anthropic's shape with its status.

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

/// POSTs an Anthropic request as the SDK does (`anthropic-version`, `x-api-key` when
/// given); returns status, headers and body.
async fn messages(
    gw: &Gateway,
    path: &str,
    key: Option<&str>,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut rb = client()
        .post(gw.url(path))
        .header("anthropic-version", "2023-06-01")
        .header(
            "anthropic-beta",
            "claude-code-20250219,fine-grained-tool-streaming-2025-05-14",
        )
        .json(&body);
    if let Some(key) = key {
        rb = rb.header("x-api-key", key);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

/// An Anthropic error body with this status and type; returns its message.
fn anthropic_error(status: u16, text: &str, expected: (u16, &str)) -> String {
    assert_eq!(status, expected.0, "{text}");
    let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], expected.1, "{v}");
    v["error"]["message"].as_str().unwrap().to_string()
}

const WEATHER_TOOL: &str = "get_weather";

fn weather_tools() -> Value {
    json!([{"name": WEATHER_TOOL, "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}])
}

#[tokio::test]
async fn a_streamed_message_has_the_exact_event_sequence() {
    for provider in [Provider::Openai, Provider::Ollama] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        for model in [UPSTREAM_MODEL, "brunix"] {
            up.push(Reply::tokens(&["Hel", "lo", " there"]));
            let (status, headers, text) = messages(
                &gw,
                "/v1/messages?beta=true",
                None,
                json!({"model": model, "max_tokens": 64, "stream": true,
                    "system": [{"type": "text", "text": "Be brief."}],
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}]}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            assert_eq!(headers["content-type"], "text/event-stream");
            let events = named_events(&text);
            assert_eq!(
                names(&events),
                [
                    "message_start",
                    "ping",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_delta",
                    "content_block_delta",
                    "content_block_stop",
                    "message_delta",
                    "message_stop"
                ],
                "{provider:?} {model}: {text}"
            );
            let start = &events[0].1["message"];
            assert_eq!(start["role"], "assistant");
            assert_eq!(start["model"], model);
            assert_eq!(start["content"], json!([]));
            assert!(start["id"].as_str().unwrap().starts_with("msg_"));
            assert!(
                start["usage"]["input_tokens"].as_u64().unwrap() > 0,
                "{start}"
            );
            assert_eq!(
                events[2].1["content_block"],
                json!({"type": "text", "text": ""})
            );
            let said: String = events[3..6]
                .iter()
                .map(|(_, e)| {
                    assert_eq!(e["index"], 0);
                    assert_eq!(e["delta"]["type"], "text_delta");
                    e["delta"]["text"].as_str().unwrap().to_string()
                })
                .collect();
            assert_eq!(said, "Hello there");
            let delta = &events[7].1;
            assert_eq!(delta["delta"]["stop_reason"], "end_turn");
            assert_eq!(delta["usage"]["output_tokens"], 3, "{delta}");
            assert!(delta["usage"]["input_tokens"].as_u64().unwrap() > 0);
            // What the upstream was asked: the system prompt and the question.
            let prompt = prompt_text(&up.last_request());
            assert!(prompt.contains("Say hello"), "{prompt}");
            if model == UPSTREAM_MODEL {
                assert!(prompt.contains("Be brief."), "{prompt}");
            }
        }
    }
}

#[tokio::test]
async fn a_whole_message_and_its_options_reach_the_upstream() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| s.assistant.passthrough = true).await;
    up.push(Reply::tokens(&["Hi", " you"]));
    let (status, _, text) = messages(
        &gw,
        "/v1/messages",
        None,
        json!({"model": UPSTREAM_MODEL, "max_tokens": 50, "temperature": 0.2, "top_p": 0.9,
            "stop_sequences": ["\n\nHuman:"], "metadata": {"user_id": "{\"session_id\":\"s\"}"},
            "thinking": {"type": "adaptive"}, "output_config": {"effort": "high"},
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "Say hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], UPSTREAM_MODEL);
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Hi you", "citations": null}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["stop_sequence"], Value::Null);
    assert_eq!(v["usage"]["output_tokens"], 2);
    let sent = up.last_request().body;
    assert_eq!(sent["max_tokens"], 50);
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(sent["top_p"], 0.9);
    assert_eq!(sent["stop"], json!(["\n\nHuman:"]));
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );

    // A token limit reached is `max_tokens`.
    up.push(Reply::tokens(&["a", "b", "c", "d"]));
    let (status, _, text) = messages(
        &gw,
        "/v1/messages",
        None,
        json!({"model": UPSTREAM_MODEL, "max_tokens": 2,
            "messages": [{"role": "user", "content": "count"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["stop_reason"], "max_tokens", "{v}");
}

#[tokio::test]
async fn a_tool_round_trip_is_translated_both_ways() {
    for provider in [Provider::Openai, Provider::Ollama] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        let question = json!({"role": "user", "content": "Weather in Paris?"});
        for model in [UPSTREAM_MODEL, "brunix"] {
            // Streamed: a tool_use block, its input as one input_json_delta.
            up.push(Reply::ToolCall {
                name: WEATHER_TOOL.into(),
                arguments: json!({"city": "Paris"}),
            });
            let (status, _, text) = messages(
                &gw,
                "/v1/messages?beta=true",
                None,
                json!({"model": model, "max_tokens": 100, "stream": true,
                    "tools": weather_tools(),
                    "tool_choice": {"type": "tool", "name": WEATHER_TOOL},
                    "messages": [question]}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            let events = named_events(&text);
            assert_eq!(
                names(&events),
                [
                    "message_start",
                    "ping",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_stop",
                    "message_delta",
                    "message_stop"
                ],
                "{provider:?} {model}: {text}"
            );
            let block = &events[2].1["content_block"];
            assert_eq!(block["type"], "tool_use");
            assert_eq!(block["name"], WEATHER_TOOL);
            assert_eq!(block["input"], json!({}));
            let id = block["id"].as_str().unwrap().to_string();
            assert_eq!(events[3].1["delta"]["type"], "input_json_delta");
            let input: Value =
                serde_json::from_str(events[3].1["delta"]["partial_json"].as_str().unwrap())
                    .unwrap();
            assert_eq!(input, json!({"city": "Paris"}));
            assert_eq!(events[5].1["delta"]["stop_reason"], "tool_use");
            // The upstream got the client tool in its own shape (the server tool dropped).
            let sent = up.last_request().body;
            let tools = sent["tools"].as_array().unwrap();
            assert_eq!(tools.len(), 1, "{sent}");
            assert_eq!(tools[0]["function"]["name"], WEATHER_TOOL);
            assert_eq!(
                tools[0]["function"]["parameters"]["required"],
                json!(["city"])
            );
            if provider == Provider::Openai {
                assert_eq!(sent["tool_choice"]["function"]["name"], WEATHER_TOOL);
            }

            // Whole: the same call as a tool_use block.
            up.push(Reply::ToolCall {
                name: WEATHER_TOOL.into(),
                arguments: json!({"city": "Paris"}),
            });
            let (status, _, text) = messages(
                &gw,
                "/v1/messages",
                None,
                json!({"model": model, "max_tokens": 100, "tools": weather_tools(),
                    "messages": [question]}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["stop_reason"], "tool_use", "{v}");
            let content = v["content"].as_array().unwrap();
            assert_eq!(content.len(), 1, "{v}");
            assert_eq!(content[0]["type"], "tool_use");
            assert_eq!(content[0]["input"], json!({"city": "Paris"}));

            // The client answers the call; the upstream sees it in its own shape.
            up.push(Reply::tokens(&["18°C", " and sunny."]));
            let (status, _, text) = messages(
                &gw,
                "/v1/messages",
                None,
                json!({"model": model, "max_tokens": 100, "tools": weather_tools(),
                    "messages": [question,
                        {"role": "assistant", "content": [
                            {"type": "thinking", "thinking": "Look it up.", "signature": "sig"},
                            {"type": "tool_use", "id": id, "name": WEATHER_TOOL,
                             "input": {"city": "Paris"}}]},
                        {"role": "user", "content": [
                            {"type": "tool_result", "tool_use_id": id,
                             "content": [{"type": "text", "text": "18°C, sunny"}]}]}]}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["content"][0]["text"], "18°C and sunny.");
            let sent = up.last_request().body;
            let msgs = sent["messages"].as_array().unwrap();
            let (asst, tool) = (&msgs[msgs.len() - 2], &msgs[msgs.len() - 1]);
            assert_eq!(asst["role"], "assistant", "{sent}");
            assert_eq!(asst["tool_calls"][0]["function"]["name"], WEATHER_TOOL);
            assert_eq!(tool["role"], "tool");
            assert_eq!(tool["content"], "18°C, sunny");
            match provider {
                Provider::Openai => {
                    assert_eq!(asst["content"], json!(""), "a string, never null: {asst}");
                    assert_eq!(
                        asst["tool_calls"][0]["function"]["arguments"],
                        "{\"city\":\"Paris\"}"
                    );
                    assert_eq!(tool["tool_call_id"], json!(id));
                }
                Provider::Ollama => {
                    assert_eq!(
                        asst["tool_calls"][0]["function"]["arguments"],
                        json!({"city": "Paris"})
                    );
                    assert_eq!(tool["tool_name"], WEATHER_TOOL);
                }
            }
            assert!(
                !prompt_text(&up.last_request()).contains("Look it up."),
                "thinking is dropped"
            );
        }
    }
}

#[tokio::test]
async fn errors_are_in_anthropic_shape_with_their_status() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.assistant.passthrough = true;
        s.server.api_keys = vec!["sk-a".into()];
        s.server.max_body_bytes = 4096;
        s.llm.retries = 0;
    })
    .await;
    let hello = |model: &str| {
        json!({"model": model, "max_tokens": 16,
            "messages": [{"role": "user", "content": "hello"}]})
    };
    // 401: no key, a wrong key; the right one as x-api-key passes.
    let (status, headers, text) = messages(&gw, "/v1/messages", None, hello("brunix")).await;
    anthropic_error(status, &text, (401, "authentication_error"));
    assert!(headers.contains_key("www-authenticate"));
    let (status, _, text) = messages(&gw, "/v1/messages", Some("sk-b"), hello("brunix")).await;
    anthropic_error(status, &text, (401, "authentication_error"));
    up.push(Reply::tokens(&["hi"]));
    let (status, _, text) = messages(&gw, "/v1/messages", Some("sk-a"), hello("brunix")).await;
    assert_eq!(status, 200, "{text}");
    let key = Some("sk-a");
    // 404: an unknown model, an unknown route under /v1/messages.
    let (status, _, text) = messages(&gw, "/v1/messages", key, hello("no-such-model")).await;
    let message = anthropic_error(status, &text, (404, "not_found_error"));
    assert!(message.contains("no-such-model"), "{message}");
    let (status, _, text) = messages(&gw, "/v1/messages/nope", key, hello("brunix")).await;
    anthropic_error(status, &text, (404, "not_found_error"));
    // 400: max_tokens missing, an image from a source the gateway cannot read (a Files
    // API id), a bad role.
    let (status, _, text) = messages(
        &gw,
        "/v1/messages",
        key,
        json!({"model": "brunix", "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    let message = anthropic_error(status, &text, (400, "invalid_request_error"));
    assert!(message.contains("max_tokens"), "{message}");
    let (status, _, text) = messages(
        &gw,
        "/v1/messages",
        key,
        json!({"model": "brunix", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "file_011"}},
            {"type": "text", "text": "what is this?"}]}]}),
    )
    .await;
    let message = anthropic_error(status, &text, (400, "invalid_request_error"));
    assert!(message.contains("image"), "{message}");
    // 413: a body over server.max_body_bytes.
    let (status, _, text) = messages(
        &gw,
        "/v1/messages",
        key,
        json!({"model": "brunix", "max_tokens": 5,
            "messages": [{"role": "user", "content": "x".repeat(8000)}]}),
    )
    .await;
    anthropic_error(status, &text, (413, "request_too_large"));
    // 529: an overloaded upstream; 429: a rate-limited one.
    up.push(Reply::Status {
        status: 503,
        body: "Service Unavailable".into(),
    });
    let (status, _, text) = messages(&gw, "/v1/messages", key, hello(UPSTREAM_MODEL)).await;
    anthropic_error(status, &text, (529, "overloaded_error"));
    up.push(Reply::Status {
        status: 429,
        body: r#"{"error":{"message":"slow down"}}"#.into(),
    });
    let (status, _, text) = messages(&gw, "/v1/messages", key, hello(UPSTREAM_MODEL)).await;
    anthropic_error(status, &text, (429, "rate_limit_error"));
    // Mid-stream: an `error` event ends the stream.
    up.push(Reply::ErrorAfter(
        vec!["partial".into()],
        "CUDA out of memory".into(),
    ));
    let mut body = hello(UPSTREAM_MODEL);
    body["stream"] = json!(true);
    let (status, _, text) = messages(&gw, "/v1/messages", key, body).await;
    assert_eq!(status, 200, "{text}");
    let events = named_events(&text);
    let (last, error) = events.last().unwrap();
    assert_eq!(last, "error", "{text}");
    assert_eq!(error["error"]["type"], "api_error", "{error}");
    assert!(!names(&events).contains(&"message_stop"));
}

#[tokio::test]
async fn the_gateway_own_rate_limit_is_a_rate_limit_error() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.server.rate_limit_per_minute = 1;
    })
    .await;
    up.set_default(Reply::tokens(&["hi"]));
    let body = json!({"model": "brunix", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello"}]});
    let (status, _, text) = messages(&gw, "/v1/messages", None, body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let (status, headers, text) = messages(&gw, "/v1/messages", None, body).await;
    anthropic_error(status, &text, (429, "rate_limit_error"));
    assert!(headers.contains_key("retry-after"));
}

#[tokio::test]
async fn count_tokens_and_the_model_list_in_anthropic_shape() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| s.assistant.passthrough = true).await;
    let count = |text: &str| {
        json!({"model": "brunix", "system": "Be brief.", "tools": weather_tools(),
            "messages": [{"role": "user", "content": text}]})
    };
    // The estimate, without an upstream tokenizer.
    let (status, _, text) = messages(
        &gw,
        "/v1/messages/count_tokens?beta=true",
        None,
        count("short"),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let short = serde_json::from_str::<Value>(&text).unwrap()["input_tokens"]
        .as_u64()
        .unwrap();
    let (_, _, text) = messages(
        &gw,
        "/v1/messages/count_tokens",
        None,
        count(&"a much longer question about the code ".repeat(20)),
    )
    .await;
    let long = serde_json::from_str::<Value>(&text).unwrap()["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(short > 0 && long > short + 100, "{short} {long}");
    let (status, _, text) = messages(
        &gw,
        "/v1/messages/count_tokens",
        None,
        json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    anthropic_error(status, &text, (404, "not_found_error"));
    // Past `server.max_message_chars` (1,000,000): refused as a turn is (it counted 8 MB
    // of text before). The index counts the system text as the first message, as the
    // `instructions` of issue 68 item 9 still do.
    let (status, _, text) = messages(
        &gw,
        "/v1/messages/count_tokens",
        None,
        count(&"y".repeat(1_000_001)),
    )
    .await;
    anthropic_error(status, &text, (400, "invalid_request_error"));
    assert!(text.contains("server.max_message_chars"), "{text}");

    // The upstream's tokenizer, when it has one.
    let up = ScriptedUpstream::start().await;
    up.limit_window(Window {
        tokens: 100_000,
        chars_per_token: 1.0,
        tokenizer: true,
        overflow: Overflow::Status,
    });
    let gw = Gateway::start(&up, Provider::Openai, |_| {}).await;
    let question = "x".repeat(400);
    let (status, _, text) =
        messages(&gw, "/v1/messages/count_tokens", None, count(&question)).await;
    assert_eq!(status, 200, "{text}");
    let counted = serde_json::from_str::<Value>(&text).unwrap()["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        up.tokenized().iter().any(|t| t.contains(&question)),
        "the upstream counted the question"
    );
    assert!(counted >= 400, "{counted}");

    // The model list: Anthropic's shape for Anthropic clients, OpenAI's for the others.
    let r = client()
        .get(gw.url("/v1/models"))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["has_more"], false, "{v}");
    let first = &v["data"][0];
    assert_eq!(first["type"], "model");
    assert_eq!(v["first_id"], first["id"]);
    assert!(first["display_name"].is_string() && first["created_at"].is_string());
    let (_, v) = get_json(&gw.url("/v1/models")).await;
    assert_eq!(v["object"], "list");
}

#[tokio::test]
async fn claude_code_session_header_is_a_default_session_header() {
    let settings = assist_gateway::config::Settings::load_without_env(None).unwrap();
    assert!(settings
        .server
        .session_headers
        .iter()
        .any(|h| h == "X-Claude-Code-Session-Id"));
}

/// An image reaches the upstream the same way from every dialect: Anthropic's image
/// blocks had been refused while OpenAI's `image_url` parts and Responses' `input_image`
/// were forwarded.
#[tokio::test]
async fn an_image_reaches_the_upstream_alike_from_every_dialect() {
    let data = "iVBORw0KGgo=";
    let url = format!("data:image/png;base64,{data}");
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "brunix", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": url}}]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "brunix", "max_tokens": 50, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                    "data": data}}]}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "brunix", "input": [{"role": "user", "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": url}]}]}),
        ),
    ] {
        let (status, _, text) = post(&gw.url(path), body).await;
        assert_eq!(status, 200, "{path}: {text}");
        let sent = up.last_request().body;
        let last = sent["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["images"], json!([data]), "{path}: {sent}");
        assert!(
            last["content"].as_str().unwrap().contains("what is this?"),
            "{path}: {sent}"
        );
    }
}

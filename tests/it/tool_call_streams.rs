//! Tool calls reach every client whole and once, whatever form the upstream streams them
//! in. llama.cpp's server (llama-cpp-python) repeats the call's id and whole name in every
//! delta, with the arguments in pieces; gathered naively, a client got the
//! name `get_weatherget_weatherget_weather…`. Checked against a scripted upstream that
//! streams exactly that shape, and against the real server.

use crate::real_model::{start_model_server, MODEL};
use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

const CALL_ID: &str = "call__0_get_weather_cmpl-1fc5d534";

/// A question whose answer must be a call of `get_weather` (the tool is forced).
fn tool_request(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
}

/// The SSE body llama-cpp-python 0.3.36's server sends for `tool_request` (captured from
/// the real server; only the ids are shorter): every delta repeats the id and the name,
/// in `tool_calls` and in the legacy `function_call`; the arguments come in pieces, the
/// last one empty; a `: ping` comment when generation is slow; then `tool_calls`, `[DONE]`.
fn llama_cpp_tool_call_sse(model: &str) -> String {
    let event = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-1fc5d534", "object": "chat.completion.chunk",
            "created": 1795498450, "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": null, "delta": delta}]})
    };
    let mut events = vec![event(
        json!({"role": "assistant", "content": null, "function_call": null, "tool_calls": null}),
        Value::Null,
    )];
    for piece in ["{", " \"", "city", "\":", " \"", "Paris", "\"", " }", ""] {
        events.push(event(
            json!({"role": null, "content": null,
                "function_call": {"name": "get_weather", "arguments": piece},
                "tool_calls": [{"index": 0, "id": CALL_ID, "type": "function",
                    "function": {"name": "get_weather", "arguments": piece}}]}),
            Value::Null,
        ));
    }
    events.push(event(
        json!({"role": null, "content": null, "function_call": null, "tool_calls": null}),
        json!("tool_calls"),
    ));
    let mut body = String::new();
    for (i, e) in events.iter().enumerate() {
        if i == 5 {
            body.push_str(": ping - 2026-11-24 05:34:25.353595+00:00\n\n");
        }
        body.push_str(&format!("data: {e}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body
}

/// The calls of a streamed OpenAI answer, put together as the OpenAI SDKs do: by index,
/// the id kept, name and arguments concatenated.
fn openai_stream_calls(body: &str) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for e in sse_events(body) {
        if e == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&e).unwrap();
        for d in v["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = d["index"].as_u64().unwrap() as usize;
            if calls.len() <= i {
                calls.resize(i + 1, Default::default());
            }
            if let Some(id) = d["id"].as_str() {
                calls[i].0 = id.to_string();
            }
            calls[i].1 += d["function"]["name"].as_str().unwrap_or("");
            calls[i].2 += d["function"]["arguments"].as_str().unwrap_or("");
        }
    }
    calls
}

#[tokio::test]
async fn a_llama_cpp_tool_call_stream_reaches_every_client_whole() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| s.assistant.passthrough = true).await;
    let reply = || Reply::Raw {
        content_type: "text/event-stream; charset=utf-8",
        body: llama_cpp_tool_call_sse(UPSTREAM_MODEL),
    };

    // OpenAI, streamed (a passthrough model, and the assistant): put together as the
    // SDKs do, one call, named once, its arguments whole.
    for model in [UPSTREAM_MODEL, "brunix"] {
        up.push(reply());
        let (status, _, text) =
            post(&gw.url("/v1/chat/completions"), tool_request(model, true)).await;
        assert_eq!(status, 200, "{text}");
        let calls = openai_stream_calls(&text);
        assert_eq!(calls.len(), 1, "{model}: {calls:?}");
        assert_eq!(
            (calls[0].0.as_str(), calls[0].1.as_str()),
            (CALL_ID, "get_weather")
        );
        let arguments: Value = serde_json::from_str(&calls[0].2).unwrap();
        assert_eq!(arguments, json!({"city": "Paris"}));
        let sent = up.last_request().body;
        assert_eq!(sent["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(sent["tool_choice"]["function"]["name"], "get_weather");
    }

    // Ollama, streamed: each call once, with its arguments as an object.
    up.push(reply());
    let (status, _, text) = post(&gw.url("/api/chat"), tool_request("brunix", true)).await;
    assert_eq!(status, 200, "{text}");
    let calls: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter_map(|v| v["message"]["tool_calls"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{text}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], json!({"city": "Paris"}));

    // Asked whole (a passthrough model, and the assistant): the server's own whole
    // answer, in the shape llama-cpp-python gives it (the call in `tool_calls` and again
    // in the legacy `function_call`), reaches both dialects once.
    let whole = json!({"id": "chatcmpl-1fc5d534", "object": "chat.completion",
        "created": 1795498450, "model": UPSTREAM_MODEL,
        "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null,
                "function_call": {"name": "get_weather", "arguments": "{ \"city\": \"Paris\" }"},
                "tool_calls": [{"id": CALL_ID, "type": "function",
                    "function": {"name": "get_weather", "arguments": "{ \"city\": \"Paris\" }"}}]}}],
        "usage": {"prompt_tokens": 180, "completion_tokens": 9, "total_tokens": 189}});
    for (path, model) in [
        ("/v1/chat/completions", UPSTREAM_MODEL),
        ("/api/chat", UPSTREAM_MODEL),
        ("/v1/chat/completions", "brunix"),
        ("/api/chat", "brunix"),
    ] {
        up.push(Reply::Raw {
            content_type: "application/json",
            body: whole.to_string(),
        });
        let (status, _, text) = post(&gw.url(path), tool_request(model, false)).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(up.last_request().body["stream"], false);
        let v: Value = serde_json::from_str(&text).unwrap();
        let (calls, arguments) = match path {
            "/api/chat" => {
                let calls = v["message"]["tool_calls"].as_array().unwrap().clone();
                let arguments = calls[0]["function"]["arguments"].clone();
                (calls, arguments)
            }
            _ => {
                let calls = v["choices"][0]["message"]["tool_calls"]
                    .as_array()
                    .unwrap()
                    .clone();
                let arguments =
                    serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap())
                        .unwrap();
                (calls, arguments)
            }
        };
        assert_eq!(calls.len(), 1, "{path} {model}: {text}");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert_eq!(arguments, json!({"city": "Paris"}), "{path} {model}");
    }
}

/// The real llama.cpp server (the quick start's model, the tool forced by `tool_choice`), through the
/// gateway to a client that does not stream: the function's name as the server itself
/// gives it without streaming (`get_weather`), and arguments that are a JSON object.
#[tokio::test]
async fn a_real_llama_cpp_tool_call_keeps_its_name() {
    let (Ok(python), Ok(gguf)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let model = start_model_server(&python, &gguf).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{}/v1", model.port);
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = std::time::Duration::from_secs(120);
        s.assistant.passthrough = true;
    })
    .await;
    let mut body = tool_request(MODEL, false);
    body["max_tokens"] = json!(48);
    body["temperature"] = json!(0);
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let calls = v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no tool call: {text}"));
    assert_eq!(calls.len(), 1, "{text}");
    assert_eq!(calls[0]["function"]["name"], "get_weather", "{text}");
    assert!(
        calls[0]["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{text}"
    );
    let arguments: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments.get("city").is_some(), "{text}");
}

/// A tool round trip sent back to the real llama.cpp server (llama-cpp-python) in every
/// chat dialect: the assistant's call (no text beside it) and the tool's result. The
/// server refuses `content: null` beside `tool_calls` (HTTP 500, "Input should be a valid
/// string"); the gateway sends what it accepts.
#[tokio::test]
async fn a_real_llama_cpp_server_takes_a_tool_round_trip_in_every_dialect() {
    let (Ok(python), Ok(gguf)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let model = start_model_server(&python, &gguf).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{}/v1", model.port);
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = std::time::Duration::from_secs(120);
        s.llm.retries = 0;
        s.assistant.passthrough = true;
    })
    .await;
    let question = "What is the weather in Paris?";
    let bodies = [
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": null, "tool_calls": [{"id": CALL_ID,
                    "type": "function", "function": {"name": "get_weather",
                        "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": CALL_ID, "content": "18°C, sunny"}]}),
        ),
        (
            "/v1/messages",
            json!({"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": [{"type": "tool_use", "id": CALL_ID,
                    "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": CALL_ID,
                    "content": "18°C, sunny"}]}]}),
        ),
        (
            "/v1/responses",
            json!({"model": MODEL, "max_output_tokens": 8, "temperature": 0, "input": [
                {"role": "user", "content": question},
                {"type": "function_call", "call_id": CALL_ID, "name": "get_weather",
                    "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call_output", "call_id": CALL_ID, "output": "18°C, sunny"}]}),
        ),
    ];
    for (path, body) in bodies {
        let (status, _, text) = post(&gw.url(path), body).await;
        assert_eq!(status, 200, "{path}: {text}");
    }
}

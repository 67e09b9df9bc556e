//! The OpenAI dialect against both upstream providers: what an OpenAI client sees.

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

const PROVIDERS: [Provider; 2] = [Provider::Ollama, Provider::Openai];

fn chat_body(stream: bool) -> Value {
    json!({"model": "brunix", "stream": stream,
           "messages": [{"role": "user", "content": "What is a closure?"}]})
}

#[tokio::test]
async fn non_stream_chat_returns_the_whole_answer_with_usage() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        let (status, headers, body) = post(&gw.url("/v1/chat/completions"), chat_body(false)).await;
        assert_eq!(status, 200, "{provider:?}: {body}");
        assert!(headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(v["model"], "brunix");
        assert!(v["created"].is_i64());
        let choice = &v["choices"][0];
        assert_eq!(choice["index"], 0);
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["message"]["content"], "Hello from upstream");
        assert_eq!(choice["finish_reason"], "stop");
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14})
        );
    }
}

#[tokio::test]
async fn stream_chat_is_framed_as_sse_with_role_finish_and_done() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        let (status, headers, body) = post(&gw.url("/v1/chat/completions"), chat_body(true)).await;
        assert_eq!(status, 200, "{provider:?}: {body}");
        assert_eq!(headers["content-type"], "text/event-stream");
        let events = sse_events(&body);
        assert_eq!(events.last().unwrap(), "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let id = chunks[0]["id"].as_str().unwrap();
        for c in &chunks {
            assert_eq!(c["id"], id, "one id for the whole stream");
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["model"], "brunix");
            assert!(
                c.get("usage").is_none(),
                "no usage without include_usage: {c}"
            );
        }
        assert_eq!(
            chunks[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "Hello from upstream");
        let finishes: Vec<&Value> = chunks
            .iter()
            .map(|c| &c["choices"][0]["finish_reason"])
            .filter(|f| !f.is_null())
            .collect();
        assert_eq!(finishes, vec![&json!("stop")], "finish_reason exactly once");
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"][0]["delta"], json!({}));
    }
}

/// Tokens the upstream sends together reach the client together: the gateway (a real
/// process, with its production runtime) does not write each one in a packet of its own,
/// as it did while the upstream connection handed them over one at a time. (The upstream
/// sends its 40 tokens as fast as it can; how many writes that takes depends on the
/// machine's load, hence a bound of a quarter of the events, not one write.)
#[tokio::test]
async fn a_burst_of_tokens_leaves_in_a_few_writes() {
    let words: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        up.set_default(Reply::tokens(&tokens));
        let gw = Spawned::start(&up, provider, |s| s.assistant.passthrough = true).await;
        for model in ["brunix", UPSTREAM_MODEL] {
            let mut response = client()
                .post(gw.url("/v1/chat/completions"))
                .json(&json!({"model": model, "stream": true,
                              "messages": [{"role": "user", "content": "Count."}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{provider:?} {model}");
            let (mut writes, mut body) = (0, Vec::new());
            while let Some(piece) = response.chunk().await.unwrap() {
                writes += 1;
                body.extend_from_slice(&piece);
            }
            let events = sse_events(std::str::from_utf8(&body).unwrap());
            assert_eq!(events.last().unwrap(), "[DONE]");
            assert_eq!(sse_text(&events), words.concat(), "{provider:?} {model}");
            assert!(
                writes * 4 <= events.len(),
                "{provider:?} {model}: {writes} writes for {} events",
                events.len()
            );
        }
    }
}

#[tokio::test]
async fn include_usage_adds_one_usage_chunk_before_done() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        let mut body = chat_body(true);
        body["stream_options"] = json!({"include_usage": true});
        let (_, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        let events = sse_events(&text);
        assert_eq!(events.last().unwrap(), "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let (usage_chunk, rest) = chunks.split_last().unwrap();
        assert_eq!(usage_chunk["choices"], json!([]));
        assert_eq!(
            usage_chunk["usage"],
            json!({"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14})
        );
        for c in rest {
            assert_eq!(c["usage"], Value::Null, "other chunks carry usage: null");
        }
    }
}

#[tokio::test]
async fn content_parts_are_joined_and_images_reach_the_upstream() {
    let image = "data:image/png;base64,iVBORw0KGgo=";
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        let body = json!({"model": "brunix", "messages": [
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": [
                {"type": "text", "text": "first part"},
                {"type": "image_url", "image_url": {"url": image}},
                {"type": "text", "text": "second part"}]}]});
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(status, 200, "{text}");
        let sent = up.last_request().body;
        let messages = sent["messages"].as_array().unwrap();
        // The assistant's own system prompt comes first, then the client's messages.
        assert_eq!(messages[0]["role"], "system");
        assert!(messages[0]["content"].as_str().unwrap().contains("Brunix"));
        assert_eq!(
            messages[1],
            json!({"role": "system", "content": "Be terse."})
        );
        match provider {
            Provider::Ollama => {
                assert_eq!(messages[2]["content"], "first part\nsecond part");
                assert_eq!(messages[2]["images"], json!(["iVBORw0KGgo="]));
            }
            Provider::Openai => {
                assert_eq!(
                    messages[2]["content"][0],
                    json!({"type": "text", "text": "first part\nsecond part"})
                );
                assert_eq!(messages[2]["content"][1]["image_url"]["url"], image);
            }
        }
    }
}

#[tokio::test]
async fn generation_controls_are_forwarded_and_length_is_reported() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        up.push(Reply::Tokens {
            tokens: vec!["a".into(), "b".into()],
            delay: Default::default(),
            finish: "length",
        });
        let gw = Gateway::start(&up, provider, |_| {}).await;
        let stops = ["s1", "s2", "s3", "s4", "s5", "s6"];
        let body = json!({"model": "brunix", "max_tokens": 2, "temperature": 0.2, "top_p": 0.9, "seed": 7,
            "stop": stops, "messages": [{"role": "user", "content": "count"}],
            "user": "plain-user-string", "x_unknown_field": true, "reasoning_effort": "low"});
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let sent = up.last_request().body;
        match provider {
            Provider::Ollama => {
                assert_eq!(sent["options"]["num_predict"], 2);
                assert_eq!(sent["options"]["stop"], json!(stops));
                assert_eq!(sent["options"]["seed"], 7);
                assert_eq!(sent["options"]["temperature"], 0.2);
            }
            Provider::Openai => {
                assert_eq!(sent["max_tokens"], 2);
                assert_eq!(sent["stop"], json!(stops));
                assert_eq!(sent["top_p"], 0.9);
            }
        }
        assert_eq!(
            sent["model"], UPSTREAM_MODEL,
            "the assistant answers with the configured upstream model"
        );
    }
    // max_completion_tokens and a single stop string.
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |_| {}).await;
    let body = json!({"model": "brunix", "max_completion_tokens": 5, "stop": "END",
        "messages": [{"role": "user", "content": "x"}]});
    let (status, _, _) = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(status, 200);
    let sent = up.last_request().body;
    assert_eq!(
        (sent["max_tokens"].clone(), sent["stop"].clone()),
        (json!(5), json!(["END"]))
    );
}

#[tokio::test]
async fn tool_calls_round_trip() {
    for provider in PROVIDERS {
        for stream in [false, true] {
            let up = ScriptedUpstream::start().await;
            up.push(Reply::ToolCall {
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            });
            let gw = Gateway::start(&up, provider, |_| {}).await;
            let tools = json!([{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
            let body = json!({"model": "brunix", "stream": stream, "tools": tools, "tool_choice": "auto",
                "parallel_tool_calls": false,
                "messages": [{"role": "user", "content": "Weather in Paris?"}]});
            let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
            assert_eq!(status, 200, "{text}");
            assert_eq!(
                up.last_request().body["tools"],
                tools,
                "{provider:?}: tools reach the upstream"
            );
            let (id, name, args, finish) = if stream {
                let events = sse_events(&text);
                let chunks: Vec<Value> = events[..events.len() - 1]
                    .iter()
                    .map(|e| serde_json::from_str(e).unwrap())
                    .collect();
                let deltas: Vec<&Value> = chunks
                    .iter()
                    .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
                    .collect();
                assert_eq!(
                    deltas[0][0]["function"]["arguments"], "",
                    "first tool delta has name and empty arguments"
                );
                let args: String = deltas
                    .iter()
                    .filter_map(|d| d[0]["function"]["arguments"].as_str())
                    .collect();
                let finish = chunks
                    .iter()
                    .find_map(|c| c["choices"][0]["finish_reason"].as_str())
                    .unwrap()
                    .to_string();
                (
                    deltas[0][0]["id"].as_str().unwrap().to_string(),
                    deltas[0][0]["function"]["name"].clone(),
                    args,
                    finish,
                )
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                let msg = &v["choices"][0]["message"];
                assert_eq!(msg["content"], Value::Null);
                let call = &msg["tool_calls"][0];
                assert_eq!(call["type"], "function");
                (
                    call["id"].as_str().unwrap().to_string(),
                    call["function"]["name"].clone(),
                    call["function"]["arguments"].as_str().unwrap().to_string(),
                    v["choices"][0]["finish_reason"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            };
            assert!(!id.is_empty());
            assert_eq!(name, "get_weather");
            assert_eq!(
                serde_json::from_str::<Value>(&args).unwrap(),
                json!({"city": "Paris"}),
                "arguments are a JSON string"
            );
            assert_eq!(finish, "tool_calls");

            // The client answers the call; the upstream sees it in its own shape.
            let follow = json!({"model": "brunix", "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": id, "content": "18°C, sunny"}]});
            let (status, _, text) = post(&gw.url("/v1/chat/completions"), follow).await;
            assert_eq!(status, 200, "{text}");
            let sent = up.last_request().body;
            let msgs = sent["messages"].as_array().unwrap();
            let (asst, tool) = (&msgs[msgs.len() - 2], &msgs[msgs.len() - 1]);
            match provider {
                Provider::Ollama => {
                    assert_eq!(
                        asst["tool_calls"][0]["function"]["arguments"],
                        json!({"city": "Paris"})
                    );
                    assert_eq!(tool["tool_name"], "get_weather");
                }
                Provider::Openai => {
                    assert_eq!(
                        asst["tool_calls"][0]["function"]["arguments"],
                        "{\"city\":\"Paris\"}"
                    );
                    assert_eq!(tool["tool_call_id"], json!(id));
                    // A string beside the calls, never null: llama-cpp-python's server
                    // refuses `null` with HTTP 500 ("Input should be a valid string").
                    assert_eq!(asst["content"], json!(""), "{asst}");
                }
            }
            assert_eq!(tool["content"], "18°C, sunny");
        }
    }
}

#[tokio::test]
async fn models_list_and_retrieve() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, v) = get_json(&gw.url("/v1/models")).await;
    assert_eq!(status, 200);
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec!["brunix"],
        "without passthrough only the assistant is listed"
    );
    let m = &v["data"][0];
    assert_eq!(
        (
            m["object"].as_str(),
            m["created"].is_i64(),
            m["owned_by"].is_string()
        ),
        (Some("model"), true, true)
    );
    let (status, v) = get_json(&gw.url("/v1/models/brunix")).await;
    assert_eq!((status, v["id"].as_str()), (200, Some("brunix")));
    let (status, v) = get_json(&gw.url("/v1/models/nope")).await;
    assert_eq!(status, 404);
    assert_eq!(v["error"]["code"], "model_not_found");

    for provider in PROVIDERS {
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        let (_, v) = get_json(&gw.url("/v1/models")).await;
        let ids: Vec<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec!["brunix", UPSTREAM_MODEL], "{provider:?}");
        let (status, v) = get_json(&gw.url(&format!("/v1/models/{UPSTREAM_MODEL}"))).await;
        assert_eq!((status, v["id"].as_str()), (200, Some(UPSTREAM_MODEL)));
    }
}

/// `name` and `name:latest` are one model both ways: a model listed bare is found by its
/// `:latest` name, and one listed with `:latest` by its bare name.
#[tokio::test]
async fn a_passthrough_model_is_found_by_either_of_its_names() {
    let up = ScriptedUpstream::start().await;
    up.serve_model("other-model");
    for provider in PROVIDERS {
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        for (asked, listed) in [
            ("other-model:latest", "other-model"),
            ("up-model", UPSTREAM_MODEL),
        ] {
            let (status, v) = get_json(&gw.url(&format!("/v1/models/{asked}"))).await;
            assert_eq!(
                (status, v["id"].as_str()),
                (200, Some(listed)),
                "{provider:?} {asked}: {v}"
            );
        }
    }
}

#[tokio::test]
async fn passthrough_forwards_upstream_models_unchanged() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        let body =
            json!({"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "hi"}]});
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["model"], UPSTREAM_MODEL);
        let sent = up.last_request().body;
        assert_eq!(sent["model"], UPSTREAM_MODEL);
        assert_eq!(
            sent["messages"],
            json!([{"role": "user", "content": "hi"}]),
            "no system prompt added"
        );
        // The assistant is still the assistant, also under its :latest alias.
        let body =
            json!({"model": "brunix:latest", "messages": [{"role": "user", "content": "hi"}]});
        let (status, _, _) = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(status, 200);
        assert_eq!(up.last_request().body["messages"][0]["role"], "system");
    }
    // Without passthrough the upstream's model is not served.
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let body = json!({"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(status, 404, "{text}");
    assert!(up.requests().is_empty());
}

#[tokio::test]
async fn text_completions_stream_and_non_stream() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        let (status, _, text) = post(
            &gw.url("/v1/completions"),
            json!({"model": "brunix", "prompt": "def add(a, b):", "max_tokens": 8}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "Hello from upstream");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["choices"][0]["logprobs"], Value::Null);
        assert!(v["usage"]["total_tokens"].is_u64());
        // The assistant turns the prompt into a user message under its system prompt.
        let sent = up.last_request().body;
        assert_eq!(
            sent["messages"][1],
            json!({"role": "user", "content": "def add(a, b):"})
        );

        // A passthrough model goes to the upstream's own completion endpoint.
        let (status, _, text) = post(&gw.url("/v1/completions"),
            json!({"model": UPSTREAM_MODEL, "prompt": ["def add(a, b):"], "suffix": "\n", "stream": true,
                   "stream_options": {"include_usage": true}})).await;
        assert_eq!(status, 200, "{text}");
        let req = up.last_request();
        match provider {
            Provider::Ollama => assert_eq!(req.path, "/api/generate"),
            Provider::Openai => assert_eq!(req.path, "/v1/completions"),
        }
        assert_eq!(req.body["prompt"], "def add(a, b):");
        assert_eq!(req.body["suffix"], "\n");
        let events = sse_events(&text);
        assert_eq!(events.last().unwrap(), "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let joined: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["text"].as_str())
            .collect();
        assert_eq!(joined, "Hello from upstream");
        assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
        assert_eq!(chunks.last().unwrap()["usage"]["prompt_tokens"], 11);
    }
}

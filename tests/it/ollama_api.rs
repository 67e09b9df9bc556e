//! The Ollama dialect against both upstream providers: what an Ollama client sees.

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

const PROVIDERS: [Provider; 2] = [Provider::Ollama, Provider::Openai];

fn assert_final_line(line: &Value, reason: &str) {
    assert_eq!(line["done"], true);
    assert_eq!(line["done_reason"], reason);
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ] {
        assert!(line[k].is_u64(), "{k} must be a number: {line}");
    }
    assert!(line["eval_duration"].as_u64().unwrap() > 0);
    assert!(chrono::DateTime::parse_from_rfc3339(line["created_at"].as_str().unwrap()).is_ok());
}

#[tokio::test]
async fn chat_streams_ndjson_by_default() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        // No "stream" field: Ollama streams by default (Open WebUI relies on it).
        let body = json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]});
        let (status, headers, text) = post(&gw.url("/api/chat"), body).await;
        assert_eq!(status, 200, "{provider:?}: {text}");
        assert_eq!(headers["content-type"], "application/x-ndjson");
        assert!(!text.contains("data:"));
        let lines = ndjson_lines(&text);
        for l in &lines {
            assert_eq!(l["model"], "brunix");
            assert_eq!(
                l["message"]["role"], "assistant",
                "message on every line: {l}"
            );
            assert!(l["done"].is_boolean());
        }
        let (last, deltas) = lines.split_last().unwrap();
        let joined: String = deltas
            .iter()
            .map(|l| l["message"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(joined, "Hello from upstream");
        assert!(deltas.iter().all(|l| l["done"] == false));
        assert_final_line(last, "stop");
        assert_eq!(last["message"]["content"], "");
        assert_eq!(last["prompt_eval_count"], 11);
        assert_eq!(last["eval_count"], 3);
    }
}

#[tokio::test]
async fn chat_non_stream_is_one_object() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        let body = json!({"model": "brunix:latest", "stream": false, "options": {"num_predict": 9, "top_k": 20, "stop": "END"},
            "keep_alive": "5m", "messages": [{"role": "user", "content": "hi", "images": []}]});
        let (status, headers, text) = post(&gw.url("/api/chat"), body).await;
        assert_eq!(status, 200, "{text}");
        assert!(headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["message"],
            json!({"role": "assistant", "content": "Hello from upstream"})
        );
        assert_eq!(v["model"], "brunix:latest");
        assert_final_line(&v, "stop");
        let sent = up.last_request().body;
        match provider {
            Provider::Ollama => {
                assert_eq!(sent["options"]["num_predict"], 9);
                assert_eq!(
                    sent["options"]["top_k"], 20,
                    "unknown options pass through to Ollama"
                );
                assert_eq!(sent["options"]["stop"], json!(["END"]));
                assert!(
                    sent.get("keep_alive").is_none(),
                    "a client's keep_alive is not the assistant's (llm.keep_alive is)"
                );
            }
            Provider::Openai => {
                assert_eq!(sent["max_tokens"], 9);
                assert_eq!(sent["stop"], json!(["END"]));
                assert!(sent.get("top_k").is_none());
            }
        }
    }
}

#[tokio::test]
async fn generate_streams_response_on_every_line() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |_| {}).await;
        let body = json!({"model": "brunix", "prompt": "### User:\nhello\n\n", "images": [], "options": {}});
        let (status, headers, text) = post(&gw.url("/api/generate"), body).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(headers["content-type"], "application/x-ndjson");
        let lines = ndjson_lines(&text);
        assert!(
            lines.iter().all(|l| l["response"].is_string()),
            "response on every line"
        );
        let joined: String = lines
            .iter()
            .map(|l| l["response"].as_str().unwrap())
            .collect();
        assert_eq!(joined, "Hello from upstream");
        assert_final_line(lines.last().unwrap(), "stop");

        let body = json!({"model": "brunix", "prompt": "hello", "stream": false});
        let (_, _, text) = post(&gw.url("/api/generate"), body).await;
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["response"], "Hello from upstream");
        assert_final_line(&v, "stop");
    }
}

#[tokio::test]
async fn empty_prompt_or_no_messages_is_a_load_request() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    for (path, body) in [
        ("/api/generate", json!({"model": "brunix"})),
        ("/api/chat", json!({"model": "brunix", "messages": []})),
    ] {
        let (status, _, text) = post(&gw.url(path), body).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["done"].as_bool(), v["done_reason"].as_str()),
            (Some(true), Some("load")),
            "{path}"
        );
    }
    assert!(
        up.requests().is_empty(),
        "nothing is generated for a load request"
    );
    let (status, _, text) = post(&gw.url("/api/generate"), json!({"model": "ghost"})).await;
    assert_eq!(status, 404, "{text}");
}

#[tokio::test]
async fn tags_show_version_and_ps() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        let (status, v) = get_json(&gw.url("/api/tags")).await;
        assert_eq!(status, 200);
        let models = v["models"].as_array().unwrap();
        assert_eq!(models[0]["model"], "brunix:latest");
        assert_eq!(models[0]["name"], "brunix:latest");
        assert_eq!(models[1]["model"], UPSTREAM_MODEL);
        for m in models {
            assert!(
                m["size"].is_u64() && m["digest"].is_string() && m["modified_at"].is_string(),
                "{m}"
            );
            for k in [
                "parent_model",
                "format",
                "family",
                "families",
                "parameter_size",
                "quantization_level",
            ] {
                assert!(m["details"].get(k).is_some(), "details.{k} missing in {m}");
            }
        }

        for req in [json!({"model": "brunix"}), json!({"name": "brunix:latest"})] {
            let (status, _, text) = post(&gw.url("/api/show"), req).await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(
                v.get("model_info").is_some(),
                "model_info is required by ollama-python"
            );
            assert!(v["parameters"].as_str().unwrap().contains("num_ctx 8192"));
            assert!(v["capabilities"]
                .as_array()
                .unwrap()
                .contains(&json!("completion")));
        }
        let (status, _, text) = post(&gw.url("/api/show"), json!({"name": UPSTREAM_MODEL})).await;
        assert_eq!(status, 200, "{text}");
        let (status, _, text) = post(&gw.url("/api/show"), json!({"model": "ghost"})).await;
        assert_eq!(status, 404);
        assert!(serde_json::from_str::<Value>(&text).unwrap()["error"]
            .as_str()
            .unwrap()
            .contains("ghost"));
    }
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, v) = get_json(&gw.url("/api/version")).await;
    assert_eq!(status, 200);
    assert!(v["version"].as_str().unwrap().starts_with("0."));
    let (status, v) = get_json(&gw.url("/api/ps")).await;
    assert_eq!(status, 200);
    let m = &v["models"][0];
    assert_eq!(m["model"], "brunix:latest");
    assert!(chrono::DateTime::parse_from_rfc3339(m["expires_at"].as_str().unwrap()).is_ok());
    assert!(m["size_vram"].is_u64());
    let (_, v) = get_json(&gw.url("/api/tags")).await;
    assert_eq!(
        v["models"].as_array().unwrap().len(),
        1,
        "without passthrough only the assistant"
    );
}

#[tokio::test]
async fn tool_calls_come_back_with_object_arguments() {
    for provider in PROVIDERS {
        for stream in [true, false] {
            let up = ScriptedUpstream::start().await;
            up.push(Reply::ToolCall {
                name: "read_file".into(),
                arguments: json!({"path": "src/main.rs"}),
            });
            let gw = Gateway::start(&up, provider, |_| {}).await;
            let tools = json!([{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]);
            let body = json!({"model": "brunix", "stream": stream, "tools": tools,
                "messages": [{"role": "user", "content": "open main"}]});
            let (status, _, text) = post(&gw.url("/api/chat"), body).await;
            assert_eq!(status, 200, "{text}");
            assert_eq!(up.last_request().body["tools"], tools);
            let lines = if stream {
                ndjson_lines(&text)
            } else {
                vec![serde_json::from_str(&text).unwrap()]
            };
            let call = lines
                .iter()
                .find_map(|l| l["message"]["tool_calls"].get(0))
                .expect("a tool call");
            assert_eq!(call["function"]["name"], "read_file");
            assert_eq!(
                call["function"]["arguments"],
                json!({"path": "src/main.rs"}),
                "arguments are an object"
            );
            let last = lines.last().unwrap();
            assert_eq!(last["done"], true);
            assert_eq!(last["done_reason"], "stop");
        }
    }
}

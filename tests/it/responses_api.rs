//! The OpenAI Responses dialect (`/v1/responses`, Codex CLI's API) as its clients see it:
//! the documented event order with a `sequence_number` on every event, function calls
//! as items, whole responses, `response.failed` mid-stream, sources as `url_citation`
//! annotations, and errors in OpenAI's shape.

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

/// Every event numbered 0, 1, 2, … in order.
fn assert_numbered(events: &[(String, Value)]) {
    for (i, (name, e)) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{name}: {e}");
    }
}

fn weather_tools() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}, "strict": false},
        {"type": "web_search"}])
}

#[tokio::test]
async fn a_streamed_response_has_the_documented_event_order() {
    for provider in [Provider::Openai, Provider::Ollama] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        for model in [UPSTREAM_MODEL, "brunix"] {
            up.push(Reply::tokens(&["Hel", "lo"]));
            // As Codex sends it: stateless, its own keys beside the documented ones.
            let (status, headers, text) = post(
                &gw.url("/v1/responses"),
                json!({"model": model, "instructions": "Be brief.", "stream": true,
                    "input": [{"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "Say hello"}]}],
                    "tools": [], "tool_choice": "auto", "parallel_tool_calls": false,
                    "reasoning": null, "store": false, "include": [],
                    "prompt_cache_key": "t-1", "client_metadata": {"x": "y"}}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            assert_eq!(headers["content-type"], "text/event-stream");
            let events = named_events(&text);
            assert_eq!(
                names(&events),
                [
                    "response.created",
                    "response.in_progress",
                    "response.output_item.added",
                    "response.content_part.added",
                    "response.output_text.delta",
                    "response.output_text.delta",
                    "response.output_text.done",
                    "response.content_part.done",
                    "response.output_item.done",
                    "response.completed"
                ],
                "{provider:?} {model}: {text}"
            );
            assert_numbered(&events);
            let created = &events[0].1["response"];
            assert_eq!(created["status"], "in_progress");
            assert_eq!(created["output"], json!([]));
            assert_eq!(created["model"], model);
            let id = created["id"].as_str().unwrap();
            assert!(id.starts_with("resp_"));
            let item = &events[2].1["item"];
            assert_eq!(item["type"], "message");
            assert_eq!(item["content"], json!([]));
            let item_id = item["id"].as_str().unwrap();
            for (_, e) in &events[3..8] {
                assert_eq!(e["item_id"], item_id, "{e}");
                assert_eq!(e["output_index"], 0);
            }
            assert_eq!(events[4].1["delta"], "Hel");
            assert_eq!(events[4].1["logprobs"], json!([]));
            assert_eq!(events[6].1["text"], "Hello");
            let done = &events[8].1["item"];
            assert_eq!(done["status"], "completed");
            assert_eq!(done["content"][0]["text"], "Hello");
            let completed = &events[9].1["response"];
            assert_eq!(completed["id"], id);
            assert_eq!(completed["status"], "completed");
            assert_eq!(completed["output"], json!([done]));
            assert_eq!(completed["usage"]["output_tokens"], 2);
            assert_eq!(
                completed["usage"]["total_tokens"],
                completed["usage"]["input_tokens"].as_u64().unwrap() + 2
            );
            let prompt = prompt_text(&up.last_request());
            assert!(prompt.contains("Say hello"), "{prompt}");
            if model == UPSTREAM_MODEL {
                assert!(prompt.contains("Be brief."), "{prompt}");
            }
        }
    }
}

#[tokio::test]
async fn function_calls_are_items_and_their_outputs_go_back_upstream() {
    for provider in [Provider::Openai, Provider::Ollama] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
        for model in [UPSTREAM_MODEL, "brunix"] {
            up.push(Reply::ToolCall {
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            });
            let (status, _, text) = post(
                &gw.url("/v1/responses"),
                json!({"model": model, "stream": true, "input": "Weather in Paris?",
                    "tools": weather_tools(),
                    "tool_choice": {"type": "function", "name": "get_weather"}}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            let events = named_events(&text);
            assert_eq!(
                names(&events),
                [
                    "response.created",
                    "response.in_progress",
                    "response.output_item.added",
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.done",
                    "response.output_item.done",
                    "response.completed"
                ],
                "{provider:?} {model}: {text}"
            );
            assert_numbered(&events);
            let added = &events[2].1["item"];
            assert_eq!(added["type"], "function_call");
            assert_eq!(added["arguments"], "");
            let done = &events[5].1["item"];
            let call_id = done["call_id"].as_str().unwrap().to_string();
            assert_eq!(done["name"], "get_weather");
            let arguments: Value =
                serde_json::from_str(done["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(arguments, json!({"city": "Paris"}));
            assert_eq!(events[4].1["arguments"], done["arguments"]);
            assert_eq!(events[6].1["response"]["output"], json!([done]));
            let sent = up.last_request().body;
            let tools = sent["tools"].as_array().unwrap();
            assert_eq!(tools.len(), 1, "hosted tools dropped: {sent}");
            assert_eq!(tools[0]["function"]["name"], "get_weather");

            // Whole: the call as an output item.
            up.push(Reply::ToolCall {
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            });
            let (status, _, text) = post(
                &gw.url("/v1/responses"),
                json!({"model": model, "input": "Weather in Paris?", "tools": weather_tools()}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["object"], "response");
            assert_eq!(v["status"], "completed");
            assert_eq!(v["output"][0]["type"], "function_call", "{v}");

            // The output goes back as Codex sends it: the whole history, stateless.
            up.push(Reply::tokens(&["18°C", " and sunny."]));
            let (status, _, text) = post(
                &gw.url("/v1/responses"),
                json!({"model": model, "tools": weather_tools(), "input": [
                    {"role": "user", "content": "Weather in Paris?"},
                    {"type": "reasoning", "summary": [], "encrypted_content": null},
                    {"type": "function_call", "call_id": call_id, "name": "get_weather",
                     "arguments": "{\"city\":\"Paris\"}"},
                    {"type": "function_call_output", "call_id": call_id, "output": "18°C, sunny"}]}),
            )
            .await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["output"][0]["content"][0]["text"], "18°C and sunny.");
            let sent = up.last_request().body;
            let msgs = sent["messages"].as_array().unwrap();
            let (asst, tool) = (&msgs[msgs.len() - 2], &msgs[msgs.len() - 1]);
            assert_eq!(asst["tool_calls"][0]["function"]["name"], "get_weather");
            assert_eq!(tool["content"], "18°C, sunny");
            match provider {
                Provider::Openai => {
                    assert_eq!(asst["content"], json!(""), "a string, never null: {asst}");
                    assert_eq!(tool["tool_call_id"], json!(call_id));
                }
                Provider::Ollama => assert_eq!(tool["tool_name"], "get_weather"),
            }
        }
    }
}

#[tokio::test]
async fn failures_are_response_failed_mid_stream_and_openai_errors_before() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.assistant.passthrough = true;
        s.llm.retries = 0;
    })
    .await;
    up.push(Reply::ErrorAfter(
        vec!["partial".into()],
        "CUDA out of memory".into(),
    ));
    let (status, _, text) = post(
        &gw.url("/v1/responses"),
        json!({"model": UPSTREAM_MODEL, "stream": true, "input": "hello"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = named_events(&text);
    assert_numbered(&events);
    let (last, failed) = events.last().unwrap();
    assert_eq!(last, "response.failed", "{text}");
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(failed["response"]["error"]["code"], "server_error");
    assert!(failed["response"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("CUDA out of memory"));
    assert!(!names(&events).contains(&"response.completed"));

    // Before the stream: HTTP errors in OpenAI's shape.
    let cases = [
        (
            json!({"model": "nope", "input": "x"}),
            404,
            "model_not_found",
        ),
        (json!({"model": UPSTREAM_MODEL}), 400, "input"),
        (
            json!({"model": UPSTREAM_MODEL, "input": "x", "previous_response_id": "resp_1"}),
            400,
            "previous_response_id",
        ),
        (
            json!({"model": UPSTREAM_MODEL, "input": [{"role": "wizard", "content": "x"}]}),
            400,
            "input[0].role",
        ),
    ];
    for (body, expected, needle) in cases {
        let (status, _, text) = post(&gw.url("/v1/responses"), body.clone()).await;
        assert_eq!(status, expected, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let e = &v["error"];
        assert!(e["code"] == needle || e["param"] == needle, "{body}: {e}");
    }
    up.push(Reply::Status {
        status: 503,
        body: "Service Unavailable".into(),
    });
    let (status, _, text) = post(
        &gw.url("/v1/responses"),
        json!({"model": UPSTREAM_MODEL, "input": "x", "stream": true}),
    )
    .await;
    assert_eq!(status, 502, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["type"], "upstream_error");
}

#[tokio::test]
async fn sources_are_url_citation_annotations() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let question = "Which environment variable overrides the server port?";
    for stream in [true, false] {
        up.push(Reply::tokens(&["Set ", "BRISA_PORT."]));
        let (status, _, text) = post(
            &gw.url("/v1/responses"),
            json!({"model": "brunix", "input": question, "stream": stream}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let response = if stream {
            let events = named_events(&text);
            assert_numbered(&events);
            let added: Vec<&Value> = events
                .iter()
                .filter(|(n, _)| n == "response.output_text.annotation.added")
                .map(|(_, e)| &e["annotation"])
                .collect();
            assert!(!added.is_empty(), "{text}");
            events.last().unwrap().1["response"].clone()
        } else {
            serde_json::from_str(&text).unwrap()
        };
        let part = &response["output"][0]["content"][0];
        assert_eq!(part["text"], "Set BRISA_PORT.");
        let annotations = part["annotations"].as_array().unwrap();
        assert!(!annotations.is_empty(), "{response}");
        for a in annotations {
            assert_eq!(a["type"], "url_citation");
            assert!(a["url"].as_str().unwrap().contains("/v1/sources/"), "{a}");
            assert_eq!(a["start_index"], 0);
            assert_eq!(a["end_index"], "Set BRISA_PORT.".chars().count());
            assert!(a["title"].is_string());
        }
    }
}

/// A streamed answer longer than the gateway repeats in the closing events (an upstream
/// that never stops took the gateway from 45 MB to 1.09 GB in 30 s: the closing events
/// repeat the whole text, and it was all kept): every delta still reaches the client, the
/// text kept for `response.output_text.done` and the final output stops at 16 MiB, and the
/// response ends `incomplete`, so the client knows its output is not the whole answer.
#[tokio::test]
async fn a_streamed_answer_past_16_mib_ends_incomplete_and_is_not_held_whole() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| s.assistant.passthrough = true).await;
    let piece = "y".repeat(64 * 1024);
    up.push(Reply::Tokens {
        tokens: vec![piece; 300],
        delay: std::time::Duration::ZERO,
        finish: "stop",
    });
    let (status, _, text) = post(
        &gw.url("/v1/responses"),
        json!({"model": UPSTREAM_MODEL, "stream": true, "input": "write forever"}),
    )
    .await;
    assert_eq!(status, 200);
    let events = named_events(&text);
    let streamed: usize = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, e)| e["delta"].as_str().unwrap().len())
        .sum();
    assert_eq!(streamed, 300 * 64 * 1024, "every delta reaches the client");
    let (last, end) = events.last().unwrap();
    assert_eq!(last, "response.incomplete");
    assert_eq!(
        end["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    let kept = end["response"]["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .len();
    assert!(kept <= 16 << 20 && kept > 15 << 20, "{kept} bytes kept");
    let done = events
        .iter()
        .find(|(n, _)| n == "response.output_text.done")
        .unwrap();
    assert_eq!(done.1["text"].as_str().unwrap().len(), kept);
}

/// Codex's model catalog (what it asks a provider's `model_catalog_url` for, with its
/// version): every served model with the window the gateway budgets for and short
/// instructions, in the shape Codex parses; OpenAI's list when no version is named.
#[tokio::test]
async fn codex_reads_each_models_window_from_the_catalog() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.assistant.passthrough = true;
        s.assistant.context_tokens = 12000;
    })
    .await;
    let (status, catalog) = get_json(&gw.url("/v1/models?client_version=0.169.0")).await;
    assert_eq!(status, 200, "{catalog}");
    let models = catalog["models"]
        .as_array()
        .expect("Codex's {\"models\": [...]}");
    assert_eq!(models[0]["slug"], "brunix");
    assert!(
        models.iter().any(|m| m["slug"] == UPSTREAM_MODEL),
        "{catalog}"
    );
    for m in models {
        // Every field Codex requires, and the window it compacts by.
        for field in [
            "display_name",
            "supported_reasoning_levels",
            "shell_type",
            "visibility",
            "supported_in_api",
            "priority",
            "base_instructions",
            "supports_reasoning_summaries",
            "support_verbosity",
            "truncation_policy",
            "supports_parallel_tool_calls",
            "experimental_supported_tools",
        ] {
            assert!(m.get(field).is_some(), "{field} missing: {m}");
        }
        assert_eq!(m["context_window"], 12000, "{m}");
        assert!(m["auto_compact_token_limit"].as_u64().unwrap() < 12000);
        assert!(m["base_instructions"].as_str().unwrap().len() < 1000);
    }
    let (status, list) = get_json(&gw.url("/v1/models")).await;
    assert_eq!(status, 200);
    assert_eq!(list["object"], "list", "{list}");
    assert!(list.get("models").is_none());
}

//! Stored responses in the Responses dialect: `store: true` keeps a response under the
//! caller's key, `previous_response_id` continues it (text and function-call loops, whole
//! and streamed, for the assistant and a passthrough model), nothing is kept without
//! `store`, another key cannot continue it, and two replicas sharing Redis continue each
//! other's responses.

use crate::support::*;
use assist_gateway::config::{Provider, SessionBackend, Settings};
use serde_json::{json, Value};

const ALICE: &str = "key-alice";
const BOB: &str = "key-bob";

/// POSTs a Responses body with a key; status and the body as JSON (a stream: its
/// `response.completed` event's response).
async fn respond(base: &str, key: &str, body: Value) -> (u16, Value) {
    let r = client()
        .post(format!("{base}/v1/responses"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    if body["stream"] == true && status == 200 {
        let events = named_events(&text);
        let (_, done) = events
            .iter()
            .find(|(n, _)| n == "response.completed")
            .unwrap_or_else(|| panic!("no response.completed: {text}"));
        return (status, done["response"].clone());
    }
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn keys(s: &mut Settings) {
    s.assistant.passthrough = true;
    s.server.api_keys = vec![ALICE.into(), BOB.into()];
}

/// The messages the upstream was sent last, as (role, content) pairs.
fn sent(up: &ScriptedUpstream) -> Vec<(String, String)> {
    up.last_request().body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_stored_response_is_continued_by_its_id() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, keys).await;
    let base = gw.url("");
    for model in [UPSTREAM_MODEL, "brunix"] {
        for stream in [false, true] {
            up.push(Reply::tokens(&["Nice to meet you, Ada."]));
            let (status, first) = respond(
                &base,
                ALICE,
                json!({"model": model, "store": true, "stream": stream,
                    "instructions": "Be brief.", "input": "My name is Ada Lovelace."}),
            )
            .await;
            assert_eq!(status, 200, "{first}");
            assert_eq!(first["store"], true, "{first}");
            let id = first["id"].as_str().unwrap().to_string();

            // The next turn sends only its own message: the stored one goes before it.
            up.push(Reply::tokens(&["Ada."]));
            let (status, second) = respond(
                &base,
                ALICE,
                json!({"model": model, "store": true, "stream": stream,
                    "previous_response_id": id, "input": "What is my name?"}),
            )
            .await;
            assert_eq!(status, 200, "{second}");
            assert_eq!(second["previous_response_id"], id.as_str());
            let messages = sent(&up);
            let text: Vec<&str> = messages.iter().map(|(_, c)| c.as_str()).collect();
            let all = text.join("\n");
            assert!(
                all.contains("My name is Ada Lovelace.")
                    && all.contains("Nice to meet you, Ada.")
                    && all.contains("What is my name?"),
                "{model}, stream {stream}: {messages:?}"
            );
            if model == UPSTREAM_MODEL {
                // Passthrough: exactly the conversation, in order; the first turn's
                // instructions are not carried on (as in the Responses API).
                assert_eq!(
                    messages,
                    [
                        ("user".into(), "My name is Ada Lovelace.".into()),
                        ("assistant".into(), "Nice to meet you, Ada.".into()),
                        ("user".into(), "What is my name?".into()),
                    ],
                    "stream {stream}"
                );
            }

            // A chain: the third turn sees both earlier ones.
            up.push(Reply::tokens(&["Yes."]));
            let second_id = second["id"].as_str().unwrap();
            let (status, _) = respond(
                &base,
                ALICE,
                json!({"model": model, "previous_response_id": second_id, "stream": stream,
                    "input": "Are you sure?"}),
            )
            .await;
            assert_eq!(status, 200);
            let all: Vec<String> = sent(&up).into_iter().map(|(_, c)| c).collect();
            let all = all.join("\n");
            for said in [
                "My name is Ada Lovelace.",
                "Nice to meet you, Ada.",
                "What is my name?",
                "Ada.",
                "Are you sure?",
            ] {
                assert!(all.contains(said), "{model}: {said:?} missing from {all}");
            }
        }
    }
}

#[tokio::test]
async fn nothing_is_kept_without_store_and_another_key_cannot_continue() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, keys).await;
    let base = gw.url("");
    // Stateless by default.
    let (status, plain) = respond(
        &base,
        ALICE,
        json!({"model": UPSTREAM_MODEL, "input": "hello"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(plain["store"], false);
    let (_, stored) = respond(
        &base,
        ALICE,
        json!({"model": UPSTREAM_MODEL, "input": "my secret plan", "store": true}),
    )
    .await;
    let cases = [
        (ALICE, plain["id"].as_str().unwrap().to_string()),
        (BOB, stored["id"].as_str().unwrap().to_string()),
        (ALICE, "resp_does_not_exist".to_string()),
        (ALICE, "not/an id".to_string()),
    ];
    let before = up.requests().len();
    for (key, id) in cases {
        let (status, error) = respond(
            &base,
            key,
            json!({"model": UPSTREAM_MODEL, "input": "go on", "previous_response_id": id}),
        )
        .await;
        assert_eq!(status, 400, "{id}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
        assert_eq!(error["error"]["param"], "previous_response_id", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("not found"), "{message}");
    }
    assert_eq!(up.requests().len(), before, "nothing reached the upstream");
}

#[tokio::test]
async fn a_function_call_loop_continues_by_id() {
    for provider in [Provider::Openai, Provider::Ollama] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, keys).await;
        let base = gw.url("");
        let tools = json!([{"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
        up.push(Reply::ToolCall {
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        });
        let (status, first) = respond(
            &base,
            ALICE,
            json!({"model": UPSTREAM_MODEL, "store": true, "tools": tools,
                "input": "Weather in Paris?"}),
        )
        .await;
        assert_eq!(status, 200, "{first}");
        let call = first["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["type"] == "function_call")
            .unwrap_or_else(|| panic!("no function call: {first}"))
            .clone();
        // As the OpenAI docs show it: only the function's output, and the id.
        up.push(Reply::tokens(&["Sunny in Paris."]));
        let (status, second) = respond(
            &base,
            ALICE,
            json!({"model": UPSTREAM_MODEL, "tools": tools,
                "previous_response_id": first["id"],
                "input": [{"type": "function_call_output", "call_id": call["call_id"],
                    "output": "{\"sky\": \"sunny\"}"}]}),
        )
        .await;
        assert_eq!(status, 200, "{provider:?}: {second}");
        let messages = up.last_request().body["messages"].clone();
        let messages = messages.as_array().unwrap();
        assert_eq!(messages.len(), 3, "{provider:?}: {messages:?}");
        assert_eq!(messages[0]["content"], "Weather in Paris?");
        let calls = &messages[1]["tool_calls"];
        assert_eq!(calls[0]["function"]["name"], "get_weather", "{messages:?}");
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[2]["content"], "{\"sky\": \"sunny\"}");
        match provider {
            Provider::Openai => {
                assert_eq!(calls[0]["id"], call["call_id"], "{messages:?}");
                assert_eq!(messages[2]["tool_call_id"], call["call_id"]);
            }
            Provider::Ollama => assert_eq!(messages[2]["tool_name"], "get_weather"),
        }
    }
}

/// Two gateway processes sharing one real Redis: a response stored through one is
/// continued through the other.
#[tokio::test]
async fn replicas_on_redis_continue_each_others_responses() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let tweak = |s: &mut Settings| {
        keys(s);
        s.sessions.backend = SessionBackend::Redis;
        s.sessions.redis_url = Some(redis.url());
    };
    let a = Spawned::start(&up, Provider::Openai, tweak).await;
    let b = Spawned::start(&up, Provider::Openai, tweak).await;
    up.push(Reply::tokens(&["Noted: blue."]));
    let (status, first) = respond(
        &a.url(""),
        ALICE,
        json!({"model": UPSTREAM_MODEL, "store": true, "stream": true,
            "input": "My favourite colour is blue."}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    up.push(Reply::tokens(&["Blue."]));
    let (status, second) = respond(
        &b.url(""),
        ALICE,
        json!({"model": UPSTREAM_MODEL, "previous_response_id": first["id"],
            "input": "Which colour?"}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        sent(&up),
        [
            ("user".into(), "My favourite colour is blue.".into()),
            ("assistant".into(), "Noted: blue.".into()),
            ("user".into(), "Which colour?".into()),
        ]
    );
    let (status, _) = respond(
        &b.url(""),
        BOB,
        json!({"model": UPSTREAM_MODEL, "previous_response_id": first["id"], "input": "x"}),
    )
    .await;
    assert_eq!(
        status, 400,
        "another key's response is not found on Redis either"
    );
}

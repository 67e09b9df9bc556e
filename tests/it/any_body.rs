//! Property: whatever JSON a client posts to a chat or embedding endpoint, the gateway
//! answers 2xx, or 4xx in the dialect's error shape; never a 5xx it caused, never a hang.

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider};
use proptest::prelude::*;
use serde_json::{Map, Value};

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "role",
    "content",
    "stream",
    "user",
    "session_id",
    "max_tokens",
    "prompt",
    "input",
    "options",
    "tools",
    "tool_calls",
    "images",
    "stop",
    "n",
    "system",
    "stream_options",
    "include_usage",
    "additional_context",
    "encoding_format",
    "type",
    "text",
    "temperature",
    "format",
    "keep_alive",
    "suffix",
    "raw",
    "template",
    "num_predict",
];

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        prop_oneof![
            Just("brunix".to_string()),
            Just("user".to_string()),
            Just("assistant".to_string()),
            Just("system".to_string()),
            Just("tool".to_string()),
            "\\PC{0,12}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..6).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

fn body() -> impl Strategy<Value = Value> {
    // Mostly objects with a known model, so that requests get past the first checks.
    (json(), prop::bool::weighted(0.8)).prop_map(|(v, with_model)| match v {
        Value::Object(mut o) => {
            if with_model {
                o.insert("model".into(), Value::from("brunix"));
            }
            Value::Object(o)
        }
        other => other,
    })
}

#[test]
fn any_json_body_gets_2xx_or_a_4xx_in_the_dialects_shape() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (up, gw) = rt.block_on(async {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, Provider::Ollama, |s| {
            s.embeddings.provider = EmbeddingProvider::Ollama;
            s.embeddings.model = "brunix".into();
        })
        .await;
        (up, gw)
    });
    const PATHS: [&str; 8] = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/api/chat",
        "/api/generate",
        "/api/show",
        "/api/embed",
        "/api/embeddings",
    ];
    let config = ProptestConfig {
        // ANY_BODY_CASES=100000 for a long local run; 5000 passed when this was written.
        cases: std::env::var("ANY_BODY_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(body in body(), path in prop::sample::select(&PATHS[..]))| {
        let (status, _, text) = rt.block_on(post(&gw.url(path), body.clone()));
        prop_assert!(status < 500, "{path} {body} → {status} {text}");
        if status >= 400 {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            if path.starts_with("/v1") {
                prop_assert!(v["error"]["message"].is_string(), "{path} {body} → {text}");
            } else {
                prop_assert!(v["error"].is_string(), "{path} {body} → {text}");
            }
        }
    });
    drop(up);
}

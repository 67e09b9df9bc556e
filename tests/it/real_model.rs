//! End to end with a real model: llama.cpp's OpenAI-compatible server
//! (`llama-cpp-python[server]`) running SmolLM2-135M-Instruct, and `examples/knowledge`
//! ingested with the real all-MiniLM embedder in process. Asserts structure and sources,
//! never the small model's wording.
//!
//! `scripts/test.sh` installs both (scripts/model-env.sh) and sets ASSIST_MODEL_PYTHON,
//! ASSIST_MODEL_GGUF and ASSIST_TEST_MINILM; without them this test says it was skipped,
//! and in CI it must run.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider};
use serde_json::{json, Value};

pub(crate) const MODEL: &str = "smollm2";

pub(crate) struct ModelServer {
    child: Child,
    pub(crate) port: u16,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn start_model_server(python: &str, gguf: &str) -> ModelServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python)
        .args([
            "-m",
            "llama_cpp.server",
            "--model",
            gguf,
            "--host",
            "127.0.0.1",
        ])
        .args([
            "--port",
            &port.to_string(),
            "--n_threads",
            "1",
            "--n_ctx",
            "2048",
        ])
        .args(["--model_alias", MODEL])
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llama_cpp.server");
    let server = ModelServer { child, port };
    let url = format!("http://127.0.0.1:{port}/v1/models");
    for _ in 0..240 {
        if let Ok(r) = client().get(&url).send().await {
            if r.status().is_success() {
                return server;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the model server did not start within 60 s");
}

/// A pass-through HTTP proxy in front of the model server that keeps every JSON request
/// body, so the test can see exactly what the model was sent.
pub(crate) type Seen = Arc<Mutex<Vec<Value>>>;
type ProxyState = (String, Seen, reqwest::Client);

pub(crate) async fn recording_proxy(target: String) -> (String, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = (target, seen.clone(), reqwest::Client::new());
    let app = axum::Router::new()
        .fallback(
            |axum::extract::State((target, seen, http)): axum::extract::State<ProxyState>,
             request: axum::extract::Request| async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
                if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                    seen.lock().unwrap().push(v);
                }
                let url = format!("{target}{}", parts.uri.path());
                let mut forward = http.request(parts.method, url).body(bytes);
                if let Some(ct) = parts.headers.get("content-type") {
                    forward = forward.header("content-type", ct);
                }
                let answer = forward.send().await.unwrap();
                let mut response = axum::response::Response::builder().status(answer.status());
                if let Some(ct) = answer.headers().get("content-type") {
                    response = response.header("content-type", ct);
                }
                response
                    .body(axum::body::Body::from_stream(answer.bytes_stream()))
                    .unwrap()
            },
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn stream_text(body: &str) -> (String, Value) {
    let events = sse_events(body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let text = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    (text, chunks.last().cloned().unwrap())
}

#[tokio::test]
async fn a_real_model_answers_through_the_pipeline() {
    let (Ok(python), Ok(gguf), Ok(minilm)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
        std::env::var("ASSIST_TEST_MINILM"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let model = start_model_server(&python, &gguf).await;
    let (proxy, seen) = recording_proxy(format!("http://127.0.0.1:{}", model.port)).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("{proxy}/v1");
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = std::time::Duration::from_secs(60);
        s.assistant.passthrough = true;
        s.assistant.context_tokens = 2048;
        s.embeddings.provider = EmbeddingProvider::Local;
        s.embeddings.path = Some(minilm.clone().into());
    })
    .await;
    let url = gw.url("/v1/chat/completions");

    // 1. A question about the knowledge base, streamed, with the expected source.
    let (status, _, body) = post(
        &url,
        json!({"model": "brunix", "stream": true, "max_tokens": 48, "temperature": 0,
            "messages": [{"role": "user", "content": "Which environment variable overrides the server port?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (text, last) = stream_text(&body);
    assert!(!text.trim().is_empty(), "the model streamed text");
    let files: Vec<&str> = last["sources"]
        .as_array()
        .expect("sources on the last chunk")
        .iter()
        .map(|s| s["file"].as_str().unwrap())
        .collect();
    assert!(files.contains(&"docs/en/deployment.md"), "{files:?}");

    // 2. The editor-context scenario reaches the model: the selection is in the prompt the
    //    model server received, and the model answers.
    let selection =
        "let port = env(\"BRISA_PORT\") ?? 8080\nserve(app, port: port, host: \"0.0.0.0\")";
    let user =
        json!({"selected_text": base64_of(selection), "user_info": {"dev_id": 1}}).to_string();
    let (status, _, body) = post(
        &url,
        json!({"model": "brunix", "max_tokens": 16, "temperature": 0, "session_id": "e2e", "user": user,
            "messages": [{"role": "user", "content": "what does this code do?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(!v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 50);
    let sent = seen.lock().unwrap().last().cloned().unwrap();
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains(&format!("<selected_code>\n{selection}")),
        "{system}"
    );
    assert_eq!(sent["model"], MODEL);

    // 3. Passthrough to the model's own id: its answer, no sources.
    let (status, _, body) = post(
        &url,
        json!({"model": MODEL, "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"], MODEL);
    assert!(!v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());
    assert!(v.get("sources").is_none());
    assert!(
        up.requests().is_empty(),
        "everything went to the real model"
    );
    assert!(seen.lock().unwrap().len() >= 3);
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

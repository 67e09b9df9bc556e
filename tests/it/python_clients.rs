//! The real `openai` and `ollama` Python packages against the gateway (tests/clients/).
//!
//! `scripts/test.sh` creates the pinned virtualenv and sets ASSIST_PYTHON. Run through
//! plain `cargo test` without it, this test says it was skipped; in CI it must run.

use crate::support::*;
use assist_gateway::config::Provider;

#[tokio::test]
async fn openai_and_ollama_python_clients() {
    let Some(python) = python_for("the Python client tests") else {
        return;
    };
    for provider in [Provider::Ollama, Provider::Openai] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| {
            s.assistant.passthrough = true;
            // Embeddings served from the scripted upstream (letter-count vectors).
            s.embeddings.provider = assist_gateway::config::EmbeddingProvider::Ollama;
            s.embeddings.base_url = Some(up.root());
            s.embeddings.model = "nomic-embed-text".into();
        })
        .await;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/smoke.py");
        let out = tokio::process::Command::new(&python)
            .arg(script)
            .arg(gw.url(""))
            .arg(UPSTREAM_MODEL)
            .output()
            .await
            .expect("run the Python client script");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("{provider:?} upstream:\n{stdout}");
        assert!(
            out.status.success(),
            "{provider:?}: python clients failed:\n{stdout}\n{stderr}"
        );
        assert!(stdout.contains("0 failed"), "{stdout}");
    }
}

/// The "done when" of the assistant: the OpenAI Python client and curl, with the `user`
/// field as the reference VS Code extension sends it, get answers about the selected code
/// and the knowledge base, and the third turn carries the first two.
#[tokio::test]
async fn openai_python_client_and_curl_with_editor_context_and_memory() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    if let Ok(python) = std::env::var("ASSIST_PYTHON") {
        up.push(Reply::tokens(&["It only catches ", "NotFound."]));
        up.push(Reply::tokens(&["Set ", "BRISA_PORT."]));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/assistant.py");
        let out = tokio::process::Command::new(&python)
            .arg(script)
            .arg(gw.url(""))
            .output()
            .await
            .expect("run the Python assistant script");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let requests = up.requests();
        assert!(prompt_text(&requests[requests.len() - 3]).contains("catch (e: NotFound)"));
        let third = &requests[requests.len() - 1].body["messages"];
        let contents: Vec<&str> = third.as_array().unwrap()[1..]
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(
            contents,
            [
                "why is this not catching my error?",
                "It only catches NotFound.",
                "Which environment variable overrides the server port?",
                "Set BRISA_PORT.",
                "and what did you tell me before that?"
            ]
        );
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the Python client tests"
        );
        eprintln!("SKIPPED the Python part: ASSIST_PYTHON is not set");
    }

    // curl, with the same user field.
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user = serde_json::json!({"selected_text": b64("let port = env(\"BRISA_PORT\")"),
        "user_info": {"dev_id": 1}})
    .to_string();
    let body = serde_json::json!({"model": "brunix", "stream": true, "session_id": "curl-1",
        "user": user, "messages": [{"role": "user", "content": "¿qué hace este código?"}]});
    up.push(Reply::tokens(&["Lee ", "el puerto."]));
    let url = gw.url("/v1/chat/completions");
    let out = tokio::process::Command::new("curl")
        .args(["-sSN", &url, "-H", "Content-Type: application/json", "-d"])
        .arg(body.to_string())
        .output()
        .await
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"content\":\"Lee \"") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    assert!(text.contains("\"sources\":["));
    let sent = prompt_text(&up.last_request());
    assert!(sent.contains("<selected_code>\nlet port = env(\"BRISA_PORT\")"));
}

//! What a new user runs on day one, against the quick start's real stack: llama.cpp's
//! server (llama-cpp-python) with a 2,048-token window behind the gateway, examples/knowledge
//! ingested. The OpenAI and Ollama Python SDKs, LiteLLM's three routes and curl
//! (tests/clients/real_stack.py), then the continue CLI with both providers. Asserts what
//! each client hands its user, never the small model's wording.
//!
//! Needs what scripts/test.sh installs (ASSIST_PYTHON, ASSIST_MODEL_PYTHON,
//! ASSIST_MODEL_GGUF, ASSIST_CN); in CI it must run.

use std::time::Duration;

use crate::continue_cli::run_cn;
use crate::real_model::{start_model_server, MODEL};
use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider};

#[tokio::test]
async fn every_client_works_against_the_real_stack() {
    let (Ok(python), Ok(model_python), Ok(gguf), Ok(cn)) = (
        std::env::var("ASSIST_PYTHON"),
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
        std::env::var("ASSIST_CN"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-stack client tests: use scripts/test.sh"
        );
        eprintln!(
            "SKIPPED: the clients or the model server are not installed; run scripts/test.sh"
        );
        return;
    };
    let model = start_model_server(&model_python, &gguf).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{}/v1", model.port);
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = Duration::from_secs(120);
        s.assistant.passthrough = true;
        s.assistant.context_tokens = 2048;
        s.assistant.answer_reserve_tokens = 256;
        s.embeddings.provider = EmbeddingProvider::None;
    })
    .await;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/real_stack.py");
    let out = tokio::process::Command::new(&python)
        .arg(script)
        .arg(gw.url(""))
        .arg(MODEL)
        .output()
        .await
        .expect("run the client script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains(", 0 failed"),
        "clients failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for (provider, api_base) in [("openai", gw.url("/v1")), ("ollama", gw.url(""))] {
        let config = format!(
            "name: assist-gateway\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: brunix\n    provider: {provider}\n    model: brunix\n    apiBase: {api_base}\n    apiKey: sk-anything\n    roles: [chat]\n    defaultCompletionOptions:\n      maxTokens: 24\n"
        );
        let (ok, stdout, stderr) = run_cn(
            &cn,
            &config,
            "Which environment variable overrides the server port?",
        )
        .await;
        assert!(
            ok,
            "{provider}: cn failed\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert!(
            !stdout.trim().is_empty(),
            "{provider}: the answer reaches cn's user\nstderr: {stderr}"
        );
    }
}

//! The coding agents' APIs through their real SDKs (tests/clients/agent_sdks.py): the
//! `anthropic` package against `/v1/messages` and the `openai` package's Responses API,
//! for the assistant and for a passthrough model, every streamed event validated against
//! the SDKs' typed models.
//!
//! `scripts/test.sh` creates the pinned virtualenv and sets ASSIST_PYTHON. Run through
//! plain `cargo test` without it, this test says it was skipped; in CI it must run.

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::json;

#[tokio::test]
async fn anthropic_and_openai_responses_sdks() {
    let Some(python) = python_for("the agent SDK tests") else {
        return;
    };
    for provider in [Provider::Openai, Provider::Ollama] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| {
            s.assistant.passthrough = true;
            s.server.api_keys = vec!["sk-a".into()];
        })
        .await;
        let base = gw.url("");
        for model in ["brunix", UPSTREAM_MODEL] {
            run_client_script(
                &python,
                "agent_sdks.py",
                &[&base, model, "plain"],
                "0 failed",
            )
            .await;
            // Each SDK's tool round trip: the upstream asks for the tool, then answers.
            for _ in 0..2 {
                up.push(Reply::ToolCall {
                    name: "get_weather".into(),
                    arguments: json!({"city": "Paris"}),
                });
                up.push(Reply::tokens(&["Hello", " from", " upstream"]));
            }
            run_client_script(
                &python,
                "agent_sdks.py",
                &[&base, model, "tools"],
                "0 failed",
            )
            .await;
        }
    }
    // Answers from the knowledge base cite their sources as each SDK types them.
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.server.api_keys = vec!["sk-a".into()];
    })
    .await;
    run_client_script(
        &python,
        "agent_sdks.py",
        &[&gw.url(""), "brunix", "sources"],
        "0 failed",
    )
    .await;
}

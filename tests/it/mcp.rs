//! The MCP server at `/mcp` through the official MCP Python SDK (tests/clients/mcp_client.py):
//! tools listed and called, errors for bad arguments and a missing key; and the same
//! keys, limits and host check as every route.

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::json;

#[tokio::test]
async fn the_mcp_python_sdk_lists_and_calls_every_tool() {
    let Some(python) = python_for("the MCP client test") else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-mcp".into()];
    })
    .await;
    up.push(Reply::tokens(&["Set ", "BRISA_PORT."]));
    let base = gw.url("");
    run_client_script(
        &python,
        "mcp_client.py",
        &[&base, "sk-mcp"],
        "all mcp checks passed",
    )
    .await;
    // `ask` ran the assistant: the upstream got the question with the knowledge.
    let prompt = prompt_text(&up.last_request());
    assert!(prompt.contains("Which environment variable overrides the server port?"));
    assert!(prompt.contains("docs/en/deployment.md"), "{prompt}");
}

/// `/mcp` is behind the host check and the rate limit like every route.
#[tokio::test]
async fn mcp_is_behind_the_host_check_and_the_limits() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.rate_limit_per_minute = 2;
    })
    .await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let send = |host: Option<&'static str>| {
        let mut rb = client()
            .post(gw.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&list);
        if let Some(h) = host {
            rb = rb.header("host", h);
        }
        rb.send()
    };
    let r = send(Some("evil.example.com")).await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(send(None).await.unwrap().status().as_u16());
    }
    assert_eq!(statuses[2], 429, "{statuses:?}");
    assert!(statuses[..2].iter().all(|s| *s != 429), "{statuses:?}");
}

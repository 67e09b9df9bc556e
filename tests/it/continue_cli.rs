//! The continue CLI (`cn`, npm package `@continuedev/cli`) against the gateway, headless:
//! `cn -p --config FILE "prompt"`, once with `provider: openai` and once with
//! `provider: ollama`. `scripts/test.sh` installs it (scripts/node-env.sh) and sets
//! ASSIST_CN; without it this test says it was skipped, and in CI it must run.

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::Provider;

pub(crate) async fn run_cn(cn: &str, config: &str, prompt: &str) -> (bool, String, String) {
    let home = tempfile::tempdir().unwrap();
    let config_path = home.path().join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let child = tokio::process::Command::new(cn)
        .arg("-p")
        .arg("--config")
        .arg(&config_path)
        .arg(prompt)
        .env("HOME", home.path())
        .env("CONTINUE_GLOBAL_DIR", home.path().join(".continue"))
        .env("CONTINUE_METRICS_ENABLED", "false")
        .env("NO_COLOR", "1")
        .current_dir(home.path())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), child)
        .await
        .expect("cn finished within 90 s")
        .expect("cn runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn continue_cli_with_openai_and_ollama_providers() {
    let Some(cn) = installed("ASSIST_CN", "the continue CLI test") else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    for (provider, api_base) in [("openai", gw.url("/v1")), ("ollama", gw.url(""))] {
        up.push(Reply::tokens(&[
            "Set ",
            "BRISA_PORT ",
            "to change the port.",
        ]));
        let before = up.requests().len();
        let config = format!(
            "name: assist-gateway\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: brunix\n    provider: {provider}\n    model: brunix\n    apiBase: {api_base}\n    apiKey: sk-anything\n    roles: [chat]\n"
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
            stdout.contains("Set BRISA_PORT to change the port."),
            "{provider}: the answer reaches cn's user\nstdout: {stdout}\nstderr: {stderr}"
        );
        let requests = up.requests();
        let chat: Vec<_> = requests[before..]
            .iter()
            .filter(|r| r.path == "/api/chat")
            .collect();
        assert_eq!(chat.len(), 1, "{provider}: one assistant turn upstream");
        // cn offers its own tools, so the turn's knowledge goes with the question (the
        // system message stays the same from turn to turn); anywhere in the prompt.
        let prompt = prompt_text(chat[0]);
        assert!(
            prompt.contains("docs/en/deployment.md"),
            "{provider}: retrieval ran"
        );
    }
}

/// The README's `mcpServers` entry, as written, in the continue CLI: cn connects to `/mcp`
/// with the key, lists the knowledge tools and offers them to the model.
#[tokio::test]
async fn continue_cli_loads_the_knowledge_tools_from_the_mcp_server() {
    let Some(cn) = installed("ASSIST_CN", "the continue CLI test") else {
        return;
    };
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let entry = readme
        .split("```yaml\nmcpServers:\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README's MCP section has a continue mcpServers block");
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["key-a".into()];
    })
    .await;
    // The README's block, pointed at this gateway.
    let entry = entry.replace("http://127.0.0.1:8080", &gw.url(""));
    let config = format!(
        "name: assist-gateway\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: brunix\n    provider: openai\n    model: brunix\n    apiBase: {}\n    apiKey: key-a\n    roles: [chat]\nmcpServers:\n{entry}",
        gw.url("/v1")
    );
    up.push(Reply::tokens(&["Set ", "BRISA_PORT."]));
    let (ok, stdout, stderr) = run_cn(
        &cn,
        &config,
        "Which environment variable overrides the server port?",
    )
    .await;
    assert!(ok, "cn failed\nstdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("Set BRISA_PORT."),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let last_turn = || {
        up.requests()
            .into_iter()
            .rfind(|r| r.path == "/api/chat")
            .expect("the assistant's turn reached the upstream")
    };
    let chat = last_turn();
    let offered: Vec<String> = chat.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for tool in ["search_knowledge", "get_source", "ask"] {
        assert!(
            offered.iter().any(|name| name.contains(tool)),
            "cn offers {tool} from /mcp: {offered:?}\nstderr: {stderr}"
        );
    }

    // The model asks for a search: cn calls the gateway's tool and hands the hits back.
    let search = offered
        .iter()
        .find(|name| name.contains("search_knowledge"))
        .cloned()
        .unwrap_or_default();
    up.push(Reply::ToolCall {
        name: search,
        arguments: serde_json::json!({"query": "environment variable server port"}),
    });
    up.push(Reply::tokens(&["It is ", "BRISA_PORT."]));
    let (ok, stdout, stderr) =
        run_cn(&cn, &config, "Search the docs: how do I change the port?").await;
    assert!(ok, "cn failed\nstdout: {stdout}\nstderr: {stderr}");
    let last = last_turn();
    let tool_results: Vec<String> = last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(
        tool_results
            .iter()
            .any(|c| c.contains("docs/en/deployment.md")),
        "the tool result reached the model: {tool_results:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.contains("It is BRISA_PORT."), "stdout: {stdout}");
}

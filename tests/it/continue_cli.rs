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
    let Ok(cn) = std::env::var("ASSIST_CN") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the continue CLI test: use scripts/test.sh"
        );
        eprintln!("SKIPPED: ASSIST_CN is not set; run scripts/test.sh to include the continue CLI");
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
        let system = chat[0].body["messages"][0]["content"].as_str().unwrap();
        assert!(
            system.contains("docs/en/deployment.md"),
            "{provider}: retrieval ran"
        );
    }
}

//! The real `openai` and `ollama` Python packages against the gateway (tests/clients/).
//!
//! `scripts/test.sh` creates the pinned virtualenv and sets ASSIST_PYTHON. Run through
//! plain `cargo test` without it, this test says it was skipped; in CI it must run.

mod support;

use assist_gateway::config::Provider;
use support::*;

#[tokio::test]
async fn openai_and_ollama_python_clients() {
    let Ok(python) = std::env::var("ASSIST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the Python client tests: use scripts/test.sh"
        );
        eprintln!(
            "SKIPPED: ASSIST_PYTHON is not set; run scripts/test.sh to include the Python clients"
        );
        return;
    };
    for provider in [Provider::Ollama, Provider::Openai] {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| s.assistant.passthrough = true).await;
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

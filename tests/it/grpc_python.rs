//! The reference's own gRPC client, as its users run it: Python stubs generated from
//! proto/brunix.proto with `grpc_tools.protoc` at run time and the examples of its
//! section 5 (tests/clients/grpc_reference.py), against the real gateway in front of the
//! scripted upstream and a scripted judge; once without keys and once with, where a call
//! without the key must get UNAUTHENTICATED.
//!
//! `scripts/test.sh` creates the pinned virtualenv and sets ASSIST_PYTHON. Run through
//! plain `cargo test` without it, this test says it was skipped; in CI it must run.

use std::time::Duration;

use assist_gateway::config::Provider;

use crate::eval_answers::judged_gateway;
use crate::support::*;

/// The key of the second run (a test key, never a real one).
const KEY: &str = "grpc-python-test-key";

/// The scripted upstream's answer to every question.
const ANSWER: &str = "Hello from upstream";

#[tokio::test]
async fn the_reference_python_grpc_client_runs_its_examples() {
    let Some(python) = python_for("the Python client tests") else {
        return;
    };
    for key in [None, Some(KEY)] {
        let up = ScriptedUpstream::start().await;
        let judge = ScriptedUpstream::start().await;
        let (gw, _dataset) = judged_gateway(&up, &judge, |s| {
            if let Some(key) = key {
                s.server.api_keys = vec![key.into()];
            }
        })
        .await;
        let addr = gw.grpc_addr.expect("gRPC is served");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/grpc_reference.py"
        );
        let mut command = tokio::process::Command::new(&python);
        command.arg(script).arg(addr.to_string()).kill_on_drop(true);
        if let Some(key) = key {
            command.arg(key);
        }
        let out = tokio::time::timeout(Duration::from_secs(180), command.output())
            .await
            .expect("the Python gRPC client finished within 3 minutes")
            .expect("run the Python gRPC client script");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let run = if key.is_some() {
            "with keys"
        } else {
            "without keys"
        };
        println!("{run}:\n{stdout}");
        assert!(
            out.status.success(),
            "{run}: the Python gRPC client failed:\n{stdout}\n{stderr}"
        );
        assert!(stdout.contains(" 0 failed"), "{run}: {stdout}");
        assert_eq!(
            stdout.contains("ok  missing_key_is_unauthenticated"),
            key.is_some(),
            "{run}: the UNAUTHENTICATED check runs when the gateway has keys: {stdout}"
        );

        // What the upstream model was sent: one chat per question answered (five
        // examples and the evaluation's one question); the refused calls (empty query,
        // missing or wrong key) never reached it.
        let chats: Vec<Recorded> = up
            .requests()
            .into_iter()
            .filter(|r| r.path == "/api/chat")
            .collect();
        let asked: Vec<String> = chats.iter().map(last_user_message).collect();
        assert_eq!(asked.len(), 6, "{run}: {asked:?}");
        for question in [
            "why is this not catching the error?",
            "Que significa AVAP?",
            "Write an AVAP API that returns hello world",
            "What is registerEndpoint?",
            "Can you show me an example?",
        ] {
            assert!(asked.iter().any(|q| q == question), "{run}: {asked:?}");
        }

        // The editor-context example: the selected block and the extra context reached
        // the system prompt.
        let editor = asked_with(&chats, "why is this not catching the error?");
        let system = prompt_text(editor);
        assert!(
            system.contains("<selected_code>")
                && system.contains("ormDirect(\"UPDATE users SET active=1\", res)"),
            "{run}: {system}"
        );
        assert!(system.contains("file: handler.avap"), "{run}: {system}");

        // The multi-turn example: the second turn on "user-abc" carried the first.
        let second = asked_with(&chats, "Can you show me an example?");
        let turns: Vec<(&str, &str)> = second.body["messages"].as_array().unwrap()[1..]
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            turns,
            [
                ("user", "What is registerEndpoint?"),
                ("assistant", ANSWER),
                ("user", "Can you show me an example?"),
            ],
            "{run}"
        );
        // The evaluation asked the judge.
        assert!(!judge.requests().is_empty(), "{run}: the judge was asked");
    }
}

/// The question of the last user message (the selected code, when the gateway put it
/// there, set aside).
fn last_user_message(r: &Recorded) -> String {
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let text = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    text.split_once("</selected_code>\n\n")
        .filter(|_| text.starts_with("<selected_code>"))
        .map_or(text, |(_, question)| question)
        .to_string()
}

fn asked_with<'a>(chats: &'a [Recorded], question: &str) -> &'a Recorded {
    chats
        .iter()
        .find(|r| last_user_message(r) == question)
        .unwrap_or_else(|| panic!("no upstream request asked {question:?}"))
}

/// The grpcurl-style examples of docs/clients.md with `examples/grpc_call.py`, as written there.
#[tokio::test]
async fn the_readme_grpc_examples_run_as_written() {
    let Some(python) = python_for("the Python client tests") else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&["Here", " is", " a"]));
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec![KEY.into()];
    })
    .await;
    let addr = gw.grpc_addr.expect("gRPC is served").to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/grpc_call.py");
    let run = |args: Vec<String>| {
        let python = python.clone();
        async move {
            let out = tokio::process::Command::new(&python)
                .arg(script)
                .args(&args)
                .output()
                .await
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).to_string(),
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        }
    };
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let auth = format!("authorization: Bearer {KEY}");

    let (ok, listed, err) = run(s(&["-plaintext", &addr, "list"])).await;
    assert!(ok, "{err}");
    assert!(
        listed.lines().any(|l| l == "brunix.AssistanceEngine"),
        "{listed}"
    );
    let (ok, described, err) = run(s(&[
        "-plaintext",
        &addr,
        "describe",
        "brunix.AssistanceEngine",
    ]))
    .await;
    assert!(ok, "{err}");
    assert!(
        described.contains(
            "rpc AskAgentStream ( .brunix.AgentRequest ) returns ( stream .brunix.AgentResponse );"
        ),
        "{described}"
    );

    let ask = r#"{"query": "Que significa AVAP?", "session_id": "dev-001"}"#;
    let target = "brunix.AssistanceEngine/AskAgent";
    let (ok, whole, err) = run(s(&["-plaintext", "-H", &auth, "-d", ask, &addr, target])).await;
    assert!(ok, "{err}");
    let messages = json_objects(&whole);
    assert_eq!(messages.len(), 1, "{whole}");
    assert_eq!(messages[0]["text"], "Here is a");
    assert_eq!(messages[0]["avap_code"], "AVAP-2026");
    assert_eq!(messages[0]["is_final"], true);

    let target = "brunix.AssistanceEngine/AskAgentStream";
    let (ok, streamed, err) = run(s(&["-plaintext", "-H", &auth, "-d", ask, &addr, target])).await;
    assert!(ok, "{err}");
    let messages = json_objects(&streamed);
    let texts: Vec<&str> = messages
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Here", " is", " a", ""], "{streamed}");
    assert_eq!(messages[0]["is_final"], false);
    assert_eq!(messages[3]["is_final"], true);

    // Without the key: grpcurl's error shape and a failing exit.
    let (ok, _, err) = run(s(&["-plaintext", "-d", ask, &addr, target])).await;
    assert!(!ok && err.contains("Code: UNAUTHENTICATED"), "{err}");
}

/// The JSON objects printed one after the other.
fn json_objects(text: &str) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .map(Result::unwrap)
        .collect()
}

//! Definitions by name, through HTTP over `examples/knowledge` (BM25): a question that
//! names a function defined in the repository gets that definition among its first
//! sources, and a completion whose cursor is in a call of one carries its signature in
//! the upstream's prompt, before any snippet that only calls it.

use assist_gateway::config::Provider;
use serde_json::{json, Value};

use crate::support::*;

/// `retry_with_backoff`'s signature in `examples/knowledge/code/brisa_client.py`.
const SIGNATURE: &str =
    "def retry_with_backoff(call: Callable[[], T], attempts: int = 4, base_delay: float = 0.5) -> T:";

#[tokio::test]
async fn a_question_naming_a_defined_function_gets_its_definition_first() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    for asked in [
        "what does retry_with_backoff return when every attempt fails?",
        "¿cuántas veces reintenta `retry_with_backoff` antes de rendirse?",
        "How long does retry_with_backoff() wait between attempts?",
    ] {
        let (status, _, text) = post(
            &gw.url("/v1/chat/completions"),
            json!({"model": "brunix", "messages": [{"role": "user", "content": asked}]}),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let response: Value = serde_json::from_str(&text).unwrap();
        let sections: Vec<&str> = response["sources"]
            .as_array()
            .expect("sources")
            .iter()
            .map(|s| s["section"].as_str().unwrap_or_default())
            .collect();
        let rank = sections
            .iter()
            .position(|s| s.starts_with("def retry_with_backoff("))
            .unwrap_or_else(|| panic!("{asked}: no definition in {sections:?}"));
        assert!(rank < 3, "{asked}: at {rank} in {sections:?}");
        assert!(
            prompt_text(&up.last_request()).contains(SIGNATURE),
            "{asked}"
        );
    }
}

#[tokio::test]
async fn a_completion_inside_a_call_carries_the_called_functions_signature() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.completion.template = "qwen".into();
    })
    .await;
    up.push(Reply::tokens(&["lambda: client.orders(user_id)"]));
    let prompt = crate::completion::fim_prompt(
        &gw,
        &up,
        "class OrdersClient(BrisaClient):\n    def orders(self, user_id: int) -> list:\n        rows = retry_with_backoff(",
        "lambda: self._request(\"GET\", f\"/users/{user_id}/orders\"))\n        return rows\n",
    )
    .await;
    let definition = prompt
        .find(SIGNATURE)
        .unwrap_or_else(|| panic!("no signature in {prompt}"));
    // The definition comes before any snippet that only calls it, and before the file.
    let first_call = prompt
        .find("retry_with_backoff(lambda")
        .unwrap_or(usize::MAX);
    assert!(definition < first_call, "{prompt}");
    assert!(
        definition < prompt.find("<|fim_prefix|>").unwrap(),
        "{prompt}"
    );
}

//! Fill-in-the-middle through the gateway, as continue sends it (`/api/generate` and
//! `/v1/completions` with a `suffix`), asserted on what the scripted upstream receives (the
//! completion model's FIM prompt, raw, with its end tokens as stops and repository
//! snippets) and on the middle the client gets (ended where it should be); `/api/show`
//! says the assistant fills in the middle; an abandoned completion stops the upstream.

use std::time::{Duration, Instant};

use assist_gateway::config::Provider;
use serde_json::{json, Value};

use crate::support::*;

fn qwen(s: &mut assist_gateway::config::Settings) {
    s.completion.template = "qwen".into();
}

#[tokio::test]
async fn a_block_gets_the_models_fim_prompt_and_ends_before_the_suffix() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, qwen).await;
    up.push(Reply::tokens(&[
        "    total = a",
        " * 2\n",
        "    return total\n",
        "def junk():\n",
    ]));
    let (status, _, text) = post(
        &gw.url("/api/generate"),
        json!({"model": "brunix", "stream": false, "prompt": "def double(a):\n",
            "suffix": "    return total\n", "options": {"temperature": 0.2, "num_predict": 64}}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"], "    total = a * 2\n");
    let sent = up.last_request().body;
    assert_eq!(
        sent["prompt"],
        "<|fim_prefix|>def double(a):\n<|fim_suffix|>    return total\n<|fim_middle|>"
    );
    assert_eq!(sent["raw"], true);
    assert!(sent.get("suffix").is_none(), "{sent}");
    let stops = sent["options"]["stop"].as_array().unwrap();
    assert!(stops.contains(&json!("<|endoftext|>")) && stops.contains(&json!("<|file_sep|>")));
    assert_eq!(sent["options"]["temperature"], 0.2);
    // No classifier, no search for the question: one upstream request.
    assert_eq!(
        up.requests()
            .iter()
            .filter(|r| r.path.contains("generate") || r.path.contains("chat"))
            .count(),
        1
    );
}

#[tokio::test]
async fn inside_a_line_the_middle_is_one_line_streamed_over_openai() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, qwen).await;
    up.push(Reply::tokens(&["a, ", "b", "\nprint(", "y)\n"]));
    let response = client()
        .post(gw.url("/v1/completions"))
        .json(
            &json!({"model": "brunix", "stream": true, "prompt": "x = compute(",
            "suffix": ")\nprint(x)\n", "max_tokens": 32}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let text: String = sse_events(&body)
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "a, b");
    let sent = up.last_request().body;
    assert_eq!(
        sent["prompt"],
        "<|fim_prefix|>x = compute(<|fim_suffix|>)\nprint(x)\n<|fim_middle|>"
    );
    assert_eq!(sent["max_tokens"], 32);
}

#[tokio::test]
async fn repository_snippets_near_the_cursor_come_in_the_templates_repository_form() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, qwen).await;
    up.push(Reply::tokens(&["\"BRISA_PORT\")\n"]));
    let (status, _, text) = post(
        &gw.url("/api/generate"),
        json!({"model": "brunix", "stream": false,
            "prompt": "# read the server port from the environment variable\nport = getenv(",
            "suffix": "\nserve(port)\n"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let prompt = up.last_request().body["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.starts_with("<|repo_name|>repository\n<|file_sep|>"),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|file_sep|>current\n<|fim_prefix|># read the server port from the environment variable\nport = getenv(<|fim_suffix|>\nserve(port)\n<|fim_middle|>"), "{prompt}");
}

#[tokio::test]
async fn ollama_show_says_the_assistant_fills_in_the_middle() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, _, text) = post(&gw.url("/api/show"), json!({"model": "brunix"})).await;
    assert_eq!(status, 200, "{text}");
    let show: Value = serde_json::from_str(&text).unwrap();
    assert!(
        show["template"].as_str().unwrap().contains(".Suffix"),
        "{show}"
    );
}

/// The upstream's completion requests so far.
fn fills(up: &ScriptedUpstream) -> usize {
    up.requests()
        .iter()
        .filter(|r| r.path.contains("generate") || r.path.contains("completions"))
        .count()
}

/// The same completion asked again (the user came back to the same place) is answered
/// from the middle written the first time, without the upstream; for the same caller
/// only, and not a middle cut by max_tokens.
#[tokio::test]
async fn the_same_completion_again_is_answered_at_once() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        qwen(s);
        s.server.api_keys = vec!["key-a".into(), "key-b".into()];
    })
    .await;
    let ask = |key: &'static str, suffix: &'static str| {
        let url = gw.url("/api/generate");
        async move {
            let r = client()
                .post(url)
                .bearer_auth(key)
                .json(&json!({"model": "brunix", "stream": false,
                    "prompt": "def double(a):\n", "suffix": suffix}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()["response"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    up.set_default(Reply::tokens(&[
        "    total = a * 2\n",
        "    return total\n",
    ]));
    assert_eq!(
        ask("key-a", "    return total\n").await,
        "    total = a * 2\n"
    );
    assert_eq!(fills(&up), 1);
    assert_eq!(
        ask("key-a", "    return total\n").await,
        "    total = a * 2\n"
    );
    assert_eq!(fills(&up), 1, "asked the upstream again");
    // Another caller, or another place, is another request.
    ask("key-b", "    return total\n").await;
    assert_eq!(fills(&up), 2);
    ask("key-a", "    return 2 * a\n").await;
    assert_eq!(fills(&up), 3);
}

/// The example continue config's autocomplete models, as written (only the gateway's
/// address changed), each asked for a completion the way continue asks its provider.
#[tokio::test]
async fn the_example_continue_config_autocompletes_with_both_providers() {
    let config = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/continue-config.yaml"),
    )
    .unwrap();
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, qwen).await;
    let mut providers = Vec::new();
    for model in config.split("\n  - name: ").skip(1) {
        if !model.contains("roles: [autocomplete]") {
            continue;
        }
        let field = |name: &str| {
            model
                .lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {model}"))
                .split('#')
                .next()
                .unwrap()
                .trim()
                .to_string()
        };
        let (provider, base) = (field("provider: "), field("apiBase: "));
        assert_eq!(field("model: "), "brunix");
        let base = base.replace("http://127.0.0.1:8080", &gw.url(""));
        up.push(Reply::tokens(&[
            "    total = a * 2\n",
            "    return total\n",
        ]));
        let (url, body) = match provider.as_str() {
            "ollama" => (
                format!("{base}/api/generate"),
                json!({"model": "brunix", "prompt": "def double(a):\n",
                    "suffix": "    return total\n", "stream": true,
                    "options": {"temperature": 0.01, "num_predict": 256}}),
            ),
            "openai" => (
                format!("{base}/completions"),
                json!({"model": "brunix", "prompt": "def double(a):\n",
                    "suffix": "    return total\n", "stream": true, "max_tokens": 256}),
            ),
            other => panic!("an autocomplete provider the test does not know: {other}"),
        };
        let (status, _, text) = post(&url, body).await;
        assert_eq!(status, 200, "{provider}: {text}");
        assert!(text.contains("total = a * 2"), "{provider}: {text}");
        assert!(!text.contains("return total"), "{provider}: {text}");
        assert!(
            up.last_request().body["prompt"]
                .as_str()
                .unwrap()
                .starts_with("<|fim_prefix|>"),
            "{provider}"
        );
        providers.push(provider);
    }
    providers.sort();
    assert_eq!(providers, ["ollama", "openai"]);
}

#[tokio::test]
async fn an_abandoned_completion_stops_the_upstream() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, qwen).await;
    up.push(Reply::Endless(Duration::from_millis(5)));
    let mut response = client()
        .post(gw.url("/api/generate"))
        .json(
            &json!({"model": "brunix", "stream": true, "prompt": "fn main() {\n", "suffix": "}\n"}),
        )
        .send()
        .await
        .unwrap();
    read_some(&mut response, 1).await;
    let dropped = Instant::now();
    drop(response);
    assert!(
        eventually(5, || up.cancelled() == 1).await,
        "the upstream request was not cancelled"
    );
    let took = dropped.elapsed();
    assert!(took < Duration::from_secs(1), "cancelled after {took:?}");
}

/// continue-shaped completions against the real llama.cpp server with the quick start's
/// model (Qwen2.5-Coder-0.5B, which has FIM tokens): the middle stops where it should, a
/// line inside a line, a body before the suffix's next line, a closing brace alone.
#[tokio::test]
async fn a_real_model_fills_the_middle_and_stops_where_it_should() {
    let (Ok(python), Ok(gguf)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let model = crate::real_model::start_model_server(&python, &gguf).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{}/v1", model.port);
        s.llm.model = crate::real_model::MODEL.into();
        s.llm.first_byte_timeout = Duration::from_secs(120);
        s.completion.template = "qwen".into();
    })
    .await;
    let complete = |path: &'static str, prefix: &'static str, suffix: &'static str| {
        let url = gw.url(path);
        async move {
            let body = if path == "/api/generate" {
                json!({"model": "brunix", "stream": false, "prompt": prefix, "suffix": suffix,
                    "options": {"temperature": 0, "num_predict": 64}})
            } else {
                json!({"model": "brunix", "stream": false, "prompt": prefix, "suffix": suffix,
                    "temperature": 0, "max_tokens": 64})
            };
            let (status, _, text) = post(&url, body).await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            v["response"]
                .as_str()
                .or_else(|| v["choices"][0]["text"].as_str())
                .unwrap_or_default()
                .to_string()
        }
    };
    // A single line, the cursor inside it (continue's Ollama provider).
    let line = complete(
        "/api/generate",
        "def area(width, height):\n    return width * ",
        "\n\nprint(area(2, 3))\n",
    )
    .await;
    println!("single line: {line:?}");
    assert!(!line.trim().is_empty(), "an empty middle");
    assert!(!line.contains('\n'), "more than the line: {line:?}");
    // A body before the suffix's next line (OpenAI's completions, as Zed sends them).
    let body = complete(
        "/v1/completions",
        "def mean(values):\n    \"\"\"The arithmetic mean of a non-empty list.\"\"\"\n",
        "    return total / len(values)\n",
    )
    .await;
    println!("body: {body:?}");
    assert!(!body.trim().is_empty(), "an empty middle");
    assert!(
        !body.contains("return total / len(values)"),
        "the suffix was written again: {body:?}"
    );
    assert!(!body.contains("<|"), "an end token leaked: {body:?}");
    // A closing brace.
    let close = complete(
        "/api/generate",
        "fn add(a: i32, b: i32) -> i32 {\n    a + b\n",
        "\n\nfn main() {\n    println!(\"{}\", add(1, 2));\n}\n",
    )
    .await;
    println!("closing: {close:?}");
    assert!(close.trim_start().starts_with('}'), "{close:?}");
    assert!(
        !close.contains("fn main"),
        "the suffix was written again: {close:?}"
    );
}

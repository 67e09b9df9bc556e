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

/// A model that writes the body (`total = a * 2`), then the suffix's line again, then on.
const A_BODY_THEN_THE_SUFFIX: [&str; 4] = [
    "    total = a",
    " * 2\n",
    "    return total\n",
    "def junk():\n",
];

#[tokio::test]
async fn a_block_gets_the_models_fim_prompt_and_ends_before_the_suffix() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, qwen).await;
    up.push(Reply::tokens(&A_BODY_THEN_THE_SUFFIX));
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

/// A cursor inside a line, over OpenAI's completions: the suffix sent as `suffix`, or the
/// prompt already written in StarCoder's FIM template with no `suffix` (continue's OpenAI
/// provider writes its template for a model name it does not know): either way the middle
/// is written in the completion model's own template, one line, streamed, and the prompt
/// is not taken for a question (no classifier, no search: one upstream request).
#[tokio::test]
async fn inside_a_line_the_middle_is_one_line_streamed_over_openai() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, qwen).await;
    let asked = [
        json!({"model": "brunix", "stream": true, "prompt": "x = compute(",
            "suffix": ")\nprint(x)\n", "max_tokens": 32}),
        json!({"model": "brunix", "stream": true,
            "prompt": "<fim_prefix>x = compute(<fim_suffix>)\nprint(x)\n<fim_middle>",
            "stop": ["<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>"],
            "max_tokens": 32}),
    ];
    for (n, body) in asked.into_iter().enumerate() {
        up.push(Reply::tokens(&["a, ", "b", "\nprint(", "y)\n"]));
        let (status, _, text) = post(&gw.url("/v1/completions"), body).await;
        assert_eq!(status, 200, "{text}");
        let middle: String = sse_events(&text)
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_string))
            .collect();
        assert_eq!(middle, "a, b", "request {n}");
        let sent = up.last_request().body;
        assert_eq!(
            sent["prompt"], "<|fim_prefix|>x = compute(<|fim_suffix|>)\nprint(x)\n<|fim_middle|>",
            "request {n}"
        );
        assert_eq!(sent["max_tokens"], 32);
        assert_eq!(
            up.requests().len(),
            n + 1,
            "request {n}: more than one upstream request"
        );
    }
}

/// Asks `brunix` to fill between `prefix` and `suffix` over Ollama's `/api/generate` and
/// returns the prompt the upstream was sent.
pub(crate) async fn fim_prompt(
    gw: &Gateway,
    up: &ScriptedUpstream,
    prefix: &str,
    suffix: &str,
) -> String {
    let (status, _, text) = post(
        &gw.url("/api/generate"),
        json!({"model": "brunix", "stream": false, "prompt": prefix, "suffix": suffix}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    up.last_request().body["prompt"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn repository_snippets_near_the_cursor_come_in_the_templates_repository_form() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, qwen).await;
    up.push(Reply::tokens(&["\"BRISA_PORT\")\n"]));
    let prompt = fim_prompt(
        &gw,
        &up,
        "# read the server port from the environment variable\nport = getenv(",
        "\nserve(port)\n",
    )
    .await;
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
    assert!(show["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("insert")));
}

/// continue's autocomplete set to the upstream's model by its own name, on an
/// OpenAI-compatible upstream (llama.cpp's server appends a `suffix` to the prompt as
/// text): `/api/show` reports the FIM template the gateway writes, and a request with a
/// `suffix`, in either dialect and by `name` or `name:latest`, gets that template and the
/// middle's ends, with no repository snippets (those are `brunix`'s). Another model of the
/// upstream gets its suffix forwarded as sent.
#[tokio::test]
async fn the_completion_model_by_its_own_name_is_filled_in_by_the_gateway() {
    let up = ScriptedUpstream::start().await;
    up.serve_model("other-model:latest");
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        qwen(s);
        s.assistant.passthrough = true;
    })
    .await;
    let fim = "{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>{{- else }}{{ .Prompt }}{{- end }}";
    for name in [UPSTREAM_MODEL, "up-model"] {
        let show = show(&gw, name).await;
        assert_eq!(show["template"], fim, "{name}: {show}");
        assert!(show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("insert")));
    }
    let other = show(&gw, "other-model:latest").await;
    assert_eq!(other["template"], "{{ .Prompt }}", "{other}");

    let prefix = "# read the server port from the environment variable\ndef double(a):\n";
    for (path, name) in [
        ("/v1/completions", UPSTREAM_MODEL),
        ("/api/generate", "up-model"),
    ] {
        up.push(Reply::tokens(&A_BODY_THEN_THE_SUFFIX));
        let (status, _, text) = post(
            &gw.url(path),
            json!({"model": name, "stream": false, "prompt": prefix,
                "suffix": "    return total\n", "max_tokens": 64}),
        )
        .await;
        assert_eq!(status, 200, "{path}: {text}");
        let answer: Value = serde_json::from_str(&text).unwrap();
        let middle = answer["choices"][0]["text"]
            .as_str()
            .or(answer["response"].as_str());
        assert_eq!(middle, Some("    total = a * 2\n"), "{path}: {answer}");
        let sent = up.last_request().body;
        assert_eq!(
            sent["prompt"],
            format!("<|fim_prefix|>{prefix}<|fim_suffix|>    return total\n<|fim_middle|>"),
            "{path}"
        );
        // The name the upstream listed, whichever of the two the client wrote.
        assert_eq!(sent["model"], UPSTREAM_MODEL, "{path}");
        assert!(sent.get("suffix").is_none(), "{path}: {sent}");
        let stops = sent["stop"].as_array().unwrap();
        assert!(
            stops.contains(&json!("<|endoftext|>")) && stops.contains(&json!("<|file_sep|>")),
            "{path}: {sent}"
        );
    }

    // Another model of the upstream: passthrough as before, its suffix as sent.
    assert_forwarded_with_suffix(&up, &gw, "/v1/completions", "other-model:latest").await;
}

/// A fill far longer than the window (a whole generated file before and after the cursor)
/// reaches the upstream cut to fit it, as editors cut it: the prefix loses its start and
/// the suffix its end, at lines' edges, the lines at the cursor kept. Before, the upstream
/// received all of it, 1.6 million characters here, with an 8,192-token window.
#[tokio::test]
async fn a_fill_past_the_window_reaches_the_upstream_cut_to_fit_it() {
    use assist_gateway::context::budget::estimate_tokens;
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        qwen(s);
        s.assistant.passthrough = true;
    })
    .await;
    let prefix: String = (0..50_000).map(|i| format!("let a{i} = {i};\n")).collect();
    let suffix: String = (0..60_000).map(|i| format!("print(b{i})\n")).collect();
    up.push(Reply::tokens(&A_BODY_THEN_THE_SUFFIX));
    let (status, _, text) = post(
        &gw.url("/v1/completions"),
        json!({"model": UPSTREAM_MODEL, "stream": false, "prompt": prefix,
            "suffix": suffix, "max_tokens": 64}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let sent = up.last_request().body;
    let prompt = sent["prompt"].as_str().unwrap();
    assert!(
        estimate_tokens(prompt) <= 8_192 - 64,
        "{} characters, {} tokens sent",
        prompt.len(),
        estimate_tokens(prompt)
    );
    let (before, after) = prompt
        .strip_prefix("<|fim_prefix|>")
        .and_then(|p| p.strip_suffix("<|fim_middle|>"))
        .and_then(|p| p.split_once("<|fim_suffix|>"))
        .unwrap_or_else(|| panic!("not a FIM prompt: {}", &prompt[..80]));
    assert!(
        before.starts_with("let a") && prefix.ends_with(before),
        "whole lines, the last kept"
    );
    assert!(before.ends_with("let a49999 = 49999;\n"));
    assert!(after.starts_with("print(b0)\n") && suffix.starts_with(after) && after.ends_with('\n'));
    assert!(
        estimate_tokens(before) > 4_000,
        "most of the room for the prefix"
    );
}

/// A completion with a suffix asked of `model` reaches the upstream as the client sent it.
async fn assert_forwarded_with_suffix(
    up: &ScriptedUpstream,
    gw: &Gateway,
    path: &str,
    model: &str,
) {
    up.push(Reply::tokens(&["    return a + b\n"]));
    let (status, _, text) = post(
        &gw.url(path),
        json!({"model": model, "stream": false, "prompt": "def add(a, b):\n",
            "suffix": "\nprint(add(1, 2))\n"}),
    )
    .await;
    assert_eq!(status, 200, "{model}: {text}");
    let sent = up.last_request().body;
    assert_eq!(sent["prompt"], "def add(a, b):\n", "{model}");
    assert_eq!(sent["suffix"], "\nprint(add(1, 2))\n", "{model}");
}

/// On Ollama upstreams the completion model by its own name is Ollama's to fill in (it
/// renders the model's own template with the suffix): forwarded, suffix and all, and
/// `/api/show` is the upstream's.
#[tokio::test]
async fn on_ollama_the_completion_model_by_its_own_name_is_forwarded_with_its_suffix() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        qwen(s);
        s.assistant.passthrough = true;
    })
    .await;
    assert_eq!(show(&gw, UPSTREAM_MODEL).await["template"], "{{ .Prompt }}");
    assert_forwarded_with_suffix(&up, &gw, "/api/generate", UPSTREAM_MODEL).await;
}

async fn show(gw: &Gateway, model: &str) -> Value {
    let (status, _, text) = post(&gw.url("/api/show"), json!({ "model": model })).await;
    assert_eq!(status, 200, "{model}: {text}");
    serde_json::from_str(&text).unwrap()
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
            // continue's OpenAI provider has no FIM of its own: it writes the prompt in
            // the template it keeps for the model's name (StarCoder's for a name it does
            // not know) and asks the legacy completions endpoint, raw.
            "openai" => (
                format!("{base}/completions"),
                json!({"model": "brunix",
                    "prompt": "<fim_prefix>def double(a):\n<fim_suffix>    return total\n<fim_middle>",
                    "stop": ["<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>",
                        "<|endoftext|>", "</fim_middle>", "</code>"],
                    "stream": true, "max_tokens": 256}),
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
        s.assistant.passthrough = true;
    })
    .await;
    let complete_with =
        |model: &'static str, path: &'static str, prefix: &'static str, suffix: &'static str| {
            let url = gw.url(path);
            async move {
                let body = if path == "/api/generate" {
                    json!({"model": model, "stream": false, "prompt": prefix, "suffix": suffix,
                    "options": {"temperature": 0, "num_predict": 64}})
                } else {
                    json!({"model": model, "stream": false, "prompt": prefix, "suffix": suffix,
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
    let complete = |path, prefix, suffix| complete_with("brunix", path, prefix, suffix);
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
    // The model by its own name (passthrough), as an editor configured with the upstream's
    // model asks: llama.cpp's server given this `suffix` appends it as text and continues
    // the prefix (it wrote `print(add(3, 4))` here); the gateway writes the FIM prompt.
    let own = complete_with(
        crate::real_model::MODEL,
        "/v1/completions",
        "def add(a, b):\n    ",
        "\n\nprint(add(3, 4))\n",
    )
    .await;
    println!("own name: {own:?}");
    assert!(own.contains("return"), "{own:?}");
    assert!(
        !own.contains("print(add"),
        "the suffix was written: {own:?}"
    );
    assert!(
        !own.trim_end().contains('\n'),
        "more than the body's line: {own:?}"
    );
}

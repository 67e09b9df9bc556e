//! End to end with a real model: llama.cpp's OpenAI-compatible server
//! (`llama-cpp-python[server]`) running the model scripts/test.sh installs (CI's:
//! Qwen2.5-Coder-0.5B-Instruct, Q4_K_M), and `examples/knowledge` ingested with the real
//! all-MiniLM embedder in process. The pipeline test asserts structure and sources; the
//! golden test checks that the answers hold the facts asked for.
//!
//! `scripts/test.sh` installs both (scripts/model-env.sh) and sets ASSIST_MODEL_PYTHON,
//! ASSIST_MODEL_GGUF and ASSIST_TEST_MINILM; without them these tests say they were
//! skipped, and in CI they must run.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider};
use serde_json::{json, Value};

/// The model server's alias for whichever GGUF it serves.
pub(crate) const MODEL: &str = "local-model";

pub(crate) struct ModelServer {
    child: Child,
    pub(crate) port: u16,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn start_model_server(python: &str, gguf: &str) -> ModelServer {
    start_model_server_with_window(python, gguf, 2048).await
}

/// The model server with a window of `n_ctx` tokens. One thread generates and two process
/// prompts (fixed, so answers at temperature 0 do not depend on the machine's core count);
/// only the last token's logits are computed (`--logits_all false`: less work and memory
/// per prompt token, the server's default computes them all); requests wait their turn
/// (`--interrupt_requests false`: by default any request that arrives, even a token count
/// or a model listing, ends the answer being streamed, with no finish_reason).
pub(crate) async fn start_model_server_with_window(
    python: &str,
    gguf: &str,
    n_ctx: u32,
) -> ModelServer {
    start_model_server_with(python, gguf, &["--n_ctx", &n_ctx.to_string()]).await
}

/// The model server as quickstart.sh starts it: the model's 16,384-token window, and the
/// prompt cache that keeps what it read of earlier prompts.
pub(crate) async fn start_model_server_as_the_quick_start(python: &str, gguf: &str) -> ModelServer {
    start_model_server_with(python, gguf, &["--n_ctx", "16384", "--cache", "true"]).await
}

async fn start_model_server_with(python: &str, gguf: &str, window: &[&str]) -> ModelServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python)
        .args([
            "-m",
            "llama_cpp.server",
            "--model",
            gguf,
            "--host",
            "127.0.0.1",
        ])
        .args(["--port", &port.to_string()])
        .args(window)
        .args(["--n_threads", "1", "--n_threads_batch", "2"])
        .args(["--logits_all", "false", "--interrupt_requests", "false"])
        .args(["--model_alias", MODEL])
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llama_cpp.server");
    let mut server = ModelServer { child, port };
    let url = format!("http://127.0.0.1:{port}/v1/models");
    for _ in 0..240 {
        if let Ok(r) = client().get(&url).send().await {
            if r.status().is_success() {
                server.answers_one_token().await;
                return server;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the model server did not start within 60 s");
}

impl ModelServer {
    /// The model computes: a server can list its model and still die on its first token
    /// (llama.cpp built for instructions the machine reports but cannot run), which every
    /// test would otherwise see as a refused connection somewhere in the middle.
    async fn answers_one_token(&mut self) {
        let url = format!("http://127.0.0.1:{}/v1/completions", self.port);
        let asked = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap()
            .post(&url)
            .json(&json!({"prompt": "def", "max_tokens": 1, "temperature": 0}))
            .send()
            .await;
        if matches!(&asked, Ok(r) if r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let died = self.child.try_wait().ok().flatten();
        let signal = died.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
        panic!(
            "the model server did not answer one token ({}): {}",
            match &asked {
                Ok(r) => format!("status {}", r.status()),
                Err(e) => format!("{e}"),
            },
            match (died, signal) {
                (_, Some(4)) => "it died of an illegal instruction: its llama.cpp uses instructions this machine cannot run (scripts/model-env.sh builds it for AVX2 on x86-64, not for the CPU it runs on, and rebuilds an older native build by itself; a CPU without AVX2 needs CMAKE_ARGS of its own)".to_string(),
                (Some(status), _) => format!("it exited: {status}"),
                (None, _) => "it is still running".to_string(),
            }
        );
    }
}

/// A pass-through HTTP proxy in front of the model server that keeps every JSON request
/// body, so the test can see exactly what the model was sent.
pub(crate) type Seen = Arc<Mutex<Vec<Value>>>;
type ProxyState = (String, Seen, reqwest::Client);

pub(crate) async fn recording_proxy(target: String) -> (String, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = (target, seen.clone(), reqwest::Client::new());
    let app = axum::Router::new()
        .fallback(
            |axum::extract::State((target, seen, http)): axum::extract::State<ProxyState>,
             request: axum::extract::Request| async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
                if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                    seen.lock().unwrap().push(v);
                }
                let url = format!("{target}{}", parts.uri.path());
                let mut forward = http.request(parts.method, url).body(bytes);
                if let Some(ct) = parts.headers.get("content-type") {
                    forward = forward.header("content-type", ct);
                }
                let answer = forward.send().await.unwrap();
                let mut response = axum::response::Response::builder().status(answer.status());
                if let Some(ct) = answer.headers().get("content-type") {
                    response = response.header("content-type", ct);
                }
                response
                    .body(axum::body::Body::from_stream(answer.bytes_stream()))
                    .unwrap()
            },
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

/// POST with room for a real model on a busy 2-core machine (the shared client gives up
/// after 20 s; a 2,000-token prompt takes about that long on its own).
async fn post_patiently(url: &str, body: Value) -> (u16, String) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let r = client.post(url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

fn stream_text(body: &str) -> (String, Value) {
    let events = sse_events(body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let text = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    (text, chunks.last().cloned().unwrap())
}

#[tokio::test]
async fn a_real_model_answers_through_the_pipeline() {
    let (Ok(python), Ok(gguf), Ok(minilm)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
        std::env::var("ASSIST_TEST_MINILM"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let model = start_model_server(&python, &gguf).await;
    let (proxy, seen) = recording_proxy(format!("http://127.0.0.1:{}", model.port)).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("{proxy}/v1");
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = std::time::Duration::from_secs(120);
        s.assistant.passthrough = true;
        s.assistant.context_tokens = 2048;
        s.embeddings.provider = EmbeddingProvider::Local;
        s.embeddings.path = Some(minilm.clone().into());
    })
    .await;
    let url = gw.url("/v1/chat/completions");

    // 1. A question about the knowledge base, streamed, with the expected source.
    let (status, body) = post_patiently(
        &url,
        json!({"model": "brunix", "stream": true, "max_tokens": 48, "temperature": 0,
            "messages": [{"role": "user", "content": "Which environment variable overrides the server port?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (text, last) = stream_text(&body);
    assert!(!text.trim().is_empty(), "the model streamed text");
    let files: Vec<&str> = last["sources"]
        .as_array()
        .expect("sources on the last chunk")
        .iter()
        .map(|s| s["file"].as_str().unwrap())
        .collect();
    assert!(files.contains(&"docs/en/deployment.md"), "{files:?}");

    // 2. The editor-context scenario reaches the model: the selection is in the prompt the
    //    model server received, and the model answers.
    let selection =
        "let port = env(\"BRISA_PORT\") ?? 8080\nserve(app, port: port, host: \"0.0.0.0\")";
    let user =
        json!({"selected_text": base64_of(selection), "user_info": {"dev_id": 1}}).to_string();
    let (status, body) = post_patiently(
        &url,
        json!({"model": "brunix", "max_tokens": 16, "temperature": 0, "session_id": "e2e", "user": user,
            "messages": [{"role": "user", "content": "what does this code do?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(!v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 50);
    let sent = seen.lock().unwrap().last().cloned().unwrap();
    let question = sent["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap();
    assert!(
        question.contains(&format!("<selected_code>\n{selection}")),
        "{question}"
    );
    assert_eq!(sent["model"], MODEL);

    // 3. Passthrough to the model's own id: its answer, no sources.
    let (status, body) = post_patiently(
        &url,
        json!({"model": MODEL, "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"], MODEL);
    assert!(!v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());
    assert!(v.get("sources").is_none());
    assert!(
        up.requests().is_empty(),
        "everything went to the real model"
    );
    assert!(seen.lock().unwrap().len() >= 3);
}

/// Two users asking at once both get their whole answer: the model server answers one after
/// the other, and the gateway's own calls to it (token counts) cut neither stream short.
#[tokio::test]
async fn two_users_asking_a_real_model_at_once_both_get_whole_answers() {
    let (Ok(python), Ok(gguf), Ok(minilm)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
        std::env::var("ASSIST_TEST_MINILM"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let model = start_model_server_with_window(&python, &gguf, 4096).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{}/v1", model.port);
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = Duration::from_secs(240);
        s.retrieval.top_k = 3;
        s.embeddings.provider = EmbeddingProvider::Local;
        s.embeddings.path = Some(minilm.clone().into());
    })
    .await;
    let url = gw.url("/v1/chat/completions");
    let ask = |question: &str| {
        json!({"model": "brunix", "stream": true, "max_tokens": 40, "temperature": 0,
            "messages": [{"role": "user", "content": question}]})
    };
    let first = post_patiently(
        &url,
        ask("How do I declare a path parameter for an endpoint?"),
    );
    let second = async {
        // Once the first answer is under way.
        tokio::time::sleep(Duration::from_secs(2)).await;
        post_patiently(&url, ask("How do I run the tests of a Brisa service?")).await
    };
    let (first, second) = tokio::join!(first, second);
    for (status, body) in [first, second] {
        assert_eq!(status, 200, "{body}");
        let (text, last) = stream_text(&body);
        assert!(!text.trim().is_empty(), "{body}");
        let finish = last["choices"][0]["finish_reason"].as_str();
        assert!(
            matches!(finish, Some("stop" | "length")),
            "the answer ended with finish_reason {finish:?}: {body}"
        );
    }
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A golden question over `examples/knowledge` (from `examples/eval/answers.jsonl`) and the
/// fact a right answer states, in any of the spellings given (case does not matter). The
/// facts are ones the question does not give away.
struct Golden {
    id: &'static str,
    question: &'static str,
    facts: &'static [&'static str],
}

const GOLDEN: &[Golden] = &[
    Golden {
        id: "en-deployment-01",
        question: "Which environment variable overrides the server port?",
        facts: &["BRISA_SERVER_PORT"],
    },
    Golden {
        id: "en-database-02",
        question: "Which environment variable sets the database connection string?",
        facts: &["BRISA_DB_URL"],
    },
    Golden {
        id: "en-tooling-01",
        question: "How big can a request body be by default?",
        facts: &["2 MB", "2MB", "2 megabytes"],
    },
    Golden {
        id: "en-endpoints-03",
        question: "Where is the generated OpenAPI document served?",
        facts: &["/_brisa/openapi.json"],
    },
    Golden {
        id: "en-deployment-03",
        question: "How long is the graceful shutdown grace period by default?",
        facts: &["20 s", "20s", "20 seconds"],
    },
    Golden {
        id: "en-language-01",
        question: "How do I declare a variable that can be reassigned?",
        facts: &["let mut"],
    },
    Golden {
        id: "en-code-01",
        question: "What status does the rate limiter answer when an API key runs out of tokens?",
        facts: &["429"],
    },
    Golden {
        id: "en-endpoints-06",
        question: "How do I attach middleware to a single endpoint only?",
        facts: &["wrap("],
    },
    Golden {
        id: "es-lenguaje-02",
        question: "¿Qué error produce un import circular?",
        facts: &["E0301"],
    },
    Golden {
        id: "es-primeros-02",
        question: "¿Dónde veo la documentación interactiva de mi servicio?",
        facts: &["_brisa/docs"],
    },
    Golden {
        id: "es-primeros-01",
        question: "¿Cómo creo un proyecto nuevo de Brisa?",
        facts: &["brisa new"],
    },
    Golden {
        id: "es-async-05",
        question: "¿Qué error da el compilador si comparto un let mut entre tareas?",
        facts: &["E0412"],
    },
    Golden {
        id: "es-async-04",
        question: "¿Cómo pongo un tiempo de espera a una tarea?",
        facts: &["withTimeout"],
    },
];

/// Golden questions about code selected in the editor (sent in `user` as the reference's
/// extension does): the fact is in the selection only, not in the question nor in the
/// knowledge base, so a right answer shows the model read the selection.
struct EditorGolden {
    id: &'static str,
    question: &'static str,
    selection: &'static str,
    facts: &'static [&'static str],
}

const EDITOR_GOLDEN: &[EditorGolden] = &[
    EditorGolden {
        id: "sel-en-return",
        question: "what does this return?",
        selection: "fn shipping_tier(order: Order) -> Text {\n    if order.weight_kg > 30 {\n        return \"FREIGHT-PALLET\"\n    }\n    \"PARCEL-STANDARD\"\n}",
        facts: &["FREIGHT-PALLET", "PARCEL-STANDARD", "shipping_tier"],
    },
    EditorGolden {
        id: "sel-es-status",
        question: "¿qué código de estado devuelve esto?",
        selection: "async fn brew(req: Request) -> Response {\n    respond(418, {\"tea\": true})\n}",
        facts: &["418"],
    },
    EditorGolden {
        id: "sel-en-explain",
        question: "explain",
        selection: "const RETRY_DELAY_MS = 750\nfn delay_for_attempt(attempt: Int) -> Int {\n    RETRY_DELAY_MS * attempt\n}",
        facts: &["750", "delay_for_attempt", "RETRY_DELAY_MS"],
    },
    EditorGolden {
        id: "sel-es-que-hace",
        question: "que hace este codigo?",
        selection: "fn saludo(nombre: Text) -> Text {\n    \"Buenas tardes, ${nombre}\"\n}",
        facts: &["buenas tardes", "saludo"],
    },
];

/// Of EDITOR_GOLDEN, how many CI's model must answer right.
const EDITOR_GOLDEN_RIGHT_AT_LEAST: usize = 3;

/// Of GOLDEN, how many CI's model (scripts/test.sh: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M)
/// must answer right. It got 12 of 13 when this was set (the one wrong: the rate limiter's
/// status) and 11 after the retrieval changes of issue 18 (es-async-05 too, though the fact
/// is in the first of its three chunks): 11 leaves no room for an answer that changes with
/// the machine, and none for a model that stopped reading its context (SmolLM2-135M: 1 or
/// 2 of 13; Qwen2.5-Coder-1.5B: 13). `ASSIST_GOLDEN_MIN` overrides it: benches/golden-answers.sh
/// measures every model with 0.
const GOLDEN_RIGHT_AT_LEAST: usize = 11;

/// Answers checked, not only streamed: the golden questions, English and Spanish, through
/// the assistant model (retrieval over examples/knowledge, the real model answering at
/// temperature 0), each answer checked for the fact its question asks.
#[tokio::test]
async fn a_real_model_answers_golden_questions_with_the_fact_asked() {
    let (Ok(python), Ok(gguf), Ok(minilm)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
        std::env::var("ASSIST_TEST_MINILM"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let at_least = std::env::var("ASSIST_GOLDEN_MIN")
        .map(|n| n.parse::<usize>().expect("ASSIST_GOLDEN_MIN is a number"))
        .unwrap_or(GOLDEN_RIGHT_AT_LEAST);
    let started = std::time::Instant::now();
    // A window with room to spare over the prompt budget: prompts counted in estimated
    // tokens can come out larger in the model's own.
    let model = start_model_server_with_window(&python, &gguf, 4096).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{}/v1", model.port);
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = Duration::from_secs(240);
        s.assistant.context_tokens = 2048;
        // As the quick start: three whole chunks. With the default eight, cut to fit the
        // budget, the 0.5B model got 11 of 13 (5 of 13 with a 1,536-token budget).
        s.retrieval.top_k = 3;
        s.embeddings.provider = EmbeddingProvider::Local;
        s.embeddings.path = Some(minilm.clone().into());
    })
    .await;
    let url = gw.url("/v1/chat/completions");

    let mut wrong = Vec::new();
    for golden in GOLDEN {
        let (status, body) = post_patiently(
            &url,
            json!({"model": "brunix", "stream": true, "max_tokens": 96, "temperature": 0,
                "seed": 7, "messages": [{"role": "user", "content": golden.question}]}),
        )
        .await;
        assert_eq!(status, 200, "{}: {body}", golden.id);
        let (answer, last) = stream_text(&body);
        assert!(
            last["sources"].as_array().is_some_and(|s| !s.is_empty()),
            "{}",
            golden.id
        );
        let lower = answer.to_lowercase();
        if !golden
            .facts
            .iter()
            .any(|f| lower.contains(&f.to_lowercase()))
        {
            wrong.push((golden, answer));
        }
    }
    // Questions about selected code: the answer is about the selection.
    let mut editor_wrong = Vec::new();
    for golden in EDITOR_GOLDEN {
        let user = json!({"selected_text": base64_of(golden.selection), "editor_content": "",
            "extra_context": ""})
        .to_string();
        let (status, body) = post_patiently(
            &url,
            json!({"model": "brunix", "stream": true, "max_tokens": 96, "temperature": 0,
                "seed": 7, "user": user,
                "messages": [{"role": "user", "content": golden.question}]}),
        )
        .await;
        assert_eq!(status, 200, "{}: {body}", golden.id);
        let (answer, _) = stream_text(&body);
        let lower = answer.to_lowercase();
        if !golden
            .facts
            .iter()
            .any(|f| lower.contains(&f.to_lowercase()))
        {
            editor_wrong.push(format!(
                "{} (expected one of {:?}): {answer:?}",
                golden.id, golden.facts
            ));
        }
    }
    let editor_right = EDITOR_GOLDEN.len() - editor_wrong.len();
    eprintln!(
        "golden answers about a selection: {editor_right}/{} right",
        EDITOR_GOLDEN.len()
    );
    assert!(
        editor_right >= EDITOR_GOLDEN_RIGHT_AT_LEAST,
        "{editor_right} of {} answers about a selection right; wrong:\n{}",
        EDITOR_GOLDEN.len(),
        editor_wrong.join("\n")
    );

    let right = GOLDEN.len() - wrong.len();
    let ids: Vec<&str> = wrong.iter().map(|(g, _)| g.id).collect();
    // The tally for benches/golden-answers.sh: ids only, never the text.
    eprintln!(
        "golden answers: {right}/{} right in {} s; wrong: {ids:?}",
        GOLDEN.len(),
        started.elapsed().as_secs()
    );
    assert!(
        right >= at_least,
        "{right} of {} golden answers right, expected at least {at_least}; wrong:\n{}",
        GOLDEN.len(),
        wrong
            .iter()
            .map(|(g, a)| format!("{} (expected one of {:?}): {a:?}", g.id, g.facts))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

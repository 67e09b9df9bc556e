//! The assistant pipeline end to end: the real router, the example knowledge base in
//! tantivy, the embedded session store, and the scripted upstream, whose recorded
//! requests show exactly what the model was given.

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::{ClassifierMode, Provider, ReformulatorMode};
use base64::Engine;
use serde_json::{json, Value};

const SELECTION: &str = "try {\n    let user = ormSelectOne(\"users\", {\"id\": id})\n} catch (e: NotFound) {\n    addResult(404, {\"error\": \"no such user\"})\n}";
const OPEN_FILE: &str = "/// GET /users/{id}\nasync fn get_user(req: Request) -> Response {\n    let id = req.param(\"id\")\n    if id == null { return status(400) }\n    let user = ormSelectOne(\"users\", {\"id\": id})\n    return status(200, user)\n}\n";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The `user` field as the reference VS Code extension sends it.
fn user_field(selected: &str, editor: &str) -> String {
    json!({
        "editor_content": b64(editor),
        "selected_text": b64(selected),
        "extra_context": b64("file: code/users_service.brisa, language: brisa"),
        "user_info": {"dev_id": 1, "project_id": 2, "org_id": 3},
    })
    .to_string()
}

/// Role and content of each message the upstream received.
fn upstream_messages(r: &Recorded) -> Vec<(String, String)> {
    r.body["messages"]
        .as_array()
        .expect("a chat request")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn system_prompt(r: &Recorded) -> String {
    let messages = upstream_messages(r);
    assert_eq!(messages[0].0, "system");
    messages[0].1.clone()
}

async fn ask(gw: &Gateway, body: Value) -> Value {
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn question(content: &str) -> Value {
    json!({"model": "brunix", "messages": [{"role": "user", "content": content}]})
}

fn source_files(response: &Value) -> Vec<String> {
    response["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["file"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn scenario_1_question_about_the_selected_code() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let mut body = question("why is this not catching my error?");
    body["user"] = json!(user_field(SELECTION, OPEN_FILE));
    body["session_id"] = json!("scenario-1");
    let response = ask(&gw, body).await;
    assert_eq!(
        response["choices"][0]["message"]["content"],
        "Hello from upstream"
    );

    let system = system_prompt(&up.last_request());
    let open_file = system
        .find("<open_file>")
        .expect("the open file reaches the model");
    let extra = system
        .find("<extra_context>")
        .expect("and the extra context");
    assert!(open_file < extra, "priority order");
    assert!(system.contains("async fn get_user"));
    assert!(system.contains("language: brisa"));
    // A question about the code is also searched: the knowledge follows the editor code.
    let knowledge = system.find("<knowledge>").expect("retrieved knowledge");
    assert!(open_file < knowledge && knowledge < extra);
    assert!(!source_files(&response).is_empty());
    // The selection goes with the question, which ends the last message as the client
    // sent it.
    let messages = upstream_messages(&up.last_request());
    let (role, last) = messages.last().unwrap();
    assert_eq!(role, "user");
    assert!(
        last.starts_with("<selected_code>\n") && last.contains(SELECTION),
        "{last}"
    );
    assert!(last.ends_with("</selected_code>\n\nwhy is this not catching my error?"));
    assert!(!system.contains(SELECTION));
}

#[tokio::test]
async fn scenario_2_question_about_the_open_file() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |_| {}).await;
    // PRD-0002, scenario 2, verbatim.
    let mut body = question("what HTTP status codes can this return?");
    body["user"] = json!(user_field("", OPEN_FILE));
    ask(&gw, body).await;
    let system = system_prompt(&up.last_request());
    assert!(
        !prompt_text(&up.last_request()).contains("<selected_code>"),
        "nothing was selected"
    );
    assert!(system.contains("<open_file>\n") && system.contains("return status(200, user)"));
}

#[tokio::test]
async fn scenario_3_general_question_gets_knowledge_and_no_editor_code() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let mut body = question("How do I declare a path parameter for an endpoint?");
    body["user"] = json!(user_field(SELECTION, OPEN_FILE));
    let response = ask(&gw, body).await;
    let system = prompt_text(&up.last_request());
    assert!(!system.contains("<selected_code>") && !system.contains("<open_file>"));
    assert!(!system.contains("ormSelectOne(\"users\", {\"id\": id})"));
    assert!(
        !system.contains("language: brisa"),
        "extra context is editor context"
    );
    let files = source_files(&response);
    assert!(files.len() <= 8);
    let rank = files
        .iter()
        .position(|f| f == "docs/en/endpoints.md")
        .expect("the endpoint docs");
    assert!(rank < 3, "{files:?}");
    // Each source is in the prompt under its own numbered header, in the same order.
    let knowledge = system
        .find("<knowledge>\n### [1] ")
        .expect("retrieved knowledge");
    let header = format!("### [{}] docs/en/endpoints.md", rank + 1);
    assert!(system[knowledge..].contains(&header), "{system}");
    let source = &response["sources"][rank];
    assert_eq!(
        source["id"].as_str().unwrap().len(),
        16,
        "content-hash chunk id"
    );
    assert!(source["section"].as_str().unwrap().contains("addParam"));
    assert!(source["score"].as_f64().unwrap() > 0.0);
    assert!(source["lines"][0].as_u64().unwrap() >= 1);
    // Never in the answer text unless asked for.
    assert!(!response["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("Sources"));
}

#[tokio::test]
async fn conversational_turns_skip_retrieval_and_editor_code() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let mut body = question("thanks!");
    body["user"] = json!(user_field(SELECTION, OPEN_FILE));
    let response = ask(&gw, body).await;
    assert_eq!(response["sources"], json!([]));
    let system = system_prompt(&up.last_request());
    assert!(!system.contains("<knowledge>") && !system.contains("<selected_code>"));
}

#[tokio::test]
async fn spanish_stays_spanish_through_reformulation_and_finds_the_spanish_chunk() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.reformulator.mode = ReformulatorMode::Llm;
    })
    .await;
    let asked = "¿Cómo lanzo varias consultas en paralelo y espero todos los resultados?";

    // A well-behaved rewrite: compressed, still Spanish.
    up.push(Reply::tokens(&[
        "consultas en paralelo",
        " esperar todos los resultados",
    ]));
    up.push(Reply::tokens(&["Con ", "tareas."]));
    let response = ask(&gw, question(asked)).await;
    let requests = up.requests();
    let rewrite_prompt = &upstream_messages(&requests[requests.len() - 2])[0].1;
    assert!(rewrite_prompt.contains(&format!("[MODE: RETRIEVAL] {asked}")));
    assert!(rewrite_prompt.contains("Never translate"));
    assert_eq!(source_files(&response)[0], "docs/es/tareas-asincronas.md");
    assert_eq!(response["choices"][0]["message"]["content"], "Con tareas.");

    // A rewrite that translated the question is not used: the Spanish question is searched.
    up.push(Reply::tokens(&[
        "How do I run several queries in parallel and wait for all of them",
    ]));
    up.push(Reply::tokens(&["Con tareas."]));
    let response = ask(&gw, question(asked)).await;
    assert_eq!(source_files(&response)[0], "docs/es/tareas-asincronas.md");
}

#[tokio::test]
async fn a_failed_reformulation_searches_the_question_as_asked() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.reformulator.mode = ReformulatorMode::Llm;
        s.reformulator.timeout = std::time::Duration::from_millis(300);
    })
    .await;
    up.push(Reply::HangBeforeHeaders(Duration::from_secs(2)));
    up.push(Reply::tokens(&["ok"]));
    let response = ask(
        &gw,
        question("Which environment variable overrides the server port?"),
    )
    .await;
    assert_eq!(source_files(&response)[0], "docs/en/deployment.md");
    assert_eq!(response["choices"][0]["message"]["content"], "ok");
}

#[tokio::test]
async fn llm_classifier_decides_and_falls_back_to_rules_on_garbage() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.classifier.mode = ClassifierMode::Llm;
    })
    .await;
    // The model says the message is about the editor even though the rules would not.
    up.push(Reply::tokens(&["CODE_GENERATION", " EDITOR"]));
    up.push(Reply::tokens(&["done"]));
    let mut body = question("write a function that retries a lookup");
    body["user"] = json!(user_field(SELECTION, OPEN_FILE));
    ask(&gw, body.clone()).await;
    let requests = up.requests();
    let classify_prompt = &upstream_messages(&requests[requests.len() - 2])[0].1;
    assert!(classify_prompt.contains("<editor_selection>"));
    assert!(classify_prompt.contains("Latest message: write a function that retries a lookup"));
    let generation = prompt_text(&requests[requests.len() - 1]);
    assert!(
        generation.contains(SELECTION),
        "EDITOR from the model puts the code in"
    );

    // An answer that is not two words: the rules decide (CODE_GENERATION, NO_EDITOR).
    up.push(Reply::tokens(&["I think this is about code generation."]));
    up.push(Reply::tokens(&["done"]));
    ask(&gw, body).await;
    let generation = prompt_text(&up.last_request());
    assert!(!generation.contains(SELECTION));
    assert!(generation.contains("Write the code the user asks for"));
}

#[tokio::test]
async fn plain_absent_and_malformed_user_fields_answer_without_editor_context() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let cases = [
        json!("alice@example.com"),
        Value::Null,
        json!("{\"selected_text\": \"bm90IGNsb3NlZA=="),
        json!("{\"selected_text\": \"%%% not base64 %%%\", \"editor_content\": 42}"),
        json!({"selected_text": b64("fix(me)")}),
    ];
    for user in cases {
        let mut body = question("explain this code");
        if !user.is_null() {
            body["user"] = user.clone();
        }
        let response = ask(&gw, body).await;
        assert_eq!(
            response["choices"][0]["message"]["content"],
            "Hello from upstream"
        );
        let has_selection = prompt_text(&up.last_request()).contains("<selected_code>");
        // Only the lenient object form carries a readable selection.
        assert_eq!(has_selection, user.is_object(), "user = {user}");
    }
}

#[tokio::test]
async fn a_tiny_window_cuts_context_proportionally_and_keeps_headers() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.assistant.context_tokens = 900;
        s.assistant.answer_reserve_tokens = 200;
    })
    .await;
    let big_selection = format!("{SELECTION}\n{}", "    log(\"step\")\n".repeat(400));
    let mut body = question("why is this not catching my error?");
    body["user"] = json!(user_field(&big_selection, OPEN_FILE));
    ask(&gw, body).await;
    let request = up.last_request();
    // Ollama is told the window the prompt was fitted to.
    assert_eq!(request.body["options"]["num_ctx"], 900);
    let system = system_prompt(&request);
    let whole = prompt_text(&request);
    assert!(whole.contains("<selected_code>") && whole.contains("</selected_code>"));
    assert!(whole.contains("characters cut to fit the context window"));
    assert!(
        system.starts_with("You are Brunix"),
        "the system prompt is never cut"
    );
    assert!(
        !system.contains("<knowledge>"),
        "nothing left for lower priorities"
    );
    let prompt_chars: usize = upstream_messages(&request)
        .iter()
        .map(|m| m.1.chars().count())
        .sum();
    assert!(prompt_chars / 4 + 200 <= 900, "{prompt_chars} characters");
}

#[tokio::test]
async fn sources_ride_on_the_last_chunk_and_the_ollama_final_line() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let mut body = question("Which environment variable overrides the server port?");
    body["stream"] = json!(true);
    let (_, _, text) = post(&gw.url("/v1/chat/completions"), body.clone()).await;
    let events = sse_events(&text);
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (last, rest) = chunks.split_last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["sources"][0]["file"], "docs/en/deployment.md");
    assert!(rest.iter().all(|c| c.get("sources").is_none()));

    body["stream_options"] = json!({"include_usage": true});
    let (_, _, text) = post(&gw.url("/v1/chat/completions"), body.clone()).await;
    let events = sse_events(&text);
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(last["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(last["sources"][0]["file"], "docs/en/deployment.md");

    let (_, _, text) = post(&gw.url("/api/chat"), body.clone()).await;
    let lines = ndjson_lines(&text);
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(last["sources"][0]["file"], "docs/en/deployment.md");

    body["stream"] = json!(false);
    let (_, _, text) = post(&gw.url("/api/chat"), body).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["sources"][0]["file"], "docs/en/deployment.md");

    // Passthrough models have no sources.
    let gw = Gateway::start(&up, Provider::Ollama, |s| s.assistant.passthrough = true).await;
    let (_, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("sources").is_none());
}

#[tokio::test]
async fn cite_sources_lists_them_after_the_answer() {
    let up = ScriptedUpstream::start().await;
    let gw =
        Gateway::with_knowledge(&up, Provider::Ollama, |s| s.assistant.cite_sources = true).await;
    let response = ask(
        &gw,
        question("Which environment variable overrides the server port?"),
    )
    .await;
    let text = response["choices"][0]["message"]["content"]
        .as_str()
        .unwrap();
    assert!(
        text.starts_with("Hello from upstream\n\nSources:\n- docs/en/deployment.md"),
        "{text}"
    );
}

fn turn(session: &str, content: &str) -> Value {
    let mut body = question(content);
    body["session_id"] = json!(session);
    body
}

#[tokio::test]
async fn sessions_remember_across_turns_and_restarts() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    up.push(Reply::tokens(&["Use ", "BRISA_PORT."]));
    ask(
        &gw,
        turn(
            "s-1",
            "Which environment variable overrides the server port?",
        ),
    )
    .await;
    ask(&gw, turn("s-1", "can you show me an example?")).await;
    let messages = upstream_messages(&up.last_request());
    assert_eq!(
        messages[1..],
        [
            (
                "user".into(),
                "Which environment variable overrides the server port?".into()
            ),
            ("assistant".into(), "Use BRISA_PORT.".into()),
            ("user".into(), "can you show me an example?".into()),
        ]
    );
    // Another session, and a request without one, see nothing of it.
    ask(&gw, turn("s-2", "hello")).await;
    assert_eq!(upstream_messages(&up.last_request()).len(), 2);
    ask(&gw, question("hello")).await;
    assert_eq!(upstream_messages(&up.last_request()).len(), 2);

    let gw = gw.restart().await;
    ask(&gw, turn("s-1", "and for the host?")).await;
    let messages = upstream_messages(&up.last_request());
    assert_eq!(
        messages.len(),
        1 + 4 + 1,
        "both earlier turns survived the restart"
    );
    assert_eq!(messages[4].1, "Hello from upstream");

    // A client that sends its own history keeps it; nothing is added twice.
    let body = json!({"model": "brunix", "session_id": "s-1", "messages": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "second"}]});
    ask(&gw, body).await;
    let messages = upstream_messages(&up.last_request());
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[1].1, "first");
}

#[tokio::test]
async fn concurrent_turns_of_one_session_run_in_order() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    up.push(Reply::Tokens {
        tokens: vec!["slow ".into(), "first ".into(), "answer".into()],
        delay: Duration::from_millis(150),
        finish: "stop",
    });
    up.push(Reply::tokens(&["second answer"]));
    let first = tokio::spawn({
        let url = gw.url("/v1/chat/completions");
        async move { post(&url, turn("busy", "first question")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = post(
        &gw.url("/v1/chat/completions"),
        turn("busy", "second question"),
    )
    .await;
    let first = first.await.unwrap();
    assert_eq!(first.0, 200);
    assert_eq!(second.0, 200);
    let second: Value = serde_json::from_str(&second.2).unwrap();
    assert_eq!(second["choices"][0]["message"]["content"], "second answer");
    // The second turn waited for the first and saw it whole.
    let messages = upstream_messages(&up.last_request());
    assert_eq!(messages[1].1, "first question");
    assert_eq!(messages[2].1, "slow first answer");
    assert_eq!(messages[3].1, "second question");
    ask(&gw, turn("busy", "third")).await;
    assert_eq!(upstream_messages(&up.last_request()).len(), 1 + 4 + 1);
}

#[tokio::test]
async fn a_disconnect_mid_stream_saves_the_partial_answer_as_interrupted() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    up.push(Reply::Endless(Duration::from_millis(20)));
    let mut body = turn("cut", "tell me everything");
    body["stream"] = json!(true);
    let mut response = client()
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let seen = read_some(&mut response, 600).await;
    assert!(seen.contains("\"content\""));
    drop(response);
    assert!(
        eventually(5, || up.cancelled() == 1).await,
        "the upstream was cancelled"
    );

    ask(&gw, turn("cut", "go on")).await;
    let messages = upstream_messages(&up.last_request());
    assert_eq!(messages[1].1, "tell me everything");
    let (role, partial) = &messages[2];
    assert_eq!(role, "assistant");
    assert!(partial.ends_with("[answer interrupted]"), "{partial}");
    assert!(
        partial.len() > "[answer interrupted]".len() + 1,
        "what was streamed is kept"
    );
    assert_eq!(messages[3].1, "go on");
}

#[tokio::test]
async fn ollama_requests_carry_session_id_and_editor_context_too() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let body = json!({"model": "brunix:latest", "stream": false, "session_id": "o-1",
        "user": user_field(SELECTION, ""),
        "messages": [{"role": "user", "content": "¿qué hace esto?"}]});
    let (status, _, text) = post(&gw.url("/api/chat"), body).await;
    assert_eq!(status, 200, "{text}");
    assert!(prompt_text(&up.last_request()).contains(SELECTION));
    let body = json!({"model": "brunix", "stream": false, "session_id": "o-1",
        "messages": [{"role": "user", "content": "gracias"}]});
    post(&gw.url("/api/chat"), body).await;
    let messages = upstream_messages(&up.last_request());
    assert_eq!(messages[1].1, "¿qué hace esto?");
}

#[tokio::test]
async fn ask_command_streams_the_answer_and_lists_sources() {
    let up = ScriptedUpstream::start().await;
    // The gateway builds (and keeps, while it lives) a data_dir with the example
    // knowledge; `ask` without --session reads it alongside.
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let data_dir = gw.settings.data_dir.clone();
    up.push(Reply::tokens(&["Set ", "BRISA_PORT."]));
    let root = up.root();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(gateway_binary())
            .args([
                "ask",
                "Which environment variable overrides the server port?",
            ])
            .args(["--selection", "let port = env(\"BRISA_PORT\")"])
            .env("ASSIST__LLM__BASE_URL", root)
            .env("ASSIST__LLM__MODEL", UPSTREAM_MODEL)
            .env("ASSIST__DATA_DIR", &data_dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with("Set BRISA_PORT.\n\nSources:\n  [1] docs/en/deployment.md"),
        "{stdout}"
    );
    let prompt = system_prompt(&up.last_request());
    assert!(
        !prompt.contains("BRISA_PORT\")"),
        "the question is not about the selection"
    );
    drop(gw);
}

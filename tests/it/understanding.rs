//! What a turn means, through `/v1/chat/completions` as IDE clients send it (the editor
//! context in `user`, base64), asserted on what the upstream model receives: the selection
//! reaches it exactly when the message is about it (the reference documents' own sentences,
//! verbatim, with the decisions the documents give them; the ways developers really ask),
//! a greeting in front of a question does not stop the search, a follow-up is searched
//! with its subject from the turn before, and every decision is logged and counted.

use assist_gateway::config::Provider;
use base64::Engine;
use serde_json::{json, Value};

use crate::support::*;

const SELECTION: &str = "let ep = registerEndpoint(\"GET\", \"/books/{id}\", get_book)\naddParam(ep, \"id\", Int, from: \"path\")\n    |> addResult(200, Book, \"the book\")";
const OPEN_FILE: &str = "/// GET /users/{id}\nasync fn get_user(req: Request) -> Response {\n    let id = req.param(\"id\")\n    if id == null { return status(400) }\n    let user = ormSelectOne(\"users\", {\"id\": id})\n    return status(200, user)\n}\n";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn body(message: &str, selection: &str, open_file: &str) -> Value {
    json!({"model": "brunix", "stream": false,
        "messages": [{"role": "user", "content": message}],
        "user": json!({"editor_content": b64(open_file), "selected_text": b64(selection),
            "extra_context": b64("file: books.brisa, language: brisa")}).to_string()})
}

async fn ask(gw: &Gateway, body: Value) -> Value {
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// Each message with the code at hand: whether the code reached the model.
async fn reaches(gw: &Gateway, up: &ScriptedUpstream, cases: &[(&str, bool)], open_only: bool) {
    let mut wrong = Vec::new();
    for (message, want) in cases {
        let b = if open_only {
            body(message, "", OPEN_FILE)
        } else {
            body(message, SELECTION, OPEN_FILE)
        };
        ask(gw, b).await;
        let system = prompt_text(&up.last_request());
        let got = if open_only {
            system.contains("ormSelectOne(\"users\"")
        } else {
            system.contains("registerEndpoint(\"GET\", \"/books/{id}\"")
        };
        if got != *want {
            wrong.push(format!(
                "{message:?}: code reached the model: {got}, expected {want}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reference's own example sentences, verbatim (architecture §6 "Intent detection
/// examples", PRD-0002's scenarios and transport example, the API reference's calls),
/// with the decisions the documents give them. ("What is registerEndpoint?" and "Can you
/// show me an example?", sent by the API reference with no editor context, are in
/// `a_follow_up_is_searched_with_its_subject`.)
#[tokio::test]
async fn the_reference_documents_sentences_get_their_decisions() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    reaches(
        &gw,
        &up,
        &[
            ("Que significa AVAP?", false),
            ("dame un API de hello world", false),
            ("que hace este codigo?", true),
            ("fix this", true),
            ("como mejoro esto?", true),
            ("how does addVar work?", false),
            ("why is this not catching my error?", true),
            ("que hace este código?", true),
            ("why is this not catching the error?", true),
            ("Write an AVAP API that returns hello world", false),
            ("como funciona addVar?", false),
        ],
        false,
    )
    .await;
    // PRD-0002 scenario 2: a function open in the editor, nothing selected.
    reaches(
        &gw,
        &up,
        &[("what HTTP status codes can this return?", true)],
        true,
    )
    .await;
}

/// How developers ask about what they selected: pointing at it, asking how it behaves,
/// or giving a bare instruction, in English and Spanish; and the general questions that
/// merely arrive with a selection.
#[tokio::test]
async fn the_selection_reaches_the_model_when_the_message_is_about_it() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    reaches(
        &gw,
        &up,
        &[
            ("what is wrong with this?", true),
            ("add logging to this", true),
            ("what does it do?", true),
            ("explain", true),
            ("refactor", true),
            ("can this return null?", true),
            ("tests pls", true),
            ("¿por qué falla?", true),
            ("optimízalo", true),
            ("escribe un test para esto", true),
            ("lgtm?", true),
            ("is the id param required here?", true),
            ("what does get_book return when the id is missing?", true),
            ("How do I configure the server port?", false),
            ("¿Cómo cancelo una tarea si tarda demasiado?", false),
            ("write a function that parses ISO dates", false),
            ("thanks!", false),
        ],
        false,
    )
    .await;
    reaches(
        &gw,
        &up,
        &[
            ("explain this handler", true),
            ("can get_user return 500?", true),
            ("How do I declare a path parameter for an endpoint?", false),
        ],
        true,
    )
    .await;
}

/// A question with a greeting, thanks or "ok" in front is a question: it is searched.
/// Small talk alone is not.
#[tokio::test]
async fn a_greeting_does_not_swallow_the_question() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let searched = |v: &Value| !v["sources"].as_array().unwrap().is_empty();
    for message in [
        "hey, how do I register an endpoint?",
        "Great, how do I configure retries?",
        "is ormSelect ok for pagination?",
        "Is there a nice way to paginate results?",
        "hola, ¿cómo creo un endpoint?",
        "gracias! ¿y cómo hago una migración?",
    ] {
        let v = ask(&gw, body(message, "", "")).await;
        assert!(searched(&v), "{message}: not searched");
    }
    for message in [
        "thanks!",
        "hola",
        "ok 👍",
        "genial, gracias",
        "say that again, shorter",
    ] {
        let v = ask(&gw, body(message, "", "")).await;
        assert!(!searched(&v), "{message}: searched");
    }
}

/// "Can you show me an example?" after "What is registerEndpoint?" (the API reference's own
/// pair) is searched with the turn before: the endpoints guide comes back, whether the
/// history comes in the request or from the session.
#[tokio::test]
async fn a_follow_up_is_searched_with_its_subject() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let files = |v: &Value| -> Vec<String> {
        v["sources"]
            .as_array()
            .unwrap()
            .iter()
            .take(3)
            .map(|s| s["file"].as_str().unwrap().to_string())
            .collect()
    };
    // The history in the request (continue, Open WebUI).
    let v = ask(
        &gw,
        json!({"model": "brunix", "stream": false, "messages": [
            {"role": "user", "content": "What is registerEndpoint?"},
            {"role": "assistant", "content": "It registers a route."},
            {"role": "user", "content": "Can you show me an example?"}]}),
    )
    .await;
    assert!(
        files(&v).iter().any(|f| f == "docs/en/endpoints.md"),
        "{:?}",
        files(&v)
    );
    // The history from the session.
    let turn = |content: &str| {
        json!({"model": "brunix", "stream": false, "session_id": "follow",
            "messages": [{"role": "user", "content": content}]})
    };
    ask(&gw, turn("¿Cómo cancelo una tarea si tarda demasiado?")).await;
    let v = ask(&gw, turn("¿me das un ejemplo?")).await;
    assert!(
        files(&v)
            .iter()
            .any(|f| f == "docs/es/tareas-asincronas.md"),
        "{:?}",
        files(&v)
    );
}

/// With the model rewriting queries (`reformulator.mode = "llm"`), a follow-up the rules
/// resolve from the history keeps their query and costs no model call; a question that
/// carries its own subject is still rewritten.
#[tokio::test]
async fn with_the_llm_reformulator_a_resolved_follow_up_asks_no_model() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.reformulator.mode = assist_gateway::config::ReformulatorMode::Llm;
    })
    .await;
    let history = |last: &str| {
        json!({"model": "brunix", "stream": false, "messages": [
            {"role": "user", "content": "What is registerEndpoint?"},
            {"role": "assistant", "content": "It registers a route."},
            {"role": "user", "content": last}]})
    };
    up.push(Reply::tokens(&["Here is one."]));
    let v = ask(&gw, history("Can you show me an example?")).await;
    assert_eq!(v["choices"][0]["message"]["content"], "Here is one.");
    assert_eq!(up.requests().len(), 1, "only the answer went upstream");
    let files: Vec<&str> = v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .map(|s| s["file"].as_str().unwrap())
        .collect();
    assert!(files.contains(&"docs/en/endpoints.md"), "{files:?}");

    up.push(Reply::tokens(&["configure server port"]));
    up.push(Reply::tokens(&["Set it in the config."]));
    let v = ask(&gw, history("How do I configure the server port?")).await;
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Set it in the config."
    );
    assert_eq!(up.requests().len(), 3, "a rewrite, then the answer");
}

/// Each turn's log line says the decisions and the rules that made them (never the
/// text), and `assist_turn_decisions_total` counts them.
#[tokio::test]
async fn decisions_are_logged_and_counted() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Ollama, |_| {}).await;
    let client = client();
    for message in ["explain", "thanks!"] {
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .json(&body(message, SELECTION, ""))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let metrics = client
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            r#"assist_turn_decisions_total{decision="editor",value="yes",rule="bare-instruction"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"assist_turn_decisions_total{decision="retrieve",value="no",rule="greeting-only"} 1"#
        ),
        "{metrics}"
    );
    let log = gw.stop();
    let line = log
        .lines()
        .find(|l| l.contains("\"stage\":\"classify\"") && l.contains("bare-instruction"))
        .unwrap_or_else(|| panic!("no classify line: {log}"));
    assert!(line.contains("\"editor\":\"EDITOR\""), "{line}");
    assert!(
        !log.contains("registerEndpoint(\\\"GET\\\""),
        "code in the log"
    );
}

/// The benchmark of IDE turns (`examples/eval/turns*.jsonl`: 1,100 turns, English and
/// Spanish) through the pipeline's own stages over `examples/knowledge`: the figures
/// issue 35 asks for hold, in each language.
#[tokio::test]
async fn the_turns_benchmark_holds_its_figures() {
    use assist_gateway::eval::turns::{evaluate, load_dataset, summarize, table};
    let up = ScriptedUpstream::start().await;
    let (settings, _data) = test_settings(&up, Provider::Ollama, true, |_| {}).await;
    let parts = assist_gateway::app::pipeline(&settings, false).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/eval");
    let mut turns = Vec::new();
    for name in [
        "turns.jsonl",
        "turns-heldout-1.jsonl",
        "turns-heldout-2.jsonl",
        "turns-heldout-3.jsonl",
        "turns-heldout-4.jsonl",
        "turns-heldout-5.jsonl",
    ] {
        turns.extend(load_dataset(&dir.join(name)).unwrap());
    }
    assert!(turns.len() >= 1100, "{} turns", turns.len());
    let outcomes = evaluate(&parts.pipeline, &parts.retriever, &turns)
        .await
        .unwrap();
    let figures = summarize(&outcomes);
    println!("{}", table(&figures, &outcomes));
    let group = |name: &str| figures.iter().find(|f| f.group == name).unwrap();
    let all = group("all");
    assert!(all.editor_recall.unwrap() >= 0.97, "{all:?}");
    assert!(all.editor_precision.unwrap() >= 0.90, "{all:?}");
    assert!(all.routing >= 0.97, "{all:?}");
    let (en, es) = (group("lang=en"), group("lang=es"));
    for (a, b) in [
        (en.editor_recall, es.editor_recall),
        (en.editor_precision, es.editor_precision),
        (Some(en.routing), Some(es.routing)),
    ] {
        assert!((a.unwrap() - b.unwrap()).abs() <= 0.03, "{en:?}\n{es:?}");
    }
    let followups = group("kind=followup");
    assert!(
        followups.recall_at_3.unwrap() >= followups.before_recall_at_3.unwrap() - 0.05,
        "{followups:?}"
    );
}

/// Task requests, half English and half Spanish, each set written by an author who never
/// saw the rules, over half with words of time, leaving or thanks ("apagar la máquina
/// dentro de diez minutos"), are searched, not taken for small talk.
/// `turns-tasks.jsonl` (320) and `turns-tasks-2.jsonl` (320) are training sets now (the
/// rules were mended on their misses): every request is searched. `turns-tasks-3.jsonl`
/// (300) is held out: its first run is the figure required (0.987).
#[tokio::test]
async fn task_requests_are_searched_whatever_words_of_time_they_hold() {
    use assist_gateway::eval::turns::{evaluate, load_dataset, summarize, table};
    let up = ScriptedUpstream::start().await;
    let (settings, _data) = test_settings(&up, Provider::Ollama, true, |_| {}).await;
    let parts = assist_gateway::app::pipeline(&settings, false).unwrap();
    for (set, size, least) in [
        ("turns-tasks.jsonl", 320, 1.0),
        ("turns-tasks-2.jsonl", 320, 1.0),
        ("turns-tasks-3.jsonl", 300, 0.985),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/eval")
            .join(set);
        let turns = load_dataset(&path).unwrap();
        assert_eq!(turns.len(), size, "{set}");
        let outcomes = evaluate(&parts.pipeline, &parts.retriever, &turns)
            .await
            .unwrap();
        let figures = summarize(&outcomes);
        println!("{set}\n{}", table(&figures, &outcomes));
        let all = figures.iter().find(|f| f.group == "all").unwrap();
        assert!(all.routing >= least, "{set}: {all:?}");
    }
}

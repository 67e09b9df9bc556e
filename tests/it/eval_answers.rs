//! Answer evaluation end to end: golden questions through the real pipeline (BM25 over
//! `examples/knowledge`, answers from a scripted upstream), scored by a scripted judge
//! whose judgements are queued in the order the evaluator asks for them:
//! statements → their verdicts → questions written back → same-question verdicts →
//! context recall → context precision.

use std::path::Path;

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider, Settings};
use assist_gateway::eval::answers::{self, judge::Judge, EvalResponse, Evaluator, Golden};
use serde_json::{json, Value};

pub(crate) fn knowledge() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/knowledge")
}

/// Settings answering through `answer`, judged by `judge`, with examples/knowledge ingested
/// into a fresh data_dir; `top_k` chunks reach each answer.
pub(crate) async fn settings(
    answer: &ScriptedUpstream,
    judge: &ScriptedUpstream,
    tweak: impl FnOnce(&mut Settings),
) -> (tempfile::TempDir, Settings) {
    let data = tempfile::tempdir().unwrap();
    let mut s = Settings::load_without_env(None).unwrap();
    s.data_dir = data.path().to_path_buf();
    s.llm.provider = Provider::Ollama;
    s.llm.base_url = answer.root();
    s.llm.model = UPSTREAM_MODEL.into();
    s.llm.first_byte_timeout = std::time::Duration::from_secs(5);
    s.judge.provider = Provider::Ollama;
    s.judge.base_url = Some(judge.root());
    s.judge.model = Some(UPSTREAM_MODEL.into());
    s.judge.timeout = std::time::Duration::from_secs(10);
    s.retrieval.top_k = 3;
    tweak(&mut s);
    s.validate().unwrap();
    assist_gateway::app::ingest(&s, &[knowledge()], false, &assist_gateway::ingest::Quiet)
        .await
        .unwrap();
    (data, s)
}

pub(crate) async fn evaluate(s: &Settings, questions: &[Golden]) -> EvalResponse {
    let parts = assist_gateway::app::pipeline(s, false).unwrap();
    let judge = Judge::from_settings(&s.judge, &s.llm, &s.assistant, None).unwrap();
    let evaluator = Evaluator {
        pipeline: &parts.pipeline,
        judge: &judge,
        embedder: parts.embedder.clone(),
        answer_max_tokens: None,
        answer_model: s.llm.model.clone(),
        index: answers::index_name(s),
    };
    evaluator
        .run(questions, &indicatif::ProgressBar::hidden())
        .await
        .unwrap()
}

pub(crate) fn golden(id: &str, category: &str, question: &str, ground_truth: &str) -> Golden {
    Golden {
        id: id.into(),
        category: category.into(),
        question: question.into(),
        ground_truth: ground_truth.into(),
        lang: None,
        selected_text: None,
        editor_content: None,
        extra_context: None,
    }
}

pub(crate) const PORT_Q: &str = "Which environment variable overrides the server port?";
pub(crate) const PORT_GT: &str =
    "BRISA_SERVER_PORT overrides server.port. Environment values take precedence over brisa.toml.";

pub(crate) fn says(reply: Value) -> Reply {
    Reply::tokens(&[&reply.to_string()])
}

pub(crate) fn prompt_of(r: &Recorded) -> String {
    r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-4)
}

#[tokio::test]
async fn all_none_and_partly_supported_answers_score_as_computed_by_hand() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |_| {}).await;
    for answer in [
        "Set BRISA_SERVER_PORT.",
        "Nobody knows.",
        "Use BRISA_SERVER_PORT; it wins.",
    ] {
        up.push(Reply::tokens(&[answer]));
    }
    // q1: everything supported and useful.
    judge.push(says(json!({"statements": ["s1", "s2"]})));
    judge.push(says(json!({"verdicts": [1, 1]})));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    judge.push(says(json!({"verdicts": [1, 1]})));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    // q2: nothing supported, a noncommittal answer (no same-question call), nothing useful.
    judge.push(says(json!({"statements": ["s1", "s2", "s3"]})));
    judge.push(says(json!({"verdicts": [0, 0, 0]})));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 1}),
    ));
    judge.push(says(json!({"verdicts": [0, 0]})));
    judge.push(says(json!({"verdicts": [0, 0, 0]})));
    // q3: partly: 3 of 4 statements, 2 of 3 questions, 1 of 2 sentences, useful at ranks 2, 3.
    judge.push(says(json!({"statements": ["a", "b", "c", "d"]})));
    judge.push(says(json!({"verdicts": [1, 1, 0, 1]})));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 1, 0]})));
    judge.push(says(json!({"verdicts": [1, 0]})));
    judge.push(says(json!({"verdicts": [0, 1, 1]})));

    let qs = [
        golden("all", "deploy", PORT_Q, PORT_GT),
        golden("none", "deploy", PORT_Q, PORT_GT),
        golden("partial", "other", PORT_Q, PORT_GT),
    ];
    let r = evaluate(&s, &qs).await;

    assert_eq!(r.status, "ok");
    assert_eq!(r.questions_evaluated, 3);
    let d = &r.details;
    assert_eq!(d.iter().map(|d| d.n_chunks).collect::<Vec<_>>(), [3, 3, 3]);
    assert_eq!(
        (
            d[0].faithfulness,
            d[0].answer_relevancy,
            d[0].context_recall,
            d[0].context_precision
        ),
        (Some(1.0), Some(1.0), Some(1.0), Some(1.0))
    );
    assert_eq!((d[0].global_score, d[1].global_score), (1.0, 0.0));
    assert_eq!(
        (
            d[1].faithfulness,
            d[1].answer_relevancy,
            d[1].context_recall,
            d[1].context_precision
        ),
        (Some(0.0), Some(0.0), Some(0.0), Some(0.0))
    );
    assert_eq!(d[2].faithfulness, Some(0.75));
    assert_eq!(d[2].answer_relevancy, Some(0.6667));
    assert_eq!(d[2].context_recall, Some(0.5));
    // RAGAS: (precision@2 · 1 + precision@3 · 1) / 2 = (1/2 + 2/3) / 2.
    assert_eq!(d[2].context_precision, Some(0.5833));
    assert_eq!(d[2].global_score, 0.625);
    assert!(d.iter().all(|d| d.missing.is_empty()));

    // Means over the questions; global = mean of the non-zero metrics.
    assert!(close(r.faithfulness, 1.75 / 3.0));
    assert!(close(r.answer_relevancy, (1.0 + 2.0 / 3.0) / 3.0));
    assert!(close(r.context_recall, 0.5));
    assert!(close(r.context_precision, (1.0 + 7.0 / 12.0) / 3.0));
    let expected = (1.75 / 3.0 + (5.0 / 3.0) / 3.0 + 0.5 + (19.0 / 12.0) / 3.0) / 4.0;
    assert!(
        (r.global_score - expected).abs() < 1e-4,
        "{}",
        r.global_score
    );
    assert_eq!(r.verdict, "INSUFFICIENT");
    assert_eq!(r.answer_relevancy_method, "judge");
    assert_eq!(
        (r.judge.calls, r.judge.malformed_replies, r.judge.missing),
        (17, 0, 0)
    );

    // The answers came from the pipeline: the question reached the answering model with
    // the retrieved knowledge, at temperature 0.
    let asked = up.requests();
    assert_eq!(asked.len(), 3);
    assert!(prompt_of(&asked[0]).contains("BRISA_SERVER_PORT"));
    assert_eq!(asked[0].body["options"]["temperature"], 0.0);
    // The judge saw the answer's statements with the retrieved context, asked for JSON.
    let judged = judge.requests();
    assert_eq!(judged.len(), 17);
    assert!(prompt_of(&judged[0]).contains("Set BRISA_SERVER_PORT."));
    let verify = prompt_of(&judged[1]);
    assert!(verify.contains("1. s1\n2. s2"), "{verify}");
    assert!(verify.contains("docs/en/deployment.md"), "{verify}");
    assert_eq!(judged[1].body["format"], "json");
    // Context recall judges the ground truth's two sentences.
    let recall = prompt_of(&judged[4]);
    assert!(recall.contains("1. BRISA_SERVER_PORT overrides server.port.\n2. Environment values"));
}

#[tokio::test]
async fn a_malformed_judgement_is_retried_then_reported_missing() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |_| {}).await;
    up.push(Reply::tokens(&["Set BRISA_SERVER_PORT."]));
    // Statements: prose first (malformed), then good on the retry.
    judge.push(Reply::tokens(&["Sure! The statements are: s1, s2."]));
    judge.push(says(json!({"statements": ["s1", "s2"]})));
    // Verdicts: the wrong count twice → missing.
    judge.push(says(json!({"verdicts": [1]})));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    judge.push(says(json!({"verdicts": [1, 1]})));
    judge.push(says(json!({"verdicts": [1, 0, 0]})));

    let r = evaluate(&s, &[golden("q", "deploy", PORT_Q, PORT_GT)]).await;

    let d = &r.details[0];
    assert_eq!(d.faithfulness, None, "a missing judgement is no score");
    assert_eq!(d.missing, ["faithfulness"]);
    assert!(d.notes[0].contains("unusable twice"), "{:?}", d.notes);
    assert_eq!(r.faithfulness, None);
    assert_eq!(r.scored.faithfulness, 0);
    assert_eq!(r.missing_judgements.faithfulness, 1);
    assert_eq!(
        (r.judge.calls, r.judge.malformed_replies, r.judge.missing),
        (8, 3, 1)
    );
    // The other metrics still count, and the global score ignores the missing one.
    assert_eq!(
        (d.answer_relevancy, d.context_recall, d.context_precision),
        (Some(1.0), Some(1.0), Some(1.0))
    );
    assert_eq!(r.global_score, 1.0);
    assert_eq!(r.verdict, "EXCELLENT");

    // The retry shows the model its reply and what was wrong with it.
    let judged = judge.requests();
    let retry = judged[1].body["messages"].as_array().unwrap();
    assert_eq!(retry.len(), 3);
    assert_eq!(retry[1]["role"], "assistant");
    assert_eq!(retry[1]["content"], "Sure! The statements are: s1, s2.");
    assert!(retry[2]["content"]
        .as_str()
        .unwrap()
        .contains("cannot be used"));
    let second = judged[3].body["messages"].as_array().unwrap();
    assert!(second[2]["content"]
        .as_str()
        .unwrap()
        .contains("1 verdicts for 2 items"));

    // The table says it too.
    let table = answers::table(&r);
    assert!(table.contains("1 judgements missing"), "{table}");
}

#[tokio::test]
async fn a_judge_that_never_gives_a_usable_judgement_gives_no_verdict() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |_| {}).await;
    up.push(Reply::tokens(&["Set BRISA_SERVER_PORT."]));
    judge.set_default(Reply::tokens(&["The answer looks fine to me."]));

    let r = evaluate(&s, &[golden("q", "deploy", PORT_Q, PORT_GT)]).await;

    assert_eq!(
        (
            r.faithfulness,
            r.answer_relevancy,
            r.context_recall,
            r.context_precision
        ),
        (None, None, None, None)
    );
    assert_eq!(r.details[0].missing.len(), 4, "{:?}", r.details[0].missing);
    assert_eq!(r.verdict, "UNSCORED", "no measurement, so no failing grade");
    let table = answers::table(&r);
    assert!(table.contains("UNSCORED"), "{table}");
    assert!(table.contains("not a measurement"), "{table}");
}

#[tokio::test]
async fn an_empty_context_scores_zero_without_asking_the_judge_about_it() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |_| {}).await;
    up.push(Reply::tokens(&["Qwzx is a plokij."]));
    judge.push(says(json!({"statements": ["Qwzx is a plokij."]})));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 0, 1]})));

    let r = evaluate(
        &s,
        &[golden(
            "none",
            "x",
            "Qwzx vbnmkj plokij?",
            "Nothing documents it.",
        )],
    )
    .await;

    let d = &r.details[0];
    assert_eq!(d.n_chunks, 0);
    assert_eq!(
        d.faithfulness,
        Some(0.0),
        "no context supports any statement"
    );
    assert_eq!(d.answer_relevancy, Some(0.6667));
    assert_eq!(
        (d.context_recall, d.context_precision),
        (Some(0.0), Some(0.0))
    );
    assert!(
        d.notes.iter().any(|n| n.contains("no context")),
        "{:?}",
        d.notes
    );
    assert_eq!(
        judge.requests().len(),
        3,
        "no verdicts asked without context"
    );
    assert_eq!(r.global_score, 0.6667);
    assert_eq!(r.verdict, "ACCEPTABLE");
}

#[tokio::test]
async fn verdicts_at_the_thresholds() {
    for (supported, verdict) in [(4, "EXCELLENT"), (3, "ACCEPTABLE")] {
        let up = ScriptedUpstream::start().await;
        let judge = ScriptedUpstream::start().await;
        let (_data, s) = settings(&up, &judge, |_| {}).await;
        up.push(Reply::tokens(&["An answer."]));
        let verdicts: Vec<u8> = (0..5).map(|i| u8::from(i < supported)).collect();
        judge.push(says(json!({"statements": ["a", "b", "c", "d", "e"]})));
        judge.push(says(json!({ "verdicts": verdicts })));
        // Noncommittal, nothing recalled, nothing useful: zeros, left out of the global score.
        judge.push(says(
            json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 1}),
        ));
        judge.push(says(json!({"verdicts": [0, 0]})));
        judge.push(says(json!({"verdicts": [0, 0, 0]})));
        let r = evaluate(&s, &[golden("q", "x", PORT_Q, PORT_GT)]).await;
        let expected = f64::from(supported) / 5.0;
        assert_eq!(r.faithfulness, Some(expected));
        assert_eq!(r.global_score, expected, "mean of the non-zero metrics");
        assert_eq!(r.verdict, verdict, "at {expected}");
    }
}

#[tokio::test]
async fn editor_questions_send_the_selection_and_judge_against_it() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |_| {}).await;
    let selection = "let retries = 3\nretries += 1";
    up.push(Reply::tokens(&["retries is immutable."]));
    judge.push(says(json!({"statements": ["retries is immutable."]})));
    judge.push(says(json!({"verdicts": [1]})));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    judge.push(says(json!({"verdicts": [1]})));
    judge.push(says(json!({"verdicts": [1, 0, 0]})));
    let mut g = golden(
        "ed",
        "editor",
        "why does this code not compile?",
        "Compound operators are only valid on let mut bindings.",
    );
    g.selected_text = Some(selection.into());
    let r = evaluate(&s, &[g]).await;
    assert_eq!(r.details[0].faithfulness, Some(1.0));
    assert!(
        prompt_of(&up.last_request()).contains(selection),
        "the pipeline put the selection in the prompt"
    );
    let verify = prompt_of(&judge.requests()[1]);
    assert!(verify.contains(&format!("[selected code in the editor]\n{selection}")));
}

#[tokio::test]
async fn answer_relevancy_uses_the_embedder_when_there_is_one() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.embeddings.base_url = Some(up.root());
        s.judge.relevancy_questions = 2;
    })
    .await;
    // (No scripted answer: the scripted upstream's embedding route consumes queued
    // replies; the default answer is fine here.)
    judge.push(says(json!({"statements": ["s"]})));
    judge.push(says(json!({"verdicts": [1]})));
    judge.push(says(
        json!({"questions": [PORT_Q, "Xylophone?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 1]})));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    let r = evaluate(&s, &[golden("q", "x", PORT_Q, PORT_GT)]).await;
    // The scripted embedder's vectors are letter frequencies: cosine computed by hand.
    let (a, b) = (letter_vector(PORT_Q), letter_vector("Xylophone?"));
    let cos: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let expected = (1.0 + f64::from(cos)) / 2.0;
    assert_eq!(r.answer_relevancy_method, "embeddings");
    assert!(
        close(r.details[0].answer_relevancy, expected),
        "{:?} vs {expected}",
        r.details[0].answer_relevancy
    );
    assert_eq!(judge.requests().len(), 5, "no same-question call");
}

/// Settings where every count is one, so one judge reply fits every judgement.
pub(crate) fn one_of_each(s: &mut Settings, dataset: &Path) {
    s.retrieval.top_k = 1;
    s.judge.relevancy_questions = 1;
    s.eval.dataset = Some(dataset.to_path_buf());
}

pub(crate) const FITS_ALL: &str =
    r#"{"statements": ["s"], "verdicts": [1], "questions": ["q?"], "noncommittal": 0}"#;

/// A gateway over examples/knowledge whose evaluations run on `write_dataset`'s golden
/// questions with one of each count, judged by `judge` (every judgement `FITS_ALL`);
/// `tweak` sets the rest. The dataset lives as long as the returned folder.
pub(crate) async fn judged_gateway(
    up: &ScriptedUpstream,
    judge: &ScriptedUpstream,
    tweak: impl FnOnce(&mut Settings),
) -> (Gateway, tempfile::TempDir) {
    judge.set_default(Reply::tokens(&[FITS_ALL]));
    let dir = tempfile::tempdir().unwrap();
    let dataset = write_dataset(dir.path());
    let gw = Gateway::with_knowledge(up, Provider::Ollama, |s| {
        one_of_each(s, &dataset);
        s.judge.base_url = Some(judge.root());
        s.judge.model = Some(UPSTREAM_MODEL.into());
        tweak(s);
    })
    .await;
    (gw, dir)
}

pub(crate) fn write_dataset(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("golden.jsonl");
    let lines = [
        json!({"id": "d1", "category": "deployment", "question": PORT_Q, "ground_truth": "BRISA_SERVER_PORT overrides server.port."}),
        json!({"id": "d2", "category": "database", "question": "Does the ORM support joins?", "ground_truth": "No, ormSelect works on one table at a time."}),
    ];
    std::fs::write(
        &path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    path
}

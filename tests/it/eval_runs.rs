//! Answer evaluation as operators run it: `POST /v1/eval` (its shape, keys, one run at a
//! time, a run that stops when its client leaves), the HTML report against the JSON, the
//! shipped golden sets, the `eval answers` command, and a judge that refuses or dies.
//! Helpers shared with `eval_answers.rs`.

use std::path::Path;
use std::time::Duration;

use crate::support::*;
use assist_gateway::config::Provider;
use assist_gateway::eval::answers::{self, judge::Judge, Evaluator};
use serde_json::{json, Value};

use crate::eval_answers::*;

#[tokio::test]
async fn post_v1_eval_returns_the_reference_shape() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (gw, _dataset) = judged_gateway(&up, &judge, |_| {}).await;
    let (status, _, body) = post(&gw.url("/v1/eval"), json!({"category": "database"})).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["questions_evaluated"], 1);
    assert!(v["elapsed_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["judge_model"], UPSTREAM_MODEL);
    assert!(v["index"].as_str().unwrap().ends_with("index"));
    for m in [
        "faithfulness",
        "answer_relevancy",
        "context_recall",
        "context_precision",
        "global_score",
    ] {
        assert_eq!(v[m], 1.0, "{m}: {body}");
    }
    assert_eq!(v["verdict"], "EXCELLENT");
    let d = &v["details"][0];
    assert_eq!(d["id"], "d2");
    assert_eq!(d["category"], "database");
    assert_eq!(d["question"], "Does the ORM support joins?");
    assert_eq!(d["answer_preview"], "Hello from upstream");
    assert_eq!(d["n_chunks"], 1);
    assert_eq!(v["missing_judgements"]["faithfulness"], 0);
    // A report was written under data_dir/eval.
    let reports = std::fs::read_dir(gw.settings.data_dir.join("eval"))
        .unwrap()
        .count();
    assert_eq!(reports, 1);

    // limit picks the first questions; a long answer is previewed by its first 300
    // characters (not bytes); bad fields are 400s naming the field.
    let long = "año ".repeat(100);
    up.push(Reply::tokens(&[&long]));
    let (status, _, body) = post(&gw.url("/v1/eval"), json!({"limit": 1})).await;
    assert_eq!(status, 200, "{body}");
    let d = &serde_json::from_str::<Value>(&body).unwrap()["details"][0];
    assert_eq!(d["id"], "d1");
    let preview = d["answer_preview"].as_str().unwrap();
    assert_eq!(preview.chars().count(), 300);
    assert!(long.starts_with(preview));
    for (req, param) in [
        (json!({"limit": -1}), "limit"),
        (json!({"category": "nope"}), "category"),
        (json!({"index": "other"}), "index"),
        (json!({"categroy": "x"}), "categroy"),
    ] {
        let (status, _, body) = post(&gw.url("/v1/eval"), req.clone()).await;
        assert_eq!(status, 400, "{req}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(e["error"]["param"], param, "{body}");
    }
}

#[tokio::test]
async fn post_v1_eval_needs_a_key_and_a_dataset() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (gw, _dataset) = judged_gateway(&up, &judge, |s| {
        s.server.api_keys = vec!["k1".into()];
    })
    .await;
    let r = client()
        .post(gw.url("/v1/eval"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "authentication_error");
    assert!(judge.requests().is_empty(), "nothing ran");
    let r = client()
        .post(gw.url("/v1/eval"))
        .bearer_auth("k1")
        .json(&json!({"limit": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Without eval.dataset the endpoint says it is off.
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let (status, _, body) = post(&gw.url("/v1/eval"), json!({})).await;
    assert_eq!(status, 503, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["error"]["code"], "eval_not_configured");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("eval.dataset"));
}

#[tokio::test]
async fn a_second_evaluation_while_one_runs_gets_409() {
    let up = ScriptedUpstream::start().await;
    // Slow answers keep the first evaluation running.
    up.set_default(Reply::Tokens {
        tokens: vec!["Slow".into(), " answer".into()],
        delay: Duration::from_millis(400),
        finish: "stop",
    });
    let judge = ScriptedUpstream::start().await;
    let (gw, _dataset) = judged_gateway(&up, &judge, |_| {}).await;
    let url = gw.url("/v1/eval");
    let first = tokio::spawn({
        let url = url.clone();
        async move { post(&url, json!({})).await }
    });
    assert!(eventually(10, || !up.requests().is_empty()).await);
    let (status, _, body) = post(&url, json!({})).await;
    assert_eq!(status, 409, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["error"]["code"], "eval_in_progress");
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("already running"));

    let (status, _, body) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["questions_evaluated"],
        2
    );
    // Once it finished, the next one runs.
    let (status, _, body) = post(&url, json!({"limit": 1})).await;
    assert_eq!(status, 200, "{body}");
}

/// An evaluation whose client went away ran on to its end (minutes on a real model,
/// keeping the next one out with 409); it now stops with its client.
#[tokio::test]
async fn an_evaluation_stops_when_its_client_leaves() {
    let up = ScriptedUpstream::start().await;
    // Two questions of two seconds each at least: the abandoned one would run for long.
    up.set_default(Reply::Tokens {
        tokens: vec!["Slow".into(), " answer".into()],
        delay: Duration::from_millis(1000),
        finish: "stop",
    });
    let judge = ScriptedUpstream::start().await;
    let (gw, _dataset) = judged_gateway(&up, &judge, |_| {}).await;
    let url = gw.url("/v1/eval");
    let gone = client()
        .post(&url)
        .json(&json!({}))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up");
    // The evaluation stopped with it: the next one is not refused as already running.
    let mut status = 409;
    for _ in 0..10 {
        let (s, _, _) = post(&url, json!({"limit": 1})).await;
        status = s;
        if s != 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200);
    let answers_asked = up.requests().len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        up.requests().len(),
        answers_asked,
        "nothing of the abandoned evaluation runs on"
    );
}

#[tokio::test]
async fn the_html_report_shows_the_numbers_of_the_json() {
    use scraper::{Html, Selector};
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |_| {}).await;
    up.push(Reply::tokens(&["First <answer> & more."]));
    up.push(Reply::tokens(&["Second answer."]));
    // q1 partial; q2 with a missing faithfulness judgement.
    judge.push(says(json!({"statements": ["a", "b", "c", "d"]})));
    judge.push(says(json!({"verdicts": [1, 1, 0, 1]})));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 1, 0]})));
    judge.push(says(json!({"verdicts": [1, 0]})));
    judge.push(says(json!({"verdicts": [0, 1, 1]})));
    judge.push(Reply::tokens(&["not json"]));
    judge.push(Reply::tokens(&["still not json"]));
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 0, 0]})));
    judge.push(says(json!({"verdicts": [1, 1]})));
    judge.push(says(json!({"verdicts": [1, 0, 0]})));
    let r = evaluate(
        &s,
        &[
            golden("q-one", "deployment", PORT_Q, PORT_GT),
            golden(
                "q-two",
                "database",
                "Does the ORM support joins?",
                "No. Use a view.",
            ),
        ],
    )
    .await;

    let out = tempfile::tempdir().unwrap();
    answers::write_reports(out.path(), &r).unwrap();
    let json: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    let text = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    let doc = Html::parse_document(&text);
    let sel = |s: &str| Selector::parse(s).unwrap();
    let texts = |s: &str| -> Vec<String> {
        doc.select(&sel(s))
            .map(|e| e.text().collect::<String>().trim().to_string())
            .collect()
    };
    let shown = |v: &Value| match v.as_f64() {
        Some(x) => format!("{x:.4}"),
        None => "–".to_string(),
    };

    for m in [
        "faithfulness",
        "answer_relevancy",
        "context_recall",
        "context_precision",
        "global_score",
    ] {
        assert_eq!(
            texts(&format!("#summary td[data-metric={m}]")),
            [shown(&json[m])],
            "summary {m}"
        );
    }
    assert_eq!(texts("#verdict"), [json["verdict"].as_str().unwrap()]);
    assert_eq!(texts("#questions-evaluated"), ["2"]);
    for d in json["details"].as_array().unwrap() {
        let id = d["id"].as_str().unwrap();
        for m in [
            "context_recall",
            "context_precision",
            "answer_relevancy",
            "global_score",
        ] {
            assert_eq!(
                texts(&format!("#questions tr[data-id={id}] td[data-metric={m}]")),
                [shown(&d[m])],
                "{id} {m}"
            );
        }
        let faith = texts(&format!(
            "#questions tr[data-id={id}] td[data-metric=faithfulness]"
        ));
        if d["missing"].as_array().unwrap().is_empty() {
            assert_eq!(faith, [shown(&d["faithfulness"])]);
        } else {
            assert_eq!(
                faith,
                ["missing"],
                "a missing judgement is shown as missing"
            );
        }
        assert_eq!(
            texts(&format!(
                "#questions tr[data-id={id}] td[data-metric=n_chunks]"
            )),
            [d["n_chunks"].to_string()]
        );
    }
    // Per category, as computed from the details.
    assert_eq!(
        texts("#categories tr[data-category=deployment] td[data-metric=faithfulness]"),
        ["0.7500"]
    );
    assert_eq!(
        texts("#categories tr[data-category=database] td[data-metric=faithfulness]"),
        ["–"]
    );
    // The whole answer, escaped, with its sources; a chart per metric and per category.
    assert!(texts("#q-q-one pre.answer")[0] == "First <answer> & more.");
    assert!(text.contains("First &lt;answer&gt; &amp; more."));
    assert!(texts("#q-q-one li code").contains(&"docs/en/deployment.md".to_string()));
    assert_eq!(doc.select(&sel("svg")).count(), 4 + 2);
    // Self-contained: no scripts, stylesheets or anything fetched.
    assert_eq!(doc.select(&sel("script, link, img, iframe")).count(), 0);
    assert!(doc
        .select(&sel("[src], [href]"))
        .all(|e| e.value().attr("href").is_some_and(|h| h.starts_with('#'))));
}

#[test]
fn the_shipped_golden_sets_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/eval");
    let general = answers::load_dataset(&root.join("answers.jsonl")).unwrap();
    assert!(general.len() >= 30, "{}", general.len());
    for lang in ["en", "es"] {
        assert!(
            general
                .iter()
                .filter(|g| g.lang.as_deref() == Some(lang))
                .count()
                >= 10,
            "{lang}"
        );
    }
    let editor = answers::load_dataset(&root.join("editor.jsonl")).unwrap();
    assert!(editor.len() >= 10);
    assert!(editor
        .iter()
        .all(|g| g.selected_text.as_deref().is_some_and(|s| !s.is_empty())));
    assert!(
        editor.iter().any(|g| g.editor_content.is_some()),
        "some questions need the open file too"
    );
    assert_eq!(answers::select(general.clone(), "database", 2).len(), 2);
    assert!(answers::select(general, "no-such-category", 0).is_empty());
}

#[tokio::test]
async fn the_command_prints_the_table_and_writes_json_and_html() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    judge.set_default(Reply::tokens(&[FITS_ALL]));
    let (data, s) = settings(&up, &judge, |s| {
        s.retrieval.top_k = 1;
        s.judge.relevancy_questions = 1;
    })
    .await;
    let config = data.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n[llm]\nbase_url = {:?}\nmodel = {:?}\n[retrieval]\ntop_k = 1\n\
             [judge]\nbase_url = {:?}\nmodel = {:?}\nrelevancy_questions = 1\n",
            s.data_dir.display().to_string(),
            s.llm.base_url,
            UPSTREAM_MODEL,
            s.judge.base_url.as_deref().unwrap(),
            UPSTREAM_MODEL
        ),
    )
    .unwrap();
    let out = data.path().join("report");
    let dataset = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/eval/answers.jsonl");
    let output = tokio::process::Command::new(gateway_binary())
        .args(["eval", "answers", "--dataset"])
        .arg(&dataset)
        .args([
            "--category",
            "deployment",
            "--limit",
            "2",
            "--judge-model",
            UPSTREAM_MODEL,
            "--out",
        ])
        .arg(&out)
        .arg("--config")
        .arg(&config)
        .env_remove("ASSIST__LLM__BASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for want in [
        "faithfulness",
        "context_precision",
        "global_score",
        "verdict",
        "deployment",
    ] {
        assert!(stdout.contains(want), "{want} not in:\n{stdout}");
    }
    let json: Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["questions_evaluated"], 2);
    assert_eq!(json["details"][0]["id"], "en-deployment-01");
    // The shipped ground truths have two sentences; the one-verdict reply does not fit.
    assert_eq!(json["missing_judgements"]["context_recall"], 2);
    assert!(stdout.contains("judgements missing"));
    assert!(std::fs::read_to_string(out.join("report.html"))
        .unwrap()
        .contains("en-deployment-02"));
}

#[tokio::test]
async fn a_refused_judgement_is_missing_but_a_dead_judge_stops_the_run() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (_data, s) = settings(&up, &judge, |_| {}).await;
    // A prompt too long for the judge's window: refused twice → missing, the run goes on.
    let refused = Reply::Status {
        status: 400,
        body: r#"{"error":"prompt is longer than the context window"}"#.into(),
    };
    judge.push(refused.clone());
    judge.push(refused);
    judge.push(says(
        json!({"questions": ["q1?", "q2?", "q3?"], "noncommittal": 0}),
    ));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    judge.push(says(json!({"verdicts": [1, 1]})));
    judge.push(says(json!({"verdicts": [1, 1, 1]})));
    let r = evaluate(&s, &[golden("q", "x", PORT_Q, PORT_GT)]).await;
    assert_eq!(r.details[0].missing, ["faithfulness"]);
    assert!(
        r.details[0].notes[0].contains("refused"),
        "{:?}",
        r.details[0].notes
    );
    assert_eq!(r.global_score, 1.0);

    // A judge that is not there at all ends the evaluation with an error.
    let mut s = s.clone();
    s.judge.base_url = Some("http://127.0.0.1:9".into());
    let parts = assist_gateway::app::pipeline(&s, false).unwrap();
    let j = Judge::from_settings(&s.judge, &s.llm, &s.assistant, None).unwrap();
    let evaluator = Evaluator {
        pipeline: &parts.pipeline,
        judge: &j,
        embedder: None,
        answer_max_tokens: None,
        answer_model: s.llm.model.clone(),
        index: answers::index_name(&s),
    };
    let e = evaluator
        .run(
            &[golden("q", "x", PORT_Q, PORT_GT)],
            &indicatif::ProgressBar::hidden(),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("judge failed"), "{e}");
}

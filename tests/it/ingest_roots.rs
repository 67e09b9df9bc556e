//! `assist-gateway ingest` over several folders that hold files of the same name (two
//! translations of the same manual pages): every file keeps a source path of its own
//! (`man-es/ls.1.txt`, `man-en/ls.1.txt`), the summary's counts agree, both are found; a
//! single folder keeps the paths it always had; a clash left is reported, never silent.

use std::path::Path;

use crate::support::*;
use assist_gateway::config::{Provider, Settings};
use serde_json::{json, Value};

const LS_EN: &str = "LS(1)\n\nNAME\n    ls - list directory contents\n\nOPTIONS\n    --sort=WORD\n        sort by WORD instead of name: size, time, extension\n";
const LS_ES: &str = "LS(1)\n\nNOMBRE\n    ls - lista el contenido de directorios\n\nOPCIONES\n    --sort=PALABRA\n        ordena por PALABRA en vez de por nombre: size, time, extension\n";
const QUESTION: &str = "What does ls --sort do with size, time or extension?";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Runs the real `assist-gateway COMMAND --config <settings> ARGS…`; what it prints.
fn run(settings: &Settings, command: &[&str], args: &[&Path]) -> String {
    let config = settings.data_dir.join("ingest.toml");
    std::fs::write(&config, toml::to_string(settings).unwrap()).unwrap();
    let out = std::process::Command::new(gateway_binary())
        .args(command)
        .arg("--config")
        .arg(&config)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs the real `assist-gateway ingest` on these settings and roots; what it prints.
fn ingest(settings: &Settings, roots: &[&Path]) -> String {
    run(settings, &["ingest"], roots)
}

/// The ls manual page in Spanish and in English, in folders `man-es` and `man-en`.
fn translations() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let corpus = tempfile::tempdir().unwrap();
    let (es, en) = (corpus.path().join("man-es"), corpus.path().join("man-en"));
    write(&es.join("ls.1.txt"), LS_ES);
    write(&en.join("ls.1.txt"), LS_EN);
    (corpus, es, en)
}

/// The summary's "(files) … : N chunks written, M in the index" as (files part, N, M).
fn summary(out: &str) -> (String, u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("ingested "))
        .unwrap_or_else(|| panic!("no summary: {out}"));
    let (files, counts) = line.split_once(": ").unwrap();
    let mut parts = counts.split(", ");
    let number = |part: Option<&str>, unit: &str| -> u64 {
        part.and_then(|p| p.strip_suffix(unit))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    let written = number(parts.next(), " chunks written");
    let in_index = number(parts.next(), " in the index");
    (files.to_string(), written, in_index)
}

/// Asks the assistant; the files of the sources it answered with.
async fn sources(gw: &Gateway) -> Vec<String> {
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": QUESTION}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["file"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn two_roots_with_the_same_file_names_keep_both() {
    let up = ScriptedUpstream::start().await;
    let (settings, _data) = test_settings(&up, Provider::Ollama, false, |_| {}).await;
    let (_corpus, es, en) = translations();

    let out = ingest(&settings, &[&es, &en]);
    let (files, written, in_index) = summary(&out);
    assert_eq!(
        files, "ingested 2 files (0 unchanged, 0 removed, 0 skipped)",
        "{out}"
    );
    assert_eq!(
        written, in_index,
        "every chunk written is in the index: {out}"
    );
    assert!(written >= 2, "{out}");

    // Run again: the same paths, nothing to do.
    let out = ingest(&settings, &[&es, &en]);
    assert_eq!(
        summary(&out),
        (
            "ingested 0 files (2 unchanged, 0 removed, 0 skipped)".to_string(),
            0,
            in_index
        ),
        "{out}"
    );

    let gw = Gateway::with_settings(settings).await;
    let files = sources(&gw).await;
    assert!(
        files.contains(&"man-es/ls.1.txt".to_string())
            && files.contains(&"man-en/ls.1.txt".to_string()),
        "both pages, each under its folder: {files:?}"
    );
}

#[tokio::test]
async fn one_root_keeps_its_paths_and_a_clash_is_reported() {
    let up = ScriptedUpstream::start().await;
    let (settings, _data) = test_settings(&up, Provider::Ollama, false, |_| {}).await;
    let docs = tempfile::tempdir().unwrap();
    write(&docs.path().join("ls.1.txt"), LS_EN);
    // Two files whose source paths would both be `a/b.md`.
    write(&docs.path().join("a/b.md"), "# One\nThe first file.\n");
    write(&docs.path().join("a\\b.md"), "# Two\nThe second file.\n");

    let out = ingest(&settings, &[docs.path()]);
    let (files, written, in_index) = summary(&out);
    assert_eq!(
        files, "ingested 2 files (0 unchanged, 0 removed, 1 skipped)",
        "{out}"
    );
    assert_eq!(written, in_index, "{out}");
    assert!(
        out.contains("skipped 1: another file has the same source path"),
        "{out}"
    );

    let gw = Gateway::with_settings(settings).await;
    let files = sources(&gw).await;
    assert!(files.contains(&"ls.1.txt".to_string()), "{files:?}");
}

/// `eval retrieval` scores all questions, then each language and each kind the dataset
/// names: a question whose answer is only in the other language's files is its own group.
#[tokio::test]
async fn eval_retrieval_reports_each_language_and_kind() {
    let up = ScriptedUpstream::start().await;
    let (settings, _data) = test_settings(&up, Provider::Ollama, false, |_| {}).await;
    let (corpus, es, en) = translations();
    write(
        &en.join("cp.1.txt"),
        "CP(1)\n\nNAME\n    cp - copy files and directories\n",
    );
    ingest(&settings, &[&es, &en]);
    let dataset = corpus.path().join("questions.jsonl");
    let cases = [
        json!({"query": "ls --sort by size", "relevant": ["man-en/ls.1.txt"], "lang": "en", "kind": "same"}),
        json!({"query": "ordena por PALABRA", "relevant": ["man-es/ls.1.txt"], "lang": "es", "kind": "same"}),
        json!({"query": "copiar ficheros y directorios con cp", "relevant": ["man-en/cp.1.txt"], "lang": "es", "kind": "cross"}),
    ];
    let lines: Vec<String> = cases.iter().map(Value::to_string).collect();
    std::fs::write(&dataset, lines.join("\n")).unwrap();
    let dataset = dataset.as_path();
    let stdout = run(
        &settings,
        &["eval", "retrieval"],
        &[Path::new("--dataset"), dataset],
    );
    // group, mode, queries, recall@8, MRR@10, nDCG@10
    let row = |group: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(group))
            .unwrap_or_else(|| panic!("no {group} row: {stdout}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("all")[1..3], ["bm25", "3"], "{stdout}");
    assert_eq!(row("lang=en")[2], "1", "{stdout}");
    assert_eq!(row("lang=es")[2], "2", "{stdout}");
    assert_eq!(row("kind=same")[2], "2", "{stdout}");
    assert_eq!(row("kind=cross")[2], "1", "{stdout}");
    // Each language crossed with each kind.
    assert_eq!(row("lang=es,kind=same")[2], "1", "{stdout}");
    assert_eq!(row("lang=es,kind=cross")[2], "1", "{stdout}");
    assert_eq!(row("lang=en,kind=same")[2], "1", "{stdout}");
    // The same-language questions are found first (their words are in the file).
    assert_eq!(row("kind=same")[4], "1.000", "{stdout}");
}

//! The serving gateway keeps its knowledge current (`ingest::live`, `ingest::watch`):
//! `knowledge.sources` indexed at start while it answers, watched changes (edit, add,
//! delete, rename, a burst of 500, a folder gone) served within seconds while a client asks
//! every 0.25 s and no request fails, `ingest` beside it (with the embedded vector engine,
//! which one process may hold) handed over and served without a restart, a one-line edit
//! re-embedding only that file's changed chunks, and the operator routes behind
//! `server.admin_keys`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider, Settings};
use serde_json::{json, Value};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A page about one made-up word, so that a question naming it finds this page alone (the
/// question's other words are in no page).
pub(crate) fn page(word: &str) -> String {
    format!("# The {word} setting\n\nThe {word} setting decides how {word} requests are retried and logged.\n")
}

fn question(word: &str) -> String {
    format!("Tell me about {word}")
}

/// The files of the sources a question was answered with (a failed request panics).
async fn sources(gw: &Gateway, word: &str) -> Vec<String> {
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": question(word)}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["sources"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| s["file"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until a question about `word` is answered with (or, `false`, without) `file`;
/// how long it took.
pub(crate) async fn served(
    gw: &Gateway,
    word: &str,
    file: &str,
    present: bool,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    while started.elapsed() < within {
        if sources(gw, word).await.iter().any(|f| f == file) == present {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{file} still {} after {within:?}",
        if present { "not served" } else { "served" }
    );
}

/// A client asking every 0.25 s until stopped; how many it asked and how many failed.
struct Asker {
    stop: Arc<AtomicBool>,
    asked: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Asker {
    fn start(gw: &Gateway) -> Self {
        let url = gw.url("/v1/chat/completions");
        let (stop, asked, failed) = (Arc::default(), Arc::default(), Arc::default());
        let task = {
            let (stop, asked, failed): (Arc<AtomicBool>, Arc<AtomicUsize>, Arc<AtomicUsize>) =
                (Arc::clone(&stop), Arc::clone(&asked), Arc::clone(&failed));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = client()
                        .post(&url)
                        .json(&json!({"model": "brunix", "messages": [{"role": "user", "content": question("quorvane")}]}))
                        .send()
                        .await;
                    asked.fetch_add(1, Ordering::Relaxed);
                    if !r.is_ok_and(|r| r.status() == 200) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        Self {
            stop,
            asked,
            failed,
            task,
        }
    }

    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        (
            self.asked.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

async fn knowledge_status(gw: &Gateway) -> Value {
    let (status, v) = get_json(&gw.url("/v1/knowledge")).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// A gateway whose settings name `sources` and watch them.
async fn watching(up: &ScriptedUpstream, sources: &[PathBuf]) -> Gateway {
    let sources: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    Gateway::start(up, Provider::Ollama, |s| {
        s.knowledge.sources = sources;
        s.knowledge.watch = true;
        s.knowledge.watch_debounce = Duration::from_millis(200);
    })
    .await
}

#[tokio::test]
async fn sources_are_indexed_at_start_while_the_gateway_answers() {
    let up = ScriptedUpstream::start().await;
    let docs = tempfile::tempdir().unwrap();
    write(&docs.path().join("quorvane.md"), &page("quorvane"));
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.knowledge.sources = vec![docs.path().display().to_string()];
    })
    .await;
    served(
        &gw,
        "quorvane",
        "quorvane.md",
        true,
        Duration::from_secs(10),
    )
    .await;
    let status = knowledge_status(&gw).await;
    assert_eq!(status["owner"], true, "{status}");
    assert_eq!(status["files"], 1, "{status}");
    assert_eq!(status["last_refresh"]["trigger"], "start", "{status}");
    assert_eq!(status["last_refresh"]["state"], "done", "{status}");
    // A refresh asked for by an operator (an open gateway: anyone) of the sources.
    let (code, _, text) = post(&gw.url("/v1/knowledge/refresh"), json!({})).await;
    assert_eq!(code, 202, "{text}");
    let id = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_u64()
        .unwrap();
    let done = eventually_json(&gw, &format!("/v1/knowledge/refresh/{id}"), |j| {
        j["state"] == "done"
    })
    .await;
    assert_eq!(done["summary"]["files_unchanged"], 1, "{done}");
}

/// GETs `path` until `check` holds (10 s at most); the last answer.
async fn eventually_json(gw: &Gateway, path: &str, check: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (_, v) = get_json(&gw.url(path)).await;
        if check(&v) || started.elapsed() > Duration::from_secs(10) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn watched_changes_are_served_within_seconds_and_no_request_fails() {
    let up = ScriptedUpstream::start().await;
    let docs = tempfile::tempdir().unwrap();
    let root = docs.path().to_path_buf();
    write(&root.join("quorvane.md"), &page("quorvane"));
    write(&root.join(".gitignore"), "build/\n");
    let gw = watching(&up, std::slice::from_ref(&root)).await;
    served(
        &gw,
        "quorvane",
        "quorvane.md",
        true,
        Duration::from_secs(10),
    )
    .await;
    let asker = Asker::start(&gw);
    let bound = Duration::from_secs(5);

    // Added.
    write(&root.join("guide/zelmith.md"), &page("zelmith"));
    let took = served(&gw, "zelmith", "guide/zelmith.md", true, bound).await;
    println!("added: served after {took:?}");
    // Edited: the old word gone, the new one found.
    write(&root.join("guide/zelmith.md"), &page("brantock"));
    served(&gw, "brantock", "guide/zelmith.md", true, bound).await;
    served(&gw, "zelmith", "guide/zelmith.md", false, bound).await;
    // Renamed.
    std::fs::rename(root.join("guide/zelmith.md"), root.join("guide/renamed.md")).unwrap();
    served(&gw, "brantock", "guide/renamed.md", true, bound).await;
    served(&gw, "brantock", "guide/zelmith.md", false, bound).await;
    // Deleted.
    std::fs::remove_file(root.join("guide/renamed.md")).unwrap();
    served(&gw, "brantock", "guide/renamed.md", false, bound).await;
    // Ignored by .gitignore: never indexed.
    write(&root.join("build/out.md"), &page("skorvath"));
    // A burst of 500 new files, then the folder that holds them removed.
    for i in 0..500 {
        write(
            &root.join(format!("burst/page{i:03}.md")),
            &page(&format!("burstword{i:03}x")),
        );
    }
    served(&gw, "burstword499x", "burst/page499.md", true, bound * 2).await;
    served(&gw, "burstword000x", "burst/page000.md", true, bound).await;
    // The status counts a refresh's files when it ends (its batches are served as they
    // commit).
    let settled =
        |v: &Value| v["running"].is_null() && v["queued"] == json!([]) && v["pending_changes"] == 0;
    let status = eventually_json(&gw, "/v1/knowledge", settled).await;
    assert_eq!(
        status["files"], 501,
        "the burst, the first page, not build/: {status}"
    );
    std::fs::remove_dir_all(root.join("burst")).unwrap();
    served(&gw, "burstword250x", "burst/page250.md", false, bound).await;
    assert!(sources(&gw, "skorvath")
        .await
        .iter()
        .all(|f| !f.starts_with("build/")));

    let (asked, failed) = asker.finish().await;
    assert!(asked > 4, "the client asked {asked} times");
    assert_eq!(
        failed, 0,
        "{failed} of {asked} requests failed during the refreshes"
    );
    let status = eventually_json(&gw, "/v1/knowledge", settled).await;
    assert_eq!(status["files"], 1, "{status}");
    assert_eq!(status["pending_changes"], 0, "{status}");
}

/// The CLI's `ingest` beside a serving gateway that holds the embedded vector engine: the
/// work is handed over, the CLI exits 0 with the summary, and the change is served with no
/// restart.
#[tokio::test]
async fn ingest_beside_the_serving_gateway_is_handed_over() {
    let up = ScriptedUpstream::start().await;
    let embed_url = up.root();
    let gw = Gateway::start(&up, Provider::Ollama, |s| embedded_vectors(s, &embed_url)).await;
    assert!(
        gw.settings.qdrant.url.is_none(),
        "the embedded vector engine"
    );
    let docs = tempfile::tempdir().unwrap();
    write(&docs.path().join("quorvane.md"), &page("quorvane"));
    let out = run_ingest(&gw.settings, docs.path()).await;
    assert!(out.contains("ingested 1 files"), "{out}");
    assert!(out.contains("embedded 1 of the 1 chunks written"), "{out}");
    served(&gw, "quorvane", "quorvane.md", true, Duration::from_secs(1)).await;
    // Again: nothing changed, nothing embedded.
    let before = embedded_texts(&up);
    let out = run_ingest(&gw.settings, docs.path()).await;
    assert!(out.contains("ingested 0 files (1 unchanged"), "{out}");
    assert_eq!(embedded_texts(&up), before, "nothing embedded again");
    // Evaluating beside it searches the index with BM25 and says why not the vectors
    // (the embedded engine has one holder), where it stopped on the lock before.
    let dataset = docs.path().join("questions.jsonl");
    let case = json!({"query": question("quorvane"), "relevant": ["quorvane.md"]});
    write(&dataset, &format!("{case}\n"));
    let out = run_cli(
        &gw.settings,
        &["eval", "retrieval"],
        &["--dataset".as_ref(), dataset.as_os_str()],
    )
    .await;
    assert!(out.contains("held by another process"), "{out}");
    let all = out
        .lines()
        .find(|l| l.starts_with("all"))
        .unwrap_or_default();
    assert!(all.ends_with("1.000"), "the file is found first: {out}");
}

fn embedded_vectors(s: &mut Settings, embed_url: &str) {
    s.embeddings.provider = EmbeddingProvider::Ollama;
    s.embeddings.base_url = Some(embed_url.to_string());
    s.embeddings.languages = vec!["en".into()];
}

/// Texts the upstream was asked to embed as passages (the index's own, not questions).
fn embedded_texts(up: &ScriptedUpstream) -> usize {
    up.requests()
        .iter()
        .filter(|r| r.path == "/api/embed")
        .filter_map(|r| r.body["input"].as_array().cloned())
        .flatten()
        .filter(|t| {
            t.as_str()
                .is_some_and(|t| t.starts_with("passage") || !t.contains('?'))
        })
        .count()
}

/// The real `assist-gateway ingest --config … PATH`, which must exit 0; what it printed.
/// Awaited, so that the gateway in this process answers meanwhile.
async fn run_ingest(settings: &Settings, path: &Path) -> String {
    run_cli(settings, &["ingest"], &[path.as_os_str()]).await
}

/// The real `assist-gateway COMMAND… --config … ARGS`, which must exit 0 and never meet
/// the vector engine's lock; what it printed.
async fn run_cli(settings: &Settings, command: &[&str], args: &[&std::ffi::OsStr]) -> String {
    let config = settings.data_dir.join("cli.toml");
    std::fs::write(&config, toml::to_string(settings).unwrap()).unwrap();
    let out = tokio::process::Command::new(gateway_binary())
        .args(command)
        .arg("--config")
        .arg(&config)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("WouldBlock"), "{stderr}");
    stdout
}

/// Editing one line of one file in a corpus of 2,000 re-chunks that file alone and embeds
/// only its chunks whose text changed.
#[tokio::test]
async fn a_one_line_edit_in_2000_files_re_embeds_only_that_files_changed_chunks() {
    let up = ScriptedUpstream::start().await;
    let embed_url = up.root();
    let docs = tempfile::tempdir().unwrap();
    let root = docs.path().to_path_buf();
    for i in 0..2000 {
        let sections: String = (0..3)
            .map(|s| format!("## Part {s}\n\nPage {i} part {s} says how page{i}word{s} works.\n\n"))
            .collect();
        write(
            &root.join(format!("d{:02}/page{i:04}.md", i / 100)),
            &format!("# Page {i}\n\n{sections}"),
        );
    }
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        embedded_vectors(s, &embed_url);
        s.knowledge.sources = vec![root.display().to_string()];
        s.knowledge.watch = true;
        s.knowledge.watch_debounce = Duration::from_millis(200);
        // Sections stay chunks of their own.
        s.ingest.chunk_chars = 200;
        s.ingest.overlap_chars = 20;
    })
    .await;
    let first = eventually_json(&gw, "/v1/knowledge", |v| {
        v["last_refresh"]["state"] == "done"
    })
    .await;
    let chunks_total = first["last_refresh"]["summary"]["chunks_total"]
        .as_u64()
        .unwrap();
    assert!(chunks_total >= 2000, "{first}");
    let id = first["last_refresh"]["id"].as_u64().unwrap();

    let edited = root.join("d07/page0777.md");
    let text = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(&edited, text.replace("part 1 says", "part 1 now says")).unwrap();
    let after = eventually_json(&gw, "/v1/knowledge", |v| {
        v["last_refresh"]["id"].as_u64() > Some(id) && v["last_refresh"]["state"] == "done"
    })
    .await;
    let summary = &after["last_refresh"]["summary"];
    println!("after a one-line edit: {summary}");
    assert_eq!(summary["files_indexed"], 1, "{after}");
    assert_eq!(summary["files_unchanged"], 1999, "{after}");
    let (written, embedded) = (
        summary["chunks_written"].as_u64().unwrap(),
        summary["chunks_embedded"].as_u64().unwrap(),
    );
    assert!(written <= 4, "only that file's chunks: {after}");
    assert_eq!(embedded, 1, "only the changed section's chunk: {after}");
    served(
        &gw,
        "page777word1",
        "d07/page0777.md",
        true,
        Duration::from_secs(1),
    )
    .await;
}

/// `/metrics` and the knowledge routes: operators only.
#[tokio::test]
async fn operator_routes_need_an_operator_key() {
    const ADMIN: &str = "operator-key-0123456789";
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["tenant-key".into()];
        s.server.admin_keys = vec![ADMIN.into()];
    })
    .await;
    for path in ["/metrics", "/v1/knowledge"] {
        let get = |key: Option<&str>| {
            let rb = client().get(gw.url(path));
            let rb = match key {
                Some(k) => rb.bearer_auth(k),
                None => rb,
            };
            async move {
                let r = rb.send().await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }
        };
        assert_eq!(get(None).await.0, 401, "{path}");
        let (code, text) = get(Some("tenant-key")).await;
        assert_eq!(code, 403, "{path}: {text}");
        assert!(text.contains("operator key"), "{text}");
        assert_eq!(get(Some("wrong")).await.0, 401, "{path}");
        assert_eq!(get(Some(ADMIN)).await.0, 200, "{path}");
    }
    // The operator key is an API key too.
    let r = client()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(ADMIN)
        .json(&json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Only an operator names paths.
    let docs = tempfile::tempdir().unwrap();
    write(&docs.path().join("quorvane.md"), &page("quorvane"));
    let r = client()
        .post(gw.url("/v1/knowledge/refresh"))
        .bearer_auth(ADMIN)
        .json(&json!({"paths": [docs.path()]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let started = Instant::now();
    loop {
        let v: Value = client()
            .get(gw.url("/v1/knowledge"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["files"] == 1 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // API keys and no operator key: closed to every key.
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["tenant-key".into()];
    })
    .await;
    let r = client()
        .get(gw.url("/metrics"))
        .bearer_auth("tenant-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // An open gateway: open, but naming paths on its disk is refused.
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    assert_eq!(get_text(&gw.url("/metrics")).await.0, 200);
    let (code, _, text) = post(&gw.url("/v1/knowledge/refresh"), json!({"paths": ["/etc"]})).await;
    assert_eq!(code, 403, "{text}");
    let (code, _, text) = post(&gw.url("/v1/knowledge/refresh"), json!({})).await;
    assert_eq!(code, 400, "no sources configured: {text}");
    assert!(text.contains("knowledge.sources"), "{text}");
}

/// The quick start's setup (multilingual-e5-small in process, the embedded vector engine):
/// a file written under a watched source is served within 30 s and gone as fast once
/// deleted, while a client asks every 0.25 s and none of its requests fails.
#[tokio::test]
async fn with_e5_and_the_embedded_engine_a_new_file_is_served_within_30_s() {
    let Some(e5) = installed("ASSIST_TEST_E5", "the live knowledge test with e5") else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let docs = tempfile::tempdir().unwrap();
    let root = docs.path().to_path_buf();
    write(&root.join("quorvane.md"), &page("quorvane"));
    let sources = vec![root.display().to_string()];
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Local;
        s.embeddings.path = Some(e5.into());
        s.knowledge.sources = sources;
        s.knowledge.watch = true;
    })
    .await;
    let bound = Duration::from_secs(30);
    served(&gw, "quorvane", "quorvane.md", true, bound).await;
    assert_eq!(knowledge_status(&gw).await["vectors"], true);
    let asker = Asker::start(&gw);
    write(&root.join("guide/zelmith.md"), &page("zelmith"));
    let took = served(&gw, "zelmith", "guide/zelmith.md", true, bound).await;
    println!("e5: a new file served after {took:?}");
    std::fs::remove_file(root.join("guide/zelmith.md")).unwrap();
    let took = served(&gw, "zelmith", "guide/zelmith.md", false, bound).await;
    println!("e5: a deleted file gone after {took:?}");
    let (asked, failed) = asker.finish().await;
    assert_eq!(failed, 0, "{failed} of {asked} requests failed");
}

/// Runs git in `dir`.
fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A repository named at a ref (`path@main`) is indexed as the branch holds it, read from
/// its object database: what the working tree adds is not served until it is committed, a
/// commit is served within seconds, and a file removed by a commit is gone.
#[tokio::test]
async fn a_repository_at_a_ref_follows_the_branch_not_the_working_tree() {
    let up = ScriptedUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("app");
    write(&repo.join("docs/quorvane.md"), &page("quorvane"));
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "docs"]);
    write(&repo.join("zelmith.md"), &page("zelmith"));
    let source = format!("{}@main", repo.display());
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.knowledge.sources = vec![source];
        s.knowledge.watch = true;
        s.knowledge.watch_debounce = Duration::from_millis(200);
    })
    .await;
    served(
        &gw,
        "quorvane",
        "docs/quorvane.md",
        true,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        !sources(&gw, "zelmith")
            .await
            .contains(&"zelmith.md".to_string()),
        "not committed: not served"
    );
    let bound = Duration::from_secs(5);
    git(&repo, &["add", "zelmith.md"]);
    git(&repo, &["commit", "-q", "-m", "zelmith"]);
    let took = served(&gw, "zelmith", "zelmith.md", true, bound).await;
    println!("a commit served after {took:?}");
    git(&repo, &["rm", "-q", "docs/quorvane.md"]);
    git(&repo, &["commit", "-q", "-m", "gone"]);
    served(&gw, "quorvane", "docs/quorvane.md", false, bound).await;
}

//! The knowledge base end to end, with real tantivy and the real embedded Qdrant engine
//! in temporary folders: the vector store contract, incremental ingestion, hybrid
//! retrieval, and BM25 carrying on alone when the embedder is down.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::*;
use assist_gateway::app::{open_knowledge, retriever};
use assist_gateway::config::RetrievalSettings;
use assist_gateway::config::{EmbeddingProvider, Provider, Settings};
use assist_gateway::ingest::Quiet;
use assist_gateway::retrieval::edge::EdgeStore;
use assist_gateway::retrieval::hybrid::{DenseState, Mode, Retriever};
use assist_gateway::retrieval::lexical::TantivyIndex;
use assist_gateway::retrieval::qdrant_server::QdrantServerStore;
use assist_gateway::retrieval::{
    DocType, KnowledgeChunk, Lang, Languages, LexicalIndex, VectorPoint, VectorStore,
};
use serde_json::json;

fn chunk(id: &str, file: &str, doc_type: DocType, text: &str) -> KnowledgeChunk {
    KnowledgeChunk {
        chunk_id: id.into(),
        source_file: file.into(),
        start_line: 1,
        end_line: 1,
        doc_type,
        block_type: "section".into(),
        section: String::new(),
        language: "en".into(),
        text: text.into(),
        defines: Vec::new(),
    }
}

fn point(id: &str, file: &str, doc_type: DocType, vector: [f32; 3]) -> VectorPoint {
    VectorPoint {
        chunk: chunk(id, file, doc_type, id),
        vector: vector.to_vec(),
    }
}

/// What every `VectorStore` must do; `reopen` gives a fresh handle on the same data.
async fn store_contract<F, Fut>(store: Box<dyn VectorStore>, reopen: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Box<dyn VectorStore>>,
{
    assert_eq!(store.count().await.unwrap(), 0, "a new store is empty");
    store.ensure_collection(3).await.unwrap();
    store.ensure_collection(3).await.unwrap();
    let mut code = point("b", "b.rs", DocType::Code, [0.9, 0.1, 0.0]);
    code.chunk.language = "rust".into();
    let mut spanish = point("c", "c.md", DocType::Spec, [0.0, 1.0, 0.0]);
    spanish.chunk.language = "es".into();
    store
        .upsert(vec![
            point("a", "a.md", DocType::Narrative, [1.0, 0.0, 0.0]),
            code,
            spanish,
        ])
        .await
        .unwrap();
    assert_eq!(store.count().await.unwrap(), 3);
    let hits = store
        .search(&[1.0, 0.05, 0.0], 3, Languages::All)
        .await
        .unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.chunk.chunk_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(hits[0].score > hits[2].score);
    assert_eq!(
        hits[1].chunk.source_file, "b.rs",
        "the payload comes back whole"
    );
    assert_eq!(hits[1].chunk.doc_type, DocType::Code);
    // By language: only some, or all but some (nearest first either way).
    let ids = |hits: Vec<assist_gateway::retrieval::Hit>| {
        hits.iter()
            .map(|h| h.chunk.chunk_id.clone())
            .collect::<Vec<_>>()
    };
    let only_es = store
        .search(&[1.0, 0.0, 0.0], 3, Languages::In(&["es"]))
        .await
        .unwrap();
    assert_eq!(ids(only_es), ["c"]);
    let not_es = store
        .search(&[0.0, 1.0, 0.0], 3, Languages::NotIn(&["es"]))
        .await
        .unwrap();
    assert_eq!(ids(not_es), ["b", "a"]);
    let several = store
        .search(&[1.0, 0.0, 0.0], 3, Languages::In(&["es", "rust"]))
        .await
        .unwrap();
    assert_eq!(ids(several), ["b", "c"]);
    // Upsert by chunk id replaces.
    store
        .upsert(vec![point(
            "a",
            "a.md",
            DocType::Narrative,
            [0.0, 0.0, 1.0],
        )])
        .await
        .unwrap();
    assert_eq!(store.count().await.unwrap(), 3);
    store.remove_files(&["b.rs".to_string()]).await.unwrap();
    assert_eq!(store.count().await.unwrap(), 2);
    store.optimize().await.unwrap();
    assert!(store
        .ensure_collection(5)
        .await
        .unwrap_err()
        .to_string()
        .contains("--rebuild"));
    drop(store);
    let reopened = reopen().await;
    assert_eq!(reopened.count().await.unwrap(), 2, "persisted");
    let top = reopened
        .search(&[0.0, 0.0, 1.0], 1, Languages::All)
        .await
        .unwrap();
    assert_eq!(top[0].chunk.chunk_id, "a");
}

#[tokio::test]
async fn embedded_qdrant_store_contract() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let store = EdgeStore::open(&path).unwrap();
    store_contract(Box::new(store), || async move {
        Box::new(EdgeStore::open(&path).unwrap()) as Box<dyn VectorStore>
    })
    .await;
}

#[tokio::test]
async fn qdrant_server_store_contract() {
    let Some(server) = QdrantTestServer::start() else {
        return;
    };
    let store = QdrantServerStore::connect(&server.url, None, "contract").unwrap();
    let url = server.url.clone();
    store_contract(Box::new(store), || async move {
        Box::new(QdrantServerStore::connect(&url, None, "contract").unwrap())
            as Box<dyn VectorStore>
    })
    .await;
}

/// Settings whose embedder is the scripted upstream's letter-frequency `/api/embed`.
fn settings_with_embedder(data: &Path, embed_url: &str) -> Settings {
    let mut s = Settings::load_without_env(None).unwrap();
    s.data_dir = data.to_path_buf();
    s.embeddings.provider = EmbeddingProvider::Ollama;
    s.embeddings.base_url = Some(embed_url.to_string());
    s.embeddings.languages = vec!["en".into(), "es".into()];
    s.llm.connect_timeout = std::time::Duration::from_secs(1);
    s
}

async fn ingest(settings: &Settings, roots: &[PathBuf]) -> assist_gateway::ingest::Summary {
    assist_gateway::app::ingest(settings, roots, false, &Quiet)
        .await
        .unwrap()
}

#[tokio::test]
async fn incremental_ingest_follows_edits_and_deletions() {
    let up = ScriptedUpstream::start().await;
    let data = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    let settings = settings_with_embedder(data.path(), &up.root());
    std::fs::write(
        docs.path().join("guide.md"),
        "# Guide\nInstall with the installer.\n",
    )
    .unwrap();
    std::fs::write(
        docs.path().join("notes.md"),
        "# Notes\nShadowing rebinds a name.\n",
    )
    .unwrap();
    std::fs::write(docs.path().join("logo.png"), [0u8, 1, 2]).unwrap();
    std::fs::write(docs.path().join(".gitignore"), "secret.md\n").unwrap();
    std::fs::write(docs.path().join("secret.md"), "# Secret\nDo not index.\n").unwrap();
    let roots = vec![docs.path().to_path_buf()];

    let first = ingest(&settings, &roots).await;
    assert_eq!(
        (first.files_indexed, first.chunks_total),
        (2, 2),
        "{first:?}"
    );
    assert!(first.skipped.iter().any(|(f, _)| f == "logo.png"));
    assert!(
        !first.skipped.iter().any(|(f, _)| f == "secret.md"),
        ".gitignore'd files are not even seen"
    );
    let embed_calls = up.requests().len();

    let again = ingest(&settings, &roots).await;
    assert_eq!((again.files_indexed, again.files_unchanged), (0, 2));
    assert_eq!(
        up.requests().len(),
        embed_calls,
        "nothing unchanged is embedded again"
    );

    std::fs::write(
        docs.path().join("guide.md"),
        "# Guide\nDeploy with containers.\n",
    )
    .unwrap();
    std::fs::remove_file(docs.path().join("notes.md")).unwrap();
    let third = ingest(&settings, &roots).await;
    assert_eq!(
        (third.files_indexed, third.files_removed, third.chunks_total),
        (1, 1, 1),
        "{third:?}"
    );

    let r = retriever(&settings, open_knowledge(&settings).unwrap());
    let hits = r.search("containers deploy", Mode::Lexical).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert!(hits[0].chunk.text.contains("containers"));
    assert!(
        r.search("installer", Mode::Lexical)
            .await
            .unwrap()
            .is_empty(),
        "the old text is gone"
    );
    assert!(
        r.search("shadowing rebinds", Mode::Lexical)
            .await
            .unwrap()
            .is_empty(),
        "the deleted file is gone"
    );
    let dense = r.search("containers deploy", Mode::Dense).await.unwrap();
    assert_eq!(dense.len(), 1, "one vector left: {dense:?}");
}

#[tokio::test]
async fn example_knowledge_is_searchable_in_both_languages_and_by_identifier() {
    let up = ScriptedUpstream::start().await;
    let data = tempfile::tempdir().unwrap();
    let settings = settings_with_embedder(data.path(), &up.root());
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/knowledge"));
    let summary = ingest(&settings, &[root]).await;
    assert!(summary.files_indexed >= 15, "{summary:?}");
    let r = retriever(&settings, open_knowledge(&settings).unwrap());
    let first_file =
        |hits: &[assist_gateway::retrieval::hybrid::Scored]| hits[0].chunk.source_file.clone();
    let es = r
        .search("¿cómo cancelo una tarea asíncrona?", Mode::Hybrid)
        .await
        .unwrap();
    assert!(
        first_file(&es).starts_with("docs/es/"),
        "{:?}",
        es.iter().map(|h| &h.chunk.source_file).collect::<Vec<_>>()
    );
    let en = r
        .search(
            "how do I configure health checks for deployment",
            Mode::Hybrid,
        )
        .await
        .unwrap();
    assert!(
        first_file(&en).starts_with("docs/en/"),
        "{:?}",
        en.iter().map(|h| &h.chunk.source_file).collect::<Vec<_>>()
    );
    let code = r.search("get user name", Mode::Lexical).await.unwrap();
    assert_eq!(first_file(&code), "code/orderDashboard.ts");
    assert_eq!(code[0].chunk.doc_type, DocType::Code);
    assert!(es.len() <= settings.retrieval.top_k);
}

#[tokio::test]
async fn bm25_answers_alone_when_the_embedder_is_down() {
    let up = ScriptedUpstream::start().await;
    let data = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(
        docs.path().join("a.md"),
        "# Endpoints\nregisterEndpoint declares a route.\n",
    )
    .unwrap();
    let settings = settings_with_embedder(data.path(), &up.root());
    ingest(&settings, &[docs.path().to_path_buf()]).await;

    // Serve with an embedder that no longer answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let down = settings_with_embedder(data.path(), &dead);
    let r = retriever(&down, open_knowledge(&down).unwrap());
    let hits = r
        .search("registerEndpoint route", Mode::Hybrid)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "BM25 still answers");
    match r.dense_state() {
        DenseState::Degraded(reason) => assert!(reason.contains(&dead), "{reason}"),
        other => panic!("expected degraded, got {other:?}"),
    }
    let ready = r.readiness(std::time::Duration::from_secs(3)).await;
    assert_eq!(ready.embedder["status"], "degraded");
    assert_eq!(
        ready.vector_store["status"], "ok",
        "the store itself answers"
    );
    drop(r);

    // The gateway's /ready says so too.
    let mut s = down.clone();
    s.llm.base_url = up.root();
    s.llm.model = UPSTREAM_MODEL.into();
    let gw = Gateway::with_settings(s).await;
    let (status, ready) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 200, "degraded still serves: {ready}");
    assert_eq!(ready["status"], "degraded");
    assert_eq!(ready["checks"]["lexical_index"]["status"], "ok");
    assert_eq!(ready["checks"]["embedder"]["status"], "degraded");
    assert_eq!(ready["checks"]["vector_store"]["status"], "ok");
    assert!(ready["checks"]["embedder"]["reason"]
        .as_str()
        .unwrap()
        .contains(&dead));
}

#[tokio::test]
async fn rebuild_swaps_in_a_fresh_index_and_a_failed_one_changes_nothing() {
    let up = ScriptedUpstream::start().await;
    let data = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    let settings = settings_with_embedder(data.path(), &up.root());
    std::fs::write(docs.path().join("a.md"), "# A\nalpha text\n").unwrap();
    std::fs::write(docs.path().join("b.md"), "# B\nbravo text\n").unwrap();
    let roots = vec![docs.path().to_path_buf()];
    let s = assist_gateway::app::ingest(&settings, &roots, false, &Quiet)
        .await
        .unwrap();
    assert_eq!(s.chunks_total, 2);

    // A rebuild of another folder replaces everything.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("c.md"), "# C\ncharlie text\n").unwrap();
    let s = assist_gateway::app::ingest(&settings, &[other.path().to_path_buf()], true, &Quiet)
        .await
        .unwrap();
    assert_eq!(s.chunks_total, 1);
    let index = settings.index_dir();
    {
        let r = retriever(&settings, open_knowledge(&settings).unwrap());
        assert!(r.search("alpha", Mode::Lexical).await.unwrap().is_empty());
        assert_eq!(r.search("charlie", Mode::Lexical).await.unwrap().len(), 1);
    }

    // A rebuild that fails (here: the embedder is gone) leaves the live index as it was.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let broken = settings_with_embedder(data.path(), &dead);
    assert!(assist_gateway::app::ingest(&broken, &roots, true, &Quiet)
        .await
        .is_err());
    let versions: Vec<_> = std::fs::read_dir(&index)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("v-"))
        .collect();
    assert_eq!(
        versions.len(),
        1,
        "the half-built index is cleaned up: {versions:?}"
    );
    let r = retriever(&settings, open_knowledge(&settings).unwrap());
    assert_eq!(r.search("charlie", Mode::Lexical).await.unwrap().len(), 1);
}

/// An index that should be there and is not (its version folder gone) is reported by
/// `/ready`, and the gateway answers without knowledge; it never opens an empty index in
/// its place as if nothing were wrong.
#[tokio::test]
async fn a_missing_index_is_reported_never_replaced_silently() {
    let up = ScriptedUpstream::start().await;
    let (settings, data) = test_settings(&up, Provider::Ollama, true, |_| {}).await;
    let index = settings.index_dir();
    let live = std::fs::read_to_string(index.join("CURRENT")).unwrap();
    std::fs::remove_dir_all(index.join(live.trim())).unwrap();
    let gw = Gateway::with_settings(settings).await;
    let (status, ready) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["status"], "degraded", "{ready}");
    let lexical = &ready["checks"]["lexical_index"];
    assert_eq!(lexical["status"], "degraded", "{ready}");
    let reason = lexical["reason"].as_str().unwrap();
    assert!(
        reason.contains(live.trim()) && reason.contains("--rebuild"),
        "{reason}"
    );
    assert!(
        !index.join(live.trim()).exists(),
        "nothing was created in its place"
    );
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "How do I deploy?"}]}),
    )
    .await;
    assert_eq!(status, 200, "answers without knowledge: {text}");
    drop(data);
}

/// An embedding model that maps every question to one fixed direction (the chunks' vectors
/// are stored by hand), standing in for a model that reads English and Spanish.
struct FixedQuery(Vec<f32>);

#[async_trait::async_trait]
impl assist_gateway::embed::Embedder for FixedQuery {
    fn describe(&self) -> String {
        "fixed query vector".into()
    }
    async fn embed(
        &self,
        texts: &[String],
        _kind: assist_gateway::embed::TextKind,
    ) -> Result<Vec<Vec<f32>>, assist_gateway::llm::UpstreamError> {
        Ok(texts.iter().map(|_| self.0.clone()).collect())
    }
}

/// Chunks placed by hand in a real tantivy index and a real edge store (vectors of three
/// dimensions), searched with `FixedQuery`'s one query direction, `[1, 0, 0]`.
struct Placed {
    lexical: Arc<dyn LexicalIndex>,
    store: Arc<dyn VectorStore>,
    _dir: tempfile::TempDir,
}

impl Placed {
    async fn new(points: Vec<VectorPoint>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = EdgeStore::open(dir.path()).unwrap();
        store.ensure_collection(3).await.unwrap();
        store.upsert(points.clone()).await.unwrap();
        let lexical = TantivyIndex::in_memory().unwrap();
        let files: Vec<(String, Vec<KnowledgeChunk>)> = points
            .iter()
            .map(|p| (p.chunk.source_file.clone(), vec![p.chunk.clone()]))
            .collect();
        lexical.replace_files(&files).unwrap();
        Self {
            lexical: Arc::new(lexical),
            store: Arc::new(store),
            _dir: dir,
        }
    }

    /// The files of a hybrid search's 8 results, best first.
    async fn files_found(
        &self,
        question: &str,
        settings: RetrievalSettings,
        langs: Vec<Lang>,
    ) -> Vec<String> {
        let embedder = Arc::new(FixedQuery(vec![1.0, 0.0, 0.0]));
        self.files_found_by(embedder, question, settings, langs)
            .await
    }

    async fn files_found_by(
        &self,
        embedder: Arc<dyn assist_gateway::embed::Embedder>,
        question: &str,
        settings: RetrievalSettings,
        langs: Vec<Lang>,
    ) -> Vec<String> {
        let r = Retriever::new(
            self.lexical.clone(),
            Some((embedder, self.store.clone())),
            settings,
            langs,
        );
        let hits = r.search(question, Mode::Hybrid).await.unwrap();
        assert_eq!(hits.len(), 8);
        hits.into_iter()
            .map(|h| h.chunk.source_file.clone())
            .collect()
    }
}

/// A chunk of `file` in natural language `lang` at `[1, y, 0]`: cosine 1/√(1+y²) with
/// the query.
fn placed(id: &str, file: &str, lang: &str, y: f32, text: &str) -> VectorPoint {
    let mut p = point(id, file, DocType::Narrative, [1.0, y, 0.0]);
    p.chunk.language = lang.into();
    p.chunk.text = text.into();
    p
}

#[tokio::test]
async fn an_answer_written_only_in_the_other_language_gets_a_place() {
    // Eight Spanish files nearer the question than the one English file that answers it
    // (a multilingual model scores the question's own language higher), no words in
    // common: cosine 0.912 for the answer, 0.958 … 0.928 for the Spanish files 6 … 8.
    let mut points: Vec<_> = (1..=8)
        .map(|i| {
            let id = format!("es{i}");
            placed(&id, &format!("es/tema{i}.md"), "es", 0.05 * i as f32, &id)
        })
        .collect();
    points.push(placed("answer", "en/keyboard.md", "en", 0.45, "answer"));
    let placed = Placed::new(points).await;
    let question = "¿Cómo cambio la distribución del teclado de la consola?";
    let with_offset = |offset: Option<f32>| {
        let mut settings = Settings::load_without_env(None).unwrap().retrieval;
        if let Some(offset) = offset {
            settings.cross_language_offset = offset;
        }
        settings
    };
    let both = vec![Lang::En, Lang::Es];
    // The default offset (0.035) puts the answer seventh, above Spanish files 7 and 8.
    let found = placed
        .files_found(question, with_offset(None), both.clone())
        .await;
    assert!(
        found.contains(&"en/keyboard.md".to_string()),
        "the English answer is among the 8: {found:?}"
    );
    // Raw similarities: eight Spanish files fill the results.
    let one_list = placed
        .files_found(question, with_offset(Some(0.0)), both)
        .await;
    assert!(
        !one_list.contains(&"en/keyboard.md".to_string()),
        "{one_list:?}"
    );
    // A model that reads only Spanish cannot rank English against the question: no split.
    let spanish_only = placed
        .files_found(question, with_offset(None), vec![Lang::Es])
        .await;
    assert_eq!(spanish_only, one_list);
}

/// A Spanish question whose answer is written only in English: the dense list ranks the
/// answer first, BM25 cannot see it (no word in common, none the glossary translates) and
/// ranks eight Spanish near misses about the keyboard and the console, which the dense
/// list ranks 10th to 17th, below eight unrelated Spanish files. BM25 at full weight (the
/// default) lifts every near miss above the answer; a lower weight for Spanish questions
/// (`retrieval.bm25_weight_by_language`) lets it through.
#[tokio::test]
async fn bm25_can_count_less_for_spanish_questions_so_an_english_answer_is_not_buried() {
    let mut points = vec![placed(
        "answer",
        "en/keyboard.md",
        "en",
        0.45,
        "Run dpkg-reconfigure xkb-data, then setupcon.",
    )];
    // Spanish files: unrelated ones nearer the question, near misses further off.
    let spanish = [
        ("otros", 0.35, "Notas varias sobre redes y discos"),
        (
            "cerca",
            0.50,
            "El teclado y la consola de texto: historia y nombres",
        ),
    ];
    for i in 1..=8 {
        for (name, y, text) in spanish {
            let id = format!("{name}{i}");
            let y = y + 0.01 * i as f32;
            let text = format!("{text}, parte {i}.");
            points.push(placed(&id, &format!("es/{id}.md"), "es", y, &text));
        }
    }
    let placed = Placed::new(points).await;
    let question = "¿Cómo cambio la distribución del teclado de la consola?";
    let both = vec![Lang::En, Lang::Es];
    let mut defaults = Settings::load_without_env(None).unwrap().retrieval;
    let full = defaults.clone();
    defaults.bm25_weight_by_language.es = Some(0.2);
    let found = placed
        .files_found(question, defaults.clone(), both.clone())
        .await;
    let answer_at = found.iter().position(|f| f == "en/keyboard.md");
    assert!(
        answer_at.is_some_and(|at| at > 0),
        "the answer is among the 8, BM25's first near miss still above it: {found:?}"
    );
    let found = placed.files_found(question, full, both.clone()).await;
    assert!(
        found.iter().all(|f| f.starts_with("es/cerca")),
        "at bm25_weight (1.0), the eight near misses fill the results: {found:?}"
    );
    // An English-only model does not read the question, so the Spanish weight is not
    // its to lower: counted at full weight (`foreign_dense_weight` 1), its raw list ranks
    // the unrelated files first, and BM25 at 1.0 still puts the eight near misses above.
    let mut foreign = defaults.clone();
    foreign.foreign_dense_weight = 1.0;
    let english_model = placed.files_found(question, foreign, vec![Lang::En]).await;
    assert!(
        english_model.iter().all(|f| f.starts_with("es/cerca")),
        "{english_model:?}"
    );
    // With the embedder down, BM25 answers alone even at weight 0.
    let mut zero = defaults;
    zero.bm25_weight_by_language.es = Some(0.0);
    let down = placed
        .files_found_by(Arc::new(Down), question, zero, both)
        .await;
    assert!(down.iter().all(|f| f.starts_with("es/cerca")), "{down:?}");
}

/// An embedder that cannot be reached.
struct Down;

#[async_trait::async_trait]
impl assist_gateway::embed::Embedder for Down {
    fn describe(&self) -> String {
        "unreachable embedder".into()
    }
    async fn embed(
        &self,
        _texts: &[String],
        _kind: assist_gateway::embed::TextKind,
    ) -> Result<Vec<Vec<f32>>, assist_gateway::llm::UpstreamError> {
        Err(assist_gateway::llm::UpstreamError::new(
            assist_gateway::llm::UpstreamErrorKind::Unreachable,
            "http://127.0.0.1:9",
            "connection refused",
        ))
    }
}

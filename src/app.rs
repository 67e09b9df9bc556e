//! Wiring: builds the shared state from settings (one adapter per port) and serves it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{ClassifierMode, Provider, ReformulatorMode, Settings};
use crate::embed::{self, Embedder};
use crate::http::AppState;
use crate::ingest::layout::{IndexRoot, Live};
use crate::ingest::live::{self, Keeper};
use crate::ingest::{Progress, Rules, Summary};
use crate::llm;
use crate::pipeline::classify::{Classifier, LlmClassifier, RulesClassifier};
use crate::pipeline::prompts::Prompts;
use crate::pipeline::reformulate::{LlmReformulator, Reformulator};
use crate::pipeline::{Pipeline, PipelineConfig, Stages};
use crate::retrieval::edge::EdgeStore;
use crate::retrieval::hybrid::Retriever;
use crate::retrieval::indexes::Indexes;
use crate::retrieval::lexical::TantivyIndex;
use crate::retrieval::qdrant_lexical::QdrantLexical;
use crate::retrieval::qdrant_server::QdrantServerStore;
use crate::retrieval::{Lang, LexicalIndex, VectorStore};
use crate::sessions::{self, Sessions};

/// The knowledge indexes: BM25 always, vectors when an embedder is configured.
pub type Knowledge = Indexes;

/// Opens the live indexes under `data_dir/index` for searching only (`ask`, `eval`, the
/// benchmarks; the serving gateway owns its index, see `ingest::live`). Where none was
/// ever built, a first, empty one is made (an `ingest` alongside fills it); where one
/// should be and is not, the knowledge is empty and says why, never silently.
pub fn open_knowledge(settings: &Settings) -> anyhow::Result<Knowledge> {
    let root = IndexRoot::of(settings);
    let dir = match root.live()? {
        Live::At(dir) => dir,
        Live::None => root.for_update()?,
        Live::Missing(why) => {
            tracing::error!(reason = %why, "no knowledge index: answering without knowledge");
            return Ok(Indexes {
                lexical: Arc::new(TantivyIndex::in_memory()?),
                dense: None,
                missing: Some(why),
            });
        }
    };
    let embedder = embed::from_settings(&settings.embeddings, &settings.llm)?;
    open_version(settings, embedder.as_ref(), &dir, false).or_else(|e| {
        // The embedded vector engine has one holder: beside a serving gateway (or an
        // ingest) it is taken, and the question is searched with BM25 alone.
        let lexical_only = open_version(settings, None, &dir, false)?;
        let error = format!("{e:#}");
        if error.contains("WouldBlock") {
            tracing::warn!("the vectors are held by another process (a serving gateway or an ingest): BM25 answers alone");
        } else {
            tracing::warn!(error = %error, "the vectors cannot be opened: BM25 answers alone");
        }
        Ok(lexical_only)
    })
}

/// Opens the indexes in one version folder: writable for `ingest` and the serving
/// gateway, read-only for the rest.
fn open_version(
    settings: &Settings,
    embedder: Option<&Arc<dyn Embedder>>,
    dir: &Path,
    writable: bool,
) -> anyhow::Result<Knowledge> {
    let q = &settings.qdrant;
    let lexical_dir = dir.join("lexical");
    let lexical: Arc<dyn LexicalIndex> = match &q.url {
        Some(url) if q.lexical => Arc::new(QdrantLexical::connect(
            url,
            q.api_key.as_deref(),
            &q.lexical_collection(),
        )?),
        _ if writable => Arc::new(TantivyIndex::open(&lexical_dir)?),
        _ => Arc::new(TantivyIndex::open_read_only(&lexical_dir)?),
    };
    let dense = match embedder {
        None => None,
        Some(embedder) => Some((embedder.clone(), vector_store(settings, dir)?)),
    };
    Ok(Indexes {
        lexical,
        dense,
        missing: None,
    })
}

/// The vector store of the version in `dir`: the embedded engine's folder there, or the
/// Qdrant server's collection.
fn vector_store(settings: &Settings, dir: &Path) -> anyhow::Result<Arc<dyn VectorStore>> {
    let q = &settings.qdrant;
    Ok(match &q.url {
        None => Arc::new(EdgeStore::open(&dir.join("vectors"))?),
        Some(url) => Arc::new(QdrantServerStore::connect(
            url,
            q.api_key.as_deref(),
            &q.collection,
        )?),
    })
}

/// The hybrid retriever over opened indexes.
pub fn retriever(settings: &Settings, knowledge: Knowledge) -> Retriever {
    let embedder = knowledge.dense.as_ref().map(|(e, _)| e.clone());
    retriever_with(settings, knowledge, embedder.as_ref())
}

/// The hybrid retriever over opened indexes, searching in the languages `embedder` reads.
fn retriever_with(
    settings: &Settings,
    knowledge: Knowledge,
    embedder: Option<&Arc<dyn Embedder>>,
) -> Retriever {
    // `embeddings.languages` empty: the languages the embedder itself reads well.
    let configured = &settings.embeddings.languages;
    let codes: Vec<&str> = match embedder {
        Some(embedder) if configured.is_empty() => embedder.languages().to_vec(),
        _ => configured.iter().map(String::as_str).collect(),
    };
    let langs = codes.into_iter().filter_map(Lang::from_code).collect();
    let retriever = Retriever::new(
        knowledge.lexical,
        knowledge.dense,
        settings.retrieval.clone(),
        langs,
    );
    match knowledge.missing {
        Some(why) => retriever.missing_index(why),
        None => retriever,
    }
}

/// Ingests `paths` into the index under `data_dir`. With `rebuild`, a fresh index is
/// built in a new version folder and made live only when complete (one atomic rename), so
/// a failed or interrupted rebuild leaves the previous index in place. When a serving
/// gateway owns the index, the work is handed to it (`ingest::handoff`) and this returns
/// when the change is live, with the same summary.
pub async fn ingest(
    settings: &Settings,
    paths: &[PathBuf],
    rebuild: bool,
    progress: &dyn Progress,
) -> anyhow::Result<Summary> {
    let root = IndexRoot::of(settings);
    let Some(_writing) = root.try_exclusive()? else {
        return crate::ingest::handoff::hand_off(&root, paths, rebuild, progress).await;
    };
    let target = if rebuild {
        root.new_version()?
    } else {
        root.for_update()?
    };
    let summary = {
        let embedder = embed::from_settings(&settings.embeddings, &settings.llm)?;
        let knowledge = open_version(settings, embedder.as_ref(), &target, true)?;
        live::ingestor(
            &Rules::from_settings(settings)?,
            &knowledge,
            &target,
            rebuild,
        )
        .run(paths, progress)
        .await
    };
    match summary {
        Ok(summary) => {
            if rebuild {
                root.publish(&target)?;
            }
            Ok(summary)
        }
        Err(e) if rebuild => {
            let _ = std::fs::remove_dir_all(&target);
            Err(e.context("the rebuild stopped and was discarded; the live index is unchanged"))
        }
        Err(e) => Err(e.context(
            "ingest stopped; the index serves what it had plus the files committed before the failure, and the next ingest resumes from there",
        )),
    }
}

/// Builds the state: the upstream adapter, the pipeline, the knowledge indexes, the
/// session store.
pub fn build(mut settings: Settings) -> anyhow::Result<AppState> {
    fit_connections_to_open_files(&mut settings.server);
    // The embedding endpoints serve the model under its own name unless one is set.
    settings.embeddings.model = embed::served_name(&settings.embeddings);
    let embedder = embed::from_settings(&settings.embeddings, &settings.llm)?;
    let opener: live::Opener = {
        let settings = settings.clone();
        let embedder = embedder.clone();
        Arc::new(move |dir: &Path, writable: bool| {
            open_version(&settings, embedder.as_ref(), dir, writable)
        })
    };
    let (keeper, knowledge) = Keeper::open(
        IndexRoot::of(&settings),
        opener,
        Rules::from_settings(&settings)?,
        settings
            .knowledge
            .sources
            .iter()
            .map(PathBuf::from)
            .collect(),
        settings.knowledge.watch,
    )?;
    let Parts {
        pipeline,
        retriever,
        embedder,
    } = pipeline_over(&settings, true, knowledge, embedder)?;
    // Usage is counted per key: only a gateway with keys counts it.
    let usage = if settings.server.api_keys.is_empty() {
        None
    } else {
        Some(Arc::new(sessions::usage::Usage::from_settings(
            &settings.sessions,
            &settings.data_dir,
        )?))
    };
    let mut state = AppState::new(settings, pipeline, retriever, embedder)?;
    state.usage = usage;
    state.knowledge = Some(keeper);
    Ok(state)
}

/// Raises the process's soft limit of open files to its hard limit, and holds
/// `server.max_connections` far enough below it that the connections of both listeners
/// leave room for the upstream's, the indexes' and the session store's files.
fn fit_connections_to_open_files(server: &mut crate::config::ServerSettings) {
    const RESERVED: u64 = 256;
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-files limit");
            return;
        }
    };
    let room = (limit.saturating_sub(RESERVED) / 2).max(16);
    if (server.max_connections as u64) > room {
        tracing::warn!(
            open_files_limit = limit,
            max_connections = room,
            configured = server.max_connections,
            "server.max_connections held below the open-files limit (raise it with ulimit -n)"
        );
        server.max_connections = room as usize;
    }
}

/// What `pipeline` builds.
pub struct Parts {
    pub pipeline: Pipeline,
    pub retriever: Arc<Retriever>,
    pub embedder: Option<Arc<dyn Embedder>>,
}

/// The pipeline, its retriever and embedder; `with_sessions = false` runs without
/// conversation memory (and without opening the session store).
pub fn pipeline(settings: &Settings, with_sessions: bool) -> anyhow::Result<Parts> {
    let knowledge = open_knowledge(settings)?;
    let embedder = knowledge.dense.as_ref().map(|(e, _)| e.clone());
    pipeline_over(settings, with_sessions, knowledge, embedder)
}

/// The pipeline over opened knowledge, with the knowledge base's embedder.
fn pipeline_over(
    settings: &Settings,
    with_sessions: bool,
    knowledge: Knowledge,
    embedder: Option<Arc<dyn Embedder>>,
) -> anyhow::Result<Parts> {
    let chat = llm::from_settings(&settings.llm)?;
    let prompts = Prompts::load(&settings.assistant)?;
    let classifier: Box<dyn Classifier> = match settings.classifier.mode {
        ClassifierMode::Rules => Box::new(RulesClassifier),
        ClassifierMode::Llm => Box::new(LlmClassifier {
            chat: chat.clone(),
            model: settings.llm.model.clone(),
            template: prompts.classify.clone(),
            timeout: settings.classifier.timeout,
            history_messages: settings.classifier.history_messages,
        }),
    };
    let reformulator = match settings.reformulator.mode {
        ReformulatorMode::Off => Reformulator::Off,
        ReformulatorMode::Llm => Reformulator::Llm(LlmReformulator {
            chat: chat.clone(),
            model: settings.llm.model.clone(),
            template: prompts.reformulate.clone(),
            timeout: settings.reformulator.timeout,
        }),
    };
    let retriever = Arc::new(retriever_with(settings, knowledge, embedder.as_ref()));
    let sessions = if with_sessions {
        let store = sessions::store_from_settings(&settings.sessions, &settings.data_dir)?;
        let sessions = Arc::new(
            Sessions::new(
                store,
                settings.sessions.window_turns,
                settings.sessions.wait,
            )
            .with_max_turn_bytes(settings.sessions.max_session_bytes),
        );
        // Unused sessions are forgotten while the gateway runs.
        let every =
            (settings.sessions.ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(600));
        sessions.expire_every(every);
        Some(sessions)
    } else {
        None
    };
    let a = &settings.assistant;
    let pipeline = Pipeline::new(
        chat,
        PipelineConfig {
            assistant_model: a.model.trim().to_string(),
            upstream_model: settings.llm.model.clone(),
            passthrough: a.passthrough,
            prompts,
            context_tokens: a.context_tokens,
            context_policy: crate::context::Policy::from_settings(
                &settings.context,
                a.editor_context,
            ),
            completion_model: if settings.completion.model.trim().is_empty() {
                settings.llm.model.clone()
            } else {
                settings.completion.model.trim().to_string()
            },
            completion_template: settings.completion.template.clone(),
            fallback_models: settings
                .llm
                .fallbacks
                .iter()
                .map(|f| f.model.clone())
                .collect(),
            completion_context_chars: settings.completion.context_tokens * 4,
            completion_deadline: Duration::from_millis(settings.completion.deadline_ms),
            answer_reserve_tokens: a.answer_reserve_tokens,
            cite_sources: a.cite_sources,
            send_num_ctx: settings.llm.provider == Provider::Ollama,
            keep_alive: settings.llm.keep_alive.clone(),
            idle_timeout: settings.llm.idle_timeout,
        },
        Stages {
            classifier,
            reformulator,
            retriever: retriever.clone(),
            sessions,
            tokens: crate::llm::tokenizer_from_settings(&settings.llm)?,
            privacy: Arc::new(crate::privacy::Privacy::from_settings(&settings.privacy)?),
        },
    );
    Ok(Parts {
        pipeline,
        retriever,
        embedder,
    })
}

/// Stops the knowledge refreshes when dropped.
struct StopOnDrop(Option<Keeper>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(keeper) = &self.0 {
            keeper.stop();
        }
    }
}

/// Starts keeping the knowledge current: refreshes, and the watcher when
/// `knowledge.watch` is on (stopped when the returned guard is dropped).
fn keep_knowledge(state: &AppState) -> anyhow::Result<Option<crate::ingest::watch::Watcher>> {
    let Some(keeper) = &state.knowledge else {
        return Ok(None);
    };
    keeper.serve(state.retriever.clone())?;
    let k = &state.settings.knowledge;
    if !k.watch {
        return Ok(None);
    }
    // A source that cannot be watched (gone, or past the system's inotify watches) is
    // said, and the gateway serves and refreshes on demand all the same.
    match crate::ingest::watch::Watcher::start(
        keeper.clone(),
        &state.settings.data_dir,
        Rules::from_settings(&state.settings)?.exclude,
        k.watch_debounce,
    ) {
        Ok(watcher) => Ok(Some(watcher)),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "knowledge.watch: the sources are not watched; POST /v1/knowledge/refresh refreshes them");
            Ok(None)
        }
    }
}

/// Serves HTTP until `shutdown` resolves, then lets open streams finish for at most
/// `server.shutdown_grace_secs`.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_all(listener, None, state, shutdown).await
}

/// Serves HTTP, and gRPC when it has a listener, from one state, until `shutdown`
/// resolves; both stop together.
pub async fn serve_all(
    http: TcpListener,
    grpc: Option<TcpListener>,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use futures::FutureExt;
    let shutdown = shutdown.shared();
    // Stops the refreshes however serving ends (this future may be dropped).
    let _stop = StopOnDrop(state.knowledge.clone());
    let keeping = keep_knowledge(&state).map_err(std::io::Error::other)?;
    let grpc = async {
        match grpc {
            Some(listener) => crate::grpc::serve(listener, state.clone(), shutdown.clone()).await,
            None => Ok(()),
        }
    };
    let control = async {
        if state.knowledge.is_some() {
            let socket = IndexRoot::of(&state.settings).socket();
            crate::http::knowledge::serve_control(socket, state.clone(), shutdown.clone()).await;
        }
        Ok(())
    };
    let served = tokio::try_join!(
        crate::http::serve(http, state.clone(), shutdown.clone()),
        grpc,
        control
    );
    drop(keeping);
    served?;
    Ok(())
}

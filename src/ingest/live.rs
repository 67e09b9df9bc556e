//! The serving gateway's own index: it writes the index it searches, so the knowledge
//! keeps up while it serves, with no restart.
//!
//! The gateway holds `index/ingest.lock` for as long as it owns the index (another
//! process's `ingest` hands its work over instead, see `handoff`). Refreshes run one at a
//! time, in order, on a thread of their own (chunking and embedding are CPU work that must
//! not hold up the request workers): the configured `knowledge.sources` at start, what a
//! watcher or an operator asks for, the paths an `ingest` hands over. An incremental
//! refresh writes file by file into the live index, each file's chunks replaced in one
//! commit, so a search sees a file's old chunks or its new ones, never a mix; a rebuild is
//! written aside and replaces the searched indexes whole when it is complete.
//!
//! A gateway that starts while another process holds the lock serves what that index has
//! (read-only) and takes the index over as soon as the lock is free.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use super::layout::{IndexRoot, Live};
use super::progress::{Snapshot, Tracker};
use super::{DenseSink, Ingestor, Rules, Summary};
use crate::retrieval::hybrid::Retriever;
use crate::retrieval::indexes::Indexes;
use crate::retrieval::lexical::TantivyIndex;

/// Opens the indexes of one version folder: writable (`true`) or for reading only.
pub type Opener = Arc<dyn Fn(&Path, bool) -> anyhow::Result<Indexes> + Send + Sync>;

/// How often a gateway that does not own its index tries to take it over.
const TAKE_OVER_EVERY: Duration = Duration::from_secs(1);
/// Finished refreshes remembered for `GET /v1/knowledge/refresh/{id}`.
const KEPT: usize = 32;
/// Refreshes waiting at most; more are refused (the caller retries).
const MAX_QUEUED: usize = 64;

/// Who asked for a refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// `knowledge.sources`, when the gateway starts.
    Start,
    /// A change under the sources.
    Watch,
    /// `POST /v1/knowledge/refresh`.
    Api,
}

/// What a refresh indexes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Folders and files as `ingest` takes them; empty = `knowledge.sources`.
    pub paths: Vec<PathBuf>,
    /// Build a fresh index aside and swap it in whole.
    pub rebuild: bool,
}

/// One refresh, queued, running or done.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub id: u64,
    pub trigger: Trigger,
    #[serde(flatten)]
    pub request: Request,
    pub state: JobState,
    pub queued_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Snapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

/// Why a refresh was not queued.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    #[error("no knowledge.sources are configured: name the paths to index")]
    NoSources,
    #[error("{MAX_QUEUED} refreshes are waiting already: retry when they are done")]
    Full,
}

/// The status `GET /v1/knowledge` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Whether this gateway writes its index (else another process holds it and the
    /// gateway serves what it wrote, taking over when it is done).
    pub owner: bool,
    pub sources: Vec<String>,
    pub watch: bool,
    pub files: usize,
    pub chunks: usize,
    pub vectors: bool,
    pub last_refresh: Option<Job>,
    pub running: Option<Job>,
    pub queued: Vec<Job>,
    /// Changes seen under the sources and not yet refreshed.
    pub pending_changes: usize,
}

/// The gateway's index and its refreshes; cheap to clone.
#[derive(Clone)]
pub struct Keeper {
    inner: Arc<Inner>,
}

struct Inner {
    root: IndexRoot,
    open: Opener,
    rules: Rules,
    /// The retriever whose indexes are refreshed, set by `serve`.
    retriever: OnceLock<Arc<Retriever>>,
    sources: Vec<PathBuf>,
    watch: bool,
    state: Mutex<State>,
    wake: tokio::sync::Notify,
    /// Set by `stop`: the running refresh stops at its next batch, the index is let go.
    stopping: Arc<AtomicBool>,
    /// Whether this gateway owns the index now (its control socket is open only then).
    owner: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    /// `index/ingest.lock` and the writable indexes of the live version, while owned.
    owned: Option<(File, PathBuf, Indexes)>,
    next_id: u64,
    queue: VecDeque<Job>,
    running: Option<(Job, Arc<Tracker>)>,
    done: VecDeque<Job>,
    files: usize,
    chunks: usize,
    pending_changes: usize,
}

impl Keeper {
    /// Takes the index under `root` over when no other process holds it, else serves it
    /// read-only until it can; returns the keeper and the indexes to search first.
    pub fn open(
        root: IndexRoot,
        open: Opener,
        rules: Rules,
        sources: Vec<PathBuf>,
        watch: bool,
    ) -> anyhow::Result<(Self, Indexes)> {
        let (owned, indexes) = match take_over(&root, &open, !sources.is_empty()) {
            Ok(Some(owned)) => {
                let indexes = owned.2.clone();
                (Some(owned), indexes)
            }
            Ok(None) => (None, read_only(&root, &open)?),
            Err(e) => match root.live()? {
                Live::Missing(why) => {
                    tracing::error!(reason = %why, "no knowledge index: answering without knowledge");
                    (None, missing(why)?)
                }
                _ => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot write the knowledge index yet: serving it read-only");
                    (None, read_only(&root, &open)?)
                }
            },
        };
        let files = owned
            .as_ref()
            .map(|(_, dir, indexes)| manifest_counts(dir, indexes))
            .unwrap_or_default();
        let owned_now = owned.is_some();
        let keeper = Self {
            inner: Arc::new(Inner {
                root,
                open,
                rules,
                retriever: OnceLock::new(),
                sources,
                watch,
                state: Mutex::new(State {
                    owned,
                    files: files.0,
                    chunks: files.1,
                    ..State::default()
                }),
                wake: tokio::sync::Notify::new(),
                stopping: Arc::default(),
                owner: tokio::sync::watch::Sender::new(owned_now),
            }),
        };
        Ok((keeper, indexes))
    }

    /// Starts refreshing `retriever`'s indexes: the thread that runs refreshes (and takes
    /// the index over when it can), and the first refresh of `knowledge.sources`.
    pub fn serve(&self, retriever: Arc<Retriever>) -> anyhow::Result<()> {
        if self.inner.retriever.set(retriever).is_err() {
            anyhow::bail!("the keeper is already serving");
        }
        if !self.inner.sources.is_empty() {
            let request = Request {
                paths: Vec::new(),
                rebuild: false,
            };
            self.request(request, Trigger::Start)?;
        }
        let inner = self.inner.clone();
        let handle = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("knowledge-refresh".into())
            .spawn(move || handle.block_on(run(inner)))
            .context("cannot start the knowledge refresh thread")?;
        Ok(())
    }

    /// Stops refreshing: the running refresh stops after its batch (what it committed is
    /// kept; the next refresh resumes), then the refresh thread lets the index go.
    pub fn stop(&self) {
        self.inner.stopping.store(true, Ordering::Relaxed);
        self.inner.wake.notify_one();
    }

    /// Whether this gateway owns its index, as it changes.
    pub fn ownership(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.owner.subscribe()
    }

    /// Queues a refresh; one asked for again while it waits is that one. Returns its id.
    pub fn request(&self, mut request: Request, trigger: Trigger) -> Result<u64, Refused> {
        if request.paths.is_empty() && self.inner.sources.is_empty() {
            return Err(Refused::NoSources);
        }
        // Paths the sources already hold are a refresh of the sources: indexed on their
        // own they would be keyed apart from the sources' runs, each run undoing the other.
        if !request.paths.is_empty() && request.paths.iter().all(|p| self.in_sources(p)) {
            request.paths.clear();
        }
        let mut state = self.inner.lock();
        if let Some(waiting) = state.queue.iter().find(|j| j.request == request) {
            return Ok(waiting.id);
        }
        if state.queue.len() >= MAX_QUEUED {
            return Err(Refused::Full);
        }
        state.next_id += 1;
        let id = state.next_id;
        state.queue.push_back(Job {
            id,
            trigger,
            request,
            state: JobState::Queued,
            queued_at: now(),
            started_at: None,
            finished_at: None,
            progress: None,
            summary: None,
            error: None,
        });
        drop(state);
        self.inner.wake.notify_one();
        Ok(id)
    }

    /// A refresh by its id, while it is remembered.
    pub fn job(&self, id: u64) -> Option<Job> {
        let state = self.inner.lock();
        if let Some((job, tracker)) = state.running.as_ref().filter(|(j, _)| j.id == id) {
            return Some(with_progress(job, tracker));
        }
        state
            .queue
            .iter()
            .chain(state.done.iter())
            .find(|j| j.id == id)
            .cloned()
    }

    pub fn status(&self) -> Status {
        let state = self.inner.lock();
        Status {
            owner: state.owned.is_some(),
            sources: self
                .inner
                .sources
                .iter()
                .map(|s| s.display().to_string())
                .collect(),
            watch: self.inner.watch,
            files: state.files,
            chunks: state.chunks,
            vectors: self
                .inner
                .retriever
                .get()
                .is_some_and(|r| r.indexes().dense.is_some()),
            last_refresh: state.done.back().cloned(),
            running: state.running.as_ref().map(|(j, t)| with_progress(j, t)),
            queued: state.queue.iter().cloned().collect(),
            pending_changes: state.pending_changes,
        }
    }

    /// How many changes the watcher holds back (its debounce), for the status.
    pub fn set_pending_changes(&self, n: usize) {
        self.inner.lock().pending_changes = n;
    }

    /// The configured sources.
    pub fn sources(&self) -> &[PathBuf] {
        &self.inner.sources
    }

    /// Whether `path` is one of the sources or lies under one.
    fn in_sources(&self, path: &Path) -> bool {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let path = absolute(path);
        self.inner
            .sources
            .iter()
            .any(|s| path.starts_with(absolute(s)))
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Searches from now on read `indexes`.
    fn swap(&self, indexes: Indexes) {
        if let Some(retriever) = self.retriever.get() {
            retriever.swap(indexes);
        }
    }
}

fn with_progress(job: &Job, tracker: &Tracker) -> Job {
    let mut job = job.clone();
    job.progress = Some(tracker.snapshot());
    job
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The refresh loop: takes the index over when it can, then runs queued refreshes in
/// order until stopped.
async fn run(inner: Arc<Inner>) {
    let mut last_error = String::new();
    loop {
        if inner.stopping.load(Ordering::Relaxed) {
            // Let the index go (the lock with it) only now that no refresh writes.
            inner.owner.send_replace(false);
            inner.lock().owned = None;
            return;
        }
        if inner.lock().owned.is_none() {
            match take_over(&inner.root, &inner.open, !inner.sources.is_empty()) {
                Ok(Some(owned)) => {
                    let (files, chunks) = manifest_counts(&owned.1, &owned.2);
                    inner.swap(owned.2.clone());
                    let mut state = inner.lock();
                    (state.files, state.chunks) = (files, chunks);
                    state.owned = Some(owned);
                    drop(state);
                    inner.owner.send_replace(true);
                    tracing::info!("took the knowledge index over: this gateway refreshes it");
                }
                other => {
                    if let Err(e) = other {
                        let error = format!("{e:#}");
                        if error != last_error {
                            tracing::warn!(error = %error, "cannot take the knowledge index over yet");
                            last_error = error;
                        }
                    }
                    let _ = tokio::time::timeout(TAKE_OVER_EVERY, inner.wake.notified()).await;
                    continue;
                }
            }
        }
        let next = {
            let mut state = inner.lock();
            state.queue.pop_front().map(|mut job| {
                job.state = JobState::Running;
                job.started_at = Some(now());
                let tracker = Arc::new(Tracker::stoppable(inner.stopping.clone()));
                state.running = Some((job.clone(), tracker.clone()));
                (job, tracker)
            })
        };
        let Some((mut job, tracker)) = next else {
            inner.wake.notified().await;
            continue;
        };
        let outcome = refresh(&inner, &job.request, &tracker).await;
        job.finished_at = Some(now());
        job.progress = Some(tracker.snapshot());
        let mut state = inner.lock();
        state.running = None;
        match outcome {
            Ok(summary) => {
                tracing::info!(
                    id = job.id,
                    trigger = ?job.trigger,
                    files_indexed = summary.files_indexed,
                    files_removed = summary.files_removed,
                    chunks_written = summary.chunks_written,
                    chunks_embedded = summary.chunks_embedded,
                    "knowledge refreshed"
                );
                (state.files, state.chunks) = (summary.files_total, summary.chunks_total);
                job.state = JobState::Done;
                job.summary = Some(summary);
            }
            Err(e) => {
                let error = format!("{e:#}");
                tracing::warn!(id = job.id, trigger = ?job.trigger, error = %error, "knowledge refresh failed");
                job.state = JobState::Failed;
                job.error = Some(error);
            }
        }
        state.done.push_back(job);
        while state.done.len() > KEPT {
            state.done.pop_front();
        }
    }
}

/// Runs one refresh into the owned index (or, for a rebuild, a new version made live and
/// searched when whole).
async fn refresh(inner: &Inner, request: &Request, tracker: &Tracker) -> anyhow::Result<Summary> {
    let paths = if request.paths.is_empty() {
        inner.sources.clone()
    } else {
        request.paths.clone()
    };
    let (dir, indexes) = if request.rebuild {
        let dir = inner.root.new_version()?;
        let indexes = (inner.open)(&dir, true)?;
        (dir, indexes)
    } else {
        let state = inner.lock();
        let (_, dir, indexes) = state
            .owned
            .as_ref()
            .context("the gateway does not own its index")?;
        (dir.clone(), indexes.clone())
    };
    let ingestor = ingestor(&inner.rules, &indexes, &dir, request.rebuild);
    let summary = ingestor.run(&paths, tracker).await;
    if !request.rebuild {
        return summary;
    }
    match summary {
        Ok(summary) => {
            inner.swap(indexes.clone());
            let old = inner.lock().owned.as_mut().map(|(_, live, owned)| {
                *live = dir.clone();
                std::mem::replace(owned, indexes)
            });
            drop(old);
            inner.root.publish(&dir)?;
            Ok(summary)
        }
        Err(e) => {
            drop(indexes);
            let _ = std::fs::remove_dir_all(&dir);
            Err(e.context("the rebuild stopped and was discarded; the live index is unchanged"))
        }
    }
}

/// An ingestor writing into `indexes`, whose manifest is in `dir` (or kept by the index
/// itself, when shared). A rebuild of a shared index, which cannot start from an empty
/// folder, writes every file again in place.
pub fn ingestor(rules: &Rules, indexes: &Indexes, dir: &Path, rebuild: bool) -> Ingestor {
    Ingestor {
        reindex: rebuild && indexes.lexical.records().is_some(),
        lexical: indexes.lexical.clone(),
        dense: indexes.dense.as_ref().map(|(embedder, store)| DenseSink {
            embedder: embedder.clone(),
            store: store.clone(),
        }),
        rules: rules.clone(),
        manifest_path: dir.join("manifest.json"),
    }
}

/// The lock and the live version's writable indexes, or `None` while another process
/// holds the lock; `Err` when the indexes cannot be opened (still held by an index of
/// this process not yet let go, as in a gateway restarted in place, or broken).
///
/// An index that should be there and is not is replaced by an empty one only when `fill`
/// (the gateway has sources of its own to fill it with); else it stays reported.
fn take_over(
    root: &IndexRoot,
    open: &Opener,
    fill: bool,
) -> anyhow::Result<Option<(File, PathBuf, Indexes)>> {
    let Some(lock) = root.try_exclusive()? else {
        return Ok(None);
    };
    let dir = match root.live()? {
        Live::Missing(_) if fill => {
            let dir = root.new_version()?;
            drop(open(&dir, true)?);
            root.publish(&dir)?;
            dir
        }
        _ => root.for_update()?,
    };
    Ok(Some((lock, dir.clone(), open(&dir, true)?)))
}

/// The live version for reading only, while another process writes it; the vectors are
/// left out when that process holds them (the embedded engine has one holder).
fn read_only(root: &IndexRoot, open: &Opener) -> anyhow::Result<Indexes> {
    match root.live()? {
        Live::At(dir) => open(&dir, false).or_else(|e| {
            tracing::warn!(error = %format!("{e:#}"), "the vectors are held by an ingest: BM25 answers until it is done");
            Ok(Indexes {
                lexical: Arc::new(TantivyIndex::open_read_only(&dir.join("lexical"))?),
                dense: None,
                missing: None,
            })
        }),
        Live::None => empty(),
        Live::Missing(why) => missing(why),
    }
}

/// No knowledge yet (the first ingest is under way elsewhere).
fn empty() -> anyhow::Result<Indexes> {
    Ok(Indexes {
        lexical: Arc::new(TantivyIndex::in_memory()?),
        dense: None,
        missing: None,
    })
}

/// Empty indexes that say why there is no knowledge where there should be.
fn missing(why: String) -> anyhow::Result<Indexes> {
    Ok(Indexes {
        missing: Some(why),
        ..empty()?
    })
}

/// Files and chunks the manifest of `indexes` (in `dir`) lists.
fn manifest_counts(dir: &Path, indexes: &Indexes) -> (usize, usize) {
    super::ManifestStore::new(indexes.lexical.clone(), dir.join("manifest.json"))
        .load()
        .map(|m| (m.files.len(), m.files.values().map(|e| e.chunks).sum()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keeper(dir: &Path, sources: Vec<PathBuf>) -> Keeper {
        let open: Opener = Arc::new(|dir: &Path, writable: bool| {
            let lexical = dir.join("lexical");
            Ok(Indexes {
                lexical: Arc::new(if writable {
                    TantivyIndex::open(&lexical)?
                } else {
                    TantivyIndex::open_read_only(&lexical)?
                }),
                dense: None,
                missing: None,
            })
        });
        let settings = crate::config::Settings::load_without_env(None).unwrap();
        let rules = Rules::from_settings(&settings).unwrap();
        Keeper::open(IndexRoot::new(dir), open, rules, sources, false)
            .unwrap()
            .0
    }

    #[test]
    fn watched_refreshes_join_one_waiting_and_the_queue_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let k = keeper(dir.path(), vec![dir.path().join("docs")]);
        assert!(k.status().owner, "no other process holds the index");
        let sources = Request {
            paths: Vec::new(),
            rebuild: false,
        };
        let first = k.request(sources.clone(), Trigger::Watch).unwrap();
        assert_eq!(k.request(sources.clone(), Trigger::Watch), Ok(first));
        assert_eq!(k.request(sources.clone(), Trigger::Api), Ok(first));
        // Paths inside the sources are the sources' refresh; others are their own.
        let inside = Request {
            paths: vec![dir.path().join("docs/guide")],
            rebuild: false,
        };
        assert_eq!(k.request(inside, Trigger::Api), Ok(first));
        let elsewhere = |i: usize| Request {
            paths: vec![dir.path().join(format!("other{i}"))],
            rebuild: false,
        };
        let asked = k.request(elsewhere(0), Trigger::Api).unwrap();
        assert_ne!(asked, first);
        assert_eq!(k.job(asked).map(|j| j.state), Some(JobState::Queued));
        let mut i = 1;
        while k.status().queued.len() < MAX_QUEUED {
            k.request(elsewhere(i), Trigger::Api).unwrap();
            i += 1;
        }
        assert_eq!(k.request(elsewhere(i), Trigger::Api), Err(Refused::Full));
        // A second keeper of the same index serves it read-only.
        let other = keeper(dir.path(), Vec::new());
        assert!(!other.status().owner);
        let none = Request {
            paths: Vec::new(),
            rebuild: false,
        };
        assert_eq!(other.request(none, Trigger::Api), Err(Refused::NoSources));
    }
}

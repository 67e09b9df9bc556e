//! Ingestion: files and folders in, knowledge chunks out, written to the lexical index
//! and (with an embedder) the vector store.
//!
//! Incremental: a manifest remembers each file's content hash, so a second run only
//! re-processes changed files and removes the chunks of deleted ones. Files are written
//! in batches and the manifest is saved after each committed batch, so an interrupted
//! run leaves a usable index and the next run picks up where it stopped.

pub mod chunk;
pub mod definitions;
pub mod git;
pub mod handoff;
pub mod layout;
pub mod live;
pub mod progress;
pub mod walk;
pub mod watch;

pub use progress::{Bar, Progress, Quiet, Tracker};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use globset::GlobSet;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::embed::{Embedder, TextKind};
use crate::privacy::{self, Cleaned, Privacy};
use crate::retrieval::{KnowledgeChunk, LexicalIndex, VectorPoint, VectorStore};
use chunk::ChunkConfig;
use walk::{walk, Found, CREDENTIALS, EXCLUDED, EXCLUDED_BY_PRIVACY};

/// Files written per committed batch.
const FILES_PER_BATCH: usize = 32;
/// Files changed in a run from which the indexes are compacted after it.
const OPTIMIZE_AFTER_FILES: usize = FILES_PER_BATCH;

/// What the last runs indexed: file → content hash, plus what made the vectors.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Manifest {
    pub files: BTreeMap<String, FileEntry>,
    /// The embedder that made the stored vectors (`None`: no vectors).
    pub embedder: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEntry {
    pub sha256: String,
    pub chunks: usize,
    /// The root it was found under (deletions are only decided within the same roots).
    pub root: String,
}

impl Manifest {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not an ingest manifest", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes atomically and durably: a temporary file, synced, renamed over the old one,
    /// the folder synced (a crash leaves the old manifest or the new, whole).
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        use std::io::Write;
        let tmp = path.with_extension("json.tmp");
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&serde_json::to_vec_pretty(self)?)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            layout::sync_dir(dir)?;
        }
        Ok(())
    }
}

/// Where the manifest is kept: a file beside the index, or with a shared index itself
/// (`LexicalIndex::records`), one record per file, so every process writing that index
/// reads one manifest and writes only what it changed.
pub struct ManifestStore {
    index: Arc<dyn LexicalIndex>,
    path: PathBuf,
    /// The records as last loaded or saved (shared index only): what a save must change.
    saved: std::sync::Mutex<BTreeMap<String, serde_json::Value>>,
}

/// The key of the manifest's own record in a shared index (file keys are never empty).
const EMBEDDER_RECORD: &str = "";

impl ManifestStore {
    pub fn new(index: Arc<dyn LexicalIndex>, path: PathBuf) -> Self {
        Self {
            index,
            path,
            saved: Default::default(),
        }
    }

    pub fn load(&self) -> anyhow::Result<Manifest> {
        let Some(records) = self.index.records() else {
            return Manifest::load(&self.path);
        };
        let stored = records.load().context("reading the index's records")?;
        let mut manifest = Manifest::default();
        for (key, value) in &stored {
            if key == EMBEDDER_RECORD {
                manifest.embedder = serde_json::from_value(value.clone()).unwrap_or_default();
            } else if let Ok(entry) = serde_json::from_value::<FileEntry>(value.clone()) {
                manifest.files.insert(key.clone(), entry);
            }
        }
        *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = stored;
        Ok(manifest)
    }

    pub fn save(&self, manifest: &Manifest) -> anyhow::Result<()> {
        let Some(records) = self.index.records() else {
            return manifest.save(&self.path);
        };
        let mut now: BTreeMap<String, serde_json::Value> = manifest
            .files
            .iter()
            .map(|(k, e)| Ok((k.clone(), serde_json::to_value(e)?)))
            .collect::<anyhow::Result<_>>()?;
        now.insert(
            EMBEDDER_RECORD.into(),
            serde_json::to_value(&manifest.embedder)?,
        );
        let mut saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let changed: Vec<(String, serde_json::Value)> = now
            .iter()
            .filter(|(k, v)| saved.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let gone: Vec<String> = saved
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
        records
            .put(&changed)
            .context("writing the index's records")?;
        records
            .remove(&gone)
            .context("removing the index's records")?;
        *saved = now;
        Ok(())
    }
}

/// Files passed over: (file, reason).
pub type Skipped = Vec<(String, String)>;

/// The end-of-run summary.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub files_seen: usize,
    pub files_indexed: usize,
    pub files_unchanged: usize,
    pub files_removed: usize,
    pub chunks_written: usize,
    /// Of the chunks written, those embedded anew (the others kept the vector stored for
    /// the same text).
    pub chunks_embedded: usize,
    pub chunks_total: usize,
    /// Files in the index after the run.
    pub files_total: usize,
    pub skipped: Skipped,
    /// Files left out as credentials by name or by `ingest.exclude` (also in `skipped`).
    pub files_excluded: usize,
    /// Secrets redacted in the chunks written, and invisible characters removed.
    pub secrets_redacted: usize,
    pub invisible_removed: usize,
    /// What went wrong after every file was written (the index is whole and searchable,
    /// only slower): said after the summary, the run still succeeds.
    pub warnings: Vec<String>,
}

/// Where the dense half goes, when there is one.
pub struct DenseSink {
    pub embedder: Arc<dyn Embedder>,
    pub store: Arc<dyn VectorStore>,
}

/// What is indexed and how, the same for every run.
#[derive(Clone)]
pub struct Rules {
    pub chunking: ChunkConfig,
    pub max_file_bytes: u64,
    /// Redaction and invisible characters, applied to every chunk before it is stored.
    pub privacy: Arc<Privacy>,
    /// `ingest.exclude`.
    pub exclude: GlobSet,
    /// `data_dir`, never indexed (the index itself is written there): a source that holds
    /// it would index its own index.
    pub data_dir: PathBuf,
}

impl Rules {
    pub fn from_settings(settings: &crate::config::Settings) -> anyhow::Result<Self> {
        Ok(Self {
            chunking: ChunkConfig {
                max_chars: settings.ingest.chunk_chars,
                overlap_chars: settings.ingest.overlap_chars,
            },
            max_file_bytes: settings.ingest.max_file_bytes,
            privacy: Arc::new(Privacy::from_settings(&settings.privacy)?),
            exclude: privacy::globs(&settings.ingest.exclude).context("ingest.exclude")?,
            data_dir: absolute(&settings.data_dir),
        })
    }
}

pub struct Ingestor {
    pub lexical: Arc<dyn LexicalIndex>,
    pub dense: Option<DenseSink>,
    pub rules: Rules,
    pub manifest_path: PathBuf,
    /// Every file is read and written again even when its hash is known.
    pub reindex: bool,
}

impl Ingestor {
    /// Ingests `roots`. `progress` is told the number of files to process, then each
    /// file as it is done.
    pub async fn run(&self, roots: &[PathBuf], progress: &dyn Progress) -> anyhow::Result<Summary> {
        let store = ManifestStore::new(self.lexical.clone(), self.manifest_path.clone());
        let mut manifest = store.load().context("reading the ingest manifest")?;
        let embedder_name = self.dense.as_ref().map(|d| d.embedder.describe());
        // Stored vectors are reused only when this embedder made them: another's are
        // dropped first, so that a run stopped half way leaves none to be reused later.
        let reuse = same_embedder(manifest.embedder.as_deref(), embedder_name.as_deref());
        if !reuse && !manifest.files.is_empty() {
            tracing::warn!(
                before = ?manifest.embedder,
                now = ?embedder_name,
                "the embedder changed: every file is re-indexed"
            );
            if let Some(d) = &self.dense {
                let known: Vec<String> = manifest.files.keys().cloned().collect();
                d.store
                    .remove_files(&known)
                    .await
                    .context("removing another embedder's vectors")?;
            }
            manifest.files.clear();
        }
        manifest.embedder = embedder_name;

        let mut summary = Summary::default();
        let (found, skipped) = walk(roots, &self.rules).context("walking the folders to ingest")?;
        let (found, excluded): (Vec<Found>, Vec<Found>) = found
            .into_iter()
            .partition(|f| !self.rules.privacy.excluded(&f.key));
        let mut skipped = skipped;
        skipped.extend(
            excluded
                .into_iter()
                .map(|f| (f.key, EXCLUDED_BY_PRIVACY.into())),
        );
        summary.files_excluded = skipped
            .iter()
            .filter(|(_, why)| why == CREDENTIALS || why == EXCLUDED || why == EXCLUDED_BY_PRIVACY)
            .count();
        summary.skipped = skipped;
        summary.files_seen = found.len();
        let root_names: Vec<String> = roots.iter().map(|r| root_name(r)).collect();

        // Deleted: known under these roots, not found now (or gone before it was read).
        let present: std::collections::HashSet<&str> =
            found.iter().map(|f| f.key.as_str()).collect();
        let mut deleted: Vec<String> = manifest
            .files
            .iter()
            .filter(|(k, e)| {
                root_names.contains(&root_name(Path::new(&e.root))) && !present.contains(k.as_str())
            })
            .map(|(k, _)| k.clone())
            .collect();

        // Changed or new: read, hash, compare.
        let mut todo = Vec::new();
        for f in found {
            let bytes = match f.origin.read() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Deleted between the walk and the read: gone, like any deleted file.
                    if manifest.files.contains_key(&f.key) {
                        deleted.push(f.key);
                    }
                    continue;
                }
                Err(e) => {
                    summary.skipped.push((f.key, format!("unreadable: {e}")));
                    continue;
                }
            };
            let text = match String::from_utf8(bytes) {
                Ok(t) if !t.contains('\0') => t,
                _ => {
                    tracing::warn!(file = ?f.key, "skipped: binary or not UTF-8");
                    summary.skipped.push((f.key, "binary or not UTF-8".into()));
                    continue;
                }
            };
            let sha = hex(&Sha256::digest(text.as_bytes()));
            if let Some(entry) = manifest
                .files
                .get_mut(&f.key)
                .filter(|e| !self.reindex && e.sha256 == sha)
            {
                // The root as named now (an index from before absolute roots).
                entry.root.clone_from(&f.root);
                summary.files_unchanged += 1;
                continue;
            }
            todo.push((f, text, sha));
        }

        progress.start(todo.len() as u64 + deleted.len() as u64);
        if !deleted.is_empty() {
            self.lexical
                .remove_files(&deleted)
                .context("removing deleted files from the lexical index")?;
            if let Some(d) = &self.dense {
                d.store
                    .remove_files(&deleted)
                    .await
                    .context("removing deleted files from the vector store")?;
            }
            for k in &deleted {
                manifest.files.remove(k);
            }
            store
                .save(&manifest)
                .context("saving the ingest manifest")?;
            summary.files_removed = deleted.len();
            progress.advance(deleted.len() as u64, 0);
        }

        for batch in todo.chunks(FILES_PER_BATCH) {
            if progress.stopped() {
                anyhow::bail!(
                    "stopped with {} of {} files done (the gateway is stopping); the next run resumes",
                    summary.files_indexed,
                    todo.len()
                );
            }
            let mut cleaned = Cleaned::default();
            let files: Vec<(String, Vec<KnowledgeChunk>)> = batch
                .iter()
                .map(|(f, text, _)| {
                    // The whole file first: a secret spread over lines (a private key) is
                    // found whole before chunks cut it; line numbers stay right.
                    let mut text = text.clone();
                    cleaned.add(self.rules.privacy.clean_file(&mut text));
                    let mut chunks = chunk::chunk_file(&f.key, &text, &self.rules.chunking);
                    for c in &mut chunks {
                        cleaned.add(self.rules.privacy.clean(&mut c.section));
                    }
                    (f.key.clone(), chunks)
                })
                .collect();
            if !cleaned.is_empty() {
                tracing::info!(
                    secrets = ?cleaned.secrets,
                    invisible = cleaned.invisible,
                    "redacted in the chunks of a batch"
                );
                cleaned.count("ingest");
            }
            summary.secrets_redacted += cleaned.secrets_total();
            summary.invisible_removed += cleaned.invisible;
            let n_chunks: usize = files.iter().map(|(_, c)| c.len()).sum();
            if let Some(d) = &self.dense {
                summary.chunks_embedded += self.write_vectors(d, &files, reuse).await?;
            }
            self.lexical
                .replace_files(&files)
                .context("writing chunks to the lexical index")?;
            for ((f, _, sha), (_, chunks)) in batch.iter().zip(&files) {
                manifest.files.insert(
                    f.key.clone(),
                    FileEntry {
                        sha256: sha.clone(),
                        chunks: chunks.len(),
                        root: f.root.clone(),
                    },
                );
            }
            store
                .save(&manifest)
                .context("saving the ingest manifest")?;
            summary.files_indexed += batch.len();
            summary.chunks_written += n_chunks;
            progress.advance(batch.len() as u64, n_chunks as u64);
        }
        // Every file is committed: what is left only makes searches faster, so a failure
        // here is said, not fatal (the index is whole either way). Its cost grows with the
        // whole index, so a run of a few files (a watched save) leaves it to the next large
        // one: the lexical writer merges small segments as it goes, and a few unindexed
        // vectors are searched exactly.
        let changed = summary.files_indexed + summary.files_removed;
        if changed >= OPTIMIZE_AFTER_FILES {
            if let Err(e) = self.lexical.optimize() {
                tracing::warn!(error = %format!("{e:#}"), "merging the lexical index failed");
                summary.warnings.push(format!(
                    "the lexical index is complete but merging its segments failed ({e:#}); searches are slower until the next ingest"
                ));
            }
        }
        if let Some(d) = &self.dense {
            if summary.files_indexed >= OPTIMIZE_AFTER_FILES {
                if let Err(e) = d.store.optimize().await {
                    tracing::warn!(error = %format!("{e:#}"), "building the vector index failed");
                    summary.warnings.push(format!(
                        "the vectors are complete but building their search index failed ({e:#}); vector searches are slower until the next ingest"
                    ));
                }
            }
        }
        summary.chunks_total = manifest.files.values().map(|e| e.chunks).sum();
        summary.files_total = manifest.files.len();
        progress.finish();
        Ok(summary)
    }

    /// Writes the vectors of these files' chunks: with `reuse` (the stored vectors are
    /// this embedder's), a chunk whose id (its file, section and text) is stored keeps its
    /// vector, the others are embedded; the new points are written before the files' old
    /// ones go, so a search meanwhile finds the file. Returns how many chunks were embedded.
    async fn write_vectors(
        &self,
        dense: &DenseSink,
        files: &[(String, Vec<KnowledgeChunk>)],
        reuse: bool,
    ) -> anyhow::Result<usize> {
        let chunks: Vec<&KnowledgeChunk> = files.iter().flat_map(|(_, c)| c).collect();
        let keys: Vec<String> = files.iter().map(|(k, _)| k.clone()).collect();
        let ids: Vec<String> = chunks.iter().map(|c| c.chunk_id.clone()).collect();
        let mut stored = if reuse {
            dense
                .store
                .vectors(&ids)
                .await
                .context("reading the stored vectors of changed files")?
        } else {
            Default::default()
        };
        let new: Vec<&KnowledgeChunk> = chunks
            .iter()
            .copied()
            .filter(|c| !stored.contains_key(&c.chunk_id))
            .collect();
        if !new.is_empty() {
            let texts: Vec<String> = new.iter().map(|c| embedding_text(c)).collect();
            let vectors = dense
                .embedder
                .embed(&texts, TextKind::Passage)
                .await
                .map_err(|e| anyhow!("embedding failed: {e}"))?;
            for (c, v) in new.iter().zip(vectors) {
                stored.insert(c.chunk_id.clone(), v);
            }
        }
        if let Some(dimension) = stored.values().next().map(Vec::len) {
            dense
                .store
                .ensure_collection(dimension)
                .await
                .context("creating the vector collection")?;
        }
        let points: Vec<VectorPoint> = chunks
            .into_iter()
            .filter_map(|c| {
                stored.remove(&c.chunk_id).map(|vector| VectorPoint {
                    chunk: c.clone(),
                    vector,
                })
            })
            .collect();
        if !points.is_empty() {
            dense
                .store
                .upsert(points)
                .await
                .context("writing vectors to the vector store")?;
        }
        dense
            .store
            .remove_files_except(&keys, &ids)
            .await
            .context("removing changed files' old chunks from the vector store")?;
        Ok(new.len())
    }
}

/// Whether the vectors of an index were made by this embedder. The local embedder used to
/// be described by its folder alone (`local /path`), and now by its name too
/// (`local all-MiniLM-L6-v2 in /path`): the same folder is the same model.
fn same_embedder(before: Option<&str>, now: Option<&str>) -> bool {
    match (before, now) {
        (Some(b), Some(n)) if b != n => b
            .strip_prefix("local ")
            .is_some_and(|folder| n.starts_with("local ") && n.ends_with(&format!(" in {folder}"))),
        _ => before == now,
    }
}

/// What is embedded for a chunk: its section path, then its text.
fn embedding_text(c: &KnowledgeChunk) -> String {
    if c.section.is_empty() {
        c.text.clone()
    } else {
        format!("{}\n{}", c.section, c.text)
    }
}

/// A root as the manifest records it: its absolute path, so that the same folder named
/// from another working folder (the CLI's, the gateway's) is the same root.
pub(crate) fn root_name(root: &Path) -> String {
    absolute(root).display().to_string()
}

/// `path` made absolute against the working folder (`.` and `..` kept, links not followed).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_embedder_named_anew_is_the_same_embedder() {
        let old = Some("local /m/all-MiniLM");
        assert!(same_embedder(
            old,
            Some("local all-MiniLM-L6-v2 in /m/all-MiniLM")
        ));
        assert!(!same_embedder(
            old,
            Some("local all-MiniLM-L6-v2 in /m/other")
        ));
        assert!(!same_embedder(old, Some("ollama x at http://h")));
        assert!(same_embedder(None, None));
        assert!(!same_embedder(None, Some("local x in /m")));
    }
}

//! Watches `knowledge.sources` while the gateway serves (`knowledge.watch`): a change
//! under a source (a file written, added, deleted or renamed, a folder made or removed)
//! queues one refresh of the sources once the changes have been quiet for
//! `knowledge.watch_debounce_ms` (a burst of saves, a checkout, is one refresh). The
//! refresh walks the sources and re-reads only what changed (the manifest's hashes), so a
//! refresh after one edit chunks that file and embeds only its chunks whose text changed.
//!
//! Changes that cannot change the index start nothing: reads, files the walk skips
//! (hidden, `.gitignore`d at a source's root, `ingest.exclude`, not a document or source
//! file) and anything under `data_dir` (where the index itself is written).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use globset::GlobSet;
use ignore::gitignore::Gitignore;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};

use super::absolute;
use super::git::GitSource;
use super::live::{Keeper, Request, Trigger};

/// Changed paths held at most between two refreshes; past it, one refresh covers them all.
const MAX_HELD: usize = 100_000;
/// Longest a stream of changes that never goes quiet holds a refresh back.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// Watches while it lives; dropping it stops the watch.
pub struct Watcher {
    _watcher: RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A source and what its walk leaves out.
struct Source {
    root: PathBuf,
    gitignore: Gitignore,
    /// For a repository at a ref (`path@ref`): its git folder, where a commit moves refs.
    git_dir: Option<PathBuf>,
}

/// What decides whether a changed path can change the index.
struct Filter {
    sources: Vec<Source>,
    /// `data_dir` as named and as resolved (links followed): never a change that matters.
    data_dirs: Vec<PathBuf>,
    exclude: GlobSet,
}

/// The changes seen and not yet refreshed, and a wake-up for the debounce loop.
#[derive(Default)]
struct Seen {
    paths: Mutex<HashSet<PathBuf>>,
    wake: tokio::sync::Notify,
}

impl Watcher {
    /// Watches `keeper`'s sources; `data_dir` is never watched for changes.
    pub fn start(
        keeper: Keeper,
        data_dir: &Path,
        exclude: GlobSet,
        debounce: Duration,
    ) -> anyhow::Result<Self> {
        let filter = Arc::new(Filter {
            sources: keeper
                .sources()
                .iter()
                .map(|s| {
                    let root = absolute(s);
                    let git_dir = GitSource::parse(&root).map(|g| g.git_dir());
                    let folder = if root.is_dir() {
                        root.clone()
                    } else {
                        root.parent().map(Path::to_path_buf).unwrap_or_default()
                    };
                    Source {
                        gitignore: Gitignore::new(folder.join(".gitignore")).0,
                        root,
                        git_dir,
                    }
                })
                .collect(),
            data_dirs: [Some(absolute(data_dir)), data_dir.canonicalize().ok()]
                .into_iter()
                .flatten()
                .collect(),
            exclude,
        });
        let seen = Arc::new(Seen::default());
        let handler = {
            let seen = seen.clone();
            let filter = filter.clone();
            move |event: notify::Result<notify::Event>| {
                let event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        // An overflowed queue loses changes: a refresh finds them all.
                        tracing::warn!(error = %e, "watching the knowledge sources: refreshing them all");
                        seen.note([PathBuf::from("(overflow)")]);
                        return;
                    }
                };
                if ignored_kind(&event.kind) {
                    return;
                }
                let relevant: Vec<PathBuf> = event
                    .paths
                    .into_iter()
                    .filter(|p| filter.matters(p))
                    .collect();
                if !relevant.is_empty() {
                    seen.note(relevant);
                }
            }
        };
        let mut watcher =
            notify::recommended_watcher(handler).context("cannot watch the knowledge sources")?;
        for source in &filter.sources {
            // A file is watched through its folder: an editor's save replaces the file (a
            // new inode), which a watch on the file itself would stop seeing.
            let (path, mode) = if let Some(git_dir) = &source.git_dir {
                (git_dir.as_path(), RecursiveMode::Recursive)
            } else if source.root.is_dir() {
                (source.root.as_path(), RecursiveMode::Recursive)
            } else {
                let folder = source.root.parent().unwrap_or(Path::new("/"));
                (folder, RecursiveMode::NonRecursive)
            };
            watcher
                .watch(path, mode)
                .with_context(|| format!("cannot watch {}", path.display()))?;
        }
        tracing::info!(
            sources = filter.sources.len(),
            debounce_ms = debounce.as_millis() as u64,
            "watching the knowledge sources"
        );
        let task = tokio::spawn(debounced(keeper, seen, debounce));
        Ok(Self {
            _watcher: watcher,
            task,
        })
    }
}

impl Seen {
    fn note(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut held = self.paths.lock().unwrap_or_else(|e| e.into_inner());
        for p in paths {
            if held.len() >= MAX_HELD {
                break;
            }
            held.insert(p);
        }
        drop(held);
        self.wake.notify_one();
    }

    fn held(&self) -> usize {
        self.paths.lock().map_or(0, |p| p.len())
    }
}

/// Waits for changes, then for them to go quiet, then queues one refresh of the sources.
async fn debounced(keeper: Keeper, seen: Arc<Seen>, debounce: Duration) {
    loop {
        seen.wake.notified().await;
        let started = tokio::time::Instant::now();
        // Quiet for `debounce`, or `MAX_WAIT` since the first change.
        loop {
            keeper.set_pending_changes(seen.held());
            let quiet = tokio::time::timeout(debounce, seen.wake.notified()).await;
            if quiet.is_err() || started.elapsed() >= MAX_WAIT {
                break;
            }
        }
        let changed = std::mem::take(&mut *seen.paths.lock().unwrap_or_else(|e| e.into_inner()));
        keeper.set_pending_changes(0);
        if changed.is_empty() {
            continue;
        }
        let request = Request {
            paths: Vec::new(),
            rebuild: false,
        };
        match keeper.request(request, Trigger::Watch) {
            Ok(id) => tracing::info!(
                id,
                changes = changed.len(),
                "knowledge sources changed: refresh queued"
            ),
            Err(e) => tracing::warn!(error = %e, "knowledge sources changed: no refresh queued"),
        }
    }
}

/// Events that change nothing: reads, and closing a file opened for reading.
fn ignored_kind(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => false,
        EventKind::Access(_) => true,
        _ => false,
    }
}

impl Filter {
    /// Whether a change at `path` can change the index.
    fn matters(&self, path: &Path) -> bool {
        if self.data_dirs.iter().any(|d| path.starts_with(d)) {
            return false;
        }
        // A repository at a ref changes when its refs do (a commit, a fetch, a checkout of
        // the branch elsewhere), not with its working tree.
        let moved_ref = |git_dir: &PathBuf| {
            path.strip_prefix(git_dir).is_ok_and(|inside| {
                inside.starts_with("refs")
                    || inside == Path::new("packed-refs")
                    || inside == Path::new("HEAD")
            })
        };
        if self
            .sources
            .iter()
            .filter_map(|s| s.git_dir.as_ref())
            .any(moved_ref)
        {
            return true;
        }
        let Some(source) = self
            .sources
            .iter()
            .filter(|s| s.git_dir.is_none())
            .find(|s| path == s.root || path.starts_with(&s.root))
        else {
            return false;
        };
        let relative = path.strip_prefix(&source.root).unwrap_or(path);
        if relative
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
        {
            return false;
        }
        let relative_text = relative.to_string_lossy().replace('\\', "/");
        if !relative_text.is_empty() && self.exclude.is_match(&relative_text) {
            return false;
        }
        let is_dir = path.is_dir();
        if source
            .gitignore
            .matched_path_or_any_parents(path, is_dir)
            .is_ignore()
        {
            return false;
        }
        // A folder, or a path that is gone (a file or a folder): the walk decides. A file:
        // only a kind the walk indexes.
        // A source that is a file is known by its own name.
        let name = if relative_text.is_empty() {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            relative_text
        };
        is_dir || !path.exists() || super::chunk::kind_of(&name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_the_walk_would_index_matter() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("docs");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join(".gitignore"), "build/\n*.log\n").unwrap();
        for f in ["a.md", "sub/b.rs", "x.log", "image.png"] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        let filter = Filter {
            sources: vec![Source {
                gitignore: Gitignore::new(root.join(".gitignore")).0,
                root: root.clone(),
                git_dir: None,
            }],
            data_dirs: vec![root.join("data")],
            exclude: crate::privacy::globs(&["drafts/**".to_string()]).unwrap(),
        };
        for yes in ["a.md", "sub/b.rs", "sub", "gone.md", "gone-folder"] {
            assert!(filter.matters(&root.join(yes)), "{yes}");
        }
        for no in [
            "x.log",
            "build/out.md",
            "image.png",
            ".git/index",
            "data/index/CURRENT",
            "drafts/plan.md",
        ] {
            assert!(!filter.matters(&root.join(no)), "{no}");
        }
        assert!(!filter.matters(&dir.path().join("elsewhere.md")));
        // A source that is a file: itself, not its neighbours.
        let file = Filter {
            sources: vec![Source {
                gitignore: Gitignore::empty(),
                root: root.join("a.md"),
                git_dir: None,
            }],
            data_dirs: Vec::new(),
            exclude: globset::GlobSet::empty(),
        };
        assert!(file.matters(&root.join("a.md")));
        assert!(!file.matters(&root.join("x.log")));
        assert!(!file.matters(&root.join("a.md.swp")));
    }

    #[test]
    fn reads_are_not_changes() {
        assert!(ignored_kind(&EventKind::Access(AccessKind::Read)));
        assert!(ignored_kind(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!ignored_kind(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(!ignored_kind(&EventKind::Remove(
            notify::event::RemoveKind::Any
        )));
    }
}

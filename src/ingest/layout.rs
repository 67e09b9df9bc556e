//! Where the knowledge indexes live under `data_dir/index`, and how a rebuild replaces
//! them with no moment when there is none.
//!
//! ```text
//! data_dir/index/CURRENT       the live version's folder name (one line)
//! data_dir/index/v-<time>/     lexical/, vectors/, manifest.json
//! ```
//!
//! A rebuild writes a new version folder, syncs it to disk, then points `CURRENT` at it
//! with one atomic rename (syncing the folder that holds it), then deletes the old
//! version: a crash at any point leaves `CURRENT` naming a whole index. An index written
//! before versions existed (`lexical/` right under `index/`) is read as it is, and
//! replaced by the first rebuild.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

const POINTER: &str = "CURRENT";
const LOCK: &str = "ingest.lock";
const VERSION_PREFIX: &str = "v-";

/// The live index, as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// A version folder (or, for an index from before versions, the root itself).
    At(PathBuf),
    /// No index was ever built here.
    None,
    /// There should be one and there is not: why, and what to do.
    Missing(String),
}

/// `data_dir/index`.
pub struct IndexRoot {
    dir: PathBuf,
    /// The knowledge lives in a server shared by every gateway (`qdrant.lexical`): a
    /// version folder holds nothing of it, and is whole as soon as it exists.
    shared: bool,
}

impl IndexRoot {
    pub fn new(root: &Path) -> Self {
        Self {
            dir: root.to_path_buf(),
            shared: false,
        }
    }

    /// The index of a gateway configured by `settings`.
    pub fn of(settings: &crate::config::Settings) -> Self {
        Self {
            shared: settings.qdrant.url.is_some() && settings.qdrant.lexical,
            ..Self::new(&settings.index_dir())
        }
    }

    /// Whether a version folder holds an index: its lexical index, or, when the
    /// knowledge is shared, nothing at all.
    fn whole(&self, folder: &Path) -> bool {
        whole(folder) || (self.shared && folder.is_dir())
    }

    pub fn live(&self) -> anyhow::Result<Live> {
        let pointer = self.dir.join(POINTER);
        match std::fs::read_to_string(&pointer) {
            Ok(name) => {
                let name = name.trim();
                let version = self.dir.join(name);
                if valid_name(name) && self.whole(&version) {
                    Ok(Live::At(version))
                } else {
                    Ok(Live::Missing(format!(
                        "{} names the index version '{name}', which is missing or has no lexical index: run `assist-gateway ingest --rebuild PATH`",
                        pointer.display()
                    )))
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.dir.join("lexical").is_dir() {
                    return Ok(if whole(&self.dir) {
                        Live::At(self.dir.clone())
                    } else {
                        Live::Missing(format!(
                            "the index in {} has no lexical index: run `assist-gateway ingest --rebuild PATH`",
                            self.dir.display()
                        ))
                    });
                }
                // The rename-based rebuild of earlier versions could stop between its two
                // renames, leaving the index aside.
                let aside = ["old", "rebuild"]
                    .map(|ext| self.dir.with_extension(ext))
                    .into_iter()
                    .find(|p| p.join("lexical").is_dir());
                Ok(match aside {
                    Some(p) => Live::Missing(format!(
                        "an interrupted rebuild left the index in {}: move it to {}, or run `assist-gateway ingest --rebuild PATH`",
                        p.display(),
                        self.dir.display()
                    )),
                    None => Live::None,
                })
            }
            Err(e) => Err(e).with_context(|| format!("cannot read {}", pointer.display())),
        }
    }

    /// The folder an incremental ingest writes into: the live index, or a first version
    /// made live at once (it is filled in place, batch by batch), with an empty lexical
    /// index in it.
    pub fn for_update(&self) -> anyhow::Result<PathBuf> {
        match self.live()? {
            Live::At(path) => Ok(path),
            Live::None => {
                let version = self.new_version()?;
                if !self.shared {
                    crate::retrieval::lexical::TantivyIndex::open(&version.join("lexical"))?;
                }
                self.point_at(&version)?;
                Ok(version)
            }
            Live::Missing(why) => anyhow::bail!("{why}"),
        }
    }

    /// Holds `index/ingest.lock` while an ingest writes (and a rebuild publishes), so two
    /// ingests never delete each other's work; `Err` naming the lock while another holds it.
    pub fn exclusive(&self) -> anyhow::Result<File> {
        self.try_exclusive()?.with_context(|| {
            format!(
                "another ingest is writing this index ({} is locked): wait for it to finish",
                self.dir.join(LOCK).display()
            )
        })
    }

    /// `index/ingest.lock`, or `None` while another holds it (an ingest, or the serving
    /// gateway, which holds it as long as it owns the index).
    pub fn try_exclusive(&self) -> anyhow::Result<Option<File>> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let path = self.dir.join(LOCK);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }

    /// The socket a serving gateway that owns this index answers `ingest` on, in a folder
    /// only its user may enter (`control/`, mode 0700).
    pub fn socket(&self) -> PathBuf {
        self.dir.join("control").join("gateway.sock")
    }

    /// A new, empty version folder (not live until [`publish`](Self::publish)).
    pub fn new_version(&self) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let name = format!(
            "{VERSION_PREFIX}{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%.9f")
        );
        let path = self.dir.join(name);
        std::fs::create_dir(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(path)
    }

    /// Makes a finished version live: synced to disk, pointed at by one atomic rename,
    /// then everything else under the root (the version it replaces, folders of rebuilds
    /// that never finished, an index from before versions) deleted.
    pub fn publish(&self, version: &Path) -> anyhow::Result<()> {
        sync_tree(version)?;
        self.point_at(version)?;
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let stale = path != version
                && (name.starts_with(VERSION_PREFIX)
                    || ["lexical", "vectors", "manifest.json", "manifest.json.tmp"]
                        .contains(&name));
            if stale {
                let removed = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                if let Err(e) = removed {
                    tracing::warn!(path = %path.display(), error = %e, "could not delete an old index version");
                }
            }
        }
        Ok(())
    }

    /// Writes `CURRENT` (temporary file, synced, renamed over it, folder synced).
    fn point_at(&self, version: &Path) -> anyhow::Result<()> {
        let name = version
            .file_name()
            .and_then(|n| n.to_str())
            .context("an index version folder has a name")?;
        let tmp = self.dir.join(format!("{POINTER}.tmp"));
        let mut file = File::create(&tmp)?;
        writeln!(file, "{name}")?;
        file.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(POINTER))?;
        sync_dir(&self.dir)
    }
}

/// A version folder (or a root from before versions) with its lexical index in it.
fn whole(folder: &Path) -> bool {
    folder.join("lexical").join("meta.json").is_file()
}

fn valid_name(name: &str) -> bool {
    name.starts_with(VERSION_PREFIX) && !name.contains(['/', '\\']) && name != ".."
}

/// Syncs a file's or a folder's contents to disk.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", dir.display()))
}

/// Syncs every file and folder under `root` to disk.
fn sync_tree(root: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .with_context(|| format!("cannot sync {}", path.display()))?;
        }
    }
    sync_dir(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_is_live_only_once_published() {
        let dir = tempfile::tempdir().unwrap();
        let root = IndexRoot::new(dir.path());
        assert_eq!(root.live().unwrap(), Live::None);
        let first = root.for_update().unwrap();
        assert_eq!(root.live().unwrap(), Live::At(first.clone()));
        assert!(whole(&first), "made with its empty lexical index");
        std::fs::write(first.join("manifest.json"), "{}").unwrap();

        // A rebuild that stops before it is published (a crash) changes nothing.
        let second = root.new_version().unwrap();
        std::fs::write(second.join("manifest.json"), "{}").unwrap();
        assert_eq!(root.live().unwrap(), Live::At(first.clone()));

        // The next one is published: the first and the unfinished one go.
        let third = root.new_version().unwrap();
        lexical_in(&third);
        root.publish(&third).unwrap();
        assert_eq!(root.live().unwrap(), Live::At(third.clone()));
        assert!(!first.exists() && !second.exists());
    }

    /// A lexical index as tantivy leaves one (its `meta.json`).
    fn lexical_in(folder: &Path) {
        std::fs::create_dir_all(folder.join("lexical")).unwrap();
        std::fs::write(folder.join("lexical").join("meta.json"), "{}").unwrap();
    }

    #[test]
    fn a_version_without_its_lexical_index_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = IndexRoot::new(dir.path());
        let version = root.for_update().unwrap();
        std::fs::remove_dir_all(version.join("lexical")).unwrap();
        assert!(matches!(root.live().unwrap(), Live::Missing(_)));
    }

    #[test]
    fn two_ingests_do_not_write_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = IndexRoot::new(dir.path());
        let held = root.exclusive().unwrap();
        let e = root.exclusive().unwrap_err();
        assert!(e.to_string().contains("another ingest"), "{e}");
        drop(held);
        assert!(root.exclusive().is_ok());
    }

    #[test]
    fn a_pointer_to_nothing_is_reported_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let root = IndexRoot::new(dir.path());
        std::fs::write(dir.path().join(POINTER), "v-gone\n").unwrap();
        let Live::Missing(why) = root.live().unwrap() else {
            panic!("a missing version is reported");
        };
        assert!(why.contains("v-gone") && why.contains("--rebuild"), "{why}");
        assert!(root.for_update().is_err(), "nothing is written over it");
    }

    #[test]
    fn an_index_from_before_versions_is_read_then_replaced() {
        let dir = tempfile::tempdir().unwrap();
        lexical_in(dir.path());
        std::fs::write(dir.path().join("manifest.json"), "{}").unwrap();
        let root = IndexRoot::new(dir.path());
        assert_eq!(root.live().unwrap(), Live::At(dir.path().to_path_buf()));
        let version = root.new_version().unwrap();
        lexical_in(&version);
        root.publish(&version).unwrap();
        assert_eq!(root.live().unwrap(), Live::At(version));
        assert!(!dir.path().join("lexical").exists());
    }

    #[test]
    fn an_interrupted_rename_rebuild_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        std::fs::create_dir_all(index.with_extension("old").join("lexical")).unwrap();
        let Live::Missing(why) = IndexRoot::new(&index).live().unwrap() else {
            panic!("the index left aside is reported");
        };
        assert!(why.contains("index.old"), "{why}");
    }
}

//! Finding the files to index under the roots: folders (respecting `.gitignore` and
//! `.ignore`, skipping hidden files and `data_dir`), files, and git repositories at a ref;
//! what each file's source path is; what is passed over, and why.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{anyhow, Context};

use super::git::GitSource;
use super::{absolute, chunk, root_name, Rules, Skipped};
use crate::privacy;

/// A file found by the walk.
pub(super) struct Found {
    pub key: String,
    pub origin: Origin,
    pub root: String,
}

/// Where a found file's bytes are.
pub(super) enum Origin {
    Disk(PathBuf),
    /// A blob of a repository's object database.
    Git(Rc<gix::ThreadSafeRepository>, gix::ObjectId),
}

impl Origin {
    /// The file's bytes (`NotFound` when a file on disk was deleted since the walk).
    pub fn read(&self) -> std::io::Result<Vec<u8>> {
        match self {
            Origin::Disk(path) => std::fs::read(path),
            Origin::Git(repo, blob) => super::git::read(repo, *blob).map_err(std::io::Error::other),
        }
    }
}

/// Why a file that holds credentials by its name was not indexed.
pub(super) const CREDENTIALS: &str = "credentials by name: never indexed";
/// Why a file matched by `privacy.exclude` was not indexed.
pub(super) const EXCLUDED_BY_PRIVACY: &str = "matched privacy.exclude";
/// Why a file matched by `ingest.exclude` was not indexed.
pub(super) const EXCLUDED: &str = "matched ingest.exclude";

/// Every knowledge file under the roots (respecting .gitignore and .ignore, skipping
/// hidden files), keyed by its source path (see `Labels`); and what was skipped, why.
///
/// A file found twice (roots that overlap) is taken once. Two different files with the
/// same source path (file names that differ only in bytes that are not UTF-8, or a `\`
/// in a name) cannot both be indexed: the second is skipped, and the summary and the log
/// say so.
pub(super) fn walk(roots: &[PathBuf], rules: &Rules) -> anyhow::Result<(Vec<Found>, Skipped)> {
    for root in roots {
        if !root.exists() && GitSource::parse(root).is_none() {
            return Err(anyhow!("{} does not exist", root.display()));
        }
    }
    let labels = Labels::of(roots)?;
    let mut walk = Walk {
        rules,
        found: Vec::new(),
        skipped: Vec::new(),
        keys: Default::default(),
        files: Default::default(),
    };
    for (root, label) in roots.iter().zip(&labels.0) {
        match GitSource::parse(root) {
            Some(git) => walk.repository(root, label, &git)?,
            None => walk.folder(root, label)?,
        }
    }
    Ok((walk.found, walk.skipped))
}

/// What a walk has found so far.
struct Walk<'a> {
    rules: &'a Rules,
    found: Vec<Found>,
    skipped: Skipped,
    /// Source paths given out, and the real files behind them.
    keys: std::collections::HashSet<String>,
    files: std::collections::HashSet<PathBuf>,
}

impl Walk<'_> {
    /// The files under a folder (or a file alone).
    fn folder(&mut self, root: &Path, label: &str) -> anyhow::Result<()> {
        let root_name = root_name(root);
        let data_dir = self.rules.data_dir.clone();
        let walker = ignore::WalkBuilder::new(root)
            .require_git(false)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(move |e| !absolute(e.path()).starts_with(&data_dir))
            .build();
        for entry in walker {
            let entry = entry?;
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            let relative = if root.is_file() {
                String::new()
            } else {
                path.strip_prefix(root)
                    .unwrap_or(path)
                    .to_string_lossy()
                    .replace('\\', "/")
            };
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            let origin = Origin::Disk(path.to_path_buf());
            self.add(label, &relative, size, real, origin, &root_name);
        }
        Ok(())
    }

    /// The files of a repository's tree at a ref, as the walk of a folder would take them
    /// (hidden files passed over; `.gitignore` has nothing to say of committed files).
    fn repository(&mut self, root: &Path, label: &str, git: &GitSource) -> anyhow::Result<()> {
        let root_name = root_name(root);
        let repo = Rc::new(git.open()?);
        let entries = git
            .files(&repo)
            .with_context(|| format!("reading {} at {}", git.repo.display(), git.reference))?;
        for entry in entries {
            if entry.path.split('/').any(|part| part.starts_with('.')) {
                continue;
            }
            let real = absolute(root).join(&entry.path);
            let origin = Origin::Git(repo.clone(), entry.blob);
            self.add(label, &entry.path, entry.size, real, origin, &root_name);
        }
        Ok(())
    }

    /// A file found under a root labelled `label`, at `relative` in it: kept, or passed
    /// over with the reason.
    fn add(
        &mut self,
        label: &str,
        relative: &str,
        size: u64,
        real: PathBuf,
        origin: Origin,
        root_name: &str,
    ) {
        let key = match (label, relative) {
            (l, "") => l.to_string(),
            ("", r) => r.to_string(),
            (l, r) => format!("{l}/{r}"),
        };
        let inside = if relative.is_empty() {
            key.as_str()
        } else {
            relative
        };
        let max_bytes = self.rules.max_file_bytes;
        let skipped = &mut self.skipped;
        if privacy::files::is_credentials(inside) {
            tracing::info!(file = ?key, "skipped: credentials by name");
            skipped.push((key, CREDENTIALS.into()));
            return;
        }
        if self.rules.exclude.is_match(inside) {
            skipped.push((key, EXCLUDED.into()));
            return;
        }
        if chunk::kind_of(&key).is_none() {
            skipped.push((key, "not a document or source file".into()));
            return;
        }
        if size > max_bytes {
            tracing::warn!(file = ?key, size, limit = max_bytes, "skipped: larger than ingest.max_file_bytes");
            skipped.push((key, format!("{size} bytes, over ingest.max_file_bytes")));
            return;
        }
        if !self.files.insert(real) {
            return; // found before, under another root
        }
        if !self.keys.insert(key.clone()) {
            tracing::warn!(file = ?key, "skipped: another file has the same source path");
            skipped.push((key, "another file has the same source path".into()));
            return;
        }
        self.found.push(Found {
            key,
            origin,
            root: root_name.to_string(),
        });
    }
}

/// What each root's source paths start with. One root: nothing, so paths are relative to
/// the folder (a file alone is named by its file name), as they always were. Several
/// roots: each root's own name (`man-es/ls.1.txt`, `man-en/ls.1.txt`), with as many of
/// its parent folders as it takes to tell the roots apart (`a/docs/…`, `b/docs/…`).
struct Labels(Vec<String>);

impl Labels {
    fn of(roots: &[PathBuf]) -> anyhow::Result<Self> {
        if roots.len() < 2 {
            return Ok(Self(
                roots
                    .iter()
                    .map(|r| {
                        if r.is_file() {
                            file_name(r)
                        } else {
                            String::new()
                        }
                    })
                    .collect(),
            ));
        }
        // Each root's folder names, last first: /corpus/man-es → ["man-es", "corpus"].
        // The names as given (`.` and `..` resolved, symbolic links not followed).
        let parts: Vec<Vec<String>> = roots
            .iter()
            .map(|r| {
                let absolute = std::path::absolute(r)
                    .with_context(|| format!("cannot resolve {}", r.display()))?;
                let mut names = Vec::new();
                for c in absolute.components() {
                    match c {
                        std::path::Component::Normal(n) => {
                            names.push(n.to_string_lossy().replace('\\', "/"))
                        }
                        std::path::Component::ParentDir => {
                            names.pop();
                        }
                        _ => {}
                    }
                }
                names.reverse();
                Ok(names)
            })
            .collect::<anyhow::Result<_>>()?;
        let label = |p: &[String], n: usize| -> String {
            let mut take: Vec<&str> = p.iter().take(n).map(String::as_str).collect();
            take.reverse();
            take.join("/")
        };
        let mut depth = vec![1usize; roots.len()];
        // Lengthen the labels that clash (equal, or one inside the other) until none do or
        // they cannot grow; what still clashes is caught file by file in `walk`.
        loop {
            let labels: Vec<String> = parts
                .iter()
                .zip(&depth)
                .map(|(p, &n)| label(p, n))
                .collect();
            let mut grew = false;
            for i in 0..roots.len() {
                let clashes = (0..roots.len()).any(|j| {
                    j != i
                        && parts[i] != parts[j]
                        && (labels[i] == labels[j] || inside(&labels[j], &labels[i]))
                });
                if clashes && depth[i] < parts[i].len() {
                    depth[i] += 1;
                    grew = true;
                }
            }
            if !grew {
                return Ok(Self(labels));
            }
        }
    }
}

/// Whether path `inner` lies under folder path `outer` (`a/b` under `a`).
fn inside(inner: &str, outer: &str) -> bool {
    outer.is_empty()
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(roots: &[PathBuf]) -> (Vec<String>, Skipped) {
        let settings = crate::config::Settings::load_without_env(None).unwrap();
        let rules = Rules {
            data_dir: PathBuf::from("/nonexistent-data-dir"),
            ..Rules::from_settings(&settings).unwrap()
        };
        let (found, skipped) = walk(roots, &rules).unwrap();
        (found.into_iter().map(|f| f.key).collect(), skipped)
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn one_root_keeps_its_paths_and_several_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus");
        write(&corpus.join("man-es/ls.1.txt"), "ls lista");
        write(&corpus.join("man-en/ls.1.txt"), "ls lists");
        write(&corpus.join("man-en/sub/cp.1.txt"), "cp copies");
        let (es, en) = (corpus.join("man-es"), corpus.join("man-en"));

        assert_eq!(
            keys(std::slice::from_ref(&en)).0,
            ["ls.1.txt", "sub/cp.1.txt"]
        );
        assert_eq!(keys(&[en.join("ls.1.txt")]).0, ["ls.1.txt"]);
        assert_eq!(
            keys(&[es.clone(), en.clone()]).0,
            ["man-es/ls.1.txt", "man-en/ls.1.txt", "man-en/sub/cp.1.txt"]
        );
        // Roots named alike take their parents' names; `..` is resolved.
        write(&dir.path().join("a/docs/x.md"), "# A");
        write(&dir.path().join("b/docs/x.md"), "# B");
        let a = dir.path().join("b/../a/docs");
        assert_eq!(
            keys(&[a, dir.path().join("b/docs")]).0,
            ["a/docs/x.md", "b/docs/x.md"]
        );
        // Files as roots; a root inside another: each file once.
        assert_eq!(
            keys(&[es.join("ls.1.txt"), en.join("ls.1.txt")]).0,
            ["man-es/ls.1.txt", "man-en/ls.1.txt"]
        );
        let (k, skipped) = keys(&[en.clone(), en.join("sub")]);
        assert_eq!(k, ["man-en/ls.1.txt", "man-en/sub/cp.1.txt"]);
        assert!(skipped.is_empty(), "{skipped:?}");
    }

    /// The index's own folder is never indexed, even inside a source.
    #[test]
    fn data_dir_inside_a_root_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("guide.md"), "# Guide");
        write(&dir.path().join("data/index/v-1/manifest.json"), "{}");
        let settings = crate::config::Settings::load_without_env(None).unwrap();
        let rules = Rules {
            data_dir: dir.path().join("data"),
            ..Rules::from_settings(&settings).unwrap()
        };
        let (found, _) = walk(&[dir.path().to_path_buf()], &rules).unwrap();
        let found: Vec<String> = found.into_iter().map(|f| f.key).collect();
        assert_eq!(found, ["guide.md"]);
    }

    /// Two files that would get the same source path: the second is skipped and said.
    #[test]
    fn a_source_path_clash_is_never_silent() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("a/b.md"), "# one");
        write(&dir.path().join("a\\b.md"), "# two");
        let (k, skipped) = keys(&[dir.path().to_path_buf()]);
        assert_eq!(k, ["a/b.md"]);
        assert_eq!(
            skipped,
            [(
                "a/b.md".to_string(),
                "another file has the same source path".to_string()
            )]
        );
    }
}

//! A git repository as a source at a ref (`path@ref`: `~/src/app@main`,
//! `../lib@v2.1`, `repo@origin/release`): its files as that commit holds them, read from
//! the object database with gix, with no checkout, so the index follows a branch rather
//! than whatever the working tree holds.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};

/// A source that names a repository and a ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSource {
    pub repo: PathBuf,
    pub reference: String,
}

/// One file of the tree at the ref: its path in the repository, its blob, its size.
pub struct Entry {
    pub path: String,
    pub blob: gix::ObjectId,
    pub size: u64,
}

impl GitSource {
    /// `root` as `path@ref`, when there is no such file or folder, the part before the last
    /// `@` is a git repository, and the ref is not empty.
    pub fn parse(root: &Path) -> Option<Self> {
        if root.exists() {
            return None;
        }
        let text = root.to_str()?;
        let (repo, reference) = text.rsplit_once('@')?;
        let repo = PathBuf::from(repo);
        let is_repo = repo.join(".git").exists() || repo.join("HEAD").is_file();
        (!reference.is_empty() && is_repo).then(|| Self {
            repo,
            reference: reference.to_string(),
        })
    }

    /// The folder whose changes move the ref: the repository's git folder.
    pub fn git_dir(&self) -> PathBuf {
        let dot_git = self.repo.join(".git");
        if dot_git.is_dir() {
            dot_git
        } else {
            self.repo.clone()
        }
    }

    /// The repository, opened for reading from any thread.
    pub fn open(&self) -> anyhow::Result<gix::ThreadSafeRepository> {
        gix::open(&self.repo)
            .map(gix::Repository::into_sync)
            .with_context(|| format!("{} is not a git repository", self.repo.display()))
    }

    /// Every file (blob) of the tree the ref points at.
    pub fn files(&self, repo: &gix::ThreadSafeRepository) -> anyhow::Result<Vec<Entry>> {
        let repo = repo.to_thread_local();
        let tree = repo
            .rev_parse_single(self.reference.as_str())
            .with_context(|| format!("{} has no ref {}", self.repo.display(), self.reference))?
            .object()?
            .peel_to_tree()
            .with_context(|| format!("{} does not name a commit or tree", self.reference))?;
        let mut recorder = gix::traverse::tree::Recorder::default();
        tree.traverse()
            .breadthfirst(&mut recorder)
            .context("reading the tree")?;
        recorder
            .records
            .into_iter()
            .filter(|e| e.mode.is_blob())
            .map(|e| {
                let header = repo
                    .find_header(e.oid)
                    .with_context(|| format!("reading {}", e.filepath))?;
                Ok(Entry {
                    path: e.filepath.to_string(),
                    blob: e.oid,
                    size: header.size(),
                })
            })
            .collect()
    }
}

/// A blob's bytes.
pub fn read(repo: &gix::ThreadSafeRepository, blob: gix::ObjectId) -> anyhow::Result<Vec<u8>> {
    let repo = repo.to_thread_local();
    let object = repo
        .find_object(blob)
        .map_err(|e| anyhow!("reading blob {blob}: {e}"))?;
    Ok(object.detach().data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs git in `dir` (the test fails without git).
    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    #[test]
    fn a_ref_is_read_from_the_object_database_not_the_working_tree() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("app");
        std::fs::create_dir_all(repo.join("docs")).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("docs/guide.md"), "# Committed").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "one"]);
        // The working tree changes; the ref does not.
        std::fs::write(repo.join("docs/guide.md"), "# Edited, not committed").unwrap();
        std::fs::write(repo.join("new.md"), "# Untracked").unwrap();

        let root = PathBuf::from(format!("{}@main", repo.display()));
        let source = GitSource::parse(&root).expect("a repository at a ref");
        assert_eq!(source.reference, "main");
        let opened = source.open().unwrap();
        let files = source.files(&opened).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["docs/guide.md"]);
        assert_eq!(read(&opened, files[0].blob).unwrap(), b"# Committed");
        assert_eq!(files[0].size, 11);

        assert!(GitSource::parse(&repo).is_none(), "a folder that exists");
        let missing = PathBuf::from(format!("{}@no-such-branch", repo.display()));
        let source = GitSource::parse(&missing).unwrap();
        let e = source.files(&source.open().unwrap()).err().unwrap();
        assert!(format!("{e:#}").contains("no-such-branch"), "{e:#}");
        assert!(GitSource::parse(&dir.path().join("plain@main")).is_none());
    }
}

//! What must not leave the gateway or reach the model as instructions: credentials
//! (redacted to typed placeholders), files that are credentials by name (never indexed),
//! paths an organisation excludes from context (`privacy.exclude`), and invisible
//! characters that smuggle instructions (stripped). Applied to everything the prompt is
//! built from, to what is indexed, stored in sessions and returned as sources.

pub mod files;
pub mod invisible;
pub mod secrets;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use globset::{Glob, GlobSet, GlobSetBuilder};

pub use secrets::Secrets;

/// What cleaning found, for logs and metrics: secrets by kind, invisible characters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleaned {
    pub secrets: BTreeMap<String, usize>,
    pub invisible: usize,
}

impl Cleaned {
    pub fn secrets_total(&self) -> usize {
        self.secrets.values().sum()
    }

    pub fn add(&mut self, other: Cleaned) {
        for (kind, n) in other.secrets {
            *self.secrets.entry(kind).or_default() += n;
        }
        self.invisible += other.invisible;
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.invisible == 0
    }

    /// Counts what was found in the metrics, by where (`ingest`, `prompt`, `knowledge`,
    /// `passthrough`, `session`, `source`).
    pub fn count(&self, place: &'static str) {
        crate::telemetry::secrets_redacted(place, &self.secrets, self.invisible);
    }
}

/// The privacy rules of one gateway.
pub struct Privacy {
    /// `None`: `privacy.redact_secrets = false`.
    secrets: Option<Secrets>,
    exclude: GlobSet,
}

impl Privacy {
    /// `redact`: `privacy.redact_secrets`; `extra_rules`: a TOML file of more rules;
    /// `exclude`: globs of paths whose context is never used.
    pub fn new(
        redact: bool,
        extra_rules: Option<&Path>,
        exclude: &[String],
    ) -> anyhow::Result<Self> {
        let secrets = redact.then(|| Secrets::load(extra_rules)).transpose()?;
        Ok(Self {
            secrets,
            exclude: globs(exclude).context("privacy.exclude")?,
        })
    }

    /// The rules of `[privacy]`.
    pub fn from_settings(s: &crate::config::PrivacySettings) -> anyhow::Result<Self> {
        Self::new(s.redact_secrets, s.extra_rules.as_deref(), &s.exclude)
    }

    /// Invisible characters stripped and secrets redacted, in place.
    pub fn clean(&self, text: &mut String) -> Cleaned {
        let mut cleaned = Cleaned::default();
        if invisible::has_any(text) {
            let (stripped, removed) = invisible::strip(text);
            *text = stripped;
            cleaned.invisible = removed;
        }
        if let Some((redacted, found)) = self.secrets.as_ref().and_then(|s| s.redact(text)) {
            *text = redacted;
            cleaned.secrets = found;
        }
        cleaned
    }

    /// `text`, cleaned (a copy only when something changed).
    pub fn cleaned<'t>(&self, text: &'t str) -> (std::borrow::Cow<'t, str>, Cleaned) {
        let mut owned = text.to_string();
        let cleaned = self.clean(&mut owned);
        if cleaned.is_empty() {
            (std::borrow::Cow::Borrowed(text), cleaned)
        } else {
            (std::borrow::Cow::Owned(owned), cleaned)
        }
    }

    /// Whether context from `path` must never be used (`privacy.exclude`).
    pub fn excluded(&self, path: &str) -> bool {
        let path = path.trim_start_matches("file://").trim_start_matches("./");
        self.exclude.is_match(path) || self.exclude.is_match(path.trim_start_matches('/'))
    }
}

/// A glob set; a pattern without a `/` matches at any depth (as in `.gitignore`).
pub fn globs(patterns: &[String]) -> anyhow::Result<GlobSet> {
    let mut builder = GlobSetBuilder::new();
    for p in patterns.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let anchored = p.trim_start_matches('/');
        builder.add(Glob::new(anchored).with_context(|| format!("glob {p:?}"))?);
        if !p.contains('/') {
            builder.add(Glob::new(&format!("**/{p}")).with_context(|| format!("glob {p:?}"))?);
        }
    }
    Ok(builder.build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleans_and_excludes() {
        let p = Privacy::new(true, None, &["secrets/**".into(), "*.pem".into()]).unwrap();
        let mut text =
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\u{200B}".to_string();
        let cleaned = p.clean(&mut text);
        assert_eq!(text, "AWS_SECRET_ACCESS_KEY=[REDACTED aws_secret_key]");
        assert_eq!((cleaned.secrets_total(), cleaned.invisible), (1, 1));
        assert!(p.excluded("secrets/prod/db.txt"));
        assert!(p.excluded("/work/app/certs/tls.pem"));
        assert!(p.excluded("file:///certs/a.pem"));
        assert!(!p.excluded("src/main.rs"));
        let off = Privacy::new(false, None, &[]).unwrap();
        let mut text = "DB_PASSWORD=hunter2!x".to_string();
        assert!(off.clean(&mut text).is_empty());
    }
}

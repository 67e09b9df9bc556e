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
use globset::{GlobSet, GlobSetBuilder};

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

    /// When anything was found: logs it (the kinds and counts, never the text) as
    /// redacted before `what` (`the prompt`, `the upstream`) and counts it at `place`.
    pub fn report(&self, place: &'static str, what: &'static str) {
        if self.is_empty() {
            return;
        }
        tracing::info!(
            secrets = ?self.secrets,
            invisible = self.invisible,
            "redacted before {what}"
        );
        self.count(place);
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
            exclude: glob_set(exclude, true).context("privacy.exclude")?,
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

    /// Like `clean`, keeping the text's line count (for a whole file before it is cut into
    /// chunks: a secret spread over lines, such as a private key, is found whole).
    pub fn clean_file(&self, text: &mut String) -> Cleaned {
        let mut cleaned = Cleaned::default();
        if invisible::has_any(text) {
            let (stripped, removed) = invisible::strip(text);
            *text = stripped;
            cleaned.invisible = removed;
        }
        if let Some((redacted, found)) = self
            .secrets
            .as_ref()
            .and_then(|s| s.redact_with(text, true))
        {
            *text = redacted;
            cleaned.secrets = found;
        }
        cleaned
    }

    /// `value` (a tool call's arguments, a tool's definition) cleaned: every string in it,
    /// object keys too, each alone; then the whole as the JSON text a message would carry,
    /// so a secret held as a value is named by its key (`{"password": "…"}`). The JSON text
    /// is taken back only when it parses to the same shape, only strings changed: a rule
    /// whose match spans strings (a key block's BEGIN in one, its END in another) must not
    /// cut the values between them out of the arguments.
    pub fn clean_json(&self, value: &mut serde_json::Value) -> Cleaned {
        let mut cleaned = self.clean_json_strings(value);
        if matches!(
            value,
            serde_json::Value::Object(_) | serde_json::Value::Array(_)
        ) {
            let mut text = value.to_string();
            let whole = self.clean(&mut text);
            if !whole.is_empty() {
                match serde_json::from_str(&text) {
                    Ok(parsed) if same_shape(value, &parsed) => {
                        *value = parsed;
                        cleaned.add(whole);
                    }
                    _ => {}
                }
            }
        }
        cleaned
    }

    fn clean_json_strings(&self, value: &mut serde_json::Value) -> Cleaned {
        let mut cleaned = Cleaned::default();
        match value {
            serde_json::Value::String(s) => cleaned.add(self.clean(s)),
            serde_json::Value::Array(items) => {
                for v in items {
                    cleaned.add(self.clean_json_strings(v));
                }
            }
            serde_json::Value::Object(map) => {
                for v in map.values_mut() {
                    cleaned.add(self.clean_json_strings(v));
                }
                let mut keys = Cleaned::default();
                let renamed: Vec<(String, serde_json::Value)> = std::mem::take(map)
                    .into_iter()
                    .map(|(mut k, v)| {
                        keys.add(self.clean(&mut k));
                        (k, v)
                    })
                    .collect();
                map.extend(renamed);
                cleaned.add(keys);
            }
            _ => {}
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

    /// Whether context from `path` must never be used (`privacy.exclude`): a relative
    /// path, an absolute one or a `file://` URI (percent-encoded, `\`-separated) whose
    /// path, or any tail of it after a `/`, matches (the set holds each pattern also
    /// after `**/`, so one match covers every tail).
    pub fn excluded(&self, path: &str) -> bool {
        if self.exclude.is_empty() {
            return false;
        }
        let path = path.strip_prefix("file://").unwrap_or(path);
        let path = percent_decoded(path).replace('\\', "/");
        self.exclude.is_match(path.trim_start_matches("./"))
    }
}

/// Whether `b` is `a` with only strings changed: the same keys, lengths and kinds.
fn same_shape(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value::{Array, Object, String};
    match (a, b) {
        (String(_), String(_)) => true,
        (Array(x), Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_shape(x, y))
        }
        (Object(x), Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_shape(v, w)))
        }
        _ => a == b,
    }
}

/// A glob set, ignoring case; a pattern without a `/` matches at any depth (as in
/// `.gitignore`).
pub fn globs(patterns: &[String]) -> anyhow::Result<GlobSet> {
    glob_set(patterns, false)
}

/// `globs`, with every pattern matching at any depth when `anywhere`: a path matches
/// when it, or any tail of it after a `/`, matches a pattern (`**/` before a pattern
/// matches any leading directories, or none).
fn glob_set(patterns: &[String], anywhere: bool) -> anyhow::Result<GlobSet> {
    let mut builder = GlobSetBuilder::new();
    let glob = |p: &str| {
        globset::GlobBuilder::new(p)
            .case_insensitive(true)
            .build()
            .with_context(|| format!("glob {p:?}"))
    };
    for p in patterns.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let anchored = p.trim_start_matches('/');
        builder.add(glob(anchored)?);
        if !p.contains('/') || anywhere && !anchored.starts_with("**/") {
            builder.add(glob(&format!("**/{anchored}"))?);
        }
    }
    Ok(builder.build()?)
}

/// `%xx` escapes decoded (as UTF-8, lossily); anything else as it is.
fn percent_decoded(path: &str) -> String {
    if !path.contains('%') {
        return path.to_string();
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
        assert!(p.excluded("file:///work/app/secrets/db.txt"));
        assert!(p.excluded("C:\\work\\Secrets\\db.txt"));
        assert!(p.excluded("file:///work/my%20app/secrets/x"));
        assert!(!p.excluded("src/main.rs"));
        let off = Privacy::new(false, None, &[]).unwrap();
        let mut text = "DB_PASSWORD=hunter2!x".to_string();
        assert!(off.clean(&mut text).is_empty());
    }

    /// A tool call's arguments keep their shape: a key block's BEGIN in one string and its
    /// END in another are not one secret cutting the values between them out (the edit
    /// below had lost its second half); a secret named by its key is still found.
    #[test]
    fn json_arguments_keep_their_shape() {
        let p = Privacy::new(true, None, &[]).unwrap();
        let edits = serde_json::json!({"edits": [
            {"old_string": "-----BEGIN RSA PRIVATE KEY-----", "new_string": "-----BEGIN PRIVATE KEY-----"},
            {"old_string": "-----END RSA PRIVATE KEY-----", "new_string": "-----END PRIVATE KEY-----"}]});
        let mut value = edits.clone();
        p.clean_json(&mut value);
        assert_eq!(value, edits);
        let mut value = serde_json::json!({"host": "db", "password": "hunter2!x"});
        p.clean_json(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"host": "db", "password": "[REDACTED generic_password]"})
        );
    }

    /// A path of thousands of `/` was matched once for every tail (its length squared:
    /// hours for one request's context item); it is matched once.
    #[test]
    fn a_path_of_many_slashes_is_matched_once() {
        let p = Privacy::new(false, None, &["secrets/**".into(), "*.pem".into()]).unwrap();
        let deep = format!("{}x.txt", "/".repeat(300_000));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send((p.excluded(&deep), p.excluded(&format!("{deep}/secrets/a"))));
        });
        let answered = rx.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(answered, Ok((false, true)));
    }

    proptest::proptest! {
        /// One match against the patterns also taken after `**/` says what matching the
        /// path and each of its tails after a `/` said.
        #[test]
        fn one_match_is_the_match_of_every_tail(
            patterns in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec!["a", "b", "*", "**", "?", "a*", "*.b"]),
                    1..4,
                ),
                1..3,
            ),
            lead in proptest::sample::select(vec!["", "/", "./"]),
            path in proptest::collection::vec(
                proptest::sample::select(vec!["a", "b", "ab", "x.b", "A"]),
                1..6,
            ),
        ) {
            let patterns: Vec<String> = patterns.iter().map(|p| p.join("/")).collect();
            let path = format!("{lead}{}", path.join("/"));
            let each_tail = {
                let set = globs(&patterns).unwrap();
                let path = path.trim_start_matches("./");
                set.is_match(path)
                    || path.match_indices('/').any(|(i, _)| set.is_match(&path[i + 1..]))
            };
            let privacy = Privacy::new(false, None, &patterns).unwrap();
            proptest::prop_assert_eq!(privacy.excluded(&path), each_tail, "{:?} {}", patterns, path);
        }
    }
}

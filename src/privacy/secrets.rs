//! Finding credentials in text and replacing each with a typed placeholder
//! (`[REDACTED github_token]`): the rule set of `config/secrets.toml` (provider shapes:
//! prefixes, lengths, alphabets; private key blocks; connection strings; auth headers),
//! one pass of a regex set to learn which rules can match, then those rules alone; and a
//! generic rule for assignments (`password = "…"`, `api_key: …`) that weighs the key's
//! name and the value's entropy so ordinary code (`token = get_token()`,
//! `max_tokens = 4096`, `password: string`) is left alone. Linear in the text's length.

use std::collections::BTreeMap;
use std::path::Path;

use aho_corasick::AhoCorasick;
use anyhow::Context as _;
use regex::Regex;
use serde::Deserialize;

/// The rule set shipped with the gateway.
pub const BUILT_IN_RULES: &str = include_str!("../../config/secrets.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    id: String,
    kind: String,
    pattern: String,
    #[serde(default)]
    filter: bool,
    #[serde(default)]
    keywords: Vec<String>,
}

struct Rule {
    kind: String,
    regex: Regex,
    filter: bool,
}

/// The compiled rules.
pub struct Secrets {
    rules: Vec<Rule>,
    /// Every rule's keywords (and the generic rule's) in one automaton, ignoring case.
    keywords: AhoCorasick,
    /// For each keyword, the rule it belongs to (`rules.len()`: the generic rule).
    keyword_rule: Vec<usize>,
    /// Rules without keywords: they always run.
    always: Vec<usize>,
    generic: Regex,
    generic_table: Regex,
    template: Regex,
}

/// Words one of which a text must hold for the generic assignment rule to run.
const GENERIC_KEYWORDS: &[&str] = &["pass", "pwd", "secret", "token", "key", "cred", "contrase"];

/// What a redaction found: how many secrets of each kind.
pub type Found = BTreeMap<String, usize>;

impl Secrets {
    /// The built-in rules, then those of `extra` (a TOML file of `[[rule]]`s), if any.
    pub fn load(extra: Option<&Path>) -> anyhow::Result<Self> {
        let mut specs = toml::from_str::<RuleFile>(BUILT_IN_RULES)
            .context("the built-in secret rules")?
            .rule;
        if let Some(path) = extra {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading privacy.extra_rules {}", path.display()))?;
            let file: RuleFile = toml::from_str(&text)
                .with_context(|| format!("privacy.extra_rules {}", path.display()))?;
            specs.extend(file.rule);
        }
        let mut rules = Vec::with_capacity(specs.len());
        for spec in &specs {
            let regex = regex::RegexBuilder::new(&spec.pattern)
                .size_limit(50 << 20)
                .build()
                .with_context(|| format!("secret rule {}", spec.id))?;
            anyhow::ensure!(
                regex.capture_names().flatten().any(|n| n == "secret"),
                "secret rule {} has no group named `secret`",
                spec.id
            );
            rules.push(Rule {
                kind: spec.kind.clone(),
                regex,
                filter: spec.filter,
            });
        }
        let mut words: Vec<String> = Vec::new();
        let mut keyword_rule = Vec::new();
        let mut always = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            if spec.keywords.is_empty() {
                always.push(i);
            }
            for k in &spec.keywords {
                words.push(k.to_lowercase());
                keyword_rule.push(i);
            }
        }
        for k in GENERIC_KEYWORDS {
            words.push((*k).to_string());
            keyword_rule.push(specs.len());
        }
        // A DFA: every text gets this overlapping search, and a DFA's takes less than half
        // the instructions of what the library chooses for over 100 words (the built-in
        // rules have 106): a contiguous NFA, about 45 a byte against 20, counted with
        // valgrind on a question. Should the words of `privacy.extra_rules` make the DFA
        // too large to build, the library's own choice is taken.
        let mut keywords = AhoCorasick::builder();
        keywords.ascii_case_insensitive(true);
        let keywords = keywords
            .clone()
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(&words)
            .or_else(|_| keywords.build(&words))
            .context("the secret rules' keywords")?;
        Ok(Self {
            rules,
            keywords,
            keyword_rule,
            always,
            generic: Regex::new(GENERIC).context("the generic secret rule")?,
            generic_table: Regex::new(GENERIC_TABLE).context("the generic table rule")?,
            template: Regex::new(TEMPLATE).context("the template rule")?,
        })
    }

    /// `text` with every secret replaced by `[REDACTED <kind>]`, and what was found;
    /// `None` when there is none (the common case: nothing is copied).
    pub fn redact(&self, text: &str) -> Option<(String, Found)> {
        self.redact_with(text, false)
    }

    /// Like `redact`; with `keep_lines`, each placeholder is followed by as many line
    /// breaks as the secret spanned (a file's line numbers stay right).
    pub fn redact_with(&self, text: &str, keep_lines: bool) -> Option<(String, Found)> {
        // Accepted spans by start; they never overlap, so the one starting last before a
        // candidate's end is the only one that can overlap it.
        let mut spans: BTreeMap<usize, (usize, &str)> = BTreeMap::new();
        let overlaps = |spans: &BTreeMap<usize, (usize, &str)>, s: usize, e: usize| {
            spans
                .range(..e)
                .next_back()
                .is_some_and(|(_, (end, _))| *end > s)
        };
        // Which rules can match: one pass of the keyword automaton.
        let mut run = vec![false; self.rules.len() + 1];
        for i in &self.always {
            run[*i] = true;
        }
        for m in self.keywords.find_overlapping_iter(text) {
            run[self.keyword_rule[m.pattern().as_usize()]] = true;
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if !run[i] {
                continue;
            }
            for caps in rule.regex.captures_iter(text) {
                let Some(m) = caps.name("secret") else {
                    continue;
                };
                if m.as_str().is_empty()
                    || (rule.filter && self.is_placeholder(m.as_str()))
                    || overlaps(&spans, m.start(), m.end())
                {
                    continue;
                }
                spans.insert(m.start(), (m.end(), rule.kind.as_str()));
            }
        }
        if run[self.rules.len()] {
            let table = memchr::memchr(b'|', text.as_bytes())
                .map(|_| self.generic_table.captures_iter(text));
            for caps in self
                .generic
                .captures_iter(text)
                .chain(table.into_iter().flatten())
            {
                let Some((start, end, kind)) = self.generic_secret(&caps) else {
                    continue;
                };
                if !overlaps(&spans, start, end) {
                    spans.insert(start, (end, kind));
                }
            }
        }
        if spans.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut found = Found::new();
        let mut at = 0;
        for (start, (end, kind)) in spans {
            out.push_str(&text[at..start]);
            out.push_str("[REDACTED ");
            out.push_str(kind);
            out.push(']');
            if keep_lines {
                for _ in 0..text[start..end].matches('\n').count() {
                    out.push('\n');
                }
            }
            *found.entry(kind.to_string()).or_default() += 1;
            at = end;
        }
        out.push_str(&text[at..]);
        Some((out, found))
    }

    /// Whether a captured value is a placeholder, a template or a masked value rather than
    /// a credential.
    fn is_placeholder(&self, value: &str) -> bool {
        let lower = value.to_lowercase();
        if self.template.is_match(value) || value.starts_with('$') {
            return true;
        }
        const CONTAINS: &[&str] = &[
            "example",
            "xxxx",
            "****",
            "changeme",
            "change_me",
            "change-me",
            "changeit",
            "replace",
            "your_",
            "your-",
            "yourpass",
            "yourkey",
            "yourtoken",
            "dummy",
            "placeholder",
            "redacted",
            "sample",
            "todo",
            "fixme",
            "...",
            "…",
            "${",
            "{{",
            "}}",
            "<",
            ">",
            "insert_",
            "insert-",
            "enter_",
            "enter-",
            "_here",
            "-here",
            "%2a%2a",
        ];
        const EQUALS: &[&str] = &[
            "none",
            "null",
            "nil",
            "true",
            "false",
            "undefined",
            "empty",
            "string",
            "str",
            "required",
            "optional",
            "hidden",
            "password",
            "passwd",
            "pass",
            "pwd",
            "secret",
            "token",
            "test",
            "testing",
            "default",
            "admin",
            "root",
            "guest",
            "user",
            "username",
            "foo",
            "bar",
            "foobar",
            "abc",
            "abc123",
            "qwerty",
            "letmein",
        ];
        if CONTAINS.iter().any(|c| lower.contains(c)) || EQUALS.contains(&lower.as_str()) {
            return true;
        }
        let bytes = lower.as_bytes();
        let repeated = bytes.windows(2).all(|w| w[0] == w[1]);
        let sequential = bytes.len() >= 4
            && (bytes.windows(2).all(|w| w[1] == w[0].wrapping_add(1))
                || "abcdefghijklmnopqrstuvwxyz0123456789".contains(&lower)
                || "0123456789abcdefghijklmnopqrstuvwxyz".contains(&lower));
        repeated || sequential
    }

    /// The generic assignment rule's decision on one candidate: the value's span and kind.
    fn generic_secret(&self, caps: &regex::Captures<'_>) -> Option<(usize, usize, &'static str)> {
        let key = caps.name("key")?.as_str();
        let op = caps.name("op")?.as_str();
        let quoted = ["dq", "sq", "bq", "cell"]
            .into_iter()
            .find_map(|n| caps.name(n));
        let (value, bare) = match quoted {
            Some(v) => (v, false),
            _ => (caps.name("bare")?, true),
        };
        let v = value.as_str();
        let class = key_class(key)?;
        if bare {
            let call = caps.name("call").is_some_and(|c| !c.as_str().is_empty());
            let path = v.contains('.') && !v.contains('@') || v.contains("::") || v.contains("->");
            if call
                || path
                || v.starts_with(':')
                || v.ends_with("::")
                || v.starts_with(['*', '&', '!', '@'])
                || matches!(op, "==" | "!=")
            {
                return None;
            }
        }
        if self.is_placeholder(v)
            || v.contains("://")
            || v.starts_with("arn:")
            || looks_like_path(v)
        {
            return None;
        }
        if v.chars()
            .all(|c| c.is_ascii_alphabetic() || matches!(c, '_' | '.' | '-'))
        {
            return None;
        }
        let snake = is_snake_identifier(v);
        if snake && (bare || class == Class::Secret) {
            return None;
        }
        let env_style = key
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && op == "="
            && caps.name("sp1").is_some_and(|s| s.as_str().is_empty())
            && caps.name("sp2").is_some_and(|s| s.as_str().is_empty());
        let identifier = v
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        let h = entropy(v);
        let len = v.chars().count();
        let has_digit = v.chars().any(|c| c.is_ascii_digit());
        if bare && identifier && !env_style {
            let has_letter = v.chars().any(|c| c.is_ascii_alphabetic());
            let min = if class == Class::Password { 8 } else { 16 };
            if !(has_digit && has_letter && len >= min && h >= 3.0 && mean_lower_run(v) < 3.0) {
                return None;
            }
        }
        let keep = match class {
            Class::Password => len >= 6 && h >= 2.0,
            Class::Secret => {
                len >= 10
                    && h >= 3.0
                    && !v.chars().all(|c| c.is_ascii_digit())
                    && (has_digit || h >= 4.0)
            }
        };
        keep.then(|| {
            let kind = match class {
                Class::Password => "generic_password",
                Class::Secret => "generic_secret",
            };
            (value.start(), value.end(), kind)
        })
    }
}

/// The words a key naming a credential holds (the generic rule's keys).
macro_rules! credential_word {
    () => {
        r"(?:passw(?:or)?d|passwort|passphrase|contrase(?:n|ñ)a|pwd|pass|secret|token|api[_.-]?key|apikey|access[_.-]?key|accesskey|auth[_.-]?key|private[_.-]?key|client[_.-]?secret|credentials?|creds)"
    };
}

/// Candidates of the generic rule: a key naming a credential, an operator, a value.
const GENERIC: &str = concat!(
    r#"(?i)(?P<key>[a-z0-9_.-]{0,40}?"#,
    credential_word!(),
    r#"[a-z0-9_.-]{0,30})["']?\]?(?P<sp1>\s{0,3})(?P<op>:=|=>|==|!=|\?=|=|:)(?P<sp2>\s{0,3})(?:"(?P<dq>[^"\s\\]+)"|'(?P<sq>[^'\s\\]+)'|`(?P<bq>[^`\s]+)`|(?P<bare>[^\s"'`,;()\[\]{}<>&#\\]+)(?P<call>[(\[<{]?))"#
);

/// Candidates of the generic rule in a Markdown table row: a cell naming a credential
/// (`| DB password |`, `` | `API_KEY` | ``), the next cell one value (`| s3cr3t!x |`),
/// weighed as a quoted value is.
const GENERIC_TABLE: &str = concat!(
    r"(?i)\|[ \t]*[`*_]{0,2}(?P<key>[a-z0-9_. -]{0,40}?",
    credential_word!(),
    r"[a-z0-9_. -]{0,30}?)[`*_]{0,2}[ \t]*(?P<op>\|)[ \t]*(?:`(?P<bq>[^`\s|]+)`|(?P<cell>[^\s|`]+))[ \t]*\|"
);

/// A whole value that is a template or a reference, not a secret.
const TEMPLATE: &str = r"(?i)^(?:\$\{[^}]*\}|\$\([^)]*\)|\$[A-Za-z_][A-Za-z0-9_]*|\{\{.*\}\}|\{[A-Za-z0-9_.-]*\}|<[^>]*>|%\([A-Za-z0-9_]+\)[sd]|%[A-Za-z_][A-Za-z0-9_]*%|@[A-Za-z_][A-Za-z0-9_]*@|\[[^\]]*\]|#\{[^}]*\})$";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Password,
    Secret,
}

/// What a key names, by its last word (`DB_PASSWORD` → password, `webhook_secret` →
/// secret, `max_tokens`, `csrf_token`, `password_hash` → nothing).
fn key_class(key: &str) -> Option<Class> {
    let mut words: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if matches!(c, '_' | '.' | '-' | '$' | '@' | ' ') {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    let mut words: Vec<String> = words
        .into_iter()
        .map(|w| w.trim_end_matches(|c: char| c.is_ascii_digit()).to_string())
        .filter(|w| !w.is_empty())
        .collect();
    const QUALIFIERS: &[&str] = &[
        "base",
        "value",
        "val",
        "str",
        "string",
        "b64",
        "base64",
        "hex",
        "raw",
        "plain",
        "encoded",
        "enc",
        "prod",
        "production",
        "dev",
        "staging",
        "local",
        "confirmation",
        "confirm",
        "again",
        "repeat",
        "old",
        "new",
        "current",
    ];
    while words.len() > 1
        && words
            .last()
            .is_some_and(|w| QUALIFIERS.contains(&w.as_str()))
    {
        words.pop();
    }
    let last = words.last()?.as_str();
    let before = words.len().checked_sub(2).map(|i| words[i].as_str());
    const PASSWORD: &[&str] = &[
        "password",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "passcode",
        "passwort",
        "contrasena",
        "contraseña",
        "pw",
    ];
    const SECRET: &[&str] = &[
        "secret",
        "token",
        "apikey",
        "accesskey",
        "credential",
        "credentials",
        "creds",
    ];
    const KEY_OF: &[&str] = &[
        "api",
        "access",
        "secret",
        "private",
        "auth",
        "app",
        "client",
        "consumer",
        "encryption",
        "signing",
        "master",
        "service",
        "account",
        "license",
        "subscription",
        "storage",
        "shared",
        "webhook",
        "admin",
        "deploy",
        "session",
        "jwt",
        "hmac",
        "crypt",
        "cipher",
        "sign",
        "aes",
        "rsa",
        "ssh",
    ];
    const NOT_A_CREDENTIAL: &[&str] = &[
        "csrf",
        "xsrf",
        "public",
        "pub",
        "page",
        "next",
        "continuation",
        "pagination",
        "sync",
        "cancellation",
        "cancel",
        "progress",
        "correlation",
        "idempotency",
        "trace",
        "span",
        "change",
        "request",
        "action",
        "verification",
        "forward",
        "backward",
        "output",
        "input",
        "resume",
        "marker",
        "cursor",
        "bos",
        "eos",
        "pad",
        "unk",
        "sep",
        "cls",
        "mask",
        "special",
        "stop",
        "start",
        "end",
        "max",
        "num",
    ];
    if PASSWORD.contains(&last) {
        return Some(Class::Password);
    }
    if before.is_some_and(|b| NOT_A_CREDENTIAL.contains(&b)) {
        return None;
    }
    if SECRET.contains(&last) || (last == "key" && before.is_some_and(|b| KEY_OF.contains(&b))) {
        return Some(Class::Secret);
    }
    None
}

fn looks_like_path(v: &str) -> bool {
    const ENDINGS: &[&str] = &[
        ".pem", ".key", ".crt", ".cer", ".p12", ".pfx", ".jks", ".json", ".yaml", ".yml", ".txt",
        ".env", ".conf", ".cfg", ".ini", ".toml",
    ];
    v.starts_with('/')
        || v.starts_with("~/")
        || v.starts_with("./")
        || v.get(1..3) == Some(":\\")
        || ENDINGS.iter().any(|e| v.to_lowercase().ends_with(e))
}

fn is_snake_identifier(v: &str) -> bool {
    let parts: Vec<&str> = v.split('_').collect();
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
        return false;
    }
    let lower = parts[0].starts_with(|c: char| c.is_ascii_lowercase())
        && parts.iter().all(|p| {
            p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
    let upper = parts[0].starts_with(|c: char| c.is_ascii_uppercase())
        && parts.iter().all(|p| {
            p.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        });
    lower || upper
}

/// Shannon entropy in bits per character over the value's own characters.
fn entropy(v: &str) -> f64 {
    let mut counts: BTreeMap<char, usize> = BTreeMap::new();
    let mut n = 0usize;
    for c in v.chars() {
        *counts.entry(c).or_default() += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    counts
        .values()
        .map(|&k| {
            let p = k as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

/// The mean length of the runs of lowercase letters (words read as runs of 3 or more;
/// random tokens as 1 or 2).
fn mean_lower_run(v: &str) -> f64 {
    let runs: Vec<usize> = v
        .split(|c: char| !c.is_ascii_lowercase())
        .filter(|r| !r.is_empty())
        .map(str::len)
        .collect();
    if runs.is_empty() {
        return 0.0;
    }
    runs.iter().sum::<usize>() as f64 / runs.len() as f64
}

#[cfg(test)]
mod tests;

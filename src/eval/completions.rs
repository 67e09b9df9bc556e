//! Code completion (fill-in-the-middle) on spans masked from real code, through the
//! pipeline's own completion path (`Pipeline::run` with a prompt and a suffix): exact
//! match and edit similarity of the middle, in three modes: the prefix only; the prefix
//! and the suffix; the prefix, the suffix and the repository's context (snippets of the
//! indexed repository, `completion.context_tokens`).
//!
//! Dataset: one JSON object a line (built by `benches/completions/build.py`):
//! `{"id", "file", "kind": "line" | "block", "prefix", "suffix", "middle", "cross_file"?}`;
//! `cross_file` marks a span whose middle uses a name only the repository declares (the
//! figures are also given for those spans alone).

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::llm::{GenParams, Input, UpstreamRequest};
use crate::pipeline::{self, ChatTurn, Pipeline};
use crate::sessions::Owner;

#[derive(Debug, Clone, Deserialize)]
pub struct Span {
    pub id: String,
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub kind: String,
    pub prefix: String,
    pub suffix: String,
    pub middle: String,
    #[serde(default)]
    pub cross_file: bool,
}

pub fn load_dataset(path: &Path) -> anyhow::Result<Vec<Span>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Span>(l)
                .with_context(|| format!("{}:{}: not a span", path.display(), i + 1))
        })
        .collect()
}

/// What the completion request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    PrefixOnly,
    PrefixSuffix,
    WithRepository,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::PrefixOnly, Mode::PrefixSuffix, Mode::WithRepository];

    /// `prefix`, `suffix` or `repository` (the command line's names).
    pub fn parse(name: &str) -> Option<Mode> {
        match name.trim() {
            "prefix" => Some(Mode::PrefixOnly),
            "suffix" => Some(Mode::PrefixSuffix),
            "repository" => Some(Mode::WithRepository),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::PrefixOnly => "prefix only",
            Mode::PrefixSuffix => "prefix + suffix",
            Mode::WithRepository => "prefix + suffix + repository",
        }
    }
}

/// One span's completion in one mode.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub id: String,
    pub kind: String,
    pub cross_file: bool,
    pub mode: Mode,
    pub exact: bool,
    pub similarity: f64,
    pub ms: u128,
    /// The middle as the gateway returned it.
    pub got: String,
}

/// The code as compared: each line without its trailing blanks, no blank lines at either end.
fn normalized(code: &str) -> String {
    let lines: Vec<&str> = code.lines().map(str::trim_end).collect();
    lines.join("\n").trim_matches('\n').trim_start().to_string()
}

/// 1 − the edit distance over the longer length (1 = identical), on characters.
pub fn edit_similarity(a: &str, b: &str) -> f64 {
    let longest = a.chars().count().max(b.chars().count());
    if longest == 0 {
        return 1.0;
    }
    1.0 - strsim::levenshtein(a, b) as f64 / longest as f64
}

/// Completes every span in each of `modes`: `plain` answers without repository context,
/// `with_context` with it (the same settings otherwise).
pub async fn evaluate(
    plain: &Pipeline,
    with_context: &Pipeline,
    model: &str,
    spans: &[Span],
    modes: &[Mode],
    max_tokens: u32,
    progress: &dyn Fn(usize),
) -> anyhow::Result<Vec<Outcome>> {
    let mut out = Vec::with_capacity(spans.len() * modes.len());
    for (n, span) in spans.iter().enumerate() {
        for &mode in modes {
            let (pipeline, suffix) = match mode {
                Mode::PrefixOnly => (plain, ""),
                Mode::PrefixSuffix => (plain, span.suffix.as_str()),
                Mode::WithRepository => (with_context, span.suffix.as_str()),
            };
            let request = UpstreamRequest {
                model: model.to_string(),
                input: Input::Prompt {
                    prompt: span.prefix.clone(),
                    suffix: Some(suffix.to_string()),
                    system: None,
                    raw: false,
                    images: Vec::new(),
                },
                params: GenParams {
                    max_tokens: Some(max_tokens),
                    temperature: Some(0.0),
                    ..GenParams::default()
                },
                tools: Vec::new(),
                tool_choice: None,
                whole: false,
                relay: None,
                template_peers: Vec::new(),
            };
            let turn = ChatTurn::from_client(request, None, None, None);
            let started = std::time::Instant::now();
            let events = pipeline
                .run(turn, &Owner::shared())
                .await
                .map_err(|e| anyhow::anyhow!("{}: {e}", span.id))?;
            let answer = pipeline::collect(events)
                .await
                .map_err(|e| anyhow::anyhow!("{}: {e}", span.id))?;
            let (got, want) = (normalized(&answer.text), normalized(&span.middle));
            out.push(Outcome {
                id: span.id.clone(),
                kind: span.kind.clone(),
                cross_file: span.cross_file,
                mode,
                exact: got == want,
                similarity: edit_similarity(&got, &want),
                ms: started.elapsed().as_millis(),
                got: answer.text,
            });
        }
        progress(n + 1);
    }
    Ok(out)
}

/// The figures of one mode over some spans.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Figures {
    pub mode: Mode,
    /// `all`, `line`, `block` or `cross-file`.
    pub kind: String,
    pub spans: usize,
    pub exact_match: f64,
    pub edit_similarity: f64,
    pub p50_ms: u128,
}

pub fn summarize(outcomes: &[Outcome]) -> Vec<Figures> {
    const CROSS_FILE: &str = "cross-file";
    let mut kinds: Vec<String> = vec!["all".into()];
    for o in outcomes {
        if !kinds.contains(&o.kind) {
            kinds.push(o.kind.clone());
        }
    }
    if outcomes.iter().any(|o| o.cross_file) {
        kinds.push(CROSS_FILE.into());
    }
    let mut out = Vec::new();
    for kind in &kinds {
        for mode in Mode::ALL {
            let some: Vec<&Outcome> = outcomes
                .iter()
                .filter(|o| {
                    o.mode == mode
                        && match kind.as_str() {
                            "all" => true,
                            CROSS_FILE => o.cross_file,
                            k => o.kind == k,
                        }
                })
                .collect();
            if some.is_empty() {
                continue;
            }
            let n = some.len() as f64;
            let mut ms: Vec<u128> = some.iter().map(|o| o.ms).collect();
            ms.sort_unstable();
            out.push(Figures {
                mode,
                kind: kind.clone(),
                spans: some.len(),
                exact_match: some.iter().filter(|o| o.exact).count() as f64 / n,
                edit_similarity: some.iter().map(|o| o.similarity).sum::<f64>() / n,
                p50_ms: ms[ms.len() / 2],
            });
        }
    }
    out
}

pub fn table(figures: &[Figures]) -> String {
    let mut s = String::from(
        "| spans | mode | count | exact match | edit similarity | p50 ms |\n|---|---|---:|---:|---:|---:|\n",
    );
    for f in figures {
        s.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.3} | {} |\n",
            f.kind,
            f.mode.name(),
            f.spans,
            f.exact_match,
            f.edit_similarity,
            f.p50_ms
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_code_as_written_without_trailing_blanks() {
        assert_eq!(normalized("  return x  \n\n"), "return x");
        assert_eq!(normalized("if a:\n    b()   \n"), "if a:\n    b()");
        assert_eq!(edit_similarity("abc", "abc"), 1.0);
        assert!((edit_similarity("abcd", "abce") - 0.75).abs() < 1e-9);
        assert_eq!(edit_similarity("", "xyz"), 0.0);
    }

    #[test]
    fn summarizes_per_mode_and_kind() {
        let o = |kind: &str, mode, exact| Outcome {
            id: "x".into(),
            kind: kind.into(),
            cross_file: exact,
            mode,
            exact,
            similarity: if exact { 1.0 } else { 0.5 },
            ms: 10,
            got: String::new(),
        };
        let figures = summarize(&[
            o("line", Mode::PrefixOnly, false),
            o("line", Mode::PrefixSuffix, true),
            o("block", Mode::PrefixSuffix, false),
        ]);
        let both = figures
            .iter()
            .find(|f| f.kind == "all" && f.mode == Mode::PrefixSuffix)
            .unwrap();
        assert_eq!((both.spans, both.exact_match), (2, 0.5));
        assert!((both.edit_similarity - 0.75).abs() < 1e-9);
        assert!(figures
            .iter()
            .all(|f| f.kind != "block" || f.mode != Mode::PrefixOnly));
        // The spans whose middle needs the repository, counted apart as well.
        let cross: Vec<_> = figures.iter().filter(|f| f.kind == "cross-file").collect();
        assert_eq!(cross.len(), 1);
        assert_eq!((cross[0].mode, cross[0].spans), (Mode::PrefixSuffix, 1));
        assert_eq!(Mode::parse(" repository"), Some(Mode::WithRepository));
        assert_eq!(Mode::parse("both"), None);
    }
}

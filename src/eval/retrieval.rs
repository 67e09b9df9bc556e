//! Retrieval metrics on a labelled dataset: recall@k, MRR@10 and nDCG@10 for BM25 alone,
//! vectors alone and the hybrid, side by side.
//!
//! Dataset: one JSON object a line, `{"query", "relevant": [chunk ids or source files],
//! "lang"?, "kind"?}`. A result is relevant when its chunk id or its source file is
//! listed; each listed item is credited once (the first result that matches it). Scores
//! are reported for all queries, then per language and per kind (e.g. `cross` for a
//! question whose answer is written only in the other language) when the cases say.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::retrieval::hybrid::{Mode, Retriever, Scored};

#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    pub query: String,
    pub relevant: Vec<String>,
    #[serde(default)]
    pub lang: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    /// The part of the corpus the question is about (`commands`, `config`, `api`, …).
    #[serde(default)]
    pub group: Option<String>,
}

impl Case {
    /// The facets the case names, as (name, value): its language, kind and group.
    fn facets(&self) -> Vec<(&'static str, &str)> {
        [
            ("lang", &self.lang),
            ("kind", &self.kind),
            ("group", &self.group),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value.as_deref()?)))
        .collect()
    }
}

pub fn load_dataset(path: &Path) -> anyhow::Result<Vec<Case>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Case>(l).with_context(|| {
                format!(
                    "{} line {}: not a {{query, relevant}} object",
                    path.display(),
                    i + 1
                )
            })
        })
        .collect()
}

/// Mean metrics of one retriever mode.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Scores {
    pub mode: String,
    /// `all`, `lang=<code>`, `kind=<kind>`, `group=<group>`, or a language crossed with one
    /// of the others (`lang=es,kind=cross`).
    pub group: String,
    pub queries: usize,
    pub recall_at_k: f64,
    pub mrr_at_10: f64,
    pub ndcg_at_10: f64,
}

/// Per-query gains: for each rank, whether it credits a relevant item not yet credited.
fn gains(results: &[Scored], relevant: &[String]) -> Vec<bool> {
    let mut credited = vec![false; relevant.len()];
    results
        .iter()
        .map(|r| {
            let hit = relevant.iter().enumerate().find(|(i, rel)| {
                !credited[*i] && (r.chunk.chunk_id == **rel || r.chunk.source_file == **rel)
            });
            match hit {
                Some((i, _)) => {
                    credited[i] = true;
                    true
                }
                None => false,
            }
        })
        .collect()
}

/// recall@k, reciprocal rank within 10, nDCG@10 of one query.
pub fn query_metrics(results: &[Scored], relevant: &[String], k: usize) -> (f64, f64, f64) {
    if relevant.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let g = gains(results, relevant);
    let found_k = g.iter().take(k).filter(|x| **x).count();
    let recall = found_k as f64 / relevant.len() as f64;
    let rr = g
        .iter()
        .take(10)
        .position(|x| *x)
        .map_or(0.0, |p| 1.0 / (p + 1) as f64);
    let dcg: f64 = g
        .iter()
        .take(10)
        .enumerate()
        .filter(|(_, x)| **x)
        .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
        .sum();
    let ideal: f64 = (0..relevant.len().min(10))
        .map(|i| 1.0 / ((i + 2) as f64).log2())
        .sum();
    (recall, rr, dcg / ideal)
}

/// Runs every case through each mode: the scores of all cases, then of each language,
/// kind and group the cases name (in order of first appearance), then of each language
/// crossed with each kind and each group.
pub async fn evaluate(
    retriever: &Retriever,
    cases: &[Case],
    k: usize,
    modes: &[Mode],
) -> anyhow::Result<Vec<Scores>> {
    // All, each facet alone, then each language crossed with each kind and each group
    // ("lang=es,kind=cross").
    let mut groups: Vec<String> = vec!["all".to_string()];
    let mut crossed: Vec<String> = Vec::new();
    for case in cases {
        let facets = case.facets();
        for (name, value) in &facets {
            let g = format!("{name}={value}");
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        if let Some((_, lang)) = facets.iter().find(|(n, _)| *n == "lang") {
            for (name, value) in facets.iter().filter(|(n, _)| *n != "lang") {
                let g = format!("lang={lang},{name}={value}");
                if !crossed.contains(&g) {
                    crossed.push(g);
                }
            }
        }
    }
    crossed.sort();
    groups.extend(crossed);
    let in_group = |case: &Case, group: &str| {
        let facets = case.facets();
        group == "all"
            || group.split(',').all(|part| {
                part.split_once('=').is_some_and(|(name, value)| {
                    facets.iter().any(|(n, v)| *n == name && *v == value)
                })
            })
    };
    let mut out = Vec::new();
    for &mode in modes {
        let mut per_case = Vec::with_capacity(cases.len());
        for case in cases {
            let results = retriever.search_top(&case.query, mode, k.max(10)).await?;
            per_case.push(query_metrics(&results, &case.relevant, k));
        }
        let mode = match mode {
            Mode::Lexical => "bm25",
            Mode::Dense => "vectors",
            Mode::Hybrid => "hybrid",
        };
        for group in &groups {
            let (mut recall, mut mrr, mut ndcg, mut queries) = (0.0, 0.0, 0.0, 0);
            for (case, (r, rr, n)) in cases.iter().zip(&per_case) {
                if in_group(case, group) {
                    recall += r;
                    mrr += rr;
                    ndcg += n;
                    queries += 1;
                }
            }
            let n = queries.max(1) as f64;
            out.push(Scores {
                mode: mode.to_string(),
                group: group.clone(),
                queries,
                recall_at_k: recall / n,
                mrr_at_10: mrr / n,
                ndcg_at_10: ndcg / n,
            });
        }
    }
    Ok(out)
}

/// The scores as a plain-text table, grouped by query group, modes side by side.
pub fn table(scores: &[Scores], k: usize) -> String {
    let mut s = format!(
        "{:<24} {:<8} {:>7} {:>10} {:>8} {:>9}\n",
        "group",
        "mode",
        "queries",
        format!("recall@{k}"),
        "MRR@10",
        "nDCG@10"
    );
    let mut groups: Vec<&str> = Vec::new();
    for x in scores {
        if !groups.contains(&x.group.as_str()) {
            groups.push(&x.group);
        }
    }
    for group in groups {
        for x in scores.iter().filter(|x| x.group == group) {
            s.push_str(&format!(
                "{:<24} {:<8} {:>7} {:>10.3} {:>8.3} {:>9.3}\n",
                x.group, x.mode, x.queries, x.recall_at_k, x.mrr_at_10, x.ndcg_at_10
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::KnowledgeChunk;

    fn r(id: &str, file: &str) -> Scored {
        Scored {
            chunk: KnowledgeChunk::sample(id, file).into(),
            score: 1.0,
        }
    }

    #[test]
    fn metrics_on_a_hand_computed_case() {
        // Relevant: file a.md and chunk c7. Results: x, a.md#1, a.md#2 (a.md already credited), c7.
        let results = [
            r("x", "z.md"),
            r("a1", "a.md"),
            r("a2", "a.md"),
            r("c7", "c.md"),
        ];
        let relevant = vec!["a.md".to_string(), "c7".to_string()];
        let (recall, rr, ndcg) = query_metrics(&results, &relevant, 3);
        assert_eq!(recall, 0.5, "only a.md within the top 3");
        assert_eq!(rr, 0.5, "first relevant at rank 2");
        let dcg = 1.0 / 3f64.log2() + 1.0 / 5f64.log2();
        let ideal = 1.0 + 1.0 / 3f64.log2();
        assert!((ndcg - dcg / ideal).abs() < 1e-12);
        let (recall, _, _) = query_metrics(&results, &relevant, 4);
        assert_eq!(recall, 1.0);
        assert_eq!(query_metrics(&[], &relevant, 8), (0.0, 0.0, 0.0));
    }
}

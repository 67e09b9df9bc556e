//! How well the assistant understands IDE turns, through the pipeline's own stages
//! (`Pipeline::understand_turn`: classify, the search query from the conversation,
//! retrieval), with no answer generated: editor recall and precision (is the selection or
//! the open file used exactly when the message is about it?), routing accuracy (is the
//! knowledge base searched exactly when it should be?), and for follow-ups recall@3 (a
//! file that answers it among the first three found), beside the recall@3 of the turn
//! before searched on its own. Reported for all turns, per language and per kind.
//!
//! Dataset: one JSON object a line (`examples/eval/turns.jsonl`):
//! `{"id", "lang", "kind", "question", "selection"?, "open_file"?, "extra_context"?,
//!   "history"?: [{"role", "content"}], "editor": bool, "retrieve": bool,
//!   "relevant"?: [source files]}`.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::context::EditorContext;
use crate::llm::{Message, Role};
use crate::pipeline::Pipeline;
use crate::retrieval::hybrid::{Retriever, Scored};

#[derive(Debug, Clone, Deserialize)]
pub struct Turn {
    pub id: String,
    #[serde(default)]
    pub lang: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    pub question: String,
    #[serde(default)]
    pub selection: Option<String>,
    #[serde(default)]
    pub open_file: Option<String>,
    #[serde(default)]
    pub extra_context: Option<String>,
    #[serde(default)]
    pub history: Vec<HistoryMessage>,
    pub editor: bool,
    pub retrieve: bool,
    #[serde(default)]
    pub relevant: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HistoryMessage {
    pub role: String,
    pub content: String,
}

pub fn load_dataset(path: &Path) -> anyhow::Result<Vec<Turn>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Turn>(l).with_context(|| {
                format!(
                    "{} line {}: not a turn ({{id, question, editor, retrieve, …}})",
                    path.display(),
                    i + 1
                )
            })
        })
        .collect()
}

/// What the pipeline made of one turn.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub id: String,
    pub lang: String,
    pub kind: String,
    pub editor: bool,
    pub editor_expected: bool,
    pub editor_rule: &'static str,
    pub retrieve: bool,
    pub retrieve_expected: bool,
    pub route_rule: &'static str,
    /// How the search query was made (`as-asked`, `history`, `anchored`, …).
    pub search_by: Option<&'static str>,
    /// Turns with relevant files: a relevant file among the first three found, and
    /// nDCG@10, for the turn as the pipeline searched it (with the conversation when it
    /// lacks its subject), for its words alone, and for the turn before searched alone.
    pub hit_at_3: Option<bool>,
    pub alone_hit_at_3: Option<bool>,
    pub before_hit_at_3: Option<bool>,
    pub ndcg_at_10: Option<f64>,
    pub alone_ndcg_at_10: Option<f64>,
}

fn editor_of(turn: &Turn) -> EditorContext {
    EditorContext {
        selected_text: turn.selection.clone().unwrap_or_default(),
        editor_content: turn.open_file.clone().unwrap_or_default(),
        extra_context: turn.extra_context.clone().unwrap_or_default(),
        ..EditorContext::default()
    }
}

fn history_of(turn: &Turn) -> Vec<Message> {
    turn.history
        .iter()
        .map(|m| {
            let role = match m.role.as_str() {
                "assistant" => Role::Assistant,
                "system" => Role::System,
                _ => Role::User,
            };
            Message::text(role, m.content.clone())
        })
        .collect()
}

fn ndcg_at_10(hits: &[Scored], relevant: &[String]) -> f64 {
    crate::eval::retrieval::query_metrics(hits, relevant, 10).2
}

/// Whether a file that answers is among the first three hits.
fn hit_at_3(hits: &[Scored], relevant: &[String]) -> bool {
    hits.iter().take(3).any(|h| {
        relevant
            .iter()
            .any(|r| *r == h.chunk.source_file || *r == h.chunk.chunk_id)
    })
}

/// Runs every turn through the pipeline's understanding stages.
pub async fn evaluate(
    pipeline: &Pipeline,
    retriever: &Retriever,
    turns: &[Turn],
) -> anyhow::Result<Vec<Outcome>> {
    let mut out = Vec::with_capacity(turns.len());
    for turn in turns {
        let history = history_of(turn);
        let understood = pipeline
            .understand_turn(&turn.question, &history, &editor_of(turn))
            .await;
        let labelled = !turn.relevant.is_empty();
        let hit = labelled.then(|| hit_at_3(&understood.hits, &turn.relevant));
        let ndcg = labelled.then(|| ndcg_at_10(&understood.hits, &turn.relevant));
        let (alone_hit, alone_ndcg) = if labelled {
            let found = retriever.find(&turn.question).await?;
            (
                Some(hit_at_3(&found.hits, &turn.relevant)),
                Some(ndcg_at_10(&found.hits, &turn.relevant)),
            )
        } else {
            (None, None)
        };
        let before_hit = match history.iter().rev().find(|m| m.role == Role::User) {
            Some(before) if labelled => {
                let found = retriever.find(&before.content).await?;
                Some(hit_at_3(&found.hits, &turn.relevant))
            }
            _ => None,
        };
        out.push(Outcome {
            id: turn.id.clone(),
            lang: turn.lang.clone().unwrap_or_else(|| "-".into()),
            kind: turn.kind.clone().unwrap_or_else(|| "-".into()),
            editor: understood.use_editor,
            editor_expected: turn.editor,
            editor_rule: understood.editor_rule,
            retrieve: understood.search.is_some(),
            retrieve_expected: turn.retrieve,
            route_rule: understood.route_rule,
            search_by: understood.search.as_ref().map(|s| s.by),
            hit_at_3: hit,
            alone_hit_at_3: alone_hit,
            before_hit_at_3: before_hit,
            ndcg_at_10: ndcg,
            alone_ndcg_at_10: alone_ndcg,
        });
    }
    Ok(out)
}

/// The figures of one group of turns.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Figures {
    /// `all`, `lang=<code>` or `kind=<kind>`.
    pub group: String,
    pub turns: usize,
    /// Of the turns about the editor's code, the share that used it (None: no such turn).
    pub editor_recall: Option<f64>,
    /// Of the turns that used the editor's code, the share about it.
    pub editor_precision: Option<f64>,
    /// The share searched exactly when they should be.
    pub routing: f64,
    /// Turns labelled with the files that answer them.
    pub searched: usize,
    /// Of those, the share with a relevant file among the first three found.
    pub recall_at_3: Option<f64>,
    /// The same, each turn's words searched alone (no conversation).
    pub alone_recall_at_3: Option<f64>,
    /// The same, the turn before searched alone (turns with a history).
    pub before_recall_at_3: Option<f64>,
    pub ndcg_at_10: Option<f64>,
    pub alone_ndcg_at_10: Option<f64>,
}

fn share(n: usize, of: usize) -> Option<f64> {
    (of > 0).then(|| n as f64 / of as f64)
}

fn figures(group: String, outcomes: &[&Outcome]) -> Figures {
    let about = outcomes.iter().filter(|o| o.editor_expected).count();
    let used = outcomes.iter().filter(|o| o.editor).count();
    let right = outcomes
        .iter()
        .filter(|o| o.editor && o.editor_expected)
        .count();
    let routed = outcomes
        .iter()
        .filter(|o| o.retrieve == o.retrieve_expected)
        .count();
    let labelled: Vec<&&Outcome> = outcomes.iter().filter(|o| o.hit_at_3.is_some()).collect();
    let count = |f: &dyn Fn(&Outcome) -> Option<bool>| {
        labelled.iter().filter(|o| f(o) == Some(true)).count()
    };
    let with_before = labelled
        .iter()
        .filter(|o| o.before_hit_at_3.is_some())
        .count();
    let mean = |f: &dyn Fn(&Outcome) -> Option<f64>| {
        (!labelled.is_empty())
            .then(|| labelled.iter().filter_map(|o| f(o)).sum::<f64>() / labelled.len() as f64)
    };
    Figures {
        group,
        turns: outcomes.len(),
        editor_recall: share(right, about),
        editor_precision: share(right, used),
        routing: share(routed, outcomes.len()).unwrap_or(0.0),
        searched: labelled.len(),
        recall_at_3: share(count(&|o| o.hit_at_3), labelled.len()),
        alone_recall_at_3: share(count(&|o| o.alone_hit_at_3), labelled.len()),
        before_recall_at_3: share(count(&|o| o.before_hit_at_3), with_before),
        ndcg_at_10: mean(&|o| o.ndcg_at_10),
        alone_ndcg_at_10: mean(&|o| o.alone_ndcg_at_10),
    }
}

/// The figures for all turns, then per language, then per kind.
pub fn summarize(outcomes: &[Outcome]) -> Vec<Figures> {
    let mut groups = vec![figures("all".into(), &outcomes.iter().collect::<Vec<_>>())];
    // (group name, whether it is a language, its value), in order of first appearance.
    let mut names: Vec<(String, bool, String)> = Vec::new();
    for (is_lang, value) in outcomes
        .iter()
        .map(|o| (true, &o.lang))
        .chain(outcomes.iter().map(|o| (false, &o.kind)))
    {
        let name = format!("{}={value}", if is_lang { "lang" } else { "kind" });
        if !names.iter().any(|(n, _, _)| *n == name) {
            names.push((name, is_lang, value.clone()));
        }
    }
    for (name, is_lang, value) in names {
        let members: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| {
                if is_lang {
                    o.lang == value
                } else {
                    o.kind == value
                }
            })
            .collect();
        groups.push(figures(name, &members));
    }
    groups
}

/// The figures as a table, then each turn decided otherwise than labelled.
pub fn table(figures: &[Figures], outcomes: &[Outcome]) -> String {
    let pct = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.3}"));
    let mut out = String::from(
        "| group | turns | editor recall | editor precision | routing | searched | recall@3 | alone | turn before | nDCG@10 | alone |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for f in figures {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.3} | {} | {} | {} | {} | {} | {} |\n",
            f.group,
            f.turns,
            pct(f.editor_recall),
            pct(f.editor_precision),
            f.routing,
            f.searched,
            pct(f.recall_at_3),
            pct(f.alone_recall_at_3),
            pct(f.before_recall_at_3),
            pct(f.ndcg_at_10),
            pct(f.alone_ndcg_at_10),
        ));
    }
    let wrong: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.editor != o.editor_expected || o.retrieve != o.retrieve_expected)
        .collect();
    if !wrong.is_empty() {
        out.push_str("\nDecided otherwise than labelled:\n");
        for o in wrong {
            out.push_str(&format!(
                "  {} ({}, {}): editor {} (expected {}, rule {}), retrieve {} (expected {}, rule {})\n",
                o.id,
                o.lang,
                o.kind,
                o.editor,
                o.editor_expected,
                o.editor_rule,
                o.retrieve,
                o.retrieve_expected,
                o.route_rule
            ));
        }
    }
    let missed: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.hit_at_3 == Some(false))
        .collect();
    if !missed.is_empty() {
        out.push_str("\nSearched turns without a relevant file in the first three:\n");
        for o in missed {
            out.push_str(&format!(
                "  {} ({}): search {}, the turn before alone {}\n",
                o.id,
                o.lang,
                o.search_by.unwrap_or("-"),
                match o.before_hit_at_3 {
                    Some(true) => "found one",
                    _ => "found none",
                }
            ));
        }
    }
    out
}

//! Answer evaluation: golden questions go through the real pipeline (retrieval and
//! generation, as for any client), then a judge model scores each answer with the RAGAS
//! metrics. The result has the reference's `EvalResponse` fields.
//!
//! Context given to the judge: the retrieved chunks, in rank order (and, for an editor
//! question, the selected code first). Context precision ranks the retrieved chunks only.

pub mod judge;
pub mod metrics;
pub mod report;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::context::EditorContext;
use crate::embed::{Embedder, TextKind};
use crate::error::GatewayError;
use crate::llm::{GenParams, Input, Message, Role, UpstreamError, UpstreamRequest};
use crate::pipeline::{ChatTurn, Pipeline, Source};
use judge::{Judge, JudgeStats, Judged};

/// One golden question.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Golden {
    pub id: String,
    pub category: String,
    pub question: String,
    pub ground_truth: String,
    #[serde(default)]
    pub lang: Option<String>,
    /// Editor context, plain text (sent to the pipeline as the editor extension does).
    #[serde(default)]
    pub selected_text: Option<String>,
    #[serde(default)]
    pub editor_content: Option<String>,
    #[serde(default)]
    pub extra_context: Option<String>,
}

/// Reads a golden dataset: one JSON object a line, ids unique, no empty field.
pub fn load_dataset(path: &Path) -> anyhow::Result<Vec<Golden>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), i + 1);
        let g: Golden = serde_json::from_str(line).with_context(|| {
            format!(
                "{}: not a {{id, category, question, ground_truth}} object",
                at()
            )
        })?;
        for (name, value) in [
            ("id", &g.id),
            ("category", &g.category),
            ("question", &g.question),
            ("ground_truth", &g.ground_truth),
        ] {
            anyhow::ensure!(!value.trim().is_empty(), "{}: \"{name}\" is empty", at());
        }
        anyhow::ensure!(
            seen.insert(g.id.clone()),
            "{}: id \"{}\" appears twice",
            at(),
            g.id
        );
        out.push(g);
    }
    anyhow::ensure!(!out.is_empty(), "{} has no questions", path.display());
    Ok(out)
}

/// The questions of `category` (all when empty), the first `limit` (all when 0).
pub fn select(dataset: Vec<Golden>, category: &str, limit: usize) -> Vec<Golden> {
    let category = category.trim();
    let picked = dataset
        .into_iter()
        .filter(|g| category.is_empty() || g.category == category);
    if limit == 0 {
        picked.collect()
    } else {
        picked.take(limit).collect()
    }
}

/// Per-metric counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerMetric {
    pub faithfulness: usize,
    pub answer_relevancy: usize,
    pub context_recall: usize,
    pub context_precision: usize,
}

/// A retrieved chunk, as listed in the details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRef {
    pub file: String,
    pub section: String,
    pub lines: [usize; 2],
    pub score: f32,
}

/// One question's result. The reference's fields first, then the scores (`null` when
/// missing or not applicable; `missing` and `notes` say which and why).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionDetail {
    pub id: String,
    pub category: String,
    pub question: String,
    pub answer_preview: String,
    pub n_chunks: usize,
    pub faithfulness: Option<f64>,
    pub answer_relevancy: Option<f64>,
    pub context_recall: Option<f64>,
    pub context_precision: Option<f64>,
    /// Mean of this question's non-zero scores.
    pub global_score: f64,
    /// Metrics whose judgement was unusable twice.
    pub missing: Vec<String>,
    pub notes: Vec<String>,
    pub ground_truth: String,
    pub sources: Vec<SourceRef>,
    /// The whole answer (the HTML report shows it; the JSON carries the preview).
    #[serde(skip)]
    pub answer: String,
}

/// The reference's `EvalResponse`, plus how the scores were obtained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResponse {
    pub status: String,
    pub questions_evaluated: usize,
    pub elapsed_seconds: f64,
    pub judge_model: String,
    pub index: String,
    /// Means over the questions that have the score; `null` when none has.
    pub faithfulness: Option<f64>,
    pub answer_relevancy: Option<f64>,
    pub context_recall: Option<f64>,
    pub context_precision: Option<f64>,
    /// Mean of the non-zero metrics above.
    pub global_score: f64,
    pub verdict: String,
    pub details: Vec<QuestionDetail>,
    pub answer_model: String,
    /// `embeddings` (cosine of the configured embedder's vectors) or `judge`.
    pub answer_relevancy_method: String,
    /// Questions each metric was scored on.
    pub scored: PerMetric,
    /// Judgements missing per metric (unusable twice).
    pub missing_judgements: PerMetric,
    pub judge: JudgeStats,
}

/// What an evaluation runs on.
pub struct Evaluator<'a> {
    pub pipeline: &'a Pipeline,
    pub judge: &'a Judge,
    /// Answer relevancy by embeddings when present; by the judge otherwise.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// `max_tokens` of the answers; `None` = the assistant's default.
    pub answer_max_tokens: Option<u32>,
    pub answer_model: String,
    pub index: String,
}

/// Why an evaluation stopped.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("answering question {id}: {error}")]
    Answer { id: String, error: GatewayError },
    #[error("the judge failed: {0}")]
    Judge(#[from] UpstreamError),
    #[error("embedding for answer relevancy failed: {0}")]
    Embed(UpstreamError),
}

impl Evaluator<'_> {
    /// Evaluates every question in order; `progress` advances once a question.
    pub async fn run(
        &self,
        questions: &[Golden],
        progress: &indicatif::ProgressBar,
    ) -> Result<EvalResponse, EvalError> {
        let started = Instant::now();
        progress.set_length(questions.len() as u64);
        let mut details = Vec::with_capacity(questions.len());
        for g in questions {
            progress.set_message(g.id.clone());
            details.push(self.question(g).await?);
            progress.inc(1);
            ::metrics::counter!("assist_eval_questions_total").increment(1);
        }
        progress.finish_and_clear();
        Ok(self.summary(details, started.elapsed().as_secs_f64()))
    }

    fn summary(&self, details: Vec<QuestionDetail>, elapsed: f64) -> EvalResponse {
        let pick = |f: fn(&QuestionDetail) -> Option<f64>| details.iter().map(f);
        let faithfulness = metrics::mean(pick(|d| d.faithfulness));
        let answer_relevancy = metrics::mean(pick(|d| d.answer_relevancy));
        let context_recall = metrics::mean(pick(|d| d.context_recall));
        let context_precision = metrics::mean(pick(|d| d.context_precision));
        let global = metrics::global_score(&[
            faithfulness,
            answer_relevancy,
            context_recall,
            context_precision,
        ]);
        let count = |f: fn(&QuestionDetail) -> Option<f64>| pick(f).flatten().count();
        let missing = |name: &str| {
            details
                .iter()
                .filter(|d| d.missing.iter().any(|m| m == name))
                .count()
        };
        let round = |x: Option<f64>| x.map(metrics::round4);
        EvalResponse {
            status: "ok".into(),
            questions_evaluated: details.len(),
            elapsed_seconds: (elapsed * 10.0).round() / 10.0,
            judge_model: self.judge.model().to_string(),
            index: self.index.clone(),
            faithfulness: round(faithfulness),
            answer_relevancy: round(answer_relevancy),
            context_recall: round(context_recall),
            context_precision: round(context_precision),
            global_score: metrics::round4(global),
            // Nothing measured is no verdict: a failing grade would blame the answers for
            // what the judge could not do.
            verdict: if [
                faithfulness,
                answer_relevancy,
                context_recall,
                context_precision,
            ]
            .iter()
            .all(Option::is_none)
            {
                metrics::UNSCORED.into()
            } else {
                metrics::verdict(metrics::round4(global)).into()
            },
            answer_model: self.answer_model.clone(),
            answer_relevancy_method: if self.embedder.is_some() {
                "embeddings"
            } else {
                "judge"
            }
            .into(),
            scored: PerMetric {
                faithfulness: count(|d| d.faithfulness),
                answer_relevancy: count(|d| d.answer_relevancy),
                context_recall: count(|d| d.context_recall),
                context_precision: count(|d| d.context_precision),
            },
            missing_judgements: PerMetric {
                faithfulness: missing("faithfulness"),
                answer_relevancy: missing("answer_relevancy"),
                context_recall: missing("context_recall"),
                context_precision: missing("context_precision"),
            },
            judge: self.judge.stats(),
            details,
        }
    }

    /// The pipeline's answer to one golden question, with the chunks it was given.
    async fn answer(&self, g: &Golden) -> Result<(String, Vec<Source>), EvalError> {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let editor = EditorContext {
            selected_text: text(&g.selected_text),
            editor_content: text(&g.editor_content),
            extra_context: text(&g.extra_context),
            // Blocks in the question are read as an API request's would be.
            ..EditorContext::from_request(None, None, &g.question)
        };
        let turn = ChatTurn {
            request: UpstreamRequest {
                model: self.pipeline.assistant_model().to_string(),
                input: Input::Chat(vec![Message::text(Role::User, g.question.clone())]),
                params: GenParams {
                    max_tokens: self.answer_max_tokens,
                    temperature: Some(0.0),
                    ..GenParams::default()
                },
                tools: Vec::new(),
                tool_choice: None,
                whole: false,
                relay: None,
                template_peers: Vec::new(),
            },
            session_id: None,
            editor,
        };
        let failed = |error| EvalError::Answer {
            id: g.id.clone(),
            error,
        };
        // No session: the owner does not matter.
        let events = self
            .pipeline
            .run(turn, &crate::sessions::Owner::shared())
            .await
            .map_err(failed)?;
        let answer = crate::pipeline::collect(events).await.map_err(failed)?;
        Ok((answer.text, answer.sources.unwrap_or_default()))
    }

    async fn question(&self, g: &Golden) -> Result<QuestionDetail, EvalError> {
        let (answer, sources) = self.answer(g).await?;
        let mut missing = Vec::new();
        let mut notes = Vec::new();
        let mut take = |name: &str, judged: Judged<f64>| match judged {
            Judged::Ok(v) => Some(v),
            Judged::Missing(why) => {
                missing.push(name.to_string());
                notes.push(why);
                None
            }
        };
        let chunks: Vec<String> = sources.iter().map(passage).collect();
        let mut context = Vec::new();
        if let Some(sel) = g.selected_text.as_deref().filter(|s| !s.trim().is_empty()) {
            context.push(format!("[selected code in the editor]\n{sel}"));
        }
        context.extend(chunks.iter().cloned());
        let context_text = context.join("\n\n");
        let mut info = Vec::new();

        let faithfulness = match self
            .faithfulness(g, &answer, &context, &context_text)
            .await?
        {
            Scored::Value(v) => take("faithfulness", Judged::Ok(v)),
            Scored::Missing(why) => take("faithfulness", Judged::Missing(why)),
            Scored::NotApplicable(why) => {
                info.push(why);
                None
            }
        };
        let answer_relevancy = take("answer_relevancy", self.relevancy(g, &answer).await?);
        let context_recall = if context.is_empty() {
            info.push("no context: context recall is 0".into());
            Some(0.0)
        } else {
            let sentences = metrics::sentences(&g.ground_truth);
            let n = sentences.len().to_string();
            let p = &self.judge.prompts().context_recall;
            let judged = self
                .judge
                .ask(
                    "context_recall",
                    p,
                    &[
                        ("question", &g.question),
                        ("context", &context_text),
                        ("sentences", &judge::numbered(&sentences)),
                        ("count", &n),
                    ],
                    |v| judge::verdicts(v, "verdicts", sentences.len()),
                )
                .await?;
            take(
                "context_recall",
                map(judged, |v| metrics::share(&v).unwrap_or(0.0)),
            )
        };
        let context_precision = if chunks.is_empty() {
            info.push("no chunk retrieved: context precision is 0".into());
            Some(0.0)
        } else {
            let n = chunks.len().to_string();
            let p = &self.judge.prompts().context_precision;
            let numbered: Vec<String> = chunks
                .iter()
                .enumerate()
                .map(|(i, c)| format!("Passage {}:\n{c}", i + 1))
                .collect();
            let judged = self
                .judge
                .ask(
                    "context_precision",
                    p,
                    &[
                        ("question", &g.question),
                        ("ground_truth", &g.ground_truth),
                        ("passages", &numbered.join("\n\n")),
                        ("count", &n),
                    ],
                    |v| judge::verdicts(v, "verdicts", chunks.len()),
                )
                .await?;
            take(
                "context_precision",
                map(judged, |v| metrics::context_precision(&v)),
            )
        };
        notes.extend(info);
        let global = metrics::global_score(&[
            faithfulness,
            answer_relevancy,
            context_recall,
            context_precision,
        ]);
        let round = |x: Option<f64>| x.map(metrics::round4);
        Ok(QuestionDetail {
            id: g.id.clone(),
            category: g.category.clone(),
            question: g.question.clone(),
            answer_preview: answer.chars().take(300).collect(),
            n_chunks: sources.len(),
            faithfulness: round(faithfulness),
            answer_relevancy: round(answer_relevancy),
            context_recall: round(context_recall),
            context_precision: round(context_precision),
            global_score: metrics::round4(global),
            missing,
            notes,
            ground_truth: g.ground_truth.clone(),
            sources: sources
                .iter()
                .map(|s| SourceRef {
                    file: s.file.clone(),
                    section: s.section.clone(),
                    lines: s.lines,
                    score: s.score,
                })
                .collect(),
            answer,
        })
    }

    /// Statements of the answer, then each checked against the context.
    async fn faithfulness(
        &self,
        g: &Golden,
        answer: &str,
        context: &[String],
        context_text: &str,
    ) -> Result<Scored, EvalError> {
        if answer.trim().is_empty() {
            return Ok(Scored::NotApplicable(
                "empty answer: no faithfulness".into(),
            ));
        }
        let p = &self.judge.prompts().statements;
        let statements = match self
            .judge
            .ask(
                "faithfulness",
                p,
                &[("question", &g.question), ("answer", answer)],
                judge::statements,
            )
            .await?
        {
            Judged::Ok(s) => s,
            Judged::Missing(why) => return Ok(Scored::Missing(why)),
        };
        if statements.is_empty() {
            return Ok(Scored::NotApplicable(
                "the answer makes no statement: no faithfulness".into(),
            ));
        }
        if context.is_empty() {
            return Ok(Scored::Value(0.0));
        }
        let n = statements.len().to_string();
        let p = &self.judge.prompts().faithfulness;
        let judged = self
            .judge
            .ask(
                "faithfulness",
                p,
                &[
                    ("context", context_text),
                    ("statements", &judge::numbered(&statements)),
                    ("count", &n),
                ],
                |v| judge::verdicts(v, "verdicts", statements.len()),
            )
            .await?;
        Ok(match judged {
            Judged::Ok(v) => Scored::Value(metrics::share(&v).unwrap_or(0.0)),
            Judged::Missing(why) => Scored::Missing(why),
        })
    }

    /// Questions written back from the answer, compared with the asked one.
    async fn relevancy(&self, g: &Golden, answer: &str) -> Result<Judged<f64>, EvalError> {
        if answer.trim().is_empty() {
            return Ok(Judged::Ok(0.0));
        }
        let count = self.judge.relevancy_questions();
        let n = count.to_string();
        let p = &self.judge.prompts().relevancy;
        let (questions, noncommittal) = match self
            .judge
            .ask(
                "answer_relevancy",
                p,
                &[("answer", answer), ("count", &n)],
                |v| judge::questions(v, count),
            )
            .await?
        {
            Judged::Ok(q) => q,
            Judged::Missing(why) => return Ok(Judged::Missing(why)),
        };
        if noncommittal {
            return Ok(Judged::Ok(0.0));
        }
        if let Some(embedder) = &self.embedder {
            let mut texts = vec![g.question.clone()];
            texts.extend(questions.iter().cloned());
            let vectors = embedder
                .embed(&texts, TextKind::Query)
                .await
                .map_err(EvalError::Embed)?;
            return Ok(Judged::Ok(metrics::relevancy_by_embeddings(
                &vectors[0],
                &vectors[1..],
                false,
            )));
        }
        let p = &self.judge.prompts().same_question;
        let judged = self
            .judge
            .ask(
                "answer_relevancy",
                p,
                &[
                    ("question", &g.question),
                    ("questions", &judge::numbered(&questions)),
                    ("count", &n),
                ],
                |v| judge::verdicts(v, "verdicts", questions.len()),
            )
            .await?;
        Ok(map(judged, |v| metrics::relevancy_by_verdicts(&v, false)))
    }
}

enum Scored {
    Value(f64),
    Missing(String),
    NotApplicable(String),
}

fn map<T, U>(j: Judged<T>, f: impl FnOnce(T) -> U) -> Judged<U> {
    match j {
        Judged::Ok(v) => Judged::Ok(f(v)),
        Judged::Missing(why) => Judged::Missing(why),
    }
}

/// A retrieved chunk as the judge reads it: where it comes from, then its text.
fn passage(s: &Source) -> String {
    let section = if s.section.is_empty() {
        String::new()
    } else {
        format!(" § {}", s.section)
    };
    format!("[{}{section}]\n{}", s.file, s.text.trim())
}

/// Per-category means of the details, for the report and the table.
pub fn by_category(details: &[QuestionDetail]) -> BTreeMap<String, CategoryScores> {
    let mut groups: BTreeMap<String, Vec<&QuestionDetail>> = BTreeMap::new();
    for d in details {
        groups.entry(d.category.clone()).or_default().push(d);
    }
    groups
        .into_iter()
        .map(|(name, ds)| {
            let m = |f: fn(&QuestionDetail) -> Option<f64>| {
                metrics::mean(ds.iter().map(|d| f(d))).map(metrics::round4)
            };
            let s = CategoryScores {
                questions: ds.len(),
                faithfulness: m(|d| d.faithfulness),
                answer_relevancy: m(|d| d.answer_relevancy),
                context_recall: m(|d| d.context_recall),
                context_precision: m(|d| d.context_precision),
            };
            (name, s)
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoryScores {
    pub questions: usize,
    pub faithfulness: Option<f64>,
    pub answer_relevancy: Option<f64>,
    pub context_recall: Option<f64>,
    pub context_precision: Option<f64>,
}

impl CategoryScores {
    pub fn global(&self) -> f64 {
        metrics::round4(metrics::global_score(&[
            self.faithfulness,
            self.answer_relevancy,
            self.context_recall,
            self.context_precision,
        ]))
    }
}

/// The summary as a plain-text table (the command's output).
pub fn table(r: &EvalResponse) -> String {
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
    let mut s = format!(
        "answers by {} · judge {} · index {} · {} questions in {:.1} s\n\n",
        r.answer_model, r.judge_model, r.index, r.questions_evaluated, r.elapsed_seconds
    );
    s.push_str(&format!(
        "{:<18} {:>7} {:>7} {:>8}\n",
        "metric", "score", "scored", "missing"
    ));
    for (name, v, n, m) in [
        (
            "faithfulness",
            r.faithfulness,
            r.scored.faithfulness,
            r.missing_judgements.faithfulness,
        ),
        (
            "answer_relevancy",
            r.answer_relevancy,
            r.scored.answer_relevancy,
            r.missing_judgements.answer_relevancy,
        ),
        (
            "context_recall",
            r.context_recall,
            r.scored.context_recall,
            r.missing_judgements.context_recall,
        ),
        (
            "context_precision",
            r.context_precision,
            r.scored.context_precision,
            r.missing_judgements.context_precision,
        ),
    ] {
        s.push_str(&format!("{name:<18} {:>7} {n:>7} {m:>8}\n", f(v)));
    }
    s.push_str(&format!(
        "{:<18} {:>7.4}\nverdict            {}\n",
        "global_score", r.global_score, r.verdict
    ));
    if r.scored == PerMetric::default() {
        s.push_str("no metric could be scored: every judgement is missing (the global score is not a measurement)\n");
    }
    s.push_str(&format!(
        "judge: {} calls, {} malformed replies, {} judgements missing; answer relevancy by {}\n\n",
        r.judge.calls, r.judge.malformed_replies, r.judge.missing, r.answer_relevancy_method
    ));
    s.push_str(&format!(
        "{:<16} {:>3} {:>7} {:>7} {:>7} {:>7} {:>7}\n",
        "category", "n", "faith", "relev", "recall", "prec", "global"
    ));
    for (name, c) in by_category(&r.details) {
        s.push_str(&format!(
            "{name:<16} {:>3} {:>7} {:>7} {:>7} {:>7} {:>7.4}\n",
            c.questions,
            f(c.faithfulness),
            f(c.answer_relevancy),
            f(c.context_recall),
            f(c.context_precision),
            c.global()
        ));
    }
    s
}

/// Writes `results.json` and `report.html` into `dir` (created).
pub fn write_reports(dir: &Path, response: &EvalResponse) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let json = dir.join("results.json");
    std::fs::write(&json, serde_json::to_vec_pretty(response)?)
        .with_context(|| format!("cannot write {}", json.display()))?;
    let html = dir.join("report.html");
    std::fs::write(&html, report::html(response))
        .with_context(|| format!("cannot write {}", html.display()))?;
    Ok(())
}

/// Deletes the oldest report folders under `data_dir/eval` beyond the newest `keep`: only
/// those named by [`default_out_dir`] (a folder given with `--out` there is left alone).
pub fn prune_reports(data_dir: &Path, keep: usize) -> anyhow::Result<()> {
    let root = data_dir.join("eval");
    let timestamped = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| chrono::NaiveDateTime::parse_from_str(n, REPORT_DIR_FORMAT).is_ok())
    };
    let mut dirs: Vec<std::path::PathBuf> = match std::fs::read_dir(&root) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir() && timestamped(p))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", root.display())),
    };
    // The folders are named by their UTC time, so their names sort by age.
    dirs.sort();
    for old in dirs.iter().take(dirs.len().saturating_sub(keep)) {
        std::fs::remove_dir_all(old).with_context(|| format!("cannot delete {}", old.display()))?;
    }
    Ok(())
}

/// How report folders under `data_dir/eval` are named: their UTC time.
const REPORT_DIR_FORMAT: &str = "%Y%m%d-%H%M%S";

/// `data_dir/eval/<UTC timestamp>`: where reports go unless told otherwise.
pub fn default_out_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir
        .join("eval")
        .join(chrono::Utc::now().format(REPORT_DIR_FORMAT).to_string())
}

/// The name the evaluated knowledge index goes by: the Qdrant collection on a server,
/// else the index folder.
pub fn index_name(settings: &crate::config::Settings) -> String {
    match &settings.qdrant.url {
        None => settings.index_dir().display().to_string(),
        Some(_) => settings.qdrant.collection.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports accumulated without end; the newest `keep` of those the gateway named are
    /// kept, and a folder someone chose there (`--out data/eval/baseline`) is left alone.
    #[test]
    fn only_the_newest_reports_are_kept() {
        let data = tempfile::tempdir().unwrap();
        let eval = data.path().join("eval");
        for name in [
            "20261101-090000",
            "20261102-090000",
            "20261103-090000",
            "baseline",
        ] {
            std::fs::create_dir_all(eval.join(name)).unwrap();
        }
        prune_reports(data.path(), 2).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&eval)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["20261102-090000", "20261103-090000", "baseline"]);
        // Nothing to prune is no error.
        prune_reports(tempfile::tempdir().unwrap().path(), 2).unwrap();
    }
}

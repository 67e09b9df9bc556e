//! The HTML report: one self-contained file (inline CSS and SVG, nothing fetched) with
//! the summary, a chart per metric (by category) and per category (by metric), and every
//! question's answer, sources and scores. Numbers are shown as in the JSON (4 decimals).

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{by_category, EvalResponse, QuestionDetail};

const METRICS: [&str; 4] = [
    "faithfulness",
    "answer_relevancy",
    "context_recall",
    "context_precision",
];

const CSS: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;color:#1d2330;background:#fafbfc}
h1{margin-bottom:.2rem}h2{margin-top:2.2rem;border-bottom:1px solid #d5dae1;padding-bottom:.3rem}
.meta{color:#56606e;margin:.2rem 0}
table{border-collapse:collapse;margin:.6rem 0}th,td{padding:.3rem .7rem;border-bottom:1px solid #e3e7ec;text-align:left;vertical-align:top}
td.score{font-variant-numeric:tabular-nums;text-align:right}
.good{background:#ddf4e4}.fair{background:#fdf1d3}.poor{background:#fbe0df}.none{color:#8a93a0}
.verdict{display:inline-block;padding:.25rem .7rem;border-radius:.3rem;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:1rem}.chart{background:#fff;border:1px solid #e3e7ec;border-radius:.4rem;padding:.5rem .8rem}
.chart h3{margin:.2rem 0 .4rem;font-size:1rem}
details{background:#fff;border:1px solid #e3e7ec;border-radius:.4rem;margin:.5rem 0;padding:.4rem .8rem}
summary{cursor:pointer}pre{white-space:pre-wrap;background:#f3f5f8;padding:.5rem;border-radius:.3rem}
.notes{color:#8a4b00}
"#;

/// The report for `r`.
pub fn html(r: &EvalResponse) -> String {
    let categories = by_category(&r.details);
    let overall = [
        ("faithfulness", r.faithfulness),
        ("answer_relevancy", r.answer_relevancy),
        ("context_recall", r.context_recall),
        ("context_precision", r.context_precision),
        ("global_score", Some(r.global_score)),
    ];
    let mut worst: Vec<&QuestionDetail> = r.details.iter().collect();
    worst.sort_by(|a, b| a.global_score.total_cmp(&b.global_score));
    worst.truncate(5);
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Answer evaluation · " (r.verdict) " " (fmt(Some(r.global_score))) }
                style { (PreEscaped(CSS)) }
            }
            body {
                h1 { "Answer evaluation" }
                p.meta {
                    "Answers by " b { (r.answer_model) } " · judged by " b { (r.judge_model) }
                    " · index " code { (r.index) }
                }
                p.meta {
                    span #questions-evaluated { (r.questions_evaluated) } " questions in "
                    span #elapsed-seconds { (format!("{:.1}", r.elapsed_seconds)) } " s · status "
                    span #status { (r.status) } " · answer relevancy by " (r.answer_relevancy_method)
                }
                h2 { "Summary" }
                p {
                    "Verdict: "
                    span.verdict.(class_of(Some(r.global_score))) #verdict { (r.verdict) }
                    " (global score = mean of the non-zero metrics; ≥ 0.80 EXCELLENT, ≥ 0.60 ACCEPTABLE)"
                }
                @if r.scored == super::PerMetric::default() {
                    p.notes { "No metric could be scored: every judgement is missing, so the global score is not a measurement." }
                }
                table #summary {
                    tr { th { "metric" } th { "score" } th { "questions scored" } th { "judgements missing" } }
                    @for (name, value) in overall {
                        tr {
                            td { (name) }
                            td.score.(class_of(value)) data-metric=(name) { (fmt(value)) }
                            td { (scored(r, name)) }
                            td { (missing(r, name)) }
                        }
                    }
                }
                p.meta {
                    "Judge: " (r.judge.calls) " calls, " (r.judge.malformed_replies)
                    " malformed replies (each retried once), " (r.judge.missing) " judgements missing."
                }
                h2 { "By metric" }
                div.charts {
                    @for (name, value) in overall.iter().take(4) {
                        div.chart {
                            h3 { (name) }
                            (bars(&std::iter::once(("all".to_string(), *value)).chain(
                                categories.iter().map(|(c, s)| (c.clone(), metric_of(s, name)))
                            ).collect::<Vec<_>>()))
                        }
                    }
                }
                h2 { "By category" }
                table #categories {
                    tr {
                        th { "category" } th { "questions" }
                        @for m in METRICS { th { (m) } }
                        th { "global_score" }
                    }
                    @for (name, s) in &categories {
                        tr data-category=(name) {
                            td { (name) } td { (s.questions) }
                            @for m in METRICS {
                                td.score.(class_of(metric_of(s, m))) data-metric=(m) { (fmt(metric_of(s, m))) }
                            }
                            td.score.(class_of(Some(s.global()))) data-metric="global_score" { (fmt(Some(s.global()))) }
                        }
                    }
                }
                div.charts {
                    @for (name, s) in &categories {
                        div.chart {
                            h3 { (name) " (" (s.questions) ")" }
                            (bars(&METRICS.iter().map(|m| (m.to_string(), metric_of(s, m)))
                                .chain(std::iter::once(("global_score".to_string(), Some(s.global()))))
                                .collect::<Vec<_>>()))
                        }
                    }
                }
                @if !worst.is_empty() {
                    h2 { "Lowest scores" }
                    ol {
                        @for d in &worst {
                            li { a href=(format!("#q-{}", d.id)) { (d.id) } " " (fmt(Some(d.global_score))) " — " (d.question) }
                        }
                    }
                }
                h2 { "Questions" }
                table #questions {
                    tr {
                        th { "id" } th { "category" } th { "chunks" }
                        @for m in METRICS { th { (m) } }
                        th { "global" }
                    }
                    @for d in &r.details {
                        tr data-id=(d.id) {
                            td { a href=(format!("#q-{}", d.id)) { (d.id) } }
                            td { (d.category) }
                            td.score data-metric="n_chunks" { (d.n_chunks) }
                            @for m in METRICS {
                                td.score.(class_of(detail_metric(d, m))) data-metric=(m) {
                                    (cell(d, m))
                                }
                            }
                            td.score.(class_of(Some(d.global_score))) data-metric="global_score" { (fmt(Some(d.global_score))) }
                        }
                    }
                }
                @for d in &r.details {
                    details #(format!("q-{}", d.id)) {
                        summary { b { (d.id) } " [" (d.category) "] " (d.question) }
                        h4 { "Answer" }
                        pre.answer { (d.answer_or_preview()) }
                        h4 { "Ground truth" }
                        pre { (d.ground_truth) }
                        h4 { "Sources (" (d.n_chunks) ")" }
                        @if d.sources.is_empty() { p.none { "none retrieved" } }
                        ol {
                            @for s in &d.sources {
                                li {
                                    code { (s.file) }
                                    @if !s.section.is_empty() { " § " (s.section) }
                                    " (lines " (s.lines[0]) "–" (s.lines[1]) ", score " (format!("{:.4}", s.score)) ")"
                                }
                            }
                        }
                        p {
                            @for m in METRICS { (m) " " b { (cell(d, m)) } " · " }
                            "global " b { (fmt(Some(d.global_score))) }
                        }
                        @if !d.notes.is_empty() {
                            ul.notes { @for n in &d.notes { li { (n) } } }
                        }
                    }
                }
            }
        }
    };
    page.into_string()
}

impl QuestionDetail {
    fn answer_or_preview(&self) -> &str {
        if self.answer.is_empty() {
            &self.answer_preview
        } else {
            &self.answer
        }
    }
}

/// A score as shown: 4 decimals, `–` when there is none.
pub fn fmt(v: Option<f64>) -> String {
    v.map_or("–".to_string(), |v| format!("{v:.4}"))
}

fn cell(d: &QuestionDetail, metric: &str) -> String {
    if d.missing.iter().any(|m| m == metric) {
        "missing".into()
    } else {
        fmt(detail_metric(d, metric))
    }
}

fn class_of(v: Option<f64>) -> &'static str {
    match v {
        None => "none",
        Some(v) if v >= 0.80 => "good",
        Some(v) if v >= 0.60 => "fair",
        Some(_) => "poor",
    }
}

fn color(v: f64) -> &'static str {
    if v >= 0.80 {
        "#2f9e55"
    } else if v >= 0.60 {
        "#d9a21b"
    } else {
        "#d0483f"
    }
}

fn detail_metric(d: &QuestionDetail, m: &str) -> Option<f64> {
    match m {
        "faithfulness" => d.faithfulness,
        "answer_relevancy" => d.answer_relevancy,
        "context_recall" => d.context_recall,
        "context_precision" => d.context_precision,
        _ => Some(d.global_score),
    }
}

fn metric_of(s: &super::CategoryScores, m: &str) -> Option<f64> {
    match m {
        "faithfulness" => s.faithfulness,
        "answer_relevancy" => s.answer_relevancy,
        "context_recall" => s.context_recall,
        "context_precision" => s.context_precision,
        _ => Some(s.global()),
    }
}

fn scored(r: &EvalResponse, m: &str) -> String {
    match m {
        "faithfulness" => r.scored.faithfulness.to_string(),
        "answer_relevancy" => r.scored.answer_relevancy.to_string(),
        "context_recall" => r.scored.context_recall.to_string(),
        "context_precision" => r.scored.context_precision.to_string(),
        _ => String::new(),
    }
}

fn missing(r: &EvalResponse, m: &str) -> String {
    match m {
        "faithfulness" => r.missing_judgements.faithfulness.to_string(),
        "answer_relevancy" => r.missing_judgements.answer_relevancy.to_string(),
        "context_recall" => r.missing_judgements.context_recall.to_string(),
        "context_precision" => r.missing_judgements.context_precision.to_string(),
        _ => String::new(),
    }
}

/// A horizontal bar chart of 0–1 values, with the 0.60 and 0.80 lines.
fn bars(rows: &[(String, Option<f64>)]) -> Markup {
    const LABEL: f64 = 130.0;
    const BAR: f64 = 220.0;
    const ROW: f64 = 22.0;
    let width = LABEL + BAR + 60.0;
    let height = ROW * rows.len() as f64 + 8.0;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
            viewBox=(format!("0 0 {width} {height}")) role="img" {
            @for (i, (label, value)) in rows.iter().enumerate() {
                @let y = 4.0 + ROW * i as f64;
                text x=(LABEL - 6.0) y=(y + 14.0) text-anchor="end" font-size="12" fill="#1d2330" { (label) }
                rect x=(LABEL) y=(y + 2.0) width=(BAR) height=(ROW - 6.0) fill="#eef1f4" {}
                @if let Some(v) = value {
                    rect x=(LABEL) y=(y + 2.0) width=(BAR * v.clamp(0.0, 1.0)) height=(ROW - 6.0) fill=(color(*v)) {}
                }
                text x=(LABEL + BAR + 6.0) y=(y + 14.0) font-size="12" fill="#1d2330" { (fmt(*value)) }
            }
            @for t in [0.60, 0.80] {
                line x1=(LABEL + BAR * t) x2=(LABEL + BAR * t) y1="2" y2=(height - 2.0)
                    stroke="#56606e" stroke-dasharray="3 3" stroke-width="1" {}
            }
        }
    }
}

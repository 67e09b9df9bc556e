//! The table: throughput under each p99 bound, latencies against the baseline, and every
//! row against nginx's.

use super::*;

/// The highest ladder rate such that it and every lower step were reached with p99 ≤ bound.
pub(crate) fn max_rate(row: &Row, bound_ms: f64) -> Option<f64> {
    row.ladder
        .iter()
        .take_while(|s| s.reached() && s.p(0.99) <= bound_ms)
        .last()
        .map(|s| s.offered)
}

pub(crate) fn added(target: f64, base: Option<f64>) -> String {
    match base {
        Some(b) => format!("{:.2}", target - b),
        None => format!("{target:.2}"),
    }
}

/// "added p50 / p99" at a fixed rate, or why there is none.
pub(crate) fn latency_cell(step: &Step, base: Option<&Step>, is_base: bool, ttft: bool) -> String {
    let (p50, p99) = if ttft {
        (step.ttft(0.5), step.ttft(0.99))
    } else {
        (step.p(0.5), step.p(0.99))
    };
    if !step.reached() {
        return format!(
            "unreachable ({:.0} req/s achieved, {} failed)",
            step.achieved,
            step.errors + step.shed
        );
    }
    if is_base {
        return format!("({p50:.2} / {p99:.2})");
    }
    let base_of = |q: f64| {
        base.filter(|b| b.reached())
            .map(|b| if ttft { b.ttft(q) } else { b.p(q) })
    };
    format!(
        "{} / {}",
        added(p50, base_of(0.5)),
        added(p99, base_of(0.99))
    )
}

/// A throughput this far below the direct upstream's at least is the target's own: closer,
/// and the load side (client and upstream on their core) may be what stopped it.
pub(crate) const LOAD_BOUND: f64 = 1.25;

/// Every row against nginx's: throughput as a ratio, p50 and p99 at each fixed rate as
/// differences. A closed-loop figure within `LOAD_BOUND` of the direct upstream's is the
/// load side's ceiling, not the target's: nginx's is then a lower bound (≥, and every
/// ratio to it an upper bound, ≤), another row's gets no ratio ("load-bound").
pub(crate) fn print_against_nginx(rows: &[Row], knobs: &Knobs, closed_heads: &[String]) {
    let Some(floor) = rows.iter().find(|r| r.name == "nginx") else {
        println!();
        println!("No nginx row (BENCH_TARGETS): no ratios against it.");
        return;
    };
    let direct = rows.iter().find(|r| r.name == "direct upstream");
    let closed_of = |row: &Row| -> Vec<Option<f64>> {
        std::iter::once(&row.closed)
            .chain(&row.streams)
            .map(Closed::clean_rate)
            .collect()
    };
    let direct_closed = direct.map(closed_of);
    // Per column: whether a figure is clear of the load side's ceiling.
    let clear = |i: usize, v: f64| -> Option<bool> {
        let d = direct_closed.as_ref()?.get(i).copied().flatten()?;
        Some(d >= LOAD_BOUND * v)
    };
    let bound = knobs.bounds_ms.iter().cloned().fold(0.0, f64::max);
    // The ladder's top step met, as a number ("≥" is said in the cell).
    let ladder = |row: &Row| -> (Option<f64>, bool) {
        let ceiling = row
            .ladder
            .last()
            .is_some_and(|s| s.reached() && s.p(0.99) <= bound);
        (max_rate(row, bound), ceiling)
    };
    let diff = |step: &Step, base: &Step| -> String {
        if !step.reached() {
            return format!("unreachable ({:.0} req/s achieved)", step.achieved);
        }
        if !base.reached() {
            return format!(
                "({:.2} / {:.2}; nginx's unreachable)",
                step.p(0.5),
                step.p(0.99)
            );
        }
        format!(
            "{:+.2} / {:+.2}",
            step.p(0.5) - base.p(0.5),
            step.p(0.99) - base.p(0.99)
        )
    };
    println!();
    println!(
        "Against nginx: throughput and its ratio to nginx's (×); p50 / p99 latency minus nginx's at the same rate, ms (nginx row: its own, in brackets). \
         Closed-loop columns: whole answers per second with c clients, each sending its next request when its answer is complete ({} s counted each; load: {}). \
         A closed-loop figure that the direct upstream's does not beat by {LOAD_BOUND}× is the load side's ceiling: nginx's is then a lower bound (≥, its ratios upper bounds, ≤), another row's has no ratio (load-bound). \
         The ladder column is the open-loop \"max req/s @ p99 ≤ {bound} ms\" above.",
        knobs.secs,
        knobs.oha.as_ref().map_or("the bench's own client".to_string(), |p| format!("oha ({})", p.display())),
    );
    println!();
    let rate_heads: Vec<String> = knobs
        .rates
        .iter()
        .map(|r| format!("p50 / p99 − nginx's @ {} req/s", thousands(*r)))
        .collect();
    println!(
        "| target | {} | max req/s @ p99 ≤ {bound} ms (ladder) | {} |",
        closed_heads.join(" | "),
        rate_heads.join(" | ")
    );
    println!(
        "|---|{}---:|{}",
        "---:|".repeat(closed_heads.len()),
        "---:|".repeat(rate_heads.len())
    );
    let floor_closed = closed_of(floor);
    // nginx still meeting the ladder's top step: its rate is a lower bound, ratios to it
    // upper bounds.
    let (floor_ladder, floor_at_top) = ladder(floor);
    for row in rows {
        let closed: Vec<String> = closed_of(row)
            .into_iter()
            .zip(&floor_closed)
            .enumerate()
            .map(|(i, (v, base))| {
                let Some(v) = v else {
                    return "failures".to_string();
                };
                let floor_is_bound = base.is_some_and(|b| clear(i, b) == Some(false));
                if row.name == floor.name {
                    return if floor_is_bound {
                        format!("≥ {}", thousands(v))
                    } else {
                        thousands(v)
                    };
                }
                if row.name == "direct upstream" {
                    return thousands(v);
                }
                match (clear(i, v), base) {
                    (Some(false), _) => format!("{} (load-bound)", thousands(v)),
                    (_, Some(b)) if floor_is_bound => {
                        format!("{} (≤ {:.2}×)", thousands(v), v / b)
                    }
                    (_, Some(b)) => format!("{} ({:.2}×)", thousands(v), v / b),
                    (_, None) => thousands(v),
                }
            })
            .collect();
        let (max, ceiling) = ladder(row);
        let ladder_cell = match (max, floor_ladder) {
            (Some(v), Some(b)) => format!(
                "{}{} ({}{:.2}×)",
                if ceiling { "≥ " } else { "" },
                thousands(v),
                if floor_at_top && row.name != floor.name {
                    "≤ "
                } else {
                    ""
                },
                v / b
            ),
            (Some(v), None) => format!("{}{}", if ceiling { "≥ " } else { "" }, thousands(v)),
            (None, _) => "none".to_string(),
        };
        let fixed: Vec<String> = row
            .fixed
            .iter()
            .zip(&floor.fixed)
            .map(|(step, base)| {
                if row.name == floor.name {
                    format!("({:.2} / {:.2})", step.p(0.5), step.p(0.99))
                } else {
                    diff(step, base)
                }
            })
            .collect();
        println!(
            "| {} | {} | {} | {} |",
            row.name,
            closed.join(" | "),
            ladder_cell,
            fixed.join(" | ")
        );
    }
}

pub(crate) fn mem_total_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0)
}

/// A process's CPU time so far (user + system, all threads), in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name (in parentheses, which may hold spaces): fields 3 on.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
pub(crate) fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Each traced row against the same target untraced, in the same run: throughput as a
/// ratio (1.00× = no loss), p50 at a fixed rate as a difference, and what was exported.
pub(crate) fn print_tracing_cost(
    rows: &[Row],
    knobs: &Knobs,
    closed_heads: &[String],
    exported: &[(String, u64, u64)],
) {
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter_map(|traced| {
            let base = traced.name.strip_suffix(", traced")?;
            Some((rows.iter().find(|r| r.name == base)?, traced))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    let bound = knobs.bounds_ms.iter().cloned().fold(0.0, f64::max);
    let ratio = |traced: Option<f64>, base: Option<f64>| match (traced, base) {
        (Some(t), Some(b)) => format!("{} vs {} ({:.3}×)", thousands(t), thousands(b), t / b),
        _ => "failures".to_string(),
    };
    println!();
    println!(
        "Tracing on against off, same run: throughput traced vs untraced (ratio; 1.000× = no loss), p50 traced minus untraced at a fixed rate (ms).          Spans exported over OTLP/HTTP to a receiver in the load process."
    );
    println!();
    println!(
        "| target | {} | max req/s @ p99 ≤ {bound} ms | {} | target CPU ms per 1,000 answers @ {} req/s | exports (bytes) |",
        closed_heads.join(" | "),
        knobs
            .rates
            .iter()
            .map(|r| format!("p50 traced − untraced @ {} req/s", thousands(*r)))
            .collect::<Vec<_>>()
            .join(" | "),
        knobs.rates.last().map_or("-".to_string(), |r| thousands(*r)),
    );
    println!(
        "|---|{}---:|---:|---:|---:|",
        "---:|".repeat(closed_heads.len() + knobs.rates.len())
    );
    let p50_diff = |t: &Step, b: &Step| {
        if t.reached() && b.reached() {
            format!("{:+.2}", t.p(0.5) - b.p(0.5))
        } else {
            "unreachable".to_string()
        }
    };
    for (base, traced) in pairs {
        let closed: Vec<String> = std::iter::once((&traced.closed, &base.closed))
            .chain(traced.streams.iter().zip(&base.streams))
            .map(|(t, b)| ratio(t.clean_rate(), b.clean_rate()))
            .collect();
        let sent = exported
            .iter()
            .find(|(name, _, _)| {
                name.strip_suffix("-traced")
                    .is_some_and(|base| traced.name.contains(base))
            })
            .map_or("-".to_string(), |(_, e, b)| {
                format!("{e} ({})", thousands(*b as f64))
            });
        let cpu = match (traced.cpu_ms_per_1000, base.cpu_ms_per_1000) {
            (Some(t), Some(b)) => format!("{t:.0} vs {b:.0} ({:+.1} %)", (t / b - 1.0) * 100.0),
            _ => "-".to_string(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            base.name,
            closed.join(" | "),
            ratio(max_rate(traced, bound), max_rate(base, bound)),
            traced
                .fixed
                .iter()
                .zip(&base.fixed)
                .map(|(t, b)| p50_diff(t, b))
                .collect::<Vec<_>>()
                .join(" | "),
            cpu,
            sent,
        );
    }
}

/// The gateway's time in each pipeline stage so far (`assist_pipeline_stage_seconds_sum`
/// from its `/metrics`), in seconds; empty for other targets or when it does not answer.
pub(crate) async fn stage_seconds(client: &reqwest::Client, server: &Server) -> Vec<(String, f64)> {
    let Server::Gateway(g) = server else {
        return Vec::new();
    };
    let Ok(text) = async {
        client
            .get(format!("{}/metrics", g.url))
            .send()
            .await?
            .text()
            .await
    }
    .await
    else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("assist_pipeline_stage_seconds_sum{")?;
            let (labels, value) = rest.split_once("} ")?;
            let stage = labels
                .split(',')
                .find_map(|l| l.strip_prefix("stage=\""))?
                .trim_end_matches('"');
            Some((stage.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Each stage's milliseconds per 1,000 answers between two `stage_seconds` readings.
pub(crate) fn per_1000_answers(
    before: &[(String, f64)],
    after: &[(String, f64)],
    answers: usize,
) -> Vec<(String, f64)> {
    if answers == 0 {
        return Vec::new();
    }
    after
        .iter()
        .map(|(stage, total)| {
            let was = before
                .iter()
                .find(|(s, _)| s == stage)
                .map_or(0.0, |(_, v)| *v);
            (stage.clone(), (total - was) * 1e6 / answers as f64)
        })
        .collect()
}

/// Where a gateway answer's time goes at 1,000 req/s: each pipeline stage's wall time
/// beside the target's CPU time per answer. A stage's wall time is at least the CPU it
/// spent (it may also have waited), so its share is an upper bound on what that stage
/// costs the row.
pub(crate) fn print_stages(rows: &[Row]) {
    let rows: Vec<&Row> = rows.iter().filter(|r| !r.stages.is_empty()).collect();
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "Pipeline stages at 1,000 req/s: wall ms per 1,000 answers (assist_pipeline_stage_seconds), and as a share of the target's CPU ms per 1,000 answers. \
         Wall time includes waits, so each share is an upper bound on the stage's CPU."
    );
    println!();
    println!("| target | stage | wall ms per 1,000 answers | of the target's CPU |");
    println!("|---|---|---:|---:|");
    for row in rows {
        for (stage, ms) in &row.stages {
            let share = row
                .cpu_ms_per_1000
                .map_or("-".to_string(), |cpu| format!("{:.1} %", ms / cpu * 100.0));
            println!("| {} | {stage} | {ms:.1} | {share} |", row.name);
        }
        if let Some(cpu) = row.cpu_ms_per_1000 {
            println!("| {} | (all, CPU) | {cpu:.0} | 100 % |", row.name);
        }
    }
}

//! The table: throughput under each p99 bound, latencies against the baseline, and every
//! row against nginx's.

use super::*;

/// 16840.4 → "16,840".
pub(crate) fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    let digits = (v.round() as u64).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

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

/// Every row against nginx's: throughput as a ratio, p50 at a fixed rate as a difference.
pub(crate) fn print_against_nginx(rows: &[Row], knobs: &Knobs, closed_heads: &[String]) {
    let Some(floor) = rows.iter().find(|r| r.name == "nginx") else {
        println!();
        println!("No nginx row (BENCH_TARGETS): no ratios against it.");
        return;
    };
    let bound = knobs.bounds_ms.iter().cloned().fold(0.0, f64::max);
    let ratio = |v: Option<f64>, base: Option<f64>| match (v, base) {
        (Some(v), Some(b)) => format!("{} ({:.2}×)", thousands(v), v / b),
        (Some(v), None) => thousands(v),
        (None, _) => "failures".to_string(),
    };
    // The ladder's top step met, as a number ("≥" is said in the cell).
    let ladder = |row: &Row| -> (Option<f64>, bool) {
        let ceiling = row
            .ladder
            .last()
            .is_some_and(|s| s.reached() && s.p(0.99) <= bound);
        (max_rate(row, bound), ceiling)
    };
    let p50_diff = |step: &Step, base: &Step| -> String {
        if !step.reached() {
            return format!("unreachable ({:.0} req/s achieved)", step.achieved);
        }
        if !base.reached() {
            return format!("({:.2}; nginx's unreachable)", step.p(0.5));
        }
        format!("{:+.2}", step.p(0.5) - base.p(0.5))
    };
    println!();
    println!(
        "Against nginx: throughput and its ratio to nginx's (×); p50 latency minus nginx's at the same rate, ms (nginx row: its own p50, in brackets). \
         Closed-loop columns: whole answers per second with c clients, each sending its next request when its answer is complete ({} s counted each). \
         The ladder column is the open-loop \"max req/s @ p99 ≤ {bound} ms\" above.",
        knobs.secs
    );
    println!();
    println!(
        "| target | {} | max req/s @ p99 ≤ {bound} ms (ladder) | p50 − nginx's @ 100 req/s | p50 − nginx's @ 1,000 req/s |",
        closed_heads.join(" | ")
    );
    println!("|---|{}---:|---:|---:|", "---:|".repeat(closed_heads.len()));
    let floor_closed: Vec<Option<f64>> = std::iter::once(&floor.closed)
        .chain(&floor.streams)
        .map(Closed::clean_rate)
        .collect();
    let (floor_ladder, _) = ladder(floor);
    for row in rows {
        let closed: Vec<String> = std::iter::once(&row.closed)
            .chain(&row.streams)
            .zip(&floor_closed)
            .map(|(c, base)| ratio(c.clean_rate(), *base))
            .collect();
        let (max, ceiling) = ladder(row);
        let ladder_cell = match max {
            Some(_) => format!(
                "{}{}",
                if ceiling { "≥ " } else { "" },
                ratio(max, floor_ladder)
            ),
            None => "none".to_string(),
        };
        let (at100, at1000) = if row.name == floor.name {
            (
                format!("({:.2})", row.at100.p(0.5)),
                format!("({:.2})", row.at1000.p(0.5)),
            )
        } else {
            (
                p50_diff(&row.at100, &floor.at100),
                p50_diff(&row.at1000, &floor.at1000),
            )
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            row.name,
            closed.join(" | "),
            ladder_cell,
            at100,
            at1000
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

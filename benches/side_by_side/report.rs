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
/// and the load side (client and upstream on their core) may be what stopped it. The
/// check when the target's CPU time is not known.
pub(crate) const LOAD_BOUND: f64 = 1.25;

/// A target whose CPU time over a closed-loop run was at least this share of the CPUs it
/// may use (one when pinned) was at its ceiling; below it, something else (the load side, or too few clients for
/// the latency) set the rate.
pub(crate) const SATURATED: f64 = 0.9;

/// The closed-loop runs of a row, in the columns' order.
fn closed_runs(row: &Row) -> Vec<&Closed> {
    std::iter::once(&row.closed).chain(&row.streams).collect()
}

/// Whether each closed-loop figure of `row` is the target's own ceiling: its core was
/// busy (`SATURATED`); without a CPU reading, whether the direct upstream beat it by
/// `LOAD_BOUND`. None where there is no figure to judge.
fn ceilings(row: &Row, direct: Option<&Row>) -> Vec<Option<bool>> {
    closed_runs(row)
        .into_iter()
        .enumerate()
        .map(|(i, run)| {
            let v = run.clean_rate()?;
            if let Some(busy) = run.busy() {
                return Some(busy >= SATURATED);
            }
            let d = closed_runs(direct?).get(i)?.clean_rate()?;
            Some(d >= LOAD_BOUND * v)
        })
        .collect()
}

/// Per closed-loop column: whether `row`'s figure is known to be below its ceiling.
fn below_ceiling(row: &Row, direct: Option<&Row>) -> Vec<bool> {
    ceilings(row, direct)
        .into_iter()
        .map(|c| c == Some(false))
        .collect()
}

/// Every row against nginx's: throughput as a ratio, p50 and p99 at each fixed rate as
/// differences. A closed-loop figure is the target's ceiling only when its core was busy
/// (`ceilings`): nginx's is otherwise a lower bound (≥, and every ratio to it an upper
/// bound, ≤), another row's gets no ratio ("load-bound").
pub(crate) fn print_against_nginx(rows: &[Row], knobs: &Knobs, closed_heads: &[String]) {
    let Some(floor) = rows.iter().find(|r| r.name == "nginx") else {
        println!();
        println!("No nginx row (BENCH_TARGETS): no ratios against it.");
        return;
    };
    let direct = rows.iter().find(|r| r.name == "direct upstream");
    let closed_of = |row: &Row| -> Vec<Option<f64>> {
        closed_runs(row)
            .into_iter()
            .map(Closed::clean_rate)
            .collect()
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
         A closed-loop figure is the target's ceiling only when its CPU time over the run filled at least {SATURATED} of its CPUs (one when pinned; without a CPU reading: when the direct upstream's beats it by {LOAD_BOUND}×); otherwise nginx's is a lower bound (≥, its ratios upper bounds, ≤), another row's has no ratio (load-bound). \
         The ladder column is the open-loop \"max req/s @ p99 ≤ {bound} ms\" above. \
         The last column is what the rest of the machine did during the fixed-rate runs, as shares of all its CPUs: processes other than the bench and the target, and time the hypervisor gave to other machines (steal); either makes the latencies noisy.",
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
        "| target | {} | max req/s @ p99 ≤ {bound} ms (ladder) | {} | rest of the machine @ those rates: other processes / steal |",
        closed_heads.join(" | "),
        rate_heads.join(" | ")
    );
    println!(
        "|---|{}---:|{}---:|",
        "---:|".repeat(closed_heads.len()),
        "---:|".repeat(rate_heads.len())
    );
    let floor_closed = closed_of(floor);
    let floor_below = below_ceiling(floor, direct);
    // nginx still meeting the ladder's top step: its rate is a lower bound, ratios to it
    // upper bounds.
    let (floor_ladder, floor_at_top) = ladder(floor);
    for row in rows {
        let row_below = below_ceiling(row, direct);
        let closed: Vec<String> = closed_of(row)
            .into_iter()
            .zip(&floor_closed)
            .enumerate()
            .map(|(i, (v, base))| {
                let Some(v) = v else {
                    return "failures".to_string();
                };
                let floor_is_bound = base.is_some() && floor_below[i];
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
                match (row_below[i], base) {
                    (true, _) => format!("{} (load-bound)", thousands(v)),
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
        let elsewhere = row.elsewhere.map_or("–".to_string(), |e| {
            format!("{:.0} % / {:.0} %", e.others * 100.0, e.steal * 100.0)
        });
        println!(
            "| {} | {} | {} | {} | {} |",
            row.name,
            closed.join(" | "),
            ladder_cell,
            fixed.join(" | "),
            elsewhere
        );
    }
}

/// The targets' CPU time per answer in each closed-loop run, and nginx's over each row's:
/// how many answers one core serves for the row against nginx, a ratio that needs no load
/// side faster than nginx. Where nginx's throughput is load-bound it works below its
/// ceiling, where an event-driven server's answer costs at least as much as at the
/// ceiling (fewer events handled per wake-up), so the ratios to it are upper bounds (≤).
pub(crate) fn print_cpu_per_answer(rows: &[Row], closed_heads: &[String]) {
    let closed_of = |row: &Row| -> Vec<Option<(CpuPerAnswer, f64)>> {
        closed_runs(row)
            .into_iter()
            .map(|c| c.cpu.zip(c.busy()).filter(|_| c.clean_rate().is_some()))
            .collect()
    };
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| closed_of(r).iter().any(Option::is_some))
        .collect();
    if measured.is_empty() {
        return;
    }
    let floor = rows.iter().find(|r| r.name == "nginx");
    let floor_cpu = floor.map(closed_of);
    let direct = rows.iter().find(|r| r.name == "direct upstream");
    let floor_below = floor.map(|f| below_ceiling(f, direct));
    println!();
    println!(
        "CPU time per answer in the closed loops: the target's own (user + system, as the kernel's clock ticks count them, every thread and worker process, over the whole run), µs, and how much of its CPUs that filled at its rate; \
         for other rows, nginx's over the row's (×): how many answers one core serves against nginx, which needs no load side faster than nginx. \
         Where nginx's throughput above is a lower bound (≥), it ran below its ceiling, where an answer costs it at least as much: the ratio is then an upper bound (≤). A row below its own ceiling gets no ratio."
    );
    println!();
    println!("| target | {} |", closed_heads.join(" | "));
    println!("|---|{}", "---:|".repeat(closed_heads.len()));
    for row in measured {
        let row_below = below_ceiling(row, direct);
        let cells: Vec<String> = closed_of(row)
            .into_iter()
            .enumerate()
            .map(|(i, cpu)| {
                let Some((cpu, busy)) = cpu else {
                    return "–".to_string();
                };
                let own = format!(
                    "{:.0} ({:.0} + {:.0}), {:.0} % busy",
                    cpu.total_us(),
                    cpu.user_us,
                    cpu.system_us,
                    busy * 100.0
                );
                let base = floor_cpu.as_ref().and_then(|f| f.get(i).copied().flatten());
                let (Some((base, _)), false) = (base, row.name == "nginx") else {
                    return own;
                };
                // A row below its own ceiling has a CPU time per answer above it: its
                // ratio is no bound either way.
                if row_below[i] {
                    return format!("{own}, below its ceiling");
                }
                let floor_is_bound = floor_below.as_ref().is_some_and(|b| b[i]);
                format!(
                    "{own}, {}{:.2}×",
                    if floor_is_bound { "≤ " } else { "" },
                    base.total_us() / cpu.total_us()
                )
            })
            .collect();
        println!("| {} | {} |", row.name, cells.join(" | "));
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

/// CPU time so far of a process and its live descendants (every thread of each, including
/// threads that ended; not processes that ended), in clock ticks: (user, system).
pub(crate) fn cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    let mut total = None;
    for p in process_tree(pid) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // After the command's name (in parentheses, which may hold spaces): fields 3 on.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
        if let (Some(user), Some(system)) = (tick(11), tick(12)) {
            let (u, s) = total.unwrap_or((0, 0));
            total = Some((u + user, s + system));
        }
    }
    total
}

/// The whole machine's CPU time so far, in clock ticks, from `/proc/stat`'s first line:
/// (busy, stolen by the hypervisor for other machines, all).
fn machine_ticks() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    // Busy is what processes are charged with (user, nice, system), as a process's own
    // ticks are: interrupt time is charged to none, so the bench's own would count as
    // another's.
    let field = |i: usize| v.get(i).copied().unwrap_or(0);
    let busy = field(0) + field(1) + field(2);
    let steal = field(7);
    let all = (0..8).map(field).sum();
    Some((busy, steal, all))
}

/// What the rest of the machine was doing while a target was measured: the share of all
/// its CPUs that processes other than this bench and its children (the target) kept busy,
/// and the share the hypervisor gave to other machines (steal). The latency columns'
/// noise on a shared machine comes from these.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Elsewhere {
    pub(crate) others: f64,
    pub(crate) steal: f64,
}

/// A reading to measure `Elsewhere` from.
pub(crate) struct MachineReading {
    machine: (u64, u64, u64),
    ours: (u64, u64),
}

impl MachineReading {
    pub(crate) fn now() -> Option<Self> {
        Some(Self {
            machine: machine_ticks()?,
            ours: cpu_ticks(std::process::id())?,
        })
    }

    /// What the rest of the machine did from this reading to `later`.
    pub(crate) fn until(&self, later: &Self) -> Option<Elsewhere> {
        let all = later.machine.2.checked_sub(self.machine.2)? as f64;
        if all <= 0.0 {
            return None;
        }
        let busy = later.machine.0.saturating_sub(self.machine.0);
        let ours = (later.ours.0 + later.ours.1).saturating_sub(self.ours.0 + self.ours.1);
        Some(Elsewhere {
            others: busy.saturating_sub(ours) as f64 / all,
            steal: later.machine.1.saturating_sub(self.machine.1) as f64 / all,
        })
    }
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

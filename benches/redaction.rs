//! Secret redaction on ordinary code: how often it fires where there is no secret (false
//! positives per 10,000 lines of a real library), and what it costs on a 100 KB editor
//! context.
//!
//! ```sh
//! cargo bench --bench redaction                      # /usr/lib/python3.11 (Debian's libpython3.11-stdlib)
//! REDACTION_CORPUS=/path/to/src cargo bench --bench redaction
//! ```
//!
//! The default corpus is Python's standard library as Debian ships it (the
//! libpython3.11-stdlib package), its own tests left out (they hold deliberate fake
//! credentials). Every finding is listed by kind and place (never its text), to be read:
//! a finding there is a false positive unless the file really holds a credential.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use assist_gateway::privacy::Privacy;

fn files(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "test" | "tests" | "idle_test" | "__pycache__"
            ) {
                files(&path, out);
            }
        } else if [
            ".py", ".rs", ".c", ".h", ".js", ".ts", ".go", ".md", ".toml", ".json",
        ]
        .iter()
        .any(|e| name.ends_with(e))
        {
            out.push(path);
        }
    }
}

fn main() {
    let root = std::env::var("REDACTION_CORPUS").unwrap_or_else(|_| "/usr/lib/python3.11".into());
    let privacy = Privacy::new(true, None, &[]).unwrap();
    let mut paths = Vec::new();
    files(Path::new(&root), &mut paths);
    let (mut lines, mut bytes, mut found) = (0usize, 0usize, Vec::new());
    let started = Instant::now();
    for path in &paths {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        lines += text.lines().count();
        bytes += text.len();
        for (n, line) in text.lines().enumerate() {
            let mut line = line.to_string();
            let cleaned = privacy.clean(&mut line);
            for (kind, k) in cleaned.secrets {
                found.push((
                    path.strip_prefix(&root)
                        .unwrap_or(path)
                        .display()
                        .to_string(),
                    n + 1,
                    kind,
                    k,
                ));
            }
        }
    }
    let line_by_line = started.elapsed();
    let total: usize = found.iter().map(|f| f.3).sum();
    println!(
        "corpus: {root}: {} files, {lines} lines, {:.1} MB",
        paths.len(),
        bytes as f64 / 1e6
    );
    println!(
        "redactions: {total} ({:.2} per 10,000 lines), line by line in {:.1} s",
        total as f64 * 10_000.0 / lines.max(1) as f64,
        line_by_line.as_secs_f64()
    );
    for (file, line, kind, k) in &found {
        println!("  {file}:{line}: {kind} ×{k}");
    }
    // A 100 KB editor context: the corpus's first 100 KB of code, as one text.
    let mut context = String::new();
    for path in &paths {
        if context.len() >= 100 * 1024 {
            break;
        }
        context.push_str(&std::fs::read_to_string(path).unwrap_or_default());
    }
    context.truncate(
        (0..=100 * 1024)
            .rev()
            .find(|i| context.is_char_boundary(*i))
            .unwrap(),
    );
    let runs = 50;
    let started = Instant::now();
    for _ in 0..runs {
        let mut text = context.clone();
        std::hint::black_box(privacy.clean(&mut text));
    }
    let per = started.elapsed() / runs;
    // The same text with one planted secret per 10 KB: the cost of replacing.
    let mut planted = String::new();
    for (i, piece) in context.as_bytes().chunks(10 * 1024).enumerate() {
        planted.push_str(&String::from_utf8_lossy(piece));
        planted.push_str(&format!(
            "\nAWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPL{i:03}\n"
        ));
    }
    let started = Instant::now();
    for _ in 0..runs {
        let mut text = planted.clone();
        std::hint::black_box(privacy.clean(&mut text));
    }
    let per_planted = started.elapsed() / runs;
    println!();
    println!("| 100 KB editor context | ms per context | MB/s |");
    println!("|---|---:|---:|");
    for (name, took) in [("ordinary code", per), ("a secret per 10 KB", per_planted)] {
        println!(
            "| {name} | {:.2} | {:.0} |",
            took.as_secs_f64() * 1e3,
            0.1024 / took.as_secs_f64()
        );
    }
}

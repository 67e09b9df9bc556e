//! Where an ingest's progress goes: a terminal bar (the CLI), nothing, or a tracker the
//! serving gateway reads for `GET /v1/knowledge` (files done of all, chunks, their rate,
//! the time left).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Told the number of files to process, then each file as it is done.
pub trait Progress: Send + Sync {
    fn start(&self, files: u64);
    fn advance(&self, files: u64, chunks: u64);
    fn finish(&self);
    /// Whether the run should stop at its next batch (what it committed is kept).
    fn stopped(&self) -> bool {
        false
    }
}

/// No progress output.
pub struct Quiet;

impl Progress for Quiet {
    fn start(&self, _: u64) {}
    fn advance(&self, _: u64, _: u64) {}
    fn finish(&self) {}
}

/// A run's progress as counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Files to process (changed, new or deleted), known once the walk is done.
    pub files_total: u64,
    pub files_done: u64,
    pub chunks_done: u64,
    pub elapsed_secs: f64,
    pub chunks_per_sec: f64,
    /// Time left at the rate so far (`None` until a file is done).
    pub eta_secs: Option<f64>,
}

impl Snapshot {
    /// The time left for `left` files at `done` files in `elapsed` seconds.
    fn eta(done: u64, left: u64, elapsed: f64) -> Option<f64> {
        (done > 0).then(|| left as f64 * elapsed / done as f64)
    }
}

/// Counts a run's progress for others to read (the gateway's status).
pub struct Tracker {
    files_total: AtomicU64,
    files_done: AtomicU64,
    chunks_done: AtomicU64,
    started: Instant,
    /// Set when the run is to stop at its next batch.
    stop: Arc<AtomicBool>,
}

impl Default for Tracker {
    fn default() -> Self {
        Self::stoppable(Arc::default())
    }
}

impl Tracker {
    /// A tracker whose run stops at its next batch once `stop` is set.
    pub fn stoppable(stop: Arc<AtomicBool>) -> Self {
        Self {
            files_total: AtomicU64::new(0),
            files_done: AtomicU64::new(0),
            chunks_done: AtomicU64::new(0),
            started: Instant::now(),
            stop,
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let files_total = self.files_total.load(Ordering::Relaxed);
        let files_done = self.files_done.load(Ordering::Relaxed);
        let chunks_done = self.chunks_done.load(Ordering::Relaxed);
        let elapsed = self.started.elapsed().as_secs_f64();
        Snapshot {
            files_total,
            files_done,
            chunks_done,
            elapsed_secs: elapsed,
            chunks_per_sec: chunks_done as f64 / elapsed.max(1e-3),
            eta_secs: Snapshot::eta(files_done, files_total.saturating_sub(files_done), elapsed),
        }
    }
}

impl Progress for Tracker {
    fn start(&self, files: u64) {
        self.files_total.store(files, Ordering::Relaxed);
    }

    fn advance(&self, files: u64, chunks: u64) {
        self.files_done.fetch_add(files, Ordering::Relaxed);
        self.chunks_done.fetch_add(chunks, Ordering::Relaxed);
    }

    fn finish(&self) {}

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A progress bar on the terminal: files done of total, chunks, rate and ETA.
pub struct Bar {
    bar: indicatif::ProgressBar,
    chunks: AtomicU64,
    started: Instant,
    shown: std::sync::atomic::AtomicBool,
}

impl Bar {
    pub fn new() -> Self {
        Self {
            bar: indicatif::ProgressBar::hidden(),
            chunks: Default::default(),
            started: Instant::now(),
            shown: Default::default(),
        }
    }

    /// Shows a run counted elsewhere (the serving gateway's, read from its status).
    pub fn show(&self, s: &Snapshot) {
        if s.files_total > 0 && !self.shown.swap(true, Ordering::Relaxed) {
            self.start(s.files_total);
        }
        self.bar.set_length(s.files_total);
        self.bar.set_position(s.files_done);
        self.bar.set_message(format!(
            "{} chunks, {:.0} chunks/s",
            s.chunks_done, s.chunks_per_sec
        ));
    }
}

impl Default for Bar {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for Bar {
    fn start(&self, files: u64) {
        self.bar.set_length(files);
        self.bar
            .set_draw_target(indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} files ({per_sec}, eta {eta}) {msg}",
        ) {
            self.bar.set_style(style);
        }
    }

    fn advance(&self, files: u64, chunks: u64) {
        let total = self.chunks.fetch_add(chunks, Ordering::Relaxed) + chunks;
        let rate = total as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        self.bar
            .set_message(format!("{total} chunks, {rate:.0} chunks/s"));
        self.bar.inc(files);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_follows_the_rate_so_far() {
        assert_eq!(Snapshot::eta(0, 10, 5.0), None);
        assert_eq!(Snapshot::eta(5, 15, 10.0), Some(30.0));
        let t = Tracker::default();
        t.start(4);
        t.advance(1, 7);
        let s = t.snapshot();
        assert_eq!((s.files_total, s.files_done, s.chunks_done), (4, 1, 7));
        assert!(s.eta_secs.is_some_and(|eta| eta >= 0.0));
    }
}

//! `ingest` beside a serving gateway: the gateway owns the index (`live`), so the work is
//! handed to it over its control socket (`data_dir/index/control/gateway.sock`, the gateway
//! user's only), followed to its end with the same progress, and the run's summary
//! returned when the change is live.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use super::layout::IndexRoot;
use super::progress::{Progress, Snapshot};
use super::Summary;

/// How often the refresh is asked after.
const POLL: Duration = Duration::from_millis(200);
/// How long a locked index's socket is waited for before the lock is taken for another
/// `ingest`'s.
const SOCKET_WAIT: Duration = Duration::from_secs(3);
/// Longest wait for one answer of the gateway's (they are all immediate).
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// Largest answer read off the socket.
const MAX_ANSWER: usize = 4 << 20;

#[derive(Deserialize)]
struct Queued {
    id: u64,
}

#[derive(Deserialize)]
struct Followed {
    state: String,
    progress: Option<Snapshot>,
    summary: Option<Summary>,
    error: Option<String>,
}

/// Hands `paths` to the gateway that holds the index under `root`, and waits for it.
pub async fn hand_off(
    root: &IndexRoot,
    paths: &[PathBuf],
    rebuild: bool,
    progress: &dyn Progress,
) -> anyhow::Result<Summary> {
    let socket = root.socket();
    let absolute: Vec<String> = paths
        .iter()
        .map(|p| {
            std::path::absolute(p)
                .with_context(|| format!("cannot resolve {}", p.display()))
                .map(|p| p.display().to_string())
        })
        .collect::<anyhow::Result<_>>()?;
    for p in paths {
        if !p.exists() && super::git::GitSource::parse(p).is_none() {
            bail!("{} does not exist", p.display());
        }
    }
    let body = serde_json::to_vec(&serde_json::json!({"paths": absolute, "rebuild": rebuild}))?;
    // A gateway that has just started opens its socket a moment after it takes the lock.
    // Only connecting is tried again: a request that was sent may have been queued.
    let started = std::time::Instant::now();
    let stream = loop {
        match tokio::net::UnixStream::connect(&socket).await {
            Ok(stream) => break stream,
            Err(_) if started.elapsed() < SOCKET_WAIT => tokio::time::sleep(POLL).await,
            Err(e) => {
                // Nobody answers: the lock is another `ingest`'s, which says so.
                let locked = root.exclusive().err().unwrap_or_else(|| {
                    anyhow!("the index was locked a moment ago and is free now: run ingest again")
                });
                return Err(
                    locked.context(format!("no gateway answers on {} ({e})", socket.display()))
                );
            }
        }
    };
    let (status, answer) = call_on(stream, Method::POST, "/v1/knowledge/refresh", body)
        .await
        .context("handing the ingest to the serving gateway")?;
    if status != StatusCode::ACCEPTED {
        bail!(
            "the serving gateway refused the ingest: {}",
            message(&answer)
        );
    }
    let Queued { id } = serde_json::from_slice(&answer).context("the gateway's answer")?;
    tracing::info!(id, "handed to the serving gateway");
    let mut shown = Shown::default();
    loop {
        tokio::time::sleep(POLL).await;
        let (status, answer) = call(
            &socket,
            Method::GET,
            &format!("/v1/knowledge/refresh/{id}"),
            Vec::new(),
        )
        .await
        .context(
            "the serving gateway stopped before the ingest finished; what it committed is kept",
        )?;
        if status != StatusCode::OK {
            bail!("the serving gateway lost the ingest: {}", message(&answer));
        }
        let job: Followed = serde_json::from_slice(&answer).context("the gateway's answer")?;
        if let Some(p) = &job.progress {
            shown.show(p, progress);
        }
        match job.state.as_str() {
            "done" => {
                progress.finish();
                return job.summary.context("the gateway's answer has no summary");
            }
            "failed" => {
                progress.finish();
                bail!(
                    "{}",
                    job.error.unwrap_or_else(|| "the ingest failed".into())
                );
            }
            _ => {}
        }
    }
}

/// What of the gateway's progress was passed on.
#[derive(Default)]
struct Shown {
    started: bool,
    files: u64,
    chunks: u64,
}

impl Shown {
    fn show(&mut self, s: &Snapshot, progress: &dyn Progress) {
        if !self.started && s.files_total > 0 {
            progress.start(s.files_total);
            self.started = true;
        }
        if self.started {
            progress.advance(
                s.files_done.saturating_sub(self.files),
                s.chunks_done.saturating_sub(self.chunks),
            );
            self.files = self.files.max(s.files_done);
            self.chunks = self.chunks.max(s.chunks_done);
        }
    }
}

/// An error answer's message (`{"error": {"message": …}}`), else its text.
fn message(answer: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(answer)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(answer).into_owned())
}

/// One HTTP/1.1 request on the control socket.
async fn call(
    socket: &Path,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<(StatusCode, Vec<u8>)> {
    let stream = tokio::net::UnixStream::connect(socket).await?;
    call_on(stream, method, path, body).await
}

/// One HTTP/1.1 request on a connected control socket, answered within `ANSWER_WAIT`.
async fn call_on(
    stream: tokio::net::UnixStream,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<(StatusCode, Vec<u8>)> {
    let exchange = async {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let connection = tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, "localhost")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| anyhow!("reading the gateway's answer: {e}"))?
            .to_bytes();
        drop(sender);
        connection.abort();
        anyhow::Ok((status, bytes.to_vec()))
    };
    tokio::time::timeout(ANSWER_WAIT, exchange)
        .await
        .map_err(|_| {
            anyhow!(
                "the gateway did not answer within {} s",
                ANSWER_WAIT.as_secs()
            )
        })?
}

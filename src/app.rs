//! Wiring: builds the shared state from settings (one adapter per port) and serves it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::llm;
use crate::pipeline::{Pipeline, PipelineConfig};

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub pipeline: Arc<Pipeline>,
    pub started: chrono::DateTime<chrono::Utc>,
}

impl AppState {
    pub fn started_rfc3339(&self) -> String {
        self.started
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }
}

/// Builds the state: the upstream adapter and the pipeline around it.
pub fn build(settings: Settings) -> anyhow::Result<AppState> {
    let chat = llm::from_settings(&settings.llm)?;
    let pipeline = Pipeline::new(
        chat,
        PipelineConfig {
            assistant_model: settings.assistant.model.trim().to_string(),
            upstream_model: settings.llm.model.clone(),
            passthrough: settings.assistant.passthrough,
            system_prompt: settings.system_prompt()?,
            context_tokens: settings.assistant.context_tokens,
        },
    );
    Ok(AppState {
        settings: Arc::new(settings),
        pipeline: Arc::new(pipeline),
        started: chrono::Utc::now(),
    })
}

/// Serves until `shutdown` resolves, then lets open streams finish for at most
/// `server.shutdown_grace_secs`.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grace = Duration::from_secs(state.settings.server.shutdown_grace_secs);
    let router = crate::http::router(state);
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm and the client's
    // delayed ACK hold each one back for up to 40 ms.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    });
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!(
            grace_secs = grace.as_secs(),
            "shutting down: no new connections, open streams may finish"
        );
        let _ = stopping_tx.send(());
    });
    tokio::select! {
        result = server => result,
        _ = async {
            if stopping_rx.await.is_ok() {
                tokio::time::sleep(grace).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => {
            tracing::warn!("grace period over: closing the streams still open");
            Ok(())
        }
    }
}

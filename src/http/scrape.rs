//! `GET /metrics`: the Prometheus text exposition of everything recorded through the
//! `metrics` facade, after refreshing the gauges that are read at scrape time (sessions
//! kept, chunks in each index). Behind the API keys like every route but `/health`.

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::telemetry;

/// Longest wait for each scrape-time count; a store that does not answer keeps its gauge
/// at the last value read.
const SCRAPE_WAIT: Duration = Duration::from_millis(500);

pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let Some(handle) = telemetry::install() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "another metrics recorder is installed in this process\n",
        )
            .into_response();
    };
    let sessions = async {
        let store = state.pipeline.sessions()?.store();
        tokio::time::timeout(SCRAPE_WAIT, store.count())
            .await
            .ok()?
            .ok()
    };
    let ((lexical, vectors), sessions) = tokio::join!(state.retriever.sizes(SCRAPE_WAIT), sessions);
    if let Some(n) = sessions {
        telemetry::set_sessions(n as u64);
    }
    if let Some(n) = lexical {
        telemetry::set_index_chunks("lexical", n);
    }
    if let Some(n) = vectors {
        telemetry::set_index_chunks("vectors", n);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

//! Readiness: whether the gateway can answer, from the same checks for every API
//! (HTTP `/ready`, gRPC `grpc.health.v1.Health`).

use serde_json::{json, Value};

use super::AppState;

/// Readiness probes must answer quickly even when a dependency hangs.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// What the checks found.
pub struct Readiness {
    /// An upstream answers: the gateway serves (perhaps degraded).
    pub up: bool,
    /// Each check, as `/ready` shows it.
    pub report: Value,
}

/// The state of each dependency, each with a `status` of `ok`, `degraded` (serving, with
/// less), `down` (not serving) or `disabled` (not configured), and a `reason` when not
/// ok. `upstream` is a list (one entry per upstream). Not serving only when no upstream
/// answers; anything else degraded still serves (BM25 answers alone, answers come
/// without memory).
pub async fn check(state: &AppState) -> Readiness {
    let (upstream, knowledge, session_store) = tokio::join!(
        upstream_checks(state),
        state.retriever.readiness(READY_TIMEOUT),
        session_check(state),
    );
    let up = upstream.iter().any(|u| u["status"] == "ok");
    let degraded = upstream.iter().any(|u| u["status"] != "ok")
        || [
            &knowledge.lexical_index,
            &knowledge.embedder,
            &knowledge.vector_store,
            &session_store,
        ]
        .iter()
        .any(|c| c["status"] != "ok" && c["status"] != "disabled");
    let overall = match (up, degraded) {
        (false, _) => "down",
        (true, true) => "degraded",
        (true, false) => "ok",
    };
    let body = json!({
        "status": overall,
        "checks": {
            "upstream": upstream,
            "embedder": knowledge.embedder,
            "vector_store": knowledge.vector_store,
            "lexical_index": knowledge.lexical_index,
            "session_store": session_store,
        },
    });
    Readiness { up, report: body }
}

/// One entry per upstream (primary, then fallbacks): whether it lists its models in time.
async fn upstream_checks(state: &AppState) -> Vec<Value> {
    state
        .pipeline
        .upstream_ready(READY_TIMEOUT)
        .await
        .into_iter()
        .map(|p| {
            let mut entry = match &p.models {
                Ok(models) => json!({"status": "ok", "models": models}),
                Err(reason) => json!({"status": "down", "reason": reason}),
            };
            entry["role"] = json!(p.role);
            entry["url"] = json!(p.url);
            if p.cooling_down {
                entry["cooling_down"] = json!(true);
            }
            entry
        })
        .collect()
}

async fn session_check(state: &AppState) -> Value {
    let Some(sessions) = state.pipeline.sessions() else {
        return json!({"status": "disabled", "reason": "no conversation memory"});
    };
    let store = sessions.store();
    match tokio::time::timeout(READY_TIMEOUT, store.count()).await {
        Ok(Ok(n)) => json!({"status": "ok", "store": store.describe(), "sessions": n}),
        // Answers still come without memory.
        Ok(Err(e)) => {
            json!({"status": "degraded", "store": store.describe(), "reason": format!("{e:#}")})
        }
        Err(_) => json!({"status": "degraded", "store": store.describe(),
            "reason": format!("no answer within {} s", READY_TIMEOUT.as_secs())}),
    }
}

//! The Anthropic Messages dialect (Claude Code, the Anthropic SDKs): `/v1/messages`
//! (parsed in `parse`, rendered in `render`) and `/v1/messages/count_tokens`, routed
//! beside the OpenAI routes under `/v1` (a query such as `?beta=true` is ignored), and
//! the model list in Anthropic's shape. Errors are
//! `{"type":"error","error":{"type","message"}}`.

mod parse;
mod render;

use axum::body::Body;
use axum::extract::State;
use axum::routing::{any, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::chat::{self, Parse};
use super::dialect::{self, Anthropic, ApiError};
use super::{body, AppState};
use crate::pipeline::ServedModel;

pub use render::Stream;

/// What this dialect's handlers return on failure.
pub type Error = ApiError<Anthropic>;

/// The chat endpoint: the route as logs and metrics name it, and the body's parser (the
/// fuzz targets run the same).
pub const MESSAGES: (&str, Parse<Stream>) = ("/v1/messages", parse::messages);

/// This dialect's routes, whole paths (they sit beside the OpenAI routes under `/v1`).
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/messages",
            chat::post::<Anthropic, Stream>(MESSAGES.0, MESSAGES.1),
        )
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/messages/{*rest}", any(dialect::not_found::<Anthropic>))
        .method_not_allowed_fallback(dialect::method_not_allowed::<Anthropic>)
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": n}`, by the upstream's tokenizer
/// when it has one, else the gateway's estimate.
async fn count_tokens(State(state): State<AppState>, body: Body) -> Result<Json<Value>, Error> {
    let bytes = body::read(&state.settings.server, body).await?;
    let counted = parse::count(&bytes)?;
    // The same bounds as a turn's: counting is no cheaper than answering to the limit.
    crate::serve::bounds::check_messages(&state.settings.server, &counted.messages)?;
    state.pipeline.model(&counted.model).await?;
    let n = state
        .pipeline
        .count_prompt(&counted.messages, &counted.tools)
        .await;
    tracing::debug!(
        messages = counted.messages.len(),
        tools = counted.tools.len(),
        tokens = n,
        "tokens counted"
    );
    Ok(Json(json!({ "input_tokens": n })))
}

/// Whether a request comes from an Anthropic client (its SDKs always send the version).
pub fn asked_by(headers: &axum::http::HeaderMap) -> bool {
    headers.contains_key("anthropic-version")
}

/// The model list in Anthropic's shape (`GET /v1/models` from an Anthropic client).
pub fn model_list(models: &[ServedModel], started: &str) -> Value {
    let data: Vec<Value> = models.iter().map(|m| model_json(m, started)).collect();
    let id = |v: Option<&Value>| v.map_or(Value::Null, |m| m["id"].clone());
    json!({
        "data": data,
        "has_more": false,
        "first_id": id(data.first()),
        "last_id": id(data.last()),
    })
}

/// One model in Anthropic's shape.
pub fn model_json(m: &ServedModel, started: &str) -> Value {
    let (id, created) = match m {
        ServedModel::Assistant { name } => (name.clone(), started.to_string()),
        ServedModel::Upstream(u) => (
            u.id.clone(),
            chrono::DateTime::from_timestamp(u.created, 0)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ),
    };
    json!({"type": "model", "id": id, "display_name": id, "created_at": created})
}

//! The OpenAI dialect, nested under `/v1`: chat and text completions (parsed in
//! `parse`, rendered in `render`), models, embeddings, answer evaluation and cited
//! sources. Errors are
//! `{"error":{"message","type","param","code"}}`.

mod parse;
mod render;

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::chat::{self, Parse};
use super::dialect::{self, ApiError, OpenAi};
use super::{anthropic, embeddings, eval, responses, sources, usage, AppState};
use crate::pipeline::ServedModel;

pub use render::Sse;

/// What this dialect's handlers return on failure.
pub type Error = ApiError<OpenAi>;

/// The chat endpoints: the route as logs and metrics name it, and the body's parser
/// (the fuzz targets run the same).
pub const CHAT_COMPLETIONS: (&str, Parse<Sse>) = ("/v1/chat/completions", parse::chat);
pub const COMPLETIONS: (&str, Parse<Sse>) = ("/v1/completions", parse::completion);

/// The routes under `/v1`, with this dialect's answers for unknown routes and methods.
pub fn router() -> Router<AppState> {
    let chat = |(route, parse): (&'static str, Parse<Sse>)| chat::post::<OpenAi, Sse>(route, parse);
    Router::new()
        .route("/chat/completions", chat(CHAT_COMPLETIONS))
        .route("/completions", chat(COMPLETIONS))
        .route("/models", get(list_models))
        .route("/models/{*id}", get(get_model))
        .route("/embeddings", post(embeddings::openai))
        .route("/eval", post(eval::evaluate))
        .route("/sources/{id}", get(sources::get))
        .route("/usage", get(usage::get))
        .fallback(dialect::not_found::<OpenAi>)
        .method_not_allowed_fallback(dialect::method_not_allowed::<OpenAi>)
}

fn model_json(m: &ServedModel, started: i64) -> Value {
    match m {
        ServedModel::Assistant { name } => {
            json!({"id": name, "object": "model", "created": started, "owned_by": "assist-gateway"})
        }
        ServedModel::Upstream(u) => {
            json!({"id": u.id, "object": "model", "created": u.created, "owned_by": u.owned_by})
        }
    }
}

/// The served models; in Anthropic's shape for an Anthropic client, as Codex's model
/// catalog when Codex asks (it names its version, `?client_version=`).
async fn list_models(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Json<Value> {
    let codex = query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.split('=').next() == Some("client_version"))
    });
    if codex {
        return Json(responses::catalog(&state).await);
    }
    let models = state.pipeline.models().await;
    if anthropic::asked_by(&headers) {
        return Json(anthropic::model_list(&models, &state.started_rfc3339()));
    }
    let started = state.started.timestamp();
    let data: Vec<Value> = models.iter().map(|m| model_json(m, started)).collect();
    Json(json!({"object": "list", "data": data}))
}

async fn get_model(
    State(state): State<AppState>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>, Error> {
    // `%FF`: not a name at all, answered in the dialect's shape like any unknown model.
    let id = id
        .map_err(|_| crate::error::GatewayError::model_not_found("(not UTF-8)"))?
        .0;
    let m = state.pipeline.model(&id).await?;
    if anthropic::asked_by(&headers) {
        return Ok(Json(anthropic::model_json(&m, &state.started_rfc3339())));
    }
    Ok(Json(model_json(&m, state.started.timestamp())))
}

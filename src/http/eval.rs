//! `POST /v1/eval`: the reference's `EvaluateRAG` over HTTP (`serve::evaluation`).
//! Request `{category, limit, index}` (all optional), response the `EvalResponse` JSON;
//! another request while one runs gets 409.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use super::body;
use super::dialect::{ApiError, OpenAi};
use super::AppState;
use crate::eval::answers::EvalResponse;
use crate::serve::evaluation;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EvalRequest {
    /// Only this category; empty = all.
    #[serde(default)]
    category: String,
    /// Only the first N questions; 0 = all.
    #[serde(default)]
    limit: i64,
    /// The index to evaluate; empty = the configured one (the only one served).
    #[serde(default)]
    index: String,
}

pub(super) async fn evaluate(
    State(state): State<AppState>,
    body::Json(req, _): body::Json<EvalRequest, OpenAi>,
) -> Result<Json<EvalResponse>, ApiError<OpenAi>> {
    let asked = evaluation::Asked {
        category: req.category,
        limit: req.limit,
        index: req.index,
    };
    Ok(Json(evaluation::run(state, asked).await?))
}

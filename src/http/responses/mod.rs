//! The OpenAI Responses dialect (Codex CLI, the OpenAI SDKs' `responses`): `POST
//! /v1/responses` (parsed in `parse`, rendered in `render`), stateless by default: the
//! client sends the whole conversation each time (as Codex does), unless it stores
//! responses (`store: true`) and continues them by `previous_response_id` (`stored`). Routed beside the OpenAI routes under `/v1`, with
//! OpenAI's error shape `{"error":{"message","type","param","code"}}`. Codex reads the
//! served models from its own catalog (`catalog`, at `GET /v1/models?client_version=…`).

mod catalog;
mod parse;
mod render;

use axum::Router;

use super::chat::{self, Parse};
use super::dialect::Responses;
use super::AppState;

pub use catalog::catalog;
pub use render::Stream;

/// The chat endpoint: the route as logs and metrics name it, and the body's parser (the
/// fuzz targets run the same).
pub const RESPONSES: (&str, Parse<Stream>) = ("/v1/responses", parse::responses);

/// The routes, relative to `/v1`.
pub fn router() -> Router<AppState> {
    Router::new().route(
        "/responses",
        chat::post::<Responses, Stream>(RESPONSES.0, RESPONSES.1),
    )
}

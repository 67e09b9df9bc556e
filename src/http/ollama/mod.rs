//! The Ollama dialect, nested under `/api`: chat and generate (parsed in `parse`,
//! rendered in `render`), the model list and details, and embeddings. Errors are
//! `{"error":"…"}`.

mod parse;
mod render;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::chat::{self, Parse};
use super::dialect::{self, ApiError, Ollama};
use super::{body, embeddings, AppState};
use crate::error::GatewayError;
use crate::llm::ModelCard;
use crate::pipeline::ServedModel;

pub use render::Ndjson;

/// What this dialect's handlers return on failure.
pub type Error = ApiError<Ollama>;

/// The chat endpoints: the route as logs and metrics name it, and the body's parser
/// (the fuzz targets run the same).
pub const CHAT: (&str, Parse<Ndjson>) = ("/api/chat", parse::chat);
pub const GENERATE: (&str, Parse<Ndjson>) = ("/api/generate", parse::generate);

/// The routes under `/api`, with this dialect's answers for unknown routes and methods.
pub fn router() -> Router<AppState> {
    let chat =
        |(route, parse): (&'static str, Parse<Ndjson>)| chat::post::<Ollama, Ndjson>(route, parse);
    Router::new()
        .route("/chat", chat(CHAT))
        .route("/generate", chat(GENERATE))
        .route("/tags", get(tags))
        .route("/show", post(show))
        .route("/version", get(version))
        .route("/ps", get(ps))
        .route("/embed", post(embeddings::ollama_embed))
        .route("/embeddings", post(embeddings::ollama_legacy))
        .fallback(dialect::not_found::<Ollama>)
        .method_not_allowed_fallback(dialect::method_not_allowed::<Ollama>)
}

/// A stable, digest-shaped identifier for models that have no file behind them.
fn digest_of(name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = String::with_capacity(64);
    for round in 0..4u8 {
        for b in name.bytes().chain([round]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn assistant_details() -> Value {
    json!({"parent_model": "", "format": "gguf", "family": "brunix", "families": ["brunix"],
           "parameter_size": "", "quantization_level": ""})
}

/// `/api/tags` and `/api/ps` entry.
fn model_entry(m: &ServedModel, started: &str) -> Value {
    match m {
        ServedModel::Assistant { name } => {
            let tagged = format!("{name}:latest");
            json!({"name": tagged, "model": tagged, "modified_at": started, "size": 0,
                   "digest": digest_of(name), "details": assistant_details()})
        }
        ServedModel::Upstream(u) => json!({
            "name": u.id, "model": u.id,
            "modified_at": u.modified_at.clone().unwrap_or_else(|| started.to_string()),
            "size": u.size,
            "digest": if u.digest.is_empty() { digest_of(&u.id) } else { u.digest.clone() },
            "details": u.details.clone().unwrap_or_else(|| json!({
                "parent_model": "", "format": "", "family": "", "families": [],
                "parameter_size": "", "quantization_level": ""})),
        }),
    }
}

async fn tags(State(state): State<AppState>) -> Json<Value> {
    let started = state.started_rfc3339();
    let models: Vec<Value> = state
        .pipeline
        .models()
        .await
        .iter()
        .map(|m| model_entry(m, &started))
        .collect();
    Json(json!({"models": models}))
}

async fn ps(State(state): State<AppState>) -> Json<Value> {
    let mut entry = model_entry(
        &ServedModel::Assistant {
            name: state.pipeline.assistant_model().to_string(),
        },
        &state.started_rfc3339(),
    );
    let expires = chrono::Utc::now() + chrono::Duration::days(365);
    entry["expires_at"] = json!(expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    entry["size_vram"] = json!(0);
    if let Some(o) = entry.as_object_mut() {
        o.remove("modified_at");
    }
    Json(json!({"models": [entry]}))
}

#[derive(Deserialize)]
struct ShowRequest {
    model: Option<String>,
    name: Option<String>,
}

async fn show(
    State(state): State<AppState>,
    body::Json(req, _): body::Json<ShowRequest, Ollama>,
) -> Result<Json<Value>, Error> {
    let Some(name) = req.model.or(req.name).filter(|n| !n.trim().is_empty()) else {
        return Err(GatewayError::invalid("model", "model is required").into());
    };
    let card = state.pipeline.show(&name).await?;
    Ok(Json(show_json(&state, &name, card)))
}

fn show_json(state: &AppState, name: &str, card: ModelCard) -> Value {
    let assistant = state.pipeline.is_assistant(name);
    let details = card.details.unwrap_or_else(|| {
        if assistant {
            assistant_details()
        } else {
            json!({"parent_model": "", "format": "", "family": "", "families": [],
                   "parameter_size": "", "quantization_level": ""})
        }
    });
    let model_info = card
        .model_info
        .unwrap_or_else(|| match card.context_length {
            Some(n) => json!({"general.architecture": "brunix", "brunix.context_length": n}),
            None => Value::Null,
        });
    json!({
        "license": "",
        "modelfile": "",
        "parameters": card.parameters.unwrap_or_default(),
        "template": card.template.unwrap_or_else(|| "{{ .Prompt }}".to_string()),
        "details": details,
        "model_info": model_info,
        "capabilities": card.capabilities,
        "modified_at": state.started_rfc3339(),
    })
}

async fn version(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"version": state.settings.server.ollama_version}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_stable_and_digest_shaped() {
        let d = digest_of("brunix");
        assert_eq!(d.len(), 64);
        assert!(d.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(d, digest_of("brunix"));
        assert_ne!(d, digest_of("brunix2"));
    }
}

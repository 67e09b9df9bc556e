//! Embedding endpoints, served by the configured `Embedder` (the one the knowledge base
//! uses): OpenAI `POST /v1/embeddings` (floats, or `encoding_format: "base64"`: little-endian
//! f32 bytes, as the OpenAI SDKs decode them), Ollama `POST /api/embed` and the legacy
//! `POST /api/embeddings`.

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{self, OneOrMany};
use super::dialect::{ApiError, Ollama, OpenAi};
use super::AppState;
use crate::config::ServerSettings;
use crate::embed::TextKind;
use crate::error::GatewayError;
use crate::serve::bounds::{check_count, check_length};

#[derive(Deserialize)]
pub(super) struct OpenAiRequest {
    model: String,
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<usize>,
    /// `"query"` (the default) or `"passage"` / `"document"`: what the texts are to a model
    /// that tells them apart (e5); the others read both alike.
    #[serde(default)]
    input_type: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct OllamaEmbedRequest {
    model: String,
    input: Value,
    #[serde(default)]
    #[allow(dead_code)]
    truncate: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    options: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    keep_alive: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct OllamaLegacyRequest {
    model: String,
    prompt: String,
}

/// The texts of an `input` field, or a 400 naming it: at most
/// `server.max_embedding_inputs` texts of at most `server.max_message_chars` characters.
fn texts(input: Value, server: &ServerSettings) -> Result<Vec<String>, GatewayError> {
    let texts = serde_json::from_value::<OneOrMany>(input)
        .map_err(|_| {
            GatewayError::invalid(
                "input",
                "input must be a string or a list of strings (token arrays are not supported)",
            )
        })?
        .into_vec();
    if texts.is_empty() {
        return Err(GatewayError::invalid("input", "input must not be empty"));
    }
    check_count(
        "input",
        "inputs",
        texts.len(),
        (server.max_embedding_inputs, "server.max_embedding_inputs"),
    )?;
    for (i, text) in texts.iter().enumerate() {
        check_length(server, &format!("input[{i}]"), text.chars().count())?;
    }
    let tokens = token_estimate(&texts);
    if tokens > MAX_EMBEDDING_TOKENS {
        return Err(GatewayError::invalid(
            "input",
            format!(
                "input holds about {tokens} tokens in all; at most {MAX_EMBEDDING_TOKENS} are embedded in one request"
            ),
        ));
    }
    Ok(texts)
}

/// Most tokens (by the usage estimate) one embedding request may carry in all, OpenAI's
/// own limit: on a CPU, 2,048 long texts were about twenty minutes of one embedding slot.
const MAX_EMBEDDING_TOKENS: usize = 300_000;

/// Embeds with the configured embedder, checking the model name the client asked for.
/// At most `server.max_concurrent_embeddings` requests embed at once (429 beyond); one
/// whose client goes away stops at its next batch (the request's future is dropped).
async fn embed(
    state: &AppState,
    model: &str,
    texts: &[String],
    kind: TextKind,
) -> Result<Vec<Vec<f32>>, GatewayError> {
    let Ok(_slot) = state.embedding_slots.clone().try_acquire_owned() else {
        metrics::counter!("assist_rate_limited_total", "limit" => "embeddings").increment(1);
        let mut e = GatewayError::rate_limited(format!(
            "{} embedding requests are already running (server.max_concurrent_embeddings); retry in a moment",
            state.settings.server.max_concurrent_embeddings
        ));
        e.retry_after = Some(1);
        return Err(e);
    };
    let Some(embedder) = state.embedder.as_ref() else {
        return Err(GatewayError::model_not_found(model).with_message(format!(
            "no embedding model is served (embeddings.provider = \"none\"); '{model}' is not available"
        )));
    };
    if !serves(state, model) {
        return Err(GatewayError::model_not_found(model).with_message(format!(
            "embedding model '{model}' is not served; use '{}'",
            state.settings.embeddings.model
        )));
    }
    Ok(embedder.embed(texts, kind).await?)
}

/// The embedding model answers to the name it is served under (`embeddings.model`, or the
/// local model's own name: see `app::build`), in any case, with or without `:latest`; the
/// local embedder to its folder's name too.
fn serves(state: &AppState, model: &str) -> bool {
    let e = &state.settings.embeddings;
    let bare = model.strip_suffix(":latest").unwrap_or(model);
    let folder = e
        .path
        .as_deref()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    bare.eq_ignore_ascii_case(e.model.strip_suffix(":latest").unwrap_or(&e.model))
        || folder == Some(bare)
}

fn token_estimate(texts: &[String]) -> usize {
    texts.iter().map(|t| t.chars().count().div_ceil(4)).sum()
}

pub(super) async fn openai(
    State(state): State<AppState>,
    body::Json(req, _): body::Json<OpenAiRequest, OpenAi>,
) -> Result<Json<Value>, ApiError<OpenAi>> {
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(GatewayError::invalid(
                "encoding_format",
                format!("encoding_format '{other}' is not 'float' or 'base64'"),
            )
            .into())
        }
    };
    let kind = match req.input_type.as_deref() {
        None | Some("query") => TextKind::Query,
        Some("passage" | "document") => TextKind::Passage,
        Some(other) => {
            return Err(GatewayError::invalid(
                "input_type",
                format!("input_type '{other}' is not 'query', 'passage' or 'document'"),
            )
            .into())
        }
    };
    let texts = texts(req.input, &state.settings.server)?;
    let vectors = embed(&state, &req.model, &texts, kind).await?;
    if let (Some(d), Some(first)) = (req.dimensions, vectors.first()) {
        if first.len() != d {
            return Err(GatewayError::invalid(
                "dimensions",
                format!("this model's vectors have {} dimensions", first.len()),
            )
            .into());
        }
    }
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let tokens = token_estimate(&texts);
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": state.settings.embeddings.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}

pub(super) async fn ollama_embed(
    State(state): State<AppState>,
    body::Json(req, _): body::Json<OllamaEmbedRequest, Ollama>,
) -> Result<Json<Value>, ApiError<Ollama>> {
    let started = Instant::now();
    let texts = texts(req.input, &state.settings.server)?;
    let vectors = embed(&state, &req.model, &texts, TextKind::Query).await?;
    Ok(Json(json!({
        "model": req.model,
        "embeddings": vectors,
        "total_duration": u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        "load_duration": 0,
        "prompt_eval_count": token_estimate(&texts),
    })))
}

pub(super) async fn ollama_legacy(
    State(state): State<AppState>,
    body::Json(req, _): body::Json<OllamaLegacyRequest, Ollama>,
) -> Result<Json<Value>, ApiError<Ollama>> {
    check_length(&state.settings.server, "prompt", req.prompt.chars().count())?;
    let mut vectors = embed(&state, &req.model, &[req.prompt], TextKind::Query).await?;
    Ok(Json(
        json!({"embedding": vectors.pop().unwrap_or_default()}),
    ))
}

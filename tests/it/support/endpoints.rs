//! The scripted upstream's other endpoints: its model list and cards, its tokenizer and
//! its embeddings, in each server's own shapes.

use super::*;

/// A deterministic vector for a text: letter frequencies, L2-normalised.
pub fn letter_vector(text: &str) -> Vec<f32> {
    let mut v = [0.0f32; 26];
    for c in text
        .to_ascii_lowercase()
        .bytes()
        .filter(u8::is_ascii_lowercase)
    {
        v[(c - b'a') as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter().map(|x| x / norm).collect()
}

/// `/api/embed` (Ollama) and `/v1/embeddings` (OpenAI) in their own response shapes.
pub(super) async fn embed(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = shared.record(&uri, headers, &body);
    let delay = *shared.embed_delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(Reply::Status { status, body }) = shared.script.lock().unwrap().pop_front() {
        return Response::builder()
            .status(status)
            .body(Body::from(body))
            .unwrap();
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let vectors: Vec<Vec<f32>> = inputs.iter().map(|t| letter_vector(t)).collect();
    if uri.path() == "/api/embed" {
        axum::Json(json!({"model": body["model"], "embeddings": vectors,
            "total_duration": 1000, "load_duration": 0, "prompt_eval_count": inputs.len()}))
        .into_response()
    } else {
        // Servers may answer out of order; the index says which input is which.
        let data: Vec<Value> = vectors
            .iter()
            .enumerate()
            .rev()
            .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
            .collect();
        axum::Json(
            json!({"object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": inputs.len(), "total_tokens": inputs.len()}}),
        )
        .into_response()
    }
}

/// `UPSTREAM_MODEL` and the one `serve_model` added.
pub(super) fn served(shared: &Shared) -> Vec<String> {
    let mut names = vec![UPSTREAM_MODEL.to_string()];
    names.extend(shared.also_serves.lock().unwrap().clone());
    names
}

pub(super) async fn tags(State(shared): State<Arc<Shared>>) -> Response {
    shared.listings.fetch_add(1, Ordering::SeqCst);
    if let Some(r) = hostile_reply(&shared, "{\"models\":[") {
        return r;
    }
    let models: Vec<Value> = served(&shared)
        .iter()
        .map(|name| {
            json!({
                "name": name, "model": name,
                "modified_at": "2026-01-02T03:04:05.123456789Z", "size": 1234567,
                "digest": "a".repeat(64),
                "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                            "parameter_size": "135M", "quantization_level": "Q8_0"}
            })
        })
        .collect();
    axum::Json(json!({ "models": models })).into_response()
}

pub(super) async fn models(State(shared): State<Arc<Shared>>) -> Response {
    shared.listings.fetch_add(1, Ordering::SeqCst);
    if let Some(r) = hostile_reply(&shared, "{\"object\":\"list\",\"data\":[") {
        return r;
    }
    let data: Vec<Value> = served(&shared)
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 1700000000, "owned_by": "scripted"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// llama-cpp-python's token count, when the window says the upstream has a tokenizer.
pub(super) async fn tokenize(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    if let Some(r) = hostile_reply(&shared, "{\"tokens\":[") {
        return r;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match shared.window.lock().unwrap().clone() {
        Some(w) if w.tokenizer => {
            let text = body["input"].as_str().unwrap_or("");
            shared.tokenized.lock().unwrap().push(text.to_string());
            axum::Json(json!({"count": w.count(text)})).into_response()
        }
        _ => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"detail": "Not Found"})),
        )
            .into_response(),
    }
}

pub(super) async fn show(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    if let Some(r) = hostile_reply(&shared, "{\"template\":\"") {
        return r;
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let name = v["model"].as_str().or(v["name"].as_str()).unwrap_or("");
    let also = shared.also_serves.lock().unwrap().clone();
    if name != UPSTREAM_MODEL && also.as_deref() != Some(name) {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": format!("model '{name}' not found")})),
        )
            .into_response();
    }
    axum::Json(json!({
        "license": "", "modelfile": "", "parameters": "num_ctx 4096", "template": "{{ .Prompt }}",
        "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                    "parameter_size": "135M", "quantization_level": "Q8_0"},
        "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
        "capabilities": ["completion", "tools"]
    }))
    .into_response()
}

//! The served models as Codex CLI reads them: `GET /v1/models?client_version=…`, the
//! request Codex makes of a provider's `model_catalog_url`, answered with its model
//! catalog (`{"models": [ModelInfo]}`) rather than OpenAI's list. Codex takes from it
//! each model's context window (so it compacts its conversation before the gateway must
//! refuse it; without an entry it assumes 272,000 tokens and warns "Model metadata for
//! `brunix` not found"), the instructions it sends (its own run to about 10,000 tokens,
//! more than a small local model's whole window), its shell tool's shape and how much of
//! a tool's output it keeps.

use futures::future::join_all;
use serde_json::{json, Value};

use crate::http::AppState;
use crate::pipeline::ServedModel;

/// The instructions Codex sends for every model of the gateway, in place of its own.
const INSTRUCTIONS: &str = "You are a coding agent in the user's terminal, working in \
their current folder. Answer briefly and plainly. To learn what a file holds, run a shell \
command (for example `cat path/to/file` or `rg name`) and answer from its output; never \
guess a file's contents. Make changes only when asked, and say what you changed.";

/// Codex's model catalog: one entry per served model, its window the one the gateway
/// budgets for (the upstream's for a passthrough model that reports one).
pub async fn catalog(state: &AppState) -> Value {
    let models = state.pipeline.models().await;
    let windows = join_all(models.iter().map(|m| async move {
        let card = state.pipeline.show(m.id()).await.ok();
        card.and_then(|c| c.context_length)
    }))
    .await;
    let assistant = windows.first().copied().flatten();
    let entries: Vec<Value> = models
        .iter()
        .zip(windows)
        .enumerate()
        .map(|(i, (m, window))| entry(m, window.or(assistant), i))
        .collect();
    json!({ "models": entries })
}

fn entry(model: &ServedModel, window: Option<u64>, priority: usize) -> Value {
    let description = match model {
        ServedModel::Assistant { .. } => "assist-gateway's assistant (your knowledge base)",
        ServedModel::Upstream(_) => "the upstream's model, through assist-gateway",
    };
    let mut entry = json!({
        "slug": model.id(),
        "display_name": model.id(),
        "description": description,
        "supported_reasoning_levels": [],
        "shell_type": "shell_command",
        "visibility": "list",
        "supported_in_api": true,
        "priority": priority,
        "upgrade": null,
        "base_instructions": INSTRUCTIONS,
        "supports_reasoning_summaries": false,
        "support_verbosity": false,
        "default_verbosity": null,
        "apply_patch_tool_type": null,
        "supports_parallel_tool_calls": false,
        "experimental_supported_tools": [],
        "input_modalities": ["text", "image"],
    });
    if let Some(window) = window {
        // Compaction at 80 % of the window leaves the answer its room; a tool's output is
        // cut to an eighth of it, so one command cannot fill the conversation.
        entry["context_window"] = json!(window);
        entry["auto_compact_token_limit"] = json!(window * 4 / 5);
        entry["truncation_policy"] = json!({"mode": "tokens", "limit": (window / 8).max(256)});
    } else {
        entry["truncation_policy"] = json!({"mode": "tokens", "limit": 10_000});
    }
    entry
}

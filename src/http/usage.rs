//! `GET /v1/usage`: the calling key's own usage (answers, errors, prompt and answer
//! tokens) by UTC day and model, with its limits and what is left of them today. Counted
//! per key name (`sessions::usage`); a gateway without keys counts none.

use axum::extract::{Extension, State};
use axum::Json;
use serde_json::{json, Value};

use super::dialect::{ApiError, OpenAi};
use super::AppState;
use crate::error::GatewayError;
use crate::serve::access::Caller;
use crate::sessions::usage::{totals, Row};

pub async fn get(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<Value>, ApiError<OpenAi>> {
    let key = caller.and_then(|Extension(c)| state.keys.id(&c));
    let (Some(key), Some(usage)) = (key, state.usage.as_ref()) else {
        return Err(GatewayError::route_not_found("/v1/usage")
            .with_message(
                "usage is counted per API key, and this gateway has none (server.api_keys)",
            )
            .into());
    };
    let rows = usage.rows(&key.account).await.map_err(|e| {
        tracing::warn!(error = %format!("{e:#}"), "usage: could not read the store");
        GatewayError::unavailable("usage_unavailable", "the usage store cannot be read now")
    })?;
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let mut days: Vec<Value> = Vec::new();
    let mut day_rows: Vec<&Row> = Vec::new();
    let flush = |day_rows: &mut Vec<&Row>, days: &mut Vec<Value>| {
        let Some(first) = day_rows.first() else {
            return;
        };
        let owned: Vec<Row> = day_rows.iter().map(|r| (*r).clone()).collect();
        days.push(json!({
            "day": first.day,
            "totals": totals(&owned),
            "models": owned.iter().map(|r| {
                let mut m = json!(r.counts);
                m["model"] = json!(r.model);
                m
            }).collect::<Vec<_>>(),
        }));
        day_rows.clear();
    };
    for row in &rows {
        if day_rows.first().is_some_and(|r| r.day != row.day) {
            flush(&mut day_rows, &mut days);
        }
        day_rows.push(row);
    }
    flush(&mut day_rows, &mut days);
    let today_rows: Vec<Row> = rows.iter().filter(|r| r.day == today).cloned().collect();
    let used_today = totals(&today_rows).tokens();
    let limit = |n: u64| if n == 0 { Value::Null } else { json!(n) };
    Ok(Json(json!({
        "object": "usage",
        "key": key.name,
        "limits": {
            "tokens_per_day": limit(key.tokens_per_day),
            "requests_per_minute": limit(key.requests_per_minute),
        },
        "today": {
            "day": today,
            "tokens": used_today,
            "tokens_left": (key.tokens_per_day > 0)
                .then(|| key.tokens_per_day.saturating_sub(used_today)),
        },
        "totals": totals(&rows),
        "days": days,
    })))
}

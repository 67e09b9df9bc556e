//! The per-caller limits as HTTP middleware (the limits themselves: `serve::access`),
//! with OpenAI's `x-ratelimit-*-requests` headers.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::caller_of;
use super::dialect::{ApiError, Dialect};
use crate::serve::access::Limits;

pub(super) static LIMIT_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-limit-requests");
pub(super) static REMAINING_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-requests");
pub(super) static RESET_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-reset-requests");

/// Middleware: counts the request against the caller's per-minute limit (429 over it, in
/// dialect `D`'s shape) and hands the handlers a `StreamGate`. Without limits configured,
/// requests pass untouched.
pub async fn enforce<D: Dialect>(
    State(limits): State<Option<Arc<Limits>>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(limits) = limits else {
        return next.run(req).await;
    };
    let caller = caller_of(&req);
    let admitted = match limits.admit(&caller).await {
        Ok(admitted) => admitted,
        Err(e) => {
            let retry_after = e.retry_after;
            let mut response = ApiError::<D>::from(e).into_response();
            rate_headers(response.headers_mut(), limits.per_minute(), 0, retry_after);
            return response;
        }
    };
    if let Some(gate) = admitted.gate {
        req.extensions_mut().insert(gate);
    }
    let mut response = next.run(req).await;
    if let Some(remaining) = admitted.remaining {
        rate_headers(response.headers_mut(), limits.per_minute(), remaining, None);
    }
    response
}

/// OpenAI's `x-ratelimit-*-requests` headers.
fn rate_headers(headers: &mut HeaderMap, limit: u32, remaining: u32, reset_secs: Option<u64>) {
    headers.insert(LIMIT_REQUESTS.clone(), HeaderValue::from(limit));
    headers.insert(REMAINING_REQUESTS.clone(), HeaderValue::from(remaining));
    if let Some(secs) = reset_secs {
        if let Ok(v) = HeaderValue::from_str(&format!("{secs}s")) {
            headers.insert(RESET_REQUESTS.clone(), v);
        }
    }
}

//! The key check as HTTP middleware (the keys themselves: `serve::access`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderName;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::dialect::{ApiError, Dialect};
use crate::serve::access::{Caller, Keys};

/// The key header of Anthropic's API.
pub static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The caller of a request that passed [`require_key`]: its key, else its address.
pub fn caller_of(req: &Request) -> Caller {
    if let Some(caller) = req.extensions().get::<Caller>() {
        return caller.clone();
    }
    Caller::at(
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| *addr),
    )
}

/// Middleware: without keys configured, requests pass; with them, a request without an
/// accepted key (`Authorization: Bearer`, or Anthropic's `x-api-key`) gets 401 in dialect `D`'s shape, and one with a key carries its
/// [`Caller`].
pub async fn require_key<D: Dialect>(
    State(keys): State<Arc<Keys>>,
    mut req: Request,
    next: Next,
) -> Response {
    if !keys.required() {
        return next.run(req).await;
    }
    // A header that is not text is a key that cannot be accepted (not a missing one).
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("Bearer \u{fffd}"));
    // Anthropic's clients send the key as `x-api-key` (and some send both headers).
    let api_key = req
        .headers()
        .get(&X_API_KEY)
        .map(|v| format!("Bearer {}", v.to_str().unwrap_or("\u{fffd}").trim()));
    let checked = match (header, api_key) {
        (None, Some(key)) => keys.check(Some(&key)),
        (Some(h), Some(key)) => keys.check(Some(h)).or_else(|_| keys.check(Some(&key))),
        (h, None) => keys.check(h),
    };
    match checked {
        Ok(digest) => {
            req.extensions_mut().insert(Caller::Key(digest));
            next.run(req).await
        }
        Err(e) => ApiError::<D>::from(e).into_response(),
    }
}

//! The key check as HTTP middleware (the keys themselves: `serve::access`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::dialect::{ApiError, Dialect};
use crate::serve::access::{Caller, Keys};

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
/// accepted key gets 401 in dialect `D`'s shape, and one with a key carries its
/// [`Caller`].
pub async fn require_key<D: Dialect>(
    State(keys): State<Arc<Keys>>,
    mut req: Request,
    next: Next,
) -> Response {
    if !keys.required() {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match keys.check(header) {
        Ok(digest) => {
            req.extensions_mut().insert(Caller::Key(digest));
            next.run(req).await
        }
        Err(e) => ApiError::<D>::from(e).into_response(),
    }
}

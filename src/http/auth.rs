//! Bearer keys: when `server.api_keys` is set, every route but `/health` needs one.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{error_response, Dialect};
use crate::app::AppState;
use crate::error::GatewayError;

pub(crate) async fn require_key(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let keys = &state.settings.server.api_keys;
    if keys.is_empty() || req.uri().path() == "/health" {
        return next.run(req).await;
    }
    let presented = bearer(
        req.headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    let dialect = Dialect::of_path(req.uri().path());
    match presented {
        None => error_response(
            dialect,
            &GatewayError::unauthorized("missing API key: send Authorization: Bearer <key>"),
        ),
        Some(key) if accepted(keys, key) => next.run(req).await,
        Some(_) => error_response(dialect, &GatewayError::unauthorized("invalid API key")),
    }
}

/// The key of an `Authorization: Bearer <key>` header; an empty key is no key.
pub(super) fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, key) = value.split_once(' ').unwrap_or((value, ""));
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

/// Compares against every key without stopping early. The SHA-256 digests are compared,
/// in constant time: comparing the keys themselves would return at once on a length
/// mismatch and so tell a caller how long the keys are.
fn accepted(keys: &[String], presented: &str) -> bool {
    let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    keys.iter().fold(false, |ok, k| {
        let key: [u8; 32] = Sha256::digest(k.as_bytes()).into();
        ok | bool::from(key.ct_eq(&presented))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Bearer")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn keys_are_matched_exactly() {
        let keys = vec!["k1".to_string(), "k2".to_string()];
        assert!(accepted(&keys, "k2"));
        assert!(!accepted(&keys, "k"));
        assert!(!accepted(&keys, "k22"));
        assert!(!accepted(&keys, ""));
        assert!(!accepted(&[], "k1"));
    }
}

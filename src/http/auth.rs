//! Bearer keys: when `server.api_keys` is set, every route but `/health` needs one. The
//! keys are held as SHA-256 digests, computed once at start-up; the digest of the key a
//! request presented is who the caller is (rate limits, conversation memory).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::dialect::{ApiError, Dialect};
use crate::config::ServerSettings;
use crate::error::GatewayError;

/// The accepted keys, as digests.
pub struct Keys {
    digests: Vec<[u8; 32]>,
}

impl Keys {
    pub fn from_settings(server: &ServerSettings) -> Arc<Self> {
        Arc::new(Self {
            digests: server.api_keys.iter().map(|k| digest(k)).collect(),
        })
    }

    /// The digest of the key an `Authorization` header presents, when it is one of the
    /// accepted keys. Compares against every key without stopping early, digest to
    /// digest in constant time: comparing the keys themselves would return at once on a
    /// length mismatch and so tell a caller how long the keys are.
    fn check(&self, header: Option<&str>) -> Result<[u8; 32], GatewayError> {
        let Some(key) = bearer(header) else {
            return Err(GatewayError::unauthorized(
                "missing API key: send Authorization: Bearer <key>",
            ));
        };
        let presented = digest(key);
        let accepted = self
            .digests
            .iter()
            .fold(false, |ok, d| ok | bool::from(d.ct_eq(&presented)));
        if accepted {
            Ok(presented)
        } else {
            Err(GatewayError::unauthorized("invalid API key"))
        }
    }
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Who a request comes from: the key it presented when keys are set, else its address.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// SHA-256 of the API key.
    Key([u8; 32]),
    Ip(IpAddr),
    /// Neither a key nor an address (a router served without connection info).
    Unknown,
}

impl Caller {
    /// The caller of a request that passed [`require_key`].
    pub fn of(req: &Request) -> Self {
        if let Some(caller) = req.extensions().get::<Caller>() {
            return caller.clone();
        }
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(Caller::Unknown, |ConnectInfo(addr)| Caller::Ip(addr.ip()))
    }
}

impl fmt::Display for Caller {
    /// A short id safe to log: never the key itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Key(digest) => {
                f.write_str("key:")?;
                digest[..4].iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            Caller::Ip(ip) => write!(f, "ip:{ip}"),
            Caller::Unknown => f.write_str("unknown"),
        }
    }
}

/// Middleware: without keys configured, requests pass; with them, a request without an
/// accepted key gets 401 in dialect `D`'s shape, and one with a key carries its
/// [`Caller`].
pub async fn require_key<D: Dialect>(
    State(keys): State<Arc<Keys>>,
    mut req: Request,
    next: Next,
) -> Response {
    if keys.digests.is_empty() {
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

/// The key of an `Authorization: Bearer <key>` header; an empty key is no key.
fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, key) = value.split_once(' ').unwrap_or((value, ""));
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
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
        let keys = Keys {
            digests: vec![digest("k1"), digest("k2")],
        };
        assert_eq!(keys.check(Some("Bearer k2")).ok(), Some(digest("k2")));
        for wrong in ["Bearer k", "Bearer k22", "Bearer ", "k1"] {
            assert!(keys.check(Some(wrong)).is_err(), "{wrong}");
        }
        assert!(Keys { digests: vec![] }.check(Some("Bearer k1")).is_err());
    }

    #[test]
    fn caller_ids_never_show_the_key() {
        let id = Caller::Key(digest("sk-very-secret-key")).to_string();
        assert!(id.starts_with("key:") && id.len() == 12, "{id}");
        assert!(!id.contains("secret"));
    }
}

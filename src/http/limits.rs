//! Per-caller limits: requests per minute (GCRA, `governor`) and streamed answers open at
//! once. The caller is its API key when `server.api_keys` is set, else its IP address.
//! Keys are only held as SHA-256 digests and logged as the first 8 hex digits of one.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{AUTHORIZATION, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use sha2::{Digest, Sha256};

use super::{auth, error_response, failed, Dialect, RequestLog};
use crate::config::ServerSettings;
use crate::error::GatewayError;

/// What a caller is told to wait when all its stream slots are taken: streams end at
/// their own pace, so a short, fixed wait.
const STREAM_RETRY_SECS: u64 = 5;
/// Without keys, forgotten IP addresses are pruned every this many checks.
const PRUNE_EVERY: u64 = 4096;

pub(super) static LIMIT_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-limit-requests");
pub(super) static REMAINING_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-requests");
pub(super) static RESET_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-reset-requests");

/// Who a limit is counted for.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum Caller {
    /// SHA-256 of the API key.
    Key([u8; 32]),
    Ip(IpAddr),
    /// Neither a key nor an address (a router served without connection info).
    Unknown,
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

type Limiter =
    RateLimiter<Caller, DashMapStateStore<Caller>, DefaultClock, StateInformationMiddleware>;

pub(crate) struct Limits {
    by_key: bool,
    per_minute: u32,
    requests: Option<Limiter>,
    max_streams: usize,
    /// Streams open per caller; a caller with none has no entry.
    streams: Mutex<HashMap<Caller, usize>>,
    checks: AtomicU64,
}

impl Limits {
    /// The limits the settings ask for, or `None` when both are off.
    pub(crate) fn from_settings(server: &ServerSettings) -> Option<Arc<Self>> {
        let requests = NonZeroU32::new(server.rate_limit_per_minute).map(|n| {
            RateLimiter::dashmap(Quota::per_minute(n))
                .with_middleware::<StateInformationMiddleware>()
        });
        if requests.is_none() && server.max_streams_per_key == 0 {
            return None;
        }
        Some(Arc::new(Self {
            by_key: !server.api_keys.is_empty(),
            per_minute: server.rate_limit_per_minute,
            requests,
            max_streams: server.max_streams_per_key as usize,
            streams: Mutex::new(HashMap::new()),
            checks: AtomicU64::new(0),
        }))
    }

    fn caller(&self, req: &Request) -> Caller {
        if self.by_key {
            // The key check ran first, so this is one of the configured keys.
            let key = auth::bearer(
                req.headers()
                    .get(AUTHORIZATION)
                    .and_then(|v| v.to_str().ok()),
            );
            if let Some(key) = key {
                return Caller::Key(Sha256::digest(key.as_bytes()).into());
            }
        }
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(Caller::Unknown, |ConnectInfo(addr)| Caller::Ip(addr.ip()))
    }

    /// Counts one request; `Err` with the seconds to wait when over the limit.
    fn check_request(&self, caller: &Caller) -> Result<Option<u32>, u64> {
        let Some(limiter) = &self.requests else {
            return Ok(None);
        };
        if !self.by_key && self.checks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == 0 {
            limiter.retain_recent();
        }
        match limiter.check_key(caller) {
            Ok(state) => Ok(Some(state.remaining_burst_capacity())),
            Err(not_until) => {
                let wait = not_until.wait_time_from(limiter.clock().now());
                Err(wait.as_secs_f64().ceil().max(1.0) as u64)
            }
        }
    }

    fn claim_stream(self: &Arc<Self>, caller: &Caller) -> Option<StreamSlot> {
        let mut open = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(caller.clone()).or_default();
        if *n >= self.max_streams {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            limits: self.clone(),
            caller: caller.clone(),
        })
    }
}

/// One of a caller's stream slots, given back when dropped (the stream ended, failed, or
/// its client went away).
pub(crate) struct StreamSlot {
    limits: Arc<Limits>,
    caller: Caller,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self
            .limits
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.caller) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.caller);
            }
        }
    }
}

/// Lets a chat handler claim a stream slot for the caller of its request (present when
/// `server.max_streams_per_key` is set).
#[derive(Clone)]
pub(crate) struct StreamGate {
    limits: Arc<Limits>,
    caller: Caller,
}

/// A 429 for a streamed answer, to render with its request's log.
pub(crate) struct StreamsLimited {
    error: GatewayError,
}

impl StreamsLimited {
    pub(crate) fn respond(self, log: RequestLog) -> Response {
        let mut response = failed(log, self.error);
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(STREAM_RETRY_SECS));
        response
    }
}

/// For a streamed answer, claims one of the caller's stream slots and gives it to `log`,
/// which holds it as long as the stream lives. Non-streamed answers take no slot.
pub(crate) fn claim_stream(
    gate: Option<&StreamGate>,
    stream: bool,
    log: &mut RequestLog,
) -> Result<(), StreamsLimited> {
    let Some(gate) = gate.filter(|_| stream) else {
        return Ok(());
    };
    match gate.limits.claim_stream(&gate.caller) {
        Some(slot) => {
            log.hold(slot);
            Ok(())
        }
        None => {
            metrics::counter!("assist_rate_limited_total", "limit" => "streams").increment(1);
            tracing::warn!(
                caller = %gate.caller,
                limit = "streams",
                max_streams = gate.limits.max_streams,
                "rate limited"
            );
            Err(StreamsLimited {
                error: GatewayError::rate_limited(format!(
                    "{} streamed answers are already open for this {} (server.max_streams_per_key); retry when one ends",
                    gate.limits.max_streams,
                    if gate.limits.by_key { "API key" } else { "client" },
                )),
            })
        }
    }
}

/// Middleware: counts the request against the caller's per-minute limit (429 over it) and
/// hands the handlers a `StreamGate`. `/health` is never limited; without limits
/// configured, requests pass untouched.
pub(crate) async fn enforce(
    State(limits): State<Option<Arc<Limits>>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(limits) = limits.filter(|_| req.uri().path() != "/health") else {
        return next.run(req).await;
    };
    let caller = limits.caller(&req);
    let remaining = match limits.check_request(&caller) {
        Ok(remaining) => remaining,
        Err(retry_after) => {
            metrics::counter!("assist_rate_limited_total", "limit" => "requests").increment(1);
            tracing::warn!(
                caller = %caller,
                limit = "requests",
                retry_after_secs = retry_after,
                "rate limited"
            );
            let e = GatewayError::rate_limited(format!(
                "rate limit of {} requests per minute reached (server.rate_limit_per_minute); retry in {retry_after} s",
                limits.per_minute
            ));
            let mut response = error_response(Dialect::of_path(req.uri().path()), &e);
            let headers = response.headers_mut();
            headers.insert(RETRY_AFTER, HeaderValue::from(retry_after));
            rate_headers(headers, limits.per_minute, 0, Some(retry_after));
            return response;
        }
    };
    if limits.max_streams > 0 {
        req.extensions_mut().insert(StreamGate {
            limits: limits.clone(),
            caller,
        });
    }
    let mut response = next.run(req).await;
    if let Some(remaining) = remaining {
        rate_headers(response.headers_mut(), limits.per_minute, remaining, None);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_ids_never_show_the_key() {
        let key = "sk-very-secret-key";
        let id = Caller::Key(Sha256::digest(key.as_bytes()).into()).to_string();
        assert!(id.starts_with("key:") && id.len() == 12, "{id}");
        assert!(!id.contains("secret"));
    }

    #[test]
    fn stream_slots_are_given_back_when_dropped() {
        let mut server = crate::config::Settings::load_without_env(None)
            .unwrap()
            .server;
        server.max_streams_per_key = 2;
        let limits = Limits::from_settings(&server).unwrap();
        let a = Caller::Ip([127, 0, 0, 1].into());
        let b = Caller::Ip([127, 0, 0, 2].into());
        let one = limits.claim_stream(&a).unwrap();
        let _two = limits.claim_stream(&a).unwrap();
        assert!(limits.claim_stream(&a).is_none(), "a third is refused");
        assert!(
            limits.claim_stream(&b).is_some(),
            "other callers are unaffected"
        );
        drop(one);
        assert!(
            limits.claim_stream(&a).is_some(),
            "a freed slot is reusable"
        );
    }
}

//! Per-caller limits: requests per minute (GCRA, `governor`) and streamed answers open at
//! once. The caller is its API key (as a digest) when `server.api_keys` is set, else its
//! IP address; it is logged as a short id, never as the key.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

use super::auth::Caller;
use super::dialect::{ApiError, Dialect};
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

type Limiter =
    RateLimiter<Caller, DashMapStateStore<Caller>, DefaultClock, StateInformationMiddleware>;

pub struct Limits {
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
    pub fn from_settings(server: &ServerSettings) -> Option<Arc<Self>> {
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

    /// Counts one request; `Err` with the seconds to wait when over the limit.
    fn check_request(&self, caller: &Caller) -> Result<Option<u32>, u64> {
        let Some(limiter) = &self.requests else {
            return Ok(None);
        };
        if !self.by_key
            && self
                .checks
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(PRUNE_EVERY)
        {
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
pub struct StreamSlot {
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
pub struct StreamGate {
    limits: Arc<Limits>,
    caller: Caller,
}

impl StreamGate {
    /// One of the caller's stream slots, held as long as the stream lives; a 429 with
    /// `retry-after` when all are taken.
    pub fn claim(&self) -> Result<StreamSlot, GatewayError> {
        if let Some(slot) = self.limits.claim_stream(&self.caller) {
            return Ok(slot);
        }
        metrics::counter!("assist_rate_limited_total", "limit" => "streams").increment(1);
        tracing::warn!(
            caller = %self.caller,
            limit = "streams",
            max_streams = self.limits.max_streams,
            "rate limited"
        );
        let mut e = GatewayError::rate_limited(format!(
            "{} streamed answers are already open for this {} (server.max_streams_per_key); retry when one ends",
            self.limits.max_streams,
            if self.limits.by_key { "API key" } else { "client" },
        ));
        e.retry_after = Some(STREAM_RETRY_SECS);
        Err(e)
    }
}

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
    let caller = Caller::of(&req);
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
            let mut e = GatewayError::rate_limited(format!(
                "rate limit of {} requests per minute reached (server.rate_limit_per_minute); retry in {retry_after} s",
                limits.per_minute
            ));
            e.retry_after = Some(retry_after);
            let mut response = ApiError::<D>::from(e).into_response();
            rate_headers(
                response.headers_mut(),
                limits.per_minute,
                0,
                Some(retry_after),
            );
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

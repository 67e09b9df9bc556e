//! Who calls and what they may do, whatever the protocol: bearer keys, the caller's
//! identity, and per-caller limits (requests per minute, streamed answers open at once).
//!
//! When `server.api_keys` is set every API but liveness needs a key. The keys are held as
//! SHA-256 digests, computed once at start-up; the digest of the key a request presented
//! is who the caller is (rate limits, conversation memory), else its IP address. A caller
//! is logged as a short id, never as the key. The HTTP and gRPC servers share one
//! [`Limits`], so a caller's limits count across both.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{ServerSettings, SessionBackend, SessionSettings};
use crate::error::GatewayError;
use crate::sessions::shared_limits::{SharedLimits, LEASE};
use crate::sessions::Owner;

/// The accepted keys, as digests, each with its name and limits.
pub struct Keys {
    digests: Vec<[u8; 32]>,
    ids: Vec<Arc<KeyId>>,
    /// `server.admin_keys`: operator keys, accepted wherever an API key is.
    admin: Vec<[u8; 32]>,
}

/// Who may reach the operator routes (`/metrics`, `/v1/knowledge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// An operator key was presented.
    Key,
    /// No keys of either kind are set: the gateway is open, these routes with it.
    Open,
}

/// What an accepted key is known as: its name (never the key) and its own limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyId {
    /// The configured name, else `key-` and the key's place in `server.api_keys` (1 for
    /// the first): shown in metrics, traces and `/v1/usage`. Nothing derived from the key
    /// itself, which would confirm a guessed key offline.
    pub name: String,
    /// Whose counts the usage store holds: the configured name, else `key-` and the start
    /// of the key's SHA-256 (stays with the key when the list is reordered; never shown).
    pub account: String,
    /// Tokens per UTC day (0: no limit).
    pub tokens_per_day: u64,
    /// Answers per minute (0: no limit).
    pub requests_per_minute: u64,
}

impl KeyId {
    /// Whether the key has a limit of its own.
    pub fn limited(&self) -> bool {
        self.tokens_per_day > 0 || self.requests_per_minute > 0
    }
}

impl Keys {
    pub fn from_settings(server: &ServerSettings) -> Arc<Self> {
        let digests: Vec<[u8; 32]> = server.api_keys.iter().map(|k| digest(&k.key)).collect();
        let ids = server
            .api_keys
            .iter()
            .zip(&digests)
            .enumerate()
            .map(|(i, (k, d))| {
                let hex: String = d[..4].iter().map(|b| format!("{b:02x}")).collect();
                Arc::new(KeyId {
                    name: k.name.clone().unwrap_or_else(|| format!("key-{}", i + 1)),
                    account: k.name.clone().unwrap_or_else(|| format!("key-{hex}")),
                    tokens_per_day: k.tokens_per_day,
                    requests_per_minute: k.requests_per_minute,
                })
            })
            .collect();
        let admin = server.admin_keys.iter().map(|k| digest(k.trim())).collect();
        Arc::new(Self {
            digests,
            ids,
            admin,
        })
    }

    /// Whether a request may reach the operator routes: with `server.admin_keys` set, an
    /// operator key is needed (401 without a key or with an unknown one, 403 with an API
    /// key); with only `server.api_keys`, nobody over the network (403); with neither,
    /// anyone, as every route of an open gateway.
    pub fn operator(&self, header: Option<&str>) -> Result<Operator, GatewayError> {
        if self.admin.is_empty() {
            return if self.digests.is_empty() {
                Ok(Operator::Open)
            } else {
                Err(GatewayError::forbidden(
                    "operator_only",
                    "this route needs an operator key and none is set (server.admin_keys)",
                ))
            };
        }
        let Some(key) = bearer(header) else {
            return Err(GatewayError::unauthorized(
                "missing operator key: send Authorization: Bearer <key>",
            ));
        };
        let presented = digest(key);
        if any_equal(&self.admin, &presented) {
            Ok(Operator::Key)
        } else if any_equal(&self.digests, &presented) {
            Err(GatewayError::forbidden(
                "operator_only",
                "this route needs an operator key (server.admin_keys), not an API key",
            ))
        } else {
            Err(GatewayError::unauthorized("invalid API key"))
        }
    }

    /// The name and limits of the key a caller presented (`None` for a caller known by
    /// its address).
    pub fn id(&self, caller: &Caller) -> Option<Arc<KeyId>> {
        let Caller::Key(digest) = caller else {
            return None;
        };
        self.digests
            .iter()
            .position(|d| d == digest)
            .map(|i| self.ids[i].clone())
    }

    /// Whether a key is needed (`server.api_keys` is set).
    pub fn required(&self) -> bool {
        !self.digests.is_empty()
    }

    /// The digest of the key an `Authorization` header presents, when it is one of the
    /// accepted keys. Compares against every key without stopping early, digest to
    /// digest in constant time: comparing the keys themselves would return at once on a
    /// length mismatch and so tell a caller how long the keys are.
    pub fn check(&self, header: Option<&str>) -> Result<[u8; 32], GatewayError> {
        let Some(key) = bearer(header) else {
            return Err(GatewayError::unauthorized(
                "missing API key: send Authorization: Bearer <key>",
            ));
        };
        let presented = digest(key);
        let accepted = any_equal(&self.digests, &presented) | any_equal(&self.admin, &presented);
        if accepted {
            Ok(presented)
        } else {
            Err(GatewayError::unauthorized("invalid API key"))
        }
    }
}

/// Whether `presented` is one of `digests`, compared with every one in constant time.
fn any_equal(digests: &[[u8; 32]], presented: &[u8; 32]) -> bool {
    digests
        .iter()
        .fold(false, |ok, d| ok | bool::from(d.ct_eq(presented)))
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
    /// A caller known by its address (a gateway without keys), or by nothing.
    pub fn at(peer: Option<SocketAddr>) -> Self {
        peer.map_or(Caller::Unknown, |addr| Caller::Ip(addr.ip()))
    }

    /// Whose sessions the caller reaches: its key's own with keys; without, the one
    /// namespace every caller shares.
    pub fn owner(&self) -> Owner {
        match self {
            Caller::Key(digest) => Owner::key(digest),
            _ => Owner::shared(),
        }
    }
}

impl Caller {
    /// Who the caller is in counts shared through Redis: the key's whole digest, or the
    /// address (never the key itself).
    fn shared_id(&self) -> String {
        match self {
            Caller::Key(digest) => digest.iter().map(|b| format!("{b:02x}")).collect(),
            Caller::Ip(ip) => format!("ip:{ip}"),
            Caller::Unknown => "unknown".into(),
        }
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

/// The key of an `Authorization: Bearer <key>` header; an empty key is no key.
fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, key) = value.split_once(' ').unwrap_or((value, ""));
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

/// What a caller is told to wait when all its stream slots are taken: streams end at
/// their own pace, so a short, fixed wait.
const STREAM_RETRY_SECS: u64 = 5;
/// Without keys, forgotten IP addresses are pruned every this many checks.
const PRUNE_EVERY: u64 = 4096;

type Limiter =
    RateLimiter<Caller, DashMapStateStore<Caller>, DefaultClock, StateInformationMiddleware>;

pub struct Limits {
    by_key: bool,
    per_minute: u32,
    requests: Option<Limiter>,
    /// Counted in Redis, shared by every replica (sessions in Redis); else in this process.
    shared: Option<Arc<SharedLimits>>,
    max_streams: usize,
    /// Streams open per caller; a caller with none has no entry.
    streams: Mutex<HashMap<Caller, usize>>,
    checks: AtomicU64,
}

impl Limits {
    /// The limits the settings ask for, or `None` when both are off. With the sessions in
    /// Redis they are counted there, across replicas.
    pub fn from_settings(
        server: &ServerSettings,
        sessions: &SessionSettings,
    ) -> anyhow::Result<Option<Arc<Self>>> {
        let requests = NonZeroU32::new(server.rate_limit_per_minute).map(|n| {
            RateLimiter::dashmap(Quota::per_minute(n))
                .with_middleware::<StateInformationMiddleware>()
        });
        if requests.is_none() && server.max_streams_per_key == 0 {
            return Ok(None);
        }
        let shared = match (sessions.backend, &sessions.redis_url) {
            (SessionBackend::Redis, Some(url)) => {
                Some(Arc::new(SharedLimits::new(url, &sessions.redis_prefix)?))
            }
            _ => None,
        };
        Ok(Some(Arc::new(Self {
            by_key: !server.api_keys.is_empty(),
            per_minute: server.rate_limit_per_minute,
            requests,
            shared,
            max_streams: server.max_streams_per_key as usize,
            streams: Mutex::new(HashMap::new()),
            checks: AtomicU64::new(0),
        })))
    }

    /// The per-minute limit (0: none).
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Whether the limits are counted in Redis, shared by the replicas.
    pub fn shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Counts one request of `caller`: what it may still do, or a 429 (`retry_after`
    /// set) when it is over its per-minute limit.
    pub async fn admit(self: &Arc<Self>, caller: &Caller) -> Result<Admitted, GatewayError> {
        let checked = match &self.shared {
            Some(shared) if self.per_minute > 0 => {
                match shared.request(&caller.shared_id(), self.per_minute).await {
                    Ok(checked) => checked.map(Some),
                    // Redis down (said once by `shared`): counted in this replica.
                    Err(_) => self.check_request(caller),
                }
            }
            _ => self.check_request(caller),
        };
        self.admitted(caller, checked)
    }

    /// Counts one request of `caller` in this process alone; `None` when the limits are
    /// counted in Redis (then `admit`, which awaits it, counts).
    pub fn admit_here(self: &Arc<Self>, caller: &Caller) -> Option<Result<Admitted, GatewayError>> {
        if self.shared.is_some() {
            return None;
        }
        let checked = self.check_request(caller);
        Some(self.admitted(caller, checked))
    }

    /// What a request's count (`Err`: seconds to wait) means for its caller.
    fn admitted(
        self: &Arc<Self>,
        caller: &Caller,
        checked: Result<Option<u32>, u64>,
    ) -> Result<Admitted, GatewayError> {
        let remaining = checked.map_err(|retry_after| {
            metrics::counter!("assist_rate_limited_total", "limit" => "requests").increment(1);
            tracing::warn!(
                caller = %caller,
                limit = "requests",
                retry_after_secs = retry_after,
                "rate limited"
            );
            let mut e = GatewayError::rate_limited(format!(
                "rate limit of {} requests per minute reached (server.rate_limit_per_minute); retry in {retry_after} s",
                self.per_minute
            ));
            e.retry_after = Some(retry_after);
            e
        })?;
        let gate = (self.max_streams > 0).then(|| StreamGate {
            limits: self.clone(),
            caller: caller.clone(),
        });
        Ok(Admitted { remaining, gate })
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

    /// One of `caller`'s stream slots, or `None` when all are taken: in Redis (held by a
    /// lease renewed while the slot lives) when shared, else in this process.
    async fn claim_stream(self: &Arc<Self>, caller: &Caller) -> Option<StreamSlot> {
        if let Some(shared) = &self.shared {
            let id = uuid::Uuid::new_v4().to_string();
            let who = caller.shared_id();
            return match shared.claim(&who, self.max_streams, &id).await {
                Ok(true) => Some(StreamSlot::Shared(SharedSlot::hold(
                    shared.clone(),
                    who,
                    id,
                ))),
                Ok(false) => None,
                // Redis down (said once by `shared`): counted in this replica.
                Err(_) => self.claim_local(caller),
            };
        }
        self.claim_local(caller)
    }

    fn claim_local(self: &Arc<Self>, caller: &Caller) -> Option<StreamSlot> {
        let mut open = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(caller.clone()).or_default();
        if *n >= self.max_streams {
            return None;
        }
        *n += 1;
        Some(StreamSlot::Local {
            limits: self.clone(),
            caller: caller.clone(),
        })
    }
}

/// A request within its caller's limits.
pub struct Admitted {
    /// Requests left in the current minute (`None`: no per-minute limit).
    pub remaining: Option<u32>,
    /// The caller's stream slots (`None`: no limit on open streams).
    pub gate: Option<StreamGate>,
}

/// One of a caller's stream slots, given back when dropped (the stream ended, failed, or
/// its client went away).
pub enum StreamSlot {
    Local { limits: Arc<Limits>, caller: Caller },
    Shared(SharedSlot),
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let StreamSlot::Local { limits, caller } = self else {
            return;
        };
        let mut open = limits.streams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(caller) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(caller);
            }
        }
    }
}

/// A slot held in Redis: its lease renewed while it lives, given back when dropped.
pub struct SharedSlot {
    shared: Arc<SharedLimits>,
    caller: String,
    id: String,
    renewing: tokio::task::JoinHandle<()>,
}

impl SharedSlot {
    fn hold(shared: Arc<SharedLimits>, caller: String, id: String) -> Self {
        let renewing = {
            let (shared, caller, id) = (shared.clone(), caller.clone(), id.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(LEASE / 3).await;
                    if let Err(e) = shared.renew(&caller, &id).await {
                        tracing::warn!(error = %format!("{e:#}"), "stream limits: could not renew a slot's lease");
                    }
                }
            })
        };
        Self {
            shared,
            caller,
            id,
            renewing,
        }
    }
}

impl Drop for SharedSlot {
    fn drop(&mut self) {
        self.renewing.abort();
        let (shared, caller, id) = (
            self.shared.clone(),
            std::mem::take(&mut self.caller),
            std::mem::take(&mut self.id),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = shared.release(&caller, &id).await {
                    tracing::warn!(error = %format!("{e:#}"), "stream limits: a slot is freed when its lease ends");
                }
            });
        }
    }
}

/// Lets a chat flow claim a stream slot for the caller of its request (present when
/// `server.max_streams_per_key` is set).
#[derive(Clone)]
pub struct StreamGate {
    limits: Arc<Limits>,
    caller: Caller,
}

impl StreamGate {
    /// One of the caller's stream slots, held as long as the stream lives; a 429 with
    /// `retry-after` when all are taken.
    pub async fn claim(&self) -> Result<StreamSlot, GatewayError> {
        if let Some(slot) = self.limits.claim_stream(&self.caller).await {
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

#[cfg(test)]
mod key_tests {
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
            ids: Vec::new(),
            admin: vec![digest("op")],
        };
        assert_eq!(keys.check(Some("Bearer k2")).ok(), Some(digest("k2")));
        assert_eq!(keys.check(Some("Bearer op")).ok(), Some(digest("op")));
        for wrong in ["Bearer k", "Bearer k22", "Bearer ", "k1", "Bearer o"] {
            assert!(keys.check(Some(wrong)).is_err(), "{wrong}");
        }
        assert!(Keys {
            digests: vec![],
            ids: vec![],
            admin: vec![],
        }
        .check(Some("Bearer k1"))
        .is_err());
    }

    #[test]
    fn operator_routes_take_operator_keys_only() {
        let keys = Keys {
            digests: vec![digest("k1")],
            ids: Vec::new(),
            admin: vec![digest("op")],
        };
        assert_eq!(keys.operator(Some("Bearer op")), Ok(Operator::Key));
        let status = |h| keys.operator(h).map_err(|e| e.status.as_u16());
        assert_eq!(status(Some("Bearer k1")), Err(403));
        assert_eq!(status(Some("Bearer nope")), Err(401));
        assert_eq!(status(None), Err(401));
        let only_api = Keys {
            admin: vec![],
            ..keys
        };
        assert_eq!(
            only_api
                .operator(Some("Bearer k1"))
                .map_err(|e| e.status.as_u16()),
            Err(403)
        );
        let open = Keys {
            digests: vec![],
            ids: vec![],
            admin: vec![],
        };
        assert_eq!(open.operator(None), Ok(Operator::Open));
    }

    #[test]
    fn caller_ids_never_show_the_key() {
        let id = Caller::Key(digest("sk-very-secret-key")).to_string();
        assert!(id.starts_with("key:") && id.len() == 12, "{id}");
        assert!(!id.contains("secret"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_slots_are_given_back_when_dropped() {
        let settings = crate::config::Settings::load_without_env(None).unwrap();
        let mut server = settings.server;
        server.max_streams_per_key = 2;
        let limits = Limits::from_settings(&server, &settings.sessions)
            .unwrap()
            .unwrap();
        let a = Caller::Ip([127, 0, 0, 1].into());
        let b = Caller::Ip([127, 0, 0, 2].into());
        let one = limits.claim_local(&a).unwrap();
        let _two = limits.claim_local(&a).unwrap();
        assert!(limits.claim_local(&a).is_none(), "a third is refused");
        assert!(
            limits.claim_local(&b).is_some(),
            "other callers are unaffected"
        );
        drop(one);
        assert!(limits.claim_local(&a).is_some(), "a freed slot is reusable");
    }
}

//! The open connections of one listener, and what keeps their number and their life
//! bounded whatever the protocol (HTTP/1.1 and HTTP/2 alike):
//!
//! - a connection with no request in flight for `idle_timeout` is closed (an HTTP/2
//!   connection that only sent its preface, or a HEADERS frame that never ends, is idle:
//!   no request reached the service);
//! - a response whose client stops taking it (HTTP/2 flow control holds the stream while
//!   the socket stays writable, so no socket deadline sees it) closes its connection once
//!   it waited `write_timeout` for the client;
//! - at most `max` connections are open: one more evicts the connection idle longest,
//!   or, when every one is busy, is refused. Keyless idle connections can therefore never
//!   keep `/health` or an answer out;
//! - at most `per_address` of them come from one client address: one more from it evicts
//!   that address's connection idle longest, or is refused when all of them are busy, so
//!   one address holding busy connections (request bodies sent a byte at a time) leaves
//!   the rest of the room to others (a health checker, the other users).
//!
//! One sweeper task per listener checks every connection a few times a second.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::Notify;

/// Why a connection was closed by the gateway (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// No request in flight for the idle timeout.
    Idle,
    /// A response waited for its client longer than the write timeout.
    Stalled,
    /// Evicted to make room for a new connection at the cap.
    Evicted,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Closed::Idle => "idle",
            Closed::Stalled => "stalled",
            Closed::Evicted => "evicted",
        }
    }
}

/// Why a new connection was refused (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every open connection is busy, at `max`.
    Full,
    /// Its address holds `per_address` busy connections.
    Address,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Full => "full",
            Refused::Address => "address",
        }
    }
}

/// Deadlines and the caps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max: usize,
    /// Most connections from one client address (0: no cap of its own).
    pub per_address: usize,
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
}

/// One open connection.
pub struct Connection {
    id: u64,
    /// The client's address (`None`: not known).
    address: Option<IpAddr>,
    /// Requests in flight: from the service's call to the end (or drop) of the response
    /// body.
    active: AtomicUsize,
    /// Milliseconds (since the registry started) when `active` last became 0.
    idle_since: AtomicU64,
    /// Responses being written: for each, since when it waits for the client to take the
    /// frame it handed over (0: not waiting), by the gateway's own response number
    /// (foldhash, not SipHash: an insert and a removal each time a response waits, about
    /// 25 an answer).
    waiting: Mutex<HashMap<u64, u64, foldhash::fast::RandomState>>,
    next_response: AtomicU64,
    /// Set when the gateway closes the connection, with the reason.
    close: Notify,
    reason: Mutex<Option<Closed>>,
    registry: Weak<Inner>,
}

impl Connection {
    /// Resolves when the gateway decided to close this connection; why.
    pub async fn closed(&self) -> Closed {
        loop {
            if let Some(reason) = *self.reason.lock().unwrap_or_else(|e| e.into_inner()) {
                return reason;
            }
            self.close.notified().await;
        }
    }

    fn shut(&self, why: Closed) {
        let mut reason = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if reason.is_none() {
            *reason = Some(why);
            metrics::counter!("assist_connections_closed_total", "reason" => why.as_str())
                .increment(1);
            self.close.notify_one();
        }
    }

    fn now(&self) -> u64 {
        self.registry.upgrade().map_or(0, |r| r.now())
    }

    /// A request arrived: the connection is busy until the returned guard (kept by the
    /// response body) is dropped.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.active.fetch_add(1, Ordering::AcqRel);
        let response = self.next_response.fetch_add(1, Ordering::Relaxed);
        InFlight {
            connection: self.clone(),
            response,
        }
    }

    fn busy(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }
}

/// A request in flight on a connection; dropping it makes the connection idle again
/// (when it was the last).
pub struct InFlight {
    connection: Arc<Connection>,
    response: u64,
}

impl InFlight {
    fn waiting(&self, since: Option<u64>) {
        let mut waiting = self
            .connection
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match since {
            Some(at) => {
                waiting.insert(self.response, at.max(1));
            }
            None => {
                waiting.remove(&self.response);
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.waiting(None);
        let c = &self.connection;
        c.idle_since.store(c.now(), Ordering::Release);
        c.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in flight until it ends, and says when it has
/// handed a frame over and waits for the client to want the next (a client that never
/// does is stalled).
pub struct Tracked<B> {
    inner: B,
    flight: Option<InFlight>,
}

/// `body` kept in flight by `flight`.
pub fn track(body: Body, flight: InFlight) -> Body {
    Body::new(Tracked {
        inner: body,
        flight: Some(flight),
    })
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Some(f) = &this.flight {
            // Asked again: the client took what it was given.
            f.waiting(None);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                if let Some(f) = &this.flight {
                    f.waiting(Some(f.connection.now()));
                }
            }
            Poll::Ready(_) => {
                // The end, or an error: the request is over.
                this.flight = None;
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

struct Inner {
    limits: Limits,
    started: Instant,
    next_id: AtomicU64,
    open: Mutex<Open>,
    /// Connections evicted whose socket is not closed yet (they still hold a file).
    closing: AtomicUsize,
    /// Told when an evicted connection has closed.
    closed_one: Notify,
}

/// Evicted connections still closing beyond which no new connection is accepted until
/// one has closed: under a flood of new connections, evictions must free their files
/// faster than accepts take new ones.
const CLOSING_AT_MOST: usize = 8;

/// The open connections, and how many each client address holds.
#[derive(Default)]
struct Open {
    by_id: HashMap<u64, Arc<Connection>>,
    by_address: HashMap<IpAddr, usize>,
}

impl Open {
    fn len(&self) -> usize {
        self.by_id.len()
    }

    fn insert(&mut self, c: Arc<Connection>) {
        if let Some(ip) = c.address {
            *self.by_address.entry(ip).or_default() += 1;
        }
        self.by_id.insert(c.id, c);
    }

    fn remove(&mut self, id: u64) {
        let Some(c) = self.by_id.remove(&id) else {
            return;
        };
        if let Some(ip) = c.address {
            if let Some(n) = self.by_address.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.by_address.remove(&ip);
                }
            }
        }
    }

    fn held_by(&self, ip: IpAddr) -> usize {
        self.by_address.get(&ip).copied().unwrap_or(0)
    }
}

impl Inner {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

/// The connections of one listener.
#[derive(Clone)]
pub struct Registry(Arc<Inner>);

/// A connection's place in the registry; leaving it (on drop) removes the connection.
pub struct Admitted {
    pub connection: Arc<Connection>,
    registry: Registry,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let inner = &self.registry.0;
        let evicted = *self
            .connection
            .reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            == Some(Closed::Evicted);
        if evicted {
            inner.closing.fetch_sub(1, Ordering::AcqRel);
            inner.closed_one.notify_waiters();
        }
        let mut open = inner.open.lock().unwrap_or_else(|e| e.into_inner());
        open.remove(self.connection.id);
        metrics::gauge!("assist_connections_open").set(open.len() as f64);
    }
}

impl Registry {
    pub fn new(limits: Limits) -> Self {
        Self(Arc::new(Inner {
            limits,
            started: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::default(),
            closing: AtomicUsize::new(0),
            closed_one: Notify::new(),
        }))
    }

    /// Waits while too many evicted connections are still closing (see `CLOSING_AT_MOST`).
    pub async fn room(&self) {
        loop {
            let notified = self.0.closed_one.notified();
            if self.0.closing.load(Ordering::Acquire) <= CLOSING_AT_MOST {
                return;
            }
            notified.await;
        }
    }

    /// Evicts the connection idle longest (out of file descriptors: make room now);
    /// whether there was one.
    pub fn evict_idlest(&self) -> bool {
        let mut open = self.0.open.lock().unwrap_or_else(|e| e.into_inner());
        self.evict_locked(&mut open, None)
    }

    /// Evicts the connection idle longest (of those from `address`, when given).
    fn evict_locked(&self, open: &mut Open, address: Option<IpAddr>) -> bool {
        let oldest = open
            .by_id
            .values()
            .filter(|c| address.is_none() || c.address == address)
            .filter(|c| !c.busy() && c.reason.lock().is_ok_and(|r| r.is_none()))
            .min_by_key(|c| c.idle_since.load(Ordering::Acquire))
            .cloned();
        match oldest {
            Some(c) => {
                // Out of the count at once: it is closing.
                open.remove(c.id);
                self.0.closing.fetch_add(1, Ordering::AcqRel);
                c.shut(Closed::Evicted);
                true
            }
            None => false,
        }
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.0.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes a new connection from `address` in, making room at a cap by evicting the
    /// connection idle longest (that address's, at its own cap); refused, and why, when
    /// every connection that could make room is busy.
    pub fn admit(&self, address: Option<IpAddr>) -> Result<Admitted, Refused> {
        let inner = &self.0;
        let mut open = inner.open.lock().unwrap_or_else(|e| e.into_inner());
        let per_address = inner.limits.per_address;
        let refused = if let Some(ip) =
            address.filter(|ip| per_address > 0 && open.held_by(*ip) >= per_address)
        {
            (!self.evict_locked(&mut open, Some(ip))).then_some(Refused::Address)
        } else {
            (open.len() >= inner.limits.max && !self.evict_locked(&mut open, None))
                .then_some(Refused::Full)
        };
        if let Some(why) = refused {
            metrics::counter!("assist_connections_refused_total", "reason" => why.as_str())
                .increment(1);
            return Err(why);
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection {
            id,
            address,
            active: AtomicUsize::new(0),
            idle_since: AtomicU64::new(inner.now()),
            waiting: Mutex::default(),
            next_response: AtomicU64::new(0),
            close: Notify::new(),
            reason: Mutex::new(None),
            registry: Arc::downgrade(inner),
        });
        open.insert(connection.clone());
        metrics::counter!("assist_connections_accepted_total").increment(1);
        metrics::gauge!("assist_connections_open").set(open.len() as f64);
        Ok(Admitted {
            connection,
            registry: self.clone(),
        })
    }

    /// Closes the connections idle or stalled past their deadline; runs until the
    /// registry is dropped by its listener.
    pub async fn sweep(self) {
        let limits = self.0.limits;
        let every = (limits.idle_timeout.min(limits.write_timeout) / 4)
            .clamp(Duration::from_millis(20), Duration::from_secs(1));
        let weak = Arc::downgrade(&self.0);
        drop(self);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(inner) = weak.upgrade() else { return };
            let now = inner.now();
            let idle_ms = limits.idle_timeout.as_millis() as u64;
            let write_ms = limits.write_timeout.as_millis() as u64;
            let open: Vec<Arc<Connection>> = inner
                .open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .by_id
                .values()
                .cloned()
                .collect();
            drop(inner);
            for c in open {
                if !c.busy() {
                    if now.saturating_sub(c.idle_since.load(Ordering::Acquire)) >= idle_ms {
                        c.shut(Closed::Idle);
                    }
                    continue;
                }
                let stalled = c
                    .waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .any(|&since| now.saturating_sub(since) >= write_ms);
                if stalled {
                    c.shut(Closed::Stalled);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(max: usize) -> Registry {
        Registry::new(Limits {
            max,
            per_address: 2,
            idle_timeout: Duration::from_millis(100),
            write_timeout: Duration::from_millis(100),
        })
    }

    #[tokio::test]
    async fn at_the_cap_the_longest_idle_goes_and_busy_ones_stay() {
        let r = registry(2);
        let a = r.admit(None).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let b = r.admit(None).unwrap();
        let _busy = b.connection.start();
        // a is idle longest: evicted for c.
        let c = r.admit(None).unwrap();
        assert_eq!(a.connection.closed().await, Closed::Evicted);
        assert_eq!(r.len(), 2);
        // b and c busy: a fourth is refused.
        let _also_busy = c.connection.start();
        assert_eq!(r.admit(None).err(), Some(Refused::Full));
        drop(a);
        assert_eq!(r.len(), 2);
    }

    /// One address at its own cap makes room among its own idle connections, or is
    /// refused; other addresses still get in.
    #[tokio::test]
    async fn one_address_cannot_take_every_place() {
        let r = registry(4);
        let (one, two): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a = r.admit(Some(one)).unwrap();
        let _a_busy = a.connection.start();
        let b = r.admit(Some(one)).unwrap();
        // b is the address's only idle one: it makes room for c.
        let c = r.admit(Some(one)).unwrap();
        assert_eq!(b.connection.closed().await, Closed::Evicted);
        let _c_busy = c.connection.start();
        assert_eq!(r.admit(Some(one)).err(), Some(Refused::Address));
        // Another address finds the room the first one could not take.
        let d = r.admit(Some(two)).unwrap();
        assert!(d.connection.reason.lock().unwrap().is_none());
        drop(b);
        assert_eq!(r.len(), 3);
    }

    #[tokio::test]
    async fn idle_connections_close_and_busy_ones_do_not() {
        let r = registry(10);
        tokio::spawn(r.clone().sweep());
        let idle = r.admit(None).unwrap();
        let busy = r.admit(None).unwrap();
        let flight = busy.connection.start();
        let closed = tokio::time::timeout(Duration::from_secs(2), idle.connection.closed()).await;
        assert_eq!(closed.unwrap(), Closed::Idle);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(busy.connection.reason.lock().unwrap().is_none());
        // Once its request is over it is idle like any other.
        drop(flight);
        let closed = tokio::time::timeout(Duration::from_secs(2), busy.connection.closed()).await;
        assert_eq!(closed.unwrap(), Closed::Idle);
    }

    /// A response that handed over a frame and is never asked for the next one (the
    /// client's flow-control window stays shut) closes its connection.
    #[tokio::test]
    async fn a_response_the_client_stops_taking_closes_the_connection() {
        use http_body_util::BodyExt;
        let r = registry(10);
        tokio::spawn(r.clone().sweep());
        let admitted = r.admit(None).unwrap();
        let frames = futures::stream::iter(
            (0..3).map(|i| Ok::<_, std::io::Error>(Frame::data(Bytes::from(format!("{i}"))))),
        );
        let body = track(
            Body::new(http_body_util::StreamBody::new(frames)),
            admitted.connection.start(),
        );
        let mut body = body;
        // Taken promptly: no stall, and the end frees the connection.
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "0");
        let closed =
            tokio::time::timeout(Duration::from_secs(2), admitted.connection.closed()).await;
        assert_eq!(closed.unwrap(), Closed::Stalled);
        // A body read to its end leaves nothing waiting.
        let again = r.admit(None).unwrap();
        let frames = futures::stream::iter(
            (0..3).map(|i| Ok::<_, std::io::Error>(Frame::data(Bytes::from(format!("{i}"))))),
        );
        let body = track(
            Body::new(http_body_util::StreamBody::new(frames)),
            again.connection.start(),
        );
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(all, "012");
        assert!(!again.connection.busy());
    }
}

//! Conversation memory per caller and `session_id`.
//!
//! A session belongs to an [`Owner`]: the caller's API key (as a digest), or, on a gateway
//! without keys, the one namespace every caller shares. The same `session_id` under two
//! keys is two conversations.
//!
//! A [`SessionStore`] keeps each session's turns (embedded database under `data_dir`, or
//! Redis for several replicas), bounded in turns and bytes per session, in sessions per
//! owner and in all, and forgets sessions unused for the time-to-live while it runs.
//! [`Sessions`] adds what the pipeline needs on top: turns of one session run one at a
//! time, in arrival order (across replicas too, with Redis), and a turn waits for the
//! session's earlier one at most `sessions.wait_secs`.

pub mod embedded;
mod link;
pub mod redis;
pub mod shared_limits;
pub mod usage;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::OwnedMutexGuard;

use crate::config::{SessionBackend, SessionSettings};
use crate::llm::{Message, Role, ToolCall};

/// Longest `session_id` accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Whose sessions these are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Owner(String);

impl Owner {
    /// The namespace every caller of a gateway without keys shares.
    pub fn shared() -> Self {
        Self(String::new())
    }

    /// A caller's own namespace, named by (half of) its API key's SHA-256 digest.
    pub fn key(digest: &[u8; 32]) -> Self {
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        Self(format!("k:{hex}"))
    }

    /// Whether this is the namespace of a gateway without keys.
    pub fn is_shared(&self) -> bool {
        self.0.is_empty()
    }

    /// The owner's name in the stores (`""` for the shared namespace).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One session: its owner and the client's id for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub owner: Owner,
    pub id: String,
}

impl SessionKey {
    /// The session's name in the stores: the id alone in the shared namespace (so sessions
    /// stored before owners existed keep working there), `owner/id` otherwise. Ids hold
    /// no `/` (see [`check_id`]), so names never collide.
    pub fn stored(&self) -> String {
        if self.owner.is_shared() {
            self.id.clone()
        } else {
            format!("{}/{}", self.owner.0, self.id)
        }
    }
}

/// A `session_id` is at most 256 bytes of ASCII letters, digits and `-_.:@+=~` (an empty
/// one means no session).
pub fn check_id(id: &str) -> Result<(), String> {
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "session_id is {} bytes long, more than the {MAX_ID_BYTES} accepted",
            id.len()
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:@+=~".contains(c);
    if let Some(c) = id.chars().find(|&c| !allowed(c)) {
        return Err(format!(
            "session_id may hold ASCII letters, digits and - _ . : @ + = ~ only, not {c:?}"
        ));
    }
    Ok(())
}

/// One question and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    pub user: String,
    pub assistant: String,
    /// The context items the question came with, named (`file src/a.rs`): a follow-up
    /// about "that file" knows which one it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached: Vec<String>,
    /// The client went away before the answer ended; `assistant` is what was streamed.
    #[serde(default)]
    pub interrupted: bool,
    /// Unix seconds.
    pub at: i64,
    /// The outputs of the previous answer's function calls the question came with
    /// (stored responses: a tool loop continued by `previous_response_id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<CallResult>,
    /// The function calls the answer made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<Call>,
}

/// A function call an answer made, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as a JSON document.
    pub arguments: String,
}

/// A function call's output, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResult {
    pub call_id: String,
    pub output: String,
}

impl Turn {
    /// A turn of `user`'s question and its `assistant` answer, now.
    pub fn new(user: String, assistant: String) -> Self {
        Self {
            user,
            assistant,
            attached: Vec::new(),
            interrupted: false,
            at: chrono::Utc::now().timestamp(),
            results: Vec::new(),
            calls: Vec::new(),
        }
    }

    /// The turn as the messages a model sees: the function outputs it came with, the
    /// question (unless it was only outputs), the answer with its calls.
    pub fn messages(&self) -> Vec<Message> {
        let mut answer = self.assistant.clone();
        if self.interrupted {
            if !answer.is_empty() {
                answer.push(' ');
            }
            answer.push_str("[answer interrupted]");
        }
        let mut question = self.user.clone();
        if !self.attached.is_empty() {
            question.push_str(&format!("\n\n[attached: {}]", self.attached.join("; ")));
        }
        let mut out: Vec<Message> = self
            .results
            .iter()
            .map(|r| Message {
                tool_call_id: Some(r.call_id.clone()),
                ..Message::text(Role::Tool, r.output.clone())
            })
            .collect();
        if !question.is_empty() || out.is_empty() {
            out.push(Message::text(Role::User, question));
        }
        out.push(Message {
            tool_calls: self
                .calls
                .iter()
                .map(|c| ToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: serde_json::from_str(&c.arguments)
                        .unwrap_or_else(|_| serde_json::Value::String(c.arguments.clone())),
                })
                .collect(),
            ..Message::text(Role::Assistant, answer)
        });
        out
    }

    /// The turn as stored: JSON of at most `max_bytes`. When it alone is larger, the
    /// question, the answer and each function output share the room, each keeping its
    /// end, marked as cut; when even that is larger (more calls, outputs or attached
    /// names than the room holds), only the question and the answer are kept.
    pub(crate) fn encode(&self, max_bytes: usize) -> anyhow::Result<Vec<u8>> {
        let json = serde_json::to_vec(self)?;
        if json.len() <= max_bytes {
            return Ok(json);
        }
        // JSON escaping can grow text up to six times; leave room for it.
        let room = |texts: usize| max_bytes.saturating_sub(256) / (6 * texts);
        let cut = |text: &str, keep: usize| {
            let from = text.len().saturating_sub(keep);
            let from = (from..=text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(text.len());
            format!("[cut] {}", &text[from..])
        };
        let keep = room(2 + self.results.len());
        let shorter = Turn {
            user: cut(&self.user, keep),
            assistant: cut(&self.assistant, keep),
            results: self
                .results
                .iter()
                .map(|r| CallResult {
                    call_id: r.call_id.clone(),
                    output: cut(&r.output, keep),
                })
                .collect(),
            ..self.clone()
        };
        let json = serde_json::to_vec(&shorter)?;
        if json.len() <= max_bytes {
            return Ok(json);
        }
        let keep = room(2);
        let least = Turn {
            user: cut(&self.user, keep),
            assistant: cut(&self.assistant, keep),
            attached: Vec::new(),
            results: Vec::new(),
            calls: Vec::new(),
            ..*self
        };
        Ok(serde_json::to_vec(&least)?)
    }
}

/// How much a store keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_turns: usize,
    /// Bytes of one session's stored turns; the oldest go first.
    pub max_bytes: usize,
    pub ttl: Duration,
    pub max_sessions: usize,
    /// Sessions one owner keeps; its least recently used go first.
    pub max_per_owner: usize,
}

impl Limits {
    pub fn from_settings(s: &SessionSettings) -> Self {
        Self {
            max_turns: s.max_turns,
            max_bytes: s.max_session_bytes,
            ttl: s.ttl,
            max_sessions: s.max_sessions,
            max_per_owner: s.max_sessions_per_caller,
        }
    }
}

/// `sessions.max_session_bytes`'s default.
const DEFAULT_MAX_TURN_BYTES: usize = 1 << 20;

/// A lock a store holds for one session while a turn runs (across replicas); released
/// when dropped.
pub trait StoreLock: Send + Sync {}

/// Where sessions live.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// For logs and readiness (never includes secrets).
    fn describe(&self) -> String;
    /// The latest `turns` turns of a session, oldest first; empty for an unknown or
    /// expired session.
    async fn recent(&self, key: &SessionKey, turns: usize) -> anyhow::Result<Vec<Turn>>;
    /// Adds a turn, then keeps within the limits: the session's oldest turns beyond its
    /// turns and bytes, the owner's least recently used sessions beyond its share, and,
    /// beyond the whole cap, the least recently used session of the owner with most.
    async fn append(&self, key: &SessionKey, turn: Turn) -> anyhow::Result<()>;
    /// Sessions currently kept.
    async fn count(&self) -> anyhow::Result<usize>;
    /// Forgets the sessions unused for longer than the time-to-live; how many.
    async fn expire(&self) -> anyhow::Result<usize>;
    /// Holds the session against other processes sharing the store, waiting at most
    /// `wait`; `Ok(None)` when the store needs no such lock (one process holds it), `Err`
    /// when the wait ran out or the store failed.
    async fn lock(
        &self,
        _key: &SessionKey,
        _wait: Duration,
    ) -> Result<Option<Box<dyn StoreLock>>, LockError> {
        Ok(None)
    }
}

/// Why a session could not be held.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("an earlier turn of this session is still running")]
    Busy,
    #[error("{0:#}")]
    Store(anyhow::Error),
}

/// The configured store.
pub fn store_from_settings(
    settings: &SessionSettings,
    data_dir: &std::path::Path,
) -> anyhow::Result<Arc<dyn SessionStore>> {
    let limits = Limits::from_settings(settings);
    Ok(match (settings.backend, &settings.redis_url) {
        (SessionBackend::Embedded, _) => {
            std::fs::create_dir_all(data_dir)?;
            Arc::new(embedded::EmbeddedStore::open(
                &data_dir.join("sessions.redb"),
                limits,
            )?)
        }
        (SessionBackend::Redis, Some(url)) => {
            Arc::new(redis::RedisStore::new(url, &settings.redis_prefix, limits)?)
        }
        (SessionBackend::Redis, None) => {
            anyhow::bail!("sessions.redis_url: the redis backend needs a URL")
        }
    })
}

/// A store plus per-session ordering.
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    window_turns: usize,
    wait: Duration,
    /// Most bytes of one turn kept while its answer streams (`sessions.max_session_bytes`).
    max_turn_bytes: usize,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A session held for one turn: its history, and the right to append the next turn.
/// Other turns of the same session wait until it is saved or dropped.
pub struct Held {
    pub key: SessionKey,
    pub history: Vec<Turn>,
    /// `false` when the store failed to lock: it is down, so nothing is read or saved.
    reachable: bool,
    _store: Option<Box<dyn StoreLock>>,
    _turn: Option<OwnedMutexGuard<()>>,
}

/// The session's earlier turn did not finish within `sessions.wait_secs`.
#[derive(Debug, thiserror::Error)]
#[error("an earlier turn of this session is still running after {} s (sessions.wait_secs)", .0.as_secs())]
pub struct Busy(pub Duration);

impl Sessions {
    /// Sessions over `store`; with a runtime, unused sessions are forgotten as they expire
    /// (checked every tenth of the time-to-live, at least every ten minutes).
    pub fn new(store: Arc<dyn SessionStore>, window_turns: usize, wait: Duration) -> Self {
        Self {
            store,
            window_turns,
            wait,
            max_turn_bytes: DEFAULT_MAX_TURN_BYTES,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// A turn is kept to `bytes` while its answer streams: what comes after is not held.
    pub fn with_max_turn_bytes(mut self, bytes: usize) -> Self {
        self.max_turn_bytes = bytes;
        self
    }

    /// The latest turns of a session a turn sees (`sessions.window_turns`).
    pub fn window_turns(&self) -> usize {
        self.window_turns
    }

    pub fn max_turn_bytes(&self) -> usize {
        self.max_turn_bytes
    }

    /// Forgets expired sessions every `every` while the store lives (needs a runtime).
    pub fn expire_every(self: &Arc<Self>, every: Duration) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = Arc::downgrade(&self.store);
        rt.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(store) = store.upgrade() else { return };
                match store.expire().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(expired = n, "sessions: forgot expired sessions"),
                    Err(e) => {
                        tracing::warn!(error = %e, store = %store.describe(), "sessions: could not expire")
                    }
                }
            }
        });
    }

    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// Waits for the session's earlier turns to finish (at most `sessions.wait_secs`),
    /// then loads its window. A store that cannot be read gives an empty history
    /// (logged): the answer still comes.
    pub async fn hold(&self, key: SessionKey) -> Result<Held, Busy> {
        // A store shared by several replicas orders the session's turns across them, in
        // arrival order; otherwise this process does, with a lock per session.
        let (store_lock, reachable) = match self.store.lock(&key, self.wait).await {
            Ok(lock) => (lock, true),
            Err(LockError::Busy) => return Err(Busy(self.wait)),
            Err(LockError::Store(e)) => {
                // Memory is best effort: the answer comes without it.
                tracing::error!(error = %e, store = %self.store.describe(), "sessions: the store is unreachable: answering without memory");
                (None, false)
            }
        };
        let local = match store_lock {
            Some(_) => None,
            None => Some(self.local_turn(&key).await?),
        };
        let history = if reachable {
            match self.store.recent(&key, self.window_turns).await {
                Ok(turns) => turns,
                Err(e) => {
                    tracing::error!(error = %e, store = %self.store.describe(), "sessions: could not read the history");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        Ok(Held {
            key,
            history,
            reachable,
            _store: store_lock,
            _turn: local,
        })
    }

    /// This process's turn at a session, after its earlier turns here (fair: in arrival
    /// order), waiting at most `sessions.wait_secs`.
    async fn local_turn(&self, key: &SessionKey) -> Result<OwnedMutexGuard<()>, Busy> {
        let lock = {
            // A panic elsewhere while it was held leaves the map as it was: keep using it.
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            if locks.len() > 1024 {
                locks.retain(|_, l| Arc::strong_count(l) > 1);
            }
            locks.entry(key.stored()).or_default().clone()
        };
        tokio::time::timeout(self.wait, lock.lock_owned())
            .await
            .map_err(|_| Busy(self.wait))
    }

    /// Saves the turn, then lets the session's next turn in.
    pub async fn save(&self, held: Held, turn: Turn) {
        if !held.reachable {
            return;
        }
        if let Err(e) = self.store.append(&held.key, turn).await {
            tracing::error!(error = %e, store = %self.store.describe(), "sessions: could not save the turn");
        }
        drop(held);
    }
}

/// Microseconds since the epoch, strictly increasing within this process, so that "least
/// recently used" is well defined even for turns saved in the same instant.
pub(crate) fn use_clock() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = chrono::Utc::now().timestamp_micros();
    let prev = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(now);
    now.max(prev + 1)
}

#[cfg(test)]
pub(crate) mod contract {
    //! What every store must do; run by each implementation's tests.
    use super::*;

    pub fn turn(n: usize) -> Turn {
        Turn::new(format!("question {n}"), format!("answer {n}"))
    }

    pub fn shared(id: &str) -> SessionKey {
        SessionKey {
            owner: Owner::shared(),
            id: id.into(),
        }
    }

    pub fn owned(owner: u8, id: &str) -> SessionKey {
        SessionKey {
            owner: Owner::key(&[owner; 32]),
            id: id.into(),
        }
    }

    pub async fn keeps_order_and_caps(store: &dyn SessionStore) {
        assert!(store.recent(&shared("nobody"), 5).await.unwrap().is_empty());
        let a = shared("a");
        for n in 0..5 {
            store.append(&a, turn(n)).await.unwrap();
        }
        let recent = store.recent(&a, 2).await.unwrap();
        let answers: Vec<_> = recent.iter().map(|t| t.assistant.as_str()).collect();
        assert_eq!(answers, ["answer 3", "answer 4"]);
        // max_turns is 3: the two oldest are gone.
        let all = store.recent(&a, 10).await.unwrap();
        let users: Vec<_> = all.iter().map(|t| t.user.as_str()).collect();
        assert_eq!(users, ["question 2", "question 3", "question 4"]);
    }

    pub async fn evicts_least_recently_used(store: &dyn SessionStore) {
        // max_sessions is 3.
        for id in ["s1", "s2", "s3"] {
            store.append(&shared(id), turn(0)).await.unwrap();
        }
        store.append(&shared("s1"), turn(1)).await.unwrap();
        store.append(&shared("s4"), turn(0)).await.unwrap();
        assert_eq!(store.count().await.unwrap(), 3);
        assert!(
            store.recent(&shared("s2"), 5).await.unwrap().is_empty(),
            "s2 was the least recently used"
        );
        assert_eq!(store.recent(&shared("s1"), 5).await.unwrap().len(), 2);
        assert_eq!(store.recent(&shared("s4"), 5).await.unwrap().len(), 1);
    }

    /// The same id under two owners is two sessions.
    pub async fn owners_are_apart(store: &dyn SessionStore) {
        store.append(&owned(1, "standup"), turn(1)).await.unwrap();
        store.append(&owned(2, "standup"), turn(2)).await.unwrap();
        let of = |owner| async move {
            store.recent(&owned(owner, "standup"), 5).await.unwrap()[0]
                .user
                .clone()
        };
        assert_eq!(of(1).await, "question 1");
        assert_eq!(of(2).await, "question 2");
        assert!(store
            .recent(&shared("standup"), 5)
            .await
            .unwrap()
            .is_empty());
    }

    /// One owner making new sessions evicts its own, never another's (the quota is 2
    /// per owner, the cap 3 in all).
    pub async fn eviction_is_fair(store: &dyn SessionStore) {
        store.append(&owned(1, "mine"), turn(0)).await.unwrap();
        for n in 0..10 {
            store
                .append(&owned(2, &format!("flood-{n}")), turn(n))
                .await
                .unwrap();
        }
        assert_eq!(
            store.recent(&owned(1, "mine"), 5).await.unwrap().len(),
            1,
            "another owner's flood did not evict this session"
        );
        assert!(store.count().await.unwrap() <= 3);
        assert_eq!(
            store.recent(&owned(2, "flood-9"), 5).await.unwrap().len(),
            1
        );
        assert!(store
            .recent(&owned(2, "flood-0"), 5)
            .await
            .unwrap()
            .is_empty());
    }

    /// A session keeps at most `max_bytes` (600 here): the oldest turns go first, and a
    /// turn larger than that alone is kept cut.
    pub async fn bounds_bytes(store: &dyn SessionStore) {
        let key = shared("bytes");
        let long = |n: usize| Turn {
            user: format!("q{n} {}", "x".repeat(150)),
            ..turn(n)
        };
        let mut kept = Vec::new();
        for n in 0..3 {
            kept = append_within_bound(store, &key, long(n)).await;
        }
        assert_eq!(kept.last().unwrap().user, long(2).user, "the newest stays");
        assert!(kept.len() < 3, "the oldest went");
        let huge = Turn {
            user: "y".repeat(5000),
            assistant: format!("{}THE END", "z".repeat(5000)),
            ..turn(9)
        };
        let kept = append_within_bound(store, &key, huge).await;
        let last = kept.last().unwrap();
        assert!(last.assistant.starts_with("[cut]") && last.assistant.ends_with("THE END"));
        assert!(last.user.starts_with("[cut]"));
        // A turn of many function outputs (a tool loop) is held to the bound as well.
        let tools = Turn {
            user: "run them".into(),
            results: (0..40)
                .map(|i| CallResult {
                    call_id: format!("call_{i}"),
                    output: "o".repeat(100),
                })
                .collect(),
            ..turn(10)
        };
        let kept = append_within_bound(store, &key, tools).await;
        assert!(kept.last().unwrap().user.ends_with("run them"));
    }

    /// Appends `turn` and gives what the session keeps, checked to be within its bound
    /// (600 bytes).
    async fn append_within_bound(
        store: &dyn SessionStore,
        key: &SessionKey,
        turn: Turn,
    ) -> Vec<Turn> {
        store.append(key, turn).await.unwrap();
        let kept = store.recent(key, 10).await.unwrap();
        let bytes: usize = kept
            .iter()
            .map(|t| serde_json::to_vec(t).unwrap().len())
            .sum();
        assert!(bytes <= 600, "{bytes} bytes kept");
        kept
    }

    pub fn limits() -> Limits {
        Limits {
            max_turns: 3,
            max_bytes: 600,
            ttl: Duration::from_secs(3600),
            max_sessions: 3,
            max_per_owner: 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic while the lock map was held (in another request's task) poisons it; turns
    /// of every session went on panicking after that, where they now go on working.
    #[tokio::test]
    async fn a_poisoned_lock_map_does_not_stop_later_turns() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            embedded::EmbeddedStore::open(&dir.path().join("s.redb"), contract::limits()).unwrap();
        let sessions = Arc::new(Sessions::new(Arc::new(store), 3, Duration::from_secs(5)));
        let poisoner = sessions.clone();
        let _ = std::thread::spawn(move || {
            let _held = poisoner.locks.lock().unwrap();
            panic!("a panic while the map is held");
        })
        .join();
        assert!(sessions.locks.is_poisoned());
        let held = sessions.hold(contract::shared("after")).await.unwrap();
        sessions.save(held, contract::turn(1)).await;
        let held = sessions.hold(contract::shared("after")).await.unwrap();
        assert_eq!(held.history.len(), 1);
    }

    /// A turn waits for the session's earlier one at most `wait`, then gives up.
    #[tokio::test]
    async fn waiting_for_an_earlier_turn_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            embedded::EmbeddedStore::open(&dir.path().join("s.redb"), contract::limits()).unwrap();
        let sessions = Sessions::new(Arc::new(store), 3, Duration::from_millis(200));
        let first = sessions.hold(contract::shared("busy")).await.unwrap();
        let started = std::time::Instant::now();
        let e = sessions.hold(contract::shared("busy")).await.err().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(e.to_string().contains("sessions.wait_secs"), "{e}");
        // Another owner's session of the same id does not wait.
        let other = sessions.hold(contract::owned(1, "busy")).await.unwrap();
        drop((first, other));
        assert!(sessions.hold(contract::shared("busy")).await.is_ok());
    }

    /// A turn larger than the bound shares the room among its question, its answer and
    /// its function outputs, each keeping its end.
    #[test]
    fn a_large_turn_keeps_the_end_of_every_output() {
        let turn = Turn {
            results: (0..5)
                .map(|i| CallResult {
                    call_id: format!("call_{i}"),
                    output: format!("{}end {i}", "o".repeat(3000)),
                })
                .collect(),
            ..Turn::new("q".repeat(3000), format!("{}the answer", "a".repeat(3000)))
        };
        let json = turn.encode(4096).unwrap();
        assert!(json.len() <= 4096, "{}", json.len());
        let kept: Turn = serde_json::from_slice(&json).unwrap();
        assert_eq!(kept.results.len(), 5);
        for (i, r) in kept.results.iter().enumerate() {
            assert_eq!(r.call_id, format!("call_{i}"));
            assert!(r.output.starts_with("[cut]") && r.output.ends_with(&format!("end {i}")));
        }
        assert!(kept.assistant.ends_with("the answer"));
    }

    #[test]
    fn ids_are_bounded_and_plain() {
        for ok in [
            "default",
            "team-standup",
            "7f9c2ba4-e88f-4d0c-9b2a-1c2d3e4f5a6b",
            "a.b:c@d+e=f~g_h",
        ] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(MAX_ID_BYTES + 1);
        for bad in [long.as_str(), "a/b", "a b", "naïve", "tab\there", "nul\0"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_id(&"x".repeat(MAX_ID_BYTES)).is_ok());
    }

    #[test]
    fn stored_names_keep_owners_apart() {
        let a = SessionKey {
            owner: Owner::key(&[7; 32]),
            id: "s".into(),
        };
        assert_eq!(a.stored(), format!("k:{}/s", "07".repeat(16)));
        let shared = SessionKey {
            owner: Owner::shared(),
            id: "s".into(),
        };
        assert_eq!(
            shared.stored(),
            "s",
            "the shared namespace keeps the old names"
        );
    }
}

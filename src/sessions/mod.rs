//! Conversation memory per `session_id`.
//!
//! A [`SessionStore`] keeps each session's turns (embedded database under `data_dir`, or
//! Redis for several replicas) with a cap on turns per session, a time-to-live and a cap
//! on sessions. [`Sessions`] adds what the pipeline needs on top: turns of one session run
//! one at a time, in arrival order, so concurrent requests never lose or interleave turns.

pub mod embedded;
pub mod redis;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::OwnedMutexGuard;

use crate::config::{SessionBackend, SessionSettings};
use crate::llm::{Message, Role};

/// One question and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    pub user: String,
    pub assistant: String,
    /// The client went away before the answer ended; `assistant` is what was streamed.
    #[serde(default)]
    pub interrupted: bool,
    /// Unix seconds.
    pub at: i64,
}

impl Turn {
    /// The turn as the two messages a model sees.
    pub fn messages(&self) -> [Message; 2] {
        let mut answer = self.assistant.clone();
        if self.interrupted {
            if !answer.is_empty() {
                answer.push(' ');
            }
            answer.push_str("[answer interrupted]");
        }
        [
            Message::text(Role::User, self.user.clone()),
            Message::text(Role::Assistant, answer),
        ]
    }
}

/// How much a store keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_turns: usize,
    pub ttl: Duration,
    pub max_sessions: usize,
}

impl Limits {
    pub fn from_settings(s: &SessionSettings) -> Self {
        Self {
            max_turns: s.max_turns,
            ttl: s.ttl,
            max_sessions: s.max_sessions,
        }
    }
}

/// Where sessions live.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// For logs and readiness (never includes secrets).
    fn describe(&self) -> String;
    /// The latest `turns` turns of a session, oldest first; empty for an unknown or
    /// expired session.
    async fn recent(&self, id: &str, turns: usize) -> anyhow::Result<Vec<Turn>>;
    /// Adds a turn, dropping the session's oldest beyond the cap and the least recently
    /// used sessions beyond theirs.
    async fn append(&self, id: &str, turn: Turn) -> anyhow::Result<()>;
    /// Sessions currently kept.
    async fn count(&self) -> anyhow::Result<usize>;
}

/// The configured store.
pub fn store_from_settings(
    settings: &SessionSettings,
    data_dir: &std::path::Path,
) -> anyhow::Result<Arc<dyn SessionStore>> {
    let limits = Limits::from_settings(settings);
    Ok(match settings.backend {
        SessionBackend::Embedded => {
            std::fs::create_dir_all(data_dir)?;
            Arc::new(embedded::EmbeddedStore::open(
                &data_dir.join("sessions.redb"),
                limits,
            )?)
        }
        SessionBackend::Redis => Arc::new(redis::RedisStore::new(
            settings.redis_url.as_deref().unwrap_or_default(),
            &settings.redis_prefix,
            limits,
        )?),
    })
}

/// A store plus per-session ordering.
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    window_turns: usize,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A session held for one turn: its history, and the right to append the next turn.
/// Other turns of the same session wait until it is saved or dropped.
pub struct Held {
    pub id: String,
    pub history: Vec<Turn>,
    _turn: OwnedMutexGuard<()>,
}

impl Sessions {
    pub fn new(store: Arc<dyn SessionStore>, window_turns: usize) -> Self {
        Self {
            store,
            window_turns,
            locks: Mutex::new(HashMap::new()),
        }
    }

    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// Waits for the session's earlier turns to finish, then loads its window. A store
    /// that cannot be read gives an empty history (logged): the answer still comes.
    pub async fn hold(&self, id: &str) -> Held {
        let lock = {
            // A panic elsewhere while it was held leaves the map as it was: keep using it.
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            if locks.len() > 1024 {
                locks.retain(|_, l| Arc::strong_count(l) > 1);
            }
            locks.entry(id.to_string()).or_default().clone()
        };
        let guard = lock.lock_owned().await;
        let history = match self.store.recent(id, self.window_turns).await {
            Ok(turns) => turns,
            Err(e) => {
                tracing::error!(error = %e, store = %self.store.describe(), "sessions: could not read the history");
                Vec::new()
            }
        };
        Held {
            id: id.to_string(),
            history,
            _turn: guard,
        }
    }

    /// Saves the turn, then lets the session's next turn in.
    pub async fn save(&self, held: Held, turn: Turn) {
        if let Err(e) = self.store.append(&held.id, turn).await {
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
        Turn {
            user: format!("question {n}"),
            assistant: format!("answer {n}"),
            interrupted: false,
            at: chrono::Utc::now().timestamp(),
        }
    }

    pub async fn keeps_order_and_caps(store: &dyn SessionStore) {
        assert!(store.recent("nobody", 5).await.unwrap().is_empty());
        for n in 0..5 {
            store.append("a", turn(n)).await.unwrap();
        }
        let recent = store.recent("a", 2).await.unwrap();
        let answers: Vec<_> = recent.iter().map(|t| t.assistant.as_str()).collect();
        assert_eq!(answers, ["answer 3", "answer 4"]);
        // max_turns is 3: the two oldest are gone.
        let all = store.recent("a", 10).await.unwrap();
        let users: Vec<_> = all.iter().map(|t| t.user.as_str()).collect();
        assert_eq!(users, ["question 2", "question 3", "question 4"]);
    }

    pub async fn evicts_least_recently_used(store: &dyn SessionStore) {
        // max_sessions is 3.
        for id in ["s1", "s2", "s3"] {
            store.append(id, turn(0)).await.unwrap();
        }
        store.append("s1", turn(1)).await.unwrap();
        store.append("s4", turn(0)).await.unwrap();
        assert_eq!(store.count().await.unwrap(), 3);
        assert!(
            store.recent("s2", 5).await.unwrap().is_empty(),
            "s2 was the least recently used"
        );
        assert_eq!(store.recent("s1", 5).await.unwrap().len(), 2);
        assert_eq!(store.recent("s4", 5).await.unwrap().len(), 1);
    }

    pub fn limits() -> Limits {
        Limits {
            max_turns: 3,
            ttl: Duration::from_secs(3600),
            max_sessions: 3,
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
        let sessions = Arc::new(Sessions::new(Arc::new(store), 3));
        let poisoner = sessions.clone();
        let _ = std::thread::spawn(move || {
            let _held = poisoner.locks.lock().unwrap();
            panic!("a panic while the map is held");
        })
        .join();
        assert!(sessions.locks.is_poisoned());
        let held = sessions.hold("after").await;
        sessions.save(held, contract::turn(1)).await;
        assert_eq!(sessions.hold("after").await.history.len(), 1);
    }
}

//! Sessions in an embedded database file (redb) under `data_dir`: nothing to run, and a
//! restart loses nothing (each turn is committed durably before the next one starts).
//! One process at a time may open the file; several replicas share Redis instead.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::{use_clock, Limits, SessionStore, Turn};

/// (session, sequence number) → turn as JSON.
const TURNS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("turns");
/// session → (last used, unix microseconds; first sequence number kept; next sequence number).
const SESSIONS: TableDefinition<&str, (i64, u64, u64)> = TableDefinition::new("sessions");

#[derive(Clone)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    limits: Limits,
    path: String,
}

impl EmbeddedStore {
    pub fn open(path: &Path, limits: Limits) -> anyhow::Result<Self> {
        let db = Database::create(path).with_context(|| {
            format!(
                "cannot open the session store {} (is another gateway using this data_dir?)",
                path.display()
            )
        })?;
        let txn = db.begin_write()?;
        {
            txn.open_table(TURNS)?;
            txn.open_table(SESSIONS)?;
        }
        txn.commit()?;
        let store = Self {
            db: Arc::new(db),
            limits,
            path: path.display().to_string(),
        };
        let expired = store.forget_expired()?;
        if expired > 0 {
            tracing::info!(expired, "sessions: forgot expired sessions");
        }
        Ok(store)
    }

    fn expired(&self, last_used: i64, now: i64) -> bool {
        now.saturating_sub(last_used) > self.limits.ttl.as_micros() as i64
    }

    /// Removes sessions unused for longer than the TTL; returns how many.
    fn forget_expired(&self) -> anyhow::Result<usize> {
        let now = use_clock();
        let txn = self.db.begin_write()?;
        let mut gone = Vec::new();
        {
            let sessions = txn.open_table(SESSIONS)?;
            for row in sessions.iter()? {
                let (id, meta) = row?;
                if self.expired(meta.value().0, now) {
                    gone.push(id.value().to_string());
                }
            }
        }
        for id in &gone {
            forget(&txn, id)?;
        }
        txn.commit()?;
        Ok(gone.len())
    }

    fn recent_blocking(&self, id: &str, turns: usize) -> anyhow::Result<Vec<Turn>> {
        let txn = self.db.begin_read()?;
        let sessions = txn.open_table(SESSIONS)?;
        let Some(meta) = sessions.get(id)? else {
            return Ok(Vec::new());
        };
        let (last_used, first, next) = meta.value();
        if self.expired(last_used, use_clock()) {
            return Ok(Vec::new());
        }
        let from = next.saturating_sub(turns as u64).max(first);
        let table = txn.open_table(TURNS)?;
        let mut out = Vec::new();
        for row in table.range((id, from)..(id, next))? {
            let (_, value) = row?;
            out.push(serde_json::from_slice(value.value())?);
        }
        Ok(out)
    }

    fn append_blocking(&self, id: &str, turn: &Turn) -> anyhow::Result<()> {
        let now = use_clock();
        let json = serde_json::to_vec(turn)?;
        let txn = self.db.begin_write()?;
        let existing = txn.open_table(SESSIONS)?.get(id)?.map(|m| m.value());
        let (mut first, mut next) = match existing {
            Some((last_used, _, _)) if self.expired(last_used, now) => {
                forget(&txn, id)?;
                (0, 0)
            }
            Some((_, first, next)) => (first, next),
            None => (0, 0),
        };
        {
            let mut turns = txn.open_table(TURNS)?;
            turns.insert((id, next), json.as_slice())?;
            next += 1;
            while next - first > self.limits.max_turns as u64 {
                turns.remove((id, first))?;
                first += 1;
            }
        }
        let over = {
            let mut sessions = txn.open_table(SESSIONS)?;
            sessions.insert(id, (now, first, next))?;
            sessions
                .len()?
                .saturating_sub(self.limits.max_sessions as u64)
        };
        if over > 0 {
            for victim in least_recently_used(&txn, over as usize, id)? {
                forget(&txn, &victim)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn count_blocking(&self) -> anyhow::Result<usize> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(SESSIONS)?.len()? as usize)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&EmbeddedStore) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store)).await?
    }
}

/// Deletes a session and its turns inside `txn`.
fn forget(txn: &redb::WriteTransaction, id: &str) -> anyhow::Result<()> {
    let mut sessions = txn.open_table(SESSIONS)?;
    if let Some(meta) = sessions.remove(id)? {
        let (_, first, next) = meta.value();
        let mut turns = txn.open_table(TURNS)?;
        for seq in first..next {
            turns.remove((id, seq))?;
        }
    }
    Ok(())
}

/// The `n` sessions used longest ago, never `keep`.
fn least_recently_used(
    txn: &redb::WriteTransaction,
    n: usize,
    keep: &str,
) -> anyhow::Result<Vec<String>> {
    let sessions = txn.open_table(SESSIONS)?;
    let mut all = Vec::new();
    for row in sessions.iter()? {
        let (id, meta) = row?;
        if id.value() != keep {
            all.push((meta.value().0, id.value().to_string()));
        }
    }
    all.sort();
    Ok(all.into_iter().take(n).map(|(_, id)| id).collect())
}

#[async_trait]
impl SessionStore for EmbeddedStore {
    fn describe(&self) -> String {
        format!("embedded ({})", self.path)
    }

    async fn recent(&self, id: &str, turns: usize) -> anyhow::Result<Vec<Turn>> {
        let id = id.to_string();
        self.blocking(move |s| s.recent_blocking(&id, turns)).await
    }

    async fn append(&self, id: &str, turn: Turn) -> anyhow::Result<()> {
        let id = id.to_string();
        self.blocking(move |s| s.append_blocking(&id, &turn)).await
    }

    async fn count(&self) -> anyhow::Result<usize> {
        self.blocking(|s| s.count_blocking()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::contract;

    #[tokio::test]
    async fn keeps_order_and_caps() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("s.redb"), contract::limits()).unwrap();
        contract::keeps_order_and_caps(&store).await;
    }

    #[tokio::test]
    async fn evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("s.redb"), contract::limits()).unwrap();
        contract::evicts_least_recently_used(&store).await;
    }

    #[tokio::test]
    async fn survives_reopening_and_forgets_expired_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let store = EmbeddedStore::open(&path, contract::limits()).unwrap();
            store.append("kept", contract::turn(0)).await.unwrap();
        }
        let store = EmbeddedStore::open(&path, contract::limits()).unwrap();
        assert_eq!(store.recent("kept", 5).await.unwrap().len(), 1);
        drop(store);
        let mut short = contract::limits();
        short.ttl = std::time::Duration::from_secs(1);
        let store = EmbeddedStore::open(&path, short).unwrap();
        store.append("fresh", contract::turn(0)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
        assert!(store.recent("fresh", 5).await.unwrap().is_empty());
        drop(store);
        let store = EmbeddedStore::open(&path, short).unwrap();
        assert_eq!(
            store.count().await.unwrap(),
            0,
            "expired sessions are removed on open"
        );
    }
}

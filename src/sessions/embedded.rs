//! Sessions in an embedded database file (redb) under `data_dir`: nothing to run, and a
//! restart loses nothing (each turn is committed durably before the next one starts).
//! One process at a time may open the file; several replicas share Redis instead.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};

use super::{use_clock, Limits, SessionKey, SessionStore, Turn};

/// (session, sequence number) → turn as JSON.
const TURNS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("turns");
/// session → (last used, unix microseconds; first sequence number kept; next sequence number).
const SESSIONS: TableDefinition<&str, (i64, u64, u64)> = TableDefinition::new("sessions");
/// (owner, session) → last used: each owner's sessions, for its quota.
const OWNED: TableDefinition<(&str, &str), i64> = TableDefinition::new("owned");
/// owner → sessions it has.
const OWNER_COUNTS: TableDefinition<&str, u64> = TableDefinition::new("owner_counts");

/// The owner a stored session name belongs to (see `SessionKey::stored`).
fn owner_of(stored: &str) -> &str {
    stored.split_once('/').map_or("", |(owner, _)| owner)
}

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
            txn.open_table(OWNED)?;
            txn.open_table(OWNER_COUNTS)?;
        }
        let migrated = index_owners(&txn)?;
        txn.commit()?;
        if migrated > 0 {
            tracing::info!(
                sessions = migrated,
                "sessions: stored sessions indexed by owner (they stay in the shared namespace)"
            );
        }
        let store = Self {
            db: Arc::new(db),
            limits,
            path: path.display().to_string(),
        };
        let expired = store.expire_blocking()?;
        if expired > 0 {
            tracing::info!(expired, "sessions: forgot expired sessions");
        }
        Ok(store)
    }

    fn expired(&self, last_used: i64, now: i64) -> bool {
        now.saturating_sub(last_used) > self.limits.ttl.as_micros() as i64
    }

    /// Removes sessions unused for longer than the TTL; returns how many.
    fn expire_blocking(&self) -> anyhow::Result<usize> {
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

    fn recent_blocking(&self, stored: &str, turns: usize) -> anyhow::Result<Vec<Turn>> {
        let txn = self.db.begin_read()?;
        let sessions = txn.open_table(SESSIONS)?;
        let Some(meta) = sessions.get(stored)? else {
            return Ok(Vec::new());
        };
        let (last_used, first, next) = meta.value();
        if self.expired(last_used, use_clock()) {
            return Ok(Vec::new());
        }
        let from = next.saturating_sub(turns as u64).max(first);
        let table = txn.open_table(TURNS)?;
        let mut out = Vec::new();
        for row in table.range((stored, from)..(stored, next))? {
            let (_, value) = row?;
            out.push(serde_json::from_slice(value.value())?);
        }
        Ok(out)
    }

    fn append_blocking(&self, stored: &str, turn: &Turn) -> anyhow::Result<()> {
        let now = use_clock();
        let json = turn.encode(self.limits.max_bytes)?;
        let owner = owner_of(stored);
        let txn = self.db.begin_write()?;
        let existing = txn.open_table(SESSIONS)?.get(stored)?.map(|m| m.value());
        let (mut first, mut next) = match existing {
            Some((last_used, _, _)) if self.expired(last_used, now) => {
                forget(&txn, stored)?;
                (0, 0)
            }
            Some((_, first, next)) => (first, next),
            None => (0, 0),
        };
        {
            let mut turns = txn.open_table(TURNS)?;
            turns.insert((stored, next), json.as_slice())?;
            next += 1;
            // The oldest turns go beyond the turn count, then beyond the bytes (the newest
            // always stays: it was cut to fit alone).
            let mut bytes: usize = turns
                .range((stored, first)..(stored, next))?
                .map(|row| row.map(|(_, v)| v.value().len()))
                .sum::<Result<usize, _>>()?;
            while next - first > 1
                && (next - first > self.limits.max_turns as u64 || bytes > self.limits.max_bytes)
            {
                if let Some(old) = turns.remove((stored, first))? {
                    bytes = bytes.saturating_sub(old.value().len());
                }
                first += 1;
            }
        }
        txn.open_table(SESSIONS)?
            .insert(stored, (now, first, next))?;
        // Counted for its owner when it enters the owner's index (whatever the index missed
        // before, it holds from now on).
        let entered = txn
            .open_table(OWNED)?
            .insert((owner, stored), now)?
            .is_none();
        if entered {
            add_to_count(&txn, owner, 1)?;
        }
        // The owner's share first (the shared namespace of a gateway without keys has the
        // whole cap), then the whole cap: from the owner with most.
        if !owner.is_empty() {
            let owned = owned_by(&txn, owner)?;
            let over = owned.len().saturating_sub(self.limits.max_per_owner);
            let victims: Vec<String> = owned
                .into_iter()
                .filter(|(_, s)| s != stored)
                .take(over)
                .map(|(_, s)| s)
                .collect();
            for victim in &victims {
                forget(&txn, victim)?;
            }
        }
        let total = txn.open_table(SESSIONS)?.len()? as usize;
        for _ in self.limits.max_sessions..total {
            let Some(largest) = largest_owner(&txn)? else {
                break;
            };
            let victim = owned_by(&txn, &largest)?
                .into_iter()
                .map(|(_, s)| s)
                .find(|s| s != stored);
            match victim {
                Some(v) => forget(&txn, &v)?,
                None => break,
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

/// Indexes by owner the sessions stored before owners were (one time, on open): they are
/// in the shared namespace, or an owner their name says.
fn index_owners(txn: &WriteTransaction) -> anyhow::Result<usize> {
    if !txn.open_table(OWNED)?.is_empty()? {
        return Ok(0);
    }
    let sessions: Vec<(String, i64)> = txn
        .open_table(SESSIONS)?
        .iter()?
        .map(|row| row.map(|(id, meta)| (id.value().to_string(), meta.value().0)))
        .collect::<Result<_, _>>()?;
    for (stored, last_used) in &sessions {
        let owner = owner_of(stored);
        txn.open_table(OWNED)?
            .insert((owner, stored.as_str()), *last_used)?;
        add_to_count(txn, owner, 1)?;
    }
    Ok(sessions.len())
}

/// An owner's sessions, least recently used first.
fn owned_by(txn: &WriteTransaction, owner: &str) -> anyhow::Result<Vec<(i64, String)>> {
    let table = txn.open_table(OWNED)?;
    let mut out: Vec<(i64, String)> = table
        .range((owner, "")..)?
        .map(|row| row.map(|(k, v)| (k.value().0.to_string(), k.value().1.to_string(), v.value())))
        .take_while(|row| row.as_ref().map_or(true, |(o, _, _)| o == owner))
        .map(|row| row.map(|(_, s, used)| (used, s)))
        .collect::<Result<_, _>>()?;
    out.sort();
    Ok(out)
}

/// The owner holding the most sessions.
fn largest_owner(txn: &WriteTransaction) -> anyhow::Result<Option<String>> {
    let table = txn.open_table(OWNER_COUNTS)?;
    let mut best: Option<(u64, String)> = None;
    for row in table.iter()? {
        let (owner, n) = row?;
        if best.as_ref().is_none_or(|(m, _)| n.value() > *m) {
            best = Some((n.value(), owner.value().to_string()));
        }
    }
    Ok(best.map(|(_, owner)| owner))
}

fn add_to_count(txn: &WriteTransaction, owner: &str, delta: i64) -> anyhow::Result<()> {
    let mut counts = txn.open_table(OWNER_COUNTS)?;
    let n = counts.get(owner)?.map_or(0, |v| v.value());
    let n = n.saturating_add_signed(delta);
    if n == 0 {
        counts.remove(owner)?;
    } else {
        counts.insert(owner, n)?;
    }
    Ok(())
}

/// Deletes a session and its turns inside `txn`.
fn forget(txn: &WriteTransaction, stored: &str) -> anyhow::Result<()> {
    let mut sessions = txn.open_table(SESSIONS)?;
    if let Some(meta) = sessions.remove(stored)? {
        let (_, first, next) = meta.value();
        let mut turns = txn.open_table(TURNS)?;
        for seq in first..next {
            turns.remove((stored, seq))?;
        }
        let owner = owner_of(stored);
        if txn.open_table(OWNED)?.remove((owner, stored))?.is_some() {
            add_to_count(txn, owner, -1)?;
        }
    }
    Ok(())
}

#[async_trait]
impl SessionStore for EmbeddedStore {
    fn describe(&self) -> String {
        format!("embedded ({})", self.path)
    }

    async fn recent(&self, key: &SessionKey, turns: usize) -> anyhow::Result<Vec<Turn>> {
        let stored = key.stored();
        self.blocking(move |s| s.recent_blocking(&stored, turns))
            .await
    }

    async fn append(&self, key: &SessionKey, turn: Turn) -> anyhow::Result<()> {
        let stored = key.stored();
        self.blocking(move |s| s.append_blocking(&stored, &turn))
            .await
    }

    async fn count(&self) -> anyhow::Result<usize> {
        self.blocking(|s| s.count_blocking()).await
    }

    async fn expire(&self) -> anyhow::Result<usize> {
        self.blocking(|s| s.expire_blocking()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::contract;

    fn store(dir: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open(&dir.path().join("s.redb"), contract::limits()).unwrap()
    }

    #[tokio::test]
    async fn keeps_order_and_caps() {
        let dir = tempfile::tempdir().unwrap();
        contract::keeps_order_and_caps(&store(&dir)).await;
    }

    #[tokio::test]
    async fn evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        contract::evicts_least_recently_used(&store(&dir)).await;
    }

    #[tokio::test]
    async fn owners_are_apart() {
        let dir = tempfile::tempdir().unwrap();
        contract::owners_are_apart(&store(&dir)).await;
    }

    #[tokio::test]
    async fn eviction_is_fair() {
        let dir = tempfile::tempdir().unwrap();
        contract::eviction_is_fair(&store(&dir)).await;
    }

    #[tokio::test]
    async fn bounds_bytes() {
        let dir = tempfile::tempdir().unwrap();
        contract::bounds_bytes(&store(&dir)).await;
    }

    #[tokio::test]
    async fn survives_reopening_and_forgets_expired_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let store = EmbeddedStore::open(&path, contract::limits()).unwrap();
            store
                .append(&contract::shared("kept"), contract::turn(0))
                .await
                .unwrap();
        }
        let store = EmbeddedStore::open(&path, contract::limits()).unwrap();
        assert_eq!(
            store
                .recent(&contract::shared("kept"), 5)
                .await
                .unwrap()
                .len(),
            1
        );
        drop(store);
        let mut short = contract::limits();
        short.ttl = std::time::Duration::from_secs(1);
        let store = EmbeddedStore::open(&path, short).unwrap();
        store
            .append(&contract::shared("fresh"), contract::turn(0))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
        assert!(store
            .recent(&contract::shared("fresh"), 5)
            .await
            .unwrap()
            .is_empty());
        drop(store);
        let store = EmbeddedStore::open(&path, short).unwrap();
        assert_eq!(
            store.count().await.unwrap(),
            0,
            "expired sessions are removed on open"
        );
    }

    /// Expired sessions are removed while the store runs, not only when it opens.
    #[tokio::test]
    async fn expires_while_running() {
        let dir = tempfile::tempdir().unwrap();
        let mut short = contract::limits();
        short.ttl = std::time::Duration::from_secs(1);
        let store: Arc<dyn SessionStore> =
            Arc::new(EmbeddedStore::open(&dir.path().join("s.redb"), short).unwrap());
        let sessions = Arc::new(crate::sessions::Sessions::new(
            store.clone(),
            3,
            std::time::Duration::from_secs(1),
        ));
        sessions.expire_every(std::time::Duration::from_millis(200));
        store
            .append(&contract::shared("old"), contract::turn(0))
            .await
            .unwrap();
        assert_eq!(store.count().await.unwrap(), 1);
        tokio::time::sleep(std::time::Duration::from_millis(1800)).await;
        assert_eq!(store.count().await.unwrap(), 0, "the sweep removed it");
    }

    /// A file written before sessions had owners: its sessions are indexed by owner on
    /// open and keep working in the shared namespace.
    #[tokio::test]
    async fn sessions_stored_before_owners_keep_working() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let turn = serde_json::to_vec(&contract::turn(1)).unwrap();
                txn.open_table(TURNS)
                    .unwrap()
                    .insert(("legacy", 0), turn.as_slice())
                    .unwrap();
                txn.open_table(SESSIONS)
                    .unwrap()
                    .insert("legacy", (use_clock(), 0, 1))
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let store = EmbeddedStore::open(&path, contract::limits()).unwrap();
        let kept = store.recent(&contract::shared("legacy"), 5).await.unwrap();
        assert_eq!(kept.len(), 1);
        assert!(store
            .recent(&contract::owned(1, "legacy"), 5)
            .await
            .unwrap()
            .is_empty());
        // Counted for the shared namespace's quota like any of its sessions.
        store
            .append(&contract::shared("legacy"), contract::turn(2))
            .await
            .unwrap();
        assert_eq!(store.count().await.unwrap(), 1);
    }
}

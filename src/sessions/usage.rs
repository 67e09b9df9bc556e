//! Usage per API key: answers, errors, prompt and answer tokens by key name, UTC day and
//! model, and the keys' own limits (tokens per day, answers per minute), kept in the
//! session store's backend: an embedded database file beside the sessions', or the same
//! Redis, so that replicas sharing it share the counts and the limits.
//!
//! Keys are counted by name, never by the key itself. Redis keys (under
//! `sessions.redis_prefix`): `u:{name}:{day}` a hash of `{model}\x1f{field}` counters
//! (kept 400 days), `ud:{name}` the set of its days, `r:{name}:{minute}` the answers of
//! one minute (kept two).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use async_trait::async_trait;
use redb::{Database, ReadableTable, TableDefinition};
use serde::Serialize;

use crate::config::{SessionBackend, SessionSettings};
use crate::error::GatewayError;

/// What one answer (or a day's answers) used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub requests: u64,
    pub errors: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }

    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// One key's usage of one model on one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// UTC, `YYYY-MM-DD`.
    pub day: String,
    pub model: String,
    #[serde(flatten)]
    pub counts: Counts,
}

/// Where the counts live.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Adds `counts` to `key`'s on `day` for `model`.
    async fn add(&self, key: &str, day: &str, model: &str, counts: Counts) -> anyhow::Result<()>;
    /// Every day and model `key` has counts for, oldest day first.
    async fn rows(&self, key: &str) -> anyhow::Result<Vec<Row>>;
    /// `key`'s tokens (prompt and answer) on `day`.
    async fn tokens(&self, key: &str, day: &str) -> anyhow::Result<u64>;
    /// Counts one answer of `key` in `minute` (Unix minutes); the count with it.
    async fn count_request(&self, key: &str, minute: i64) -> anyhow::Result<u64>;
}

/// The usage counts and the keys' limits, over the configured store.
pub struct Usage {
    store: Arc<dyn UsageStore>,
}

/// How long Redis keeps a day's counts.
const KEEP_DAYS: u64 = 400;

impl Usage {
    pub fn new(store: Arc<dyn UsageStore>) -> Self {
        Self { store }
    }

    /// The store beside the configured session store: `data_dir/usage.redb`, or Redis.
    pub fn from_settings(settings: &SessionSettings, data_dir: &Path) -> anyhow::Result<Self> {
        let store: Arc<dyn UsageStore> = match (settings.backend, &settings.redis_url) {
            (SessionBackend::Redis, Some(url)) => {
                Arc::new(RedisUsage::new(url, &settings.redis_prefix)?)
            }
            _ => {
                std::fs::create_dir_all(data_dir)?;
                Arc::new(EmbeddedUsage::open(&data_dir.join("usage.redb"))?)
            }
        };
        Ok(Self::new(store))
    }

    /// Adds one answer's counts to `key`'s today (logged, never failing the caller).
    pub async fn add(&self, key: &str, model: &str, counts: Counts) {
        let day = today();
        if let Err(e) = self.store.add(key, &day, model, counts).await {
            tracing::warn!(key, error = %format!("{e:#}"), "usage: could not count an answer");
        }
    }

    /// `key`'s usage by day and model.
    pub async fn rows(&self, key: &str) -> anyhow::Result<Vec<Row>> {
        self.store.rows(key).await
    }

    /// Counts an answer `key` asks for against its limits: a 429 (with `retry_after`)
    /// when its tokens for the day are spent or its answers for the minute are. A store
    /// that cannot be reached lets the answer through (logged).
    pub async fn admit(
        &self,
        key: &str,
        tokens_per_day: u64,
        requests_per_minute: u64,
    ) -> Result<(), GatewayError> {
        let now = chrono::Utc::now();
        if tokens_per_day > 0 {
            match self.store.tokens(key, &day_of(now)).await {
                Ok(used) if used >= tokens_per_day => {
                    let midnight = (now.date_naive() + chrono::Days::new(1))
                        .and_hms_opt(0, 0, 0)
                        .map_or(now, |t| t.and_utc());
                    let wait = (midnight - now).num_seconds().max(1) as u64;
                    return Err(refused(
                        key,
                        "tokens_per_day",
                        format!(
                            "this API key's {tokens_per_day} tokens for the day (UTC) are used ({used}); retry in {wait} s"
                        ),
                        wait,
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(key, error = %format!("{e:#}"), "usage: the day's tokens could not be read: not limited")
                }
            }
        }
        if requests_per_minute > 0 {
            let minute = now.timestamp().div_euclid(60);
            match self.store.count_request(key, minute).await {
                Ok(n) if n > requests_per_minute => {
                    let wait = (60 - now.timestamp().rem_euclid(60)).max(1) as u64;
                    return Err(refused(
                        key,
                        "requests_per_minute",
                        format!(
                            "this API key's {requests_per_minute} answers per minute are used; retry in {wait} s"
                        ),
                        wait,
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(key, error = %format!("{e:#}"), "usage: the minute's answers could not be counted: not limited")
                }
            }
        }
        Ok(())
    }
}

fn refused(key: &str, limit: &'static str, message: String, wait: u64) -> GatewayError {
    metrics::counter!("assist_rate_limited_total", "limit" => limit).increment(1);
    tracing::warn!(key, limit, retry_after_secs = wait, "rate limited");
    let mut e = GatewayError::rate_limited(message);
    e.retry_after = Some(wait);
    e
}

fn day_of(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d").to_string()
}

fn today() -> String {
    day_of(chrono::Utc::now())
}

/// (key, day, model).
type At<'a> = (&'a str, &'a str, &'a str);
/// Requests, errors, input tokens, output tokens.
type Counted = (u64, u64, u64, u64);
/// (key, day, model) → counts.
const USAGE: TableDefinition<At, Counted> = TableDefinition::new("usage");

/// Usage in an embedded database file; the minute's answers in memory (one process
/// opens the file).
#[derive(Clone)]
pub struct EmbeddedUsage {
    db: Arc<Database>,
    minutes: Arc<Mutex<HashMap<String, (i64, u64)>>>,
}

impl EmbeddedUsage {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let db = Database::create(path).with_context(|| {
            format!(
                "cannot open the usage store {} (is another gateway using this data_dir?)",
                path.display()
            )
        })?;
        let txn = db.begin_write()?;
        txn.open_table(USAGE)?;
        txn.commit()?;
        Ok(Self {
            db: Arc::new(db),
            minutes: Arc::default(),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db)).await?
    }

    fn rows_of(db: &Database, key: &str, day: Option<&str>) -> anyhow::Result<Vec<Row>> {
        let txn = db.begin_read()?;
        let table = txn.open_table(USAGE)?;
        let mut out = Vec::new();
        for row in table.range((key, day.unwrap_or(""), "")..)? {
            let (k, v) = row?;
            let (name, d, model) = k.value();
            if name != key || day.is_some_and(|day| d != day) {
                break;
            }
            let (requests, errors, input_tokens, output_tokens) = v.value();
            out.push(Row {
                day: d.to_string(),
                model: model.to_string(),
                counts: Counts {
                    requests,
                    errors,
                    input_tokens,
                    output_tokens,
                },
            });
        }
        Ok(out)
    }
}

#[async_trait]
impl UsageStore for EmbeddedUsage {
    async fn add(&self, key: &str, day: &str, model: &str, counts: Counts) -> anyhow::Result<()> {
        let (key, day, model) = (key.to_string(), day.to_string(), model.to_string());
        self.blocking(move |db| {
            let txn = db.begin_write()?;
            {
                let mut table = txn.open_table(USAGE)?;
                let at = (key.as_str(), day.as_str(), model.as_str());
                let (r, e, i, o) = table.get(at)?.map_or((0, 0, 0, 0), |v| v.value());
                table.insert(
                    at,
                    (
                        r + counts.requests,
                        e + counts.errors,
                        i + counts.input_tokens,
                        o + counts.output_tokens,
                    ),
                )?;
            }
            txn.commit()?;
            Ok(())
        })
        .await
    }

    async fn rows(&self, key: &str) -> anyhow::Result<Vec<Row>> {
        let key = key.to_string();
        self.blocking(move |db| Self::rows_of(db, &key, None)).await
    }

    async fn tokens(&self, key: &str, day: &str) -> anyhow::Result<u64> {
        let (key, day) = (key.to_string(), day.to_string());
        let rows = self
            .blocking(move |db| Self::rows_of(db, &key, Some(&day)))
            .await?;
        Ok(rows.iter().map(|r| r.counts.tokens()).sum())
    }

    async fn count_request(&self, key: &str, minute: i64) -> anyhow::Result<u64> {
        let mut minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        // A new minute starts every key's count again.
        minutes.retain(|_, (m, _)| *m == minute);
        let entry = minutes.entry(key.to_string()).or_insert((minute, 0));
        entry.1 += 1;
        Ok(entry.1)
    }
}

/// Usage in Redis, shared by every replica that uses it.
pub struct RedisUsage {
    link: super::link::Link,
    prefix: String,
}

/// Separates a model's name from the counter's in a day's hash.
const SEP: char = '\u{1f}';

impl RedisUsage {
    pub fn new(url: &str, prefix: &str) -> anyhow::Result<Self> {
        Ok(Self {
            link: super::link::Link::new(url)?,
            prefix: prefix.to_string(),
        })
    }

    async fn connection(&self) -> anyhow::Result<redis::aio::ConnectionManager> {
        self.link.connection("usage").await
    }

    fn day_key(&self, key: &str, day: &str) -> String {
        format!("{}u:{key}:{day}", self.prefix)
    }

    fn days_key(&self, key: &str) -> String {
        format!("{}ud:{key}", self.prefix)
    }
}

#[async_trait]
impl UsageStore for RedisUsage {
    async fn add(&self, key: &str, day: &str, model: &str, counts: Counts) -> anyhow::Result<()> {
        let mut con = self.connection().await?;
        let hash = self.day_key(key, day);
        let keep = (KEEP_DAYS * 86_400) as i64;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (field, n) in [
            ("requests", counts.requests),
            ("errors", counts.errors),
            ("input_tokens", counts.input_tokens),
            ("output_tokens", counts.output_tokens),
        ] {
            if n > 0 {
                pipe.hincr(&hash, format!("{model}{SEP}{field}"), n)
                    .ignore();
            }
        }
        pipe.expire(&hash, keep).ignore();
        pipe.sadd(self.days_key(key), day).ignore();
        pipe.expire(self.days_key(key), keep).ignore();
        pipe.query_async::<()>(&mut con).await?;
        Ok(())
    }

    async fn rows(&self, key: &str) -> anyhow::Result<Vec<Row>> {
        let mut con = self.connection().await?;
        let mut days: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.days_key(key))
            .query_async(&mut con)
            .await?;
        days.sort();
        let mut out = Vec::new();
        for day in days {
            let fields: HashMap<String, u64> = redis::cmd("HGETALL")
                .arg(self.day_key(key, &day))
                .query_async(&mut con)
                .await?;
            let mut models: BTreeMap<String, Counts> = BTreeMap::new();
            for (field, n) in fields {
                let Some((model, counter)) = field.rsplit_once(SEP) else {
                    continue;
                };
                let c = models.entry(model.to_string()).or_default();
                match counter {
                    "requests" => c.requests = n,
                    "errors" => c.errors = n,
                    "input_tokens" => c.input_tokens = n,
                    "output_tokens" => c.output_tokens = n,
                    _ => {}
                }
            }
            out.extend(models.into_iter().map(|(model, counts)| Row {
                day: day.clone(),
                model,
                counts,
            }));
        }
        Ok(out)
    }

    async fn tokens(&self, key: &str, day: &str) -> anyhow::Result<u64> {
        let mut con = self.connection().await?;
        let fields: HashMap<String, u64> = redis::cmd("HGETALL")
            .arg(self.day_key(key, day))
            .query_async(&mut con)
            .await?;
        Ok(fields
            .iter()
            .filter(|(f, _)| f.ends_with("input_tokens") || f.ends_with("output_tokens"))
            .map(|(_, n)| n)
            .sum())
    }

    async fn count_request(&self, key: &str, minute: i64) -> anyhow::Result<u64> {
        let mut con = self.connection().await?;
        let counter = format!("{}r:{key}:{minute}", self.prefix);
        let (n,): (u64,) = redis::pipe()
            .atomic()
            .incr(&counter, 1)
            .expire(&counter, 120)
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(n)
    }
}

/// A day's usage, summed over its models.
pub fn totals(rows: &[Row]) -> Counts {
    let mut all = Counts::default();
    for r in rows {
        all.add(r.counts);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn counts_by_key_day_and_model(store: &dyn UsageStore) {
        let one = Counts {
            requests: 1,
            errors: 0,
            input_tokens: 10,
            output_tokens: 5,
        };
        store
            .add("alice", "2026-01-01", "brunix", one)
            .await
            .unwrap();
        store
            .add("alice", "2026-01-01", "brunix", one)
            .await
            .unwrap();
        store
            .add("alice", "2026-01-02", "qwen:latest", one)
            .await
            .unwrap();
        store.add("bob", "2026-01-01", "brunix", one).await.unwrap();
        let rows = store.rows("alice").await.unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].day, "2026-01-01");
        assert_eq!(rows[0].counts.requests, 2);
        assert_eq!(rows[0].counts.input_tokens, 20);
        assert_eq!(rows[1].model, "qwen:latest");
        assert_eq!(store.tokens("alice", "2026-01-01").await.unwrap(), 30);
        assert_eq!(store.tokens("bob", "2026-01-02").await.unwrap(), 0);
        assert_eq!(store.count_request("alice", 7).await.unwrap(), 1);
        assert_eq!(store.count_request("alice", 7).await.unwrap(), 2);
        assert_eq!(store.count_request("bob", 7).await.unwrap(), 1);
        assert_eq!(store.count_request("alice", 8).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn embedded_store_counts_by_key_day_and_model() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedUsage::open(&dir.path().join("usage.redb")).unwrap();
        counts_by_key_day_and_model(&store).await;
    }

    #[tokio::test]
    async fn a_spent_limit_is_a_429_with_retry_after() {
        let dir = tempfile::tempdir().unwrap();
        let usage = Usage::new(Arc::new(
            EmbeddedUsage::open(&dir.path().join("usage.redb")).unwrap(),
        ));
        usage.admit("k", 100, 2).await.unwrap();
        usage.admit("k", 100, 2).await.unwrap();
        let e = usage.admit("k", 100, 2).await.unwrap_err();
        assert_eq!(e.status.as_u16(), 429);
        assert!(e.retry_after.is_some_and(|s| (1..=60).contains(&s)));
        usage
            .add(
                "j",
                "m",
                Counts {
                    requests: 1,
                    errors: 0,
                    input_tokens: 60,
                    output_tokens: 40,
                },
            )
            .await;
        let e = usage.admit("j", 100, 0).await.unwrap_err();
        assert!(e.message.contains("100 tokens"), "{}", e.message);
        assert!(e.retry_after.is_some_and(|s| (1..=86_400).contains(&s)));
        usage.admit("j", 101, 0).await.unwrap();
    }
}

//! Sessions in Redis, shared by several gateway replicas.
//!
//! Keys (all under `sessions.redis_prefix`): `s:{id}` is a list of turns as JSON, trimmed to
//! `max_turns` and expiring after the TTL; `sessions` is a sorted set of session ids by
//! last use (microseconds), which is how the least recently used sessions beyond `max_sessions` are
//! found. Each append is one atomic MULTI/EXEC, so concurrent replicas never lose a turn.

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::{use_clock, Limits, SessionStore, Turn};

pub struct RedisStore {
    client: redis::Client,
    connection: OnceCell<ConnectionManager>,
    prefix: String,
    limits: Limits,
    /// host:port only, for logs (the URL may carry a password).
    shown: String,
}

impl RedisStore {
    /// Parses the URL; the connection is made on first use (and remade when lost).
    pub fn new(url: &str, prefix: &str, limits: Limits) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("sessions.redis_url is not a Redis URL")?;
        let info = client.get_connection_info();
        let shown = format!("redis ({})", info.addr());
        Ok(Self {
            client,
            connection: OnceCell::new(),
            prefix: prefix.to_string(),
            limits,
            shown,
        })
    }

    async fn connection(&self) -> anyhow::Result<ConnectionManager> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2);
        let manager = self
            .connection
            .get_or_try_init(|| self.client.get_connection_manager_with_config(config))
            .await
            .with_context(|| format!("cannot reach {}", self.shown))?;
        Ok(manager.clone())
    }

    fn turns_key(&self, id: &str) -> String {
        format!("{}s:{id}", self.prefix)
    }

    fn index_key(&self) -> String {
        format!("{}sessions", self.prefix)
    }

    fn ttl_secs(&self) -> i64 {
        self.limits.ttl.as_secs().max(1) as i64
    }

    fn ttl_micros(&self) -> i64 {
        self.ttl_secs() * 1_000_000
    }
}

#[async_trait]
impl SessionStore for RedisStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn recent(&self, id: &str, turns: usize) -> anyhow::Result<Vec<Turn>> {
        if turns == 0 {
            return Ok(Vec::new());
        }
        let mut con = self.connection().await?;
        let raw: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(self.turns_key(id))
            .arg(-(turns as i64))
            .arg(-1)
            .query_async(&mut con)
            .await?;
        raw.iter()
            .map(|r| serde_json::from_slice(r).map_err(Into::into))
            .collect()
    }

    async fn append(&self, id: &str, turn: Turn) -> anyhow::Result<()> {
        let mut con = self.connection().await?;
        let key = self.turns_key(id);
        let index = self.index_key();
        let now = use_clock();
        let json = serde_json::to_vec(&turn)?;
        let (count,): (usize,) = redis::pipe()
            .atomic()
            .cmd("RPUSH")
            .arg(&key)
            .arg(json)
            .ignore()
            .cmd("LTRIM")
            .arg(&key)
            .arg(-(self.limits.max_turns as i64))
            .arg(-1)
            .ignore()
            .cmd("EXPIRE")
            .arg(&key)
            .arg(self.ttl_secs())
            .ignore()
            .cmd("ZADD")
            .arg(&index)
            .arg(now)
            .arg(id)
            .ignore()
            // Expired lists are gone by themselves; drop them from the index too.
            .cmd("ZREMRANGEBYSCORE")
            .arg(&index)
            .arg("-inf")
            .arg(now - self.ttl_micros())
            .ignore()
            .cmd("ZCARD")
            .arg(&index)
            .query_async(&mut con)
            .await?;
        if count > self.limits.max_sessions {
            let evicted: Vec<(String, f64)> = redis::cmd("ZPOPMIN")
                .arg(&index)
                .arg(count - self.limits.max_sessions)
                .query_async(&mut con)
                .await?;
            let keys: Vec<String> = evicted
                .iter()
                .filter(|(victim, _)| victim != id)
                .map(|(victim, _)| self.turns_key(victim))
                .collect();
            if evicted.iter().any(|(victim, _)| victim == id) {
                // Another replica's clock may rank the current session oldest: keep it anyway.
                let _: () = redis::cmd("ZADD")
                    .arg(&index)
                    .arg(now)
                    .arg(id)
                    .query_async(&mut con)
                    .await?;
            }
            if !keys.is_empty() {
                let _: () = redis::cmd("DEL").arg(keys).query_async(&mut con).await?;
            }
        }
        Ok(())
    }

    async fn count(&self) -> anyhow::Result<usize> {
        let mut con = self.connection().await?;
        let index = self.index_key();
        let (count,): (usize,) = redis::pipe()
            .cmd("ZREMRANGEBYSCORE")
            .arg(&index)
            .arg("-inf")
            .arg(use_clock() - self.ttl_micros())
            .ignore()
            .cmd("ZCARD")
            .arg(&index)
            .query_async(&mut con)
            .await?;
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    //! Against a real `redis-server` (Debian package `redis-server`), started here on a
    //! free port. Skipped when the binary is missing, unless `CI` is set.
    use super::*;
    use crate::sessions::contract;

    struct Server {
        child: std::process::Child,
        port: u16,
        _dir: tempfile::TempDir,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn start() -> Option<Server> {
        let binary = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let Some(binary) = binary else {
            assert!(
                std::env::var_os("CI").is_none(),
                "redis-server is missing: .ci/run installs the redis-server package"
            );
            eprintln!("skipped: redis-server is not installed");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new(binary)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = Server {
            child,
            port,
            _dir: dir,
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not start");
    }

    fn store(server: &Server, prefix: &str, limits: Limits) -> RedisStore {
        RedisStore::new(
            &format!("redis://127.0.0.1:{}/0", server.port),
            prefix,
            limits,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn keeps_order_caps_and_evicts() {
        let Some(server) = start() else { return };
        contract::keeps_order_and_caps(&store(&server, "t1:", contract::limits())).await;
        contract::evicts_least_recently_used(&store(&server, "t2:", contract::limits())).await;
    }

    #[tokio::test]
    async fn replicas_share_sessions_and_concurrent_appends_all_land() {
        let Some(server) = start() else { return };
        let mut limits = contract::limits();
        limits.max_turns = 100;
        let a = std::sync::Arc::new(store(&server, "shared:", limits));
        let b = std::sync::Arc::new(store(&server, "shared:", limits));
        let mut tasks = Vec::new();
        for n in 0..40 {
            let s = if n % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                s.append("one", contract::turn(n)).await.unwrap()
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(a.recent("one", 100).await.unwrap().len(), 40);
        assert_eq!(b.count().await.unwrap(), 1);
    }

    #[tokio::test]
    async fn an_unreachable_server_is_an_error_not_a_hang() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let s = RedisStore::new(
            &format!("redis://:secret@127.0.0.1:{port}"),
            "x:",
            contract::limits(),
        )
        .unwrap();
        let e = s.recent("a", 3).await.unwrap_err();
        assert!(format!("{e:#}").contains("cannot reach"), "{e:#}");
        assert!(!s.describe().contains("secret"));
    }
}

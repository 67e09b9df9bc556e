//! Sessions in Redis, shared by several gateway replicas.
//!
//! Keys (all under `sessions.redis_prefix`): `s:{session}` is a list of turns as JSON,
//! trimmed to `max_turns` and `max_session_bytes` and expiring after the TTL; `sessions`
//! is a sorted set of session names by last use (microseconds); `o:{owner}` the same for
//! one owner's sessions, and `owners` each owner's session count, which is how the owner's
//! share and the whole cap are kept. Each append is one Lua script, so concurrent replicas
//! never lose a turn nor leave the indexes out of step.
//!
//! Turns of one session take their turn across replicas in a queue: `q:{session}` is a
//! list of turn tokens in arrival order, the first one runs; each waiting or running turn
//! keeps `h:{token}` alive (an expiring key it renews), so a replica that died leaves the
//! queue when its key expires, and the turn after it goes on.

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::{use_clock, Limits, LockError, SessionKey, SessionStore, StoreLock, Turn};

/// How long a turn's place in the queue outlives a replica that died holding it.
const LOCK_TTL: Duration = Duration::from_secs(30);
/// How often a waiting turn looks at the queue again.
const LOCK_POLL: Duration = Duration::from_millis(25);

/// What both scripts share: the key prefix (`ARGV[1]`), forgetting one session (its list,
/// its index entries, its owner's count), forgetting the expired ones.
const FORGET_LUA: &str = r"
local prefix = ARGV[1]
local function owner_of(name)
  local slash = string.find(name, '/', 1, true)
  if slash then return string.sub(name, 1, slash - 1) end
  return ''
end
local function forget(name)
  local owner = owner_of(name)
  redis.call('DEL', prefix .. 's:' .. name)
  redis.call('ZREM', prefix .. 'sessions', name)
  if redis.call('ZREM', prefix .. 'o:' .. owner, name) == 1 then
    if tonumber(redis.call('ZINCRBY', prefix .. 'owners', -1, owner)) <= 0 then
      redis.call('ZREM', prefix .. 'owners', owner)
    end
  end
end
local function expire(now, ttl_us)
  local expired = redis.call('ZRANGEBYSCORE', prefix .. 'sessions', '-inf', now - ttl_us)
  for _, name in ipairs(expired) do forget(name) end
  return #expired
end
";

/// ARGV: prefix, now (µs), TTL (µs).
const EXPIRE_LUA: &str = r"
return expire(tonumber(ARGV[2]), tonumber(ARGV[3]))
";

/// ARGV: prefix, now (µs), TTL (µs), session name, turn JSON, max turns, max bytes, TTL
/// (s), owner's share (0 = none), max sessions. Returns the sessions kept.
const APPEND_LUA: &str = r"
local now, ttl_us, name, turn = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local max_turns, max_bytes, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local share, max_sessions = tonumber(ARGV[9]), tonumber(ARGV[10])
local owner = owner_of(name)
local list, index, owned = prefix .. 's:' .. name, prefix .. 'sessions', prefix .. 'o:' .. owner
expire(now, ttl_us)
redis.call('RPUSH', list, turn)
redis.call('LTRIM', list, -max_turns, -1)
local items = redis.call('LRANGE', list, 0, -1)
local bytes = 0
for _, item in ipairs(items) do bytes = bytes + #item end
local i = 1
while #items - i + 1 > 1 and bytes > max_bytes do
  bytes = bytes - #items[i]
  redis.call('LPOP', list)
  i = i + 1
end
redis.call('EXPIRE', list, ttl)
redis.call('ZADD', index, now, name)
if redis.call('ZADD', owned, now, name) == 1 then
  redis.call('ZINCRBY', prefix .. 'owners', 1, owner)
end
if share > 0 then
  local over = redis.call('ZCARD', owned) - share
  if over > 0 then
    for _, victim in ipairs(redis.call('ZRANGE', owned, 0, over)) do
      if over > 0 and victim ~= name then
        forget(victim)
        over = over - 1
      end
    end
  end
end
local total = redis.call('ZCARD', index)
while total > max_sessions do
  local top = redis.call('ZREVRANGE', prefix .. 'owners', 0, 0)
  if #top == 0 then break end
  local victim = nil
  for _, v in ipairs(redis.call('ZRANGE', prefix .. 'o:' .. top[1], 0, 1)) do
    if v ~= name then victim = v; break end
  end
  if not victim then break end
  forget(victim)
  total = total - 1
end
return total
";

/// Indexes by owner, once, the sessions stored before owners were (they are in the shared
/// namespace, or an owner their name says). ARGV: prefix. Returns how many.
const INDEX_OWNERS_LUA: &str = r"
if not redis.call('SET', prefix .. 'owners:indexed', 1, 'NX') then return 0 end
local all = redis.call('ZRANGE', prefix .. 'sessions', 0, -1, 'WITHSCORES')
for i = 1, #all, 2 do
  local name, used = all[i], all[i + 1]
  local owner = owner_of(name)
  if redis.call('ZADD', prefix .. 'o:' .. owner, used, name) == 1 then
    redis.call('ZINCRBY', prefix .. 'owners', 1, owner)
  end
end
return #all / 2
";

/// KEYS: a session's queue, a turn's heartbeat; ARGV: the turn's token, the lifetime in
/// milliseconds. Puts the turn at the end of the queue unless it is in it, and renews the
/// heartbeat and the queue's expiry (a queue of dead replicas goes by itself).
const JOIN_LUA: &str = r"
redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// As `JOIN_LUA`, but only for a turn still in the queue; 0 when it is not.
const RENEW_LUA: &str = r"
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return 0 end
redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

static JOIN: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(JOIN_LUA));
static RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW_LUA));
static INDEX_OWNERS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{FORGET_LUA}{INDEX_OWNERS_LUA}")));
static APPEND: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{FORGET_LUA}{APPEND_LUA}")));
static EXPIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{FORGET_LUA}{EXPIRE_LUA}")));

pub struct RedisStore {
    client: redis::Client,
    connection: OnceCell<ConnectionManager>,
    prefix: String,
    limits: Limits,
    /// How long a lock lives without being renewed.
    lock_ttl: Duration,
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
            lock_ttl: LOCK_TTL,
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
            .get_or_try_init(|| async {
                let mut con = self
                    .client
                    .get_connection_manager_with_config(config)
                    .await?;
                let indexed: usize = INDEX_OWNERS
                    .arg(&self.prefix)
                    .invoke_async(&mut con)
                    .await?;
                if indexed > 0 {
                    tracing::info!(
                        sessions = indexed,
                        "sessions: stored sessions indexed by owner (they stay in the shared namespace)"
                    );
                }
                Ok::<_, redis::RedisError>(con)
            })
            .await
            .with_context(|| format!("cannot reach {}", self.shown))?;
        Ok(manager.clone())
    }

    fn turns_key(&self, key: &SessionKey) -> String {
        format!("{}s:{}", self.prefix, key.stored())
    }

    fn ttl_micros(&self) -> i64 {
        self.limits.ttl.as_secs().max(1) as i64 * 1_000_000
    }

    /// Where `token` stands in the queue; drops a first one whose replica died (its
    /// heartbeat expired) on the way.
    async fn place(
        &self,
        con: &mut ConnectionManager,
        queue: &str,
        token: &str,
    ) -> anyhow::Result<Place> {
        loop {
            let head: Option<String> = redis::cmd("LINDEX")
                .arg(queue)
                .arg(0)
                .query_async(con)
                .await?;
            let Some(head) = head else {
                return Ok(Place::Lost);
            };
            if head == token {
                return Ok(Place::First);
            }
            let alive: bool = redis::cmd("EXISTS")
                .arg(self.heartbeat_key(&head))
                .query_async(con)
                .await?;
            if !alive {
                let _: i64 = redis::cmd("LREM")
                    .arg(queue)
                    .arg(1)
                    .arg(&head)
                    .query_async(con)
                    .await?;
                continue;
            }
            let at: Option<i64> = redis::cmd("LPOS")
                .arg(queue)
                .arg(token)
                .query_async(con)
                .await?;
            return Ok(if at.is_some() {
                Place::Waiting
            } else {
                Place::Lost
            });
        }
    }

    /// Joins the queue (again) if `token` is not in it, and renews its heartbeat and the
    /// queue's expiry.
    async fn join(
        &self,
        con: &mut ConnectionManager,
        queue: &str,
        token: &str,
    ) -> redis::RedisResult<()> {
        JOIN.key(queue)
            .key(self.heartbeat_key(token))
            .arg(token)
            .arg(self.lock_ttl.as_millis() as u64)
            .invoke_async(con)
            .await
    }

    fn heartbeat_key(&self, token: &str) -> String {
        format!("{}h:{token}", self.prefix)
    }
}

/// Where a turn stands in its session's queue.
enum Place {
    First,
    Waiting,
    /// Not in the queue (taken for dead while Redis was slow, or Redis restarted).
    Lost,
}

/// Keeps a turn's place alive at a third of its lifetime, while it is still in the queue
/// (a holder that lost it is reported: another replica may run the session's next turn).
fn heartbeat(
    mut con: ConnectionManager,
    queue: String,
    token: String,
    beat: String,
    ttl: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(ttl / 3);
        tick.tick().await;
        loop {
            tick.tick().await;
            let renewed: redis::RedisResult<i64> = RENEW
                .key(&queue)
                .key(&beat)
                .arg(&token)
                .arg(ttl.as_millis() as u64)
                .invoke_async(&mut con)
                .await;
            match renewed {
                Ok(1) => {}
                Ok(_) => tracing::warn!("sessions: a turn lost its place in its session's queue"),
                Err(e) => {
                    tracing::warn!(error = %e, "sessions: a turn's place could not be renewed")
                }
            }
        }
    })
}

/// Leaves a session's queue (and stops the heartbeat) when dropped.
struct QueuePlace {
    heartbeat: tokio::task::JoinHandle<()>,
    leave: Option<(ConnectionManager, String, String, String)>,
}

impl StoreLock for QueuePlace {}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.heartbeat.abort();
        if let Some((mut con, queue, token, beat)) = self.leave.take() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let left: redis::RedisResult<()> = redis::pipe()
                        .cmd("LREM")
                        .arg(&queue)
                        .arg(1)
                        .arg(&token)
                        .ignore()
                        .cmd("DEL")
                        .arg(&beat)
                        .ignore()
                        .query_async(&mut con)
                        .await;
                    if let Err(e) = left {
                        tracing::warn!(error = %e, "sessions: could not leave a session's queue (the place expires by itself)");
                    }
                });
            }
        }
    }
}

#[async_trait]
impl SessionStore for RedisStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn recent(&self, key: &SessionKey, turns: usize) -> anyhow::Result<Vec<Turn>> {
        if turns == 0 {
            return Ok(Vec::new());
        }
        let mut con = self.connection().await?;
        let raw: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(self.turns_key(key))
            .arg(-(turns as i64))
            .arg(-1)
            .query_async(&mut con)
            .await?;
        raw.iter()
            .map(|r| serde_json::from_slice(r).map_err(Into::into))
            .collect()
    }

    async fn append(&self, key: &SessionKey, turn: Turn) -> anyhow::Result<()> {
        let mut con = self.connection().await?;
        let json = turn.encode(self.limits.max_bytes)?;
        let share = if key.owner.is_shared() {
            0
        } else {
            self.limits.max_per_owner
        };
        let _kept: i64 = APPEND
            .arg(&self.prefix)
            .arg(use_clock())
            .arg(self.ttl_micros())
            .arg(key.stored())
            .arg(json)
            .arg(self.limits.max_turns)
            .arg(self.limits.max_bytes)
            .arg(self.limits.ttl.as_secs().max(1))
            .arg(share)
            .arg(self.limits.max_sessions)
            .invoke_async(&mut con)
            .await?;
        Ok(())
    }

    async fn count(&self) -> anyhow::Result<usize> {
        let mut con = self.connection().await?;
        let count: usize = redis::cmd("ZCOUNT")
            .arg(format!("{}sessions", self.prefix))
            .arg(use_clock() - self.ttl_micros())
            .arg("+inf")
            .query_async(&mut con)
            .await?;
        Ok(count)
    }

    async fn expire(&self) -> anyhow::Result<usize> {
        let mut con = self.connection().await?;
        let expired: usize = EXPIRE
            .arg(&self.prefix)
            .arg(use_clock())
            .arg(self.ttl_micros())
            .invoke_async(&mut con)
            .await?;
        Ok(expired)
    }

    /// Joins the session's queue and waits to be first (at most `wait`).
    async fn lock(
        &self,
        key: &SessionKey,
        wait: Duration,
    ) -> Result<Option<Box<dyn StoreLock>>, LockError> {
        let mut con = self.connection().await.map_err(LockError::Store)?;
        let queue = format!("{}q:{}", self.prefix, key.stored());
        let token = uuid::Uuid::new_v4().simple().to_string();
        let beat = self.heartbeat_key(&token);
        self.join(&mut con, &queue, &token)
            .await
            .map_err(|e| LockError::Store(e.into()))?;
        // From here on, dropping the place leaves the queue: on every path.
        let place = QueuePlace {
            heartbeat: heartbeat(
                con.clone(),
                queue.clone(),
                token.clone(),
                beat.clone(),
                self.lock_ttl,
            ),
            leave: Some((con.clone(), queue.clone(), token.clone(), beat)),
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self
                .place(&mut con, &queue, &token)
                .await
                .map_err(LockError::Store)?
            {
                Place::First => return Ok(Some(Box::new(place))),
                Place::Waiting => {}
                // Back in at the end rather than waiting for ever for a place it lost.
                Place::Lost => self
                    .join(&mut con, &queue, &token)
                    .await
                    .map_err(|e| LockError::Store(e.into()))?,
            }
            if tokio::time::Instant::now() + LOCK_POLL > deadline {
                return Err(LockError::Busy);
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
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
        contract::owners_are_apart(&store(&server, "t3:", contract::limits())).await;
        contract::eviction_is_fair(&store(&server, "t4:", contract::limits())).await;
        contract::bounds_bytes(&store(&server, "t5:", contract::limits())).await;
    }

    #[tokio::test]
    async fn replicas_share_sessions_and_concurrent_appends_all_land() {
        let Some(server) = start() else { return };
        let mut limits = contract::limits();
        limits.max_turns = 100;
        limits.max_bytes = 1 << 20;
        let a = std::sync::Arc::new(store(&server, "shared:", limits));
        let b = std::sync::Arc::new(store(&server, "shared:", limits));
        let mut tasks = Vec::new();
        for n in 0..40 {
            let s = if n % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                s.append(&contract::shared("one"), contract::turn(n))
                    .await
                    .unwrap()
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            a.recent(&contract::shared("one"), 100).await.unwrap().len(),
            40
        );
        assert_eq!(b.count().await.unwrap(), 1);
    }

    /// One replica holds a session; another waits for it (at most its wait), and gets it
    /// once the first lets go. A place outlives its expiry while its holder renews it, and
    /// the place of a replica that died expires.
    #[tokio::test]
    async fn a_session_lock_holds_across_replicas() {
        let Some(server) = start() else { return };
        let mut a = store(&server, "lock:", contract::limits());
        a.lock_ttl = Duration::from_millis(600);
        let b = store(&server, "lock:", contract::limits());
        let key = contract::owned(1, "s");
        let held = a.lock(&key, Duration::from_secs(1)).await.unwrap();
        assert!(held.is_some());
        // Twice its lifetime later it is still held: renewed.
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let started = std::time::Instant::now();
        let waited = b.lock(&key, Duration::from_millis(300)).await;
        assert!(matches!(waited, Err(LockError::Busy)), "still held");
        assert!(started.elapsed() >= Duration::from_millis(250));
        // Another session is free; the same one once released.
        assert!(b
            .lock(&contract::owned(2, "s"), Duration::from_millis(100))
            .await
            .is_ok());
        drop(held);
        assert!(b.lock(&key, Duration::from_secs(2)).await.is_ok());

        // A replica that dies holding a session: its heartbeat stops, and after its
        // lifetime the next turn goes on.
        let mut con = a.connection().await.unwrap();
        let queue = format!("lock:q:{}", key.stored());
        let _: () = redis::pipe()
            .cmd("SET")
            .arg("lock:h:dead-replica")
            .arg(1)
            .arg("PX")
            .arg(300)
            .ignore()
            .cmd("RPUSH")
            .arg(&queue)
            .arg("dead-replica")
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        assert!(b.lock(&key, Duration::from_secs(2)).await.is_ok());
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "it waited for the dead replica's place to expire"
        );
    }

    /// A waiting turn whose place is lost (Redis restarted, or the queue expired) joins
    /// again instead of waiting out its time for a place it no longer has.
    #[tokio::test]
    async fn a_turn_that_lost_its_place_joins_again() {
        let Some(server) = start() else { return };
        let a = store(&server, "lost:", contract::limits());
        let b = std::sync::Arc::new(store(&server, "lost:", contract::limits()));
        let key = contract::owned(1, "s");
        let held = a.lock(&key, Duration::from_secs(1)).await.unwrap();
        let waiting = {
            let (b, key) = (b.clone(), key.clone());
            tokio::spawn(async move { b.lock(&key, Duration::from_secs(3)).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut con = a.connection().await.unwrap();
        let _: () = redis::cmd("DEL")
            .arg(format!("lost:q:{}", key.stored()))
            .query_async(&mut con)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        assert!(
            waiting.await.unwrap().is_ok(),
            "it joined again and got its turn"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(held);
    }

    #[tokio::test]
    async fn expired_sessions_leave_the_indexes() {
        let Some(server) = start() else { return };
        let mut limits = contract::limits();
        limits.ttl = Duration::from_secs(1);
        let s = store(&server, "exp:", limits);
        s.append(&contract::owned(1, "x"), contract::turn(0))
            .await
            .unwrap();
        assert_eq!(s.count().await.unwrap(), 1);
        tokio::time::sleep(Duration::from_millis(2100)).await;
        assert_eq!(s.count().await.unwrap(), 0);
        assert_eq!(s.expire().await.unwrap(), 1);
        let mut con = s.connection().await.unwrap();
        let owners: usize = redis::cmd("ZCARD")
            .arg("exp:owners")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(owners, 0, "the owner's count went with its session");
    }

    /// Sessions written before owners (a list and the index entry) are indexed by owner on
    /// connecting, and keep working in the shared namespace.
    #[tokio::test]
    async fn sessions_stored_before_owners_keep_working() {
        let Some(server) = start() else { return };
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/0", server.port)).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let turn = serde_json::to_vec(&contract::turn(1)).unwrap();
        let _: () = redis::pipe()
            .cmd("RPUSH")
            .arg("old:s:legacy")
            .arg(turn)
            .ignore()
            .cmd("ZADD")
            .arg("old:sessions")
            .arg(use_clock())
            .arg("legacy")
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
        let s = store(&server, "old:", contract::limits());
        assert_eq!(
            s.recent(&contract::shared("legacy"), 5)
                .await
                .unwrap()
                .len(),
            1
        );
        let owned: usize = redis::cmd("ZCARD")
            .arg("old:o:")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(owned, 1, "indexed for the shared namespace");
        assert!(s
            .recent(&contract::owned(1, "legacy"), 5)
            .await
            .unwrap()
            .is_empty());
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
        let e = s.recent(&contract::shared("a"), 3).await.unwrap_err();
        assert!(format!("{e:#}").contains("cannot reach"), "{e:#}");
        assert!(!s.describe().contains("secret"));
    }
}

//! `server.rate_limit_per_minute` and `server.max_streams_per_key` counted in Redis when
//! the sessions are there, so that replicas sharing it share each caller's limits (two
//! replicas would otherwise let a caller through twice as often).
//!
//! Requests per minute: the same rule as one gateway's (GCRA: a burst of N, then one every
//! 60/N s), its state one timestamp per caller, read and moved by one script with the
//! server's own clock (`{prefix}rl:{caller}`). Open streams: a sorted set of leases per
//! caller (`{prefix}st:{caller}`), each renewed while its stream lives, so a replica that
//! dies frees its slots within a lease.

use std::time::Duration;

use super::link::Link;

/// How long a stream slot is held without being renewed.
pub const LEASE: Duration = Duration::from_secs(60);

/// How long Redis is left alone after it failed (the limits count locally meanwhile).
const BACK_OFF: Duration = Duration::from_secs(5);

/// The scripts' clock: the server's. Requests in microseconds, leases in milliseconds.
const NOW_US: &str = "local t = redis.call('TIME') local now = t[1] * 1000000 + t[2]";
const NOW: &str = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)";

pub struct SharedLimits {
    link: Link,
    prefix: String,
    /// Until when Redis is not asked, after a failure: a Redis that is down must not put
    /// a connection attempt in front of every request.
    resting: std::sync::Mutex<Option<std::time::Instant>>,
    gcra: redis::Script,
    claim: redis::Script,
    renew: redis::Script,
}

impl SharedLimits {
    pub fn new(url: &str, prefix: &str) -> anyhow::Result<Self> {
        Ok(Self {
            link: Link::new(url)?,
            prefix: prefix.to_string(),
            resting: std::sync::Mutex::new(None),
            // KEYS[1] the caller's timestamp; ARGV: µs between requests, the burst.
            gcra: redis::Script::new(&format!(
                "{NOW_US}
                 local emission = tonumber(ARGV[1]) local burst = tonumber(ARGV[2])
                 local tat = tonumber(redis.call('GET', KEYS[1]) or now)
                 if tat < now then tat = now end
                 local next = tat + emission
                 local allowed_at = next - burst * emission
                 if now < allowed_at then return {{0, allowed_at - now}} end
                 redis.call('SET', KEYS[1], next, 'PX', math.ceil((next - now) / 1000))
                 return {{1, math.floor((now + burst * emission - next) / emission)}}"
            )),
            // KEYS[1] the caller's leases; ARGV: most at once, lease ms, the slot's id.
            claim: redis::Script::new(&format!(
                "{NOW}
                 redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
                 if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
                 redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
                 redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
                 return 1"
            )),
            // KEYS[1] the caller's leases; ARGV: lease ms, the slot's id.
            renew: redis::Script::new(&format!(
                "{NOW}
                 redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[2])
                 redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
                 return 1"
            )),
        })
    }

    /// Counts one request of `caller` against `per_minute`: `Ok(remaining)`, or
    /// `Err(seconds to wait)`.
    pub async fn request(&self, caller: &str, per_minute: u32) -> anyhow::Result<Result<u32, u64>> {
        let emission = 60_000_000 / u64::from(per_minute.max(1));
        let (allowed, value): (u8, u64) = self
            .asked(async {
                let mut con = self.link.connection("rate limits").await?;
                Ok(self
                    .gcra
                    .key(format!("{}rl:{caller}", self.prefix))
                    .arg(emission)
                    .arg(per_minute)
                    .invoke_async(&mut con)
                    .await?)
            })
            .await?;
        Ok(if allowed == 1 {
            Ok(u32::try_from(value).unwrap_or(u32::MAX))
        } else {
            Err(value.div_ceil(1_000_000).max(1))
        })
    }

    /// Asks Redis unless it failed in the last `BACK_OFF`; a failure starts a rest, said
    /// once.
    async fn asked<T>(
        &self,
        ask: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let resting = |until: &mut Option<std::time::Instant>| {
            until.is_some_and(|t| std::time::Instant::now() < t)
        };
        if resting(&mut self.resting.lock().unwrap_or_else(|e| e.into_inner())) {
            anyhow::bail!("redis failed a moment ago");
        }
        let answer = ask.await;
        if let Err(e) = &answer {
            let mut until = self.resting.lock().unwrap_or_else(|e| e.into_inner());
            if !resting(&mut until) {
                tracing::warn!(error = %format!("{e:#}"), rest_secs = BACK_OFF.as_secs(), "limits: redis did not answer; counting in this replica meanwhile");
            }
            *until = Some(std::time::Instant::now() + BACK_OFF);
        }
        answer
    }

    /// Takes one of `caller`'s `max` stream slots under `id`; `false` when all are taken.
    pub async fn claim(&self, caller: &str, max: usize, id: &str) -> anyhow::Result<bool> {
        let taken: u8 = self
            .asked(async {
                let mut con = self.link.connection("stream limits").await?;
                Ok(self
                    .claim
                    .key(self.streams_key(caller))
                    .arg(max)
                    .arg(LEASE.as_millis() as u64)
                    .arg(id)
                    .invoke_async(&mut con)
                    .await?)
            })
            .await?;
        Ok(taken == 1)
    }

    /// Holds slot `id` for another lease.
    pub async fn renew(&self, caller: &str, id: &str) -> anyhow::Result<()> {
        let mut con = self.link.connection("stream limits").await?;
        let _: u8 = self
            .renew
            .key(self.streams_key(caller))
            .arg(LEASE.as_millis() as u64)
            .arg(id)
            .invoke_async(&mut con)
            .await?;
        Ok(())
    }

    /// Gives slot `id` back.
    pub async fn release(&self, caller: &str, id: &str) -> anyhow::Result<()> {
        let mut con = self.link.connection("stream limits").await?;
        let _: u64 = redis::cmd("ZREM")
            .arg(self.streams_key(caller))
            .arg(id)
            .query_async(&mut con)
            .await?;
        Ok(())
    }

    fn streams_key(&self, caller: &str) -> String {
        format!("{}st:{caller}", self.prefix)
    }
}

//! `[sessions]`: conversation memory, in process or in Redis.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check, secs, unset_if_empty, SettingsError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionBackend {
    Embedded,
    Redis,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSettings {
    pub backend: SessionBackend,
    #[serde(default, with = "unset_if_empty")]
    pub redis_url: Option<String>,
    pub redis_prefix: String,
    pub window_turns: usize,
    pub max_turns: usize,
    /// Bytes of one session's stored turns.
    pub max_session_bytes: usize,
    #[serde(rename = "ttl_secs", with = "secs")]
    pub ttl: Duration,
    pub max_sessions: usize,
    /// Sessions one API key keeps (the shared namespace of a gateway without keys has all).
    pub max_sessions_per_caller: usize,
    /// Longest a turn waits for the session's earlier turn to finish.
    #[serde(rename = "wait_secs", with = "secs")]
    pub wait: Duration,
}

impl SessionSettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        check(
            self.max_turns > 0 && self.window_turns <= self.max_turns,
            "sessions.window_turns / sessions.max_turns",
            "max_turns must be at least 1 and at least window_turns",
        )?;
        check(
            self.max_sessions > 0 && !self.ttl.is_zero() && !self.wait.is_zero(),
            "sessions.max_sessions / sessions.ttl_secs / sessions.wait_secs",
            "must be at least 1",
        )?;
        check(
            self.max_sessions_per_caller > 0,
            "sessions.max_sessions_per_caller",
            "must be at least 1",
        )?;
        check(
            self.max_session_bytes >= 4096,
            "sessions.max_session_bytes",
            "must be at least 4096",
        )?;
        check(
            self.backend != SessionBackend::Redis || self.redis_url.is_some(),
            "sessions.redis_url",
            "the redis backend needs a URL, e.g. redis://127.0.0.1:6379",
        )
    }
}

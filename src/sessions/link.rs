//! One lazily made, self-healing connection to the Redis server the session store names,
//! for what counts in Redis beside the sessions (usage, shared limits).

use std::time::Duration;

use anyhow::Context;

pub struct Link {
    client: redis::Client,
    connection: tokio::sync::OnceCell<redis::aio::ConnectionManager>,
}

impl Link {
    pub fn new(url: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("sessions.redis_url is not a Redis URL")?;
        Ok(Self {
            client,
            connection: tokio::sync::OnceCell::new(),
        })
    }

    /// The connection, made on first use; `what` names the user in the error.
    pub async fn connection(&self, what: &str) -> anyhow::Result<redis::aio::ConnectionManager> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2);
        let manager = self
            .connection
            .get_or_try_init(|| self.client.get_connection_manager_with_config(config))
            .await
            .with_context(|| format!("{what}: cannot reach redis"))?;
        Ok(manager.clone())
    }
}

//! `[server]` (the HTTP listener: address, keys, limits, TLS, timeouts), `[grpc]` (its
//! own listener) and `[log]`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::{check, is_host_port, list_or_comma_string, secs, unset_if_empty, SettingsError};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub addr: String,
    #[serde(deserialize_with = "api_key_list")]
    pub api_keys: Vec<ApiKey>,
    /// Operator keys: the only keys that reach `/metrics` and the knowledge routes
    /// (`/v1/knowledge`); also accepted wherever an API key is.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub admin_keys: Vec<String>,
    /// A file with more keys, one a line (`key`, or `name key`; `#` comments and blank
    /// lines ignored), read at start-up and added to `api_keys`.
    #[serde(default, with = "unset_if_empty")]
    pub api_keys_file: Option<PathBuf>,
    #[serde(deserialize_with = "list_or_comma_string")]
    pub cors_origins: Vec<String>,
    /// Host names (or addresses) requests may be addressed to, besides the localhost
    /// names and the bound address.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    pub max_messages: usize,
    pub max_message_chars: usize,
    /// Most texts one embedding request may carry.
    pub max_embedding_inputs: usize,
    /// Embedding requests served at once; more → 429.
    pub max_concurrent_embeddings: usize,
    #[serde(rename = "shutdown_grace_secs", with = "secs")]
    pub shutdown_grace: Duration,
    pub ollama_version: String,
    /// Requests per minute per API key (per client IP without keys); 0 = no limit.
    pub rate_limit_per_minute: u32,
    /// Streamed answers open at once per API key (per client IP without keys); 0 = no limit.
    pub max_streams_per_key: u32,
    /// PEM certificate chain and private key: both set = HTTPS (HTTP/1.1 and HTTP/2).
    #[serde(default, with = "unset_if_empty")]
    pub tls_cert: Option<PathBuf>,
    #[serde(default, with = "unset_if_empty")]
    pub tls_key: Option<PathBuf>,
    /// A connection must deliver a request's headers (and a TLS handshake) within this.
    #[serde(rename = "header_read_timeout_secs", with = "secs")]
    pub header_read_timeout: Duration,
    /// A request's body must arrive within this; slower → 408.
    #[serde(rename = "body_read_timeout_secs", with = "secs")]
    pub body_read_timeout: Duration,
    /// A client must take each part of a streamed answer within this, or the stream ends.
    #[serde(rename = "write_timeout_secs", with = "secs")]
    pub write_timeout: Duration,
    /// A connection (HTTP/1.1 or HTTP/2) with no request in flight this long is closed.
    #[serde(rename = "idle_timeout_secs", with = "secs")]
    pub idle_timeout: Duration,
    /// Most connections open at once per listener (HTTP, gRPC); one more evicts the
    /// connection idle longest, or is refused when all are busy.
    pub max_connections: usize,
    /// Most connections per listener from one client address (0: no cap of its own); held
    /// to a quarter of `max_connections`, so one address always leaves room for others.
    pub max_connections_per_address: usize,
    /// Request headers that name the conversation when the body has no `session_id`
    /// (the first one present counts), e.g. Open WebUI's `X-OpenWebUI-Chat-Id`.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub session_headers: Vec<String>,
    /// The gateway's address as clients' users reach it (`https://gw.example.com`), for
    /// the links of cited sources; empty = the request's own scheme and `Host`.
    #[serde(default, with = "unset_if_empty")]
    pub public_url: Option<String>,
}

/// One accepted API key: the secret, the name it is counted and reported under (never
/// the secret), and its own limits. In TOML a plain string or a table
/// `{ name, key, tokens_per_day, requests_per_minute }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ApiKeyEntry")]
pub struct ApiKey {
    /// Its name in usage reports and metrics; `None`: `key-` and its place in the list
    /// (see `serve::access`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub key: String,
    /// Prompt and answer tokens the key may use per UTC day; 0 = no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens_per_day: u64,
    /// Answers the key may ask for per minute, counted across replicas; 0 = no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requests_per_minute: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ApiKeyEntry {
    Plain(String),
    Named(NamedKey),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedKey {
    #[serde(default)]
    name: Option<String>,
    key: String,
    #[serde(default)]
    tokens_per_day: u64,
    #[serde(default)]
    requests_per_minute: u64,
}

impl From<ApiKeyEntry> for ApiKey {
    fn from(entry: ApiKeyEntry) -> Self {
        match entry {
            ApiKeyEntry::Plain(key) => key.into(),
            ApiKeyEntry::Named(k) => Self {
                name: k.name.map(|n| n.trim().to_string()),
                key: k.key,
                tokens_per_day: k.tokens_per_day,
                requests_per_minute: k.requests_per_minute,
            },
        }
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self {
            name: None,
            key,
            tokens_per_day: 0,
            requests_per_minute: 0,
        }
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        key.to_string().into()
    }
}

impl PartialEq<&str> for ApiKey {
    fn eq(&self, other: &&str) -> bool {
        self.name.is_none() && self.key == *other
    }
}

/// `api_keys`: a list of plain keys and `{ name, key, … }` tables, or (from the
/// environment) one comma-separated string of plain keys or a JSON list. Read as a value
/// first: an untagged enum would hide why a list's entry is wrong.
fn api_key_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ApiKey>, D::Error> {
    use serde::de::Error as _;
    const SYNTAX: &str = "write plain keys comma-separated (key-one,key-two) or a JSON list \
        ([\"key-one\", {\"name\": \"alice\", \"key\": \"key-two\", \"tokens_per_day\": 400}])";
    let refused = |why: String| D::Error::custom(format!("not a list of keys ({why}): {SYNTAX}"));
    let value = match serde_json::Value::deserialize(d)? {
        // A list written in JSON (the environment's way to give tables): read whole, or
        // refused; split on its commas it would make keys of its fragments.
        serde_json::Value::String(s) if s.trim_start().starts_with('[') => {
            serde_json::from_str(&s).map_err(|e| refused(e.to_string()))?
        }
        serde_json::Value::String(s) => {
            let keys: Vec<ApiKey> = s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(ApiKey::from)
                .collect();
            if keys
                .iter()
                .any(|k| k.key.contains(['"', '{', '}', '[', ']']))
            {
                return Err(refused(
                    "a key holds quotes or braces, a list's syntax broken apart".into(),
                ));
            }
            return Ok(keys);
        }
        value => value,
    };
    let serde_json::Value::Array(entries) = value else {
        return Err(refused("neither a list nor a text".into()));
    };
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| match entry {
            serde_json::Value::String(key) => Ok(ApiKey::from(key)),
            table @ serde_json::Value::Object(_) => serde_json::from_value::<NamedKey>(table)
                .map(|k| ApiKey::from(ApiKeyEntry::Named(k)))
                .map_err(|e| refused(format!("entry {}: {e}", i + 1))),
            _ => Err(refused(format!(
                "entry {} is neither a key nor a table",
                i + 1
            ))),
        })
        .collect()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub level: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// The gRPC service `brunix.AssistanceEngine`, served beside HTTP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcSettings {
    /// host:port; empty = no gRPC.
    pub addr: String,
    /// `avap_code` of `AskAgent`'s answer.
    pub avap_code: String,
}

impl ServerSettings {
    /// The connections one client address may hold per listener: the setting, held to a
    /// quarter of `max_connections` (0: no cap of its own).
    pub fn connections_per_address(&self) -> usize {
        match self.max_connections_per_address {
            0 => 0,
            n => n.min(self.max_connections / 4).max(1),
        }
    }

    /// Adds the keys of `api_keys_file` to `api_keys`.
    pub(super) fn read_keys_file(&mut self) -> Result<(), SettingsError> {
        let Some(path) = &self.api_keys_file else {
            return Ok(());
        };
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| SettingsError::new("server.api_keys_file", format!("{shown}: {e}")))?;
        let keys: Vec<ApiKey> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    [name, key] => ApiKey {
                        name: Some(name.to_string()),
                        ..ApiKey::from(key)
                    },
                    _ => ApiKey::from(line),
                },
            )
            .collect();
        if keys.is_empty() {
            return Err(SettingsError::new(
                "server.api_keys_file",
                format!("{shown} has no keys"),
            ));
        }
        self.api_keys.extend(keys);
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        let addr = &self.addr;
        if !is_host_port(addr) {
            return Err(SettingsError::new(
                "server.addr",
                format!("'{addr}' is not host:port"),
            ));
        }
        check(
            self.max_messages > 0 && self.max_message_chars > 0 && self.max_embedding_inputs > 0,
            "server.max_messages / server.max_message_chars / server.max_embedding_inputs",
            "must be at least 1",
        )?;
        check(
            self.max_body_bytes >= 1024,
            "server.max_body_bytes",
            "must be at least 1024",
        )?;
        check(
            self.tls_cert.is_some() == self.tls_key.is_some(),
            "server.tls_cert / server.tls_key",
            "set both (PEM files) for HTTPS, or neither for plain HTTP",
        )?;
        for (key, path) in [
            ("server.tls_cert", &self.tls_cert),
            ("server.tls_key", &self.tls_key),
        ] {
            if let Some(path) = path.as_deref().filter(|p| !p.is_file()) {
                return Err(SettingsError::new(
                    key,
                    format!("file {} does not exist", path.display()),
                ));
            }
        }
        check(
            !self.header_read_timeout.is_zero()
                && !self.body_read_timeout.is_zero()
                && !self.write_timeout.is_zero(),
            "server.header_read_timeout_secs / server.body_read_timeout_secs / server.write_timeout_secs",
            "must be at least 1 second",
        )?;
        check(
            !self.idle_timeout.is_zero(),
            "server.idle_timeout_secs",
            "must be at least 1 second",
        )?;
        check(
            self.max_connections >= 16,
            "server.max_connections",
            "must be at least 16",
        )?;
        check(
            self.max_concurrent_embeddings > 0,
            "server.max_concurrent_embeddings",
            "must be at least 1",
        )?;
        for host in &self.allowed_hosts {
            // A name or an address, without a port (the port is not checked): an IPv6
            // address is the one kind with colons.
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let ok = !host.is_empty()
                && !host.contains(['/', ' ', '@'])
                && (!bare.contains(':') || bare.parse::<std::net::Ipv6Addr>().is_ok())
                && axum::http::HeaderValue::from_str(host).is_ok();
            if !ok {
                return Err(SettingsError::new(
                    "server.allowed_hosts",
                    format!(
                        "'{host}' is not a host name or address without a port (e.g. gateway.internal, 10.0.0.5, fd00::5)"
                    ),
                ));
            }
        }
        check(
            self.api_keys.iter().all(|k| !k.key.trim().is_empty()),
            "server.api_keys",
            "keys must not be empty",
        )?;
        check(
            self.admin_keys.iter().all(|k| k.trim().len() >= 16),
            "server.admin_keys",
            "an operator key is at least 16 characters",
        )?;
        let mut names = std::collections::HashSet::new();
        for name in self.api_keys.iter().filter_map(|k| k.name.as_deref()) {
            check(
                !name.is_empty()
                    && name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)),
                "server.api_keys",
                "a key's name is 1 to 64 ASCII letters, digits and - _ . @",
            )?;
            check(
                names.insert(name),
                "server.api_keys",
                "two keys have the same name",
            )?;
            check(
                !name
                    .strip_prefix("key-")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_hexdigit())),
                "server.api_keys",
                "key-1, key-2, … name the keys without a name (by their place in the list), and \
                 key- with hex digits is where their usage is kept",
            )?;
            check(
                !self.api_keys.iter().any(|k| k.key == name),
                "server.api_keys",
                "a key's name must not be a key (names are shown in metrics and reports)",
            )?;
        }
        for origin in &self.cors_origins {
            let ok = origin == "*"
                || (origin.starts_with("http://") || origin.starts_with("https://"))
                    && axum::http::HeaderValue::from_str(origin).is_ok()
                    && !origin.ends_with('/');
            if !ok {
                return Err(SettingsError::new(
                    "server.cors_origins",
                    format!("'{origin}' is not \"*\" or an origin like https://chat.example.com"),
                ));
            }
        }
        for name in &self.session_headers {
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(SettingsError::new(
                    "server.session_headers",
                    format!("'{name}' is not a header name"),
                ));
            }
        }
        if let Some(url) = &self.public_url {
            let ok = (url.starts_with("http://") || url.starts_with("https://"))
                && url
                    .parse::<axum::http::Uri>()
                    .is_ok_and(|u| u.host().is_some());
            if !ok {
                return Err(SettingsError::new(
                    "server.public_url",
                    format!("'{url}' is not a URL like https://gw.example.com"),
                ));
            }
        }
        Ok(())
    }
}

impl GrpcSettings {
    /// The address to serve gRPC on, when it is on.
    pub fn addr(&self) -> Option<&str> {
        let addr = self.addr.trim();
        (!addr.is_empty()).then_some(addr)
    }

    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        match self.addr() {
            Some(addr) if !is_host_port(addr) => Err(SettingsError::new(
                "grpc.addr",
                format!("'{addr}' is not host:port (empty turns gRPC off)"),
            )),
            _ => Ok(()),
        }
    }
}

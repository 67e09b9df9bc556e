//! `[server]` (the HTTP listener: address, keys, limits, TLS, timeouts), `[grpc]` (its
//! own listener) and `[log]`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check, is_host_port, list_or_comma_string, secs, unset_if_empty, SettingsError};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub addr: String,
    #[serde(deserialize_with = "list_or_comma_string")]
    pub api_keys: Vec<String>,
    /// A file with more keys, one a line (`#` comments and blank lines ignored), read at
    /// start-up and added to `api_keys`.
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
    /// Request headers that name the conversation when the body has no `session_id`
    /// (the first one present counts), e.g. Open WebUI's `X-OpenWebUI-Chat-Id`.
    #[serde(deserialize_with = "list_or_comma_string")]
    pub session_headers: Vec<String>,
    /// The gateway's address as clients' users reach it (`https://gw.example.com`), for
    /// the links of cited sources; empty = the request's own scheme and `Host`.
    #[serde(default, with = "unset_if_empty")]
    pub public_url: Option<String>,
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
    /// Adds the keys of `api_keys_file` to `api_keys`.
    pub(super) fn read_keys_file(&mut self) -> Result<(), SettingsError> {
        let Some(path) = &self.api_keys_file else {
            return Ok(());
        };
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| SettingsError::new("server.api_keys_file", format!("{shown}: {e}")))?;
        let keys: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
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
            self.api_keys.iter().all(|k| !k.trim().is_empty()),
            "server.api_keys",
            "keys must not be empty",
        )?;
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

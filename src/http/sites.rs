//! Which sites may talk to the gateway. A web page in the user's browser can send requests
//! to a gateway on the same machine, and, by pointing its own name at 127.0.0.1 (DNS
//! rebinding), read the answers. So a request must name an allowed host (`Host`), and a
//! request that says which page sent it (`Origin`) must come from an allowed one. Clients
//! that are not browsers (curl, SDKs, IDE plugins) send no `Origin` and an allowed `Host`.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::dialect::{ApiError, Dialect};
use crate::config::ServerSettings;
use crate::error::GatewayError;

/// Origins of programs that are not web pages: editors' webviews and desktop shells.
const APP_SCHEMES: &[&str] = &["vscode-webview://", "vscode-file://", "app://", "tauri://"];

pub struct Sites {
    /// `None`: any host (a wildcard address without `server.allowed_hosts`).
    hosts: Option<Vec<String>>,
    /// `server.cors_origins`; `*` allows every origin.
    origins: Vec<String>,
}

impl Sites {
    pub fn from_settings(server: &ServerSettings) -> Arc<Self> {
        let bound = server
            .addr
            .rsplit_once(':')
            .map_or(server.addr.as_str(), |(host, _)| host);
        let bound = normal(bound);
        let wildcard = bound.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
        let hosts = if wildcard && server.allowed_hosts.is_empty() {
            None
        } else {
            let mut hosts: Vec<String> = server.allowed_hosts.iter().map(|h| normal(h)).collect();
            if !wildcard {
                hosts.push(bound);
            }
            Some(hosts)
        };
        Arc::new(Self {
            hosts,
            origins: server.cors_origins.clone(),
        })
    }

    /// Whether a `Host` (name or address, with or without a port) may be served.
    fn host_allowed(&self, host: &str) -> bool {
        let Some(hosts) = &self.hosts else {
            return true;
        };
        let name = normal(strip_port(host));
        local(&name)
            || hosts.iter().any(|h| match h.strip_prefix("*.") {
                Some(suffix) => name.ends_with(&format!(".{suffix}")),
                None => *h == name,
            })
    }

    /// Whether a page of this `Origin` may call the gateway.
    fn origin_allowed(&self, origin: &str) -> bool {
        if self
            .origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
        {
            return true;
        }
        let lower = origin.to_ascii_lowercase();
        if APP_SCHEMES.iter().any(|s| lower.starts_with(s)) {
            return true;
        }
        let host = lower
            .strip_prefix("http://")
            .or_else(|| lower.strip_prefix("https://"));
        host.is_some_and(|h| !h.contains('/') && local(&normal(strip_port(h))))
    }
}

/// Middleware: 403 in dialect `D`'s shape for a request to a host that is not allowed, or
/// from a page whose origin is not, whatever its method and content type.
pub async fn guard<D: Dialect>(
    State(sites): State<Arc<Sites>>,
    req: Request,
    next: Next,
) -> Response {
    // HTTP/2 names the host in the URI (`:authority`); a Host that is not text names none
    // that could be allowed. No host at all (HTTP/1.0) is no browser's request.
    let host = match req.headers().get(HOST) {
        Some(value) => Some(value.to_str().unwrap_or("\u{fffd}")),
        None => req.uri().authority().map(|a| a.as_str()),
    };
    if let Some(host) = host.filter(|h| !sites.host_allowed(h)) {
        tracing::warn!(
            host_chars = host.len(),
            "refused: a Host that is not allowed"
        );
        let e = GatewayError::forbidden(
            "host_not_allowed",
            "this gateway does not answer to that host name: add it to server.allowed_hosts",
        );
        return ApiError::<D>::from(e).into_response();
    }
    let origin = req.headers().get(ORIGIN);
    if let Some(origin) = origin {
        let allowed = origin.to_str().is_ok_and(|o| sites.origin_allowed(o));
        if !allowed {
            tracing::warn!(
                origin_chars = origin.len(),
                "refused: a web page of an origin that is not allowed"
            );
            let e = GatewayError::forbidden(
                "origin_not_allowed",
                "requests from this web page's origin are refused: add it to server.cors_origins",
            );
            return ApiError::<D>::from(e).into_response();
        }
    }
    next.run(req).await
}

/// `localhost`, a `*.localhost` name, or a loopback address (given [`normal`]).
fn local(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A host without its port: `[::1]:80` → `[::1]`, `a.b:80` → `a.b`.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        // One colon: name:port. More: a bare IPv6 address.
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// Lowercase, without a trailing dot, an IPv6 address without its brackets.
fn normal(host: &str) -> String {
    host.trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(addr: &str, allowed: &[&str], cors: &[&str]) -> Arc<Sites> {
        let mut server = crate::config::Settings::load_without_env(None)
            .unwrap()
            .server;
        server.addr = addr.into();
        server.allowed_hosts = allowed.iter().map(|s| s.to_string()).collect();
        server.cors_origins = cors.iter().map(|s| s.to_string()).collect();
        Sites::from_settings(&server)
    }

    #[test]
    fn hosts() {
        let s = sites("127.0.0.1:8080", &["gw.internal", "*.corp.example"], &[]);
        for ok in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:8080",
            "app.localhost:3000",
            "[::1]:8080",
            "127.0.0.2",
            "gw.internal",
            "gw.internal.",
            "a.corp.example:443",
        ] {
            assert!(s.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "corp.example",
            "10.0.0.5",
            "127.0.0.1.nip.io",
        ] {
            assert!(!s.host_allowed(bad), "{bad}");
        }
        // A specific address of the machine is allowed as bound.
        assert!(sites("10.0.0.5:8080", &[], &[]).host_allowed("10.0.0.5:8080"));
        // A wildcard address answers to any name, unless a list narrows it.
        assert!(sites("0.0.0.0:8080", &[], &[]).host_allowed("anything.example"));
        assert!(sites("[::]:8080", &[], &[]).host_allowed("anything.example"));
        assert!(!sites("0.0.0.0:8080", &["gw"], &[]).host_allowed("anything.example"));
        assert!(sites("0.0.0.0:8080", &["gw"], &[]).host_allowed("gw:8080"));
        // IPv6: bound, listed, and as Host headers carry them (bracketed, with a port).
        assert!(sites("[fd00::5]:8080", &[], &[]).host_allowed("[fd00::5]:8080"));
        assert!(sites("127.0.0.1:8080", &["fd00::6"], &[]).host_allowed("[FD00::6]:80"));
        assert!(!sites("[fd00::5]:8080", &[], &[]).host_allowed("[fd00::7]:8080"));
        // A Host that is not text becomes the replacement character: refused.
        assert!(!s.host_allowed("\u{fffd}"));
    }

    #[test]
    fn origins() {
        let s = sites("127.0.0.1:8080", &[], &["https://chat.example.com"]);
        for ok in [
            "https://chat.example.com",
            "http://localhost:3000",
            "http://127.0.0.1:8080",
            "https://app.localhost",
            "http://[::1]:5173",
            "vscode-webview://1234abcd",
            "vscode-file://vscode-app",
        ] {
            assert!(s.origin_allowed(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "https://chat.example.com.evil.example",
            "null",
            "http://localhost.evil.example",
            "file://",
        ] {
            assert!(!s.origin_allowed(bad), "{bad}");
        }
        assert!(sites("127.0.0.1:1", &[], &["*"]).origin_allowed("http://evil.example"));
    }
}

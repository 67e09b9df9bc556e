//! Access: keys, per-key rate limits and stream limits (shared by replicas on Redis), TLS,
//! and input hardening (`n`, slow headers, slow bodies).

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn chat(stream: bool) -> Value {
    json!({"model": "brunix", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

async fn call(gw: &Gateway, path: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut rb = client().post(gw.url(path)).json(body);
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    rb.send().await.unwrap()
}

fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()
        .get("retry-after")
        .expect("a 429 carries retry-after")
        .to_str()
        .unwrap()
        .parse()
        .expect("retry-after is whole seconds")
}

/// Checks a 429 in the shape of the route's dialect and returns its body.
async fn assert_limited(r: reqwest::Response, path: &str) -> Value {
    assert_eq!(r.status().as_u16(), 429, "{path}");
    let v: Value = r.json().await.unwrap();
    if path.starts_with("/api/") {
        let msg = v["error"].as_str().unwrap_or_else(|| panic!("{v}"));
        assert!(
            msg.contains("server."),
            "the message names the setting: {msg}"
        );
    } else {
        assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
        assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("server."));
    }
    v
}

#[tokio::test]
async fn requests_per_minute_are_limited_per_key() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-a".into(), "sk-b".into()];
        s.server.rate_limit_per_minute = 3;
    })
    .await;
    let mut remaining = Vec::new();
    for path in ["/v1/chat/completions", "/api/chat", "/v1/chat/completions"] {
        let r = call(&gw, path, Some("sk-a"), &chat(false)).await;
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["x-ratelimit-limit-requests"], "3");
        remaining.push(
            r.headers()["x-ratelimit-remaining-requests"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(remaining, ["2", "1", "0"]);
    let served = up.requests().len();

    for path in ["/v1/chat/completions", "/api/chat"] {
        let r = call(&gw, path, Some("sk-a"), &chat(true)).await;
        // One request a minute, three in a burst: the next one is 20 s away at most.
        let wait = retry_after(&r);
        assert!((1..=20).contains(&wait), "retry-after {wait}");
        assert_eq!(r.headers()["x-ratelimit-remaining-requests"], "0");
        assert_limited(r, path).await;
    }
    // Every route counts, not only chat.
    let r = client()
        .get(gw.url("/v1/models"))
        .bearer_auth("sk-a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        up.requests().len(),
        served,
        "limited requests never reach the upstream"
    );

    // Another key has its own budget; a wrong key is refused before any limit.
    let r = call(&gw, "/api/chat", Some("sk-b"), &chat(false)).await;
    assert_eq!(r.status(), 200);
    let r = call(&gw, "/api/chat", Some("sk-wrong"), &chat(false)).await;
    assert_eq!(r.status(), 401);
    // /health is never limited.
    for _ in 0..5 {
        let r = client().get(gw.url("/health")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
}

#[tokio::test]
async fn without_keys_requests_are_limited_per_client_address() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.rate_limit_per_minute = 2;
    })
    .await;
    for _ in 0..2 {
        let r = call(&gw, "/api/chat", None, &chat(false)).await;
        assert_eq!(r.status(), 200);
    }
    let r = call(&gw, "/api/chat", None, &chat(false)).await;
    let wait = retry_after(&r);
    assert!((1..=30).contains(&wait), "retry-after {wait}");
    assert_limited(r, "/api/chat").await;

    // Off by default: many requests, no 429 and no rate headers.
    let open = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    for _ in 0..20 {
        let r = client().get(open.url("/api/tags")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("x-ratelimit-limit-requests").is_none());
    }
}

/// Tries to open a stream for `key` until one is allowed; returns it.
async fn open_stream_eventually(gw: &Gateway, path: &str, key: Option<&str>) -> reqwest::Response {
    for _ in 0..250 {
        let r = call(gw, path, key, &chat(true)).await;
        if r.status() == 200 {
            return r;
        }
        assert_eq!(r.status(), 429);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    panic!("the stream slot was never given back");
}

#[tokio::test]
async fn concurrent_streams_are_limited_per_key_and_freed_when_they_end() {
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&["fine"]));
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-a".into(), "sk-b".into()];
        s.server.max_streams_per_key = 1;
    })
    .await;

    // Key A holds its one stream open (the upstream never ends it).
    up.push(Reply::Endless(Duration::from_millis(20)));
    let mut held = call(&gw, "/v1/chat/completions", Some("sk-a"), &chat(true)).await;
    assert_eq!(held.status(), 200);
    assert!(!read_some(&mut held, 1).await.is_empty());

    for path in ["/v1/chat/completions", "/api/chat", "/api/generate"] {
        let body = if path == "/api/generate" {
            json!({"model": "brunix", "prompt": "hi"})
        } else {
            chat(true)
        };
        let r = call(&gw, path, Some("sk-a"), &body).await;
        let wait = retry_after(&r);
        assert!((1..=10).contains(&wait), "retry-after {wait}");
        assert_limited(r, path).await;
    }
    // Answers that are not streamed need no slot; other keys have their own.
    let r = call(&gw, "/v1/chat/completions", Some("sk-a"), &chat(false)).await;
    assert_eq!(r.status(), 200);
    let r = call(&gw, "/api/chat", Some("sk-b"), &chat(true)).await;
    assert_eq!(r.status(), 200);
    let lines = ndjson_lines(&r.text().await.unwrap());
    assert_eq!(lines.last().unwrap()["done"], true);

    // The client goes away: its slot is given back.
    drop(held);
    assert!(eventually(10, || up.cancelled() >= 1).await);
    let r = open_stream_eventually(&gw, "/api/chat", Some("sk-a")).await;
    // This one ends normally; after it, another stream is allowed again.
    let lines = ndjson_lines(&r.text().await.unwrap());
    assert_eq!(lines.last().unwrap()["done"], true);
    let r = open_stream_eventually(&gw, "/v1/chat/completions", Some("sk-a")).await;
    let events = sse_events(&r.text().await.unwrap());
    assert_eq!(events.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn a_stream_that_fails_gives_its_slot_back() {
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&["fine"]));
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.max_streams_per_key = 1;
    })
    .await;
    up.push(Reply::DropAfter(vec!["partial".into()]));
    let r = call(&gw, "/v1/chat/completions", None, &chat(true)).await;
    let body = r.text().await.unwrap();
    assert!(body.contains("\"error\""), "an in-stream error: {body}");
    let r = open_stream_eventually(&gw, "/v1/chat/completions", None).await;
    assert_eq!(
        sse_events(&r.text().await.unwrap()).last().unwrap(),
        "[DONE]"
    );
}

#[tokio::test]
async fn keys_from_a_key_file_guard_every_dialect() {
    let up = ScriptedUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys");
    std::fs::write(&file, "# team\nsk-file-one\n\nsk-file-two\n").unwrap();
    let toml = dir.path().join("c.toml");
    std::fs::write(
        &toml,
        format!("[server]\napi_keys_file = \"{}\"\n", file.display()),
    )
    .unwrap();
    let loaded = assist_gateway::config::Settings::load_without_env(Some(&toml)).unwrap();
    let keys = loaded.server.api_keys.clone();
    let gw = Gateway::start(&up, Provider::Ollama, |s| s.server.api_keys = keys).await;

    let embed = json!({"model": "x", "input": "hello"});
    for (path, body) in [
        ("/v1/chat/completions", chat(false)),
        ("/api/chat", chat(false)),
        (
            "/api/generate",
            json!({"model": "brunix", "prompt": "hi", "stream": false}),
        ),
        ("/v1/embeddings", embed.clone()),
        ("/api/embed", embed.clone()),
    ] {
        for (key, expected) in [
            (None, 401),
            (Some(""), 401),
            (Some("sk-file-on"), 401),
            (Some("SK-FILE-ONE"), 401),
            (Some("sk-file-one2"), 401),
        ] {
            let mut rb = client().post(gw.url(path)).json(&body);
            if let Some(k) = key {
                rb = rb.header("authorization", format!("Bearer {k}"));
            }
            let r = rb.send().await.unwrap();
            assert_eq!(r.status().as_u16(), expected, "{path} {key:?}");
            let v: Value = r.json().await.unwrap();
            let message = if path.starts_with("/api/") {
                v["error"].as_str().map(String::from)
            } else {
                v["error"]["message"].as_str().map(String::from)
            };
            assert!(
                message.is_some_and(|m| m.contains("API key")),
                "{path}: {v}"
            );
        }
        // A key that is not text is an invalid key, not a missing one.
        let r = client()
            .post(gw.url(path))
            .header(
                "authorization",
                reqwest::header::HeaderValue::from_bytes(b"Bearer sk-\xff\xfeone").unwrap(),
            )
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path}");
        let text = r.text().await.unwrap();
        assert!(text.contains("invalid API key"), "{path}: {text}");
        // Accepted keys get past the check (whatever the route answers next).
        for key in ["sk-file-one", "sk-file-two"] {
            let r = client()
                .post(gw.url(path))
                .header("authorization", format!("bearer {key}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_ne!(r.status().as_u16(), 401, "{path} with {key}");
        }
    }
}

#[tokio::test]
async fn more_than_one_choice_is_refused_naming_n() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    for path in ["/v1/chat/completions", "/v1/completions"] {
        let mut body = chat(false);
        body["prompt"] = json!("hi");
        body["n"] = json!(3);
        let (status, _, text) = post(&gw.url(path), body.clone()).await;
        assert_eq!(status, 400, "{path}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], "n", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        body["n"] = json!(1);
        let (status, _, _) = post(&gw.url(path), body).await;
        assert_eq!(status, 200, "{path} with n = 1");
    }
    assert_eq!(
        up.requests().len(),
        2,
        "refused requests never reach the upstream"
    );
}

/// Reads until the server closes the connection; what it sent.
async fn read_to_close(tcp: &mut tokio::net::TcpStream) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the server never closed the connection");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn slow_clients_cannot_hold_connections() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.header_read_timeout = std::time::Duration::from_secs(1);
        s.server.body_read_timeout = std::time::Duration::from_secs(1);
    })
    .await;

    // Connects and says nothing.
    let mut silent = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    assert_eq!(read_to_close(&mut silent).await, "");

    // Sends half its headers, then stalls.
    let mut slow = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
        .await
        .unwrap();
    let answer = read_to_close(&mut slow).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );

    // Sends its headers, then part of the body, then stalls: 408 in the dialect's shape
    // (MCP's too: its body was read with no time bound).
    for path in ["/v1/chat/completions", "/api/chat", "/mcp"] {
        let mut tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"model\":"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let answer = read_to_close(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
        let json_start = body.find('{').expect("a JSON body");
        let v: Value =
            serde_json::from_str(&body[json_start..]).unwrap_or_else(|e| panic!("{body}: {e}"));
        if path.starts_with("/api/") {
            assert!(
                v["error"].as_str().unwrap().contains("did not arrive"),
                "{v}"
            );
        } else if path == "/mcp" {
            assert_eq!(
                (v["jsonrpc"].as_str(), v["error"]["code"].as_i64()),
                (Some("2.0"), Some(-32600)),
                "{v}"
            );
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("did not arrive"),
                "{v}"
            );
        } else {
            assert_eq!(v["error"]["code"], "request_timeout", "{v}");
        }
    }
    // A normal client on the same gateway is served.
    let (status, _, _) = post(&gw.url("/api/chat"), chat(false)).await;
    assert_eq!(status, 200);
}

pub(crate) struct Tls {
    _dir: tempfile::TempDir,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub cert_pem: String,
}

pub(crate) fn self_signed(host: &str) -> Tls {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec![host.to_string()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    Tls {
        _dir: dir,
        cert,
        key,
        cert_pem: ck.cert.pem(),
    }
}

fn tls_client(tls: &Tls, gw: &Gateway, http1_only: bool) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .tls_certs_only([reqwest::Certificate::from_pem(tls.cert_pem.as_bytes()).unwrap()])
        .resolve("gateway.test", gw.addr);
    if http1_only {
        b = b.http1_only();
    }
    b.build().unwrap()
}

#[tokio::test]
async fn tls_serves_http1_and_http2_streams() {
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::Tokens {
        tokens: vec!["over".into(), " tls".into()],
        delay: Duration::from_millis(10),
        finish: "stop",
    });
    let tls = self_signed("gateway.test");
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.tls_cert = Some(tls.cert.clone());
        s.server.tls_key = Some(tls.key.clone());
        s.server.allowed_hosts = vec!["gateway.test".into()];
        s.server.api_keys = vec!["sk-tls".into()];
    })
    .await;
    let url = format!(
        "https://gateway.test:{}/v1/chat/completions",
        gw.addr.port()
    );
    for (http1_only, version) in [
        (false, reqwest::Version::HTTP_2),
        (true, reqwest::Version::HTTP_11),
    ] {
        let c = tls_client(&tls, &gw, http1_only);
        let r = c
            .post(&url)
            .bearer_auth("sk-tls")
            .json(&chat(true))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.version(), version);
        let events = sse_events(&r.text().await.unwrap());
        assert_eq!(events.last().unwrap(), "[DONE]");
        assert_eq!(sse_text(&events), "over tls");
        let r = c.post(&url).json(&chat(false)).send().await.unwrap();
        assert_eq!(r.status(), 401, "keys still apply over TLS");
    }

    // Plain HTTP to the TLS port gets no answer.
    let plain = client().get(gw.url("/health")).send().await;
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
    // A client that never starts the handshake is closed after the header deadline.
    let gw_fast = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.tls_cert = Some(tls.cert.clone());
        s.server.tls_key = Some(tls.key.clone());
        s.server.allowed_hosts = vec!["gateway.test".into()];
        s.server.header_read_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(gw_fast.addr).await.unwrap();
    assert_eq!(read_to_close(&mut silent).await, "");
}

#[tokio::test]
async fn tls_shutdown_lets_open_streams_finish() {
    let up = ScriptedUpstream::start().await;
    up.push(Reply::Tokens {
        tokens: (0..6).map(|i| format!("t{i} ")).collect(),
        delay: Duration::from_millis(80),
        finish: "stop",
    });
    let tls = self_signed("gateway.test");
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.tls_cert = Some(tls.cert.clone());
        s.server.tls_key = Some(tls.key.clone());
        s.server.allowed_hosts = vec!["gateway.test".into()];
    })
    .await;
    let c = tls_client(&tls, &gw, false);
    let url = format!("https://gateway.test:{}/api/chat", gw.addr.port());
    let mut r = c.post(&url).json(&chat(true)).send().await.unwrap();
    let first = read_some(&mut r, 1).await;
    let server = gw.shutdown();
    let rest = r.text().await.unwrap();
    let lines = ndjson_lines(&(first + &rest));
    assert_eq!(
        lines.last().unwrap()["done"],
        true,
        "the open stream finished"
    );
    let text: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(text, "t0 t1 t2 t3 t4 t5 ");
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server stopped")
        .unwrap()
        .unwrap();
    assert!(c.post(&url).json(&chat(false)).send().await.is_err());
}

#[test]
fn bad_certificates_and_keys_are_refused_naming_the_setting() {
    let tls = self_signed("gateway.test");
    let other = self_signed("other.test");
    let mut settings = assist_gateway::config::Settings::load_without_env(None).unwrap();
    let server = &mut settings.server;
    server.tls_cert = Some(tls.cert.clone());
    server.tls_key = Some(tls.key.clone());
    assert!(assist_gateway::http::tls_acceptor(server)
        .unwrap()
        .is_some());

    server.tls_key = Some(other.key.clone());
    let e = assist_gateway::http::tls_acceptor(server).err().unwrap();
    assert_eq!(e.key, "server.tls_key", "{e}");

    server.tls_key = Some(tls.key.clone());
    server.tls_cert = Some(tls.key.clone());
    let e = assist_gateway::http::tls_acceptor(server).err().unwrap();
    assert_eq!(e.key, "server.tls_cert", "{e}");

    server.tls_cert = Some(tls.cert.clone());
    server.tls_key = Some(tls.cert.clone());
    let e = assist_gateway::http::tls_acceptor(server).err().unwrap();
    assert_eq!(e.key, "server.tls_key", "{e}");
}

/// With the sessions in Redis, `server.rate_limit_per_minute` and
/// `server.max_streams_per_key` are counted there: two replicas let a key through as often
/// as one would, and a stream held open on one takes the key's slot on the other.
#[tokio::test]
async fn replicas_sharing_redis_share_each_keys_limits() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&["fine"]));
    let url = redis.url();
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let on_redis = |s: &mut assist_gateway::config::Settings| {
        s.server.api_keys = vec!["sk-a".into(), "sk-b".into(), "sk-c".into()];
        s.server.rate_limit_per_minute = 6;
        s.server.max_streams_per_key = 1;
        s.sessions.backend = assist_gateway::config::SessionBackend::Redis;
        s.sessions.redis_url = Some(url.clone());
        s.sessions.redis_prefix = prefix.clone();
    };
    let a = Gateway::start(&up, Provider::Ollama, on_redis).await;
    let b = Gateway::start(&up, Provider::Ollama, on_redis).await;

    // Six answers for sk-a, three on each replica; the seventh is refused on either.
    for gw in [&a, &b, &a, &b, &a, &b] {
        let r = call(gw, "/v1/chat/completions", Some("sk-a"), &chat(false)).await;
        assert_eq!(r.status(), 200);
    }
    for gw in [&a, &b] {
        let r = call(gw, "/v1/chat/completions", Some("sk-a"), &chat(false)).await;
        let wait = retry_after(&r);
        assert!((1..=15).contains(&wait), "retry-after {wait}");
        assert_limited(r, "/v1/chat/completions").await;
    }
    // Another key has its own count.
    let r = call(&b, "/api/chat", Some("sk-b"), &chat(false)).await;
    assert_eq!(r.status(), 200);

    // sk-c holds its one stream open on replica a: replica b refuses it a second one.
    up.push(Reply::Endless(Duration::from_millis(20)));
    let mut held = call(&a, "/v1/chat/completions", Some("sk-c"), &chat(true)).await;
    assert_eq!(held.status(), 200);
    assert!(!read_some(&mut held, 1).await.is_empty());
    let r = call(&b, "/v1/chat/completions", Some("sk-c"), &chat(true)).await;
    assert_limited(r, "/v1/chat/completions").await;
    // Given back when its client goes away, on every replica.
    drop(held);
    assert!(eventually(10, || up.cancelled() >= 1).await);
    let r = open_stream_eventually(&b, "/v1/chat/completions", Some("sk-c")).await;
    let events = sse_events(&r.text().await.unwrap());
    assert_eq!(events.last().unwrap(), "[DONE]");
}

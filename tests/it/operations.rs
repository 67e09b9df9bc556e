//! Health, readiness, request ids, keys, routing errors and graceful shutdown.

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

#[tokio::test]
async fn health_and_readiness() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, v) = get_json(&gw.url("/health")).await;
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    let (status, v) = get_json(&gw.url("/")).await;
    assert_eq!(status, 200);
    assert!(v.as_str().unwrap().contains("running"), "{v}");
    let (status, v) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 200, "{v}");
    // Nothing ingested yet: serving, but without knowledge.
    assert_eq!(v["status"], "degraded");
    assert!(
        v["checks"]["lexical_index"]["reason"]
            .as_str()
            .unwrap()
            .contains("ingest"),
        "{v}"
    );
    assert_eq!(v["checks"]["embedder"]["status"], "disabled");
    assert_eq!(v["checks"]["vector_store"]["status"], "disabled");
    assert_eq!(v["checks"]["upstream"][0]["status"], "ok");
    assert_eq!(v["checks"]["upstream"][0]["url"], up.root());
    assert_eq!(v["checks"]["session_store"]["status"], "ok");
    assert_eq!(v["checks"]["session_store"]["sessions"], 0);

    // A Redis session store that is not there: answers still come, readiness says why.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.sessions.backend = assist_gateway::config::SessionBackend::Redis;
        s.sessions.redis_url = Some(format!("redis://127.0.0.1:{port}"));
    })
    .await;
    let (status, v) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["checks"]["session_store"]["status"], "degraded", "{v}");
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        serde_json::json!({"model": "brunix", "session_id": "x",
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let gw = Gateway::start(&up, Provider::Openai, |s| s.llm.base_url = url.clone()).await;
    let (status, v) = get_json(&gw.url("/health")).await;
    assert_eq!(status, 200, "liveness does not depend on the upstream");
    let (status, v2) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 503, "{v} {v2}");
    assert_eq!(v2["checks"]["upstream"][0]["status"], "down");
    assert!(v2["checks"]["upstream"][0]["reason"]
        .as_str()
        .unwrap()
        .contains(&url));
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let r = client().get(gw.url("/api/version")).send().await.unwrap();
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let r = client()
        .post(gw.url("/v1/chat/completions"))
        .header("x-request-id", "trace-me-42")
        .json(&json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["x-request-id"],
        "trace-me-42",
        "a client's id is kept"
    );
}

#[tokio::test]
async fn api_keys_guard_every_route_but_health() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-good".into(), "sk-other".into()]
    })
    .await;
    let chat = json!({"model": "brunix", "messages": [{"role": "user", "content": "x"}]});
    for (auth, expected) in [
        (None, 401),
        (Some("Bearer "), 401),
        (Some("Bearer sk-bad"), 401),
        (Some("Basic sk-good"), 401),
        (Some("Bearer sk-good"), 200),
        (Some("Bearer sk-other"), 200),
    ] {
        for path in ["/v1/chat/completions", "/api/chat"] {
            let mut rb = client().post(gw.url(path)).json(&chat);
            if let Some(a) = auth {
                rb = rb.header("authorization", a);
            }
            let r = rb.send().await.unwrap();
            assert_eq!(r.status().as_u16(), expected, "{path} with {auth:?}");
            if expected == 401 {
                assert_eq!(r.headers()["www-authenticate"], "Bearer");
                let v: Value = r.json().await.unwrap();
                if path.starts_with("/api/") {
                    assert!(v["error"].is_string(), "{v}");
                } else {
                    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
                }
            }
        }
    }
    for path in ["/v1/models", "/api/tags", "/ready"] {
        let r = client().get(gw.url(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path}");
    }
    let r = client().get(gw.url("/health")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // Without keys, an empty "Bearer" (cn with provider: ollama) is simply no key.
    let open = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let r = client()
        .post(open.url("/v1/chat/completions"))
        .header("authorization", "Bearer ")
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        up.requests()
            .iter()
            .all(|r| r.headers.get("authorization").is_none()),
        "client keys are never forwarded to the upstream"
    );
}

#[tokio::test]
async fn upstream_key_is_sent_to_the_upstream() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.llm.api_key = Some("upstream-secret".into())
    })
    .await;
    let (status, _, _) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        up.last_request().headers["authorization"],
        "Bearer upstream-secret"
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_dialect_shape() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, v) = get_json(&gw.url("/v1/nothing")).await;
    assert_eq!(status, 404);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/v1/nothing"));
    let (status, v) = get_json(&gw.url("/api/nothing")).await;
    assert_eq!(status, 404);
    assert!(v["error"].is_string());
    let (status, v) = get_json(&gw.url("/v1/chat/completions")).await;
    assert_eq!(status, 405);
    assert!(v["error"]["message"].is_string());
    // Each prefix's bare forms answer in its own dialect; anything else in OpenAI's.
    for (path, openai) in [
        ("/v1", true),
        ("/v1/", true),
        ("/api", false),
        ("/api/", false),
        ("/nope", true),
    ] {
        let (status, v) = get_json(&gw.url(path)).await;
        assert_eq!(status, 404, "{path}");
        if openai {
            assert!(v["error"]["message"].is_string(), "{path}: {v}");
        } else {
            assert!(v["error"].is_string(), "{path}: {v}");
        }
    }
    let r = client().post(gw.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].is_string(), "{v}");
}

#[tokio::test]
async fn graceful_shutdown_lets_open_streams_finish() {
    let up = ScriptedUpstream::start().await;
    up.push(Reply::Tokens {
        tokens: (0..10).map(|i| format!("t{i} ")).collect(),
        delay: Duration::from_millis(100),
        finish: "stop",
    });
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let url = gw.url("/v1/chat/completions");
    let mut response = client()
        .post(&url)
        .json(&json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    let first = read_some(&mut response, 1).await;
    let server = gw.shutdown();
    let rest = response.text().await.unwrap();
    let events = sse_events(&(first + &rest));
    assert_eq!(events.last().unwrap(), "[DONE]", "the open stream finished");
    assert_eq!(sse_text(&events), "t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 ");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stopped")
        .unwrap()
        .unwrap();
    assert!(
        client().get(url).send().await.is_err(),
        "no new connections after shutdown"
    );
}

#[tokio::test]
async fn cors_for_browser_uis_with_preflights_that_need_no_key() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.cors_origins = vec!["https://chat.example.com".into()];
        s.server.api_keys = vec!["secret".into()];
    })
    .await;
    let preflight = client()
        .request(reqwest::Method::OPTIONS, gw.url("/v1/chat/completions"))
        .header("Origin", "https://chat.example.com")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], "https://chat.example.com");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"));

    let r = client()
        .get(gw.url("/v1/models"))
        .header("Origin", "https://chat.example.com")
        .bearer_auth("secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://chat.example.com"
    );
    // Other origins get no CORS grant, and no answer: refused before the key is asked.
    let r = client()
        .get(gw.url("/v1/models"))
        .header("Origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    // An allowed origin without its key can read the 401, to tell its user why.
    let r = client()
        .get(gw.url("/v1/models"))
        .header("Origin", "https://chat.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://chat.example.com"
    );

    // "*" lets any origin in, and a 429's retry-after is readable by the page.
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.cors_origins = vec!["*".into()];
        s.server.rate_limit_per_minute = 1;
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let r = client()
            .get(gw.url("/api/tags"))
            .header("Origin", "https://anywhere.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            assert!(r.headers().get("retry-after").is_some());
            let exposed = r.headers()["access-control-expose-headers"]
                .to_str()
                .unwrap()
                .to_lowercase();
            assert!(exposed.contains("retry-after"), "{exposed}");
        }
    }
    assert_eq!(statuses, [200, 429]);

    // Off by default: no CORS headers at all (a page of this machine is answered; one of
    // another site is refused).
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let r = client()
        .get(gw.url("/api/tags"))
        .header("Origin", "http://localhost:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let r = client()
        .get(gw.url("/api/tags"))
        .header("Origin", "https://chat.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

//! Upstream faults against retries, fallbacks, cooldown and the answer bounds
//! (`llm.retries`, `llm.fallbacks`, `llm.cooldown_*`, `llm.max_answer_secs`,
//! `llm.max_chunk_bytes`), seen from the client of each dialect.

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::{FallbackSettings, Provider, Settings};
use serde_json::{json, Value};

const PROVIDERS: [Provider; 2] = [Provider::Ollama, Provider::Openai];
const FALLBACK_MODEL: &str = "fallback-model:7b";

/// What a client got: the status, the answer text, and the error message and code (the
/// HTTP error's, or the in-stream error event's).
#[derive(Debug)]
struct Got {
    status: u16,
    text: String,
    error: Option<String>,
    code: Option<String>,
    /// The `retry-after` header of an error response.
    retry_after: Option<String>,
}

impl Got {
    fn ok(&self) -> &str {
        assert!(
            self.status == 200 && self.error.is_none(),
            "expected an answer: {self:?}"
        );
        &self.text
    }

    fn error(&self) -> &str {
        self.error
            .as_deref()
            .unwrap_or_else(|| panic!("expected an error: {self:?}"))
    }
}

/// Asks the assistant through an endpoint: `/v1/chat/completions` or `/api/chat`.
async fn ask(gw: &Gateway, path: &str, stream: bool) -> Got {
    ask_model(gw, path, stream, "brunix", None).await
}

async fn ask_model(
    gw: &Gateway,
    path: &str,
    stream: bool,
    model: &str,
    session: Option<&str>,
) -> Got {
    let mut body = json!({"model": model, "stream": stream,
        "messages": [{"role": "user", "content": "tell me"}]});
    if let Some(s) = session {
        body["session_id"] = json!(s);
    }
    let (status, headers, text) = post(&gw.url(path), body).await;
    let retry_after = headers
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let openai = path.starts_with("/v1");
    if status != 200 {
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: not JSON: {text}"));
        let (message, code) = if openai {
            let e = &v["error"];
            assert!(e["type"].is_string(), "OpenAI error shape: {v}");
            (e["message"].as_str(), e["code"].as_str().map(String::from))
        } else {
            (v["error"].as_str(), None)
        };
        return Got {
            status,
            text: String::new(),
            error: Some(message.unwrap_or_else(|| panic!("no message: {v}")).into()),
            code,
            retry_after,
        };
    }
    let mut got = Got {
        status,
        text: String::new(),
        error: None,
        code: None,
        retry_after: None,
    };
    let items: Vec<Value> = match (openai, stream) {
        (true, true) => sse_events(&text)
            .into_iter()
            .filter(|e| e != "[DONE]")
            .map(|e| serde_json::from_str(&e).unwrap())
            .collect(),
        (false, true) => ndjson_lines(&text),
        (_, false) => vec![serde_json::from_str(&text).unwrap()],
    };
    for v in items {
        if let Some(e) = v.get("error") {
            match e {
                Value::String(m) => got.error = Some(m.clone()),
                _ => {
                    got.error = e["message"].as_str().map(String::from);
                    got.code = e["code"].as_str().map(String::from);
                }
            }
            continue;
        }
        let piece = if openai {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .or(v["choices"][0]["message"]["content"].as_str())
        } else {
            v["message"]["content"].as_str()
        };
        got.text.push_str(piece.unwrap_or(""));
    }
    got
}

fn base_url(up: &ScriptedUpstream, provider: Provider) -> String {
    match provider {
        Provider::Ollama => up.root(),
        Provider::Openai => format!("{}/v1", up.root()),
    }
}

/// A fallback on `up`, which serves `FALLBACK_MODEL`.
fn fallback(up: &ScriptedUpstream, provider: Provider) -> FallbackSettings {
    serving(up, provider, FALLBACK_MODEL)
}

/// A fallback on `up`, which serves `model`.
fn serving(up: &ScriptedUpstream, provider: Provider, model: &str) -> FallbackSettings {
    up.serve_model(model);
    FallbackSettings {
        provider,
        base_url: base_url(up, provider),
        model: model.into(),
        api_key: None,
    }
}

/// Short waits between retries, so that the tests stay quick.
fn quick(s: &mut Settings) {
    s.llm.retry_base = std::time::Duration::from_millis(5);
    s.llm.retry_max = std::time::Duration::from_millis(50);
}

/// An address nothing listens on.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

fn other(provider: Provider) -> Provider {
    match provider {
        Provider::Ollama => Provider::Openai,
        Provider::Openai => Provider::Ollama,
    }
}

#[tokio::test]
async fn connection_refused_on_the_primary_falls_back_with_the_fallbacks_model() {
    for provider in PROVIDERS {
        let primary = ScriptedUpstream::start().await;
        let backup = ScriptedUpstream::start().await;
        // The fallback speaks the other dialect: any mix works.
        let fb = fallback(&backup, other(provider));
        let dead = closed_port();
        let gw = Gateway::start(&primary, provider, |s| {
            quick(s);
            s.llm.base_url = dead.clone();
            s.llm.fallbacks = vec![fb];
        })
        .await;
        for (path, stream) in [
            ("/v1/chat/completions", true),
            ("/v1/chat/completions", false),
            ("/api/chat", true),
            ("/api/chat", false),
        ] {
            let got = ask(&gw, path, stream).await;
            assert_eq!(got.ok(), "Hello from upstream", "{provider:?} {path}");
        }
        let sent = backup.requests();
        assert_eq!(sent.len(), 4);
        assert!(sent.iter().all(|r| r.body["model"] == FALLBACK_MODEL));
        assert!(primary.requests().is_empty());

        // Readiness lists both: the primary down with its reason, the fallback answering,
        // so the gateway still serves (200) but is degraded.
        let (status, ready) = get_json(&gw.url("/ready")).await;
        assert_eq!(status, 200, "{ready}");
        assert_eq!(ready["status"], "degraded");
        let upstreams = ready["checks"]["upstream"].as_array().unwrap();
        assert_eq!(upstreams.len(), 2, "{ready}");
        assert_eq!(upstreams[0]["role"], "primary");
        assert_eq!(upstreams[0]["status"], "down");
        assert_eq!(upstreams[0]["url"], dead.as_str());
        assert!(upstreams[0]["reason"]
            .as_str()
            .unwrap()
            .contains("unreachable"));
        // Three refused attempts (retries = 2) started its cooldown.
        assert_eq!(upstreams[0]["cooling_down"], true, "{ready}");
        assert_eq!(upstreams[1]["role"], "fallback");
        assert_eq!(upstreams[1]["status"], "ok");
    }
}

#[tokio::test]
async fn silence_before_headers_is_retried_then_falls_back() {
    for provider in PROVIDERS {
        let primary = ScriptedUpstream::start().await;
        let backup = ScriptedUpstream::start().await;
        primary.set_default(Reply::HangBeforeHeaders(Duration::from_secs(30)));
        let fb = fallback(&backup, provider);
        let gw = Gateway::start(&primary, provider, |s| {
            quick(s);
            s.llm.first_byte_timeout = std::time::Duration::from_secs(1);
            s.llm.retries = 1;
            s.llm.fallbacks = vec![fb];
        })
        .await;
        let got = ask(&gw, "/v1/chat/completions", true).await;
        assert_eq!(got.ok(), "Hello from upstream", "{provider:?}");
        assert_eq!(primary.requests().len(), 2, "first attempt and one retry");
        assert_eq!(backup.requests().len(), 1);
    }
}

#[tokio::test]
async fn status_500_and_429_with_and_without_body_are_retried_until_an_answer() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, quick).await;
        let faults = [
            (500, r#"{"error":"llama runner crashed"}"#),
            (500, ""),
            (503, "Service Unavailable"),
            (
                429,
                r#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
            ),
            (429, ""),
        ];
        for (status, body) in faults {
            for path in ["/v1/chat/completions", "/api/chat"] {
                let before = up.requests().len();
                for _ in 0..2 {
                    up.push(Reply::Status {
                        status,
                        body: body.into(),
                    });
                }
                let got = ask(&gw, path, true).await;
                assert_eq!(
                    got.ok(),
                    "Hello from upstream",
                    "{provider:?} {status} {body:?}"
                );
                assert_eq!(
                    up.requests().len() - before,
                    3,
                    "two failures, then the answer: {provider:?} {status} {body:?}"
                );
            }
        }
        // Each retry is counted for this upstream, each failure with its kind.
        let (_, metrics) = get_json(&gw.url("/metrics")).await;
        let metrics = metrics.as_str().unwrap();
        let url = base_url(&up, provider);
        let retries = format!("assist_upstream_retries_total{{upstream=\"{url}\"}} 20");
        assert!(metrics.contains(&retries), "{retries} in:\n{metrics}");
        for (kind, n) in [("http_500", 8), ("http_503", 4), ("http_429", 8)] {
            let line = format!(
                "assist_upstream_attempt_failures_total{{upstream=\"{url}\",kind=\"{kind}\"}} {n}"
            );
            assert!(metrics.contains(&line), "{line} in:\n{metrics}");
        }
    }
}

#[tokio::test]
async fn exhausted_retries_give_the_upstreams_status_and_message() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, quick).await;
        let cases = [
            (
                500,
                r#"{"error":"llama runner crashed"}"#,
                502,
                "llama runner crashed",
            ),
            (500, "", 502, "HTTP 500"),
            (503, "Service Unavailable", 502, "Service Unavailable"),
            (
                429,
                r#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
                429,
                "slow down",
            ),
            (429, "", 429, "HTTP 429"),
        ];
        for (status, body, expected, needle) in cases {
            up.set_default(Reply::Status {
                status,
                body: body.into(),
            });
            for (path, stream) in [("/v1/chat/completions", true), ("/api/chat", false)] {
                let before = up.requests().len();
                let got = ask(&gw, path, stream).await;
                assert_eq!(
                    got.status, expected,
                    "{provider:?} {status} {body:?}: {got:?}"
                );
                assert!(got.error().contains(needle), "{provider:?}: {got:?}");
                assert_eq!(up.requests().len() - before, 3, "1 attempt + 2 retries");
            }
        }
    }
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let primary = ScriptedUpstream::start().await;
    let backup = ScriptedUpstream::start().await;
    let fb = fallback(&backup, Provider::Ollama);
    // Backoff alone would wait a random time up to 10 minutes: only an honoured
    // Retry-After of 0 lets the retry happen while the client waits.
    let gw = Gateway::start(&primary, Provider::Ollama, |s| {
        s.llm.retry_base = std::time::Duration::from_millis(600_000);
        s.llm.retry_max = std::time::Duration::from_millis(600_000);
        s.llm.fallbacks = vec![fb];
    })
    .await;
    let past = httpdate::fmt_http_date(std::time::SystemTime::now() - Duration::from_secs(60));
    for retry_after in ["0".to_string(), past] {
        primary.push(Reply::RetryAfter {
            status: 429,
            body: r#"{"error":"rate limited"}"#.into(),
            retry_after,
        });
        let before = primary.requests().len();
        let got = ask(&gw, "/api/chat", true).await;
        assert_eq!(got.ok(), "Hello from upstream");
        assert_eq!(
            primary.requests().len() - before,
            2,
            "retried on the same upstream"
        );
    }
    assert!(backup.requests().is_empty());

    // A wait longer than llm.retry_max_ms: no waiting, the next upstream answers at once …
    primary.push(Reply::RetryAfter {
        status: 503,
        body: "overloaded".into(),
        retry_after: "3600".into(),
    });
    let before = primary.requests().len();
    let got = ask(&gw, "/v1/chat/completions", false).await;
    assert_eq!(got.ok(), "Hello from upstream");
    assert_eq!(primary.requests().len() - before, 1, "not retried");
    assert_eq!(backup.requests().len(), 1, "the fallback answered");

    // … and with no upstream left, the client gets the 429 right away.
    let gw = Gateway::start(&primary, Provider::Ollama, |s| {
        s.llm.retry_base = std::time::Duration::from_millis(600_000);
        s.llm.retry_max = std::time::Duration::from_millis(600_000);
    })
    .await;
    primary.push(Reply::RetryAfter {
        status: 429,
        body: r#"{"error":"quota exhausted"}"#.into(),
        retry_after: "3600".into(),
    });
    let before = primary.requests().len();
    let got = ask(&gw, "/v1/chat/completions", true).await;
    assert_eq!(got.status, 429, "{got:?}");
    assert!(got.error().contains("quota exhausted"));
    // The upstream's wait is passed on, so the client's own backoff can honour it.
    assert_eq!(got.retry_after.as_deref(), Some("3600"));
    assert_eq!(primary.requests().len() - before, 1);
}

#[tokio::test]
async fn a_400_is_neither_retried_nor_sent_to_a_fallback() {
    for provider in PROVIDERS {
        let primary = ScriptedUpstream::start().await;
        let backup = ScriptedUpstream::start().await;
        let fb = fallback(&backup, provider);
        let gw = Gateway::start(&primary, provider, |s| {
            quick(s);
            s.llm.fallbacks = vec![fb];
        })
        .await;
        primary.push(Reply::Status {
            status: 400,
            body: r#"{"error":"invalid option"}"#.into(),
        });
        let got = ask(&gw, "/v1/chat/completions", true).await;
        assert_eq!(got.status, 400, "{got:?}");
        assert!(got.error().contains("invalid option"));
        assert_eq!(primary.requests().len(), 1);
        assert!(backup.requests().is_empty());
    }
}

#[tokio::test]
async fn failures_after_the_first_token_are_not_retried_but_before_it_they_are() {
    for provider in PROVIDERS {
        let primary = ScriptedUpstream::start().await;
        let backup = ScriptedUpstream::start().await;
        let fb = fallback(&backup, provider);
        let gw = Gateway::start(&primary, provider, |s| {
            quick(s);
            s.llm.fallbacks = vec![fb];
        })
        .await;
        // Once a token was on its way, a drop or a malformed line ends the answer.
        for (fault, needle) in [
            (
                Reply::DropAfter(vec!["partial".into()]),
                "closed the stream",
            ),
            (
                Reply::GarbageAfter(vec!["partial".into()]),
                "invalid stream",
            ),
        ] {
            for path in ["/v1/chat/completions", "/api/chat"] {
                let before = primary.requests().len();
                primary.push(fault.clone());
                let got = ask(&gw, path, true).await;
                assert_eq!(got.status, 200);
                assert_eq!(got.text, "partial", "{provider:?} {fault:?} {path}");
                assert!(got.error().contains(needle), "{provider:?} {path}: {got:?}");
                assert_eq!(primary.requests().len() - before, 1, "not retried");
            }
        }
        assert!(backup.requests().is_empty(), "no fallback after the start");

        // Before the first token nothing reached the client: retried.
        for fault in [Reply::DropAfter(vec![]), Reply::GarbageAfter(vec![])] {
            for path in ["/v1/chat/completions", "/api/chat"] {
                let before = primary.requests().len();
                primary.push(fault.clone());
                let got = ask(&gw, path, true).await;
                assert_eq!(got.ok(), "Hello from upstream", "{provider:?} {fault:?}");
                assert_eq!(
                    primary.requests().len() - before,
                    2,
                    "{provider:?} {fault:?}"
                );
            }
        }
        // An error the upstream reports in its own words is its answer: not retried.
        primary.push(Reply::ErrorAfter(vec![], "prompt too long".into()));
        let got = ask(&gw, "/api/chat", true).await;
        assert_eq!(got.status, 502, "{got:?}");
        assert!(got.error().contains("prompt too long"));
        assert!(backup.requests().is_empty());
    }
}

#[tokio::test]
async fn a_never_ending_stream_is_ended_by_max_answer_secs() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| {
            s.llm.max_answer = std::time::Duration::from_secs(1)
        })
        .await;
        up.set_default(Reply::Endless(Duration::from_millis(20)));
        let mut ended = 0;
        for path in ["/v1/chat/completions", "/api/chat"] {
            let session = format!("endless{}", path.replace('/', "-"));
            let got = ask_model(&gw, path, true, "brunix", Some(&session)).await;
            assert_eq!(got.status, 200);
            assert!(
                got.text.starts_with("tick tick"),
                "{provider:?} {path}: {got:?}"
            );
            assert!(got.error().contains("llm.max_answer_secs"), "{got:?}");
            if path.starts_with("/v1") {
                assert_eq!(got.code.as_deref(), Some("upstream_timeout"));
            }
            ended += 1;
            assert!(
                eventually(5, || up.cancelled() == ended).await,
                "{provider:?} {path}: the upstream request was cancelled"
            );

            // Not streamed: 504 in the dialect's shape.
            let got = ask(&gw, path, false).await;
            assert_eq!(got.status, 504, "{provider:?} {path}: {got:?}");
            assert!(got.error().contains("llm.max_answer_secs"));
            if path.starts_with("/v1") {
                assert_eq!(got.code.as_deref(), Some("upstream_timeout"));
            }
            ended += 1;
            assert!(eventually(5, || up.cancelled() == ended).await);

            // The partial answer was kept in the session, marked interrupted.
            up.push(Reply::tokens(&["ok"]));
            let got = ask_model(&gw, path, false, "brunix", Some(&session)).await;
            assert_eq!(got.ok(), "ok");
            let sent = up.last_request().body["messages"].clone();
            let stored = sent[2]["content"].as_str().unwrap();
            assert!(
                stored.starts_with("tick tick") && stored.ends_with("[answer interrupted]"),
                "{stored:.80}"
            );
        }
    }
}

/// Bounds set too large to count from now (an operator's "never") are no bounds: the
/// answers come, streamed and whole, in both dialects, and nothing panics.
#[tokio::test]
async fn time_bounds_too_large_to_count_mean_no_bound() {
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let never = Duration::from_secs(u64::MAX);
        let gw = Gateway::start(&up, provider, |s| {
            s.llm.max_answer = never;
            s.llm.idle_timeout = never;
            s.llm.first_byte_timeout = never;
        })
        .await;
        for path in ["/v1/chat/completions", "/api/chat"] {
            for stream in [true, false] {
                up.push(Reply::tokens(&["still ", "here"]));
                let got = ask(&gw, path, stream).await;
                assert_eq!(got.status, 200, "{provider:?} {path} {stream}: {got:?}");
                assert_eq!(got.ok(), "still here", "{provider:?} {path} {stream}");
            }
        }
    }
}

#[tokio::test]
async fn a_huge_single_chunk_is_forwarded_below_the_limit_and_refused_above_it() {
    const LIMIT: usize = 64 * 1024;
    for provider in PROVIDERS {
        let up = ScriptedUpstream::start().await;
        let gw = Gateway::start(&up, provider, |s| {
            quick(s);
            s.llm.max_chunk_bytes = LIMIT;
        })
        .await;
        let below = "b".repeat(LIMIT - 1024);
        let above = "a".repeat(LIMIT + 1);
        for path in ["/v1/chat/completions", "/api/chat"] {
            up.push(Reply::tokens(&["start ", &below]));
            let got = ask(&gw, path, true).await;
            assert_eq!(
                got.ok().len(),
                "start ".len() + below.len(),
                "{provider:?} {path}"
            );
            assert!(got.text.ends_with(&below));

            // After a token: the answer ends with an invalid-stream error event.
            let before = up.requests().len();
            up.push(Reply::tokens(&["start ", &above]));
            let got = ask(&gw, path, true).await;
            assert_eq!(got.status, 200);
            assert_eq!(got.text, "start ", "{provider:?} {path}");
            assert!(got.error().contains("invalid stream"), "{got:?}");
            assert!(got.error().contains("llm.max_chunk_bytes"), "{got:?}");
            assert_eq!(up.requests().len() - before, 1);
        }
        // As the first chunk, on every attempt: an error status once retries run out.
        up.set_default(Reply::tokens(&[&above]));
        let before = up.requests().len();
        let got = ask(&gw, "/v1/chat/completions", true).await;
        assert_eq!(got.status, 502, "{provider:?}: {got:?}");
        assert!(got.error().contains("llm.max_chunk_bytes"));
        assert_eq!(up.requests().len() - before, 3);
    }
}

/// Asks until `done` holds, for at most `secs` seconds; each answer must succeed.
async fn ask_until(gw: &Gateway, secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        ask(gw, "/api/chat", false).await.ok();
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn a_failing_upstream_cools_down_and_is_used_again_afterwards() {
    let primary = ScriptedUpstream::start().await;
    let backup = ScriptedUpstream::start().await;
    let fb = fallback(&backup, Provider::Openai);
    let gw = Gateway::start(&primary, Provider::Ollama, |s| {
        quick(s);
        s.llm.retries = 0;
        s.llm.cooldown_failures = 3;
        s.llm.cooldown = std::time::Duration::from_secs(1);
        s.llm.fallbacks = vec![fb];
    })
    .await;
    primary.set_default(Reply::Status {
        status: 500,
        body: "down".into(),
    });
    for n in 1..=3 {
        assert_eq!(
            ask(&gw, "/api/chat", false).await.ok(),
            "Hello from upstream"
        );
        assert_eq!(
            primary.requests().len(),
            n,
            "tried while below the threshold"
        );
    }
    // Cooling down: the fallback answers without the primary being asked.
    for _ in 0..3 {
        assert_eq!(
            ask(&gw, "/api/chat", false).await.ok(),
            "Hello from upstream"
        );
    }
    assert_eq!(primary.requests().len(), 3, "skipped while cooling down");
    assert_eq!(backup.requests().len(), 6);

    // After the cooldown the primary is asked again; it recovered and answers.
    primary.set_default(Reply::tokens(&["primary is back"]));
    assert!(
        ask_until(&gw, 10, || primary.requests().len() > 3).await,
        "the primary was tried again after its cooldown"
    );
    let backup_seen = backup.requests().len();
    assert_eq!(ask(&gw, "/api/chat", false).await.ok(), "primary is back");
    assert_eq!(backup.requests().len(), backup_seen);
}

#[tokio::test]
async fn when_every_upstream_is_cooling_down_they_are_still_tried() {
    let primary = ScriptedUpstream::start().await;
    let backup = ScriptedUpstream::start().await;
    let fb = fallback(&backup, Provider::Ollama);
    let gw = Gateway::start(&primary, Provider::Ollama, |s| {
        quick(s);
        s.llm.retries = 0;
        s.llm.cooldown_failures = 1;
        s.llm.cooldown = std::time::Duration::from_secs(600);
        s.llm.fallbacks = vec![fb];
    })
    .await;
    for up in [&primary, &backup] {
        up.set_default(Reply::Status {
            status: 503,
            body: "busy".into(),
        });
    }
    for n in 1..=2 {
        let got = ask(&gw, "/v1/chat/completions", false).await;
        assert_eq!(got.status, 502, "{got:?}");
        assert_eq!(primary.requests().len(), n);
        assert_eq!(backup.requests().len(), n);
    }
    primary.set_default(Reply::tokens(&["recovered"]));
    assert_eq!(ask(&gw, "/api/chat", false).await.ok(), "recovered");
}

#[tokio::test]
async fn passthrough_models_go_to_the_primary_only_with_retries() {
    let primary = ScriptedUpstream::start().await;
    let backup = ScriptedUpstream::start().await;
    let fb = fallback(&backup, Provider::Ollama);
    primary.serve_model("other-model");
    let gw = Gateway::start(&primary, Provider::Ollama, |s| {
        quick(s);
        s.assistant.passthrough = true;
        s.llm.fallbacks = vec![fb];
    })
    .await;
    primary.set_default(Reply::Status {
        status: 502,
        body: "bad gateway".into(),
    });
    let got = ask_model(&gw, "/api/chat", true, "other-model", None).await;
    assert_eq!(got.status, 502, "{got:?}");
    assert_eq!(primary.requests().len(), 3);
    assert!(backup.requests().is_empty(), "a fallback may not serve it");
}

/// A fill-in-the-middle prompt is written in the completion model's template (Qwen's
/// here): it falls back only to a model that reads the same template. A fallback of
/// another family would take `<|fim_prefix|>` for text; it is skipped, and with no other
/// the completion fails as the primary did. Questions still fall back to any model.
#[tokio::test]
async fn a_completion_falls_back_only_to_a_model_of_its_templates_family() {
    for provider in PROVIDERS {
        let llama = ScriptedUpstream::start().await;
        let qwen = ScriptedUpstream::start().await;
        let other_family = serving(&llama, provider, "codellama:7b-code");
        let same_family = serving(&qwen, provider, "qwen2.5-coder-7b-instruct");
        let dead = closed_port();
        let start = |fallbacks: Vec<FallbackSettings>| {
            let dead = dead.clone();
            Gateway::start(&llama, provider, move |s| {
                quick(s);
                s.llm.base_url = dead;
                s.llm.model = "qwen2.5-coder:7b".into();
                s.llm.fallbacks = fallbacks;
            })
        };
        let complete = json!({"model": "brunix", "prompt": "def double(a):\n",
            "suffix": "    return total\n", "max_tokens": 16});

        let gw = start(vec![other_family.clone(), same_family]).await;
        qwen.push(Reply::tokens(&["    total = a * 2\n"]));
        let (status, _, text) = post(&gw.url("/v1/completions"), complete.clone()).await;
        assert_eq!(status, 200, "{provider:?}: {text}");
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(answer["choices"][0]["text"], "    total = a * 2\n");
        assert!(
            llama.requests().is_empty(),
            "{provider:?}: another family's model was asked"
        );
        let sent = qwen.last_request().body;
        assert_eq!(sent["model"], "qwen2.5-coder-7b-instruct");
        assert!(
            sent["prompt"]
                .as_str()
                .unwrap()
                .starts_with("<|fim_prefix|>def double(a):\n"),
            "{sent}"
        );

        let gw = start(vec![other_family]).await;
        let (status, _, text) = post(&gw.url("/v1/completions"), complete).await;
        assert_eq!(status, 502, "{provider:?}: {text}");
        assert!(
            llama.requests().is_empty(),
            "{provider:?}: another family's model was asked"
        );
        assert_eq!(
            ask(&gw, "/v1/chat/completions", false).await.ok(),
            "Hello from upstream"
        );
        assert_eq!(
            llama.requests().len(),
            1,
            "a question falls back to any model"
        );
    }
}

//! `/metrics` (Prometheus text) and `/ready` (each dependency's state).
//!
//! The metrics recorder is global to a process, so each gateway here is the real binary
//! in a process of its own (`Spawned`), and the tests assert on the difference between
//! two of its scrapes.

use std::time::Duration;

use crate::support::*;
use assist_gateway::config::{ClassifierMode, EmbeddingProvider, Provider, ReformulatorMode};
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";
const QUESTION: &str = "How do I register an endpoint in Brisa?";

type Labels = Vec<(String, String)>;

/// One scrape, parsed: every sample with its labels.
struct Scrape {
    samples: Vec<(String, Labels, f64)>,
}

impl Scrape {
    /// Parses the text exposition format, checking that each sample's family was
    /// declared with a `# TYPE` line first.
    fn parse(text: &str) -> Self {
        let mut typed = std::collections::HashSet::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                typed.insert(words.next().unwrap().to_string());
                let kind = words.next().unwrap();
                assert!(
                    ["counter", "gauge", "histogram", "summary"].contains(&kind),
                    "{line}"
                );
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("{line}"));
            let name = &line[..name_end];
            let (labels, rest) = match line[name_end..].strip_prefix('{') {
                Some(inner) => parse_labels(inner),
                None => (Vec::new(), &line[name_end..]),
            };
            let value = rest.split_whitespace().next().unwrap();
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("{line}")),
            };
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "no # TYPE for {name}");
            samples.push((name.to_string(), labels, value));
        }
        Self { samples }
    }

    /// The sum of the samples of `name` whose labels include all of `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
    }
}

/// `k="v",k2="v2"} rest` → the labels and what follows the `}`.
fn parse_labels(s: &str) -> (Labels, &str) {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            return (out, after);
        }
        let (key, after) = rest.split_once("=\"").expect("label=\"value\"");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("a closing quote") {
                (_, '\\') => match chars.next().expect("an escaped character") {
                    (_, 'n') => value.push('\n'),
                    (_, c) => value.push(c),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        out.push((key.to_string(), value));
        rest = &after[end + 1..];
    }
}

#[test]
fn the_parser_reads_labels_with_escapes() {
    let s = Scrape::parse(
        "# TYPE a_total counter\na_total{x=\"1\",y=\"q\\\"\\\\,}\"} 3\n# TYPE b gauge\nb 2.5\n\
         # TYPE h histogram\nh_bucket{le=\"+Inf\"} 4\nh_count 4\n",
    );
    assert_eq!(s.sum("a_total", &[("y", "q\"\\,}")]), 3.0);
    assert_eq!(s.sum("a_total", &[("x", "1")]), 3.0);
    assert_eq!(s.sum("b", &[]), 2.5);
    assert_eq!(s.sum("h_bucket", &[("le", "+Inf")]), 4.0);
    assert!(!s.has("a_total", &[("x", "2")]));
}

async fn scrape_with(gw: &Spawned, key: Option<&str>) -> Scrape {
    let mut rb = client().get(gw.url("/metrics"));
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let r = rb.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    Scrape::parse(&r.text().await.unwrap())
}

async fn scrape(gw: &Spawned) -> Scrape {
    scrape_with(gw, None).await
}

/// How much `name{labels}` grew between two scrapes.
fn delta(before: &Scrape, after: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    after.sum(name, labels) - before.sum(name, labels)
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test]
async fn chat_requests_in_both_dialects_are_counted() {
    let up = ScriptedUpstream::start().await;
    let asst = "brunix-counted";
    let gw = Spawned::with_knowledge(&up, Provider::Ollama, |s| {
        s.assistant.model = asst.into();
        s.assistant.passthrough = true;
    })
    .await;
    let before = scrape(&gw).await;

    // The assistant in the OpenAI dialect, whole (5 tokens) and streamed (4 tokens), each
    // in its own session.
    up.push(Reply::tokens(&["a", "b", "c", "d", "e"]));
    let (status, _, text) = post(
        &gw.url(CHAT),
        json!({"model": asst, "session_id": "m-1", "messages": user(QUESTION)}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    up.push(Reply::tokens(&["f", "g", "h", "i"]));
    let (status, _, text) = post(
        &gw.url(CHAT),
        json!({"model": asst, "session_id": "m-2", "stream": true, "messages": user(QUESTION)}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(sse_events(&text).last().unwrap(), "[DONE]");

    // An upstream model in the Ollama dialect, streamed (2 tokens) and whole (3 tokens).
    up.push(Reply::tokens(&["j", "k"]));
    let (status, _, text) = post(
        &gw.url("/api/chat"),
        json!({"model": UPSTREAM_MODEL, "messages": user("hi")}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(ndjson_lines(&text).last().unwrap()["done"], true);
    let (status, _, text) = post(
        &gw.url("/api/generate"),
        json!({"model": UPSTREAM_MODEL, "prompt": "hi", "stream": false}),
    )
    .await;
    assert_eq!(status, 200, "{text}");

    // A model nobody serves: counted as `other`, without its name as a label.
    let (status, _, _) = post(
        &gw.url(CHAT),
        json!({"model": "no-such-model-x1", "messages": user("hi")}),
    )
    .await;
    assert_eq!(status, 404);

    let after = scrape(&gw).await;
    let d = |name: &str, labels: &[(&str, &str)]| delta(&before, &after, name, labels);
    let asst_chat = [("route", CHAT), ("model", asst)];
    let up_chat = [("route", "/api/chat"), ("model", UPSTREAM_MODEL)];
    let up_generate = [("route", "/api/generate"), ("model", UPSTREAM_MODEL)];

    assert_eq!(
        d(
            "assist_requests_total",
            &[("route", CHAT), ("model", asst), ("status", "200")]
        ),
        2.0
    );
    assert_eq!(
        d(
            "assist_requests_total",
            &[
                ("route", "/api/chat"),
                ("model", UPSTREAM_MODEL),
                ("status", "200")
            ]
        ),
        1.0
    );
    assert_eq!(
        d(
            "assist_requests_total",
            &[("route", "/api/generate"), ("status", "200")]
        ),
        1.0
    );
    assert_eq!(
        d(
            "assist_requests_total",
            &[("route", CHAT), ("model", "other"), ("status", "404")]
        ),
        1.0
    );
    assert!(
        !after.has("assist_requests_total", &[("model", "no-such-model-x1")]),
        "a client's made-up model name is no label"
    );
    assert_eq!(
        d("assist_upstream_errors_total", &[("kind", "status_4xx")]),
        0.0,
        "a name the upstream does not list is refused without asking it"
    );

    for (labels, n) in [
        (&asst_chat[..], 2.0),
        (&up_chat[..], 1.0),
        (&up_generate[..], 1.0),
    ] {
        for h in [
            "assist_request_duration_seconds",
            "assist_ttft_seconds",
            "assist_gateway_overhead_seconds",
        ] {
            assert_eq!(d(&format!("{h}_count"), labels), n, "{h} {labels:?}");
            assert_eq!(
                after.sum(
                    &format!("{h}_bucket"),
                    &[labels, &[("le", "+Inf")]].concat()
                ),
                after.sum(&format!("{h}_count"), labels),
                "{h}: the +Inf bucket holds every observation"
            );
        }
    }
    assert!(
        d("assist_gateway_overhead_seconds_sum", &asst_chat)
            <= d("assist_request_duration_seconds_sum", &asst_chat),
        "the overhead is part of the whole"
    );
    assert!(
        d("assist_ttft_seconds_sum", &asst_chat)
            <= d("assist_request_duration_seconds_sum", &asst_chat)
    );

    assert_eq!(d("assist_tokens_streamed_total", &[("model", asst)]), 9.0);
    assert_eq!(
        d("assist_tokens_streamed_total", &[("model", UPSTREAM_MODEL)]),
        5.0
    );

    // Each stage ran once per assistant turn; passthrough runs none.
    for stage in ["session", "classify", "reformulate", "retrieve", "assemble"] {
        assert_eq!(
            d("assist_pipeline_stage_seconds_count", &[("stage", stage)]),
            2.0,
            "{stage}"
        );
    }
    // BM25 only: no dense list.
    assert_eq!(
        d("assist_retrieval_seconds_count", &[("list", "lexical")]),
        2.0
    );
    assert_eq!(
        d("assist_retrieval_seconds_count", &[("list", "fusion")]),
        2.0
    );
    assert_eq!(
        d("assist_retrieval_seconds_count", &[("list", "dense")]),
        0.0
    );

    // Gauges read at scrape time agree with /ready.
    let (status, ready) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["checks"]["session_store"]["sessions"], 2, "{ready}");
    assert_eq!(after.sum("assist_sessions", &[]), 2.0);
    let chunks = ready["checks"]["lexical_index"]["chunks"].as_f64().unwrap();
    assert!(chunks > 0.0);
    assert_eq!(
        after.sum("assist_index_chunks", &[("index", "lexical")]),
        chunks
    );
    assert_eq!(
        after.sum(
            "assist_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(
        d(
            "assist_requests_total",
            &[("route", "/metrics"), ("status", "200")]
        ) >= 1.0
    );
}

#[tokio::test]
async fn a_stream_counts_as_active_while_it_streams() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Ollama, |_| {}).await;
    let active = |s: &Scrape| s.sum("assist_streams_active", &[]);
    let idle = active(&scrape(&gw).await);
    up.push(Reply::Tokens {
        tokens: vec!["slow ".into(), "stream".into()],
        delay: Duration::from_millis(300),
        finish: "stop",
    });
    let mut r = client()
        .post(gw.url(CHAT))
        .json(&json!({"model": "brunix", "stream": true, "messages": user("hello there")}))
        .send()
        .await
        .unwrap();
    let first = read_some(&mut r, 1).await;
    assert_eq!(active(&scrape(&gw).await), idle + 1.0);
    let rest = r.text().await.unwrap();
    assert_eq!(sse_events(&(first + &rest)).last().unwrap(), "[DONE]");
    let mut now = f64::NAN;
    for _ in 0..40 {
        now = active(&scrape(&gw).await);
        if now == idle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(now, idle, "the finished stream is no longer active");
}

#[tokio::test]
async fn upstream_errors_are_counted_by_kind() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Ollama, |s| {
        s.assistant.passthrough = true;
        s.llm.first_byte_timeout = std::time::Duration::from_secs(1);
        // One attempt each: this counts how requests end, not the retries.
        s.llm.retries = 0;
    })
    .await;
    let before = scrape(&gw).await;
    let whole = json!({"model": UPSTREAM_MODEL, "messages": user("hi")});
    let streamed = json!({"model": UPSTREAM_MODEL, "stream": true, "messages": user("hi")});

    up.push(Reply::Status {
        status: 500,
        body: "boom".into(),
    });
    assert_eq!(post(&gw.url(CHAT), whole.clone()).await.0, 502);
    up.push(Reply::Status {
        status: 429,
        body: String::new(),
    });
    assert_eq!(post(&gw.url(CHAT), whole.clone()).await.0, 429);
    // No headers within the first-byte timeout (a streamed answer's: a whole one has
    // none to wait for before its last word).
    up.push(Reply::HangBeforeHeaders(Duration::from_secs(3)));
    assert_eq!(post(&gw.url(CHAT), streamed.clone()).await.0, 504);
    // Failures after the stream began: 200, an error event, and the kind counted.
    for reply in [
        Reply::DropAfter(vec!["a".into()]),
        Reply::GarbageAfter(vec!["a".into()]),
        Reply::ErrorAfter(vec!["a".into()], "out of memory".into()),
    ] {
        up.push(reply);
        let (status, _, text) = post(&gw.url(CHAT), streamed.clone()).await;
        assert_eq!(status, 200);
        assert!(text.contains("\"error\""), "{text}");
    }

    // An upstream that is not there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    // (Another gateway: its own process, so its own metrics.)
    let gone = Spawned::start(&up, Provider::Ollama, |s| s.llm.base_url = dead.clone()).await;
    let gone_before = scrape(&gone).await;
    let (status, _, _) = post(
        &gone.url(CHAT),
        json!({"model": "brunix", "messages": user("hi")}),
    )
    .await;
    assert_eq!(status, 502);
    let gone_after = scrape(&gone).await;

    let after = scrape(&gw).await;
    let d = |name: &str, labels: &[(&str, &str)]| delta(&before, &after, name, labels);
    let gone_d =
        |name: &str, labels: &[(&str, &str)]| delta(&gone_before, &gone_after, name, labels);
    for (kind, n) in [
        (
            "status_5xx",
            d("assist_upstream_errors_total", &[("kind", "status_5xx")]),
        ),
        (
            "status_4xx",
            d("assist_upstream_errors_total", &[("kind", "status_4xx")]),
        ),
        (
            "timeout",
            d("assist_upstream_errors_total", &[("kind", "timeout")]),
        ),
        (
            "closed",
            d("assist_upstream_errors_total", &[("kind", "closed")]),
        ),
        (
            "protocol",
            d("assist_upstream_errors_total", &[("kind", "protocol")]),
        ),
        (
            "stream",
            d("assist_upstream_errors_total", &[("kind", "stream")]),
        ),
        (
            "unreachable",
            gone_d("assist_upstream_errors_total", &[("kind", "unreachable")]),
        ),
    ] {
        assert_eq!(n, 1.0, "{kind}");
    }
    let by_status = |status: &str| {
        d(
            "assist_requests_total",
            &[
                ("route", CHAT),
                ("model", UPSTREAM_MODEL),
                ("status", status),
            ],
        )
    };
    assert_eq!(by_status("502"), 1.0);
    assert_eq!(by_status("429"), 1.0);
    assert_eq!(by_status("504"), 1.0);
    assert_eq!(
        by_status("200"),
        3.0,
        "streams that failed after their headers"
    );
    assert_eq!(
        gone_d(
            "assist_requests_total",
            &[("route", CHAT), ("model", "brunix"), ("status", "502")]
        ),
        1.0
    );
    // The streams sent one token each before failing.
    assert_eq!(
        d("assist_tokens_streamed_total", &[("model", UPSTREAM_MODEL)]),
        3.0
    );
}

#[tokio::test]
async fn gateway_overhead_leaves_out_every_upstream_wait() {
    let up = ScriptedUpstream::start().await;
    let asst = "brunix-overhead";
    let gw = Spawned::with_knowledge(&up, Provider::Ollama, |s| {
        s.assistant.model = asst.into();
        s.classifier.mode = ClassifierMode::Llm;
        s.reformulator.mode = ReformulatorMode::Llm;
    })
    .await;
    let slow = |tokens: &[&str], ms: u64| Reply::Tokens {
        tokens: tokens.iter().map(|t| t.to_string()).collect(),
        delay: Duration::from_millis(ms),
        finish: "stop",
    };
    // Classify, reformulate, answer: 300 + 300 + 2 × 200 ms spent in the upstream.
    up.push(slow(&["RETRIEVAL NO_EDITOR"], 300));
    up.push(slow(&["Query: register endpoint"], 300));
    up.push(slow(&["a", "b"], 200));
    let before = scrape(&gw).await;
    let (status, _, text) = post(
        &gw.url(CHAT),
        json!({"model": asst, "stream": true, "messages": user(QUESTION)}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(up.requests().len(), 3, "classify, reformulate, answer");
    let after = scrape(&gw).await;
    let labels = [("route", CHAT), ("model", asst)];
    let total = delta(
        &before,
        &after,
        "assist_request_duration_seconds_sum",
        &labels,
    );
    let overhead = delta(
        &before,
        &after,
        "assist_gateway_overhead_seconds_sum",
        &labels,
    );
    assert!(total >= 1.0, "{total}");
    assert!(
        overhead <= total - 1.0,
        "the upstream's second is not overhead: total {total}, overhead {overhead}"
    );
    // The gateway's own work (parsing, BM25 over the knowledge, assembly) is counted:
    // more than nothing, far less than the upstream's waits.
    assert!(
        overhead > 0.0 && overhead < 0.5,
        "overhead {overhead}, total {total}"
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "assist_gateway_overhead_seconds_count",
            &labels
        ),
        1.0
    );
    let ttft = delta(&before, &after, "assist_ttft_seconds_sum", &labels);
    assert!(ttft >= 0.8 && ttft < total, "ttft {ttft}, total {total}");
}

#[tokio::test]
async fn metrics_need_an_operator_key_when_keys_are_set() {
    const SCRAPE: &str = "sk-scrape-operator-key";
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["sk-tenant".into()];
        s.server.admin_keys = vec![SCRAPE.into()];
    })
    .await;
    let before = scrape_with(&gw, Some(SCRAPE)).await;
    let r = client().get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    let r = client()
        .get(gw.url("/metrics"))
        .bearer_auth("sk-wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A tenant's key sees no other key's traffic.
    let r = client()
        .get(gw.url("/metrics"))
        .bearer_auth("sk-tenant")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "operator_only", "{v}");
    let after = scrape_with(&gw, Some(SCRAPE)).await;
    assert_eq!(
        delta(
            &before,
            &after,
            "assist_requests_total",
            &[("route", "/metrics"), ("status", "401")]
        ),
        2.0
    );
}

#[tokio::test]
async fn ready_reports_each_dependency() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::with_knowledge(&up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
        s.embeddings.base_url = Some(up.root());
        s.embeddings.languages = vec!["en".into(), "es".into()];
    })
    .await;
    let (status, v) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "ok", "{v}");
    let c = &v["checks"];
    assert_eq!(c["upstream"][0]["status"], "ok");
    assert_eq!(c["upstream"][0]["url"], up.root());
    assert_eq!(c["embedder"]["status"], "ok");
    assert_eq!(
        c["embedder"]["dimension"], 26,
        "the scripted embedder's letter vectors"
    );
    assert_eq!(c["vector_store"]["status"], "ok");
    assert_eq!(c["lexical_index"]["status"], "ok");
    assert_eq!(c["session_store"]["status"], "ok");
    for check in ["embedder", "vector_store", "lexical_index", "session_store"] {
        assert!(c[check].get("reason").is_none(), "{check}: {v}");
    }
    let points = c["vector_store"]["points"].as_f64().unwrap();
    let chunks = c["lexical_index"]["chunks"].as_f64().unwrap();
    assert!(points > 0.0 && chunks > 0.0);

    // A search uses the dense list; the index gauges match /ready.
    let before = scrape(&gw).await;
    let (status, _, text) = post(
        &gw.url(CHAT),
        json!({"model": "brunix", "session_id": "r-1", "messages": user(QUESTION)}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let after = scrape(&gw).await;
    assert_eq!(
        delta(
            &before,
            &after,
            "assist_retrieval_seconds_count",
            &[("list", "dense")]
        ),
        1.0
    );
    assert_eq!(
        after.sum("assist_index_chunks", &[("index", "vectors")]),
        points
    );
    assert_eq!(
        after.sum("assist_index_chunks", &[("index", "lexical")]),
        chunks
    );
    assert_eq!(after.sum("assist_sessions", &[]), 1.0);

    // The embedder fails: degraded (still 200), saying why; then it recovers.
    up.push(Reply::Status {
        status: 500,
        body: "embedder broke".into(),
    });
    let (status, v) = get_json(&gw.url("/ready")).await;
    assert_eq!(status, 200, "degraded still serves: {v}");
    assert_eq!(v["status"], "degraded");
    assert_eq!(v["checks"]["embedder"]["status"], "degraded");
    let reason = v["checks"]["embedder"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("500") && reason.contains(&up.root()),
        "{reason}"
    );
    assert_eq!(v["checks"]["vector_store"]["status"], "ok");
    let (_, v) = get_json(&gw.url("/ready")).await;
    assert_eq!(v["status"], "ok", "{v}");

    // Session count in /ready.
    assert_eq!(v["checks"]["session_store"]["sessions"], 1);

    // No upstream: 503, and the other checks still reported.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let gone = Spawned::start(&up, Provider::Ollama, |s| s.llm.base_url = dead.clone()).await;
    let (status, v) = get_json(&gone.url("/ready")).await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["status"], "down");
    assert_eq!(v["checks"]["upstream"][0]["status"], "down");
    assert!(v["checks"]["upstream"][0]["reason"]
        .as_str()
        .unwrap()
        .contains(&dead));
    assert_eq!(v["checks"]["embedder"]["status"], "disabled");
    assert_eq!(v["checks"]["vector_store"]["status"], "disabled");
    assert_eq!(v["checks"]["session_store"]["status"], "ok");
    assert!(v["checks"]["lexical_index"]["reason"]
        .as_str()
        .unwrap()
        .contains("ingest"));
}

/// Embedding requests get their log line and their metrics like every route but chat
/// (they used to be marked as logged by a chat log they never had, and got neither).
#[tokio::test]
async fn embedding_requests_are_logged_and_counted() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Ollama, |s| {
        s.embeddings.provider = EmbeddingProvider::Ollama;
    })
    .await;
    let model = gw.settings.embeddings.model.clone();
    let before = scrape(&gw).await;
    for (path, input, want) in [
        ("/v1/embeddings", json!(["abc", "def"]), 200),
        ("/api/embed", json!("abc"), 200),
        ("/v1/embeddings", json!([]), 400),
    ] {
        let (status, _, text) = post(&gw.url(path), json!({"model": model, "input": input})).await;
        assert_eq!(status, want, "{path}: {text}");
    }
    let after = scrape(&gw).await;
    let d = |labels: &[(&str, &str)]| delta(&before, &after, "assist_requests_total", labels);
    assert_eq!(d(&[("route", "/v1/embeddings"), ("status", "200")]), 1.0);
    assert_eq!(d(&[("route", "/api/embed"), ("status", "200")]), 1.0);
    assert_eq!(d(&[("route", "/v1/embeddings"), ("status", "400")]), 1.0);
    assert_eq!(
        delta(
            &before,
            &after,
            "assist_request_duration_seconds_count",
            &[("route", "/v1/embeddings")]
        ),
        2.0
    );
    let log = gw.log();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "request")
        .map(|v| v["fields"].clone())
        .collect();
    let of = |path: &str| -> Vec<u64> {
        lines
            .iter()
            .filter(|f| f["path"] == path)
            .map(|f| f["status"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(of("/v1/embeddings"), [200, 400], "{log}");
    assert_eq!(of("/api/embed"), [200], "{log}");
}

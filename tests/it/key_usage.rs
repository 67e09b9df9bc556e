//! Usage per API key, as a key's holder and an operator see it: named keys, answers and
//! tokens counted per key name over HTTP and gRPC (`GET /v1/usage`, the caller's own;
//! `assist_key_*` metrics), never the key itself; the keys' own limits (tokens per day,
//! answers per minute) refused with 429 and retry-after in each dialect's shape (MCP's
//! `ask`: a JSON-RPC error with the status and retry-after as data), and
//! kept in the session store's backend: the embedded one, and Redis shared by two
//! replicas.

use std::time::Duration;

use assist_gateway::config::{ApiKey, Provider, SessionBackend, Settings};
use assist_gateway::grpc::pb::assistance_engine_client::AssistanceEngineClient;
use assist_gateway::grpc::pb::AgentRequest;
use serde_json::{json, Value};

use crate::support::*;

const ALICE: &str = "sk-alice-SECRET-4410";
const BOB: &str = "sk-bob-SECRET-7720";
const CAROL: &str = "sk-carol-SECRET-1183";
const DAVE: &str = "sk-dave-SECRET-9005";

/// Key names unique to one test (the metrics recorder is the process's).
fn keys(tag: &str) -> Vec<ApiKey> {
    let named = |name: &str, key: &str, tokens_per_day, requests_per_minute| ApiKey {
        name: Some(format!("{name}-{tag}")),
        key: key.into(),
        tokens_per_day,
        requests_per_minute,
    };
    vec![
        named("alice", ALICE, 0, 0),
        named("bob", BOB, 0, 0),
        named("carol", CAROL, 10, 0),
        named("dave", DAVE, 0, 2),
    ]
}

async fn chat(base: &str, key: &str, model: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = client()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({"model": model, "stream": false,
            "messages": [{"role": "user", "content": "what is ormDirect?"}]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap())
}

async fn grpc_ask(addr: std::net::SocketAddr, key: &str) -> Result<String, tonic::Status> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut request = tonic::Request::new(AgentRequest {
        query: "what is ormDirect?".into(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let mut stream = AssistanceEngineClient::new(channel)
        .ask_agent_stream(request)
        .await?
        .into_inner();
    let mut text = String::new();
    while let Some(m) = stream.message().await? {
        text.push_str(&m.text);
    }
    Ok(text)
}

/// MCP's `ask` tool called with `key` over streamable HTTP (initialize, initialized, the
/// call): the call's JSON-RPC response.
async fn mcp_ask(base: &str, key: &str) -> Value {
    let post = |body: Value, session: Option<String>| {
        let mut rb = client()
            .post(format!("{base}/mcp"))
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(id) = session {
            rb = rb.header("mcp-session-id", id);
        }
        rb.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "key-usage-test", "version": "1"}}});
    let r = post(init, None).await.unwrap();
    assert_eq!(r.status(), 200);
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    r.text().await.unwrap();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert!(post(done, session.clone())
        .await
        .unwrap()
        .status()
        .is_success());
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "ask", "arguments": {"question": "what is ormDirect?"}}});
    let text = post(call, session).await.unwrap().text().await.unwrap();
    // A JSON body, or server-sent events whose data lines carry the response.
    std::iter::once(text.as_str())
        .chain(text.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v["id"] == 2)
        .unwrap_or_else(|| panic!("no response to the call: {text}"))
}

async fn usage(base: &str, key: &str) -> Value {
    let r = client()
        .get(format!("{base}/v1/usage"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// A key's usage once it counted `requests` answers (they are counted as they end).
async fn usage_after(base: &str, key: &str, requests: u64) -> Value {
    for _ in 0..100 {
        let u = usage(base, key).await;
        if u["totals"]["requests"] == requests {
            return u;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{key}'s usage never reached {requests}: {}",
        usage(base, key).await
    );
}

/// Waits for the start of a minute when less than `room` of this one is left (the
/// answers-per-minute window is the wall clock's minute).
async fn room_in_minute(room: i64) {
    let second = chrono::Utc::now().timestamp().rem_euclid(60);
    if 60 - second < room {
        tokio::time::sleep(Duration::from_secs((60 - second + 1) as u64)).await;
    }
}

/// Two replicas (the same one twice without a shared store) in front of one upstream.
async fn scenario(replicas: [(String, std::net::SocketAddr); 2], tag: &str, up: &ScriptedUpstream) {
    let [(a, a_grpc), (b, _)] = replicas;
    up.set_default(Reply::tokens(&["ormDirect ", "runs ", "SQL."]));

    // alice: two answers over HTTP (one each side), one over gRPC; bob: one passthrough.
    let (s1, _, one) = chat(&a, ALICE, "brunix").await;
    let (s2, _, two) = chat(&b, ALICE, "brunix").await;
    assert_eq!((s1, s2), (200, 200), "{one} {two}");
    let text = grpc_ask(a_grpc, ALICE).await.unwrap();
    assert!(text.contains("SQL"), "{text}");
    let (s, _, passthrough) = chat(&a, BOB, UPSTREAM_MODEL).await;
    assert_eq!(s, 200, "{passthrough}");

    let alice = usage_after(&b, ALICE, 3).await;
    assert_eq!(alice["key"], format!("alice-{tag}"), "{alice}");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let days = alice["days"].as_array().unwrap();
    assert_eq!(days.len(), 1, "{alice}");
    assert_eq!(days[0]["day"], today);
    let models = days[0]["models"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{alice}");
    assert_eq!(models[0]["model"], "brunix");
    assert_eq!(models[0]["requests"], 3);
    assert_eq!(models[0]["errors"], 0);
    // The HTTP answers' own usage, plus the gRPC answer's (which its client is not told).
    let http_input = one["usage"]["prompt_tokens"].as_u64().unwrap()
        + two["usage"]["prompt_tokens"].as_u64().unwrap();
    let http_output = one["usage"]["completion_tokens"].as_u64().unwrap()
        + two["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(
        models[0]["input_tokens"].as_u64().unwrap() > http_input,
        "{alice}"
    );
    assert!(
        models[0]["output_tokens"].as_u64().unwrap() > http_output,
        "{alice}"
    );
    assert_eq!(alice["totals"]["input_tokens"], models[0]["input_tokens"]);

    let bob = usage_after(&a, BOB, 1).await;
    assert_eq!(bob["key"], format!("bob-{tag}"));
    let row = &bob["days"][0]["models"][0];
    assert_eq!(row["model"], UPSTREAM_MODEL);
    assert_eq!(
        row["input_tokens"], passthrough["usage"]["prompt_tokens"],
        "{bob} {passthrough}"
    );
    assert_eq!(
        row["output_tokens"],
        passthrough["usage"]["completion_tokens"]
    );
    let text = serde_json::to_string(&[&alice, &bob]).unwrap();
    assert!(!text.contains("SECRET"), "a key in a usage report: {text}");

    // carol: 10 tokens a day; her first answer spends them, the next is refused (HTTP
    // and gRPC), until the next UTC day.
    let (s, _, _) = chat(&a, CAROL, "brunix").await;
    assert_eq!(s, 200);
    usage_after(&a, CAROL, 1).await;
    let (s, headers, body) = chat(&b, CAROL, "brunix").await;
    assert_eq!(s, 429, "{body}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("10 tokens for the day"));
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    let midnight = 86_400 - chrono::Utc::now().timestamp().rem_euclid(86_400) as u64;
    assert!(
        wait.abs_diff(midnight) <= 5,
        "retry-after {wait} s, midnight in {midnight} s"
    );
    // Ollama's dialect: its own error shape, the same header.
    let r = client()
        .post(format!("{a}/api/chat"))
        .bearer_auth(CAROL)
        .json(&json!({"model": "brunix", "stream": false,
            "messages": [{"role": "user", "content": "again"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("tokens for the day"),
        "{body}"
    );
    let refused = grpc_ask(a_grpc, CAROL).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.metadata().get("retry-after").is_some());
    // MCP's `ask`: a JSON-RPC error saying the limit, with its status and when to retry.
    let refused = mcp_ask(&a, CAROL).await;
    let error = &refused["error"];
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("tokens for the day"),
        "{refused}"
    );
    assert_eq!(error["data"]["status"], 429, "{refused}");
    assert!(
        error["data"]["retry_after"].as_u64().unwrap() > 0,
        "{refused}"
    );
    // Others are not limited by carol's spending.
    assert_eq!(chat(&b, ALICE, "brunix").await.0, 200);

    // dave: two answers a minute, across replicas and APIs; the third waits.
    room_in_minute(20).await;
    assert_eq!(chat(&a, DAVE, "brunix").await.0, 200);
    grpc_ask(a_grpc, DAVE).await.unwrap();
    let (s, headers, body) = chat(&b, DAVE, "brunix").await;
    assert_eq!(s, 429, "{body}");
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("2 answers per minute"));
    let refused = grpc_ask(a_grpc, DAVE).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    // Refused answers are counted as requests with errors.
    let dave = usage_after(&a, DAVE, 4).await;
    assert_eq!(dave["totals"]["errors"], 2, "{dave}");
    assert_eq!(dave["limits"]["requests_per_minute"], 2);
    let carol = usage(&b, CAROL).await;
    assert_eq!(carol["limits"]["tokens_per_day"], 10);
    assert_eq!(carol["today"]["tokens_left"], 0, "{carol}");
}

fn settings(tag: &str) -> impl Fn(&mut Settings) {
    let keys = keys(tag);
    move |s: &mut Settings| {
        s.server.api_keys = keys.clone();
        s.server.admin_keys = vec![OPERATOR.into()];
        s.assistant.passthrough = true;
    }
}

/// The operators' key: only it reads `/metrics`, every key's usage.
const OPERATOR: &str = "operator-key-for-the-metrics";

#[tokio::test]
async fn usage_and_limits_per_key_with_the_embedded_store() {
    let up = ScriptedUpstream::start().await;
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, settings(&tag)).await;
    let replica = (gw.url(""), gw.grpc_addr.unwrap());
    scenario([replica.clone(), replica], &tag, &up).await;

    // A tenant's key does not read the metrics (every key's usage)...
    let r = client()
        .get(gw.url("/metrics"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // ...operators see each key by name in the metrics, never the key.
    let r = client()
        .get(gw.url("/metrics"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    let metrics = r.text().await.unwrap();
    let line = |name: &str, labels: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l.contains(labels))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} {{{labels}}} in {metrics}"))
    };
    let alice = format!("key=\"alice-{tag}\"");
    assert_eq!(line("assist_key_requests_total", &alice), 4.0);
    assert!(
        line(
            "assist_key_tokens_total",
            &format!("{alice},model=\"brunix\",kind=\"output\"")
        ) > 0.0
    );
    let dave = format!("key=\"dave-{tag}\"");
    assert_eq!(line("assist_key_errors_total", &dave), 2.0);
    assert!(!metrics.contains("SECRET"), "a key in the metrics");

    // The store is the gateway's: a restart keeps the day's counts.
    let gw = gw.restart().await;
    let alice = usage(&gw.url(""), ALICE).await;
    assert_eq!(alice["totals"]["requests"], 4, "{alice}");
    let (s, _, _) = chat(&gw.url(""), CAROL, "brunix").await;
    assert_eq!(s, 429, "carol's day stays spent after a restart");
}

#[tokio::test]
async fn usage_and_limits_per_key_are_shared_by_replicas_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let url = redis.url();
    let on_redis = |s: &mut Settings| {
        settings(&tag)(s);
        s.sessions.backend = SessionBackend::Redis;
        s.sessions.redis_url = Some(url.clone());
    };
    let a = Gateway::with_knowledge(&up, Provider::Ollama, on_redis).await;
    let b = Gateway::with_knowledge(&up, Provider::Ollama, on_redis).await;
    scenario(
        [
            (a.url(""), a.grpc_addr.unwrap()),
            (b.url(""), b.grpc_addr.unwrap()),
        ],
        &tag,
        &up,
    )
    .await;
}

#[tokio::test]
async fn usage_needs_a_key() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let (status, body) = get_json(&gw.url("/v1/usage")).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("server.api_keys"));
    let tag = "nokey";
    let gw = Gateway::start(&up, Provider::Ollama, settings(tag)).await;
    let (status, body) = get_json(&gw.url("/v1/usage")).await;
    assert_eq!(status, 401, "{body}");
}

/// A key without a name is shown as `key-` and its place in the list: in the metrics an
/// operator reads and in its own `/v1/usage`, never by a digest of the key (the start of
/// its SHA-256 confirmed a guessed key offline). Its usage is its own.
#[tokio::test]
async fn plain_keys_are_named_by_their_place_not_by_a_digest() {
    use sha2::Digest as _;
    const PLAIN: [&str; 2] = ["sk-plain-first-SECRET-4417", "sk-plain-second-SECRET-8823"];
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = PLAIN.iter().map(|k| (*k).into()).collect();
        s.server.admin_keys = vec![OPERATOR.into()];
        s.assistant.passthrough = true;
    })
    .await;
    for key in PLAIN {
        let (status, _, body) = chat(&gw.url(""), key, "brunix").await;
        assert_eq!(status, 200, "{body}");
    }
    let second = usage_after(&gw.url(""), PLAIN[1], 1).await;
    assert_eq!(second["key"], "key-2", "{second}");
    let metrics = client()
        .get(gw.url("/metrics"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (i, key) in PLAIN.iter().enumerate() {
        let named = format!("assist_key_requests_total{{key=\"key-{}\",", i + 1);
        assert!(metrics.contains(&named), "no {named} in {metrics}");
        let digest = sha2::Sha256::digest(key.as_bytes());
        let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            !metrics.contains(&hex),
            "the start of {key}'s SHA-256 in {metrics}"
        );
    }
}

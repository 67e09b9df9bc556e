//! The gateway against hostile clients and upstreams: nothing a client sends without a
//! key, and nothing an upstream sends, holds connections, memory or time without bound.

use std::time::Duration;

use assist_gateway::config::Provider;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame.
const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
/// A HEADERS frame on stream 1 without END_HEADERS (`:method GET`): the rest of the
/// headers never come.
const ENDLESS_HEADERS: [u8; 10] = [0, 0, 1, 1, 0, 0, 0, 0, 1, 0x82];

/// An HTTP/2 connection (prior knowledge) that sent its preface and settings and then
/// nothing: no request.
async fn idle_h2(addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.write_all(PREFACE).await?;
    tcp.write_all(&SETTINGS).await?;
    Ok(tcp)
}

/// Whether the server closes `tcp` within `secs` (reading whatever it sends first).
async fn closed_within(mut tcp: TcpStream, secs: u64) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(secs), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// An idle HTTP/2 connection, and one whose request headers never end, are closed after
/// `server.idle_timeout_secs`, on the HTTP port and on the gRPC port (they stayed open
/// for ever: 0 of 5 closed in 240 s).
#[tokio::test]
async fn idle_http2_connections_and_endless_headers_are_closed() {
    let upstream = ScriptedUpstream::start().await;
    let gw = Gateway::start(&upstream, Provider::Ollama, |s| {
        s.server.idle_timeout = Duration::from_secs(1);
    })
    .await;
    for addr in [gw.addr, gw.grpc_addr.unwrap()] {
        let idle = idle_h2(addr).await.unwrap();
        let mut headers = idle_h2(addr).await.unwrap();
        headers.write_all(&ENDLESS_HEADERS).await.unwrap();
        let (idle, headers) = tokio::join!(closed_within(idle, 6), closed_within(headers, 6));
        assert!(idle, "an idle HTTP/2 connection to {addr} stays open");
        assert!(
            headers,
            "endless HEADERS to {addr} keep the connection open"
        );
    }
    // A connection in use is not idle: a long answer outlives the idle timeout.
    upstream.push(Reply::Tokens {
        tokens: (0..6).map(|i| format!("t{i} ")).collect(),
        delay: Duration::from_millis(400),
        finish: "stop",
    });
    let (status, _, body) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "stream": true,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(sse_text(&sse_events(&body)).contains("t5"), "{body}");
}

/// Far more keyless idle connections than the gateway may hold (its open files limited
/// to 200, as `ulimit -n` would): `/health` and a chat answer still get through, the
/// idle connections longest idle making room. (Before, about 190 such connections left
/// the gateway unable to accept any: "Too many open files".)
#[tokio::test]
async fn idle_connections_past_the_cap_cannot_keep_health_or_answers_out() {
    let upstream = ScriptedUpstream::start().await;
    let gw =
        Spawned::start_limited(&upstream, Provider::Ollama, false, |_| {}, &[], Some(200)).await;
    let mut held = Vec::new();
    for _ in 0..300 {
        if let Ok(c) = idle_h2(gw.addr).await {
            held.push(c);
        }
    }
    assert!(held.len() >= 250, "{} connections opened", held.len());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let health = client.get(gw.url("/health")).send().await;
    assert!(
        health.as_ref().is_ok_and(|r| r.status() == 200),
        "{health:?}\n{}",
        gw.log()
    );
    eprintln!(
        "/health in {:?} with 300 idle connections",
        started.elapsed()
    );
    let answer = client
        .post(gw.url("/v1/chat/completions"))
        .json(&json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let v: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from upstream");
    let log = gw.stop();
    assert!(log.contains("server.max_connections held below"), "{log}");
    assert!(!log.contains("Too many open files"), "{log}");
}

/// A request whose body never ends (sent a byte at a time, or not at all) keeps its
/// connection busy, so it is never evicted.
async fn slow_body(addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let mut tcp = TcpStream::connect(addr).await?;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n{{\"model\": \"brunix\", "
    );
    tcp.write_all(head.as_bytes()).await?;
    Ok(tcp)
}

/// Busy connections from one address cannot hold the gateway: with the cap at 16, 16
/// requests whose bodies never end, from one address, take a quarter of the places
/// (`server.max_connections_per_address` is held to it) and the rest are refused at once;
/// `/health` and an answer from another address get through. (Before, the 16 took every
/// place and `/health` went unanswered until their bodies timed out.)
#[tokio::test]
async fn one_address_with_busy_connections_cannot_hold_the_gateway() {
    let upstream = ScriptedUpstream::start().await;
    let gw = Gateway::start(&upstream, Provider::Ollama, |s| {
        s.server.max_connections = 16;
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..16 {
        slow.push(slow_body(gw.addr).await.unwrap());
    }
    // Refused at once: closed unread. The places taken stay held (the streams are kept).
    let refused = futures::future::join_all(slow.iter_mut().map(|c| async {
        let mut buf = [0u8; 1024];
        matches!(
            tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }))
    .await;
    let refused = refused.iter().filter(|closed| **closed).count();
    assert_eq!(
        refused, 12,
        "{refused} of 16 busy connections from one address refused"
    );
    let other: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let client = reqwest::Client::builder()
        .local_address(other)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let health = client.get(gw.url("/health")).send().await;
    assert!(
        health.as_ref().is_ok_and(|r| r.status() == 200),
        "{health:?}"
    );
    let answer = client
        .post(gw.url("/v1/chat/completions"))
        .json(&json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    drop(slow);
}

/// A client that stops reading an HTTP/2 stream (its flow-control window stays shut, the
/// socket stays writable) has its connection closed after `server.write_timeout_secs`,
/// and the upstream request is cancelled: on the HTTP port (SSE over h2c) and on the gRPC
/// port (AskAgentStream). Before, the stream was held for as long as the upstream went on.
#[tokio::test]
async fn a_stream_its_client_stops_reading_over_http2_is_ended() {
    let upstream = ScriptedUpstream::start().await;
    let gw = Gateway::start(&upstream, Provider::Ollama, |s| {
        s.server.write_timeout = Duration::from_secs(1);
    })
    .await;
    let chat = serde_json::to_vec(&json!({"model": "brunix", "stream": true,
        "messages": [{"role": "user", "content": "hi"}]}))
    .unwrap();
    // AgentRequest { query: "hi" }, gRPC-framed.
    let grpc = [0u8, 0, 0, 0, 4, 0x0a, 2, b'h', b'i'].to_vec();
    let calls = [
        (gw.addr, "/v1/chat/completions", "application/json", chat),
        (
            gw.grpc_addr.unwrap(),
            "/brunix.AssistanceEngine/AskAgentStream",
            "application/grpc",
            grpc,
        ),
    ];
    for (n, (addr, path, content_type, body)) in calls.into_iter().enumerate() {
        upstream.push(Reply::Endless(Duration::from_millis(1)));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut client, connection) = h2::client::Builder::new()
            .initial_window_size(256)
            .initial_connection_window_size(1024)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .unwrap();
        let driven = tokio::spawn(connection);
        let request = axum::http::Request::post(format!("http://{addr}{path}"))
            .header("content-type", content_type)
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut send) = client.send_request(request, false).unwrap();
        send.send_data(body.into(), true).unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        // The body is never read: no window is given back.
        let ended = tokio::time::timeout(Duration::from_secs(6), driven).await;
        assert!(ended.is_ok(), "{path}: the stalled connection stays open");
        assert!(
            eventually(5, || upstream.cancelled() > n).await,
            "{path}: the upstream request goes on"
        );
        drop(response);
    }
}

/// Reads a streamed answer until `bytes` arrived, then goes away. (Hundreds of megabytes
/// through a debug build on a busy machine take longer than the usual client's 20 s: what
/// is measured is memory, not speed.)
async fn read_stream(url: &str, body: serde_json::Value, bytes: usize) {
    use futures::StreamExt;
    let patient = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let response = patient.post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut got = 0;
    while let Some(piece) = stream.next().await {
        got += piece.unwrap().len();
        if got >= bytes {
            return;
        }
    }
    panic!("the stream ended after {got} bytes");
}

/// An endless upstream answering as fast as it can: the answer kept for the session is
/// bounded while it streams (`sessions.max_session_bytes`), so a session costs no more
/// memory than no session. (Before, the whole answer was held: 2.9 GB after 30 s.) The
/// turn is saved cut, and says so.
#[tokio::test]
async fn an_endless_answer_kept_for_a_session_stays_bounded() {
    let upstream = ScriptedUpstream::start().await;
    upstream.set_default(Reply::Flood(16 * 1024));
    // A turn small enough that the next prompt can show it whole.
    let gw = Spawned::start(&upstream, Provider::Ollama, |s| {
        s.sessions.max_session_bytes = 16 * 1024;
    })
    .await;
    let url = gw.url("/v1/chat/completions");
    let ask = |session: Option<&str>| {
        let mut body = json!({"model": "brunix", "stream": true,
            "messages": [{"role": "user", "content": "write forever"}]});
        if let Some(s) = session {
            body["session_id"] = json!(s);
        }
        body
    };
    const STREAMED: usize = 200 << 20;
    read_stream(&url, ask(None), STREAMED).await;
    let (without, _) = gw.memory_mib();
    read_stream(&url, ask(Some("s1")), STREAMED).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (with, peak) = gw.memory_mib();
    eprintln!("after 200 MB streamed: {without:.1} MiB without a session, {with:.1} MiB with one, peak {peak:.1} MiB");
    assert!(peak < 100.0, "peak {peak:.1} MiB");
    assert!(
        with < without + 8.0,
        "{with:.1} MiB with a session, {without:.1} without"
    );
    // The turn was kept, cut at the session's bytes and marked.
    upstream.set_default(Reply::tokens(&["ok"]));
    let (status, _, _) = post(&url, {
        let mut b = ask(Some("s1"));
        b["stream"] = json!(false);
        b
    })
    .await;
    assert_eq!(status, 200);
    let prompt = prompt_text(&upstream.last_request());
    assert!(
        prompt.contains("[answer cut: longer than sessions.max_session_bytes]"),
        "{}\n{}",
        &prompt[prompt.len().saturating_sub(300)..],
        gw.log()
    );
    assert!(prompt.len() < 20 * 1024, "{} bytes", prompt.len());
}

/// Upstream bodies outside the chat stream are read with a cap and a deadline: a 200 MB
/// error page (once per retry), a 200 MB token count, a 200 MB model list; a model list
/// that stalls mid-body. Each is answered in bounded time, what reaches the client is
/// cut, and the gateway's peak memory stays under 100 MB. (Before: 897 MB for the error,
/// 9.6 GB and 51 s for the count, 928 MB for the list; the stalled list hung.)
#[tokio::test]
async fn huge_and_stalled_upstream_bodies_are_capped() {
    const HUGE: usize = 200 << 20;
    let upstream = ScriptedUpstream::start().await;
    let gw = Spawned::start(&upstream, Provider::Openai, |s| {
        s.assistant.passthrough = true;
    })
    .await;
    // The error page, three times (two retries).
    upstream.set_default(Reply::HugeStatus {
        status: 500,
        bytes: HUGE,
    });
    let (status, _, body) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 502, "{}", &body[..body.len().min(500)]);
    assert!(
        body.len() < 4096,
        "{} bytes of error reach the client",
        body.len()
    );
    // The token count and the model list, huge.
    upstream.set_default(Reply::tokens(&["fine"]));
    upstream.hostile(Hostile::Huge(HUGE));
    let started = std::time::Instant::now();
    let (status, _, body) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (status, models) = get_json(&gw.url("/v1/models")).await;
    assert_eq!(status, 200);
    assert_eq!(models["data"][0]["id"], "brunix", "{models}");
    let (_, peak) = gw.memory_mib();
    eprintln!("peak {peak:.1} MiB after 200 MB error pages, token counts and model lists");
    assert!(peak < 100.0, "peak {peak:.1} MiB");
    // A model list that stalls mid-body: the listing gives up at its deadline (the
    // first-byte timeout, 5 s here), and the assistant is listed alone.
    upstream.hostile(Hostile::StallMidBody(Duration::from_secs(120)));
    let started = std::time::Instant::now();
    let (status, models) = get_json(&gw.url("/v1/models")).await;
    assert_eq!(status, 200);
    assert_eq!(models["data"].as_array().unwrap().len(), 1, "{models}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    let (status, tags) = get_json(&gw.url("/api/tags")).await;
    assert_eq!(status, 200, "{tags}");
}

/// A redirect from the upstream is not followed: the prompt never reaches the host it
/// points at, and the client is told why.
#[tokio::test]
async fn upstream_redirects_are_not_followed() {
    let upstream = ScriptedUpstream::start().await;
    let elsewhere = ScriptedUpstream::start().await;
    upstream.set_default(Reply::Redirect(format!(
        "{}/v1/chat/completions",
        elsewhere.root()
    )));
    let gw = Gateway::start(&upstream, Provider::Openai, |_| {}).await;
    let (status, _, body) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "secret plans"}]}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("redirect"), "{body}");
    assert!(
        elsewhere.requests().is_empty(),
        "the prompt went to the redirect's host"
    );
}

/// What a client puts in `x-request-id` is echoed and logged only when it is a plain id
/// of at most 128 characters; anything else (300 KB, a line break) is replaced, on 401s
/// too.
#[tokio::test]
async fn request_ids_are_plain_and_short() {
    let upstream = ScriptedUpstream::start().await;
    let gw = Spawned::start(&upstream, Provider::Ollama, |s| {
        s.server.api_keys = vec!["k".into()];
    })
    .await;
    let long = "x".repeat(300 * 1024);
    for (id, kept) in [
        ("abc-123_X.y:z", true),
        (long.as_str(), false),
        ("bad id with spaces", false),
    ] {
        let r = client()
            .get(gw.url("/v1/models"))
            .header("x-request-id", id)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let echoed = r.headers()["x-request-id"].to_str().unwrap().to_string();
        assert_eq!(echoed == id, kept, "{}", &echoed[..echoed.len().min(80)]);
        assert!(echoed.len() <= 128);
    }
    let log = gw.stop();
    assert!(
        !log.contains("xxxxxxxxxxxxxxxxxxxx"),
        "the long id was logged"
    );
    assert!(!log.contains("bad id with spaces"));
}

/// A file name with a line break cannot forge a line of the ingest log.
#[test]
fn file_names_cannot_forge_log_lines() {
    let data = tempfile::tempdir().unwrap();
    let corpus = tempfile::tempdir().unwrap();
    let forged = "x.md\n2026-11-26T00:00:00Z  INFO forged: everything is fine\ny.md";
    std::fs::write(corpus.path().join(forged), vec![b'a'; 2048]).unwrap();
    let mut settings = assist_gateway::config::Settings::load_without_env(None).unwrap();
    settings.data_dir = data.path().to_path_buf();
    settings.ingest.max_file_bytes = 1024;
    let config = data.path().join("ingest.toml");
    std::fs::write(&config, toml::to_string(&settings).unwrap()).unwrap();
    let out = std::process::Command::new(gateway_binary())
        .args(["ingest", "--config"])
        .arg(&config)
        .arg(corpus.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("max_file_bytes"), "{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("2026-11-26T00:00:00Z")),
        "{log}"
    );
}

/// With every log level on (`RUST_LOG=trace`), an MCP `ask` logs neither its question nor
/// its code: rmcp's own debug lines carried both.
#[tokio::test]
async fn debug_logs_of_dependencies_carry_no_content() {
    let upstream = ScriptedUpstream::start().await;
    let gw = Spawned::start_with_env(
        &upstream,
        Provider::Ollama,
        false,
        |_| {},
        &[("RUST_LOG", "trace")],
    )
    .await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "ask", "arguments": {"question": "zebra-question-7731",
                                     "selected_code": "fn zebra_code_4412() {}"}}});
    let r = client()
        .post(gw.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("Hello from upstream"), "{text}");
    let log = gw.stop();
    assert!(log.contains("mcp"), "the call was logged at all");
    assert!(
        !log.contains("zebra-question-7731"),
        "the question was logged"
    );
    assert!(!log.contains("zebra_code_4412"), "the code was logged");
}

/// Malformed input gets an error in the API's own shape and status: a model id that is
/// not UTF-8, a JSON-RPC body that is not JSON, tool arguments of the wrong shape, a gRPC
/// message that is not protobuf, sampling parameters out of range, and a prompt far over
/// the window when the gateway can only estimate it.
#[tokio::test]
async fn malformed_input_gets_the_apis_own_errors() {
    let upstream = ScriptedUpstream::start().await;
    let gw = Gateway::start(&upstream, Provider::Openai, |s| {
        s.llm.tokenizer = assist_gateway::config::Tokenizer::Estimate;
    })
    .await;
    // /v1/models/%FF: the OpenAI error shape.
    let r = client().get(gw.url("/v1/models/%FF")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    // /mcp: not JSON → JSON-RPC parse error; arguments of the wrong shape → -32602.
    let r = client()
        .post(gw.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: serde_json::Value = r.json().await.unwrap_or_default();
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], -32700, "{v}");
    // JSON that is not a JSON-RPC message (a batch, no method, an object for an id):
    // 400 and -32600, not the 415 "unsupported media type" rmcp answers.
    for message in [
        json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]),
        json!({"jsonrpc": "2.0", "id": 9}),
        json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}),
    ] {
        let r = client()
            .post(gw.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&message)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        assert_eq!(
            (status, &v["error"]["code"]),
            (400, &json!(-32600)),
            "{message}: {v}"
        );
    }
    for arguments in [json!("a string"), json!({"question": 7})] {
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "ask", "arguments": arguments}});
        let text = client()
            .post(gw.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&call)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.contains("-32602"), "{arguments}: {text}");
    }
    // A call without params, with params that are not an object, or without a tool's
    // name: -32602 naming the field (was -32601, "method not found").
    for (call, field) in [
        (
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call"}),
            "`params`",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": [1]}),
            "`params`",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"arguments": {}}}),
            "`params.name`",
        ),
    ] {
        let v: serde_json::Value = client()
            .post(gw.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&call)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["error"]["code"], -32602, "{call}: {v}");
        assert_eq!(v["id"], call["id"], "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{call}: {v}"
        );
    }
    // gRPC: a body that is not an AgentRequest → INVALID_ARGUMENT.
    let addr = gw.grpc_addr.unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut h2c, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let request =
        axum::http::Request::post(format!("http://{addr}/brunix.AssistanceEngine/AskAgent"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
    let (response, mut send) = h2c.send_request(request, false).unwrap();
    // Field 1 as a string of length 100 with 2 bytes: not protobuf.
    send.send_data(vec![0u8, 0, 0, 0, 4, 0x0a, 100, b'h', b'i'].into(), true)
        .unwrap();
    let response = response.await.unwrap();
    let grpc_status = match response.headers().get("grpc-status") {
        Some(s) => s.to_str().unwrap().to_string(),
        None => {
            let mut body = response.into_body();
            while body.data().await.is_some() {}
            let trailers = body.trailers().await.unwrap().unwrap();
            trailers["grpc-status"].to_str().unwrap().to_string()
        }
    };
    assert_eq!(grpc_status, "3", "INVALID_ARGUMENT");
    // Sampling parameters out of range, in the OpenAI shape, naming the field.
    for (field, value) in [
        ("max_tokens", json!(4294967295u64)),
        ("presence_penalty", json!(1e308)),
        ("temperature", json!(-1)),
        ("stop", json!(vec!["x"; 10_000])),
    ] {
        let mut body = json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]});
        body[field] = value;
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(status, 400, "{field}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], field, "{text}");
    }
    // A million characters against an 8,192-token window, only estimated: refused, not
    // forwarded.
    let requests = upstream.requests().len();
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": "word ".repeat(200_000)}]}),
    )
    .await;
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    assert!(text.contains("context_length_exceeded"), "{text}");
    assert_eq!(upstream.requests().len(), requests, "it was forwarded");
}

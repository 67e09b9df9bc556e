//! The gateway as an attacker meets it: several callers sharing it, hostile input, web
//! pages in the user's browser, clients that stop reading. Each test here failed on the
//! gateway before its fix.

use std::time::Duration;

use assist_gateway::config::{Provider, SessionBackend};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

const ALICE: &str = "key-alice";
const BOB: &str = "key-bob";

/// One OpenAI chat turn with a key and a session; returns the status and the answer text.
async fn turn(url: &str, key: Option<&str>, session: &str, text: &str) -> (u16, String) {
    let mut rb = client()
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({
        "model": "brunix", "session_id": session,
        "messages": [{"role": "user", "content": text}]}));
    if let Some(key) = key {
        rb = rb.bearer_auth(key);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap_or_default();
    (
        status,
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Alice's secret under session "team-standup" reached Bob's prompt when Bob used the
/// same session id, and Bob's turn was saved into her session.
#[tokio::test]
async fn a_session_id_under_another_key_is_another_conversation() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec![ALICE.into(), BOB.into()];
    })
    .await;
    let url = gw.url("");
    let url = url.trim_end_matches('/');
    up.push(Reply::tokens(&["Noted."]));
    let (status, _) = turn(
        url,
        Some(ALICE),
        "team-standup",
        "The launch code is SWORDFISH-42.",
    )
    .await;
    assert_eq!(status, 200);
    up.push(Reply::tokens(&["Nothing yet."]));
    let (status, _) = turn(url, Some(BOB), "team-standup", "What did I say before?").await;
    assert_eq!(status, 200);
    let bob = prompt_text(&up.last_request());
    assert!(
        !bob.contains("SWORDFISH"),
        "Bob's prompt held Alice's turn:\n{bob}"
    );
    assert!(!bob.contains("Noted."));

    up.push(Reply::tokens(&["You told me the launch code."]));
    let (status, _) = turn(url, Some(ALICE), "team-standup", "What did I tell you?").await;
    assert_eq!(status, 200);
    let alice = prompt_text(&up.last_request());
    assert!(alice.contains("SWORDFISH-42"), "her own history: {alice}");
    assert!(
        !alice.contains("What did I say before?"),
        "Bob's turn was not saved into her session:\n{alice}"
    );
}

/// Without keys every caller shares one namespace (docs/security.md says so).
#[tokio::test]
async fn without_keys_one_namespace_is_shared() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let url = gw.url("");
    let url = url.trim_end_matches('/');
    up.push(Reply::tokens(&["Noted."]));
    assert_eq!(turn(url, None, "shared", "Remember BLUE-7.").await.0, 200);
    up.push(Reply::tokens(&["BLUE-7."]));
    assert_eq!(turn(url, None, "shared", "What was it?").await.0, 200);
    assert!(prompt_text(&up.last_request()).contains("BLUE-7"));
}

/// Two gateway processes share sessions through one real Redis: turns of one session sent
/// to them alternately, the next one sent while the earlier one still streams, reach the
/// upstream in order, each with every earlier turn; and the same id under another key is
/// another conversation there too.
#[tokio::test]
async fn replicas_on_redis_take_turns_in_order_and_keep_callers_apart() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let tweak = |s: &mut assist_gateway::config::Settings| {
        s.server.api_keys = vec![ALICE.into(), BOB.into()];
        s.sessions.backend = SessionBackend::Redis;
        s.sessions.redis_url = Some(redis.url());
    };
    let a = Spawned::start(&up, Provider::Ollama, tweak).await;
    let b = Spawned::start(&up, Provider::Ollama, tweak).await;
    let slow = |answer: &str| Reply::Tokens {
        tokens: vec![answer.to_string(), " (slowly)".into()],
        delay: Duration::from_millis(300),
        finish: "stop",
    };
    let replicas = [a.url(""), b.url("")];
    let mut pending = Vec::new();
    for n in 0..4 {
        up.push(slow(&format!("answer-{n}")));
        let url = replicas[n % 2].clone();
        pending.push(tokio::spawn(async move {
            turn(&url, Some(ALICE), "alternating", &format!("question-{n}")).await
        }));
        // The next turn arrives while this one still streams.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    for p in pending {
        assert_eq!(p.await.unwrap().0, 200);
    }
    let prompts: Vec<String> = up.requests().iter().map(prompt_text).collect();
    assert_eq!(prompts.len(), 4);
    for (n, prompt) in prompts.iter().enumerate() {
        assert!(
            prompt.contains(&format!("question-{n}")),
            "turn {n} out of order: {prompt}"
        );
        for earlier in 0..n {
            assert!(
                prompt.contains(&format!("question-{earlier}"))
                    && prompt.contains(&format!("answer-{earlier} (slowly)")),
                "turn {n} lacks turn {earlier}:\n{prompt}"
            );
        }
    }
    up.push(Reply::tokens(&["Hello Bob."]));
    assert_eq!(
        turn(&replicas[1], Some(BOB), "alternating", "hi").await.0,
        200
    );
    assert!(!prompt_text(&up.last_request()).contains("question-0"));
}

/// A 1 MB question of distinct words spent minutes in the search (repeats found by
/// scanning a list); it is searched and answered in bounded time (refused: it is far over
/// the model's window, and nothing is sent upstream), and the gateway answers others
/// meanwhile.
#[tokio::test]
async fn a_huge_question_is_answered_in_bounded_time() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let words: Vec<String> = (0..125_000).map(|i| format!("w{i:x}q")).collect();
    let question = format!("{} how do I register an endpoint?", words.join(" "));
    assert!(question.len() > 1_000_000 - 200_000);
    let started = std::time::Instant::now();
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "messages": [{"role": "user", "content": question}]}),
    )
    .await;
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    assert!(text.contains("context_length_exceeded"), "{text}");
    assert!(up.requests().iter().all(|r| r.path != "/api/chat"));
    let (status, _) = get_json(&gw.url("/health")).await;
    assert_eq!(status, 200);
}

/// Texts shaped to make the turn's reading quadratic each took minutes of CPU, under the
/// limits (one message of at most 1M characters, an 8 MiB body): a message of many fenced
/// blocks before much whitespace (read as editor context, before any limit is checked),
/// of many pronouns after a noun, of many quoted pieces beside a large open file, and a
/// completion of many distinct words around the cursor. Each is answered in the client's
/// time (its 20 s), with no server error.
///
/// On a worker pool: the gateway runs in this test's runtime, and a handler that does not
/// yield would keep the client's timeout from firing on one thread. A regression would
/// still keep the runtime from shutting down, so a watchdog ends the test run after two
/// minutes, saying why, rather than let it hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn texts_shaped_to_be_slow_are_read_in_bounded_time() {
    use base64::Engine;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watched = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(120));
        if !watched.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("texts_shaped_to_be_slow_are_read_in_bounded_time: no answer in 120 s");
            std::process::exit(101);
        }
    });
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.completion.template = "qwen".into();
    })
    .await;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let blocks = format!(
        "{}{}",
        "```x p\n```\n".repeat(250_000),
        " ".repeat(3_500_000)
    );
    let open_file = format!(
        "This is the currently open file:{}{}",
        " ".repeat(3_000_000),
        "```x p\n```\n".repeat(250_000)
    );
    let pronouns = format!("giraffe{}", " it".repeat(330_000));
    let quotes = "`zq7` ".repeat(160_000);
    let large_file = json!({"editor_content": b64(&"a".repeat(5_000_000))}).to_string();
    let chats = [
        json!({"model": "brunix", "messages": [{"role": "user", "content": blocks}]}),
        json!({"model": "brunix", "messages": [{"role": "user", "content": open_file}]}),
        json!({"model": "brunix", "messages": [{"role": "user", "content": pronouns}],
            "user": json!({"editor_content": b64("x = 1")}).to_string()}),
        json!({"model": "brunix", "messages": [{"role": "user", "content": quotes}],
            "user": large_file}),
    ];
    for (n, body) in chats.into_iter().enumerate() {
        let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
        assert!(
            status < 500,
            "chat {n}: {status} {}",
            &text[..text.len().min(300)]
        );
    }
    let words = |from: usize, n: usize| {
        (from..from + n)
            .map(|i| format!("w{i:x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (status, _, text) = post(
        &gw.url("/v1/completions"),
        json!({"model": "brunix", "max_tokens": 8,
            "prompt": format!("{}\n{}\n    ", words(0, 70_000), words(70_000, 70_000)),
            "suffix": format!("{}\n", words(140_000, 130_000))}),
    )
    .await;
    assert!(
        status < 500,
        "completion: {status} {}",
        &text[..text.len().min(300)]
    );
    let (status, _) = get_json(&gw.url("/health")).await;
    assert_eq!(status, 200);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// A page of another site, even sending text/plain (no CORS preflight), was answered by a
/// gateway without keys; and so was a request naming another host (DNS rebinding).
#[tokio::test]
async fn web_pages_of_other_sites_and_other_host_names_are_refused() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.allowed_hosts = vec!["gateway.internal".into()];
    })
    .await;
    let body =
        json!({"model": "brunix", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let send = |path: &str, headers: Vec<(&'static str, &'static str)>| {
        let mut rb = client()
            .post(gw.url(path))
            .header("content-type", "text/plain")
            .body(body.clone());
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        rb.send()
    };
    let r = send(
        "/v1/chat/completions",
        vec![("origin", "http://evil.example")],
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "origin_not_allowed", "{v}");
    let r = send("/api/chat", vec![("origin", "http://evil.example")])
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("server.cors_origins"),
        "{v}"
    );
    let r = send("/v1/chat/completions", vec![("host", "evil.example")])
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "host_not_allowed", "{v}");
    assert_eq!(up.requests().len(), 0, "nothing reached the upstream");

    // curl -d (a form content type, no Origin), a page of this machine, a listed host.
    for headers in [
        vec![("content-type", "application/x-www-form-urlencoded")],
        vec![("origin", "http://localhost:3000")],
        vec![("host", "gateway.internal:8080")],
    ] {
        let r = send("/v1/chat/completions", headers.clone()).await.unwrap();
        assert_eq!(r.status(), 200, "{headers:?}");
    }
}

/// A `session_id` of 8 MiB was kept in the lock map and stored with every turn.
#[tokio::test]
async fn session_ids_are_bounded_and_plain() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    for id in [
        "x".repeat(257),
        "has space".into(),
        "a/b".into(),
        "naïve".into(),
    ] {
        let (status, _, text) = post(
            &gw.url("/v1/chat/completions"),
            json!({"model": "brunix", "session_id": id, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(status, 400, "{id}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], "session_id", "{v}");
        let (status, _, text) = post(
            &gw.url("/api/chat"),
            json!({"model": "brunix", "session_id": id, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("session_id"), "{text}");
    }
    assert_eq!(up.requests().len(), 0);
    let (status, _, _) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "session_id": "x".repeat(256),
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
}

/// A caller making new sessions without end evicted everyone's (least recently used
/// across all callers); now it evicts its own.
#[tokio::test]
async fn one_caller_cannot_flush_the_others_sessions() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec![ALICE.into(), BOB.into()];
        s.sessions.max_sessions = 20;
        s.sessions.max_sessions_per_caller = 10;
    })
    .await;
    let url = gw.url("");
    let url = url.trim_end_matches('/');
    up.set_default(Reply::tokens(&["ok"]));
    assert_eq!(
        turn(url, Some(ALICE), "mine", "Remember GREEN-3.").await.0,
        200
    );
    for n in 0..40 {
        assert_eq!(
            turn(url, Some(BOB), &format!("flood-{n}"), "x").await.0,
            200
        );
    }
    assert_eq!(turn(url, Some(ALICE), "mine", "What was it?").await.0, 200);
    assert!(
        prompt_text(&up.last_request()).contains("GREEN-3"),
        "Alice's session survived Bob's flood"
    );
}

/// A client that stops reading held its stream slot, its session and the upstream request
/// for ever. Now, past `server.write_timeout_secs`, the stream ends: the upstream request
/// is cancelled, what was streamed is saved, the slot and the session are free again.
#[tokio::test]
async fn a_client_that_stops_reading_lets_go_of_everything() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.server.write_timeout = Duration::from_secs(1);
        s.server.max_streams_per_key = 1;
        // Room in the window for the large partial answer, so the next turn shows it.
        s.assistant.context_tokens = 4_000_000;
    })
    .await;
    // An answer far larger than every buffer between the gateway and the client.
    let piece = "z".repeat(32 * 1024);
    up.push(Reply::Tokens {
        tokens: vec![piece; 400],
        delay: Duration::ZERO,
        finish: "stop",
    });
    let body = json!({"model": "brunix", "stream": true, "session_id": "stalled",
        "messages": [{"role": "user", "content": "Write a lot."}]})
    .to_string();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(gw.addr).await.unwrap();
    stalled
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut head = [0u8; 512];
    let n = stalled.read(&mut head).await.unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    // ... and reads nothing more.
    assert!(
        eventually(15, || up.cancelled() == 1).await,
        "the upstream request was cancelled"
    );
    // The stream slot is free: another stream is served, not refused with 429.
    up.push(Reply::tokens(&["free"]));
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    // The session is free, and holds what was streamed, marked as cut off.
    up.push(Reply::tokens(&["next"]));
    let (status, _, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "session_id": "stalled",
            "messages": [{"role": "user", "content": "And now?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let prompt = prompt_text(&up.last_request());
    assert!(prompt.contains("Write a lot.") && prompt.contains("[answer interrupted]"));
    // And the connection itself was closed: what it still held is read, then its end.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stalled.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the connection of the client that stopped reading was closed"
    );
}

/// Waiting for a session's earlier turn had no bound; it is `sessions.wait_secs`, then a
/// clear 409 in the dialect's shape.
#[tokio::test]
async fn waiting_for_a_busy_session_is_bounded() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.sessions.wait = Duration::from_secs(1);
    })
    .await;
    up.push(Reply::Tokens {
        tokens: vec!["slow ".into(); 6],
        delay: Duration::from_millis(500),
        finish: "stop",
    });
    let first = {
        let url = gw.url("/v1/chat/completions");
        tokio::spawn(async move {
            post(
                &url,
                json!({"model": "brunix", "session_id": "busy",
                    "messages": [{"role": "user", "content": "one"}]}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, headers, text) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": "brunix", "session_id": "busy",
            "messages": [{"role": "user", "content": "two"}]}),
    )
    .await;
    assert_eq!(status, 409, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "session_busy", "{v}");
    assert!(headers.get("retry-after").is_some());
    let (status, _, text) = post(
        &gw.url("/api/chat"),
        json!({"model": "brunix", "session_id": "busy", "stream": false,
            "messages": [{"role": "user", "content": "three"}]}),
    )
    .await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("sessions.wait_secs"), "{text}");
    assert_eq!(first.await.unwrap().0, 200);
}

/// An upstream that numbers a tool call 2^40 asked for terabytes and took the gateway
/// down; now that answer fails as an invalid stream and the gateway goes on.
#[tokio::test]
async fn a_tool_call_index_from_the_upstream_cannot_take_the_gateway_down() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.assistant.passthrough = true;
        // Each answer tried once: a retry would hide the invalid stream behind the next.
        s.llm.retries = 0;
    })
    .await;
    let event = |index: &str| {
        format!(
            "data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"{UPSTREAM_MODEL}\",\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index},\"id\":\"c\",\"type\":\"function\",\"function\":{{\"name\":\"f\",\"arguments\":\"\"}}}}]}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    for index in [(1u64 << 40).to_string(), u64::MAX.to_string()] {
        up.push(Reply::Raw {
            content_type: "text/event-stream",
            body: format!("{}data: [DONE]\n\n", event(&index)),
        });
        let (status, _, text) = post(
            &gw.url("/v1/chat/completions"),
            json!({"model": UPSTREAM_MODEL, "stream": true,
                "messages": [{"role": "user", "content": "call it"}]}),
        )
        .await;
        // Before its first token: an upstream error in the dialect's shape.
        assert_eq!(status, 502, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], "upstream_error", "{v}");
        assert!(text.contains("at most 128"), "{text}");
    }
    assert_eq!(get_json(&gw.url("/health")).await.0, 200);
}

/// Ollama's `num_ctx` and `keep_alive` from any client reached the shared upstream for
/// the assistant's model (forcing reloads, or a window larger than its memory).
#[tokio::test]
async fn clients_cannot_resize_or_reload_the_assistants_model() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.assistant.passthrough = true;
        s.llm.keep_alive = Some("10m".into());
    })
    .await;
    let options = json!({"num_ctx": 1_000_000, "num_gpu": 0, "num_thread": 64, "temperature": 0.2});
    let (status, _, text) = post(
        &gw.url("/api/chat"),
        json!({"model": "brunix", "stream": false, "keep_alive": -1, "options": options,
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let sent = up.last_request().body;
    let window = sent["options"]["num_ctx"].as_u64().unwrap();
    assert!(window <= 4096, "held to the model's window: {sent}");
    assert!(
        sent["options"].get("num_gpu").is_none() && sent["options"].get("num_thread").is_none()
    );
    assert_eq!(sent["options"]["temperature"], 0.2, "sampling options pass");
    assert_eq!(
        sent["keep_alive"], "10m",
        "the configured keep_alive, not the client's"
    );

    // A smaller window is honoured (the prompt is fitted to it); passthrough forwards all.
    let (status, _, _) = post(
        &gw.url("/api/chat"),
        json!({"model": "brunix", "stream": false, "options": {"num_ctx": 1024},
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(up.last_request().body["options"]["num_ctx"], 1024);
    let (status, _, _) = post(
        &gw.url("/api/chat"),
        json!({"model": UPSTREAM_MODEL, "stream": false, "keep_alive": -1, "options": options,
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let sent = up.last_request().body;
    assert_eq!(sent["options"]["num_ctx"], 1_000_000);
    assert_eq!(sent["keep_alive"], -1);
}

/// Embedding requests: at most `server.max_concurrent_embeddings` at once, and one whose
/// client went away stops at its next batch instead of embedding everything.
#[tokio::test]
async fn embedding_requests_are_limited_and_stop_with_their_client() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.embeddings.provider = assist_gateway::config::EmbeddingProvider::Ollama;
        s.embeddings.batch_size = 1;
        s.server.max_concurrent_embeddings = 1;
    })
    .await;
    up.slow_embeddings(Duration::from_millis(100));
    let texts: Vec<String> = (0..100).map(|i| format!("text {i}")).collect();
    let body = json!({"model": "nomic-embed-text", "input": texts});
    let url = gw.url("/v1/embeddings");
    let request = client()
        .post(&url)
        .json(&body)
        .timeout(Duration::from_millis(700))
        .send();
    let (first, second) = tokio::join!(request, async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        post(&url, json!({"model": "nomic-embed-text", "input": "one"})).await
    });
    assert!(first.is_err(), "the first client gave up");
    assert_eq!(second.0, 429, "{}", second.2);
    assert!(second.1.get("retry-after").is_some());
    tokio::time::sleep(Duration::from_millis(800)).await;
    let batches = up
        .requests()
        .iter()
        .filter(|r| r.path == "/api/embed")
        .count();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = up
        .requests()
        .iter()
        .filter(|r| r.path == "/api/embed")
        .count();
    assert!(
        batches < 30,
        "{batches} of 100 batches embedded after the client left"
    );
    assert_eq!(batches, later, "no more batches after the client left");
    let (status, _, text) = post(&url, json!({"model": "nomic-embed-text", "input": "one"})).await;
    assert_eq!(status, 200, "the slot was given back: {text}");
}

/// A model name a client made up became a metric label on responses other than 400/404
/// (here a 429 of the stream limit), and a log line carried it whole.
#[tokio::test]
async fn made_up_model_names_are_no_metric_labels() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Ollama, |s| {
        s.assistant.passthrough = true;
        s.server.max_streams_per_key = 1;
    })
    .await;
    up.push(Reply::Tokens {
        tokens: vec!["slow".into(); 4],
        delay: Duration::from_millis(300),
        finish: "stop",
    });
    let holder = {
        let url = gw.url("/v1/chat/completions");
        tokio::spawn(async move {
            post(
                &url,
                json!({"model": "brunix", "stream": true,
                    "messages": [{"role": "user", "content": "hold"}]}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let made_up = format!("made-up-{}", "m".repeat(5000));
    let (status, _, _) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": made_up, "stream": true, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(status, 429);
    holder.await.unwrap();
    let (status, _, _) = post(
        &gw.url("/v1/chat/completions"),
        json!({"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let metrics = client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!metrics.contains("made-up"), "a made-up name is a label");
    assert!(
        metrics.contains("model=\"other\",status=\"429\""),
        "counted as other"
    );
    assert!(
        metrics.contains(&format!("model=\"{UPSTREAM_MODEL}\"")),
        "a model the upstream lists keeps its name"
    );
    let log = gw.stop();
    let longest = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["fields"]["model"].as_str().map(|m| m.chars().count()))
        .max()
        .unwrap();
    assert!(
        longest <= 65,
        "a log line shows at most 64 characters of it: {longest}"
    );
}

//! The gRPC service's transport, as clients and proxies meet it: health that follows
//! readiness, reflection, HTTP/2 only and TLS with the HTTP certificate, requests logged
//! and measured without their content, keys and limits checked before the message is
//! read, and other content types refused. Helpers shared with `grpc.rs`.

use std::time::Duration;

use assist_gateway::config::Provider;
use assist_gateway::grpc::pb::assistance_engine_client::AssistanceEngineClient;
use assist_gateway::grpc::pb::{AgentRequest, AgentResponse};
use futures::StreamExt;
use serde_json::Value;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::grpc::*;
use crate::support::*;

#[tokio::test]
async fn health_follows_readiness_and_reflection_lists_the_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let mut health = HealthClient::new(c_channel(&gw).await);
    for service in ["", "brunix.AssistanceEngine"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status(), ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "other.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    // Watch sends the current status at once.
    let mut watch = health
        .watch(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);

    // With the upstream down, /ready is 503 and health NOT_SERVING.
    let down = Gateway::start(&up, Provider::Ollama, |s| {
        s.llm.base_url = "http://127.0.0.1:9".into();
    })
    .await;
    let (status, _) = get_json(&down.url("/ready")).await;
    assert_eq!(status, 503);
    let r = HealthClient::new(c_channel(&down).await)
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status(), ServingStatus::NotServing);

    // Reflection (v1 and v1alpha) lists the services.
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let mut reflection = ServerReflectionClient::new(c_channel(&gw).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("{response:?}")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"brunix.AssistanceEngine".to_string())
            && names.contains(&"grpc.health.v1.Health".to_string()),
        "{names:?}"
    );
}

#[tokio::test]
async fn grpc_speaks_http2_only_and_tls_with_the_http_certificate() {
    let up = ScriptedUpstream::start().await;
    up.set_default(Reply::tokens(&["over", " tls"]));
    // Plain: an HTTP/1.1 request (what a web page's fetch sends) gets no answer.
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let addr = gw.grpc_addr.unwrap();
    let r = client()
        .post(format!("http://{addr}/brunix.AssistanceEngine/AskAgent"))
        .header("content-type", "text/plain")
        .body("\0\0\0\0\x04\n\x02hi")
        .send()
        .await;
    assert!(r.is_err(), "HTTP/1.1 answered: {r:?}");
    assert!(up.requests().is_empty());

    let tls = crate::access::self_signed("gateway.test");
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.tls_cert = Some(tls.cert.clone());
        s.server.tls_key = Some(tls.key.clone());
        s.server.allowed_hosts = vec!["gateway.test".into()];
    })
    .await;
    let addr = gw.grpc_addr.unwrap();
    let tls_config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&tls.cert_pem))
        .domain_name("gateway.test");
    let secure = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls_config)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = AssistanceEngineClient::new(secure);
    let messages = ask_stream(&mut c, question("hello", "")).await.unwrap();
    let text: String = messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(text, "over tls");
    // Plain gRPC to the TLS port fails.
    let failed = match channel(addr).await {
        Err(_) => true,
        Ok(plain) => ask_stream(
            &mut AssistanceEngineClient::new(plain),
            question("hello", ""),
        )
        .await
        .is_err(),
    };
    assert!(failed, "plain gRPC answered on the TLS port");
}

#[tokio::test]
async fn grpc_requests_are_logged_and_measured_without_their_content() {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::start(&up, Provider::Ollama, |_| {}).await;
    up.push(Reply::tokens(&["secret ", "answer"]));
    let addr = gw.grpc_addr.expect("the binary serves gRPC");
    let mut c = AssistanceEngineClient::new(channel(addr).await.unwrap());
    let req = AgentRequest {
        selected_text: b64("let confidential = 1;"),
        ..question("what does my-private-question mean?", "sess-1")
    };
    let messages = ask_stream(&mut c, req).await.unwrap();
    assert!(messages.last().unwrap().is_final);
    let (status, body) = get_text(&gw.url("/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        body.lines().any(|l| l.starts_with("assist_requests_total")
            && l.contains("route=\"/brunix.AssistanceEngine/AskAgentStream\"")
            && l.contains("status=\"200\"")),
        "{body}"
    );
    let log = gw.stop();
    let line = log
        .lines()
        .find(|l| l.contains("\"chat request\"") && l.contains("\"grpc\""))
        .unwrap_or_else(|| panic!("{log}"));
    let v: Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["fields"]["outcome"], "completed", "{line}");
    assert_eq!(v["fields"]["deltas"], 2, "{line}");
    for secret in ["my-private-question", "confidential", "secret answer"] {
        assert!(!log.contains(secret), "{secret} logged");
    }
}

/// A call whose message never comes: the request stream stays open.
async fn call_without_message(
    gw: &Gateway,
    key: Option<&str>,
) -> Result<Vec<AgentResponse>, Status> {
    let mut grpc = tonic::client::Grpc::new(c_channel(gw).await);
    grpc.ready().await.unwrap();
    let path =
        axum::http::uri::PathAndQuery::from_static("/brunix.AssistanceEngine/AskAgentStream");
    let codec = tonic_prost::ProstCodec::<AgentRequest, AgentResponse>::default();
    let never = futures::stream::pending::<AgentRequest>();
    all(grpc.streaming(keyed(never, key), path, codec).await).await
}

#[tokio::test]
async fn keys_and_limits_are_checked_before_the_message_is_read_and_bodies_must_arrive() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["k1".into()];
        s.server.body_read_timeout = Duration::from_secs(1);
    })
    .await;
    // Without a key: refused on the headers, while the body is still open.
    let refused = tokio::time::timeout(Duration::from_secs(5), call_without_message(&gw, None))
        .await
        .expect("refused at once, not after reading the message");
    assert_eq!(refused.unwrap_err().code(), Code::Unauthenticated);
    // With the key, a message that never comes ends the call after the body timeout.
    let stalled = tokio::time::timeout(
        Duration::from_secs(15),
        call_without_message(&gw, Some("k1")),
    )
    .await
    .expect("the call ended once the body stopped arriving");
    assert!(stalled.is_err(), "{stalled:?}");
    assert!(up.requests().is_empty());
}

#[tokio::test]
async fn web_pages_and_other_content_types_are_refused() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |_| {}).await;
    let url = format!(
        "http://{}/brunix.AssistanceEngine/AskAgent",
        gw.grpc_addr.unwrap()
    );
    // A gRPC frame: no compression, length 4, AgentRequest{query: "hi"}.
    let frame = b"\0\0\0\0\x04\n\x02hi".to_vec();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let from_page = h2
        .post(&url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("origin", "https://evil.example")
        .body(frame.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        from_page
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap()),
        Some("7"),
        "PERMISSION_DENIED: {from_page:?}"
    );
    let not_grpc = h2
        .post(&url)
        .header("content-type", "text/plain")
        .body(frame)
        .send()
        .await
        .unwrap();
    assert_eq!(not_grpc.status(), 415);
    assert!(up.requests().is_empty(), "nothing reached the upstream");
}

#[tokio::test]
async fn health_checks_share_one_readiness_check_and_watches_end_at_shutdown() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.shutdown_grace = Duration::from_secs(30);
    })
    .await;
    let channel = c_channel(&gw).await;
    let before = up.listings();
    let mut watches = Vec::new();
    for _ in 0..20 {
        let mut health = HealthClient::new(channel.clone());
        let r = health.check(HealthCheckRequest::default()).await.unwrap();
        assert_eq!(r.into_inner().status(), ServingStatus::Serving);
        let mut watch = health
            .watch(HealthCheckRequest::default())
            .await
            .unwrap()
            .into_inner();
        let first = watch.message().await.unwrap().unwrap();
        assert_eq!(first.status(), ServingStatus::Serving);
        watches.push(watch);
    }
    let asked = up.listings() - before;
    assert!(
        (1..=2).contains(&asked),
        "40 health calls asked the upstream {asked} times"
    );
    // Shutdown: each watch hears NOT_SERVING and ends; the server does not wait for them.
    let stopped = std::time::Instant::now();
    let task = gw.shutdown();
    for watch in &mut watches {
        let last = watch.message().await.unwrap().unwrap();
        assert_eq!(last.status(), ServingStatus::NotServing);
        assert!(watch.message().await.unwrap().is_none(), "the watch ended");
    }
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the server stopped without waiting out the 30 s grace")
        .unwrap()
        .unwrap();
    assert!(stopped.elapsed() < Duration::from_secs(10));
}

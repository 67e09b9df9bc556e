//! The window against a real model server: llama.cpp's (llama-cpp-python) with a 2,048-token
//! window and a knowledge base of dense code, which its tokenizer splits into far more
//! tokens than four characters each. The gateway counts the prompt with the server's own
//! tokenizer, so the answer streams instead of the server closing the stream at once.
//!
//! Needs what scripts/test.sh installs (ASSIST_MODEL_PYTHON, ASSIST_MODEL_GGUF).

use std::time::Duration;

use crate::real_model::{recording_proxy, start_model_server, MODEL};
use crate::support::*;
use assist_gateway::config::{EmbeddingProvider, Provider};
use serde_json::{json, Value};

/// Source files of symbol-heavy code, each naming the checksum tables the question asks
/// about.
fn dense_code(dir: &std::path::Path) {
    for f in 0..6 {
        let mut text = format!("// checksum table {f}: crc lookup for frame headers\n");
        for i in 0..90 {
            text.push_str(&format!(
                "t[{i:#04x}]=((c^{i:#x})>>{s})&0x{m:04x};if(t[{i}]!=0){{k[{i}]|=t[{i}]<<{s};}}\n",
                s = (i * 7 + f) % 13,
                m = (i * 2654435761u64 as usize + f) & 0xffff,
            ));
        }
        std::fs::write(dir.join(format!("crc_table_{f}.c")), text).unwrap();
    }
}

async fn count(model_port: u16, text: &str) -> usize {
    let v: Value = client()
        .post(format!(
            "http://127.0.0.1:{model_port}/extras/tokenize/count"
        ))
        .json(&json!({ "input": text }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["count"].as_u64().unwrap() as usize
}

#[tokio::test]
async fn dense_code_knowledge_fits_a_real_2048_token_window() {
    let (Ok(python), Ok(gguf)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: the model server is not installed; run scripts/test.sh");
        return;
    };
    let model = start_model_server(&python, &gguf).await;
    let (proxy, seen) = recording_proxy(format!("http://127.0.0.1:{}", model.port)).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let knowledge = tempfile::tempdir().unwrap();
    dense_code(knowledge.path());
    let (settings, _data) = test_settings(&up, Provider::Openai, false, |s| {
        s.llm.base_url = format!("{proxy}/v1");
        s.llm.model = MODEL.into();
        s.llm.first_byte_timeout = Duration::from_secs(120);
        s.llm.retries = 0;
        s.assistant.context_tokens = 2048;
        s.assistant.answer_reserve_tokens = 256;
        s.embeddings.provider = EmbeddingProvider::None;
    })
    .await;
    ingest_quietly(&settings, knowledge.path()).await;
    let gw = Gateway::with_settings(settings).await;
    let patient = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();

    for (i, stream) in [true, false].into_iter().enumerate() {
        let response = patient
            .post(gw.url("/v1/chat/completions"))
            .json(&json!({"model": "brunix", "stream": stream, "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user",
                    "content": format!("How is the checksum table for frame headers built? ({i})")}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body = response.text().await.unwrap();
        let (text, sources) = if stream {
            let events = sse_events(&body);
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
            let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
            (sse_text(&events), last["sources"].clone())
        } else {
            let v: Value = serde_json::from_str(&body).unwrap();
            (
                v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                v["sources"].clone(),
            )
        };
        assert!(!text.trim().is_empty(), "the model answered: {body}");
        assert!(
            sources.to_string().contains("crc_table_"),
            "the dense code was retrieved: {sources}"
        );
    }

    // The gateway asked the server's own tokenizer.
    let counted = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|b| b.get("input").is_some())
        .count();
    assert!(
        counted >= 2,
        "the prompts were counted by the model server ({counted})"
    );

    // What the model was sent fits its window by its own count, and the old estimate
    // (four characters a token) would have put far more in: it undercounts this code.
    let sent: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|b| b.get("messages").is_some())
        .cloned()
        .collect();
    assert_eq!(sent.len(), 2, "one request per question, none refused");
    for body in sent {
        let prompt: String = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| format!("{}\n", m["content"].as_str().unwrap()))
            .collect();
        assert!(prompt.contains("<knowledge>"));
        let tokens = count(model.port, &prompt).await;
        assert!(tokens + 8 <= 2048, "{tokens} tokens sent");
        let old_estimate = prompt.chars().count().div_ceil(4);
        assert!(
            old_estimate * 10 < tokens * 8,
            "the code is dense: {old_estimate} estimated, {tokens} counted"
        );
    }
}

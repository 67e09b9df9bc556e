//! The editor context: the OpenAI `user` field (a JSON string holding base64 fields),
//! `additional_context` items and continue-style blocks in the last user message.
//!
//! The first byte picks what the rest is:
//! - 0: a `user` string as a client sends it, also read as the user's message;
//! - 1: any JSON value, as the `user` field and as `additional_context`;
//! - else: three texts (split at 0xFF, which UTF-8 never holds) sent base64-encoded in
//!   the `user` field, in one of the four base64 alphabets/paddings and maybe wrapped at
//!   76 columns: each must come back exactly when it is UTF-8, and empty otherwise.
#![no_main]

use assist_gateway::context::EditorContext;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use serde_json::{json, Value};

const FIELDS: [&str; 3] = ["editor_content", "selected_text", "extra_context"];

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        0 => {
            let text = String::from_utf8_lossy(rest);
            let ctx =
                EditorContext::from_request(Some(&Value::String(text.to_string())), None, &text);
            message_blocks_come_from_the_message(&ctx, &text);
        }
        1 => {
            let Ok(value) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let ctx = EditorContext::from_request(Some(&value), Some(&value), "");
            let listed = value.as_array().map_or(0, Vec::len);
            assert!(ctx.items.len() <= listed);
            assert!(ctx
                .items
                .iter()
                .all(|i| !i.content.is_empty() && !i.from_message));
            if let Some(info) = &ctx.user_info {
                assert!(info.is_object());
            }
        }
        how => {
            let texts: Vec<&[u8]> = rest.splitn(3, |&b| b == 0xff).collect();
            let engine = match how % 4 {
                0 => &STANDARD,
                1 => &STANDARD_NO_PAD,
                2 => &URL_SAFE,
                _ => &URL_SAFE_NO_PAD,
            };
            let wrap = how & 0x80 != 0;
            let mut fields = serde_json::Map::new();
            for (field, text) in FIELDS.iter().zip(&texts) {
                let mut encoded = engine.encode(text);
                if wrap {
                    encoded = encoded
                        .as_bytes()
                        .chunks(76)
                        .map(|line| std::str::from_utf8(line).unwrap())
                        .collect::<Vec<_>>()
                        .join("\r\n");
                }
                fields.insert(field.to_string(), Value::String(encoded));
            }
            fields.insert("user_info".into(), json!({"dev_id": 1}));
            let user = Value::String(Value::Object(fields).to_string());
            let ctx = EditorContext::from_user_field(Some(&user));
            let read = [&ctx.editor_content, &ctx.selected_text, &ctx.extra_context];
            for (i, got) in read.iter().enumerate() {
                let want = texts
                    .get(i)
                    .map_or(Some(""), |t| std::str::from_utf8(t).ok());
                assert_eq!(got.as_str(), want.unwrap_or(""), "{}", FIELDS[i]);
            }
            assert_eq!(ctx.user_info, Some(json!({"dev_id": 1})));
        }
    }
});

/// Blocks read from the message are parts of it, each naming its file.
fn message_blocks_come_from_the_message(ctx: &EditorContext, message: &str) {
    for item in ctx.items.iter().filter(|i| i.from_message) {
        assert!(message.contains(&item.content));
        let path = item
            .path
            .as_deref()
            .expect("a block from the message names its file");
        assert!(!path.is_empty() && message.contains(path));
        if let Some((a, b)) = item.lines {
            assert!(message.contains(&a.to_string()) && message.contains(&b.to_string()));
        }
    }
    if ctx.file_in_message {
        assert!(message.contains(&ctx.editor_content));
    }
}

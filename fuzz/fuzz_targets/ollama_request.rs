//! `POST /api/chat` and `POST /api/generate`: any body bytes.
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::ollama_request(data));

//! `POST /v1/chat/completions` and `POST /v1/completions`: any body bytes.
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::openai_request(data));

//! `POST /v1/messages` (Anthropic): any body bytes.
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::anthropic_request(data));

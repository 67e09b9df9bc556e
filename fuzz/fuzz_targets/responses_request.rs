//! `POST /v1/responses`: any body bytes.
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::responses_request(data));

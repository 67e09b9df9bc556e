//! The editor context: the `user` field, `additional_context` items and continue-style
//! blocks in the last user message (see `user_field` in `../targets.rs`).
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::user_field(data));

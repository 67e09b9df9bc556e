//! `POST /api/chat` and `POST /api/generate`: any body bytes.
#![no_main]

mod common;

use assist_gateway::http::fuzzing::ChatRoute;

libfuzzer_sys::fuzz_target!(|body: &[u8]| {
    common::check(ChatRoute::OllamaChat, body);
    common::check(ChatRoute::OllamaGenerate, body);
});

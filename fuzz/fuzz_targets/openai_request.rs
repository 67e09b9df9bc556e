//! `POST /v1/chat/completions` and `POST /v1/completions`: any body bytes.
#![no_main]

mod common;

use assist_gateway::http::fuzzing::ChatRoute;

libfuzzer_sys::fuzz_target!(|body: &[u8]| {
    common::check(ChatRoute::OpenAiChat, body);
    common::check(ChatRoute::OpenAiCompletions, body);
});

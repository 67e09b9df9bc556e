//! Counting prompt tokens with the upstream's own tokenizer, where it has one:
//! llama-cpp-python's server (`POST /extras/tokenize/count`), llama.cpp's server and vLLM
//! (`POST /tokenize`). The endpoint is found once by asking; an upstream with none (Ollama,
//! OpenAI) is asked again only after a while, and the pipeline estimates meanwhile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Value};

use super::http::Upstream;

/// Counts the tokens of a text as the upstream model will see it (without its chat
/// template); `None` when it cannot tell now.
#[async_trait]
pub trait TokenCounter: Send + Sync {
    async fn count(&self, text: &str) -> Option<usize>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    /// llama-cpp-python: `{"input": text}` → `{"count": n}`.
    ExtrasCount,
    /// llama.cpp (`content`) and vLLM (`model`, `prompt`): → `{"tokens": [..]}`, vLLM
    /// also `{"count": n}`.
    Tokenize,
}

enum Known {
    Unknown,
    Found(Endpoint),
    /// None answered; asked again after `RETRY_AFTER`.
    Missing(Instant),
}

/// How long an upstream without a tokenize endpoint is trusted to still have none.
const RETRY_AFTER: Duration = Duration::from_secs(600);
/// Longest wait for a count: past it the prompt is estimated instead.
const WAIT: Duration = Duration::from_secs(3);
/// Counts kept, by text (a repeated question with the same knowledge is counted once).
const CACHE_ENTRIES: usize = 512;

/// The tokenizer of an OpenAI-compatible upstream, at its root (the base URL without
/// `/v1`).
pub struct UpstreamTokenizer {
    up: Upstream,
    model: String,
    known: Mutex<Known>,
    cache: Mutex<HashMap<u64, usize>>,
}

impl UpstreamTokenizer {
    pub(crate) fn new(up: Upstream, model: &str) -> Self {
        Self {
            up,
            model: model.to_string(),
            known: Mutex::new(Known::Unknown),
            cache: Mutex::default(),
        }
    }

    /// The root of an OpenAI-compatible base URL (`http://h:8080/v1` → `http://h:8080`).
    pub fn root_of(base_url: &str) -> &str {
        let trimmed = base_url.trim_end_matches('/');
        trimmed.strip_suffix("/v1").unwrap_or(trimmed)
    }

    async fn ask(&self, endpoint: Endpoint, text: &str) -> Result<usize, Option<u16>> {
        let (path, body) = match endpoint {
            Endpoint::ExtrasCount => ("/extras/tokenize/count", json!({ "input": text })),
            Endpoint::Tokenize => (
                "/tokenize",
                json!({ "content": text, "prompt": text, "model": self.model,
                        "add_special": false, "add_special_tokens": false }),
            ),
        };
        let sent = tokio::time::timeout(WAIT, self.up.send(self.up.post_json(path, &body))).await;
        let response = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return Err(match e.kind {
                    super::UpstreamErrorKind::Status(s) => Some(s),
                    _ => None,
                });
            }
            Err(_) => return Err(None),
        };
        let v: Value = match tokio::time::timeout(WAIT, response.json()).await {
            Ok(Ok(v)) => v,
            _ => return Err(None),
        };
        v.get("count")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .or_else(|| v.get("tokens").and_then(Value::as_array).map(Vec::len))
            .ok_or(Some(200))
    }

    fn remember(&self, key: u64, count: usize) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, count);
    }
}

fn key(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

#[async_trait]
impl TokenCounter for UpstreamTokenizer {
    async fn count(&self, text: &str) -> Option<usize> {
        let k = key(text);
        if let Some(n) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&k) {
            return Some(*n);
        }
        let (candidates, found): (Vec<Endpoint>, bool) = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            match *known {
                Known::Found(e) => (vec![e], true),
                Known::Missing(at) if at.elapsed() < RETRY_AFTER => return None,
                _ => (vec![Endpoint::ExtrasCount, Endpoint::Tokenize], false),
            }
        };
        let mut all_refused = true;
        for endpoint in candidates {
            match self.ask(endpoint, text).await {
                Ok(n) => {
                    *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Known::Found(endpoint);
                    self.remember(k, n);
                    return Some(n);
                }
                // No such route (or not this body shape): try the next.
                Err(Some(_)) => {}
                // Down or slow: not a reason to think it has no tokenizer.
                Err(None) => all_refused = false,
            }
        }
        // An endpoint that worked before and failed now is not taken as gone.
        if all_refused && !found {
            tracing::info!(
                upstream = self.up.shown(),
                "the upstream has no tokenize endpoint: prompt sizes are estimated"
            );
            *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Known::Missing(Instant::now());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_drops_v1() {
        assert_eq!(
            UpstreamTokenizer::root_of("http://h:8080/v1"),
            "http://h:8080"
        );
        assert_eq!(
            UpstreamTokenizer::root_of("http://h:8080/v1/"),
            "http://h:8080"
        );
        assert_eq!(
            UpstreamTokenizer::root_of("http://h/openai"),
            "http://h/openai"
        );
    }
}

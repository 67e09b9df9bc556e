//! Counting prompt tokens with the upstream's own tokenizer, where it has one:
//! llama-cpp-python's server (`POST /extras/tokenize/count`), llama.cpp's server and vLLM
//! (`POST /tokenize`). The endpoint is found once by asking; an upstream with none (Ollama,
//! OpenAI) is asked again only after a while, and the pipeline estimates meanwhile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Value};

use super::http::{Upstream, MAX_SMALL_REPLY};

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
    cache: Mutex<HashMap<[u8; 32], usize>>,
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
                    // No such route, or not this body shape: not this endpoint.
                    super::UpstreamErrorKind::Status(s @ (400 | 404 | 405 | 422)) => Some(s),
                    // Loading (503), busy (429), down: asked again next time.
                    _ => None,
                });
            }
            Err(_) => return Err(None),
        };
        // A count is a few bytes, a token list a few per token: an upstream sending more
        // is not read on (parsing hundreds of megabytes took the CPU for most a minute).
        let v = match self.up.json(response, MAX_SMALL_REPLY, WAIT).await {
            Ok(v) => v,
            Err(_) => return Err(None),
        };
        v.get("count")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .or_else(|| v.get("tokens").and_then(Value::as_array).map(Vec::len))
            .ok_or(Some(200))
    }

    fn remember(&self, key: [u8; 32], count: usize) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, count);
    }
}

/// A text's cache key: its SHA-256 (no two prompts share a count by accident or design).
fn key(text: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).into()
}

#[async_trait]
impl TokenCounter for UpstreamTokenizer {
    async fn count(&self, text: &str) -> Option<usize> {
        // An upstream known to have no tokenizer costs no hashing of the prompt.
        let known = match *self.known.lock().unwrap_or_else(|e| e.into_inner()) {
            Known::Found(e) => Some(e),
            Known::Missing(at) if at.elapsed() < RETRY_AFTER => return None,
            _ => None,
        };
        let k = key(text);
        if let Some(n) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&k) {
            return Some(*n);
        }
        let endpoint = match known {
            Some(e) => e,
            None => self.discover().await?,
        };
        let n = self.ask(endpoint, text).await.ok()?;
        self.remember(k, n);
        Some(n)
    }
}

impl UpstreamTokenizer {
    /// Finds the tokenize endpoint with a fixed text (a prompt is sent only to an
    /// endpoint known to count it). `None` when there is none (remembered) or the upstream
    /// did not answer (asked again next time).
    async fn discover(&self) -> Option<Endpoint> {
        let mut all_refused = true;
        for endpoint in [Endpoint::ExtrasCount, Endpoint::Tokenize] {
            match self.ask(endpoint, "hello").await {
                Ok(_) => {
                    *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Known::Found(endpoint);
                    return Some(endpoint);
                }
                Err(Some(_)) => {}
                Err(None) => all_refused = false,
            }
        }
        if all_refused {
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

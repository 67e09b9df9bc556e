//! Request bodies: read within the size and time limits the settings give, parsed as one
//! JSON object, every failure a 400 / 408 / 413 naming the field at fault, in the route's
//! dialect (`Json` is the extractor the handlers take).

use std::marker::PhantomData;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::dialect::{ApiError, Dialect};
use super::AppState;
use crate::config::ServerSettings;
use crate::error::GatewayError;

/// A JSON request body of type `T`, parsed with the limits of `server.*`; a body that
/// cannot be read or parsed is refused with an error in dialect `D`'s shape.
pub struct Json<T, D>(pub T, pub PhantomData<D>);

impl<T, D> FromRequest<AppState> for Json<T, D>
where
    T: DeserializeOwned,
    D: Dialect,
{
    type Rejection = ApiError<D>;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let bytes = read(&state.settings.server, req.into_body()).await?;
        Ok(Self(parse_json(&bytes)?, PhantomData))
    }
}

/// Reads a body, within `server.max_body_bytes` and `server.body_read_timeout_secs`.
pub async fn read(server: &ServerSettings, body: Body) -> Result<Bytes, GatewayError> {
    read_within(server.max_body_bytes, server.body_read_timeout, body).await
}

/// Reads a body of at most `limit` bytes, arriving whole within `wait`.
pub async fn read_within(
    limit: usize,
    wait: std::time::Duration,
    body: Body,
) -> Result<Bytes, GatewayError> {
    let read = axum::body::to_bytes(body, limit);
    tokio::time::timeout(wait, read)
        .await
        .map_err(|_| GatewayError::request_timeout(wait.as_secs()))?
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                GatewayError::payload_too_large(limit)
            } else {
                GatewayError::invalid("body", format!("could not read the request body: {e}"))
            }
        })
}

/// Most JSON values a request body may hold (counted as the commas and the openings of
/// arrays and objects outside strings). Each is 32 bytes or more once read, and some
/// fields are read as JSON trees: a body of 8 MiB of `0,` (four million values) grew the
/// gateway by 600 MB. Far above any real request: a long agent conversation with its
/// tools' schemas holds tens of thousands.
pub const MAX_JSON_VALUES: usize = 250_000;

/// A body of at most `MAX_JSON_VALUES` values; more is 413 (the message names the limit).
pub fn check_values(bytes: &[u8]) -> Result<(), GatewayError> {
    if json_values(bytes, MAX_JSON_VALUES) > MAX_JSON_VALUES {
        return Err(
            GatewayError::payload_too_large(bytes.len()).with_message(format!(
                "the request body holds more than {MAX_JSON_VALUES} JSON values; send fewer"
            )),
        );
    }
    Ok(())
}

/// The values in `bytes`, counted up to `max + 1`: commas, `[` and `{` outside strings
/// (a string's text is skipped to its closing quote, escapes included).
fn json_values(bytes: &[u8], max: usize) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                // To the closing quote (or the end): an escape skips the byte after its
                // backslash.
                loop {
                    let Some(at) = memchr::memchr2(b'"', b'\\', &bytes[i..]) else {
                        i = bytes.len();
                        break;
                    };
                    i += at + 1;
                    if bytes[i - 1] == b'"' {
                        break;
                    }
                    i = (i + 1).min(bytes.len());
                }
                continue;
            }
            b',' | b'[' | b'{' => {
                n += 1;
                if n > max {
                    return n;
                }
            }
            _ => {}
        }
        i += 1;
    }
    n
}

/// One JSON object of type `T`, and nothing after it. Errors name the field.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, GatewayError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(GatewayError::invalid(
            "body",
            "the request body is empty; send a JSON object",
        ));
    }
    // JSON is UTF-8 (RFC 8259); serde_json checks only the strings it keeps, so bytes in an
    // ignored field would otherwise pass unseen.
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(GatewayError::invalid(
            "body",
            format!(
                "the request body is not valid JSON: not UTF-8 at byte {}",
                e.valid_up_to()
            ),
        ));
    }
    check_values(bytes)?;
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{')
        && serde_json::from_slice::<serde_json::Value>(bytes).is_ok()
    {
        return Err(GatewayError::invalid(
            "body",
            "the request body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // Read as it is; only a body that fails is read again, tracking the path to the
    // field that failed for the message (the tracking costs a third of the reading).
    let value = match T::deserialize(&mut de) {
        Ok(value) => value,
        // Not JSON at all: the path would not be in the message, nothing to read again.
        Err(e) if e.is_syntax() || e.is_eof() => {
            return Err(GatewayError::invalid(
                "body",
                format!("the request body is not valid JSON: {e}"),
            ))
        }
        Err(first) => return Err(why_not::<T>(bytes, first)),
    };
    // Only whitespace may follow the object: `{…} garbage` or two objects is not a request.
    de.end().map_err(|e| {
        GatewayError::invalid("body", format!("the request body is not valid JSON: {e}"))
    })?;
    Ok(value)
}

/// Why `bytes` are not a `T`: where and what, from a second reading that tracks its path
/// (the `first` reading's error if that one found none).
fn why_not<T: DeserializeOwned>(bytes: &[u8], first: serde_json::Error) -> GatewayError {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(_) => GatewayError::invalid("body", format!("invalid request: {first}")),
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.inner();
            if inner.is_syntax() || inner.is_eof() {
                GatewayError::invalid(
                    "body",
                    format!("the request body is not valid JSON: {inner}"),
                )
            } else if path == "." {
                GatewayError::invalid("body", format!("invalid request: {inner}"))
            } else {
                GatewayError::invalid(path.clone(), format!("invalid value for '{path}': {inner}"))
            }
        }
    }
}

/// A string or a list of strings (OpenAI `stop`, embedding `input`).
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct T {
        messages: Vec<M>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct M {
        role: String,
    }

    #[test]
    fn values_are_counted_outside_strings() {
        assert_eq!(json_values(br#"{"a":[1,2,3],"b":{"c":"x,[{"}}"#, 99), 6);
        // An escaped quote does not end a string; a string left open ends the count.
        assert_eq!(json_values(br#"{"a":"q\",[,","b":[1,2]}"#, 99), 4);
        assert_eq!(json_values(br#"{"a":"\\",[1]}"#, 99), 3);
        assert_eq!(json_values(br#"{"a":"open,[,{"#, 99), 1);
        assert_eq!(json_values(b"[\\", 99), 1);
        assert_eq!(json_values(b"\"\\", 99), 0);
        // Counted no further than one past the limit.
        assert_eq!(json_values(b"[0,0,0,0,0,0]", 2), 3);
    }

    /// Four million values in an 8 MiB body (each read as a 32-byte tree node or more)
    /// are refused before they are read; a body of long strings is not.
    #[test]
    fn a_body_of_too_many_values_is_413() {
        let many = format!(r#"{{"user":[{}0]}}"#, "0,".repeat(MAX_JSON_VALUES));
        let e = parse_json::<serde_json::Value>(many.as_bytes()).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.message.contains("250000 JSON values"), "{}", e.message);
        let long = format!(
            r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
            "a,[".repeat(MAX_JSON_VALUES)
        );
        assert!(parse_json::<serde_json::Value>(long.as_bytes()).is_ok());
    }

    #[test]
    fn json_errors_name_the_field() {
        let e = parse_json::<T>(br#"{"messages":[{"role":1}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        assert!(e.message.contains("messages[0].role"), "{}", e.message);
        let e = parse_json::<T>(b"{nope").unwrap_err();
        assert!(e.message.contains("not valid JSON"));
        let e = parse_json::<T>(b"{}").unwrap_err();
        assert!(e.message.contains("messages"), "{}", e.message);
        let e = parse_json::<T>(b"").unwrap_err();
        assert!(e.message.contains("empty"));
    }

    /// Found by the `openai_request` fuzz target: a valid object followed by anything
    /// else was accepted as if the rest were not there.
    #[test]
    fn nothing_but_whitespace_may_follow_the_object() {
        for body in [
            &br#"{"messages":[{"role":"user"}]} {"messages":[]}"#[..],
            br#"{"messages":[{"role":"user"}]}}"#,
            br#"{"messages":[{"role":"user"}]}x"#,
        ] {
            let e = parse_json::<T>(body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("body"));
            assert!(e.message.contains("trailing characters"), "{}", e.message);
        }
        let ok = parse_json::<T>(b" {\"messages\":[{\"role\":\"user\"}]} \r\n\t").unwrap();
        assert_eq!(ok.messages.len(), 1);
    }

    /// Found by both request fuzz targets: invalid UTF-8 in a field the gateway ignores
    /// (an unknown key or its value) was accepted; in a field it reads it was refused.
    #[test]
    fn a_body_that_is_not_utf8_is_refused_wherever_the_bytes_are() {
        for body in [
            &b"{\"messages\":[{\"role\":\"user\",\"coltent\":\"W\xa1y\"}]}"[..],
            b"{\"messages\":[{\"role\":\"user\",\"argument\x8b\":1}]}",
            b"{\"messages\":[{\"role\":\"us\xffer\"}]}",
        ] {
            let e = parse_json::<T>(body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("body"));
            assert!(e.message.contains("not UTF-8 at byte"), "{}", e.message);
        }
    }
}

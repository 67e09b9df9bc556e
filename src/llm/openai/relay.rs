//! Same-dialect passthrough ([`Relay`]): an OpenAI-compatible upstream's events go to an
//! OpenAI client as they came. Each event is scanned once for the keys that may hold
//! what the gateway must know (`error`, a non-null `usage`, `tool_calls`,
//! `function_call`, a non-null `finish_reason`); only an event with one of them is read
//! (by the same reader as any other stream, so errors, finish, usage and the tool-call
//! bound are what they always are). The rest, nearly every event of an answer, is framed
//! again without being parsed.
//!
//! A key is found as its name in quotes followed by a colon: inside a JSON string every
//! quote is escaped, so `"usage"` there is either a whole string value (never followed by
//! a colon) or not there at all.

use std::sync::LazyLock;

use aho_corasick::AhoCorasick;

use super::super::Relay;

/// The keys a relayed event is scanned for, in [`KEYS`]' order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Error,
    Usage,
    ToolCalls,
    FunctionCall,
    FinishReason,
    Content,
    Text,
    Choices,
}

const KEYS: [(&str, Key); 8] = [
    ("\"error\"", Key::Error),
    ("\"usage\"", Key::Usage),
    ("\"tool_calls\"", Key::ToolCalls),
    ("\"function_call\"", Key::FunctionCall),
    ("\"finish_reason\"", Key::FinishReason),
    ("\"content\"", Key::Content),
    ("\"text\"", Key::Text),
    ("\"choices\"", Key::Choices),
];

static SCANNER: LazyLock<AhoCorasick> = LazyLock::new(|| {
    // The patterns are a handful of short literals: building cannot fail.
    AhoCorasick::new(KEYS.map(|(pattern, _)| pattern)).unwrap_or_else(|_| unreachable!())
});

/// What one scan of an event found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scanned {
    /// It may hold an error, usage, a tool call or the finish: read it.
    pub(super) read: bool,
    /// Its delta (or completion text) is not empty.
    pub(super) content: bool,
    /// It has no choice (`choices` missing or `[]`): the usage event.
    pub(super) no_choice: bool,
}

/// Scans one event's data.
pub(super) fn scan(data: &[u8]) -> Scanned {
    let mut found = Scanned {
        // Anything but an object is not an OpenAI event: the reader says why.
        read: data.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{'),
        content: false,
        no_choice: true,
    };
    for m in SCANNER.find_iter(data) {
        let Some(value) = value_after(data, m.end()) else {
            // Not followed by a colon: a string value, not a key.
            continue;
        };
        let null = value.starts_with(b"null");
        match KEYS[m.pattern().as_usize()].1 {
            Key::Error | Key::Usage | Key::ToolCalls | Key::FunctionCall | Key::FinishReason => {
                found.read |= !null;
            }
            Key::Content | Key::Text => {
                found.content |= value.first() == Some(&b'"') && value.get(1) != Some(&b'"');
            }
            Key::Choices => found.no_choice = empty_array(value),
        }
    }
    found
}

/// The bytes of a key's value: past the colon that follows the key (and whitespace);
/// `None` when no colon follows.
fn value_after(data: &[u8], end: usize) -> Option<&[u8]> {
    let rest = trim_start(&data[end..]);
    let rest = rest.strip_prefix(b":")?;
    Some(trim_start(rest))
}

fn trim_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    &bytes[skip..]
}

/// Whether a value is `[]` (whitespace allowed inside).
fn empty_array(value: &[u8]) -> bool {
    value
        .strip_prefix(b"[")
        .is_some_and(|rest| trim_start(rest).starts_with(b"]"))
}

/// Whether an event goes on to the client: all do, but the usage event only when the
/// client asked for it.
pub(super) fn passed_on(scanned: &Scanned, relay: Relay) -> bool {
    relay.usage || !scanned.no_choice
}

/// Appends an event's data as the client takes it: one `data:` line per line of it, then
/// the blank line that ends it.
pub(super) fn frame(out: &mut Vec<u8>, data: &str) {
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_event_goes_on_unread() {
        let event = br#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        assert_eq!(
            scan(event),
            Scanned {
                read: false,
                content: true,
                no_choice: false
            }
        );
    }

    #[test]
    fn the_role_event_has_no_content() {
        // llama.cpp's server, Python's separators.
        let role = br#"{"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "finish_reason": null}]}"#;
        let empty = br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        for event in [&role[..], &empty[..]] {
            let scanned = scan(event);
            assert!(!scanned.read && !scanned.content && !scanned.no_choice);
        }
    }

    #[test]
    fn what_the_gateway_must_know_is_read() {
        for event in [
            &br#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#[..],
            br#"{"choices": [{"delta": {}, "finish_reason" : "length"}]}"#,
            br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            br#"{"error":{"message":"overloaded"}}"#,
            br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}"#,
            br#"{"choices":[{"delta":{"function_call":{"name":"f"}}}]}"#,
            b"[1,2]",
            b"not json",
        ] {
            assert!(scan(event).read, "{}", String::from_utf8_lossy(event));
        }
    }

    #[test]
    fn keys_named_in_the_text_are_not_keys() {
        // The model writing about errors, usage and finish reasons, quotes included.
        let event = br#"{"choices":[{"delta":{"content":"error"},"finish_reason":null,"x":"\"usage\": 1, \"finish_reason\": \"stop\"","usage":null}]}"#;
        let scanned = scan(event);
        assert!(!scanned.read && scanned.content);
    }

    #[test]
    fn the_usage_event_is_passed_on_only_when_asked() {
        let usage = scan(br#"{"choices": [ ], "usage": {"prompt_tokens": 3}}"#);
        assert!(usage.read && usage.no_choice);
        assert!(!passed_on(&usage, Relay { usage: false }));
        assert!(passed_on(&usage, Relay { usage: true }));
        let content = scan(br#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#);
        assert!(passed_on(&content, Relay { usage: false }));
    }

    #[test]
    fn completion_text_counts_as_content() {
        let scanned = scan(br#"{"choices":[{"text":"fn main","index":0,"finish_reason":null}]}"#);
        assert!(scanned.content && !scanned.read);
    }

    #[test]
    fn events_are_framed_line_by_line() {
        let mut out = Vec::new();
        frame(&mut out, "{\"a\":1}");
        frame(&mut out, "{\"b\":\n2}");
        assert_eq!(out, b"data: {\"a\":1}\n\ndata: {\"b\":\ndata: 2}\n\n");
    }
}

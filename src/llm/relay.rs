//! Same-dialect passthrough ([`Relay`]): an upstream's events go to a client of its own
//! dialect as they came. Each event (an OpenAI SSE event, an Ollama NDJSON line) is
//! scanned once for the keys that may hold what the gateway must know: an error, a
//! non-null `usage`, tool calls, a non-null `finish_reason`, Ollama's `"done": true`.
//! Only an event with one of them is read, by the same reader as any other stream, so
//! errors, finish, usage and the tool-call bound are what they always are. The rest,
//! nearly every event of an answer, goes on without being parsed.
//!
//! A key is found from the colon after it: the colon's event text ends with the key's
//! name in quotes. Inside a JSON string every quote is escaped, so text that only looks
//! like a key there (`\"usage\": 1`) ends in a backslash, not in the name. One pass
//! over the colons (`memchr`) costs about a quarter of the instructions an Aho-Corasick
//! search for the quoted names took on the same event (counted with valgrind).

use super::Relay;

/// What a key's value tells.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Read the event unless the value is `null`.
    Read,
    /// Read the event when the value is `true` (Ollama's `done`).
    ReadIfTrue,
    /// A non-empty string: the event carries content.
    Content,
    /// OpenAI's `choices`: `[]` (or no such key) is the usage event.
    Choices,
}

/// The keys one wire's events are scanned for.
pub(super) struct Keys {
    keys: &'static [(&'static [u8], Role)],
    /// The wire has a usage event of its own (OpenAI's, without choices).
    usage_event: bool,
}

/// OpenAI's chat and text completion events.
pub(super) const OPENAI: Keys = Keys {
    keys: &[
        (b"error", Role::Read),
        (b"usage", Role::Read),
        (b"tool_calls", Role::Read),
        (b"function_call", Role::Read),
        (b"finish_reason", Role::Read),
        (b"content", Role::Content),
        (b"text", Role::Content),
        (b"choices", Role::Choices),
    ],
    usage_event: true,
};

/// Ollama's `/api/chat` and `/api/generate` lines.
pub(super) const OLLAMA: Keys = Keys {
    keys: &[
        (b"error", Role::Read),
        (b"tool_calls", Role::Read),
        (b"done", Role::ReadIfTrue),
        (b"content", Role::Content),
        (b"response", Role::Content),
    ],
    usage_event: false,
};

impl Keys {
    /// The role of the key whose name (in quotes) `before` ends with.
    fn role(&self, before: &[u8]) -> Option<Role> {
        let before = before.trim_ascii_end().strip_suffix(b"\"")?;
        let last = *before.last()?;
        self.keys.iter().find_map(|&(name, role)| {
            (name.last() == Some(&last)
                && before.ends_with(name)
                && before[..before.len() - name.len()].ends_with(b"\""))
            .then_some(role)
        })
    }
}

/// What one scan of an event found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scanned {
    /// It may hold an error, usage, a tool call or the finish: read it.
    pub(super) read: bool,
    /// Its text is not empty.
    pub(super) content: bool,
    /// OpenAI's usage event (no choice, or `choices: []`).
    pub(super) usage_only: bool,
}

/// Scans one event's data for `keys`.
pub(super) fn scan(keys: &Keys, data: &[u8]) -> Scanned {
    let mut choices = false;
    let mut found = Scanned {
        // Anything but an object is not an event of either wire: the reader says why.
        read: data.trim_ascii_start().first() != Some(&b'{'),
        ..Scanned::default()
    };
    for colon in memchr::memchr_iter(b':', data) {
        let Some(role) = keys.role(&data[..colon]) else {
            continue;
        };
        let value = data[colon + 1..].trim_ascii_start();
        match role {
            Role::Read => found.read |= !value.starts_with(b"null"),
            Role::ReadIfTrue => found.read |= value.starts_with(b"true"),
            Role::Content => {
                found.content |= value.first() == Some(&b'"') && value.get(1) != Some(&b'"');
            }
            // Any choice makes it an answer's event, wherever the key is.
            Role::Choices => choices |= !empty_array(value),
        }
    }
    found.usage_only = keys.usage_event && !choices;
    // A key written with escapes (`\u0066inish_reason`) is not what the scan looks for:
    // an event with any escaped character is read (JSON writers that escape non-ASCII
    // text send most events so).
    found.read |= memchr::memmem::find(data, b"\\u").is_some();
    found
}

/// Whether a value is `[]` (whitespace allowed inside).
fn empty_array(value: &[u8]) -> bool {
    value
        .strip_prefix(b"[")
        .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"]"))
}

/// Whether an event goes on to the client: all do, but the usage event only when the
/// client asked for it.
pub(super) fn passed_on(scanned: &Scanned, relay: Relay) -> bool {
    relay.usage || !scanned.usage_only
}

/// Appends an SSE event's data as the client takes it: one `data:` line per line of it,
/// then the blank line that ends it.
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
            scan(&OPENAI, event),
            Scanned {
                read: false,
                content: true,
                usage_only: false
            }
        );
    }

    #[test]
    fn the_role_event_has_no_content() {
        // llama.cpp's server, Python's separators.
        let role = br#"{"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "finish_reason": null}]}"#;
        let empty = br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        for event in [&role[..], &empty[..]] {
            let scanned = scan(&OPENAI, event);
            assert!(!scanned.read && !scanned.content && !scanned.usage_only);
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
            assert!(
                scan(&OPENAI, event).read,
                "{}",
                String::from_utf8_lossy(event)
            );
        }
    }

    #[test]
    fn keys_named_in_the_text_are_not_keys() {
        // The model writing about errors, usage and finish reasons, quotes included.
        let event = br#"{"choices":[{"delta":{"content":"error"},"finish_reason":null,"x":"\"usage\": 1, \"finish_reason\": \"stop\"","my_usage":{"a":1},"usage":null}]}"#;
        let scanned = scan(&OPENAI, event);
        assert!(!scanned.read && scanned.content);
    }

    #[test]
    fn keys_written_with_escapes_or_nested_choices_do_not_fool_it() {
        // An escaped key is read by the parser, which sees through the escape.
        assert!(
            scan(
                &OPENAI,
                br#"{"choices":[{"delta":{},"\u0066inish_reason":"stop"}]}"#
            )
            .read
        );
        // An empty `choices` elsewhere does not make a content event the usage event.
        for event in [
            &br#"{"choices":[{"delta":{"content":"x"}}],"m":{"choices":[]}}"#[..],
            br#"{"m":{"choices":[]},"choices":[{"delta":{"content":"x"}}]}"#,
            br#"{"a\"choices":[],"choices":[{"delta":{"content":"x"}}]}"#,
        ] {
            let scanned = scan(&OPENAI, event);
            assert!(
                !scanned.usage_only && scanned.content,
                "{}",
                String::from_utf8_lossy(event)
            );
        }
    }

    #[test]
    fn the_usage_event_is_passed_on_only_when_asked() {
        let usage = scan(
            &OPENAI,
            br#"{"choices": [ ], "usage": {"prompt_tokens": 3}}"#,
        );
        assert!(usage.read && usage.usage_only);
        assert!(!passed_on(&usage, Relay { usage: false }));
        assert!(passed_on(&usage, Relay { usage: true }));
        let content = scan(
            &OPENAI,
            br#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#,
        );
        assert!(passed_on(&content, Relay { usage: false }));
    }

    #[test]
    fn completion_text_counts_as_content() {
        let scanned = scan(
            &OPENAI,
            br#"{"choices":[{"text":"fn main","index":0,"finish_reason":null}]}"#,
        );
        assert!(scanned.content && !scanned.read);
    }

    #[test]
    fn ollamas_lines_are_read_at_their_end_and_on_an_error() {
        let text = scan(
            &OLLAMA,
            br#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"Hi"},"done":false}"#,
        );
        assert!(text.content && !text.read && !text.usage_only);
        let thinking = scan(
            &OLLAMA,
            br#"{"message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}"#,
        );
        assert!(!thinking.content && !thinking.read);
        let generate = scan(&OLLAMA, br#"{"model":"m","response":" x","done":false}"#);
        assert!(generate.content && !generate.read);
        for line in [
            &br#"{"model":"m","response":"","done":true,"done_reason":"stop","eval_count":3}"#[..],
            br#"{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#,
            br#"{"error":"model not loaded"}"#,
        ] {
            assert!(scan(&OLLAMA, line).read, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn events_are_framed_line_by_line() {
        let mut out = Vec::new();
        frame(&mut out, "{\"a\":1}");
        frame(&mut out, "{\"b\":\n2}");
        assert_eq!(out, b"data: {\"a\":1}\n\ndata: {\"b\":\ndata: 2}\n\n");
    }
}

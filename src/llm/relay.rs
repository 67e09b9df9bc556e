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

/// Scans one stream's events for `keys`, knowing an event that differs from the last
/// plain text event only inside its text without scanning it: nearly every event of an
/// OpenAI stream (the id, `created` and model are the same in each). Ollama's lines each
/// carry their own time, so they are scanned with [`scan`].
/// One scanner serves one stream, always with the same keys.
#[derive(Default)]
pub(super) struct Scanner {
    /// The last plain text event (not read, with text, an answer's) up to its text's
    /// opening quote, and from the text's closing quote on; empty when there is none.
    before: Vec<u8>,
    after: Vec<u8>,
}

impl Scanner {
    pub(super) fn scan(&mut self, keys: &Keys, data: &[u8]) -> Scanned {
        const PLAIN_TEXT: Scanned = Scanned {
            read: false,
            content: true,
            usage_only: false,
        };
        // The same bytes around a text that closes where the last one did: every colon
        // outside it is where it was (the same keys, the same values), and none inside it
        // follows a quoted name (its quotes are escaped). So it scans as the last did.
        if !self.before.is_empty()
            && data.len() > self.before.len() + self.after.len()
            && data.starts_with(&self.before)
            && data.ends_with(&self.after)
            && plain_text(&data[self.before.len()..data.len() - self.after.len()])
        {
            return PLAIN_TEXT;
        }
        let (found, text) = scan_at(keys, data);
        self.before.clear();
        self.after.clear();
        if found == PLAIN_TEXT {
            // Not when a colon follows the text's closing quote: its key would be the text.
            let keyed = |close: usize| data[close + 1..].trim_ascii_start().starts_with(b":");
            if let Some((open, close)) = text.filter(|&(_, close)| !keyed(close)) {
                self.before.extend_from_slice(&data[..=open]);
                self.after.extend_from_slice(&data[close..]);
            }
        }
        found
    }
}

/// Whether text between the same bytes as a plain text event's scans as its text did:
/// no `\u` (which the scan reads), and every quote in it after a backslash, so that no
/// colon in it follows a quoted name.
fn plain_text(text: &[u8]) -> bool {
    memchr::memmem::find(text, b"\\u").is_none()
        && memchr::memchr_iter(b'"', text).all(|i| i > 0 && text[i - 1] == b'\\')
}

/// Where the JSON string whose opening quote is at `open` closes (the index of its
/// closing quote).
fn string_end(data: &[u8], open: usize) -> Option<usize> {
    let mut at = open + 1;
    loop {
        let i = memchr::memchr2(b'"', b'\\', data.get(at..)?)?;
        match data[at + i] {
            b'"' => return Some(at + i),
            _ => at += i + 2,
        }
    }
}

/// Scans one event's data for `keys`.
pub(super) fn scan(keys: &Keys, data: &[u8]) -> Scanned {
    scan_at(keys, data).0
}

/// [`scan`], and where the first non-empty text string is (its quotes' indices).
fn scan_at(keys: &Keys, data: &[u8]) -> (Scanned, Option<(usize, usize)>) {
    let mut text = None;
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
                let some = value.first() == Some(&b'"') && value.get(1) != Some(&b'"');
                if some && text.is_none() {
                    let open = data.len() - value.len();
                    text = string_end(data, open).map(|close| (open, close));
                }
                found.content |= some;
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
    (found, text)
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

    /// Events whose text is `text`, in the shapes of a stream's events.
    fn events(text: &str) -> Vec<String> {
        vec![
            format!(
                r#"{{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#
            ),
            format!(
                r#"{{"id":"c2","choices": [{{"index": 0, "delta": {{"content": "{text}"}}, "finish_reason": null}}]}}"#
            ),
            format!(
                r#"{{"id":"c1","choices":[{{"index":0,"text":"{text}","finish_reason":null}}]}}"#
            ),
            format!(
                r#"{{"id":"c1","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":"stop"}}]}}"#
            ),
            format!(
                r#"{{"id":"c1","choices":[{{"index":0,"delta":{{"content":"{text}","tool_calls":[]}},"finish_reason":null}}],"usage":null}}"#
            ),
            format!(r#"{{"id":"c1","choices":[],"usage":{{"prompt_tokens":1}},"x":"{text}"}}"#),
            // Not JSON: the text is also a key.
            format!(r#"{{"choices":[{{"delta":{{"content":"{text}" : 1}}}}]}}"#),
        ]
    }

    /// Texts that end, escape or break the string they are in, or look like keys.
    const TEXTS: &[&str] = &[
        "Hi",
        " there",
        "",
        r#"a \"quoted\" word"#,
        r#"\"usage\": 1"#,
        r#"","usage":{"a":1},"b":""#,
        r#"tab\tand\\"#,
        r#"\\u0041"#,
        r#"\u00e9"#,
        r#"ends in \"#,
        "\"",
        "{\"a\":1}",
        "é: ünï",
        ":",
        "usage",
        "finish_reason",
    ];

    /// What the scanner's shortcut rests on: no key name holds a quote, and none ends in
    /// a backslash, a space or a colon.
    #[test]
    fn key_names_are_plain_words() {
        for keys in [&OPENAI, &OLLAMA] {
            for (name, _) in keys.keys {
                assert!(
                    !name.is_empty()
                        && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_'),
                    "{}",
                    String::from_utf8_lossy(name)
                );
            }
        }
    }

    #[test]
    fn a_stream_scans_as_each_event_alone_and_known_text_events_skip_the_scan() {
        let all: Vec<String> = TEXTS.iter().flat_map(|t| events(t)).collect();
        for first in &all {
            for next in &all {
                let mut scanner = Scanner::default();
                assert_eq!(
                    scanner.scan(&OPENAI, first.as_bytes()),
                    scan(&OPENAI, first.as_bytes())
                );
                assert_eq!(
                    scanner.scan(&OPENAI, next.as_bytes()),
                    scan(&OPENAI, next.as_bytes()),
                    "after {first}\nscanning {next}"
                );
            }
        }
        // A plain text event is known by the bytes around its text.
        let mut scanner = Scanner::default();
        scanner.scan(&OPENAI, events("Hi")[0].as_bytes());
        assert!(
            scanner.before.ends_with(br#""content":""#),
            "{:?}",
            scanner.before
        );
        assert!(scanner.after.starts_with(br#""},"finish_reason""#));
    }

    proptest::proptest! {
        #[test]
        fn any_stream_scans_as_each_event_alone(
            stream in proptest::collection::vec(
                (0..7usize, proptest::collection::vec(proptest::sample::select(vec![
                    "a", " ", "\"", "\\", "\\\"", "u", "\\u", "\\\\", ":", "\"usage\"",
                    "\"usage\":1", "\",\"usage\":{\"a\":1},\"x\":\"", "}", "{", ",", "]",
                    "null", "é", "\"content\":\"", "\"choices\":[]", "usage", "error",
                ]), 0..8)),
                1..8,
            )
        ) {
            let mut scanner = Scanner::default();
            for (shape, text) in stream {
                let event = events(&text.concat()).swap_remove(shape);
                proptest::prop_assert_eq!(
                    scanner.scan(&OPENAI, event.as_bytes()),
                    scan(&OPENAI, event.as_bytes()),
                    "{}", event
                );
            }
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

//! JSON helpers: a value's kind for log lines, and JSON strings written straight into a
//! buffer, the same bytes `serde_json` writes, eight bytes at a time where nothing needs
//! escaping.
//!
//! `serde_json` looks every byte of a string up in its escape table; the prompt the
//! gateway sends upstream (instructions, retrieved chunks, the conversation) is kilobytes
//! of text with few bytes to escape, and escaping it was about a twentieth of a `brunix`
//! answer's instructions (`benches/trace_cost.rs`'s untraced rows).

/// A JSON value's kind as a log line names it (never its content).
pub fn kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether any byte of `word` is one JSON escapes: a control character (below 0x20), `"`
/// or `\`. (A byte found is exact: a false hit needs a true one in a lower byte.)
#[inline]
fn needs_escape(word: u64) -> bool {
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    let quote = zero_byte(word ^ (ONES * u64::from(b'"')));
    let backslash = zero_byte(word ^ (ONES * u64::from(b'\\')));
    control | quote | backslash != 0
}

/// Appends `byte`'s escape (one that [`needs_escape`] finds).
fn escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]),
    }
}

fn escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Appends `text` as a JSON string, quotes included.
pub fn push_string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Bytes before `copied` are written; a run without escapes is copied at once.
    let mut copied = 0;
    let each = |out: &mut Vec<u8>, from: usize, to: usize, copied: &mut usize| {
        for (i, &byte) in bytes[from..to].iter().enumerate() {
            if escaped(byte) {
                out.extend_from_slice(&bytes[*copied..from + i]);
                escape(out, byte);
                *copied = from + i + 1;
            }
        }
    };
    let words = bytes.chunks_exact(8);
    let tail = bytes.len() - words.remainder().len();
    for (n, chunk) in words.enumerate() {
        if let Ok(word) = <[u8; 8]>::try_from(chunk) {
            if needs_escape(u64::from_le_bytes(word)) {
                each(out, n * 8, n * 8 + 8, &mut copied);
            }
        }
    }
    each(out, tail, bytes.len(), &mut copied);
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(text: &str) -> String {
        let mut out = Vec::new();
        push_string(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_byte_class_at_every_place_is_written_as_serde_json_writes_it() {
        // Every ASCII byte, and characters of two, three and four bytes, at each of the
        // eight places of a word and past the last whole word.
        let mut specials: Vec<String> = (0u8..0x80).map(|b| char::from(b).to_string()).collect();
        specials.extend(["é", "€", "𝄞", "\u{7f}", "\u{2028}"].map(String::from));
        for special in &specials {
            for before in 0..12 {
                for after in 0..10 {
                    let text = format!("{}{special}{}", "a".repeat(before), "b".repeat(after));
                    assert_eq!(
                        ours(&text),
                        serde_json::to_string(&text).unwrap(),
                        "{text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn long_mixed_texts_are_written_as_serde_json_writes_them() {
        // A small generator: texts of every length up to 300 from a mix of plain text,
        // line breaks, quotes, backslashes, controls and wide characters.
        let parts = [
            "word ", "\n", "\"", "\\", "\u{1}", "\t", "ñandú ", "𝄞", "", "x",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2_000 {
            let mut text = String::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 120) as usize;
            let mut s = seed;
            for _ in 0..len {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                text.push_str(parts[(s >> 33) as usize % parts.len()]);
            }
            assert_eq!(
                ours(&text),
                serde_json::to_string(&text).unwrap(),
                "{text:?}"
            );
        }
    }
}

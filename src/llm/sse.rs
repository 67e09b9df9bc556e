//! Server-sent events read from an upstream's body, as the WHATWG HTML standard's "event
//! stream interpretation" says: lines end with CRLF, LF or CR; a blank line dispatches the
//! event; `data` lines are joined with LF; comments (`:`) and the other fields (`event`,
//! `id`, `retry`, unknown ones) are skipped, the gateway reads only data; a leading BOM is
//! dropped; text is UTF-8 (invalid bytes replaced); an event the body ends in the middle
//! of is not dispatched.
//!
//! Each piece of the body is scanned once for line ends (`memchr`): complete lines are
//! read where they are, and only a line that a piece ends in the middle of is kept. (The
//! `eventsource-stream` crate copied the rest of its buffer after every line, quadratic in
//! the events one piece holds, and parsed each line with `nom`: an eighth of a passthrough
//! answer's instructions.) One event is bounded: more than `max_event_bytes` of its lines
//! (comments and other fields included, line ends not) is an error, after the events
//! complete before it.

use std::borrow::Cow;
use std::ops::ControlFlow;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// An event longer than the bound.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TooLong;

/// The reader's state between pieces of a body.
#[derive(Debug)]
pub(crate) struct Reader {
    max_event_bytes: usize,
    /// A line that the last piece ended in the middle of.
    partial: Vec<u8>,
    /// The event's data so far, each line followed by LF.
    data: String,
    /// Line bytes of the event so far.
    event_bytes: usize,
    /// The last piece ended with CR: an LF that starts the next one ends nothing.
    after_cr: bool,
    /// No line read yet (a BOM may open it).
    first: bool,
}

impl Reader {
    pub(crate) fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            partial: Vec::new(),
            data: String::new(),
            event_bytes: 0,
            after_cr: false,
            first: true,
        }
    }

    /// Reads one piece of the body, giving each event's data to `event` as it completes
    /// (until `event` breaks). Past the bound: the events before, then [`TooLong`].
    pub(crate) fn read(
        &mut self,
        mut piece: &[u8],
        event: &mut impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, TooLong> {
        if piece.is_empty() {
            return Ok(ControlFlow::Continue(()));
        }
        if std::mem::take(&mut self.after_cr) {
            piece = piece.strip_prefix(b"\n").unwrap_or(piece);
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', piece) {
            let mut next = end + 1;
            if piece[end] == b'\r' {
                match piece.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let flow = if self.partial.is_empty() {
                self.line(&piece[..end], event)?
            } else {
                // The line began in an earlier piece; its buffer is kept for the next.
                let mut joined = std::mem::take(&mut self.partial);
                joined.extend_from_slice(&piece[..end]);
                let flow = self.line(&joined, event);
                joined.clear();
                self.partial = joined;
                flow?
            };
            if flow.is_break() {
                return Ok(flow);
            }
            piece = &piece[next..];
        }
        if self.event_bytes + self.partial.len() + piece.len() > self.max_event_bytes {
            return Err(TooLong);
        }
        self.partial.extend_from_slice(piece);
        Ok(ControlFlow::Continue(()))
    }

    /// One complete line (without its end).
    fn line(
        &mut self,
        mut line: &[u8],
        event: &mut impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, TooLong> {
        if std::mem::take(&mut self.first) {
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            self.event_bytes = 0;
            if self.data.is_empty() {
                return Ok(ControlFlow::Continue(()));
            }
            self.data.pop();
            let flow = event(&self.data);
            self.data.clear();
            return Ok(flow);
        }
        self.event_bytes += line.len();
        if self.event_bytes > self.max_event_bytes {
            return Err(TooLong);
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(0) => return Ok(ControlFlow::Continue(())),
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            // Valid UTF-8 (nearly every line) is checked by the fast path; only a line
            // that is not goes through the lossy decoder (which cost a streamed answer
            // about 900 instructions a line).
            match std::str::from_utf8(value) {
                Ok(text) => self.data.push_str(text),
                Err(_) => match String::from_utf8_lossy(value) {
                    Cow::Borrowed(text) => self.data.push_str(text),
                    Cow::Owned(text) => self.data.push_str(&text),
                },
            }
            self.data.push('\n');
        }
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events' data of a body arriving in `pieces`, and whether it ended too long.
    fn events(pieces: &[&[u8]], max: usize) -> (Vec<String>, Option<TooLong>) {
        let mut reader = Reader::new(max);
        let mut out = Vec::new();
        for piece in pieces {
            let read = reader.read(piece, &mut |data| {
                out.push(data.to_string());
                ControlFlow::Continue(())
            });
            if let Err(e) = read {
                return (out, Some(e));
            }
        }
        (out, None)
    }

    #[test]
    fn the_standards_examples_read_as_it_says() {
        // From the event stream interpretation's examples: comments skipped, fields
        // without a value, a space after the colon dropped only once, data lines joined.
        let body = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\ndata\n\ndata\ndata\n\ndata:\n";
        let (got, _) = events(&[body], 1 << 20);
        assert_eq!(
            got,
            ["first event", "second event", " third event", "", "\n"],
            "the last event has no blank line after it: not dispatched"
        );
        let (got, _) = events(&[b"data: YHOO\ndata: +2\ndata: 10\n\n"], 1 << 20);
        assert_eq!(got, ["YHOO\n+2\n10"]);
    }

    #[test]
    fn every_line_end_and_every_cut_gives_the_same_events() {
        let body = "\u{feff}data: {\"a\":\"é\"}\r\n\r\nevent: x\rdata: two\r\rdata: [DONE]\n\n";
        let whole = events(&[body.as_bytes()], 1 << 20).0;
        assert_eq!(whole, ["{\"a\":\"é\"}", "two", "[DONE]"]);
        let bytes = body.as_bytes();
        for cut in 0..=bytes.len() {
            for second in cut..=bytes.len() {
                let pieces = [&bytes[..cut], &bytes[cut..second], &bytes[second..]];
                assert_eq!(events(&pieces, 1 << 20).0, whole, "cut at {cut}, {second}");
            }
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_not_an_error() {
        let (got, err) = events(&[b"data: a\xffb\n\n"], 1 << 20);
        assert_eq!(got, ["a\u{fffd}b"]);
        assert!(err.is_none());
    }

    #[test]
    fn events_longer_than_the_limit_end_the_body_after_the_complete_ones() {
        let (got, err) = events(&[b"data: 12345\n\n", b"data: 1234", b"5\r\n\r\n"], 11);
        assert_eq!(got, ["12345", "12345"]);
        assert!(err.is_none());
        // Over the limit in one piece that also holds a complete event: that one first.
        let (got, err) = events(&[b"data: 1\n\ndata: 123456"], 11);
        assert_eq!(got, ["1"]);
        assert_eq!(err, Some(TooLong));
        // Over the limit across pieces.
        let (got, err) = events(&[b"data: 1234", b"56"], 11);
        assert!(got.is_empty());
        assert_eq!(err, Some(TooLong));
        // Lines of one event count together: the event is what the reader holds.
        let (_, err) = events(&[b"data: 1\ndata: 2\ndata: 3\n"], 11);
        assert_eq!(err, Some(TooLong));
        let (_, err) = events(&[b"data: 1\n", b"data: 2\n", b"data: 3\n"], 11);
        assert_eq!(err, Some(TooLong));
        // A line with no end, in many small pieces.
        let mut reader = Reader::new(1_000);
        let mut ended = None;
        for i in 0..10_000 {
            if reader
                .read(b"xxxxxxxxxx", &mut |_| ControlFlow::Continue(()))
                .is_err()
            {
                ended = Some(i);
                break;
            }
        }
        assert_eq!(ended, Some(100), "the 101st piece passes 1,000 bytes");
    }

    #[test]
    fn a_break_stops_reading() {
        let mut reader = Reader::new(1 << 20);
        let mut seen = Vec::new();
        let flow = reader.read(b"data: a\n\ndata: [DONE]\n\ndata: after\n\n", &mut |d| {
            seen.push(d.to_string());
            if d == "[DONE]" {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!(flow, Ok(ControlFlow::Break(())));
        assert_eq!(seen, ["a", "[DONE]"]);
    }

    #[test]
    fn many_events_in_one_piece_are_read_in_one_pass() {
        // 20,000 events in one piece: quadratic copying would take minutes in a debug
        // build; this is a correctness check that all of them come out, in order.
        let body: String = (0..20_000).map(|i| format!("data: {i}\n\n")).collect();
        let (got, err) = events(&[body.as_bytes()], 64);
        assert!(err.is_none());
        assert_eq!(got.len(), 20_000);
        assert_eq!(got[19_999], "19999");
    }
}

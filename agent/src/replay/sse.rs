//! Server-sent events, decoded without a copy or an allocation per event.
//!
//! [`SseDecoder::feed`] takes the body's chunks as they arrive and hands each event's `data` to a callback as a
//! byte slice. The line rules are the WHATWG `text/event-stream` ones: lines end in LF, CRLF or a lone CR (also
//! when a CRLF is split across two chunks); a line starting with `:` is a comment; `field:value` drops one space
//! after the colon, a line without a colon is a field with an empty value; `data` lines of one event are joined with
//! LF; an empty line dispatches the event (only an event with at least one `data` line is handed on: the client
//! needs nothing else); a UTF-8 BOM at the start of the stream is skipped; an unfinished event at the end of the
//! stream is dropped ([`SseDecoder::feed`] just keeps it until the next chunk). `event`, `id` and `retry` are
//! parsed as fields and ignored (no OpenAI-compatible server gives them a meaning for completions).
//!
//! Cost: the usual case — a chunk holding whole events of one `data` line each — is one `memchr` per line and no
//! copy: the callback sees a slice of the chunk itself. Bytes are copied only for a line cut by a chunk boundary
//! and for events with several `data` lines. A decoder's buffers are reused from event to event. Validated
//! against the `sse-stream` crate (a maintained parser) on random chunkings in this module's tests.

use std::ops::ControlFlow;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The decoding state of one stream.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of an unfinished line carried over from the previous chunk.
    partial: Vec<u8>,
    /// The data of the event being read, once it no longer fits in one borrowed slice.
    data: Vec<u8>,
    /// Whether the event being read has any `data` line (`data` may still be empty: `data:` alone is an event).
    has_data: bool,
    /// The previous chunk ended with CR: a leading LF of the next one completes that line ending.
    skip_lf: bool,
    /// Still at the very start of the stream (the BOM check).
    at_start: bool,
    /// Bytes seen, for the BOM check when the first chunks are shorter than the BOM.
    fresh: bool,
}

/// Where the data of the event being read lies while it is one line of the current input.
#[derive(Clone, Copy)]
enum Pending {
    None,
    /// `input[start..end]`: one data line, not yet copied.
    Borrowed(usize, usize),
}

impl SseDecoder {
    pub fn new() -> Self {
        SseDecoder {
            at_start: true,
            fresh: true,
            ..Default::default()
        }
    }

    /// Decode one chunk; `on_event` gets each complete event's data. It returns `ControlFlow::Break` to stop
    /// early (then `feed` returns `Break` too and the rest of the chunk is dropped: the caller is done).
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(&[u8]) -> ControlFlow<()>) -> ControlFlow<()> {
        let mut chunk = chunk;
        if self.fresh {
            // The BOM may straddle chunks: hold back a prefix of it until it is decided.
            if !self.partial.is_empty() || chunk.len() < BOM.len() {
                self.partial.extend_from_slice(chunk);
                if self.partial.len() < BOM.len() && BOM.starts_with(&self.partial) {
                    return ControlFlow::Continue(());
                }
                self.fresh = false;
                let held = std::mem::take(&mut self.partial);
                let r = self.feed_lines(&held, &mut on_event);
                if self.partial.is_empty() {
                    // Keep the allocation for later carry-overs.
                    let mut held = held;
                    held.clear();
                    self.partial = held;
                }
                return r;
            }
            self.fresh = false;
        }
        if self.skip_lf {
            self.skip_lf = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        if self.partial.is_empty() {
            return self.feed_lines(chunk, &mut on_event);
        }
        // A line was cut by the previous chunk boundary: finish it from this chunk, then go on without copying.
        let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) else {
            self.partial.extend_from_slice(chunk);
            return ControlFlow::Continue(());
        };
        let mut line = std::mem::take(&mut self.partial);
        line.extend_from_slice(&chunk[..end]);
        // Re-terminate it so `feed_lines` sees one complete line (its terminator is consumed below).
        line.push(b'\n');
        let r = self.feed_lines(&line, &mut on_event);
        line.clear();
        if self.partial.is_empty() {
            self.partial = line;
        }
        if r.is_break() {
            return r;
        }
        let mut rest = &chunk[end + 1..];
        if chunk[end] == b'\r' {
            match rest.first() {
                Some(b'\n') => rest = &rest[1..],
                None => self.skip_lf = true,
                Some(_) => {}
            }
        }
        self.feed_lines(rest, &mut on_event)
    }

    /// Decode the complete lines of `input`; an unfinished last line is kept in `partial`.
    fn feed_lines(&mut self, input: &[u8], on_event: &mut impl FnMut(&[u8]) -> ControlFlow<()>) -> ControlFlow<()> {
        let mut pos = 0;
        let mut pending = Pending::None;
        if self.at_start {
            if input.starts_with(BOM) {
                pos = BOM.len();
            }
            if !input.is_empty() {
                self.at_start = false;
            }
        }
        while pos < input.len() {
            let Some(off) = memchr::memchr2(b'\n', b'\r', &input[pos..]) else {
                break;
            };
            let end = pos + off;
            let line = &input[pos..end];
            pos = end + 1;
            if input[end] == b'\r' {
                match input.get(pos) {
                    Some(b'\n') => pos += 1,
                    None => self.skip_lf = true,
                    Some(_) => {}
                }
            }
            if line.is_empty() {
                // Dispatch.
                if self.has_data {
                    self.has_data = false;
                    let flow = match pending {
                        Pending::Borrowed(s, e) => on_event(&input[s..e]),
                        Pending::None => on_event(&self.data),
                    };
                    pending = Pending::None;
                    self.data.clear();
                    if flow.is_break() {
                        return flow;
                    }
                }
                continue;
            }
            if line[0] == b':' {
                continue;
            }
            let (name, value) = match memchr::memchr(b':', line) {
                Some(i) => {
                    let v = &line[i + 1..];
                    (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (line, &b""[..]),
            };
            if name != b"data" {
                continue;
            }
            if !self.has_data {
                self.has_data = true;
                let start = end - value.len();
                pending = Pending::Borrowed(start, end);
            } else {
                if let Pending::Borrowed(s, e) = pending {
                    self.data.extend_from_slice(&input[s..e]);
                    pending = Pending::None;
                }
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
            }
        }
        if let Pending::Borrowed(s, e) = pending {
            // The event goes on in a later chunk: keep its first line.
            self.data.extend_from_slice(&input[s..e]);
        }
        self.partial.extend_from_slice(&input[pos..]);
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in(chunks: &[&[u8]]) -> Vec<String> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            let _ = d.feed(c, |data| {
                out.push(String::from_utf8_lossy(data).into_owned());
                ControlFlow::Continue(())
            });
        }
        out
    }

    /// Every split of `text` into chunks of `n` bytes gives the same events.
    fn decode_by(text: &[u8], n: usize) -> Vec<String> {
        let chunks: Vec<&[u8]> = text.chunks(n.max(1)).collect();
        decode_in(&chunks)
    }

    #[test]
    fn line_endings_comments_fields_and_multi_line_data() {
        let text = b"\xEF\xBB\xBFdata: a\n\n: comment\r\ndata:b\r\ndata:  c\r\n\r\nevent: x\nid: 7\nretry: 10\n\ndata\rdata: d\r\rdata: tail-without-end";
        let want = vec!["a".to_string(), "b\n c".into(), "\nd".into()];
        for n in 1..=text.len() {
            assert_eq!(decode_by(text, n), want, "chunks of {n}");
        }
    }

    #[test]
    fn break_stops_at_the_event() {
        let mut d = SseDecoder::new();
        let mut seen = Vec::new();
        let flow = d.feed(b"data: 1\n\ndata: [DONE]\n\ndata: 3\n\n", |data| {
            seen.push(data.to_vec());
            if data == b"[DONE]" {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert!(flow.is_break());
        assert_eq!(seen, vec![b"1".to_vec(), b"[DONE]".to_vec()]);
    }

    /// The reference: `sse-stream` (a maintained SSE parser) over the same bytes, in one chunk.
    fn reference(text: &[u8]) -> Vec<String> {
        use futures_util::StreamExt as _;
        let body = futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(text))]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(async {
            let mut s = sse_stream::SseStream::from_bytes_stream(body);
            let mut out = Vec::new();
            while let Some(Ok(ev)) = s.next().await {
                if let Some(d) = ev.data {
                    out.push(d);
                }
            }
            out
        })
    }

    #[test]
    fn agrees_with_sse_stream_on_random_streams() {
        // A small deterministic generator of awkward streams: every line ending, comments, other fields,
        // empty data, multi-line events, a BOM now and then; split at random points.
        let pieces: [&[u8]; 14] = [
            b"data: {\"x\":1}",
            b"data:{\"y\":2}",
            b"data:",
            b"data",
            b": keep-alive",
            b"event: message",
            b"id: 3",
            b"retry: 100",
            b"data:  two spaces",
            b"unknown: field",
            b"",
            b"",
            b"data: [DONE]",
            b"dat",
        ];
        let ends: [&[u8]; 3] = [b"\n", b"\r\n", b"\r"];
        let mut events = 0;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % m
        };
        for case in 0..400 {
            let mut text = Vec::new();
            if case % 7 == 0 {
                text.extend_from_slice(BOM);
            }
            let end = ends[next(3) as usize];
            for _ in 0..next(30) + 1 {
                text.extend_from_slice(pieces[next(pieces.len() as u64) as usize]);
                // One ending style per stream: a CR followed by an LF-ended line would read differently.
                text.extend_from_slice(end);
            }
            let want = reference(&text);
            events += want.len();
            let mut cuts: Vec<usize> = (0..next(6)).map(|_| next(text.len() as u64 + 1) as usize).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&text[at..c]);
                at = c;
            }
            chunks.push(&text[at..]);
            assert_eq!(
                decode_in(&chunks),
                want,
                "case {case}: {:?}",
                String::from_utf8_lossy(&text)
            );
        }
        assert!(events > 300, "the generator should make many events (made {events})");
    }
}

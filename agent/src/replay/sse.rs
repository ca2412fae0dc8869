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
//! **Bounded memory.** A line longer than the decoder's limit ([`MAX_LINE_BYTES`] by default), or an event whose
//! `data` lines add up to more, fails the stream with an [`SseError`] instead of growing a buffer without bound (a
//! server that sends bytes without a line end, or `data` lines without the blank line that ends the event). The
//! limit applies to the stream's lines, not to how they were chunked, so the same bytes fail at the same point
//! whatever the chunk boundaries; after a failure the buffers are released and every later `feed` returns it.
//!
//! Cost: the usual case — a chunk holding whole events of one `data` line each — is one `memchr` per line and no
//! copy: the callback sees a slice of the chunk itself. Bytes are copied only for a line cut by a chunk boundary
//! and for events with several `data` lines. A decoder's buffers are reused from event to event. Validated
//! against the `sse-stream` crate (a maintained parser) on random chunkings in this module's tests.

use std::ops::ControlFlow;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The longest line, and the most `data` of one event, that [`SseDecoder::new`] takes: 4 MiB, hundreds of times an
/// OpenAI-compatible frame (a whole long reply sent as one frame still fits), and a bound on what one stream can
/// make the client hold.
pub const MAX_LINE_BYTES: usize = 4 << 20;

/// Why a stream cannot be decoded within the decoder's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an SSE line longer than {limit} bytes (no line end)")]
    LineTooLong { limit: usize },
    #[error("an SSE event with more than {limit} bytes of data (no blank line ends it)")]
    EventTooLarge { limit: usize },
}

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
    /// The longest line and the most data of one event ([`MAX_LINE_BYTES`] unless set).
    limit: usize,
    /// The stream went past `limit`: every later `feed` returns this.
    failed: Option<SseError>,
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
        Self::with_limit(MAX_LINE_BYTES)
    }

    /// A decoder that takes lines, and events' data, of at most `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        SseDecoder {
            at_start: true,
            fresh: true,
            limit,
            ..Default::default()
        }
    }

    /// Decode one chunk; `on_event` gets each complete event's data. It returns `ControlFlow::Break` to stop
    /// early (then `feed` returns `Break` too and the rest of the chunk is dropped: the caller is done). An error:
    /// the stream went past the decoder's limit (the events before that point were handed on).
    pub fn feed(
        &mut self,
        chunk: &[u8],
        mut on_event: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, SseError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let r = self.feed_chunk(chunk, &mut on_event);
        if let Err(e) = r {
            // Release what the stream made us hold; it is over.
            self.failed = Some(e);
            self.partial = Vec::new();
            self.data = Vec::new();
        }
        r
    }

    fn feed_chunk(
        &mut self,
        chunk: &[u8],
        on_event: &mut impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, SseError> {
        let mut chunk = chunk;
        if self.fresh {
            // The BOM may straddle chunks: hold back a prefix of it until it is decided.
            if !self.partial.is_empty() || chunk.len() < BOM.len() {
                self.partial.extend_from_slice(chunk);
                if self.partial.len() < BOM.len() && BOM.starts_with(&self.partial) {
                    return Ok(ControlFlow::Continue(()));
                }
                self.fresh = false;
                let held = std::mem::take(&mut self.partial);
                let r = self.feed_lines(&held, on_event);
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
        // An empty chunk decides nothing: a CR that ended the previous chunk still waits for its LF.
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        if self.partial.is_empty() {
            return self.feed_lines(chunk, on_event);
        }
        // A line was cut by the previous chunk boundary: finish it from this chunk, then go on without copying.
        let end = memchr::memchr2(b'\n', b'\r', chunk);
        if self.partial.len() + end.unwrap_or(chunk.len()) > self.limit {
            return Err(SseError::LineTooLong { limit: self.limit });
        }
        let Some(end) = end else {
            self.partial.extend_from_slice(chunk);
            return Ok(ControlFlow::Continue(()));
        };
        let mut line = std::mem::take(&mut self.partial);
        line.extend_from_slice(&chunk[..end]);
        // Re-terminate it so `feed_lines` sees one complete line (its terminator is consumed below).
        line.push(b'\n');
        let r = self.feed_lines(&line, on_event);
        line.clear();
        if self.partial.is_empty() {
            self.partial = line;
        }
        if r != Ok(ControlFlow::Continue(())) {
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
        self.feed_lines(rest, on_event)
    }

    /// Decode the complete lines of `input`; an unfinished last line is kept in `partial`.
    fn feed_lines(
        &mut self,
        input: &[u8],
        on_event: &mut impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, SseError> {
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
            if line.len() > self.limit {
                return Err(SseError::LineTooLong { limit: self.limit });
            }
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
                        return Ok(flow);
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
                if self.data.len() + 1 + value.len() > self.limit {
                    return Err(SseError::EventTooLarge { limit: self.limit });
                }
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
            }
        }
        if let Pending::Borrowed(s, e) = pending {
            // The event goes on in a later chunk: keep its first line.
            self.data.extend_from_slice(&input[s..e]);
        }
        if input.len() - pos > self.limit {
            return Err(SseError::LineTooLong { limit: self.limit });
        }
        self.partial.extend_from_slice(&input[pos..]);
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        assert_eq!(flow, Ok(ControlFlow::Break(())));
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

    /// What a decoder with `limit` makes of `chunks`, fed one by one as a client does (stopping at `[DONE]`, as the
    /// client's callback does, or at an error): the events and the error, if any. After every feed its buffers hold
    /// at most `limit` bytes each — the memory bound (and the first bytes of a stream, while they may still be the
    /// start of a BOM: two).
    fn decode_limited(chunks: &[&[u8]], limit: usize) -> (Vec<Vec<u8>>, Option<SseError>) {
        let mut d = SseDecoder::with_limit(limit);
        let mut out = Vec::new();
        for c in chunks {
            let r = d.feed(c, |data| {
                out.push(data.to_vec());
                if data == b"[DONE]" {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            assert!(
                d.partial.len() <= limit.max(BOM.len() - 1) && d.data.len() <= limit,
                "buffers past the limit {limit}: partial {}, data {}",
                d.partial.len(),
                d.data.len()
            );
            match r {
                Ok(ControlFlow::Continue(())) => {}
                Ok(ControlFlow::Break(())) => return (out, None),
                Err(e) => {
                    // Failed for good: later chunks get the same error, and nothing is held any more.
                    assert_eq!(d.feed(b"data: x\n\n", |_| ControlFlow::Continue(())), Err(e));
                    assert_eq!((d.partial.capacity(), d.data.capacity()), (0, 0));
                    return (out, Some(e));
                }
            }
        }
        (out, None)
    }

    /// `bytes` cut at the given points (taken modulo its length, sorted).
    fn split<'a>(bytes: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        let mut chunks = Vec::with_capacity(at.len() + 1);
        let mut from = 0;
        for c in at {
            chunks.push(&bytes[from..c]);
            from = c;
        }
        chunks.push(&bytes[from..]);
        chunks
    }

    #[test]
    fn an_empty_chunk_between_cr_and_lf_keeps_them_one_line_end() {
        // Found by the split-invariance property: `skip_lf` was cleared by the empty chunk, so the LF read as a
        // blank line and dispatched an event the whole stream does not have.
        let bytes: &[u8] = b"data:\xEF\xBB\xBF\r\n";
        let whole = decode_limited(&[bytes], MAX_LINE_BYTES);
        assert_eq!(whole, (Vec::<Vec<u8>>::new(), None));
        assert_eq!(decode_limited(&[&bytes[..9], b"", &bytes[9..]], MAX_LINE_BYTES), whole);
        assert_eq!(
            decode_limited(&[b"data: x\r", b"", b"", b"\n\n"], MAX_LINE_BYTES).0,
            vec![b"x".to_vec()]
        );
    }

    /// The pieces SSE is made of, so that random streams are mostly lines, fields and events (with the odd byte).
    fn sse_piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => Just(b"data".to_vec()),
            3 => Just(b":".to_vec()),
            3 => Just(b" ".to_vec()),
            5 => Just(b"\n".to_vec()),
            2 => Just(b"\r".to_vec()),
            2 => Just(b"\r\n".to_vec()),
            1 => Just(BOM.to_vec()),
            1 => Just(b"data: [DONE]".to_vec()),
            1 => Just(b"event".to_vec()),
            3 => prop::collection::vec(any::<u8>(), 1..40),
        ]
    }

    /// A stream of SSE pieces, up to a few hundred bytes.
    fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(sse_piece(), 0..60).prop_map(|p| p.concat())
    }

    /// A well-formed stream (events of one or more `data` lines, comments, fields) with byte-level mutations:
    /// bytes flipped, inserted and deleted at random places.
    fn mutated_stream() -> impl Strategy<Value = Vec<u8>> {
        let event = prop::collection::vec(
            prop_oneof![
                Just(b"data: {\"choices\":[{\"text\":\"a\"}]}\n".to_vec()),
                Just(b"data:x\r\n".to_vec()),
                Just(b": ping\n".to_vec()),
                Just(b"id: 1\n".to_vec()),
            ],
            1..4,
        )
        .prop_map(|lines| [lines.concat(), b"\n".to_vec()].concat());
        let stream = prop::collection::vec(event, 1..12).prop_map(|e| e.concat());
        let edit = (any::<prop::sample::Index>(), 0u8..3, any::<u8>());
        (stream, prop::collection::vec(edit, 0..12)).prop_map(|(mut s, edits)| {
            for (at, op, byte) in edits {
                let i = at.index(s.len() + 1);
                match op {
                    0 if i < s.len() => s[i] ^= byte | 1,
                    1 => s.insert(i, byte),
                    _ if i < s.len() => {
                        s.remove(i);
                    }
                    _ => s.push(byte),
                }
            }
            s
        })
    }

    /// Limits that bite on these short streams, and the real one.
    fn limit() -> impl Strategy<Value = usize> {
        prop_oneof![1 => Just(MAX_LINE_BYTES), 2 => 1usize..48]
    }

    /// Chunk-split invariance: whatever the chunk boundaries (random cuts, and one byte at a time), a stream gives
    /// the same events and the same error as in one chunk — also past the limit, which applies to lines, not
    /// chunks. Never a panic, and the buffers stay within the limit (`decode_limited`).
    fn same_whatever_the_split(bytes: &[u8], cuts: &[prop::sample::Index], limit: usize) -> Result<(), TestCaseError> {
        let whole = decode_limited(&[bytes], limit);
        prop_assert_eq!(&decode_limited(&split(bytes, cuts), limit), &whole);
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(&decode_limited(&bytewise, limit), &whole);
        Ok(())
    }

    proptest! {
        // Bounded: 256 cases per property (docs/replay.md: "The SSE decoder, fuzzed").
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn sse_like_bytes_decode_the_same_whatever_the_split(
            bytes in sse_bytes(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            limit in limit(),
        ) {
            same_whatever_the_split(&bytes, &cuts, limit)?;
        }

        #[test]
        fn arbitrary_bytes_decode_the_same_whatever_the_split(
            bytes in prop::collection::vec(any::<u8>(), 0..400),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            limit in limit(),
        ) {
            same_whatever_the_split(&bytes, &cuts, limit)?;
        }

        #[test]
        fn mutated_streams_decode_the_same_whatever_the_split(
            bytes in mutated_stream(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            limit in limit(),
        ) {
            same_whatever_the_split(&bytes, &cuts, limit)?;
        }
    }

    /// A server that sends bytes and never a line end (or `data` lines and never the blank line) fails the stream
    /// once it passes the limit, holding no more than the limit: before the limit existed the buffer grew with every
    /// chunk. With the real limit (4 MiB) in 64 KiB chunks, as a socket would bring them.
    #[test]
    fn a_stream_without_line_ends_or_event_ends_is_capped() {
        let chunk = vec![b'a'; 64 << 10];
        let mut d = SseDecoder::new();
        let mut fed = 0usize;
        let err = loop {
            match d.feed(&chunk, |_| ControlFlow::Continue(())) {
                Ok(_) => fed += chunk.len(),
                Err(e) => break e,
            }
            assert!(
                d.partial.capacity() <= 2 * MAX_LINE_BYTES,
                "held {}",
                d.partial.capacity()
            );
            assert!(
                fed <= 2 * MAX_LINE_BYTES,
                "no error after {fed} bytes without a line end"
            );
        };
        assert_eq!(err, SseError::LineTooLong { limit: MAX_LINE_BYTES });
        assert!(
            fed <= MAX_LINE_BYTES && fed + chunk.len() > MAX_LINE_BYTES,
            "failed after {fed} bytes"
        );
        assert!(err.to_string().contains("longer than 4194304 bytes"), "{err}");

        let line = b"data: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789a\n";
        let lines = line.repeat(1024);
        let mut d = SseDecoder::new();
        let mut fed = 0usize;
        let err = loop {
            match d.feed(&lines, |_| panic!("no event ends")) {
                Ok(_) => fed += lines.len(),
                Err(e) => break e,
            }
            assert!(d.data.capacity() <= 2 * MAX_LINE_BYTES, "held {}", d.data.capacity());
            assert!(
                fed <= 2 * MAX_LINE_BYTES,
                "no error after {fed} bytes without an event end"
            );
        };
        assert_eq!(err, SseError::EventTooLarge { limit: MAX_LINE_BYTES });
    }
}

//! The tokenizer: a byte scanner over a JSON trace read from any [`Read`].
//! It finds the top-level fields and each element of `traceEvents` without
//! building a JSON tree, so a reader holds one event's bytes at a time
//! (each is then parsed on its own: `import/` and `keel.rs`).
//!
//! Two [`Syntax`]es: [`Lenient`](Syntax::Lenient) accepts what real files
//! contain and Chrome and Perfetto accept: an object with `traceEvents`
//! (in any position) or a bare array of events, an array left unterminated
//! (the file simply ends; a last event cut in the middle is reported as
//! such), trailing and missing commas. Between events it only tracks
//! strings, escapes and nesting depth, so one damaged event costs that
//! event, not the rest of the file. Memory is bounded: an event or a kept
//! top-level field larger than [`MAX_VALUE`] is skipped, not buffered.
//! [`Strict`](Syntax::Strict) is for Keel's own files, which must be
//! well-formed: every comma, bracket and the end of the file where JSON
//! wants them, any problem an error with its byte offset; no value is too
//! large (a value is at most the whole input).
//!
//! [`scan_ahead`] reads the input on a thread of its own, a few blocks
//! ahead of the scan, so decompression and parsing overlap.

use std::io::Read;

use crate::error::{Error, Result};

/// The largest event or top-level field a lenient scan keeps (bytes).
pub(super) const MAX_VALUE: usize = 16 << 20;

/// Bytes read from the input at a time.
const BLOCK: usize = 1 << 20;

/// [`CLASS`] bit of the bytes that matter inside a string: `"` and `\`.
const IN_STRING: u8 = 1;
/// [`CLASS`] bit of the bytes that matter outside strings: `"` and the
/// brackets.
const OUTSIDE: u8 = 2;

/// Which bytes matter to [`Scanner::skip_value`], by byte.
const CLASS: [u8; 256] = {
    let mut class = [0; 256];
    class[b'"' as usize] = IN_STRING | OUTSIDE;
    class[b'\\' as usize] = IN_STRING;
    class[b'{' as usize] = OUTSIDE;
    class[b'}' as usize] = OUTSIDE;
    class[b'[' as usize] = OUTSIDE;
    class[b']' as usize] = OUTSIDE;
    class
};

/// What the scanner finds, as it finds it. An error from the sink stops
/// the scan and is its result.
pub(super) trait Sink {
    /// One complete element of `traceEvents` (any JSON value) that starts
    /// at byte offset `at`, or `None` when it was larger than
    /// [`MAX_VALUE`] (lenient scans only).
    fn event(&mut self, at: u64, bytes: Option<&[u8]>) -> Result<()>;
    /// The last element of `traceEvents`, cut by the end of the input
    /// (lenient scans only).
    fn truncated_event(&mut self) -> Result<()>;
    /// Whether the value of top-level field `key` is wanted by
    /// [`field`](Sink::field) (others are skipped unread).
    fn wants(&self, key: &str) -> bool;
    /// A wanted top-level field whose value starts at byte offset `at`, or
    /// `None` for its value when it was larger than [`MAX_VALUE`] or cut by
    /// the end of the input (lenient scans only).
    fn field(&mut self, key: &str, at: u64, value: Option<&[u8]>) -> Result<()>;
}

/// How much the scanner forgives (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Syntax {
    /// Other tools' files: whatever Chrome and Perfetto open.
    Lenient,
    /// Keel's own files: well-formed JSON.
    Strict,
}

/// How the input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Well-formed to the end.
    Complete,
    /// The input ended inside `traceEvents` or the top-level object (as
    /// Chrome's own unfinished traces do; lenient scans only).
    Unterminated,
}

struct Scanner<R> {
    input: R,
    strict: bool,
    /// The largest value kept.
    limit: usize,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Input bytes before `buf[0]`.
    base: u64,
    eof: bool,
    /// Where the value being kept starts in `buf`, while one is.
    keep_from: Option<usize>,
    /// The kept value's bytes that were before the last refill.
    kept: Vec<u8>,
    /// The kept value outgrew the limit.
    overflow: bool,
}

/// Scans a JSON trace from `input` with `syntax`, telling `sink` what it
/// finds.
pub(super) fn scan(input: impl Read, syntax: Syntax, sink: &mut impl Sink) -> Result<Ending> {
    let strict = syntax == Syntax::Strict;
    let mut s = Scanner {
        input,
        strict,
        limit: if strict { usize::MAX } else { MAX_VALUE },
        buf: vec![0; BLOCK],
        pos: 0,
        end: 0,
        base: 0,
        eof: false,
        keep_from: None,
        kept: Vec::new(),
        overflow: false,
    };
    // A UTF-8 byte order mark, as some editors write.
    if s.peek()? == Some(0xef) && s.buf[s.pos..s.end].starts_with(&[0xef, 0xbb, 0xbf]) {
        s.pos += 3;
    }
    s.skip_ws()?;
    let ending = match s.peek()? {
        Some(b'[') => {
            s.pos += 1;
            s.events(sink)?
        }
        Some(b'{') => {
            s.pos += 1;
            s.object(sink)?
        }
        Some(b) => {
            return Err(s.error(format!(
                "expected a JSON trace (an object with \"traceEvents\" or an array of events), found {}",
                describe_byte(b)
            )));
        }
        None => {
            return Err(Error::Format(
                "expected a JSON trace, found an empty file".to_owned(),
            ));
        }
    };
    if strict {
        s.skip_ws()?;
        if let Some(b) = s.peek()? {
            return Err(s.error(format!(
                "expected the end of the file after the trace, found {}",
                describe_byte(b)
            )));
        }
    }
    Ok(ending)
}

/// [`scan`], with the input read on a thread of its own a few blocks
/// ahead.
pub(super) fn scan_ahead(
    input: impl Read + Send,
    syntax: Syntax,
    sink: &mut impl Sink,
) -> Result<Ending> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        scope.spawn(move || read_ahead(input, &tx));
        // The receiver goes when the scan ends, which stops the reader.
        scan(
            BlockReader {
                blocks: rx,
                block: Vec::new(),
                pos: 0,
            },
            syntax,
            sink,
        )
    })
}

/// Bytes read ahead at a time.
const READ_AHEAD: usize = 1 << 20;

/// Reads `input` in blocks into `tx` until its end, an error, or the
/// receiver going away (the scan stopped).
fn read_ahead(mut input: impl Read, tx: &std::sync::mpsc::SyncSender<std::io::Result<Vec<u8>>>) {
    // Small first blocks, so small inputs cost little.
    let mut size = 64 << 10;
    loop {
        let mut block = vec![0; size];
        size = (size * 2).min(READ_AHEAD);
        let mut n = 0;
        while n < block.len() {
            match input.read(&mut block[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        if n == 0 {
            return;
        }
        block.truncate(n);
        if tx.send(Ok(block)).is_err() {
            return;
        }
    }
}

/// The blocks [`read_ahead`] sends, as a reader.
struct BlockReader {
    blocks: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    block: Vec<u8>,
    pos: usize,
}

impl Read for BlockReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.block.len() {
            match self.blocks.recv() {
                Ok(block) => {
                    self.block = block?;
                    self.pos = 0;
                }
                // The reader is done.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

/// What the scanner found where it wanted something else.
fn describe(found: Option<u8>) -> String {
    match found {
        Some(b) => describe_byte(b),
        None => "the end of the file (truncated?)".to_owned(),
    }
}

impl<R: Read> Scanner<R> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn error(&self, message: String) -> Error {
        Error::Format(format!("{message} at byte offset {}", self.offset()))
    }

    /// Reads more input; false at its end.
    fn refill(&mut self) -> Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if let Some(from) = self.keep_from {
            if !self.overflow {
                self.kept.extend_from_slice(&self.buf[from..self.end]);
                if self.kept.len() > self.limit {
                    self.overflow = true;
                    self.kept = Vec::new();
                }
            }
            self.keep_from = Some(0);
        }
        self.base += self.end as u64;
        self.pos = 0;
        self.end = 0;
        loop {
            match self.input.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::Format(format!(
                        "could not read the trace at byte offset {}: {e}",
                        self.base
                    )));
                }
            }
        }
    }

    fn peek(&mut self) -> Result<Option<u8>> {
        if self.pos == self.end && !self.refill()? {
            return Ok(None);
        }
        Ok(Some(self.buf[self.pos]))
    }

    fn skip_ws(&mut self) -> Result<()> {
        loop {
            while self.pos < self.end {
                if !matches!(self.buf[self.pos], b' ' | b'\n' | b'\r' | b'\t') {
                    return Ok(());
                }
                self.pos += 1;
            }
            if !self.refill()? {
                return Ok(());
            }
        }
    }

    fn keep(&mut self) {
        self.keep_from = Some(self.pos);
        self.kept.clear();
        self.overflow = false;
    }

    /// The bytes kept since [`keep`](Self::keep), `None` past the limit.
    fn kept(&mut self) -> Option<&[u8]> {
        let from = self.keep_from.take().unwrap_or(self.pos);
        if self.overflow || self.kept.len().saturating_add(self.pos - from) > self.limit {
            return None;
        }
        if self.kept.is_empty() {
            Some(&self.buf[from..self.pos])
        } else {
            self.kept.extend_from_slice(&self.buf[from..self.pos]);
            Some(&self.kept)
        }
    }

    /// Skips one JSON value (which must start here); false when the input
    /// ended inside it. Only strings, escapes and nesting are tracked: a
    /// value that is not valid JSON is skipped as far as its brackets go,
    /// and its parser reports it.
    fn skip_value(&mut self) -> Result<bool> {
        let Some(first) = self.peek()? else {
            return Ok(false);
        };
        if !matches!(first, b'{' | b'[' | b'"') {
            // A scalar (or garbage): up to the next delimiter.
            loop {
                while self.pos < self.end {
                    if matches!(
                        self.buf[self.pos],
                        b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t' | b'{' | b'[' | b'"'
                    ) {
                        return Ok(true);
                    }
                    self.pos += 1;
                }
                if !self.refill()? {
                    return Ok(true);
                }
            }
        }
        let mut depth = 0usize;
        let mut in_string = false;
        // The byte after a backslash that ended the last block.
        let mut escape = false;
        loop {
            let chunk = &self.buf[self.pos..self.end];
            let mut i = usize::from(escape);
            escape = false;
            while i < chunk.len() {
                // Runs of bytes that cannot end a string or change the
                // depth are passed over at once.
                let mask = if in_string { IN_STRING } else { OUTSIDE };
                while i < chunk.len() && CLASS[usize::from(chunk[i])] & mask == 0 {
                    i += 1;
                }
                let Some(&b) = chunk.get(i) else {
                    break;
                };
                i += 1;
                match (in_string, b) {
                    (true, b'\\') => {
                        if i < chunk.len() {
                            i += 1;
                        } else {
                            escape = true;
                        }
                    }
                    (true, _) => {
                        in_string = false;
                        if depth == 0 {
                            self.pos += i;
                            return Ok(true);
                        }
                    }
                    (false, b'"') => in_string = true,
                    (false, b'{' | b'[') => depth += 1,
                    (false, _) => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            self.pos += i;
                            return Ok(true);
                        }
                    }
                }
            }
            self.pos = self.end;
            if !self.refill()? {
                return Ok(false);
            }
        }
    }

    /// The elements of `traceEvents`, after its `[`.
    fn events(&mut self, sink: &mut impl Sink) -> Result<Ending> {
        // Strict syntax: what may come next.
        let mut first = true;
        let mut after_comma = false;
        loop {
            self.skip_ws()?;
            let found = self.peek()?;
            if self.strict {
                let wants_event = first || after_comma;
                let fine = match found {
                    Some(b']') => !after_comma,
                    Some(b',') => !wants_event,
                    Some(b'}') | None => false,
                    Some(_) => wants_event,
                };
                if !fine {
                    return Err(self.error(format!(
                        "traceEvents: expected {}, found {}",
                        match (first, after_comma) {
                            (true, _) => "an event or ']'",
                            (false, true) => "an event after ','",
                            (false, false) => "',' or ']' after an event",
                        },
                        describe(found)
                    )));
                }
            }
            match found {
                None => return Ok(Ending::Unterminated),
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Ending::Complete);
                }
                Some(b',') => {
                    self.pos += 1;
                    after_comma = true;
                }
                // A stray closing brace cannot start a value: skip it so
                // the scan always moves on.
                Some(b'}') => {
                    let at = self.offset();
                    self.pos += 1;
                    sink.event(at, Some(b"}"))?;
                }
                Some(_) => {
                    let at = self.offset();
                    self.keep();
                    (first, after_comma) = (false, false);
                    if self.skip_value()? {
                        let bytes = self.kept();
                        sink.event(at, bytes)?;
                    } else {
                        self.keep_from = None;
                        if self.strict {
                            return Err(self.error(
                                "traceEvents: expected the rest of an event, found the end of the file (truncated?)"
                                    .to_owned(),
                            ));
                        }
                        sink.truncated_event()?;
                        return Ok(Ending::Unterminated);
                    }
                }
            }
        }
    }

    /// The top-level object's fields, after its `{`.
    fn object(&mut self, sink: &mut impl Sink) -> Result<Ending> {
        let mut ending = Ending::Complete;
        let mut events = false;
        // Strict syntax: what may come next.
        let mut first = true;
        let mut after_comma = false;
        loop {
            self.skip_ws()?;
            let found = self.peek()?;
            if self.strict {
                let wants_field = first || after_comma;
                let fine = match found {
                    Some(b'}') => !after_comma,
                    Some(b',') => !wants_field,
                    Some(b'"') => wants_field,
                    _ => false,
                };
                if !fine {
                    return Err(self.error(format!(
                        "expected {} in the top-level object, found {}",
                        match (first, after_comma) {
                            (true, _) => "a field name or '}'",
                            (false, true) => "a field name after ','",
                            (false, false) => "',' or '}' after a field",
                        },
                        describe(found)
                    )));
                }
            }
            match found {
                None => {
                    ending = Ending::Unterminated;
                    break;
                }
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                Some(b',') => {
                    self.pos += 1;
                    after_comma = true;
                }
                Some(b'"') => {
                    (first, after_comma) = (false, false);
                    self.keep();
                    if !self.skip_value()? {
                        if self.strict {
                            return Err(self.error(
                                "expected a field name, found the end of the file (truncated?)"
                                    .to_owned(),
                            ));
                        }
                        ending = Ending::Unterminated;
                        break;
                    }
                    let key: String = match self.kept() {
                        Some(bytes) if bytes.len() <= MAX_VALUE => serde_json::from_slice(bytes)
                            .map_err(|_| {
                                self.error("expected a field name (a JSON string)".to_owned())
                            })?,
                        _ => {
                            return Err(self.error(format!(
                                "expected a field name, found a string longer than {MAX_VALUE} bytes"
                            )));
                        }
                    };
                    self.skip_ws()?;
                    match self.peek()? {
                        Some(b':') => self.pos += 1,
                        None if !self.strict => {
                            ending = Ending::Unterminated;
                            break;
                        }
                        found => {
                            return Err(self.error(format!(
                                "expected ':' after field \"{}\", found {}",
                                super::value::short(&key),
                                describe(found)
                            )));
                        }
                    }
                    self.skip_ws()?;
                    if key == "traceEvents" && self.peek()? == Some(b'[') {
                        if events && self.strict {
                            return Err(self.error(
                                "expected one top-level field \"traceEvents\", found a second one"
                                    .to_owned(),
                            ));
                        }
                        self.pos += 1;
                        events = true;
                        if self.events(sink)? == Ending::Unterminated {
                            ending = Ending::Unterminated;
                            break;
                        }
                    } else if sink.wants(&key) {
                        let at = self.offset();
                        self.keep();
                        if self.skip_value()? {
                            let bytes = self.kept();
                            sink.field(&key, at, bytes)?;
                        } else if self.strict {
                            return Err(self.value_error(&key));
                        } else {
                            self.keep_from = None;
                            sink.field(&key, at, None)?;
                            ending = Ending::Unterminated;
                            break;
                        }
                    } else if !self.skip_value()? {
                        if self.strict {
                            return Err(self.value_error(&key));
                        }
                        ending = Ending::Unterminated;
                        break;
                    }
                }
                Some(b) => {
                    return Err(self.error(format!(
                        "expected a field name in the top-level object, found {}",
                        describe_byte(b)
                    )));
                }
            }
        }
        if !events {
            return Err(Error::Format(
                "expected a top-level field \"traceEvents\" holding an array, found none"
                    .to_owned(),
            ));
        }
        Ok(ending)
    }

    fn value_error(&self, key: &str) -> Error {
        self.error(format!(
            "expected the value of field \"{}\", found the end of the file (truncated?)",
            super::value::short(key)
        ))
    }
}

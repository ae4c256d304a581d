//! A byte scanner over a JSON trace read from any [`Read`]: it finds the
//! top-level fields and each element of `traceEvents` without building a
//! JSON tree, so an import holds one event's bytes at a time (each is then
//! parsed on its own, see `import.rs`).
//!
//! It accepts what real files contain and Chrome and Perfetto accept: an
//! object with `traceEvents` (in any position) or a bare array of events,
//! an array left unterminated (the file simply ends; a last event cut in
//! the middle is reported as such), and trailing commas. Between events it
//! only tracks strings, escapes and nesting depth, so one damaged event
//! costs that event, not the rest of the file. Memory is bounded: an event
//! or a kept top-level field larger than [`MAX_VALUE`] is skipped, not
//! buffered.

use std::io::Read;

use crate::error::{Error, Result};

/// The largest event or top-level field kept for parsing (bytes).
pub(super) const MAX_VALUE: usize = 16 << 20;

/// Bytes read from the input at a time.
const BLOCK: usize = 1 << 20;

/// What the scanner finds, as it finds it.
pub(super) trait Sink {
    /// One complete element of `traceEvents` (any JSON value), or `None`
    /// when it was larger than [`MAX_VALUE`].
    fn event(&mut self, bytes: Option<&[u8]>);
    /// The last element of `traceEvents`, cut by the end of the input.
    fn truncated_event(&mut self);
    /// Whether the value of top-level field `key` is wanted by
    /// [`field`](Sink::field) (others are skipped unread).
    fn wants(&self, key: &str) -> bool;
    /// A wanted top-level field, or `None` for its value when it was larger
    /// than [`MAX_VALUE`] or cut by the end of the input.
    fn field(&mut self, key: &str, value: Option<&[u8]>);
}

/// How the input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Well-formed to the end.
    Complete,
    /// The input ended inside `traceEvents` or the top-level object (as
    /// Chrome's own unfinished traces do).
    Unterminated,
}

struct Scanner<R> {
    input: R,
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
    /// The kept value outgrew [`MAX_VALUE`].
    overflow: bool,
}

/// Scans a JSON trace from `input`, telling `sink` what it finds.
pub(super) fn scan(input: impl Read, sink: &mut impl Sink) -> Result<Ending> {
    let mut s = Scanner {
        input,
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
    match s.peek()? {
        Some(b'[') => {
            s.pos += 1;
            s.events(sink)
        }
        Some(b'{') => {
            s.pos += 1;
            s.object(sink)
        }
        Some(b) => Err(s.error(format!(
            "expected a JSON trace (an object with \"traceEvents\" or an array of events), found {}",
            describe_byte(b)
        ))),
        None => Err(Error::Format(
            "expected a JSON trace, found an empty file".to_owned(),
        )),
    }
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

impl<R: Read> Scanner<R> {
    fn error(&self, message: String) -> Error {
        Error::Format(format!(
            "{message} at byte offset {}",
            self.base + self.pos as u64
        ))
    }

    /// Reads more input; false at its end.
    fn refill(&mut self) -> Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if let Some(from) = self.keep_from {
            if !self.overflow {
                self.kept.extend_from_slice(&self.buf[from..self.end]);
                if self.kept.len() > MAX_VALUE {
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
        if self.overflow || self.kept.len() + (self.pos - from) > MAX_VALUE {
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
        let mut escape = false;
        loop {
            let chunk = &self.buf[self.pos..self.end];
            for (i, &b) in chunk.iter().enumerate() {
                if in_string {
                    if escape {
                        escape = false;
                    } else if b == b'\\' {
                        escape = true;
                    } else if b == b'"' {
                        in_string = false;
                        if depth == 0 {
                            self.pos += i + 1;
                            return Ok(true);
                        }
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            self.pos += i + 1;
                            return Ok(true);
                        }
                    }
                    _ => {}
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
        loop {
            self.skip_ws()?;
            match self.peek()? {
                None => return Ok(Ending::Unterminated),
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Ending::Complete);
                }
                Some(b',') => self.pos += 1,
                // A stray closing brace cannot start a value: skip it so
                // the scan always moves on.
                Some(b'}') => {
                    self.pos += 1;
                    sink.event(Some(b"}"));
                }
                Some(_) => {
                    self.keep();
                    let complete = self.skip_value()?;
                    if complete {
                        let bytes = self.kept();
                        sink.event(bytes);
                    } else {
                        self.keep_from = None;
                        sink.truncated_event();
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
        loop {
            self.skip_ws()?;
            match self.peek()? {
                None => {
                    ending = Ending::Unterminated;
                    break;
                }
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                Some(b',') => self.pos += 1,
                Some(b'"') => {
                    self.keep();
                    if !self.skip_value()? {
                        ending = Ending::Unterminated;
                        break;
                    }
                    let key: String = match self.kept() {
                        Some(bytes) => serde_json::from_slice(bytes).map_err(|_| {
                            self.error("expected a field name (a JSON string)".to_owned())
                        })?,
                        None => {
                            return Err(self.error(format!(
                                "expected a field name, found a string longer than {MAX_VALUE} bytes"
                            )));
                        }
                    };
                    self.skip_ws()?;
                    match self.peek()? {
                        Some(b':') => self.pos += 1,
                        None => {
                            ending = Ending::Unterminated;
                            break;
                        }
                        Some(b) => {
                            return Err(self.error(format!(
                                "expected ':' after field \"{}\", found {}",
                                super::decode::short(&key),
                                describe_byte(b)
                            )));
                        }
                    }
                    self.skip_ws()?;
                    if key == "traceEvents" && self.peek()? == Some(b'[') {
                        self.pos += 1;
                        events = true;
                        if self.events(sink)? == Ending::Unterminated {
                            ending = Ending::Unterminated;
                            break;
                        }
                    } else if sink.wants(&key) {
                        self.keep();
                        if self.skip_value()? {
                            let bytes = self.kept();
                            sink.field(&key, bytes);
                        } else {
                            self.keep_from = None;
                            sink.field(&key, None);
                            ending = Ending::Unterminated;
                            break;
                        }
                    } else if !self.skip_value()? {
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
}

//! Generates PyTorch memory snapshots of any size from a real one: its
//! segments and its history repeated, each copy shifted in address (by
//! 16 GiB) and in time (by the history's length), written as the pickle
//! `torch.cuda.memory._dump_snapshot` writes (protocol 4, every dict, list
//! and string memoised, each distinct frame dict written once and fetched
//! from the memo after, dict keys fetched likewise), so the result opens in
//! Python as in Keel. Each copy is a consistent history of its own
//! segments, so a generated snapshot replays with no mismatch.
//!
//! Used by `examples/big_snapshot.rs` (the 1 GB measurement).

use std::collections::HashMap;
use std::io::{self, Write};

use keel_trace::snapshot::{Action, Block, Frame, Segment, Snapshot, StackId, TraceEntry};

/// How far apart in address the copies are.
const SHIFT: u64 = 16 << 30;

/// A pickle writer that memoises as Python's pickler does.
struct Writer<W: Write> {
    out: W,
    written: u64,
    memo_len: u32,
    /// Strings written once and fetched after (dict keys, action names).
    strings: HashMap<&'static str, u32>,
    /// Frame dicts by frame index.
    frames: HashMap<usize, u32>,
}

impl<W: Write> Writer<W> {
    fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.written += b.len() as u64;
        self.out.write_all(b)
    }

    fn memoize(&mut self) -> io::Result<u32> {
        self.raw(&[0x94])?;
        self.memo_len += 1;
        Ok(self.memo_len - 1)
    }

    fn get(&mut self, id: u32) -> io::Result<()> {
        match u8::try_from(id) {
            Ok(b) => self.raw(&[b'h', b]),
            Err(_) => {
                self.raw(b"j")?;
                self.raw(&id.to_le_bytes())
            }
        }
    }

    fn int(&mut self, v: i64) -> io::Result<()> {
        if (0..256).contains(&v) {
            self.raw(&[b'K', v as u8])
        } else if (0..65536).contains(&v) {
            self.raw(b"M")?;
            self.raw(&(v as u16).to_le_bytes())
        } else if i32::try_from(v).is_ok() {
            self.raw(b"J")?;
            self.raw(&(v as i32).to_le_bytes())
        } else {
            // Python's LONG1: the shortest two's complement.
            let bytes = v.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.raw(&[0x8a, n as u8])?;
            self.raw(&bytes[..n])
        }
    }

    /// A string written fresh (and memoised, as Python does).
    fn str(&mut self, s: &str) -> io::Result<()> {
        match u8::try_from(s.len()) {
            Ok(n) => self.raw(&[0x8c, n])?,
            Err(_) => {
                self.raw(b"X")?;
                self.raw(&(s.len() as u32).to_le_bytes())?;
            }
        }
        self.raw(s.as_bytes())?;
        self.memoize().map(|_| ())
    }

    /// A string Python's pickler would find in its memo after its first
    /// time (the interned keys and action names).
    fn key(&mut self, s: &'static str) -> io::Result<()> {
        match self.strings.get(s) {
            Some(&id) => self.get(id),
            None => {
                self.str(s)?;
                self.strings.insert(s, self.memo_len - 1);
                Ok(())
            }
        }
    }

    fn dict_start(&mut self) -> io::Result<()> {
        self.raw(b"}")?;
        self.memoize()?;
        self.raw(b"(")
    }

    fn dict_end(&mut self) -> io::Result<()> {
        self.raw(b"u")
    }

    fn list_start(&mut self) -> io::Result<()> {
        self.raw(b"]")?;
        self.memoize().map(|_| ())
    }

    fn frame(&mut self, s: &Snapshot, f: usize) -> io::Result<()> {
        if let Some(&id) = self.frames.get(&f) {
            return self.get(id);
        }
        let frame: &Frame = &s.frames()[f];
        self.raw(b"}")?;
        let id = self.memoize()?;
        self.raw(b"(")?;
        self.key("name")?;
        self.str(&frame.name)?;
        self.key("filename")?;
        self.str(&frame.filename)?;
        self.key("line")?;
        self.int(frame.line)?;
        self.dict_end()?;
        self.frames.insert(f, id);
        Ok(())
    }

    fn frames(&mut self, s: &Snapshot, stack: StackId) -> io::Result<()> {
        self.list_start()?;
        for chunk in s.frame_ids(stack).chunks(1000) {
            self.raw(b"(")?;
            for &f in chunk {
                self.frame(s, f as usize)?;
            }
            self.raw(b"e")?;
        }
        Ok(())
    }
}

fn state(b: &Block) -> &'static str {
    b.state.name()
}

fn action(a: Action) -> &'static str {
    a.name()
}

/// Writes a snapshot of about `target` bytes (at least one copy of
/// `real`) to `out`: the bytes written and the trace entries.
pub fn write_snapshot(out: impl Write, real: &Snapshot, target: u64) -> io::Result<(u64, u64)> {
    // One copy's size, measured by writing it to nowhere.
    let one = write_copies(io::sink(), real, 1)?.0;
    let copies = target.div_ceil(one.max(1)).max(1);
    write_copies(out, real, copies)
}

fn write_copies(out: impl Write, real: &Snapshot, copies: u64) -> io::Result<(u64, u64)> {
    let mut w = Writer {
        out: io::BufWriter::with_capacity(1 << 20, out),
        written: 0,
        memo_len: 0,
        strings: HashMap::new(),
        frames: HashMap::new(),
    };
    let trace: &[TraceEntry] = real.device_traces.first().map_or(&[], Vec::as_slice);
    let times: Vec<i64> = trace.iter().filter_map(|e| e.time_us).collect();
    let span_us = match (times.first(), times.last()) {
        (Some(a), Some(b)) => b - a + 1000,
        _ => 0,
    };
    w.raw(&[0x80, 4])?;
    w.dict_start()?;
    w.key("segments")?;
    w.list_start()?;
    let segments: Vec<&Segment> = real.segments.iter().collect();
    let mut batch = 0;
    w.raw(b"(")?;
    for k in 0..copies {
        for g in &segments {
            if batch == 1000 {
                w.raw(b"e(")?;
                batch = 0;
            }
            batch += 1;
            let shift = k * SHIFT;
            w.dict_start()?;
            w.key("device")?;
            w.int(i64::from(g.device))?;
            w.key("address")?;
            w.int((g.address + shift) as i64)?;
            w.key("total_size")?;
            w.int(g.total_size as i64)?;
            if let Some(a) = g.allocated_size {
                w.key("allocated_size")?;
                w.int(a as i64)?;
            }
            w.key("stream")?;
            w.int(g.stream)?;
            w.key("segment_type")?;
            w.key(if g.small { "small" } else { "large" })?;
            w.key("is_expandable")?;
            w.raw(if g.expandable { &[0x88] } else { &[0x89] })?;
            w.key("frames")?;
            w.frames(real, g.stack)?;
            w.key("blocks")?;
            w.list_start()?;
            w.raw(b"(")?;
            for b in &g.blocks {
                w.dict_start()?;
                w.key("address")?;
                w.int((b.address + shift) as i64)?;
                w.key("size")?;
                w.int(b.size as i64)?;
                w.key("requested_size")?;
                w.int(b.requested_size.unwrap_or(b.size) as i64)?;
                w.key("state")?;
                w.key(state(b))?;
                w.key("frames")?;
                w.frames(real, b.stack)?;
                w.dict_end()?;
            }
            w.raw(b"e")?;
            w.dict_end()?;
        }
    }
    w.raw(b"e")?;
    w.key("device_traces")?;
    w.list_start()?;
    w.list_start()?;
    let mut batch = 0;
    w.raw(b"(")?;
    for k in 0..copies {
        for e in trace {
            if batch == 1000 {
                w.raw(b"e(")?;
                batch = 0;
            }
            batch += 1;
            let addr = match e.action {
                Action::Oom => e.addr,
                _ => e.addr + k * SHIFT,
            };
            w.dict_start()?;
            w.key("action")?;
            w.key(action(e.action))?;
            w.key("addr")?;
            w.int(addr as i64)?;
            w.key("size")?;
            w.int(e.size as i64)?;
            w.key("stream")?;
            w.int(e.stream)?;
            if let Some(t) = e.time_us {
                w.key("time_us")?;
                w.int(t + k as i64 * span_us)?;
            }
            w.key("frames")?;
            w.frames(real, e.stack)?;
            w.dict_end()?;
        }
    }
    w.raw(b"e")?;
    // device_traces is a list of one list.
    w.raw(b"a")?;
    w.dict_end()?;
    w.raw(b".")?;
    w.out.flush()?;
    Ok((w.written, copies * trace.len() as u64))
}

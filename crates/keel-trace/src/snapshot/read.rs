//! A decoded pickle into a [`Snapshot`]: the keys the model needs, checked,
//! with errors that name the path to what is wrong; frames and stacks
//! interned as they are met.

use std::collections::HashMap;

use super::pickle::{Item, Pickle, Value};
use super::{Action, Block, BlockState, Frame, Segment, Snapshot, StackId, TraceEntry};
use crate::error::{Error, Result};
use crate::model::Interner;

/// Where a value is, for errors: built only when one is reported.
type Path<'f> = &'f dyn Fn() -> String;

/// `item` as an error message shows it: its type and a short prefix.
fn found(item: Item<'_>) -> String {
    match item {
        Item::Str(s) => {
            let mut cut: String = s.chars().take(40).collect();
            if cut.len() < s.len() {
                cut.push_str("...");
            }
            format!("a str {cut:?}")
        }
        Item::Int(i) => format!("the int {i}"),
        Item::BigInt(n) => format!("an int of {n} bytes"),
        Item::Float(x) => format!("the float {x}"),
        Item::Bool(b) => format!("the bool {}", if b { "True" } else { "False" }),
        Item::None => "None".to_owned(),
        Item::Bytes(b) => format!("bytes of length {}", b.len()),
        Item::List(l) => format!("a list of {} items", l.len()),
        Item::Tuple(t) => format!("a tuple of {} items", t.len()),
        Item::Dict(d) => format!("a dict of {} keys", d.len() / 2),
    }
}

fn wrong(path: Path<'_>, expected: &str, item: Item<'_>) -> Error {
    Error::Format(format!(
        "memory snapshot: {}: expected {expected}, found {}",
        path(),
        found(item)
    ))
}

fn missing(path: Path<'_>, key: &str) -> Error {
    Error::Format(format!(
        "memory snapshot: {}: expected a key {key:?}, found none",
        path()
    ))
}

const NOT_MADE: u32 = u32::MAX;
/// Tags a frame in `Builder::made`, so an object read as a stack is never
/// taken for a frame (a damaged file may use one object as both).
const FRAME: u32 = 1 << 31;

struct Builder<'p> {
    p: &'p Pickle,
    texts: Interner,
    snap: Snapshot,
    frame_ids: HashMap<Frame, u32>,
    stack_ids: HashMap<Box<[u32]>, u32>,
    /// Per pickle object, the frame (tagged [`FRAME`]) or stack made of it
    /// ([`NOT_MADE`]: none yet): a memo-shared frame dict or frames list is
    /// read once.
    made: Vec<u32>,
    /// Stacks by where their frames list's items are: equal lists filled
    /// in one batch share their items in the pickle's arena (see
    /// [`pickle`](super::pickle)), so most entries' stacks are found here
    /// without reading their frames.
    by_items: HashMap<(usize, usize), u32>,
    scratch: Vec<u32>,
}

/// The snapshot in the pickle `input` yields.
pub(super) fn snapshot(input: impl std::io::Read) -> Result<Snapshot> {
    let p = Pickle::read(input)?;
    let mut b = Builder {
        p: &p,
        texts: Interner::default(),
        snap: Snapshot::default(),
        frame_ids: HashMap::new(),
        stack_ids: HashMap::new(),
        made: vec![NOT_MADE; p.nodes()],
        by_items: HashMap::new(),
        scratch: Vec::new(),
    };
    // Stack 0 is the empty one.
    b.snap.stacks.push((0, 0));
    b.stack_ids.insert(Box::new([]), 0);
    let root_path = || "the top level".to_owned();
    match p.get(p.root()) {
        Item::Dict(top) => {
            let segments = p
                .lookup(top, "segments")
                .ok_or_else(|| missing(&root_path, "segments"))?;
            b.segments(segments)?;
            if let Some(traces) = p.lookup(top, "device_traces") {
                b.traces(traces)?;
            }
        }
        // `torch.cuda.memory_snapshot()` before PyTorch 2.0: the segments.
        Item::List(_) => b.segments(p.root())?,
        other => {
            return Err(wrong(
                &root_path,
                "a dict with segments and device_traces (or a list of segments)",
                other,
            ));
        }
    }
    Ok(b.snap)
}

impl<'p> Builder<'p> {
    fn list(&self, v: Value, path: Path<'_>) -> Result<&'p [Value]> {
        match self.p.get(v) {
            Item::List(l) | Item::Tuple(l) => Ok(l),
            other => Err(wrong(path, "a list", other)),
        }
    }

    fn dict(&self, v: Value, path: Path<'_>) -> Result<&'p [Value]> {
        match self.p.get(v) {
            Item::Dict(d) => Ok(d),
            other => Err(wrong(path, "a dict", other)),
        }
    }

    fn int(&self, v: Value, path: Path<'_>) -> Result<i64> {
        match self.p.get(v) {
            Item::Int(i) => Ok(i),
            other => Err(wrong(path, "an integer of at most 64 bits", other)),
        }
    }

    fn uint(&self, v: Value, path: Path<'_>) -> Result<u64> {
        match self.p.get(v) {
            Item::Int(i) if i >= 0 => Ok(i as u64),
            other => Err(wrong(path, "an integer of 0 or more", other)),
        }
    }

    fn text(&mut self, v: Value, path: Path<'_>) -> Result<crate::model::Text> {
        match self.p.get(v) {
            Item::Str(s) => Ok(self.texts.intern(s)),
            other => Err(wrong(path, "a str", other)),
        }
    }

    /// The key of a dict entry, as bytes (keys that are not strings are
    /// never ones the model reads).
    fn key(&self, k: Value) -> &'p [u8] {
        self.p.str_bytes(k).unwrap_or(b"")
    }

    fn frame(&mut self, v: Value, path: Path<'_>) -> Result<u32> {
        let id = self.p.identity(v);
        if let Some(made) = id.and_then(|i| self.made.get(i as usize)).copied()
            && made != NOT_MADE
            && made & FRAME != 0
        {
            return Ok(made & !FRAME);
        }
        let d = self.dict(v, path)?;
        let (mut name, mut filename, mut line) = (None, None, None);
        for kv in d.chunks_exact(2) {
            match self.key(kv[0]) {
                b"name" => name = Some(kv[1]),
                b"filename" => filename = Some(kv[1]),
                b"line" => line = Some(kv[1]),
                _ => {}
            }
        }
        let name = name.ok_or_else(|| missing(path, "name"))?;
        let filename = filename.ok_or_else(|| missing(path, "filename"))?;
        let line = line.ok_or_else(|| missing(path, "line"))?;
        let frame = Frame {
            name: self.text(name, &|| format!("{}.name", path()))?,
            filename: self.text(filename, &|| format!("{}.filename", path()))?,
            line: self.int(line, &|| format!("{}.line", path()))?,
        };
        let next = self.snap.frames.len() as u32;
        let fid = *self.frame_ids.entry(frame).or_insert_with_key(|f| {
            self.snap.frames.push(f.clone());
            next
        });
        if let Some(i) = id {
            self.made[i as usize] = fid | FRAME;
        }
        Ok(fid)
    }

    fn stack(&mut self, v: Option<Value>, path: Path<'_>) -> Result<StackId> {
        let Some(v) = v else {
            return Ok(StackId::EMPTY);
        };
        let id = self.p.identity(v);
        if let Some(made) = id.and_then(|i| self.made.get(i as usize)).copied()
            && made & FRAME == 0
        {
            return Ok(StackId(made));
        }
        let frames = self.list(v, path)?;
        let items = (frames.as_ptr() as usize, frames.len());
        if let Some(&sid) = self.by_items.get(&items) {
            return Ok(StackId(sid));
        }
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        for (i, f) in frames.iter().enumerate() {
            ids.push(self.frame(*f, &|| format!("{}[{i}]", path()))?);
        }
        let sid = match self.stack_ids.get(&ids[..]) {
            Some(&s) => s,
            None => {
                let s = self.snap.stacks.len() as u32;
                let start = self.snap.stack_frames.len() as u32;
                self.snap.stack_frames.extend_from_slice(&ids);
                self.snap
                    .stacks
                    .push((start, self.snap.stack_frames.len() as u32));
                self.stack_ids.insert(ids.as_slice().into(), s);
                s
            }
        };
        self.scratch = ids;
        if let Some(i) = id {
            self.made[i as usize] = sid;
        }
        if !frames.is_empty() {
            self.by_items.insert(items, sid);
        }
        Ok(StackId(sid))
    }

    fn segments(&mut self, v: Value) -> Result<()> {
        let segments = self.list(v, &|| "segments".to_owned())?;
        self.snap.segments.reserve(segments.len());
        for (i, s) in segments.iter().enumerate() {
            let seg = self.segment(*s, &|| format!("segments[{i}]"))?;
            self.snap.segments.push(seg);
        }
        Ok(())
    }

    fn segment(&mut self, v: Value, path: Path<'_>) -> Result<Segment> {
        let d = self.dict(v, path)?;
        let mut seg = Segment {
            device: 0,
            address: 0,
            total_size: 0,
            allocated_size: None,
            stream: 0,
            small: false,
            expandable: false,
            stack: StackId::EMPTY,
            blocks: Vec::new(),
        };
        let (mut address, mut total, mut blocks, mut frames) = (None, None, None, None);
        for kv in d.chunks_exact(2) {
            let key = self.key(kv[0]);
            let at = || format!("{}.{}", path(), String::from_utf8_lossy(key));
            match key {
                b"device" => {
                    let dev = self.int(kv[1], &at)?;
                    seg.device = u32::try_from(dev)
                        .map_err(|_| wrong(&at, "a device index", self.p.get(kv[1])))?;
                }
                b"address" => address = Some(self.uint(kv[1], &at)?),
                b"total_size" => total = Some(self.uint(kv[1], &at)?),
                b"allocated_size" => seg.allocated_size = Some(self.uint(kv[1], &at)?),
                b"stream" => seg.stream = self.int(kv[1], &at)?,
                b"segment_type" => match self.p.get(kv[1]) {
                    Item::Str(t) => seg.small = t == "small",
                    other => return Err(wrong(&at, "a str", other)),
                },
                b"is_expandable" => match self.p.get(kv[1]) {
                    Item::Bool(b) => seg.expandable = b,
                    other => return Err(wrong(&at, "a bool", other)),
                },
                b"blocks" => blocks = Some(kv[1]),
                b"frames" => frames = Some(kv[1]),
                _ => {}
            }
        }
        seg.address = address.ok_or_else(|| missing(path, "address"))?;
        seg.total_size = total.ok_or_else(|| missing(path, "total_size"))?;
        seg.stack = self.stack(frames, &|| format!("{}.frames", path()))?;
        let blocks = blocks.ok_or_else(|| missing(path, "blocks"))?;
        let blocks = self.list(blocks, &|| format!("{}.blocks", path()))?;
        seg.blocks.reserve(blocks.len());
        // Old snapshots give no block addresses: blocks tile the segment.
        let mut next = seg.address;
        for (j, b) in blocks.iter().enumerate() {
            let block = self.block(*b, next, &|| format!("{}.blocks[{j}]", path()))?;
            next = block.address.saturating_add(block.size);
            seg.blocks.push(block);
        }
        Ok(seg)
    }

    fn block(&mut self, v: Value, next: u64, path: Path<'_>) -> Result<Block> {
        let d = self.dict(v, path)?;
        let (mut address, mut size, mut requested, mut state, mut frames, mut history) =
            (None, None, None, None, None, None);
        for kv in d.chunks_exact(2) {
            let key = self.key(kv[0]);
            let at = || format!("{}.{}", path(), String::from_utf8_lossy(key));
            match key {
                b"address" => address = Some(self.uint(kv[1], &at)?),
                b"size" => size = Some(self.uint(kv[1], &at)?),
                b"requested_size" => requested = Some(self.uint(kv[1], &at)?),
                b"state" => {
                    state = Some(match self.p.get(kv[1]) {
                        Item::Str("active_allocated") => BlockState::ActiveAllocated,
                        Item::Str("active_pending_free") => BlockState::ActivePendingFree,
                        Item::Str("inactive") => BlockState::Inactive,
                        other => {
                            return Err(wrong(
                                &at,
                                "active_allocated, active_pending_free or inactive",
                                other,
                            ));
                        }
                    })
                }
                b"frames" => frames = Some(kv[1]),
                b"history" => history = Some(kv[1]),
                _ => {}
            }
        }
        // Before PyTorch 2.1 a block's stack was its last `history` record.
        if frames.is_none()
            && let Some(h) = history
        {
            let hist = self.list(h, &|| format!("{}.history", path()))?;
            if let Some(last) = hist.last() {
                let at = || format!("{}.history[{}]", path(), hist.len() - 1);
                let rec = self.dict(*last, &at)?;
                frames = self.p.lookup(rec, "frames");
                if requested.is_none()
                    && let Some(r) = self.p.lookup(rec, "real_size")
                {
                    requested = Some(self.uint(r, &|| format!("{}.real_size", at()))?);
                }
            }
        }
        Ok(Block {
            address: address.unwrap_or(next),
            size: size.ok_or_else(|| missing(path, "size"))?,
            requested_size: requested,
            state: state.ok_or_else(|| missing(path, "state"))?,
            stack: self.stack(frames, &|| format!("{}.frames", path()))?,
        })
    }

    fn traces(&mut self, v: Value) -> Result<()> {
        let devices = self.list(v, &|| "device_traces".to_owned())?;
        for (d, t) in devices.iter().enumerate() {
            let entries = self.list(*t, &|| format!("device_traces[{d}]"))?;
            let mut out = Vec::with_capacity(entries.len());
            for (i, e) in entries.iter().enumerate() {
                out.push(self.entry(*e, &|| format!("device_traces[{d}][{i}]"))?);
            }
            self.snap.device_traces.push(out);
        }
        Ok(())
    }

    fn entry(&mut self, v: Value, path: Path<'_>) -> Result<TraceEntry> {
        let d = self.dict(v, path)?;
        let (mut action, mut addr, mut size, mut stream, mut time_us, mut frames) =
            (None, None, None, 0, None, None);
        for kv in d.chunks_exact(2) {
            let key = self.key(kv[0]);
            let at = || format!("{}.{}", path(), String::from_utf8_lossy(key));
            match key {
                b"action" => {
                    let a = self
                        .p
                        .str_bytes(kv[1])
                        .and_then(|b| std::str::from_utf8(b).ok())
                        // `free` is the one free action of snapshots before
                        // PyTorch 2.0.
                        .and_then(|n| {
                            Action::from_name(n).or((n == "free").then_some(Action::FreeCompleted))
                        });
                    action = Some(a.ok_or_else(|| {
                        wrong(
                            &at,
                            "an action (alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, snapshot, oom, user_defined)",
                            self.p.get(kv[1]),
                        )
                    })?);
                }
                b"addr" => addr = Some(self.uint(kv[1], &at)?),
                b"size" => size = Some(self.uint(kv[1], &at)?),
                b"stream" => stream = self.int(kv[1], &at)?,
                b"time_us" => time_us = Some(self.int(kv[1], &at)?),
                b"frames" => frames = Some(kv[1]),
                _ => {}
            }
        }
        Ok(TraceEntry {
            action: action.ok_or_else(|| missing(path, "action"))?,
            addr: addr.ok_or_else(|| missing(path, "addr"))?,
            size: size.ok_or_else(|| missing(path, "size"))?,
            stream,
            time_us,
            stack: self.stack(frames, &|| format!("{}.frames", path()))?,
        })
    }
}

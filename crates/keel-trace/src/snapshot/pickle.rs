//! A reader of Python pickles (protocols 2 to 5) restricted to plain data:
//! what `torch.cuda.memory._dump_snapshot` writes (dicts, lists, tuples,
//! strings, bytes, integers of any width, floats, `None` and booleans).
//!
//! # Why Keel reads pickles itself
//!
//! A snapshot's pickle is mostly memo references: every frame dict is
//! written once and then fetched with `BINGET`/`LONG_BINGET` hundreds of
//! thousands of times (the GPT-2 snapshot in `tests/data/import/` has
//! 661,306 memo fetches for 46,177 memoised objects in 3.3 MB). The
//! `serde-pickle` crate resolves a memo reference by cloning the memoised
//! value (`resolve_recursive` deep-copies it for every reference but the
//! last), so each fetched frame dict becomes a fresh tree of strings: the
//! decoded value grows with the number of references times the size of
//! what they point to, not with the input, and a 1 GB snapshot would not
//! fit in memory. It also builds a generic tree of its own `Value`s and
//! then a second one of the public `Value`s. And it does not read
//! snapshots at all: `serde_pickle::value_from_slice` (1.2.0) fails on the
//! GPT-2 snapshot, which has no recursive object, with the error
//! `Syntax(Recursive)` after 0.25 s and 44 MB; Keel reads the same file,
//! model included, in 0.03 s and 6.4 MB (peak RSS of the whole process,
//! release builds).
//!
//! Here a memo fetch is a 4-byte handle to the one decoded object, so the
//! decoded pickle is bounded by a small multiple of the input: at most one
//! 16-byte node per opcode (only containers, strings and numbers too wide
//! for 30 bits make nodes; an opcode is at least one byte), a 4-byte
//! [`Value`] per item of a container, and each string's bytes once (a
//! snapshot's strings are memoised, so they are a small part of it). The
//! input streams through a buffer of a megabyte ([`Pickle::read`]), so a
//! file is never held whole; a length field is read as far as the input
//! goes, so one claiming 4 GB costs what the input holds, no more.
//!
//! Containers keep their items in one arena, not a vector each (a
//! snapshot has millions of small dicts and lists: one allocation each
//! would cost more time than the decoding). A list filled in one batch
//! whose items equal an earlier such list's shares its items (a snapshot's
//! frames lists repeat: the GPT-2 one has 251 distinct stacks in 16,876
//! lists); a container filled again later moves to a vector of its own,
//! so a shared range is never written.
//!
//! # What it refuses
//!
//! Anything that builds objects (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`,
//! `BUILD`, `NEWOBJ`, `INST`, `OBJ`, persistent ids, extension codes, out
//! of band buffers), sets, and protocol 0/1's text opcodes are errors
//! naming the opcode and its byte offset: a reader that cannot run Python
//! code must not return a value that differs from what Python would load.
//! So are dict keys Python could not hash (lists and dicts).

use crate::error::{Error, Result};

/// One decoded item: a 4-byte handle into its [`Pickle`]. Small integers,
/// `None` and booleans are held inline; everything else refers to a node
/// the pickle owns. Copying a `Value` never copies what it refers to (this
/// is how memo references share their object).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(u32);

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 & TAG_MASK {
            TAG_INT => write!(f, "Value::Int({})", (self.0 as i32) >> 2),
            TAG_NODE => write!(f, "Value::Node({})", self.0 >> 2),
            _ => write!(f, "Value::Const({})", self.0 >> 2),
        }
    }
}

// Note [Value encoding]: the low two bits say what a `Value` is; small
// integers (30-bit signed) and constants need no node, which keeps a
// snapshot's many sizes, line numbers and flags out of the node table.
const TAG_MASK: u32 = 0b11;
const TAG_INT: u32 = 0b00;
const TAG_NODE: u32 = 0b01;
const TAG_CONST: u32 = 0b10;
/// Marks an empty memo slot; never on the stack.
const HOLE: Value = Value(0b11);
const NONE: Value = Value(TAG_CONST);
const FALSE: Value = Value((1 << 2) | TAG_CONST);
const TRUE: Value = Value((2 << 2) | TAG_CONST);
const SMALL_MIN: i64 = -(1 << 29);
const SMALL_MAX: i64 = (1 << 29) - 1;
/// At most this many nodes (a node index has 30 bits).
const MAX_NODES: usize = 1 << 30;

/// What a [`Value`] holds, borrowed from its [`Pickle`] (see
/// [`Pickle::get`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item<'p> {
    /// Python's `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer that fits in an `i64`.
    Int(i64),
    /// An integer that does not fit in an `i64`: its width in bytes (its
    /// value is not kept; nothing in a snapshot needs one).
    BigInt(usize),
    /// A float.
    Float(f64),
    /// A string (checked UTF-8 when it was read).
    Str(&'p str),
    /// Bytes or a bytearray.
    Bytes(&'p [u8]),
    /// A list's items.
    List(&'p [Value]),
    /// A tuple's items.
    Tuple(&'p [Value]),
    /// A dict's keys and values, alternating (`k0, v0, k1, v1, ...`), in
    /// the order they were set; see [`Pickle::lookup`].
    Dict(&'p [Value]),
}

impl Item<'_> {
    /// The Python type name, for error messages (`str`, `dict`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Item::None => "None",
            Item::Bool(_) => "bool",
            Item::Int(_) | Item::BigInt(_) => "int",
            Item::Float(_) => "float",
            Item::Str(_) => "str",
            Item::Bytes(_) => "bytes",
            Item::List(_) => "list",
            Item::Tuple(_) => "tuple",
            Item::Dict(_) => "dict",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Node {
    Int(i64),
    BigInt(u32),
    Float(f64),
    /// A string's start and length in `strings`.
    Str(u64, u32),
    Bytes(u64, u32),
    /// Items at a start and length in the arena (a dict's keys and values
    /// alternate).
    List(u64, u32),
    Tuple(u64, u32),
    Dict(u64, u32),
    /// Items in a vector of their own: a list or dict filled more than
    /// once.
    ListOwned(u32),
    DictOwned(u32),
}

/// `len` items from `start` of `arena`.
fn range(arena: &[Value], start: u64, len: u32) -> &[Value] {
    &arena[start as usize..start as usize + len as usize]
}

/// A decoded pickle: the objects it built. See the module docs for what it
/// reads and what it costs.
#[derive(Debug)]
pub struct Pickle {
    /// Every string's and bytes object's bytes, end to end.
    strings: Vec<u8>,
    nodes: Vec<Node>,
    arena: Vec<Value>,
    owned: Vec<Vec<Value>>,
    root: Value,
}

impl Pickle {
    /// Decodes `input`, which must hold one pickle (anything after its
    /// `STOP` is ignored, as Python's `pickle.loads` ignores it).
    pub fn parse(input: &[u8]) -> Result<Pickle> {
        Pickle::read(input)
    }

    /// Decodes the pickle `input` yields, reading it once, a megabyte at a
    /// time (what follows its `STOP` is not decoded).
    pub fn read(input: impl std::io::Read) -> Result<Pickle> {
        Parser::new(input).run()
    }

    /// The object the pickle holds.
    pub fn root(&self) -> Value {
        self.root
    }

    /// What `v` holds.
    pub fn get(&self, v: Value) -> Item<'_> {
        match v.0 & TAG_MASK {
            TAG_INT => Item::Int(i64::from((v.0 as i32) >> 2)),
            TAG_NODE => match self.nodes[(v.0 >> 2) as usize] {
                Node::Int(i) => Item::Int(i),
                Node::BigInt(n) => Item::BigInt(n as usize),
                Node::Float(x) => Item::Float(x),
                Node::Str(s, n) => {
                    let bytes = &self.strings[s as usize..s as usize + n as usize];
                    match std::str::from_utf8(bytes) {
                        Ok(s) => Item::Str(s),
                        // Checked when read: not reached.
                        Err(_) => Item::Bytes(bytes),
                    }
                }
                Node::Bytes(s, n) => {
                    Item::Bytes(&self.strings[s as usize..s as usize + n as usize])
                }
                Node::List(s, n) => Item::List(range(&self.arena, s, n)),
                Node::Tuple(s, n) => Item::Tuple(range(&self.arena, s, n)),
                Node::Dict(s, n) => Item::Dict(range(&self.arena, s, n)),
                Node::ListOwned(i) => Item::List(&self.owned[i as usize]),
                Node::DictOwned(i) => Item::Dict(&self.owned[i as usize]),
            },
            _ => match v {
                FALSE => Item::Bool(false),
                TRUE => Item::Bool(true),
                _ => Item::None,
            },
        }
    }

    /// A number that says which object `v` is: equal for two values that
    /// are the same object (a memo reference and its original), so a
    /// caller can cache what it derived from a shared object. `None` for
    /// inline values (small integers, `None`, booleans).
    pub fn identity(&self, v: Value) -> Option<u32> {
        (v.0 & TAG_MASK == TAG_NODE).then_some(v.0 >> 2)
    }

    /// The value of string key `key` in `dict`'s items (as
    /// [`Item::Dict`] gives them): the last one set, as in Python.
    pub fn lookup(&self, dict: &[Value], key: &str) -> Option<Value> {
        dict.chunks_exact(2)
            .rev()
            .find(|kv| matches!(self.get(kv[0]), Item::Str(k) if k == key))
            .map(|kv| kv[1])
    }

    /// The UTF-8 bytes of a string value (checked when it was read), or
    /// `None` for anything else: for matching keys and names without
    /// checking their UTF-8 again.
    pub fn str_bytes(&self, v: Value) -> Option<&[u8]> {
        match self.nodes.get((v.0 >> 2) as usize) {
            Some(&Node::Str(s, n)) if v.0 & TAG_MASK == TAG_NODE => {
                Some(&self.strings[s as usize..s as usize + n as usize])
            }
            _ => None,
        }
    }

    /// How many objects were built (containers, strings and numbers too
    /// large to be inline), a measure of the decoded size.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }
}

/// The name of a pickle opcode, for error messages.
fn opcode_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'(' => "MARK",
        b'.' => "STOP",
        b'0' => "POP",
        b'1' => "POP_MARK",
        b'2' => "DUP",
        b'F' => "FLOAT",
        b'I' => "INT",
        b'J' => "BININT",
        b'K' => "BININT1",
        b'L' => "LONG",
        b'M' => "BININT2",
        b'N' => "NONE",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        b'R' => "REDUCE",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'X' => "BINUNICODE",
        b'a' => "APPEND",
        b'b' => "BUILD",
        b'c' => "GLOBAL",
        b'd' => "DICT",
        b'}' => "EMPTY_DICT",
        b'e' => "APPENDS",
        b'g' => "GET",
        b'h' => "BINGET",
        b'i' => "INST",
        b'j' => "LONG_BINGET",
        b'l' => "LIST",
        b']' => "EMPTY_LIST",
        b'o' => "OBJ",
        b'p' => "PUT",
        b'q' => "BINPUT",
        b'r' => "LONG_BINPUT",
        b's' => "SETITEM",
        b't' => "TUPLE",
        b')' => "EMPTY_TUPLE",
        b'u' => "SETITEMS",
        b'G' => "BINFLOAT",
        0x80 => "PROTO",
        0x81 => "NEWOBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x85 => "TUPLE1",
        0x86 => "TUPLE2",
        0x87 => "TUPLE3",
        0x88 => "NEWTRUE",
        0x89 => "NEWFALSE",
        0x8a => "LONG1",
        0x8b => "LONG4",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x94 => "MEMOIZE",
        0x95 => "FRAME",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

/// Bytes read and not yet decoded: a window on the input.
struct Source<R> {
    reader: R,
    /// Read and not yet consumed from `pos`.
    buf: Vec<u8>,
    pos: usize,
    /// The input offset of `buf[0]`.
    base: u64,
}

/// What the input had when it ended (the bytes left), or how reading it
/// failed.
enum Short {
    End(usize),
    Io(std::io::Error),
}

/// How much is read at a time.
const CHUNK: usize = 1 << 20;

impl<R: std::io::Read> Source<R> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The next `n` bytes.
    #[inline]
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], Short> {
        if self.buf.len() - self.pos < n {
            self.fill(n)?;
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Reads until `n` bytes are past `pos`: the buffer grows only with
    /// what the input holds, so a length field claiming more than the
    /// input costs the input's size at most.
    #[cold]
    fn fill(&mut self, n: usize) -> std::result::Result<(), Short> {
        use std::io::Read;
        self.buf.drain(..self.pos);
        self.base += self.pos as u64;
        self.pos = 0;
        let want = n.max(CHUNK) - self.buf.len();
        (&mut self.reader)
            .take(want as u64)
            .read_to_end(&mut self.buf)
            .map_err(Short::Io)?;
        if self.buf.len() < n {
            return Err(Short::End(self.buf.len()));
        }
        Ok(())
    }
}

/// The value of a little-endian two's complement integer, or its width
/// when it does not fit in an `i64`.
fn long_of(bytes: &[u8]) -> std::result::Result<i64, usize> {
    let Some(&last) = bytes.last() else {
        return Ok(0);
    };
    let fill = if last & 0x80 != 0 { 0xff } else { 0 };
    // Past 8 bytes, only sign extension still fits an i64.
    let fits = bytes.len() <= 8
        || (bytes[8..].iter().all(|&b| b == fill) && (bytes[7] & 0x80) == (fill & 0x80));
    if !fits {
        return Err(bytes.len());
    }
    let mut le = [fill; 8];
    let n = bytes.len().min(8);
    le[..n].copy_from_slice(&bytes[..n]);
    Ok(i64::from_le_bytes(le))
}

/// Hashes a key that is already a seeded hash (`Parser::lists`): as
/// itself, which saves a second hash per list.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// The decoder's state: a stack of values, the marks on it, and the memo.
struct Parser<R> {
    src: Source<R>,
    strings: Vec<u8>,
    /// Where the current opcode began (errors name it).
    at: u64,
    op: u8,
    nodes: Vec<Node>,
    arena: Vec<Value>,
    owned: Vec<Vec<Value>>,
    /// Lists filled in one batch, by a hash of their items: where an
    /// earlier one with those items is (one per hash: a collision only
    /// misses a share).
    lists: std::collections::HashMap<u64, (u64, u32), std::hash::BuildHasherDefault<Prehashed>>,
    /// Seeds that hash, so a file cannot choose its collisions.
    seed: u64,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// Memo slots by id; `HOLE` where none was put.
    memo: Vec<Value>,
    /// Ids far beyond the dense table (a hand-made pickle can use any
    /// 32-bit id): kept apart so an id of 4 billion allocates nothing.
    sparse: std::collections::HashMap<u32, Value>,
    /// Distinct ids put, as Python's `len(memo)` (the id `MEMOIZE` uses).
    memo_len: usize,
}

impl<R: std::io::Read> Parser<R> {
    fn new(reader: R) -> Self {
        Parser {
            src: Source {
                reader,
                buf: Vec::new(),
                pos: 0,
                base: 0,
            },
            strings: Vec::new(),
            at: 0,
            op: 0,
            nodes: Vec::new(),
            arena: Vec::new(),
            owned: Vec::new(),
            lists: std::collections::HashMap::default(),
            seed: {
                use std::hash::BuildHasher;
                std::collections::hash_map::RandomState::new().hash_one(0x6b65_656c_u64)
            },
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            sparse: std::collections::HashMap::new(),
            memo_len: 0,
        }
    }

    fn op_name(&self) -> String {
        match opcode_name(self.op) {
            Some(n) => n.to_owned(),
            None => format!("0x{:02x}", self.op),
        }
    }

    fn error(&self, what: impl std::fmt::Display) -> Error {
        Error::Format(format!(
            "pickle: {what} (opcode {} at byte {})",
            self.op_name(),
            self.at
        ))
    }

    /// The error for input that ended (or failed) `n` bytes short.
    fn short_input(&self, n: usize, short: Short) -> Error {
        match short {
            Short::End(have) => self.error(format_args!(
                "expected {n} more bytes, found {have} before the end of the input"
            )),
            Short::Io(e) => self.error(format_args!("could not read the input: {e}")),
        }
    }

    fn byte(&mut self) -> Result<u8> {
        match self.src.take(1) {
            Ok(b) => Ok(b[0]),
            Err(e) => Err(self.short_input(1, e)),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0; N];
        match self.src.take(N) {
            Ok(b) => out.copy_from_slice(b),
            Err(e) => return Err(self.short_input(N, e)),
        }
        Ok(out)
    }

    /// A length field of `width` bytes (little-endian).
    fn length(&mut self, width: usize) -> Result<usize> {
        let n = match width {
            1 => u64::from(self.byte()?),
            4 => u64::from(u32::from_le_bytes(self.array()?)),
            _ => u64::from_le_bytes(self.array()?),
        };
        usize::try_from(n).map_err(|_| {
            self.error(format_args!(
                "expected a length this machine can address, found {n}"
            ))
        })
    }

    fn node(&mut self, node: Node) -> Result<Value> {
        if self.nodes.len() >= MAX_NODES {
            return Err(self.error("expected at most 2^30 objects, found more"));
        }
        self.nodes.push(node);
        Ok(Value((((self.nodes.len() - 1) as u32) << 2) | TAG_NODE))
    }

    fn int(&mut self, i: i64) -> Result<Value> {
        if (SMALL_MIN..=SMALL_MAX).contains(&i) {
            Ok(Value(((i as i32) << 2) as u32 | TAG_INT))
        } else {
            self.node(Node::Int(i))
        }
    }

    /// A LONG1 or LONG4 integer of `n` bytes.
    fn long(&mut self, n: usize) -> Result<Value> {
        let value = match self.src.take(n) {
            Ok(bytes) => long_of(bytes),
            Err(e) => return Err(self.short_input(n, e)),
        };
        match value {
            Ok(i) => self.int(i),
            Err(width) => self.node(Node::BigInt(width as u32)),
        }
    }

    /// A length that fits a node's 32 bits.
    fn short(&self, len: usize) -> Result<u32> {
        u32::try_from(len).map_err(|_| {
            self.error(format_args!(
                "expected a string or bytes of less than 4 GiB, found {len} bytes"
            ))
        })
    }

    /// Copies a string's or bytes object's `len` bytes into `strings`
    /// (checked as UTF-8 for a string): its start there.
    fn text(&mut self, len: usize, utf8: bool) -> Result<u64> {
        let start = self.strings.len() as u64;
        let offset = self.src.offset();
        let bad = match self.src.take(len) {
            Ok(s) => {
                let bad = if utf8 {
                    std::str::from_utf8(s)
                        .err()
                        .map(|e| (e.valid_up_to(), s[e.valid_up_to()]))
                } else {
                    None
                };
                if bad.is_none() {
                    self.strings.extend_from_slice(s);
                }
                bad
            }
            Err(e) => return Err(self.short_input(len, e)),
        };
        match bad {
            None => Ok(start),
            Some((at, byte)) => Err(self.error(format_args!(
                "expected UTF-8 text, found byte 0x{byte:02x} at byte {}",
                offset + at as u64
            ))),
        }
    }

    fn string(&mut self, len: usize) -> Result<Value> {
        let n = self.short(len)?;
        let start = self.text(len, true)?;
        self.node(Node::Str(start, n))
    }

    fn bytes(&mut self, len: usize) -> Result<Value> {
        let n = self.short(len)?;
        let start = self.text(len, false)?;
        self.node(Node::Bytes(start, n))
    }

    fn push(&mut self, v: Value) {
        self.stack.push(v);
    }

    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() > floor
            && let Some(v) = self.stack.pop()
        {
            return Ok(v);
        }
        Err(self.error("expected a value on the stack, found none above the last mark"))
    }

    /// Where the items pushed since the last mark start on the stack; the
    /// mark is removed.
    fn pop_mark(&mut self) -> Result<usize> {
        match self.marks.pop() {
            Some(m) => Ok(m),
            None => Err(self.error("expected a MARK before it, found none")),
        }
    }

    /// The lowest stack index the current opcode may touch.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// The top `n` items, which must lie above the last mark: where they
    /// start.
    fn top_items(&self, n: usize) -> Result<usize> {
        match self.stack.len().checked_sub(n) {
            Some(from) if from >= self.floor() => Ok(from),
            _ => Err(self.error(format_args!(
                "expected {n} values on the stack above the last mark, found {}",
                self.stack.len().saturating_sub(self.floor())
            ))),
        }
    }

    /// Moves the stack's items from `from` up into the arena: their start
    /// and length there. A list's items (`share`) reuse an earlier equal
    /// range.
    fn store(&mut self, from: usize, share: bool) -> Result<(u64, u32)> {
        let items = &self.stack[from..];
        let len = u32::try_from(items.len())
            .map_err(|_| self.error("expected fewer than 2^32 items in a container"))?;
        let hash = share.then(|| {
            let mut h = self.seed;
            for v in items {
                h = (h.rotate_left(5) ^ u64::from(v.0)).wrapping_mul(0x517c_c1b7_2722_0a95);
            }
            h ^ u64::from(len)
        });
        if let Some(h) = hash
            && let Some(&(start, n)) = self.lists.get(&h)
            && range(&self.arena, start, n) == items
        {
            self.stack.truncate(from);
            return Ok((start, n));
        }
        let start = self.arena.len() as u64;
        self.arena.extend_from_slice(items);
        self.stack.truncate(from);
        if let Some(h) = hash {
            self.lists.insert(h, (start, len));
        }
        Ok((start, len))
    }

    fn describe(&self, v: Value) -> &'static str {
        match v.0 & TAG_MASK {
            TAG_NODE => match &self.nodes[(v.0 >> 2) as usize] {
                Node::Int(_) | Node::BigInt(_) => "an int",
                Node::Float(_) => "a float",
                Node::Str(..) => "a str",
                Node::Bytes(..) => "bytes",
                Node::List(..) | Node::ListOwned(_) => "a list",
                Node::Tuple(..) => "a tuple",
                Node::Dict(..) | Node::DictOwned(_) => "a dict",
            },
            TAG_INT => "an int",
            _ if v == NONE => "None",
            _ => "a bool",
        }
    }

    /// Checks that the items from `from` up are key-value pairs with keys
    /// Python could hash.
    fn pairs(&self, from: usize) -> Result<()> {
        let items = &self.stack[from..];
        if !items.len().is_multiple_of(2) {
            return Err(self.error(format_args!(
                "expected keys and values in pairs, found {} items",
                items.len()
            )));
        }
        for &key in items.iter().step_by(2) {
            if key.0 & TAG_MASK == TAG_NODE
                && matches!(
                    self.nodes[(key.0 >> 2) as usize],
                    Node::List(..) | Node::ListOwned(_) | Node::Dict(..) | Node::DictOwned(_)
                )
            {
                return Err(self.error(format_args!(
                    "expected a hashable dict key, found {}",
                    self.describe(key)
                )));
            }
        }
        Ok(())
    }

    /// Adds the stack's items from `from` up to the list (or, for `dict`,
    /// the dict) just below them.
    fn extend(&mut self, from: usize, dict: bool) -> Result<()> {
        let Some(at) = from.checked_sub(1).filter(|&t| t >= self.floor()) else {
            return Err(self.error(format_args!(
                "expected a {} on the stack to add to, found none",
                if dict { "dict" } else { "list" }
            )));
        };
        let target = self.stack[at];
        let found = self.describe(target);
        let wrong = |p: &Self| {
            p.error(format_args!(
                "expected a {} to add to, found {found}",
                if dict { "dict" } else { "list" }
            ))
        };
        if target.0 & TAG_MASK != TAG_NODE {
            return Err(wrong(self));
        }
        let t = (target.0 >> 2) as usize;
        match (self.nodes[t], dict) {
            (Node::List(_, 0), false) => {
                let (s, n) = self.store(from, true)?;
                self.nodes[t] = Node::List(s, n);
            }
            (Node::Dict(_, 0), true) => {
                let (s, n) = self.store(from, false)?;
                self.nodes[t] = Node::Dict(s, n);
            }
            (Node::List(s, n), false) | (Node::Dict(s, n), true) => {
                let i = u32::try_from(self.owned.len())
                    .map_err(|_| self.error("expected fewer than 2^32 containers"))?;
                let mut items = range(&self.arena, s, n).to_vec();
                items.extend_from_slice(&self.stack[from..]);
                self.stack.truncate(from);
                self.owned.push(items);
                self.nodes[t] = if dict {
                    Node::DictOwned(i)
                } else {
                    Node::ListOwned(i)
                };
            }
            (Node::ListOwned(i), false) | (Node::DictOwned(i), true) => {
                self.owned[i as usize].extend_from_slice(&self.stack[from..]);
                self.stack.truncate(from);
            }
            _ => return Err(wrong(self)),
        }
        Ok(())
    }

    fn put(&mut self, id: u32) -> Result<()> {
        let top = match self.stack.last() {
            Some(&v) => v,
            None => return Err(self.error("expected a value to memoise, found an empty stack")),
        };
        let i = id as usize;
        // Dense up to a little past the ids seen so far, and never more
        // slots than bytes read (so the table stays within 4 bytes per
        // input byte); anything further goes to the sparse table.
        if i < self.memo.len() + 4096 && i as u64 <= self.src.offset() {
            if i >= self.memo.len() {
                self.memo.resize(i + 1, HOLE);
            }
            if self.memo[i] == HOLE {
                self.memo_len += 1;
            }
            self.memo[i] = top;
        } else if self.sparse.insert(id, top).is_none() {
            self.memo_len += 1;
        }
        Ok(())
    }

    #[inline]
    fn get_memo(&mut self, id: u32) -> Result<()> {
        if let Some(&v) = self.memo.get(id as usize)
            && v != HOLE
        {
            self.stack.push(v);
            return Ok(());
        }
        match self.sparse.get(&id) {
            Some(&v) => {
                self.stack.push(v);
                Ok(())
            }
            None => Err(self.error(format_args!(
                "expected memo id {id} to have been put, found nothing there"
            ))),
        }
    }

    fn run(mut self) -> Result<Pickle> {
        loop {
            self.at = self.src.offset();
            let op = match self.src.take(1) {
                Ok(b) => b[0],
                Err(Short::End(_)) => {
                    return Err(Error::Format(format!(
                        "pickle: expected an opcode (the pickle ends with STOP), found the end of the input at byte {}",
                        self.at
                    )));
                }
                Err(e) => return Err(self.short_input(1, e)),
            };
            self.op = op;
            match self.op {
                0x80 => {
                    let v = self.byte()?;
                    if v > 5 {
                        return Err(self
                            .error(format_args!("expected protocol 2 to 5, found protocol {v}")));
                    }
                }
                0x95 => {
                    // Frames only group opcodes for buffered reading.
                    self.array::<8>()?;
                }
                b'.' => {
                    let root = self.pop()?;
                    return Ok(Pickle {
                        strings: self.strings,
                        nodes: self.nodes,
                        arena: self.arena,
                        owned: self.owned,
                        root,
                    });
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    if self.marks.last() == Some(&self.stack.len()) {
                        self.marks.pop();
                    } else {
                        self.pop()?;
                    }
                }
                b'1' => {
                    let m = self.pop_mark()?;
                    self.stack.truncate(m);
                }
                b'2' => {
                    let v = self.pop()?;
                    self.push(v);
                    self.push(v);
                }
                b'N' => self.push(NONE),
                0x88 => self.push(TRUE),
                0x89 => self.push(FALSE),
                b'J' => {
                    let i = i32::from_le_bytes(self.array()?);
                    let v = self.int(i64::from(i))?;
                    self.push(v);
                }
                b'K' => {
                    let i = self.byte()?;
                    let v = self.int(i64::from(i))?;
                    self.push(v);
                }
                b'M' => {
                    let i = u16::from_le_bytes(self.array()?);
                    let v = self.int(i64::from(i))?;
                    self.push(v);
                }
                0x8a => {
                    let n = self.length(1)?;
                    let v = self.long(n)?;
                    self.push(v);
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.array()?);
                    if n < 0 {
                        return Err(
                            self.error(format_args!("expected a length of 0 or more, found {n}"))
                        );
                    }
                    let v = self.long(n as usize)?;
                    self.push(v);
                }
                b'G' => {
                    let x = f64::from_be_bytes(self.array()?);
                    let v = self.node(Node::Float(x))?;
                    self.push(v);
                }
                0x8c => {
                    let n = self.length(1)?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                b'X' => {
                    let n = self.length(4)?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                0x8d => {
                    let n = self.length(8)?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                b'C' => {
                    let n = self.length(1)?;
                    let v = self.bytes(n)?;
                    self.push(v);
                }
                b'B' => {
                    let n = self.length(4)?;
                    let v = self.bytes(n)?;
                    self.push(v);
                }
                0x8e | 0x96 => {
                    let n = self.length(8)?;
                    let v = self.bytes(n)?;
                    self.push(v);
                }
                b')' => {
                    let v = self.node(Node::Tuple(0, 0))?;
                    self.push(v);
                }
                0x85..=0x87 => {
                    let from = self.top_items(usize::from(self.op - 0x84))?;
                    let (s, n) = self.store(from, false)?;
                    let v = self.node(Node::Tuple(s, n))?;
                    self.push(v);
                }
                b't' => {
                    let from = self.pop_mark()?;
                    let (s, n) = self.store(from, false)?;
                    let v = self.node(Node::Tuple(s, n))?;
                    self.push(v);
                }
                b']' => {
                    let v = self.node(Node::List(0, 0))?;
                    self.push(v);
                }
                b'l' => {
                    let from = self.pop_mark()?;
                    let (s, n) = self.store(from, true)?;
                    let v = self.node(Node::List(s, n))?;
                    self.push(v);
                }
                b'a' => {
                    let from = self.top_items(1)?;
                    self.extend(from, false)?;
                }
                b'e' => {
                    let from = self.pop_mark()?;
                    self.extend(from, false)?;
                }
                b'}' => {
                    let v = self.node(Node::Dict(0, 0))?;
                    self.push(v);
                }
                b'd' => {
                    let from = self.pop_mark()?;
                    self.pairs(from)?;
                    let (s, n) = self.store(from, false)?;
                    let v = self.node(Node::Dict(s, n))?;
                    self.push(v);
                }
                b's' => {
                    let from = self.top_items(2)?;
                    self.pairs(from)?;
                    self.extend(from, true)?;
                }
                b'u' => {
                    let from = self.pop_mark()?;
                    self.pairs(from)?;
                    self.extend(from, true)?;
                }
                b'q' => {
                    let id = self.byte()?;
                    self.put(u32::from(id))?;
                }
                b'r' => {
                    let id = u32::from_le_bytes(self.array()?);
                    self.put(id)?;
                }
                0x94 => {
                    let id = u32::try_from(self.memo_len)
                        .map_err(|_| self.error("expected fewer than 2^32 memo entries"))?;
                    self.put(id)?;
                }
                b'h' => {
                    let id = self.byte()?;
                    self.get_memo(u32::from(id))?;
                }
                b'j' => {
                    let id = u32::from_le_bytes(self.array()?);
                    self.get_memo(id)?;
                }
                op => {
                    return Err(match opcode_name(op) {
                        Some(name) => Error::Format(format!(
                            "pickle: expected plain data (dicts, lists, tuples, strings, bytes, numbers, None, booleans), found opcode {name} at byte {}, which Keel does not read",
                            self.at
                        )),
                        None => Error::Format(format!(
                            "pickle: expected an opcode, found byte 0x{op:02x} at byte {}",
                            self.at
                        )),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ints_are_inline_and_large_ones_are_nodes() {
        // protocol 4: [1, -1, 2**29 - 1, 2**29, -(2**29), -(2**29) - 1, 2**63 - 1, -2**63, 2**64]
        let mut p = vec![0x80, 4, b'(', b'K', 1, b'J'];
        p.extend((-1i32).to_le_bytes());
        for v in [(1i64 << 29) - 1, 1 << 29, -(1 << 29), -(1 << 29) - 1] {
            p.push(0x8a);
            p.push(8);
            p.extend(v.to_le_bytes());
        }
        p.extend([0x8a, 8]);
        p.extend(i64::MAX.to_le_bytes());
        p.extend([0x8a, 8]);
        p.extend(i64::MIN.to_le_bytes());
        p.extend([0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend([b'l', b'.']);
        let pk = Pickle::parse(&p).expect("parses");
        let Item::List(items) = pk.get(pk.root()) else {
            panic!("a list");
        };
        let got: Vec<Item<'_>> = items.iter().map(|v| pk.get(*v)).collect();
        assert_eq!(
            got,
            [
                Item::Int(1),
                Item::Int(-1),
                Item::Int((1 << 29) - 1),
                Item::Int(1 << 29),
                Item::Int(-(1 << 29)),
                Item::Int(-(1 << 29) - 1),
                Item::Int(i64::MAX),
                Item::Int(i64::MIN),
                Item::BigInt(9),
            ]
        );
        // Only the four ints outside 30 bits, the list and the big int
        // made nodes.
        assert_eq!(pk.nodes(), 6);
    }

    #[test]
    fn a_node_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 16);
    }
}

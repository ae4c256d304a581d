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
//! then a second one of the public `Value`s.
//!
//! Here a memo fetch is a 4-byte handle to the one decoded object, so the
//! decoded pickle is bounded by a small multiple of the input: at most one
//! node per opcode (a node is 32 bytes, an opcode at least 2 bytes, and
//! only containers, strings and large numbers make nodes), a 4-byte
//! [`Value`] per pushed item, and strings borrowed from the input, never
//! copied. Length fields are checked against the bytes that remain before
//! anything is sliced, so a length claiming 4 GB costs nothing.
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

#[derive(Debug)]
enum Node {
    Int(i64),
    BigInt(usize),
    Float(f64),
    /// A string's byte range in the input.
    Str(usize, usize),
    Bytes(usize, usize),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<Value>),
}

/// A decoded pickle: the objects it built, borrowing its strings from the
/// input. See the module docs for what it reads and what it costs.
#[derive(Debug)]
pub struct Pickle<'a> {
    input: &'a [u8],
    nodes: Vec<Node>,
    root: Value,
}

impl<'a> Pickle<'a> {
    /// Decodes `input`, which must hold one pickle (anything after its
    /// `STOP` is ignored, as Python's `pickle.loads` ignores it).
    pub fn parse(input: &'a [u8]) -> Result<Pickle<'a>> {
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
            TAG_NODE => match &self.nodes[(v.0 >> 2) as usize] {
                Node::Int(i) => Item::Int(*i),
                Node::BigInt(n) => Item::BigInt(*n),
                Node::Float(x) => Item::Float(*x),
                Node::Str(s, e) => match std::str::from_utf8(&self.input[*s..*e]) {
                    Ok(s) => Item::Str(s),
                    // Checked when read: not reached.
                    Err(_) => Item::Bytes(&self.input[*s..*e]),
                },
                Node::Bytes(s, e) => Item::Bytes(&self.input[*s..*e]),
                Node::List(items) => Item::List(items),
                Node::Tuple(items) => Item::Tuple(items),
                Node::Dict(items) => Item::Dict(items),
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
            Some(Node::Str(s, e)) if v.0 & TAG_MASK == TAG_NODE => Some(&self.input[*s..*e]),
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

/// The decoder's state: a stack of values, the marks on it, and the memo.
struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
    /// Where the current opcode began (errors name it).
    at: usize,
    op: u8,
    nodes: Vec<Node>,
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

impl<'a> Parser<'a> {
    fn new(input: &'a [u8]) -> Self {
        Parser {
            input,
            pos: 0,
            at: 0,
            op: 0,
            nodes: Vec::new(),
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

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let input = self.input;
        match self.pos.checked_add(n).filter(|&end| end <= input.len()) {
            Some(end) => {
                let s = &input[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(self.error(format_args!(
                "expected {n} more bytes, found {} before the end of the input",
                input.len() - self.pos
            ))),
        }
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A length field of `width` bytes (little-endian), as a byte count
    /// that fits in what remains of the input.
    fn length(&mut self, width: usize) -> Result<usize> {
        let n = match width {
            1 => u64::from(self.byte()?),
            4 => u64::from(u32::from_le_bytes(self.array()?)),
            _ => u64::from_le_bytes(self.array()?),
        };
        let left = self.input.len() - self.pos;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= left)
            .ok_or_else(|| {
                self.error(format_args!(
                    "expected a length of at most the {left} bytes left, found {n}"
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

    /// A little-endian two's complement integer of any width.
    fn long(&mut self, bytes: &[u8]) -> Result<Value> {
        let Some(&last) = bytes.last() else {
            return self.int(0);
        };
        let fill = if last & 0x80 != 0 { 0xff } else { 0 };
        // Past 8 bytes, only sign extension still fits an i64.
        let fits = bytes.len() <= 8
            || (bytes[8..].iter().all(|&b| b == fill) && (bytes[7] & 0x80) == (fill & 0x80));
        if !fits {
            return self.node(Node::BigInt(bytes.len()));
        }
        let mut le = [fill; 8];
        let n = bytes.len().min(8);
        le[..n].copy_from_slice(&bytes[..n]);
        self.int(i64::from_le_bytes(le))
    }

    fn string(&mut self, len: usize) -> Result<Value> {
        let start = self.pos;
        let s = self.take(len)?;
        if let Err(e) = std::str::from_utf8(s) {
            let bad = start + e.valid_up_to();
            return Err(self.error(format_args!(
                "expected UTF-8 text, found byte 0x{:02x} at byte {bad}",
                self.input[bad]
            )));
        }
        self.node(Node::Str(start, start + len))
    }

    fn bytes(&mut self, len: usize) -> Result<Value> {
        let start = self.pos;
        self.take(len)?;
        self.node(Node::Bytes(start, start + len))
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

    /// The items pushed since the last mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        match self.marks.pop() {
            Some(m) => Ok(self.stack.split_off(m)),
            None => Err(self.error("expected a MARK before it, found none")),
        }
    }

    /// The node of the container on the top of the stack (below the mark
    /// for the batched opcodes).
    fn target(&mut self) -> Result<usize> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match self.stack.len().checked_sub(1) {
            Some(top) if top >= floor => {
                let v = self.stack[top];
                if v.0 & TAG_MASK == TAG_NODE {
                    return Ok((v.0 >> 2) as usize);
                }
                Err(self.error(format_args!(
                    "expected a container on the stack, found {}",
                    self.describe(v)
                )))
            }
            _ => Err(self.error("expected a container on the stack, found none")),
        }
    }

    fn describe(&self, v: Value) -> &'static str {
        match v.0 & TAG_MASK {
            TAG_NODE => match &self.nodes[(v.0 >> 2) as usize] {
                Node::Int(_) | Node::BigInt(_) => "an int",
                Node::Float(_) => "a float",
                Node::Str(..) => "a str",
                Node::Bytes(..) => "bytes",
                Node::List(_) => "a list",
                Node::Tuple(_) => "a tuple",
                Node::Dict(_) => "a dict",
            },
            TAG_INT => "an int",
            _ if v == NONE => "None",
            _ => "a bool",
        }
    }

    fn hashable(&self, key: Value) -> Result<()> {
        if key.0 & TAG_MASK == TAG_NODE
            && matches!(
                self.nodes[(key.0 >> 2) as usize],
                Node::List(_) | Node::Dict(_)
            )
        {
            return Err(self.error(format_args!(
                "expected a hashable dict key, found {}",
                self.describe(key)
            )));
        }
        Ok(())
    }

    fn append(&mut self, items: Vec<Value>) -> Result<()> {
        let t = self.target()?;
        match &mut self.nodes[t] {
            Node::List(list) => {
                list.extend(items);
                Ok(())
            }
            _ => {
                let found = self.describe(Value(((t as u32) << 2) | TAG_NODE));
                Err(self.error(format_args!("expected a list to append to, found {found}")))
            }
        }
    }

    fn set_items(&mut self, items: Vec<Value>) -> Result<()> {
        if !items.len().is_multiple_of(2) {
            return Err(self.error(format_args!(
                "expected keys and values in pairs, found {} items",
                items.len()
            )));
        }
        for k in items.iter().step_by(2) {
            self.hashable(*k)?;
        }
        let t = self.target()?;
        match &mut self.nodes[t] {
            Node::Dict(dict) => {
                dict.extend(items);
                Ok(())
            }
            _ => {
                let found = self.describe(Value(((t as u32) << 2) | TAG_NODE));
                Err(self.error(format_args!(
                    "expected a dict to set items in, found {found}"
                )))
            }
        }
    }

    fn dict_of(&mut self, items: Vec<Value>) -> Result<Value> {
        if !items.len().is_multiple_of(2) {
            return Err(self.error(format_args!(
                "expected keys and values in pairs, found {} items",
                items.len()
            )));
        }
        for k in items.iter().step_by(2) {
            self.hashable(*k)?;
        }
        self.node(Node::Dict(items))
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
        if i < self.memo.len() + 4096 && i <= self.pos {
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

    fn get_memo(&mut self, id: u32) -> Result<()> {
        let v = self
            .memo
            .get(id as usize)
            .copied()
            .filter(|&v| v != HOLE)
            .or_else(|| self.sparse.get(&id).copied());
        match v {
            Some(v) => {
                self.push(v);
                Ok(())
            }
            None => Err(self.error(format_args!(
                "expected memo id {id} to have been put, found nothing there"
            ))),
        }
    }

    fn run(mut self) -> Result<Pickle<'a>> {
        loop {
            self.at = self.pos;
            if self.pos >= self.input.len() {
                self.op = 0;
                return Err(Error::Format(format!(
                    "pickle: expected an opcode (the pickle ends with STOP), found the end of the input at byte {}",
                    self.pos
                )));
            }
            self.op = self.input[self.pos];
            self.pos += 1;
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
                        input: self.input,
                        nodes: self.nodes,
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
                    self.pop_mark()?;
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
                    let bytes = self.take(n)?;
                    let v = self.long(bytes)?;
                    self.push(v);
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.array()?);
                    if n < 0 {
                        return Err(
                            self.error(format_args!("expected a length of 0 or more, found {n}"))
                        );
                    }
                    let left = self.input.len() - self.pos;
                    if n as usize > left {
                        return Err(self.error(format_args!(
                            "expected a length of at most the {left} bytes left, found {n}"
                        )));
                    }
                    let bytes = self.take(n as usize)?;
                    let v = self.long(bytes)?;
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
                    let v = self.node(Node::Tuple(Vec::new()))?;
                    self.push(v);
                }
                0x85..=0x87 => {
                    let n = usize::from(self.op - 0x84);
                    let mut items = vec![NONE; n];
                    for slot in items.iter_mut().rev() {
                        *slot = self.pop()?;
                    }
                    let v = self.node(Node::Tuple(items))?;
                    self.push(v);
                }
                b't' => {
                    let items = self.pop_mark()?;
                    let v = self.node(Node::Tuple(items))?;
                    self.push(v);
                }
                b']' => {
                    let v = self.node(Node::List(Vec::new()))?;
                    self.push(v);
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    let v = self.node(Node::List(items))?;
                    self.push(v);
                }
                b'a' => {
                    let item = self.pop()?;
                    self.append(vec![item])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.append(items)?;
                }
                b'}' => {
                    let v = self.node(Node::Dict(Vec::new()))?;
                    self.push(v);
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let v = self.dict_of(items)?;
                    self.push(v);
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    self.set_items(vec![key, value])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.set_items(items)?;
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
}

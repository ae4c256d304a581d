//! A PTX interpreter for tests: it runs the PTX Keel ships and generates
//! (keel-wgsl's output, the NVRTC-compiled tensor-core kernel) on the CPU,
//! so that a kernel's results are checked where no NVIDIA GPU is.
//!
//! It covers the instructions those files use, and refuses any other
//! with its line. A block's threads run one at a time between barriers;
//! warp-collective instructions (`mma`, `ldmatrix`, `shfl`, `vote`) run
//! when every lane of the warp has reached them. What it checks beyond
//! results, so that a kernel that happens to work on one GPU fails here:
//! - shared memory read by one thread and written by another between two
//!   barriers (either order), or written by two, is a race and an error;
//! - `cp.async` copies land at `cp.async.wait_group`, not before, so a
//!   kernel that reads a tile before waiting for it reads stale data; and
//!   they count as writes from their issue, so a copy into a buffer
//!   another thread still reads is a race;
//! - global accesses outside every buffer, and misaligned ones, are errors;
//! - two threads writing the same global byte in one launch is an error;
//! - `mma` with `.tf32` operands ignores their low 13 bits, as tensor
//!   cores do, so unrounded inputs show.
//!
//! On request (`Kernel::launch_counting_banks`) it counts the passes over
//! shared memory's 32 banks each warp request of `ld.shared`, `st.shared`
//! and `ldmatrix` takes, against the fewest its bytes need: bank
//! conflicts, a speed property a test can assert without a GPU.
//!
//! What it does not model: fused multiply-adds that ptxas contracts
//! (every add and multiply rounds on its own here), the tensor cores' own
//! summation order (`mma` sums in f64 and rounds once), and `.approx`
//! functions' exact bits (computed in f64 and rounded).

use std::collections::HashMap;

/// An error with the line of the instruction it comes from.
pub type Result<T> = std::result::Result<T, String>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    B8,
    B16,
    B32,
    B64,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    F16x2,
    Bf16,
    Bf16x2,
    Tf32,
    F32,
    F64,
    Pred,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f16x2" => Ty::F16x2,
            "bf16" => Ty::Bf16,
            "bf16x2" => Ty::Bf16x2,
            "tf32" => Ty::Tf32,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }
    fn bits(self) -> u32 {
        match self {
            Ty::B8 | Ty::U8 | Ty::S8 => 8,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::Bf16 => 16,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::Tf32 | Ty::F16x2 | Ty::Bf16x2 => 32,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 64,
            Ty::Pred => 1,
        }
    }
    fn bytes(self) -> u64 {
        u64::from(self.bits().max(8) / 8)
    }
    fn mask(self) -> u64 {
        match self.bits() {
            64 => u64::MAX,
            b => (1u64 << b) - 1,
        }
    }
    fn signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }
    fn float(self) -> bool {
        matches!(self, Ty::F16 | Ty::Bf16 | Ty::F32 | Ty::F64 | Ty::Tf32)
    }
    /// The value's bits as an integer: sign-extended for signed types.
    fn int(self, v: u64) -> i128 {
        let v = v & self.mask();
        if self.signed() {
            let shift = 128 - self.bits();
            ((v as i128) << shift) >> shift
        } else {
            v as i128
        }
    }
    fn to_f64(self, v: u64) -> f64 {
        match self {
            Ty::F16 => half::f16::from_bits(v as u16).to_f64(),
            Ty::Bf16 => half::bf16::from_bits(v as u16).to_f64(),
            Ty::F32 | Ty::Tf32 => f64::from(f32::from_bits(v as u32)),
            Ty::F64 => f64::from_bits(v),
            _ => self.int(v) as f64,
        }
    }
    /// `x` rounded to this float type (to nearest, ties to even).
    fn encode(self, x: f64) -> u64 {
        match self {
            Ty::F16 => u64::from(half::f16::from_f64(x).to_bits()),
            Ty::Bf16 => u64::from(half::bf16::from_f64(x).to_bits()),
            Ty::F32 | Ty::Tf32 => u64::from((x as f32).to_bits()),
            Ty::F64 => x.to_bits(),
            _ => unreachable!("not a float type"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    Generic,
    Global,
    Shared,
    Local,
    Param,
}

#[derive(Clone, Copy, Debug)]
enum Sreg {
    Tid(usize),
    Ntid(usize),
    Ctaid(usize),
    Nctaid(usize),
    Laneid,
    Warpid,
}

#[derive(Clone, Debug)]
enum Operand {
    Reg(usize),
    NotReg(usize),
    Imm {
        bits: u64,
        int: bool,
    },
    Sreg(Sreg),
    /// A symbol's address (shared, local) or a parameter's name.
    Sym(String),
    Vec(Vec<Operand>),
    /// `[base + offset]`.
    Addr(Box<Operand>, i64),
    /// `d|p`.
    Pair(usize, usize),
    Label(String),
    Sink,
}

#[derive(Clone, Debug)]
struct Inst {
    line: usize,
    text: String,
    guard: Option<(usize, bool)>,
    base: String,
    mods: Vec<String>,
    ops: Vec<Operand>,
    /// Resolved branch target.
    target: usize,
}

impl Inst {
    fn has(&self, m: &str) -> bool {
        self.mods.iter().any(|x| x == m)
    }
    /// The types among the modifiers, in order.
    fn types(&self) -> Vec<Ty> {
        self.mods.iter().filter_map(|m| Ty::parse(m)).collect()
    }
    fn ty(&self) -> Result<Ty> {
        self.types()
            .last()
            .copied()
            .ok_or_else(|| self.err("no type"))
    }
    fn space(&self) -> Space {
        for m in &self.mods {
            let m = m.split("::").next().unwrap_or("");
            match m {
                "global" => return Space::Global,
                "shared" => return Space::Shared,
                "local" => return Space::Local,
                "param" => return Space::Param,
                _ => {}
            }
        }
        Space::Generic
    }
    fn err(&self, what: &str) -> String {
        format!("line {}: `{}`: {what}", self.line, self.text)
    }
    fn collective(&self) -> bool {
        matches!(
            self.base.as_str(),
            "mma" | "ldmatrix" | "shfl" | "vote" | "activemask"
        )
    }
}

/// One `.entry` of a PTX module.
#[derive(Debug)]
pub struct Kernel {
    pub name: String,
    params: Vec<(String, Ty)>,
    body: Vec<Inst>,
    regs: usize,
    shared: HashMap<String, u64>,
    shared_size: u64,
    local: HashMap<String, u64>,
    local_size: u64,
}

/// Addresses of global buffers start here, each on a 256-byte boundary
/// with a 256-byte gap after it.
const GLOBAL_BASE: u64 = 0x7f00_0000_0000;

/// Global memory: the buffers a launch reads and writes.
#[derive(Default)]
pub struct Global {
    bufs: Vec<(u64, Vec<u8>)>,
    next: u64,
}

impl Global {
    /// A buffer holding `bytes`; its device address.
    pub fn alloc(&mut self, bytes: &[u8]) -> u64 {
        if self.next == 0 {
            self.next = GLOBAL_BASE;
        }
        let addr = self.next;
        self.next += (bytes.len() as u64).div_ceil(256) * 256 + 256;
        self.bufs.push((addr, bytes.to_vec()));
        addr
    }
    pub fn alloc_f32(&mut self, v: &[f32]) -> u64 {
        self.alloc(&f32_bytes(v))
    }
    /// The bytes of the buffer at `addr`.
    pub fn bytes(&self, addr: u64) -> &[u8] {
        &self
            .bufs
            .iter()
            .find(|(a, _)| *a == addr)
            .expect("a buffer's address")
            .1
    }
    pub fn read_f32(&self, addr: u64) -> Vec<f32> {
        f32s(self.bytes(addr))
    }
    fn find(&self, addr: u64, len: u64) -> Option<(usize, usize)> {
        self.bufs
            .iter()
            .position(|(a, b)| addr >= *a && addr + len <= a + b.len() as u64)
            .map(|i| (i, (addr - self.bufs[i].0) as usize))
    }
}

/// `v` as little-endian bytes, as a buffer holds it.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A buffer's little-endian bytes as f32 values.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A parameter value, in the order of the entry's `.param`s.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    U32(u32),
    U64(u64),
}

/// Shared-memory access history of one byte between barriers: who wrote
/// it and who read it in which phase.
#[derive(Clone, Copy, Default)]
struct Touch {
    w_phase: u32,
    w_tid: u32,
    r_phase: u32,
    r_tid: u32,
}
const MANY: u32 = u32::MAX;

struct Block {
    shared: Vec<u8>,
    touch: Vec<Touch>,
    /// Starts at 1 so that a zeroed `Touch` is from no phase.
    phase: u32,
    ctaid: [u32; 3],
    /// With bank counting: executions so far of each shared access by
    /// each thread, (thread, pc) -> count, and the accesses of each warp
    /// request, (warp, pc, execution) -> (address, bytes) per lane.
    counting: bool,
    execs: HashMap<(u32, usize), u32>,
    requests: HashMap<(u32, usize, u32), Vec<(u64, u64)>>,
}

/// Shared-memory bank use of one launch, per instruction: how many warp
/// requests ran, the wavefronts (passes over the 32 banks of 4 bytes) they
/// took, and the fewest their bytes could take. `ldmatrix` counts each of
/// its 8-row matrices as a request, as the hardware serves them.
#[derive(Debug, Default)]
pub struct BankReport {
    pub lines: Vec<BankLine>,
}

#[derive(Debug)]
pub struct BankLine {
    /// The line of the PTX text and the instruction.
    pub line: usize,
    pub text: String,
    pub requests: u64,
    pub wavefronts: u64,
    pub ideal: u64,
}

impl BankReport {
    /// The lines whose requests took more wavefronts than their bytes
    /// need: bank conflicts.
    pub fn conflicts(&self) -> Vec<&BankLine> {
        self.lines
            .iter()
            .filter(|l| l.wavefronts > l.ideal)
            .collect()
    }
}

/// Wavefronts of one request over its lanes' (address, bytes), and the
/// fewest its distinct 4-byte words could take: a pass serves at most
/// one word of each bank (the same word for many lanes is one).
fn wavefronts(lanes: &[(u64, u64)]) -> (u64, u64) {
    let mut words: Vec<u64> = lanes
        .iter()
        .flat_map(|&(a, n)| (a / 4..(a + n).div_ceil(4)).collect::<Vec<_>>())
        .collect();
    words.sort_unstable();
    words.dedup();
    let mut per_bank = [0u64; 32];
    for w in &words {
        per_bank[(w % 32) as usize] += 1;
    }
    let most = per_bank.iter().copied().max().unwrap_or(0);
    (most, (words.len() as u64).div_ceil(32))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Running,
    Collective,
    Barrier,
    Done,
}

struct Thread {
    regs: Vec<u64>,
    pc: usize,
    tid: [u32; 3],
    flat: u32,
    state: State,
    local: Vec<u8>,
    /// Committed `cp.async` groups, oldest first, and the open one:
    /// (destination offset in shared memory, bytes) per copy.
    groups: Vec<Vec<(u64, Vec<u8>)>>,
    open: Vec<(u64, Vec<u8>)>,
}

/// Global-memory writers of one launch: byte address -> thread.
type Writers = HashMap<u64, (u32, [u32; 3])>;

struct Launch<'a> {
    k: &'a Kernel,
    args: HashMap<&'a str, u64>,
    ntid: [u32; 3],
    nctaid: [u32; 3],
    /// With bank counting: pc -> (requests, wavefronts, ideal).
    banks: Option<std::cell::RefCell<BankCounts>>,
}

type BankCounts = HashMap<usize, (u64, u64, u64)>;

/// Parses `text` (a PTX module) and returns its entries.
pub fn parse(text: &str) -> Result<Vec<Kernel>> {
    let text = strip_comments(text);
    let mut kernels = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(".entry") {
        let after = &rest[at + ".entry".len()..];
        let open = after.find('(').ok_or("`.entry` without parameters")?;
        let name = after[..open].trim().to_owned();
        let close = after.find(')').ok_or("unclosed parameter list")?;
        let mut params = Vec::new();
        for p in after[open + 1..close].split(',') {
            let words: Vec<&str> = p.split_whitespace().collect();
            if words.is_empty() {
                continue;
            }
            let ty = words
                .iter()
                .find_map(|w| w.strip_prefix('.').and_then(Ty::parse))
                .ok_or_else(|| format!("parameter `{p}`: no type"))?;
            let pname = words.last().copied().unwrap_or_default();
            params.push((pname.to_owned(), ty));
        }
        let body_start = after[close..].find('{').ok_or("entry without a body")? + close;
        let mut depth = 0;
        let mut end = None;
        for (i, c) in after[body_start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(body_start + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.ok_or("unclosed entry body")?;
        let line0 = text[..text.len() - after.len() + body_start]
            .lines()
            .count();
        let body = &after[body_start + 1..end];
        // Module-level shared variables before the entry count as its own.
        let before = &rest[..at];
        kernels.push(parse_body(name, params, before, body, line0)?);
        rest = &after[end..];
    }
    Ok(kernels)
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                let eol = rest.find('\n').unwrap_or(rest.len());
                rest = &rest[eol..];
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                let end = rest[b..].find("*/").map_or(rest.len(), |e| b + e + 2);
                // Keep the line count.
                out.extend(rest[b..end].chars().filter(|c| *c == '\n'));
                rest = &rest[end..];
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

fn parse_body(
    name: String,
    params: Vec<(String, Ty)>,
    before: &str,
    body: &str,
    line0: usize,
) -> Result<Kernel> {
    let mut k = Kernel {
        name,
        params,
        body: Vec::new(),
        regs: 0,
        shared: HashMap::new(),
        shared_size: 0,
        local: HashMap::new(),
        local_size: 0,
    };
    let mut regs: HashMap<String, usize> = HashMap::new();
    let mut labels: HashMap<String, usize> = HashMap::new();
    let declare = |k: &mut Kernel, stmt: &str| -> Result<()> {
        // `.shared .align 16 .b8 name[size]` (or `.local`).
        let words: Vec<&str> = stmt.split_whitespace().collect();
        let space = words[0];
        let align = words
            .iter()
            .position(|w| *w == ".align")
            .and_then(|i| words.get(i + 1))
            .and_then(|a| a.parse::<u64>().ok())
            .unwrap_or(4);
        let decl = words.last().copied().unwrap_or_default();
        let ty = words
            .iter()
            .filter_map(|w| w.strip_prefix('.').and_then(Ty::parse))
            .next_back()
            .ok_or_else(|| format!("declaration `{stmt}`: no type"))?;
        let (vname, count) = match decl.find('[') {
            Some(b) => (
                &decl[..b],
                decl[b + 1..decl.len() - 1]
                    .parse::<u64>()
                    .map_err(|_| format!("declaration `{stmt}`: size"))?,
            ),
            None => (decl, 1),
        };
        let size = count * ty.bytes();
        let (map, total) = if space == ".shared" {
            (&mut k.shared, &mut k.shared_size)
        } else {
            (&mut k.local, &mut k.local_size)
        };
        let at = total.div_ceil(align) * align;
        map.insert(vname.to_owned(), at);
        *total = at + size;
        Ok(())
    };
    // Module-scope shared variables; a statement may follow directives
    // that end without a semicolon (`.address_size 64`).
    for stmt in before.split(';') {
        if let Some(at) = stmt.find(".shared") {
            declare(&mut k, stmt[at..].trim())?;
        }
    }
    let mut line = line0;
    let mut pending: Vec<(String, usize)> = Vec::new();
    for raw in body.split_inclusive(';') {
        let start_line = line
            + raw[..raw.len() - raw.trim_start().len()]
                .matches('\n')
                .count();
        line += raw.matches('\n').count();
        let mut s = raw.trim().trim_end_matches(';').trim();
        // Labels, braces of scopes.
        loop {
            s = s.trim_start_matches(['{', '}']).trim();
            let Some(colon) = s.find(':') else { break };
            let head = &s[..colon];
            if head.is_empty()
                || head.contains(char::is_whitespace)
                || head.contains('[')
                || s[colon..].starts_with("::")
            {
                break;
            }
            labels.insert(head.to_owned(), k.body.len());
            s = s[colon + 1..].trim();
        }
        let s = s.trim_start_matches(['{', '}']).trim();
        if s.is_empty() {
            continue;
        }
        if s.starts_with(".shared") || s.starts_with(".local") {
            declare(&mut k, s)?;
            continue;
        }
        if s.starts_with('.') {
            continue; // .reg, .maxntid and other directives
        }
        let inst = parse_inst(s, start_line, &mut regs)?;
        if inst.base == "bra"
            && let Some(Operand::Label(l)) = inst.ops.first()
        {
            pending.push((l.clone(), k.body.len()));
        }
        k.body.push(inst);
    }
    for (label, at) in pending {
        let target = *labels
            .get(&label)
            .ok_or_else(|| format!("branch to unknown label `{label}`"))?;
        k.body[at].target = target;
    }
    k.regs = regs.len();
    Ok(k)
}

fn parse_inst(s: &str, line: usize, regs: &mut HashMap<String, usize>) -> Result<Inst> {
    let mut s = s;
    let mut guard = None;
    if let Some(g) = s.strip_prefix('@') {
        let end = g
            .find(char::is_whitespace)
            .ok_or("guard without instruction")?;
        let (neg, name) = match g[..end].strip_prefix('!') {
            Some(n) => (true, n),
            None => (false, &g[..end]),
        };
        guard = Some((reg_index(regs, name), neg));
        s = g[end..].trim();
    }
    let (op, rest) = match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    };
    let mut parts = op.split('.');
    let base = parts.next().unwrap_or_default().to_owned();
    let mods: Vec<String> = parts.map(str::to_owned).collect();
    let ops = split_top(rest)
        .into_iter()
        .map(|o| parse_operand(o.trim(), regs))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| format!("line {line}: `{s}`: {e}"))?;
    Ok(Inst {
        line,
        text: s.to_owned(),
        guard,
        base,
        mods,
        ops,
        target: usize::MAX,
    })
}

fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(&s[start..]);
    }
    out
}

fn reg_index(regs: &mut HashMap<String, usize>, name: &str) -> usize {
    let n = regs.len();
    *regs.entry(name.to_owned()).or_insert(n)
}

fn parse_operand(o: &str, regs: &mut HashMap<String, usize>) -> Result<Operand> {
    if o == "_" {
        return Ok(Operand::Sink);
    }
    if let Some(inner) = o.strip_prefix('{') {
        let inner = inner.strip_suffix('}').ok_or("unclosed vector")?;
        return Ok(Operand::Vec(
            split_top(inner)
                .into_iter()
                .map(|e| parse_operand(e.trim(), regs))
                .collect::<Result<_>>()?,
        ));
    }
    if let Some(inner) = o.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or("unclosed address")?.trim();
        let (base, off) = match inner.find('+') {
            Some(p) => (
                inner[..p].trim(),
                parse_int(inner[p + 1..].trim()).ok_or("address offset")? as i64,
            ),
            None => (inner, 0),
        };
        return Ok(Operand::Addr(Box::new(parse_operand(base, regs)?), off));
    }
    if let Some(n) = o.strip_prefix('!') {
        return Ok(Operand::NotReg(reg_index(regs, n)));
    }
    if let Some((a, b)) = o.split_once('|') {
        return Ok(Operand::Pair(
            reg_index(regs, a.trim()),
            reg_index(regs, b.trim()),
        ));
    }
    if o.starts_with('%') {
        let sreg = |s: &str| -> Option<usize> {
            match s {
                "x" => Some(0),
                "y" => Some(1),
                "z" => Some(2),
                _ => None,
            }
        };
        if let Some((name, dim)) = o.split_once('.')
            && let Some(d) = sreg(dim)
        {
            let sr = match name {
                "%tid" => Some(Sreg::Tid(d)),
                "%ntid" => Some(Sreg::Ntid(d)),
                "%ctaid" => Some(Sreg::Ctaid(d)),
                "%nctaid" => Some(Sreg::Nctaid(d)),
                _ => None,
            };
            if let Some(sr) = sr {
                return Ok(Operand::Sreg(sr));
            }
        }
        return Ok(match o {
            "%laneid" => Operand::Sreg(Sreg::Laneid),
            "%warpid" => Operand::Sreg(Sreg::Warpid),
            _ => Operand::Reg(reg_index(regs, o)),
        });
    }
    if let Some(h) = o.strip_prefix("0f").or_else(|| o.strip_prefix("0F")) {
        let bits = u32::from_str_radix(h, 16).map_err(|_| format!("float `{o}`"))?;
        return Ok(Operand::Imm {
            bits: u64::from(bits),
            int: false,
        });
    }
    if let Some(h) = o.strip_prefix("0d").or_else(|| o.strip_prefix("0D")) {
        let bits = u64::from_str_radix(h, 16).map_err(|_| format!("double `{o}`"))?;
        return Ok(Operand::Imm { bits, int: false });
    }
    if let Some(v) = parse_int(o) {
        return Ok(Operand::Imm {
            bits: v as u64,
            int: true,
        });
    }
    if o.starts_with('$') || o.starts_with("LBB") || o.starts_with("$L") {
        return Ok(Operand::Label(o.to_owned()));
    }
    if o.chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
    {
        return Ok(Operand::Sym(o.to_owned()));
    }
    Err(format!("operand `{o}`"))
}

fn parse_int(s: &str) -> Option<i128> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let s = s.strip_suffix('U').unwrap_or(s);
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i128::from_str_radix(h, 16).ok()?
    } else if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() {
        s.parse::<i128>().ok()?
    } else {
        return None;
    };
    Some(if neg { -v } else { v })
}

/// PTX's `min` or `max` of floats: the other operand where one is NaN,
/// and -0 below +0.
fn min_max(x: f64, y: f64, max: bool) -> f64 {
    if x.is_nan() {
        y
    } else if y.is_nan() {
        x
    } else if x == y && x == 0.0 {
        if x.is_sign_negative() != max { x } else { y }
    } else if max {
        x.max(y)
    } else {
        x.min(y)
    }
}

fn ftz32(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

impl Kernel {
    /// Runs the kernel over `grid` blocks of `block` threads. `args` are
    /// the entry's parameters in order (buffer addresses from `global`).
    pub fn launch(
        &self,
        global: &mut Global,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Arg],
    ) -> Result<()> {
        self.run_launch(global, grid, block, args, false)
            .map(|_| ())
    }

    /// As [`launch`](Self::launch), counting the shared-memory bank use of
    /// every `ld.shared`, `st.shared` and `ldmatrix`.
    pub fn launch_counting_banks(
        &self,
        global: &mut Global,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Arg],
    ) -> Result<BankReport> {
        self.run_launch(global, grid, block, args, true)
    }

    fn run_launch(
        &self,
        global: &mut Global,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[Arg],
        counting: bool,
    ) -> Result<BankReport> {
        if args.len() != self.params.len() {
            return Err(format!(
                "{}: expected {} arguments, found {}",
                self.name,
                self.params.len(),
                args.len()
            ));
        }
        let args = self
            .params
            .iter()
            .zip(args)
            .map(|((n, _), a)| {
                let v = match *a {
                    Arg::U32(v) => u64::from(v),
                    Arg::U64(v) => v,
                };
                (n.as_str(), v)
            })
            .collect();
        let l = Launch {
            k: self,
            args,
            ntid: block,
            nctaid: grid,
            banks: counting.then(Default::default),
        };
        let mut writers = Writers::new();
        for z in 0..grid[2] {
            for y in 0..grid[1] {
                for x in 0..grid[0] {
                    l.block(global, &mut writers, [x, y, z])?;
                }
            }
        }
        let mut report = BankReport::default();
        if let Some(banks) = l.banks {
            let mut lines: Vec<_> = banks.into_inner().into_iter().collect();
            lines.sort_unstable_by_key(|(pc, _)| *pc);
            report.lines = lines
                .into_iter()
                .map(|(pc, (requests, wavefronts, ideal))| BankLine {
                    line: self.body[pc].line,
                    text: self.body[pc].text.clone(),
                    requests,
                    wavefronts,
                    ideal,
                })
                .collect();
        }
        Ok(report)
    }
}

impl Launch<'_> {
    fn block(&self, global: &mut Global, writers: &mut Writers, ctaid: [u32; 3]) -> Result<()> {
        let [bx, by, bz] = self.ntid;
        let count = bx * by * bz;
        let mut b = Block {
            shared: vec![0; self.k.shared_size as usize],
            touch: vec![Touch::default(); self.k.shared_size as usize],
            phase: 1,
            ctaid,
            counting: self.banks.is_some(),
            execs: HashMap::new(),
            requests: HashMap::new(),
        };
        let mut threads: Vec<Thread> = (0..count)
            .map(|flat| Thread {
                regs: vec![0; self.k.regs],
                pc: 0,
                tid: [flat % bx, (flat / bx) % by, flat / (bx * by)],
                flat,
                state: State::Running,
                local: vec![0; self.k.local_size as usize],
                groups: Vec::new(),
                open: Vec::new(),
            })
            .collect();
        loop {
            for warp in threads.chunks_mut(32) {
                self.warp(global, writers, &mut b, warp)?;
            }
            if threads.iter().all(|t| t.state == State::Done) {
                for ((_, pc, _), lanes) in b.requests.drain() {
                    self.count_request(pc, &lanes);
                }
                return Ok(());
            }
            // Every warp waits at a barrier (or is done).
            if let Some(t) = threads
                .iter()
                .find(|t| t.state != State::Barrier && t.state != State::Done)
            {
                return Err(format!("thread {} stuck in state {:?}", t.flat, t.state));
            }
            b.phase += 1;
            for t in threads.iter_mut().filter(|t| t.state == State::Barrier) {
                t.pc += 1;
                t.state = State::Running;
            }
        }
    }

    /// Adds one warp request's wavefronts to the launch's bank counts.
    fn count_request(&self, pc: usize, lanes: &[(u64, u64)]) {
        if let Some(banks) = &self.banks {
            let (got, ideal) = wavefronts(lanes);
            let mut banks = banks.borrow_mut();
            let e = banks.entry(pc).or_default();
            e.0 += 1;
            e.1 += got;
            e.2 += ideal;
        }
    }

    fn warp(
        &self,
        global: &mut Global,
        writers: &mut Writers,
        b: &mut Block,
        warp: &mut [Thread],
    ) -> Result<()> {
        loop {
            for t in warp.iter_mut().filter(|t| t.state == State::Running) {
                self.run(global, writers, b, t)?;
            }
            // Lanes at collectives: the group at the first such pc runs it
            // when every lane still running is there.
            let at: Vec<usize> = warp
                .iter()
                .filter(|t| t.state == State::Collective)
                .map(|t| t.pc)
                .collect();
            let Some(&pc) = at.first() else {
                return Ok(());
            };
            let live = warp.iter().filter(|t| t.state != State::Done).count();
            if at.len() != live || at.iter().any(|p| *p != pc) {
                let inst = &self.k.body[pc];
                return Err(inst.err(&format!(
                    "lanes of a warp reach warp-collective instructions apart ({} of {} here)",
                    at.iter().filter(|p| **p == pc).count(),
                    live
                )));
            }
            self.collective(b, warp, pc)?;
            for t in warp.iter_mut().filter(|t| t.state == State::Collective) {
                t.pc += 1;
                t.state = State::Running;
            }
        }
    }

    fn sreg(&self, b: &Block, t: &Thread, s: Sreg) -> u64 {
        u64::from(match s {
            Sreg::Tid(d) => t.tid[d],
            Sreg::Ntid(d) => self.ntid[d],
            Sreg::Ctaid(d) => b.ctaid[d],
            Sreg::Nctaid(d) => self.nctaid[d],
            Sreg::Laneid => t.flat % 32,
            Sreg::Warpid => t.flat / 32,
        })
    }

    /// The value of operand `o` read as `ty`.
    fn get(&self, inst: &Inst, b: &Block, t: &Thread, o: &Operand, ty: Ty) -> Result<u64> {
        Ok(match o {
            Operand::Reg(r) => t.regs[*r] & ty.mask(),
            Operand::NotReg(r) => u64::from(t.regs[*r] == 0),
            Operand::Imm { bits, int } => {
                if *int && ty.float() {
                    ty.encode(*bits as i64 as f64)
                } else if !*int && ty == Ty::F64 && *bits <= u64::from(u32::MAX) {
                    f64::from(f32::from_bits(*bits as u32)).to_bits()
                } else {
                    bits & ty.mask()
                }
            }
            Operand::Sreg(s) => self.sreg(b, t, *s),
            Operand::Sym(name) => {
                if let Some(v) = self.k.shared.get(name) {
                    *v
                } else if let Some(v) = self.k.local.get(name) {
                    *v
                } else if let Some(v) = self.args.get(name.as_str()) {
                    *v
                } else {
                    return Err(inst.err(&format!("unknown symbol `{name}`")));
                }
            }
            _ => return Err(inst.err("unexpected operand")),
        })
    }

    fn set(&self, t: &mut Thread, o: &Operand, ty: Ty, v: u64) {
        match o {
            Operand::Reg(r) => t.regs[*r] = v & ty.mask(),
            Operand::Sink => {}
            _ => unreachable!("destination is a register"),
        }
    }

    fn addr(&self, inst: &Inst, b: &Block, t: &Thread, o: &Operand) -> Result<u64> {
        match o {
            Operand::Addr(base, off) => {
                let v = match base.as_ref() {
                    Operand::Sym(n) if inst.space() == Space::Param => {
                        return self
                            .args
                            .get(n.as_str())
                            .copied()
                            .ok_or_else(|| inst.err("unknown parameter"));
                    }
                    other => self.get(inst, b, t, other, Ty::U64)?,
                };
                Ok(v.wrapping_add(*off as u64))
            }
            _ => Err(inst.err("expected an address")),
        }
    }

    /// Reads `n` bytes at `addr` in `space`.
    #[allow(clippy::too_many_arguments, reason = "an interpreter's memory access")]
    fn load(
        &self,
        inst: &Inst,
        global: &mut Global,
        b: &mut Block,
        t: &mut Thread,
        space: Space,
        addr: u64,
        n: u64,
    ) -> Result<u64> {
        if !addr.is_multiple_of(n) {
            return Err(inst.err(&format!("misaligned {n}-byte access at {addr:#x}")));
        }
        let mut out = [0u8; 8];
        match self.resolve(space, addr) {
            Space::Global => {
                let (i, off) = global.find(addr, n).ok_or_else(|| {
                    inst.err(&format!(
                        "global read of {n} bytes at {addr:#x} outside every buffer"
                    ))
                })?;
                out[..n as usize].copy_from_slice(&global.bufs[i].1[off..off + n as usize]);
            }
            Space::Shared => {
                let v = self.shared_read(inst, b, t.flat, addr, n)?;
                out = v.to_le_bytes();
            }
            Space::Local => {
                let a = addr as usize;
                let src = t
                    .local
                    .get(a..a + n as usize)
                    .ok_or_else(|| inst.err("local read out of range"))?;
                out[..n as usize].copy_from_slice(src);
            }
            Space::Param | Space::Generic => return Err(inst.err("unexpected state space")),
        }
        Ok(u64::from_le_bytes(out))
    }

    #[allow(clippy::too_many_arguments, reason = "an interpreter's memory access")]
    fn store(
        &self,
        inst: &Inst,
        global: &mut Global,
        writers: &mut Writers,
        b: &mut Block,
        t: &mut Thread,
        space: Space,
        addr: u64,
        n: u64,
        v: u64,
    ) -> Result<()> {
        if !addr.is_multiple_of(n) {
            return Err(inst.err(&format!("misaligned {n}-byte access at {addr:#x}")));
        }
        let bytes = v.to_le_bytes();
        match self.resolve(space, addr) {
            Space::Global => {
                let (i, off) = global.find(addr, n).ok_or_else(|| {
                    inst.err(&format!(
                        "global write of {n} bytes at {addr:#x} outside every buffer"
                    ))
                })?;
                global.bufs[i].1[off..off + n as usize].copy_from_slice(&bytes[..n as usize]);
                for a in addr..addr + n {
                    let me = (t.flat, b.ctaid);
                    if let Some(w) = writers.insert(a, me)
                        && w != me
                    {
                        return Err(inst.err(&format!(
                                "threads {} of block {:?} and {} of block {:?} both write global byte {a:#x}",
                                w.0, w.1, me.0, me.1
                            )));
                    }
                }
            }
            Space::Shared => self.shared_write(inst, b, t.flat, addr, &bytes[..n as usize])?,
            Space::Local => {
                let a = addr as usize;
                t.local
                    .get_mut(a..a + n as usize)
                    .ok_or_else(|| inst.err("local write out of range"))?
                    .copy_from_slice(&bytes[..n as usize]);
            }
            Space::Param | Space::Generic => return Err(inst.err("unexpected state space")),
        }
        Ok(())
    }

    fn shared_read(&self, inst: &Inst, b: &mut Block, tid: u32, addr: u64, n: u64) -> Result<u64> {
        if addr + n > self.k.shared_size {
            return Err(inst.err(&format!(
                "shared read at {addr:#x} past {} bytes",
                self.k.shared_size
            )));
        }
        let a = addr as usize;
        for i in a..a + n as usize {
            let tc = &mut b.touch[i];
            if tc.w_phase == b.phase && tc.w_tid != tid {
                return Err(inst.err(&format!(
                    "race: thread {tid} reads shared byte {i:#x} that thread {} wrote since the last barrier",
                    tc.w_tid
                )));
            }
            if tc.r_phase == b.phase && tc.r_tid != tid {
                tc.r_tid = MANY;
            } else {
                tc.r_phase = b.phase;
                tc.r_tid = tid;
            }
        }
        let mut out = [0u8; 8];
        out[..n as usize].copy_from_slice(&b.shared[a..a + n as usize]);
        Ok(u64::from_le_bytes(out))
    }

    fn shared_write(
        &self,
        inst: &Inst,
        b: &mut Block,
        tid: u32,
        addr: u64,
        bytes: &[u8],
    ) -> Result<()> {
        self.shared_claim(inst, b, tid, addr, bytes.len() as u64)?;
        b.shared[addr as usize..addr as usize + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// Records a write of `n` shared bytes by `tid` in the current phase,
    /// reporting a race with another thread's access since the last
    /// barrier, without changing them: a `cp.async` claims its bytes when
    /// it is issued, since the hardware may land them at any time until
    /// the wait, and writes them when they land.
    fn shared_claim(&self, inst: &Inst, b: &mut Block, tid: u32, addr: u64, n: u64) -> Result<()> {
        if addr + n > self.k.shared_size {
            return Err(inst.err(&format!(
                "shared write at {addr:#x} past {} bytes",
                self.k.shared_size
            )));
        }
        for i in addr as usize..(addr + n) as usize {
            let tc = &mut b.touch[i];
            if tc.w_phase == b.phase && tc.w_tid != tid {
                return Err(inst.err(&format!(
                    "race: threads {} and {tid} write shared byte {i:#x} between barriers",
                    tc.w_tid
                )));
            }
            if tc.r_phase == b.phase && tc.r_tid != tid {
                return Err(inst.err(&format!(
                    "race: thread {tid} writes shared byte {i:#x} that thread {} read since the last barrier",
                    if tc.r_tid == MANY { "(several)".to_owned() } else { tc.r_tid.to_string() }
                )));
            }
            tc.w_phase = b.phase;
            tc.w_tid = tid;
        }
        Ok(())
    }

    fn resolve(&self, space: Space, addr: u64) -> Space {
        match space {
            Space::Generic if addr >= GLOBAL_BASE => Space::Global,
            Space::Generic => Space::Shared,
            s => s,
        }
    }

    /// Runs `t` until it exits, waits at a barrier or reaches a
    /// warp-collective instruction.
    fn run(
        &self,
        global: &mut Global,
        writers: &mut Writers,
        b: &mut Block,
        t: &mut Thread,
    ) -> Result<()> {
        loop {
            let inst = self
                .k
                .body
                .get(t.pc)
                .ok_or_else(|| format!("{}: ran past the end", self.k.name))?;
            if let Some((p, neg)) = inst.guard
                && (t.regs[p] != 0) == neg
            {
                t.pc += 1;
                continue;
            }
            match inst.base.as_str() {
                "bar" if inst.has("warp") => {
                    t.pc += 1;
                    continue;
                }
                "bar" | "barrier" => {
                    t.state = State::Barrier;
                    return Ok(());
                }
                "ret" | "exit" => {
                    t.state = State::Done;
                    return Ok(());
                }
                "bra" => {
                    t.pc = inst.target;
                    continue;
                }
                _ if inst.collective() => {
                    t.state = State::Collective;
                    return Ok(());
                }
                _ => {}
            }
            self.step(global, writers, b, t, inst)?;
            t.pc += 1;
        }
    }

    fn step(
        &self,
        global: &mut Global,
        writers: &mut Writers,
        b: &mut Block,
        t: &mut Thread,
        inst: &Inst,
    ) -> Result<()> {
        let ops = &inst.ops;
        let op = |i: usize| -> Result<&Operand> {
            ops.get(i).ok_or_else(|| inst.err("missing operand"))
        };
        match inst.base.as_str() {
            "ld" | "st" => {
                let ty = inst.ty()?;
                let space = inst.space();
                let (val, at) = if inst.base == "ld" { (0, 1) } else { (1, 0) };
                if space == Space::Param {
                    let a = self.addr(inst, b, t, op(at)?)?;
                    self.set(t, op(val)?, ty, a);
                    return Ok(());
                }
                let addr = self.addr(inst, b, t, op(at)?)?;
                let n = ty.bytes();
                let lanes: Vec<Operand> = match op(val)? {
                    Operand::Vec(v) => v.clone(),
                    o => vec![o.clone()],
                };
                let width = n * lanes.len() as u64;
                if addr % width != 0 {
                    return Err(inst.err(&format!("misaligned {width}-byte access at {addr:#x}")));
                }
                if b.counting && self.resolve(space, addr) == Space::Shared {
                    let nth = b.execs.entry((t.flat, t.pc)).or_default();
                    let key = (t.flat / 32, t.pc, *nth);
                    *nth += 1;
                    b.requests.entry(key).or_default().push((addr, width));
                }
                for (i, o) in lanes.iter().enumerate() {
                    let a = addr + n * i as u64;
                    if inst.base == "ld" {
                        let v = self.load(inst, global, b, t, space, a, n)?;
                        self.set(t, o, ty, v);
                    } else {
                        let v = self.get(inst, b, t, o, ty)?;
                        self.store(inst, global, writers, b, t, space, a, n, v)?;
                    }
                }
            }
            "mov" => {
                let ty = inst.ty()?;
                match (op(0)?, op(1)?) {
                    (Operand::Vec(parts), src) => {
                        let v = self.get(inst, b, t, src, ty)?;
                        let w = ty.bits() / parts.len() as u32;
                        for (i, p) in parts.iter().enumerate() {
                            let part = (v >> (w * i as u32)) & ((1u64 << w) - 1);
                            if let Operand::Reg(r) = p {
                                t.regs[*r] = part;
                            }
                        }
                    }
                    (d, Operand::Vec(parts)) => {
                        let w = ty.bits() / parts.len() as u32;
                        let mut v = 0u64;
                        for (i, p) in parts.iter().enumerate() {
                            let part = self.get(inst, b, t, p, Ty::B64)? & ((1u64 << w) - 1);
                            v |= part << (w * i as u32);
                        }
                        self.set(t, d, ty, v);
                    }
                    (d, s) => {
                        let v = self.get(inst, b, t, s, ty)?;
                        self.set(t, d, ty, v);
                    }
                }
            }
            "cvta" => {
                let v = self.get(inst, b, t, op(1)?, Ty::U64)?;
                self.set(t, op(0)?, Ty::U64, v);
            }
            "setp" => {
                let ty = inst.ty()?;
                let cmp = inst.mods.first().map(String::as_str).unwrap_or_default();
                let x = self.get(inst, b, t, op(1)?, ty)?;
                let y = self.get(inst, b, t, op(2)?, ty)?;
                let r = compare(inst, cmp, ty, x, y)?;
                let combine = inst.mods.get(1).map(String::as_str);
                let r = match (combine, ops.get(3)) {
                    (Some("and"), Some(c)) => r && self.get(inst, b, t, c, Ty::Pred)? != 0,
                    (Some("or"), Some(c)) => r || self.get(inst, b, t, c, Ty::Pred)? != 0,
                    (Some("xor"), Some(c)) => r != (self.get(inst, b, t, c, Ty::Pred)? != 0),
                    _ => r,
                };
                match op(0)? {
                    Operand::Pair(p, q) => {
                        t.regs[*p] = u64::from(r);
                        t.regs[*q] = u64::from(!r);
                    }
                    d => self.set(t, d, Ty::Pred, u64::from(r)),
                }
            }
            "selp" => {
                let ty = inst.ty()?;
                let p = self.get(inst, b, t, op(3)?, Ty::Pred)? != 0;
                let v = self.get(inst, b, t, op(if p { 1 } else { 2 })?, ty)?;
                self.set(t, op(0)?, ty, v);
            }
            "cvt" => self.cvt(inst, b, t)?,
            "cp" => self.cp_async(inst, global, b, t)?,
            "membar" | "fence" => {}
            "atom" | "red" => {
                let ty = inst.ty()?;
                let space = match inst.space() {
                    Space::Generic => Space::Global,
                    s => s,
                };
                let (d, at) = if inst.base == "atom" {
                    (Some(op(0)?), 1)
                } else {
                    (None, 0)
                };
                let addr = self.addr(inst, b, t, op(at)?)?;
                let n = ty.bytes();
                let x = self.get(inst, b, t, op(at + 1)?, ty)?;
                // Atomics are ordered among themselves: no race bookkeeping.
                let old = match space {
                    Space::Shared => {
                        let a = addr as usize;
                        let mut o = [0u8; 8];
                        o[..n as usize].copy_from_slice(&b.shared[a..a + n as usize]);
                        u64::from_le_bytes(o)
                    }
                    _ => {
                        let (i, off) = global
                            .find(addr, n)
                            .ok_or_else(|| inst.err("atomic outside every buffer"))?;
                        let mut o = [0u8; 8];
                        o[..n as usize].copy_from_slice(&global.bufs[i].1[off..off + n as usize]);
                        u64::from_le_bytes(o)
                    }
                };
                let kind = inst
                    .mods
                    .iter()
                    .find(|m| {
                        matches!(
                            m.as_str(),
                            "add"
                                | "min"
                                | "max"
                                | "and"
                                | "or"
                                | "xor"
                                | "exch"
                                | "cas"
                                | "inc"
                                | "dec"
                        )
                    })
                    .ok_or_else(|| inst.err("atomic operation"))?;
                let new = match kind.as_str() {
                    "add" if ty.float() => ty.encode(ty.to_f64(old) + ty.to_f64(x)),
                    "add" => old.wrapping_add(x),
                    "min" => {
                        if ty.int(x) < ty.int(old) {
                            x
                        } else {
                            old
                        }
                    }
                    "max" => {
                        if ty.int(x) > ty.int(old) {
                            x
                        } else {
                            old
                        }
                    }
                    "and" => old & x,
                    "or" => old | x,
                    "xor" => old ^ x,
                    "exch" => x,
                    "cas" => {
                        let y = self.get(inst, b, t, op(at + 2)?, ty)?;
                        if old == x { y } else { old }
                    }
                    "inc" => {
                        if old >= x {
                            0
                        } else {
                            old + 1
                        }
                    }
                    "dec" => {
                        if old == 0 || old > x {
                            x
                        } else {
                            old - 1
                        }
                    }
                    _ => unreachable!(),
                } & ty.mask();
                let bytes = new.to_le_bytes();
                match space {
                    Space::Shared => {
                        let a = addr as usize;
                        b.shared[a..a + n as usize].copy_from_slice(&bytes[..n as usize]);
                    }
                    _ => {
                        let (i, off) = global
                            .find(addr, n)
                            .ok_or_else(|| inst.err("atomic outside every buffer"))?;
                        global.bufs[i].1[off..off + n as usize]
                            .copy_from_slice(&bytes[..n as usize]);
                    }
                }
                if let Some(d) = d {
                    self.set(t, d, ty, old);
                }
            }
            _ => self.arith(inst, b, t)?,
        }
        Ok(())
    }

    fn cp_async(
        &self,
        inst: &Inst,
        global: &mut Global,
        b: &mut Block,
        t: &mut Thread,
    ) -> Result<()> {
        if inst.mods.first().map(String::as_str) != Some("async") {
            return Err(inst.err("unsupported instruction"));
        }
        if inst.has("commit_group") {
            let g = std::mem::take(&mut t.open);
            t.groups.push(g);
            return Ok(());
        }
        if inst.has("wait_group") || inst.has("wait_all") {
            let keep = if inst.has("wait_all") {
                0
            } else {
                self.get(
                    inst,
                    b,
                    t,
                    inst.ops.first().ok_or_else(|| inst.err("count"))?,
                    Ty::U32,
                )? as usize
            };
            if inst.has("wait_all") {
                let g = std::mem::take(&mut t.open);
                t.groups.push(g);
            }
            while t.groups.len() > keep {
                for (dst, bytes) in t.groups.remove(0) {
                    self.shared_write(inst, b, t.flat, dst, &bytes)?;
                }
            }
            return Ok(());
        }
        // cp.async.ca/cg.shared.global [dst], [src], size{, src-size}
        let dst = self.addr(inst, b, t, &inst.ops[0])?;
        let src = self.addr(inst, b, t, &inst.ops[1])?;
        let size = self.get(inst, b, t, &inst.ops[2], Ty::U32)?;
        let src_size = match inst.ops.get(3) {
            Some(o) => self.get(inst, b, t, o, Ty::U32)?,
            None => size,
        };
        if dst % size != 0 || src % size != 0 {
            return Err(inst.err(&format!(
                "misaligned cp.async of {size} bytes: {dst:#x} <- {src:#x}"
            )));
        }
        if src_size > size {
            return Err(inst.err("src-size larger than cp-size"));
        }
        let mut bytes = vec![0u8; size as usize];
        if src_size > 0 {
            let (i, off) = global.find(src, src_size).ok_or_else(|| {
                inst.err(&format!(
                    "cp.async reads {src_size} bytes at {src:#x} outside every buffer"
                ))
            })?;
            bytes[..src_size as usize]
                .copy_from_slice(&global.bufs[i].1[off..off + src_size as usize]);
        }
        self.shared_claim(inst, b, t.flat, dst, size)?;
        t.open.push((dst, bytes));
        Ok(())
    }

    fn cvt(&self, inst: &Inst, b: &Block, t: &mut Thread) -> Result<()> {
        let types = inst.types();
        let [dt, st] = types[..] else {
            return Err(inst.err("expected two types"));
        };
        let rnd = inst
            .mods
            .iter()
            .find(|m| {
                matches!(
                    m.as_str(),
                    "rn" | "rz" | "rm" | "rp" | "rni" | "rzi" | "rmi" | "rpi" | "rna"
                )
            })
            .map(String::as_str);
        let ftz = inst.has("ftz");
        let sat = inst.has("sat");
        if matches!(dt, Ty::F16x2 | Ty::Bf16x2) {
            // cvt.rn.f16x2.f32 d, a, b: a to the upper half.
            let one = if dt == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
            if rnd != Some("rn") {
                return Err(inst.err("only .rn packs"));
            }
            let hi = self.get(inst, b, t, &inst.ops[1], st)?;
            let lo = self.get(inst, b, t, &inst.ops[2], st)?;
            let conv = |v: u64| -> u64 {
                let x = f32::from_bits(v as u32);
                if x.is_nan() {
                    // The canonical NaN of both formats.
                    0x7fff
                } else {
                    one.encode(f64::from(x))
                }
            };
            self.set(t, &inst.ops[0], Ty::B32, (conv(hi) << 16) | conv(lo));
            return Ok(());
        }
        let v = self.get(inst, b, t, &inst.ops[1], st)?;
        let out = if st.float() && dt.float() {
            let mut x = st.to_f64(v);
            if ftz && st == Ty::F32 && (x as f32).is_subnormal() {
                x = 0.0f64.copysign(x);
            }
            let r = match rnd {
                Some("rni") => x.round_ties_even(),
                Some("rzi") => x.trunc(),
                Some("rmi") => x.floor(),
                Some("rpi") => x.ceil(),
                _ => x,
            };
            let r = if sat { r.clamp(0.0, 1.0) } else { r };
            if dt == Ty::Tf32 {
                return Err(inst.err("conversion to tf32 (no Keel kernel uses it)"));
            }
            if matches!(rnd, Some("rz" | "rm" | "rp")) && st != dt {
                return Err(inst.err("directed float rounding"));
            }
            let o = dt.encode(r);
            if ftz && dt == Ty::F32 {
                u64::from(ftz32(f32::from_bits(o as u32)).to_bits())
            } else {
                o
            }
        } else if st.float() {
            // Float to integer: rounded as asked, saturated, NaN to 0.
            let x = st.to_f64(v);
            let r = match rnd {
                Some("rni") => x.round_ties_even(),
                Some("rmi") => x.floor(),
                Some("rpi") => x.ceil(),
                _ => x.trunc(),
            };
            let (lo, hi) = if dt.signed() {
                (
                    -(2f64.powi(dt.bits() as i32 - 1)),
                    2f64.powi(dt.bits() as i32 - 1) - 1.0,
                )
            } else {
                (0.0, 2f64.powi(dt.bits() as i32) - 1.0)
            };
            let r = if x.is_nan() { 0.0 } else { r.clamp(lo, hi) };
            (r as i128 as u64) & dt.mask()
        } else if dt.float() {
            let x = st.int(v) as f64;
            // Integers wider than 53 bits would round twice; none are converted.
            dt.encode(x)
        } else {
            let x = st.int(v);
            let x = if sat {
                let (lo, hi) = if dt.signed() {
                    (-(1i128 << (dt.bits() - 1)), (1i128 << (dt.bits() - 1)) - 1)
                } else {
                    (0, (1i128 << dt.bits()) - 1)
                };
                x.clamp(lo, hi)
            } else {
                x
            };
            (x as u64) & dt.mask()
        };
        self.set(t, &inst.ops[0], dt, out);
        Ok(())
    }

    fn arith(&self, inst: &Inst, b: &Block, t: &mut Thread) -> Result<()> {
        let ty = inst.ty()?;
        let n = inst.ops.len();
        let src = |i: usize, ty: Ty| -> Result<u64> {
            self.get(
                inst,
                b,
                t,
                inst.ops.get(i).ok_or_else(|| inst.err("missing operand"))?,
                ty,
            )
        };
        let ftz = inst.has("ftz");
        let base = inst.base.as_str();
        let out: u64 = if ty == Ty::Pred {
            let x = src(1, ty)? != 0;
            let r = match base {
                "not" => !x,
                "and" => x && src(2, ty)? != 0,
                "or" => x || src(2, ty)? != 0,
                "xor" => x != (src(2, ty)? != 0),
                "mov" => x,
                _ => return Err(inst.err("unsupported predicate operation")),
            };
            u64::from(r)
        } else if ty.float() {
            if inst
                .mods
                .iter()
                .any(|m| matches!(m.as_str(), "rz" | "rm" | "rp"))
            {
                return Err(inst.err("directed rounding"));
            }
            let f = |i: usize| -> Result<f64> {
                let v = ty.to_f64(src(i, ty)?);
                Ok(if ftz && ty == Ty::F32 && (v as f32).is_subnormal() {
                    0.0f64.copysign(v)
                } else {
                    v
                })
            };
            // Computed in f64, then rounded to `ty`: for an add, subtract,
            // multiply, divide or square root of f32 (or f16) operands the
            // second rounding gives the correctly rounded result, as f64
            // has more than twice their significand bits and two more.
            // An f32 fma is computed in f32 (Rust's `mul_add` rounds
            // once), since in f64 an exact tie could hide under the first
            // rounding.
            let r = match base {
                "add" => f(1)? + f(2)?,
                "sub" => f(1)? - f(2)?,
                "mul" => f(1)? * f(2)?,
                "fma" | "mad" if ty == Ty::F32 => {
                    f64::from((f(1)? as f32).mul_add(f(2)? as f32, f(3)? as f32))
                }
                "div" if ty == Ty::F32 && inst.has("rn") => f64::from(f(1)? as f32 / f(2)? as f32),
                "div" => f(1)? / f(2)?,
                "min" => min_max(f(1)?, f(2)?, false),
                "max" => min_max(f(1)?, f(2)?, true),
                "abs" => f(1)?.abs(),
                "neg" => -f(1)?,
                "sqrt" => f(1)?.sqrt(),
                "rsqrt" => 1.0 / f(1)?.sqrt(),
                "rcp" => 1.0 / f(1)?,
                "ex2" => f(1)?.exp2(),
                "lg2" => f(1)?.log2(),
                "sin" => f(1)?.sin(),
                "cos" => f(1)?.cos(),
                "tanh" => f(1)?.tanh(),
                "copysign" => f(2)?.copysign(f(1)?),
                _ => return Err(inst.err("unsupported instruction")),
            };
            let o = ty.encode(r);
            if ftz && ty == Ty::F32 {
                u64::from(ftz32(f32::from_bits(o as u32)).to_bits())
            } else {
                o
            }
        } else {
            let bits = ty.bits();
            let m = ty.mask();
            let x = src(1, ty)?;
            let xi = ty.int(x);
            match base {
                "not" => !x & m,
                "neg" => (xi.wrapping_neg() as u64) & m,
                "abs" => (xi.unsigned_abs() as u64) & m,
                "clz" => u64::from(bits - (64 - x.leading_zeros())),
                "popc" => u64::from(x.count_ones()),
                "brev" => x.reverse_bits() >> (64 - bits),
                "bfe" => {
                    let pos = src(2, Ty::U32)? as u32 & 0xff;
                    let len = src(3, Ty::U32)? as u32 & 0xff;
                    let mut v = if pos >= bits { 0 } else { x >> pos };
                    if len < 64 {
                        v &= (1u64 << len) - 1;
                    }
                    if ty.signed() && len > 0 {
                        let sign_at = (pos + len - 1).min(bits - 1);
                        if (x >> sign_at) & 1 == 1 {
                            v |= !((1u64 << len.min(63)) - 1);
                        }
                    }
                    v & m
                }
                "bfi" => {
                    let y = src(2, ty)?;
                    let pos = src(3, Ty::U32)? as u32 & 0xff;
                    let len = src(4, Ty::U32)? as u32 & 0xff;
                    if pos >= bits || len == 0 {
                        y
                    } else {
                        let len = len.min(bits - pos);
                        let field = if len >= 64 { m } else { (1u64 << len) - 1 };
                        ((y & !(field << pos)) | ((x & field) << pos)) & m
                    }
                }
                "shl" | "shr" => {
                    let s = src(2, Ty::U32)?;
                    if base == "shl" {
                        if s >= u64::from(bits) {
                            0
                        } else {
                            (x << s) & m
                        }
                    } else if ty.signed() {
                        ((xi >> s.min(u64::from(bits) - 1)) as u64) & m
                    } else if s >= u64::from(bits) {
                        0
                    } else {
                        x >> s
                    }
                }
                _ => {
                    if n < 3 {
                        return Err(inst.err("unsupported instruction"));
                    }
                    let y = src(2, ty)?;
                    let yi = ty.int(y);
                    let wide = inst.has("wide");
                    let hi = inst.has("hi");
                    match base {
                        "add" => (xi.wrapping_add(yi) as u64) & m,
                        "sub" => (xi.wrapping_sub(yi) as u64) & m,
                        "and" => x & y,
                        "or" => x | y,
                        "xor" => x ^ y,
                        "min" => {
                            if xi < yi {
                                x
                            } else {
                                y
                            }
                        }
                        "max" => {
                            if xi > yi {
                                x
                            } else {
                                y
                            }
                        }
                        "div" | "rem" => {
                            if yi == 0 {
                                return Err(inst.err("division by zero (undefined in PTX)"));
                            }
                            let r = if base == "div" { xi / yi } else { xi % yi };
                            (r as u64) & m
                        }
                        "mul" | "mad" => {
                            let p = xi * yi;
                            let p = if wide {
                                (p as u64) & if bits == 32 { u64::MAX } else { 0xffff_ffff }
                            } else if hi {
                                ((p >> bits) as u64) & m
                            } else {
                                (p as u64) & m
                            };
                            if base == "mad" {
                                let wty = if wide {
                                    if ty.signed() { Ty::S64 } else { Ty::U64 }
                                } else {
                                    ty
                                };
                                let z = src(3, wty)?;
                                p.wrapping_add(z) & wty.mask()
                            } else {
                                p
                            }
                        }
                        _ => return Err(inst.err("unsupported instruction")),
                    }
                }
            }
        };
        let dty = if inst.has("wide") { Ty::B64 } else { ty };
        self.set(t, &inst.ops[0], dty, out);
        Ok(())
    }

    fn collective(&self, b: &mut Block, warp: &mut [Thread], pc: usize) -> Result<()> {
        let inst = &self.k.body[pc];
        let lanes: Vec<usize> = (0..warp.len())
            .filter(|&i| warp[i].state == State::Collective)
            .collect();
        match inst.base.as_str() {
            "activemask" => {
                let mask = lanes.iter().fold(0u64, |m, &l| m | (1 << l));
                for &l in &lanes {
                    self.set(&mut warp[l], &inst.ops[0], Ty::B32, mask);
                }
            }
            "vote" => {
                let preds: Vec<bool> = lanes
                    .iter()
                    .map(|&l| {
                        self.get(inst, b, &warp[l], &inst.ops[1], Ty::Pred)
                            .map(|v| v != 0)
                    })
                    .collect::<Result<_>>()?;
                let ballot = lanes
                    .iter()
                    .zip(&preds)
                    .fold(0u64, |m, (&l, &p)| m | (u64::from(p) << l));
                for &l in &lanes {
                    let v = if inst.has("ballot") {
                        ballot
                    } else if inst.has("all") {
                        u64::from(preds.iter().all(|p| *p))
                    } else if inst.has("any") {
                        u64::from(preds.iter().any(|p| *p))
                    } else if inst.has("uni") {
                        u64::from(preds.iter().all(|p| *p) || !preds.iter().any(|p| *p))
                    } else {
                        return Err(inst.err("vote mode"));
                    };
                    let ty = if inst.has("ballot") {
                        Ty::B32
                    } else {
                        Ty::Pred
                    };
                    self.set(&mut warp[l], &inst.ops[0], ty, v);
                }
            }
            "shfl" => {
                let vals: Vec<u64> = (0..warp.len())
                    .map(|l| self.get(inst, b, &warp[l], &inst.ops[1], Ty::B32))
                    .collect::<Result<_>>()?;
                let mut outs = Vec::new();
                for &l in &lanes {
                    let lane = l as i64;
                    let bv = self.get(inst, b, &warp[l], &inst.ops[2], Ty::U32)? as i64;
                    let c = self.get(inst, b, &warp[l], &inst.ops[3], Ty::U32)? as i64;
                    let mask = (c >> 8) & 0x1f;
                    let clamp = c & 0x1f;
                    let min_lane = lane & mask;
                    let max_lane = min_lane | (clamp & !mask);
                    let (j, ok) = if inst.has("up") {
                        let j = lane - bv;
                        (j, j >= max_lane)
                    } else if inst.has("down") {
                        let j = lane + bv;
                        (j, j <= max_lane)
                    } else if inst.has("bfly") {
                        let j = lane ^ bv;
                        (j, j <= max_lane)
                    } else {
                        let j = min_lane | (bv & !mask & 0x1f);
                        (j, j <= max_lane)
                    };
                    let j = if ok
                        && (j as usize) < warp.len()
                        && warp[j as usize].state == State::Collective
                    {
                        j as usize
                    } else {
                        l
                    };
                    outs.push((l, vals[j], ok));
                }
                for (l, v, ok) in outs {
                    match &inst.ops[0] {
                        Operand::Pair(d, p) => {
                            warp[l].regs[*d] = v;
                            warp[l].regs[*p] = u64::from(ok);
                        }
                        d => self.set(&mut warp[l], d, Ty::B32, v),
                    }
                }
            }
            "ldmatrix" => self.ldmatrix(inst, b, warp)?,
            "mma" => self.mma(inst, b, warp)?,
            _ => return Err(inst.err("unsupported collective")),
        }
        Ok(())
    }

    fn ldmatrix(&self, inst: &Inst, b: &mut Block, warp: &mut [Thread]) -> Result<()> {
        if warp.len() != 32 || warp.iter().any(|t| t.state != State::Collective) {
            return Err(inst.err("ldmatrix needs the whole warp"));
        }
        let count = if inst.has("x4") {
            4
        } else if inst.has("x2") {
            2
        } else {
            1
        };
        let trans = inst.has("trans");
        let Operand::Vec(dst) = &inst.ops[0] else {
            return Err(inst.err("expected a vector destination"));
        };
        // Rows: matrix q's row r starts at the address lane 8q + r gives.
        let mut rows = vec![[0u16; 8]; 8 * count];
        let mut matrix = Vec::with_capacity(8);
        for (i, row) in rows.iter_mut().enumerate() {
            let a = self.addr(inst, b, &warp[i], &inst.ops[1])?;
            matrix.push((a, 16));
            if matrix.len() == 8 {
                self.count_request(warp[i].pc, &matrix);
                matrix.clear();
            }
            let t = &warp[i];
            if a % 16 != 0 {
                return Err(inst.err(&format!("ldmatrix row address {a:#x} not 16-byte aligned")));
            }
            for (c, v) in row.iter_mut().enumerate() {
                *v = self.shared_read(inst, b, t.flat, a + 2 * c as u64, 2)? as u16;
            }
        }
        for (lane, t) in warp.iter_mut().enumerate() {
            for (q, d) in dst.iter().enumerate().take(count) {
                let (r, c) = (lane / 4, 2 * (lane % 4));
                let m = &rows[8 * q..8 * q + 8];
                let (x, y) = if trans {
                    (m[c][r], m[c + 1][r])
                } else {
                    (m[r][c], m[r][c + 1])
                };
                self.set(t, d, Ty::B32, u64::from(x) | (u64::from(y) << 16));
            }
        }
        Ok(())
    }

    fn mma(&self, inst: &Inst, b: &Block, warp: &mut [Thread]) -> Result<()> {
        if warp.len() != 32 || warp.iter().any(|t| t.state != State::Collective) {
            return Err(inst.err("mma needs the whole warp"));
        }
        let types = inst.types();
        let [dt, at, bt, ct] = types[..] else {
            return Err(inst.err("expected four types"));
        };
        if !inst.has("row") || !inst.has("col") || dt != Ty::F32 || ct != Ty::F32 {
            return Err(inst.err("only .row.col with f32 sums"));
        }
        let k = if inst.has("m16n8k8") && at == Ty::Tf32 {
            8
        } else if inst.has("m16n8k16") && matches!(at, Ty::F16 | Ty::Bf16) {
            16
        } else {
            return Err(inst.err("unsupported shape"));
        };
        let regs = |o: &Operand, t: &Thread| -> Result<Vec<u64>> {
            match o {
                Operand::Vec(v) => v.iter().map(|e| self.get(inst, b, t, e, Ty::B32)).collect(),
                _ => Err(inst.err("expected a vector operand")),
            }
        };
        let mut a = [[0f64; 16]; 16];
        let mut bm = [[0f64; 8]; 16];
        let mut c = [[0f64; 8]; 16];
        let elem = |ty: Ty, v: u64, half: usize| -> f64 {
            match ty {
                // Tensor cores read a tf32 operand's top 19 bits.
                Ty::Tf32 => f64::from(f32::from_bits((v as u32) & 0xffff_e000)),
                _ => ty.to_f64((v >> (16 * half)) & 0xffff),
            }
        };
        for (lane, t) in warp.iter().enumerate() {
            let (g, tq) = (lane / 4, lane % 4);
            let ra = regs(&inst.ops[1], t)?;
            let rb = regs(&inst.ops[2], t)?;
            let rc = regs(&inst.ops[3], t)?;
            if k == 8 {
                a[g][tq] = elem(at, ra[0], 0);
                a[g + 8][tq] = elem(at, ra[1], 0);
                a[g][tq + 4] = elem(at, ra[2], 0);
                a[g + 8][tq + 4] = elem(at, ra[3], 0);
                bm[tq][g] = elem(bt, rb[0], 0);
                bm[tq + 4][g] = elem(bt, rb[1], 0);
            } else {
                for (i, r) in ra.iter().enumerate() {
                    let row = g + 8 * (i % 2);
                    let col = 2 * tq + 8 * (i / 2);
                    a[row][col] = elem(at, *r, 0);
                    a[row][col + 1] = elem(at, *r, 1);
                }
                for (i, r) in rb.iter().enumerate() {
                    let kk = 2 * tq + 8 * i;
                    bm[kk][g] = elem(bt, *r, 0);
                    bm[kk + 1][g] = elem(bt, *r, 1);
                }
            }
            for (i, r) in rc.iter().enumerate() {
                c[g + 8 * (i / 2)][2 * tq + (i % 2)] = f64::from(f32::from_bits(*r as u32));
            }
        }
        for (lane, t) in warp.iter_mut().enumerate() {
            let (g, tq) = (lane / 4, lane % 4);
            let Operand::Vec(d) = &inst.ops[0] else {
                return Err(inst.err("expected a vector destination"));
            };
            for (i, o) in d.iter().enumerate() {
                let (row, col) = (g + 8 * (i / 2), 2 * tq + (i % 2));
                let mut s = c[row][col];
                for kk in 0..k {
                    s += a[row][kk] * bm[kk][col];
                }
                self.set(t, o, Ty::F32, u64::from((s as f32).to_bits()));
            }
        }
        Ok(())
    }
}

fn compare(inst: &Inst, cmp: &str, ty: Ty, x: u64, y: u64) -> Result<bool> {
    if ty.float() {
        let (a, b) = (ty.to_f64(x), ty.to_f64(y));
        let nan = a.is_nan() || b.is_nan();
        return Ok(match cmp {
            "eq" => !nan && a == b,
            "ne" => !nan && a != b,
            "lt" => !nan && a < b,
            "le" => !nan && a <= b,
            "gt" => !nan && a > b,
            "ge" => !nan && a >= b,
            "equ" => nan || a == b,
            "neu" => nan || a != b,
            "ltu" => nan || a < b,
            "leu" => nan || a <= b,
            "gtu" => nan || a > b,
            "geu" => nan || a >= b,
            "num" => !nan,
            "nan" => nan,
            _ => return Err(inst.err("comparison")),
        });
    }
    let (a, b) = match cmp {
        "lo" | "ls" | "hi" | "hs" => ((x & ty.mask()) as i128, (y & ty.mask()) as i128),
        _ => (ty.int(x), ty.int(y)),
    };
    Ok(match cmp {
        "eq" => a == b,
        "ne" => a != b,
        "lt" | "lo" => a < b,
        "le" | "ls" => a <= b,
        "gt" | "hi" => a > b,
        "ge" | "hs" => a >= b,
        _ => return Err(inst.err("comparison")),
    })
}

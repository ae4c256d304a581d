//! The operator table: schemas by name, a kernel per (operator, device
//! type), a fallback per device type, and per-operator fallback counts.
//! Nothing here runs a kernel; `mod.rs` dispatches.
//!
//! Dispatch reads one prepared [`Resolved`] per (operator, device type),
//! rebuilt whenever a registration changes it. Each thread keeps the few
//! it used last (Note [Per-thread dispatch cache]), so a call usually
//! costs one atomic load and a short string comparison (for a typed
//! operator, a comparison of its name's address), and takes no lock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::call::{Fallback, OpKernel, OpSchema};

use crate::core::DeviceType;
use crate::{Error, Result};

/// FNV-1a: operator names are short, and SipHash's setup is most of a
/// lookup's cost.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// What dispatching one operator on one device type needs.
#[derive(Clone)]
pub(crate) struct Resolved {
    pub schema: Arc<OpSchema>,
    pub kernel: Option<OpKernel>,
    pub fallback: Option<Fallback>,
    pub fallbacks: Arc<AtomicU64>,
}

struct Entry {
    schema: Arc<OpSchema>,
    kernels: [Option<OpKernel>; DeviceType::COUNT],
    fallbacks: Arc<AtomicU64>,
    /// Per device type, what a call needs (rebuilt on registration).
    resolved: [Arc<Resolved>; DeviceType::COUNT],
}

impl Entry {
    fn rebuild(&mut self, fallbacks: &[Option<Fallback>; DeviceType::COUNT]) {
        for (slot, r) in self.resolved.iter_mut().enumerate() {
            *r = Arc::new(Resolved {
                schema: Arc::clone(&self.schema),
                kernel: self.kernels[slot].clone(),
                fallback: fallbacks[slot].clone(),
                fallbacks: Arc::clone(&self.fallbacks),
            });
        }
    }
}

#[derive(Default)]
struct Table {
    index: HashMap<String, usize, BuildHasherDefault<Fnv>>,
    ops: Vec<Entry>,
    fallbacks: [Option<Fallback>; DeviceType::COUNT],
}

static TABLE: RwLock<Option<Table>> = RwLock::new(None);

/// Bumped (under the write lock) by every change to [`TABLE`]: what a
/// thread's cached entries are checked against.
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn write<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    let mut guard = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    let r = f(guard.get_or_insert_with(Table::default));
    GENERATION.fetch_add(1, Ordering::Release);
    r
}

fn read<R>(f: impl FnOnce(Option<&Table>) -> R) -> R {
    let guard = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    f(guard.as_ref())
}

fn unknown(op: &str, table: Option<&Table>) -> Error {
    let mut known: Vec<&str> = table
        .map(|t| t.ops.iter().map(|e| e.schema.name.as_str()).collect())
        .unwrap_or_default();
    known.sort_unstable();
    let op: String = op.chars().take(40).collect();
    Error::invalid(format!(
        "unknown operator '{op}': expected one of {}",
        known.join(", ")
    ))
}

/// Adds an operator; the same schema again is fine, another one under the
/// same name is an error.
pub(crate) fn define(schema: OpSchema) -> Result<()> {
    write(|t| {
        if let Some(&i) = t.index.get(&schema.name) {
            let old = &t.ops[i].schema;
            if **old == schema {
                return Ok(());
            }
            return Err(Error::invalid(format!(
                "operator '{}' is already defined as {old}; found another schema {schema}",
                schema.name
            )));
        }
        let schema = Arc::new(schema);
        let fallbacks = Arc::new(AtomicU64::new(0));
        let empty = || {
            Arc::new(Resolved {
                schema: Arc::clone(&schema),
                kernel: None,
                fallback: None,
                fallbacks: Arc::clone(&fallbacks),
            })
        };
        let mut entry = Entry {
            resolved: std::array::from_fn(|_| empty()),
            schema: Arc::clone(&schema),
            kernels: Default::default(),
            fallbacks,
        };
        entry.rebuild(&t.fallbacks);
        t.index.insert(schema.name.clone(), t.ops.len());
        t.ops.push(entry);
        Ok(())
    })
}

/// Sets (or replaces) the kernel of `op` for `ty`.
pub(crate) fn set_kernel(op: &str, ty: DeviceType, kernel: OpKernel) -> Result<()> {
    write(|t| match t.index.get(op) {
        Some(&i) => {
            let entry = &mut t.ops[i];
            entry.kernels[usize::from(ty.code())] = Some(kernel);
            entry.rebuild(&t.fallbacks);
            Ok(())
        }
        None => Err(unknown(op, Some(t))),
    })
}

/// Sets (or replaces) the fallback of `ty`.
pub(crate) fn set_fallback(ty: DeviceType, fallback: Fallback) {
    write(|t| {
        t.fallbacks[usize::from(ty.code())] = Some(fallback);
        for entry in &mut t.ops {
            entry.rebuild(&t.fallbacks);
        }
    });
}

/// Looks up `op`'s schema, its kernel for `ty`, and `ty`'s fallback in
/// the table (the slow path of [`resolve`]), with the generation read
/// under the same lock.
fn resolve_shared(op: &str, ty: DeviceType) -> Result<(u64, Arc<Resolved>)> {
    read(|t| {
        let generation = GENERATION.load(Ordering::Acquire);
        let table = t.ok_or_else(|| unknown(op, None))?;
        let &i = table
            .index
            .get(op)
            .ok_or_else(|| unknown(op, Some(table)))?;
        let r = Arc::clone(&table.ops[i].resolved[usize::from(ty.code())]);
        Ok((generation, r))
    })
}

// Note [Per-thread dispatch cache]
// A call resolves (operator, device type) to a prepared entry. Through
// the shared table that is a read lock, a hash and a reference count:
// tens of nanoseconds, a fifth of a CPU launch. So each thread keeps its
// last few entries, tagged with the table's generation when they were
// read. A registration bumps the generation under the write lock, after
// changing the table; a cached entry is used only while the generation
// it was read at is still current, so a kernel registered on one thread
// is what the next call on every thread runs. Entries are the thread's own
// `Rc` copies: a call holds its entry (a kernel may dispatch again, and
// evict it) without an atomic reference count.

/// How many entries a thread keeps (an operator is a few per program).
const CACHED: usize = 8;

struct Cached {
    generation: u64,
    ty: DeviceType,
    entry: Rc<Resolved>,
    /// The `'static` name a typed operator last found this entry by
    /// ([`resolve_static`]): the same address and length are the same
    /// name, so a hit compares two words, not the name's bytes.
    alias: &'static str,
}

thread_local! {
    static CACHE: RefCell<(usize, [Option<Cached>; CACHED])> =
        const { RefCell::new((0, [const { None }; CACHED])) };
}

/// `a == b` for operator names, without a call to `memcmp` (names are a
/// few bytes).
#[inline]
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
}

/// The thread's cached entry of the current generation for `ty` that
/// `is_op` accepts.
#[inline(always)]
fn cached(ty: DeviceType, is_op: impl Fn(&Cached) -> bool) -> Option<Rc<Resolved>> {
    let generation = GENERATION.load(Ordering::Acquire);
    CACHE.with(|c| {
        c.borrow().1.iter().flatten().find_map(|e| {
            (is_op(e) && e.generation == generation && e.ty == ty).then(|| Rc::clone(&e.entry))
        })
    })
}

/// Looks up `op`'s schema, its kernel for `ty`, and `ty`'s fallback.
#[inline]
pub(crate) fn resolve(op: &str, ty: DeviceType) -> Result<Rc<Resolved>> {
    match cached(ty, |e| same_name(&e.entry.schema.name, op)) {
        Some(entry) => Ok(entry),
        None => resolve_miss(op, ty),
    }
}

/// [`resolve`] for a name that lives for the whole program (the typed
/// operators' own): a cached entry is found by the name's address.
#[inline]
pub(crate) fn resolve_static(op: &'static str, ty: DeviceType) -> Result<Rc<Resolved>> {
    match cached(ty, |e| std::ptr::eq(e.alias, op)) {
        Some(entry) => Ok(entry),
        None => resolve_alias(op, ty),
    }
}

/// [`resolve_static`] when no entry has `op`'s address yet: [`resolve`],
/// then the entry found remembers the address.
#[inline(never)]
fn resolve_alias(op: &'static str, ty: DeviceType) -> Result<Rc<Resolved>> {
    let entry = resolve(op, ty)?;
    CACHE.with(|c| {
        let slots = &mut c.borrow_mut().1;
        if let Some(e) = slots
            .iter_mut()
            .flatten()
            .find(|e| Rc::ptr_eq(&e.entry, &entry))
        {
            e.alias = op;
        }
    });
    Ok(entry)
}

/// [`resolve`] from the shared table, kept in the thread's cache.
#[inline(never)]
fn resolve_miss(op: &str, ty: DeviceType) -> Result<Rc<Resolved>> {
    let (generation, shared) = resolve_shared(op, ty)?;
    // A thread's own copy: four reference counts, once per miss.
    let entry = Rc::new(Resolved::clone(&shared));
    CACHE.with(|c| {
        let (next, slots) = &mut *c.borrow_mut();
        // An entry of an older generation is never used again.
        let slot = slots
            .iter()
            .position(|e| e.as_ref().is_none_or(|e| e.generation != generation))
            .unwrap_or(*next % CACHED);
        *next = slot + 1;
        slots[slot] = Some(Cached {
            generation,
            ty,
            entry: Rc::clone(&entry),
            alias: "",
        });
    });
    Ok(entry)
}

/// The kernel of `op` for `ty`, if any.
pub(crate) fn kernel(op: &str, ty: DeviceType) -> Option<OpKernel> {
    read(|t| {
        let t = t?;
        let &i = t.index.get(op)?;
        t.ops[i].kernels[usize::from(ty.code())].clone()
    })
}

/// How many times `op` ran through a fallback (0 for an unknown op).
pub(crate) fn fallback_count(op: &str) -> u64 {
    read(|t| {
        t.and_then(|t| t.index.get(op).map(|&i| &t.ops[i]))
            .map_or(0, |e| e.fallbacks.load(Ordering::Relaxed))
    })
}

/// Every operator's schema, in definition order.
pub(crate) fn schemas() -> Vec<Arc<OpSchema>> {
    read(|t| {
        t.map(|t| t.ops.iter().map(|e| Arc::clone(&e.schema)).collect())
            .unwrap_or_default()
    })
}

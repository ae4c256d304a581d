//! The operator table: schemas by name, a kernel per (operator, device
//! type), a fallback per device type, and per-operator fallback counts.
//! Nothing here runs a kernel; `mod.rs` dispatches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::call::{Fallback, OpKernel, OpSchema};
use crate::core::DeviceType;
use crate::error::{Error, Result};

struct Entry {
    schema: Arc<OpSchema>,
    kernels: [Option<OpKernel>; DeviceType::COUNT],
    fallbacks: Arc<AtomicU64>,
}

#[derive(Default)]
struct Table {
    index: HashMap<String, usize>,
    ops: Vec<Entry>,
    fallbacks: [Option<Fallback>; DeviceType::COUNT],
}

static TABLE: RwLock<Option<Table>> = RwLock::new(None);

fn write<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    let mut guard = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(Table::default))
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
        t.index.insert(schema.name.clone(), t.ops.len());
        t.ops.push(Entry {
            schema: Arc::new(schema),
            kernels: Default::default(),
            fallbacks: Arc::new(AtomicU64::new(0)),
        });
        Ok(())
    })
}

/// Sets (or replaces) the kernel of `op` for `ty`.
pub(crate) fn set_kernel(op: &str, ty: DeviceType, kernel: OpKernel) -> Result<()> {
    write(|t| match t.index.get(op) {
        Some(&i) => {
            t.ops[i].kernels[usize::from(ty.code())] = Some(kernel);
            Ok(())
        }
        None => Err(unknown(op, Some(t))),
    })
}

/// Sets (or replaces) the fallback of `ty`.
pub(crate) fn set_fallback(ty: DeviceType, fallback: Fallback) {
    write(|t| t.fallbacks[usize::from(ty.code())] = Some(fallback));
}

/// What dispatching `op` on `ty` needs.
pub(crate) struct Resolved {
    pub schema: Arc<OpSchema>,
    pub kernel: Option<OpKernel>,
    pub fallback: Option<Fallback>,
    pub fallbacks: Arc<AtomicU64>,
}

/// Looks up `op`'s schema, its kernel for `ty`, and `ty`'s fallback.
pub(crate) fn resolve(op: &str, ty: DeviceType) -> Result<Resolved> {
    read(|t| {
        let table = t.ok_or_else(|| unknown(op, None))?;
        let entry = table
            .index
            .get(op)
            .map(|&i| &table.ops[i])
            .ok_or_else(|| unknown(op, Some(table)))?;
        let slot = usize::from(ty.code());
        Ok(Resolved {
            schema: Arc::clone(&entry.schema),
            kernel: entry.kernels[slot].clone(),
            fallback: table.fallbacks[slot].clone(),
            fallbacks: Arc::clone(&entry.fallbacks),
        })
    })
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

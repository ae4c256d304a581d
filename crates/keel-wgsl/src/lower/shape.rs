//! The layout of a WGSL value: its scalars (leaves) in order and where
//! each sits in memory, by naga's layout (struct offsets, array strides).

use naga::{Handle, Module, TypeInner};

use super::{Result, err, scalar_ty};
use crate::ir::Ty;

/// The layout of a value: how it splits into scalars (its leaves, in
/// order) and where each sits in memory.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Shape {
    Scalar(Ty),
    Atomic(Ty),
    Vector(u32, Ty),
    Matrix {
        cols: u32,
        rows: u32,
        ty: Ty,
    },
    Array {
        base: Box<Shape>,
        len: Option<u32>,
        stride: u32,
    },
    Struct {
        members: Vec<(u32, Shape)>,
        span: u32,
    },
}

impl Shape {
    pub fn of(module: &Module, ty: Handle<naga::Type>) -> Result<Shape> {
        Shape::of_inner(module, &module.types[ty].inner)
    }

    pub fn of_inner(module: &Module, inner: &TypeInner) -> Result<Shape> {
        Ok(match *inner {
            TypeInner::Scalar(s) => Shape::Scalar(scalar_ty(s)?),
            TypeInner::Atomic(s) => Shape::Atomic(scalar_ty(s)?),
            TypeInner::Vector { size, scalar } => Shape::Vector(size as u32, scalar_ty(scalar)?),
            TypeInner::Matrix {
                columns,
                rows,
                scalar,
            } => Shape::Matrix {
                cols: columns as u32,
                rows: rows as u32,
                ty: scalar_ty(scalar)?,
            },
            TypeInner::Array { base, size, stride } => Shape::Array {
                base: Box::new(Shape::of(module, base)?),
                len: match size {
                    naga::ArraySize::Constant(n) => Some(n.get()),
                    naga::ArraySize::Dynamic => None,
                    naga::ArraySize::Pending(_) => {
                        return err("an array sized by an override is not supported");
                    }
                },
                stride,
            },
            TypeInner::Struct { ref members, span } => Shape::Struct {
                members: members
                    .iter()
                    .map(|m| Ok((m.offset, Shape::of(module, m.ty)?)))
                    .collect::<Result<_>>()?,
                span,
            },
            TypeInner::Pointer { base, .. } => Shape::of(module, base)?,
            TypeInner::ValuePointer { size, scalar, .. } => match size {
                Some(n) => Shape::Vector(n as u32, scalar_ty(scalar)?),
                None => Shape::Scalar(scalar_ty(scalar)?),
            },
            ref other => return err(format!("values of type {other:?} are not supported")),
        })
    }

    /// Register types of the leaves.
    pub fn leaves(&self, out: &mut Vec<Ty>) -> Result<()> {
        match self {
            Shape::Scalar(t) | Shape::Atomic(t) => out.push(*t),
            Shape::Vector(n, t) => out.extend((0..*n).map(|_| *t)),
            Shape::Matrix { cols, rows, ty } => out.extend((0..cols * rows).map(|_| *ty)),
            Shape::Array { base, len, .. } => {
                let Some(len) = len else {
                    return err("a runtime-sized array cannot be a value");
                };
                for _ in 0..*len {
                    base.leaves(out)?;
                }
            }
            Shape::Struct { members, .. } => {
                for (_, m) in members {
                    m.leaves(out)?;
                }
            }
        }
        Ok(())
    }

    pub fn count(&self) -> Result<usize> {
        let mut v = Vec::new();
        self.leaves(&mut v)?;
        Ok(v.len())
    }

    /// `(byte offset, register type, atomic)` of each leaf in memory.
    pub fn layout(&self, at: u32, out: &mut Vec<(u32, Ty, bool)>) -> Result<()> {
        match self {
            Shape::Scalar(t) => out.push((at, *t, false)),
            Shape::Atomic(t) => out.push((at, *t, true)),
            Shape::Vector(n, t) => {
                out.extend((0..*n).map(|i| (at + i * t.bytes(), *t, false)));
            }
            Shape::Matrix { cols, rows, ty } => {
                let col = column_stride(*rows, *ty);
                for c in 0..*cols {
                    out.extend((0..*rows).map(|r| (at + c * col + r * ty.bytes(), *ty, false)));
                }
            }
            Shape::Array { base, len, stride } => {
                let Some(len) = len else {
                    return err("a runtime-sized array cannot be loaded or stored whole");
                };
                for i in 0..*len {
                    base.layout(at + i * stride, out)?;
                }
            }
            Shape::Struct { members, .. } => {
                for (off, m) in members {
                    m.layout(at + off, out)?;
                }
            }
        }
        Ok(())
    }

    /// Bytes the value spans in memory (a runtime-sized array: one element).
    pub fn size(&self) -> u32 {
        match self {
            Shape::Scalar(t) | Shape::Atomic(t) => bytes_in_memory(*t),
            Shape::Vector(n, t) => n * t.bytes(),
            Shape::Matrix { cols, rows, ty } => cols * column_stride(*rows, *ty),
            Shape::Array { len, stride, .. } => len.unwrap_or(1) * stride,
            Shape::Struct { span, .. } => *span,
        }
    }

    /// Element `i`: its shape, its first leaf, and its byte offset.
    pub fn element(&self, i: u32) -> Result<(Shape, usize, u32)> {
        Ok(match self {
            Shape::Vector(n, t) if i < *n => (Shape::Scalar(*t), i as usize, i * t.bytes()),
            Shape::Matrix { cols, rows, ty } if i < *cols => (
                Shape::Vector(*rows, *ty),
                (i * rows) as usize,
                i * column_stride(*rows, *ty),
            ),
            Shape::Array { base, len, stride } if len.is_none_or(|n| i < n) => (
                (**base).clone(),
                i as usize * base.count().unwrap_or(0),
                i * stride,
            ),
            Shape::Struct { members, .. } if (i as usize) < members.len() => {
                let mut first = 0;
                for (_, m) in &members[..i as usize] {
                    first += m.count()?;
                }
                let (off, m) = &members[i as usize];
                (m.clone(), first, *off)
            }
            other => return err(format!("index {i} is outside {other:?}")),
        })
    }
}

fn bytes_in_memory(t: Ty) -> u32 {
    match t {
        Ty::Bool => 4,
        t => t.bytes(),
    }
}

pub(crate) fn column_stride(rows: u32, ty: Ty) -> u32 {
    if rows == 2 {
        2 * ty.bytes()
    } else {
        4 * ty.bytes()
    }
}

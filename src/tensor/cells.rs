//! Each thread's spare tensor cells (Note [Spare cells]).

// Note [Spare cells]
// ~~~~~~~~~~~~~~~~~~
// Every operator makes its output's cell and every dropped result frees
// one: a `malloc`, a `free` and atomic decrements per call, about a fifth
// of what the dispatcher added to a small CPU kernel. A thread keeps up to
// `SPARES` cells instead. When the last handle of a tensor is dropped
// (one acquire load says so: a `triomphe::Arc` has no weak count), its
// buffer is dropped at once, giving the block back to the allocator as
// before, and the cell, left holding a vacant buffer, is kept; the next
// tensor this thread makes fills it in place (Note [A tensor built in its
// cell], in `mod.rs`). A cell is only ever reached through one handle
// while spare (`UniqueArc`), so nothing but its owner thread can see it.
// A shared cell's drop is one atomic decrement, as before; a cell dropped
// while the thread's storage is being torn down is freed.

use std::cell::RefCell;

use triomphe::{Arc, UniqueArc};

use super::{DType, Shape, TensorImpl};
use crate::buffer::Buffer;

/// The most cells a thread keeps. An operator chain holds a few outputs at
/// a time; a thread that drops more at once frees the rest.
const SPARES: usize = 8;

thread_local! {
    static CELLS: RefCell<Vec<UniqueArc<TensorImpl>>> = const { RefCell::new(Vec::new()) };
}

/// A cell holding `dtype`, `shape` and a vacant buffer (on `like`'s
/// allocator when the cell is new), for the caller to fill: one of this
/// thread's spare cells, or a new one.
#[inline(always)]
pub(super) fn cell(dtype: DType, shape: Shape, like: &Buffer) -> UniqueArc<TensorImpl> {
    let spare = CELLS
        .try_with(|c| c.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten();
    match spare {
        Some(mut cell) => {
            cell.dtype = dtype;
            cell.shape = shape;
            cell
        }
        None => UniqueArc::new(TensorImpl {
            buffer: Buffer::vacant(like),
            dtype,
            shape,
        }),
    }
}

/// Drops a tensor's handle to `cell`. The last handle gives the buffer's
/// block back to its allocator, as freeing the cell would, and keeps the
/// cell for the next tensor this thread makes.
#[inline]
pub(super) fn release(cell: Arc<TensorImpl>) {
    // Only a count of one is read: a shared cell is just decremented.
    let Ok(mut cell) = Arc::try_unique(cell) else {
        return;
    };
    let vacant = Buffer::vacant(&cell.buffer);
    drop(std::mem::replace(&mut cell.buffer, vacant));
    // While the thread's storage is going away, or when this thread keeps
    // enough cells already, the cell is freed.
    let _ = CELLS.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut()
            && c.len() < SPARES
        {
            c.push(cell);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device, Tensor};

    fn spares() -> usize {
        CELLS.with(|c| c.borrow().len())
    }

    /// The address of a tensor's cell.
    fn cell_of(t: &Tensor) -> *const TensorImpl {
        t.imp()
    }

    fn emptied() {
        CELLS.with(|c| c.borrow_mut().clear());
    }

    #[test]
    fn a_dropped_tensor_leaves_its_cell_and_gives_its_block_back() {
        emptied();
        let a = Tensor::full(&[3, 5], 2.0, DType::F32, Device::cpu()).expect("a");
        let cell = cell_of(&a);
        drop(a);
        assert_eq!(spares(), 1);
        let kept = CELLS.with(|c| c.borrow()[0].buffer.len());
        assert_eq!(kept, 0, "a spare cell holds no block");
        // The next tensor made on this thread fills that cell, with its own
        // dtype, shape and values.
        let b = Tensor::arange(7, DType::I32, Device::cpu()).expect("b");
        assert_eq!(cell_of(&b), cell);
        assert_eq!(spares(), 0);
        assert_eq!(b.shape(), &[7]);
        assert_eq!(b.dtype(), DType::I32);
        assert_eq!(b.to_vec::<i32>().expect("read"), (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn a_shared_cell_stays_with_its_other_handles() {
        emptied();
        let a = Tensor::full(&[4], 1.5, DType::F32, Device::cpu()).expect("a");
        let b = a.clone();
        drop(a);
        assert_eq!(spares(), 0, "b still holds the cell");
        assert_eq!(b.to_vec::<f32>().expect("read"), vec![1.5; 4]);
        drop(b);
        assert_eq!(spares(), 1);
    }

    #[test]
    fn a_thread_keeps_a_bounded_number_of_cells() {
        emptied();
        let many: Vec<Tensor> = (0..3 * SPARES)
            .map(|i| Tensor::full(&[i + 1], 0.0, DType::U8, Device::cpu()).expect("t"))
            .collect();
        drop(many);
        assert_eq!(spares(), SPARES);
    }
}

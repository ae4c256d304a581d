//! Host kernels: a kernel's Rust function, run once per launch on the
//! stream's thread with every buffer bound.

use std::sync::{Arc, MutexGuard};

use smallvec::SmallVec;

use super::HostBackend;
use super::memory::HostMemory;
use super::stream::{HostStream, lock};
use crate::backend::typed::{Binding, Kernels, check_disjoint_bindings};
use crate::core::DeviceType;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, run_on_host};

/// Bindings a launch keeps on the stack.
const BINDINGS: usize = 4;

/// Enqueues `kernel`'s host implementation over `buffers`: ranges of host
/// allocations that must not overlap (checked here). Ranges of one
/// allocation are handed to the kernel as disjoint slices of it.
///
/// On an inline stream (the CPU default stream) the kernel runs now, over
/// the caller's bindings and parameters: nothing is copied or boxed. A
/// worker's stream gets a task that owns copies of both.
pub fn enqueue_kernel(
    ty: DeviceType,
    stream: &HostStream,
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: &[Binding<HostMemory>],
    params: &[u8],
) -> Result<()> {
    if kernel.cpu.is_none() && kernel.wgsl.is_none() {
        return Err(Error::Kernel {
            kernel: kernel.name.to_owned(),
            message: format!(
                "has neither WGSL nor a host implementation, which the {} backend runs",
                ty.backend_name()
            ),
        });
    }
    if kernel.cpu.is_none() {
        // Compiled now, so that a WGSL error is the launch's error, not
        // the stream's later.
        kernel.program()?;
    }
    check_disjoint_bindings(kernel, buffers, "host kernels need disjoint bindings")?;
    let run = Run {
        kernel: *kernel,
        grid,
    };
    if stream.is_inline() {
        return stream.run_inline(|| run.over(buffers, params));
    }
    let params = params.to_vec();
    let buffers = buffers.to_vec();
    stream.submit(Box::new(move || run.over(&buffers, &params)))
}

/// What a launch runs: the kernel (its Rust override or its WGSL) over
/// a grid.
#[derive(Clone, Copy)]
struct Run {
    kernel: Kernel,
    grid: [u32; 3],
}

impl Run {
    /// Runs the kernel over `buffers` (disjoint ranges, checked at
    /// enqueue) with `params`. A launch binds a few buffers: the
    /// bookkeeping stays on the stack (`SmallVec`), and only the kernel's
    /// own list of slices is a `Vec` (`CpuInvocation::buffers`).
    fn over(self, buffers: &[Binding<HostMemory>], params: &[u8]) -> Result<()> {
        if buffers.len() <= BINDINGS && distinct(buffers) {
            return self.over_distinct(buffers, params);
        }
        // Lock each allocation once, in address order so two streams
        // sharing allocations cannot deadlock.
        let mut allocs: SmallVec<[&Arc<HostMemory>; BINDINGS]> = SmallVec::new();
        for b in buffers {
            if !allocs.iter().any(|a| Arc::ptr_eq(a, &b.buffer)) {
                allocs.push(&b.buffer);
            }
        }
        allocs.sort_unstable_by_key(|a| Arc::as_ptr(a) as usize);
        let mut guards: SmallVec<[MutexGuard<'_, Vec<u64>>; BINDINGS]> =
            allocs.iter().map(|a| lock(&a.words)).collect();
        // Split each allocation into its bindings' disjoint ranges.
        // Zero-length bindings stay empty, but 8-byte aligned (an empty
        // `[u64]`), so kernels can view them as any element type.
        let mut views: Vec<&mut [u8]> = Vec::with_capacity(buffers.len());
        views.extend((0..buffers.len()).map(|_| bytemuck::cast_slice_mut::<u64, u8>(&mut [])));
        for (g, alloc) in guards.iter_mut().zip(&allocs) {
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut g[..]);
            let mut rest = &mut bytes[..alloc.len()];
            let mut at = 0;
            let mut mine: SmallVec<[usize; BINDINGS]> = (0..buffers.len())
                .filter(|&i| Arc::ptr_eq(&buffers[i].buffer, alloc) && buffers[i].len > 0)
                .collect();
            mine.sort_unstable_by_key(|&i| buffers[i].offset);
            for i in mine {
                let b = &buffers[i];
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(b.offset - at);
                let (view, tail) = tail.split_at_mut(b.len);
                views[i] = view;
                rest = tail;
                at = b.offset + b.len;
            }
        }
        self.call(views, params)
    }

    /// [`over`](Self::over) when every binding is an allocation of its
    /// own (the usual case: host memory gives every buffer one): each is
    /// locked, in address order, and its range is the binding's view.
    fn over_distinct(self, buffers: &[Binding<HostMemory>], params: &[u8]) -> Result<()> {
        let mut order: SmallVec<[usize; BINDINGS]> = (0..buffers.len()).collect();
        order.sort_unstable_by_key(|&i| Arc::as_ptr(&buffers[i].buffer) as usize);
        let mut guards: SmallVec<[(usize, MutexGuard<'_, Vec<u64>>); BINDINGS]> = order
            .iter()
            .map(|&i| (i, lock(&buffers[i].buffer.words)))
            .collect();
        guards.sort_unstable_by_key(|(i, _)| *i);
        let views = guards
            .iter_mut()
            .map(|(i, g)| {
                let b = &buffers[*i];
                if b.len == 0 {
                    // Empty, but 8-byte aligned (as in `over`).
                    return bytemuck::cast_slice_mut::<u64, u8>(&mut []);
                }
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut g[..]);
                &mut bytes[b.offset..b.offset + b.len]
            })
            .collect();
        self.call(views, params)
    }

    /// Runs the kernel over `views` (in binding order).
    fn call(self, views: Vec<&mut [u8]>, params: &[u8]) -> Result<()> {
        run_on_host(&self.kernel, self.grid, views, params).map_err(|message| Error::Kernel {
            kernel: self.kernel.name.to_owned(),
            message,
        })
    }
}

/// Whether every binding is a different allocation.
#[inline]
fn distinct(buffers: &[Binding<HostMemory>]) -> bool {
    buffers.iter().enumerate().all(|(i, b)| {
        buffers[..i]
            .iter()
            .all(|p| !Arc::ptr_eq(&p.buffer, &b.buffer))
    })
}

impl<B: HostBackend> Kernels for B {
    fn enqueue_kernel(
        &self,
        stream: &'static HostStream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[Binding<HostMemory>],
        params: &[u8],
    ) -> Result<()> {
        enqueue_kernel(B::TYPE, stream, kernel, grid, buffers, params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::CpuInvocation;

    /// Writes its binding's index (plus 1) into every byte of each view,
    /// and fails on a view of the wrong length.
    fn mark(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        let lens: Vec<usize> = inv.params.iter().map(|&l| usize::from(l)).collect();
        for (i, v) in inv.buffers.iter_mut().enumerate() {
            if v.len() != lens[i] {
                return Err(format!(
                    "binding {i}: expected {} bytes, found {}",
                    lens[i],
                    v.len()
                ));
            }
            v.fill(i as u8 + 1);
        }
        Ok(())
    }

    fn run(buffers: &[Binding<HostMemory>]) -> Result<()> {
        let lens: Vec<u8> = buffers.iter().map(|b| b.len as u8).collect();
        let run = Run {
            kernel: Kernel {
                name: "mark",
                workgroup_size: [1, 1, 1],
                bindings: buffers.len(),
                wgsl: None,
                ptx: None,
                cpu: Some(mark),
                strict_float: false,
            },
            grid: [1, 1, 1],
        };
        run.over(buffers, &lens)
    }

    fn bytes(m: &HostMemory) -> Vec<u8> {
        m.with_bytes(|b| b.to_vec())
    }

    /// Allocations of their own, bound in an order other than their
    /// addresses' (locked in address order): each view is its binding's
    /// range.
    #[test]
    fn distinct_allocations_are_their_bindings_views() {
        let mut allocs: Vec<Arc<HostMemory>> = (0..3)
            .map(|_| Arc::new(HostMemory::alloc(64).expect("alloc")))
            .collect();
        allocs.sort_by_key(|a| std::cmp::Reverse(Arc::as_ptr(a) as usize));
        let bind = |a: &Arc<HostMemory>, offset, len| Binding {
            buffer: Arc::clone(a),
            offset,
            len,
        };
        let buffers = [
            bind(&allocs[0], 8, 16),
            bind(&allocs[1], 0, 0),
            bind(&allocs[2], 32, 8),
        ];
        assert!(distinct(&buffers));
        run(&buffers).expect("run");
        let mut want = vec![0u8; 64];
        want[8..24].fill(1);
        assert_eq!(bytes(&allocs[0]), want);
        assert_eq!(bytes(&allocs[1]), vec![0u8; 64]);
        let mut want = vec![0u8; 64];
        want[32..40].fill(3);
        assert_eq!(bytes(&allocs[2]), want);
    }

    /// Disjoint ranges of one allocation (and a second allocation) are
    /// split from one lock.
    #[test]
    fn ranges_of_one_allocation_are_split() {
        let one = Arc::new(HostMemory::alloc(64).expect("alloc"));
        let other = Arc::new(HostMemory::alloc(16).expect("alloc"));
        let bind = |a: &Arc<HostMemory>, offset, len| Binding {
            buffer: Arc::clone(a),
            offset,
            len,
        };
        let buffers = [bind(&one, 32, 8), bind(&other, 0, 16), bind(&one, 0, 8)];
        assert!(!distinct(&buffers));
        run(&buffers).expect("run");
        let mut want = vec![0u8; 64];
        want[32..40].fill(1);
        want[0..8].fill(3);
        assert_eq!(bytes(&one), want);
        assert_eq!(bytes(&other), vec![2u8; 16]);
    }
}

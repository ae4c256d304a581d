//! Host kernels: a kernel's Rust function, run once per launch on the
//! stream's thread with every buffer bound.

use std::sync::{Arc, MutexGuard};

use super::HostBackend;
use super::memory::HostMemory;
use super::stream::{HostStream, lock};
use crate::backend::typed::Kernels;
use crate::backend::typed::check_distinct_buffers;
use crate::core::DeviceType;
use crate::error::{Error, Result};
use crate::kernel::{CpuInvocation, Kernel};

/// Enqueues `kernel`'s host implementation over `buffers` (distinct
/// allocations, checked here).
pub fn enqueue_kernel(
    ty: DeviceType,
    stream: &HostStream,
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: &[Arc<HostMemory>],
    params: &[u8],
) -> Result<()> {
    let f = kernel.cpu.ok_or_else(|| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: format!(
            "has no host implementation, which the {} backend runs",
            ty.backend_name()
        ),
    })?;
    check_distinct_buffers(kernel, buffers, "host kernels need distinct buffers")?;
    let name = kernel.name;
    let workgroup_size = kernel.workgroup_size;
    let params = params.to_vec();
    let buffers = buffers.to_vec();
    stream.submit(Box::new(move || {
        // Lock in address order so two streams sharing buffers cannot
        // deadlock, then hand the kernel its buffers in binding order.
        let mut order: Vec<usize> = (0..buffers.len()).collect();
        order.sort_by_key(|&i| Arc::as_ptr(&buffers[i]) as usize);
        let mut guards: Vec<(usize, MutexGuard<'_, Vec<u64>>)> = order
            .iter()
            .map(|&i| (i, lock(&buffers[i].words)))
            .collect();
        guards.sort_by_key(|(i, _)| *i);
        let views: Vec<&mut [u8]> = guards
            .iter_mut()
            .map(|(i, g)| {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut g[..]);
                &mut bytes[..buffers[*i].len()]
            })
            .collect();
        let mut inv = CpuInvocation {
            grid,
            workgroup_size,
            params: &params,
            buffers: views,
        };
        f(&mut inv).map_err(|message| Error::Kernel {
            kernel: name.to_owned(),
            message,
        })
    }))
}

impl<B: HostBackend> Kernels for B {
    fn enqueue_kernel(
        &self,
        stream: &'static HostStream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[Arc<HostMemory>],
        params: &[u8],
    ) -> Result<()> {
        enqueue_kernel(B::TYPE, stream, kernel, grid, buffers, params)
    }
}

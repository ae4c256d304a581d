//! The host memory behind Keel's CPU buffers, for a program (or a
//! framework through DLPack) that reads and writes it in place.

use crate::Buffer;
use crate::backend::cpu::HostMemory;
use crate::core::DeviceType;
use crate::error::{Error, Result};

/// Where `buffer`'s bytes are in host memory: `buffer.len()` bytes from
/// the returned address, valid while the buffer (or another handle to
/// its memory) lives. Keel's own accesses to the memory run on its
/// streams; a program's through this pointer must not overlap them (wait
/// for the buffer's stream first, and enqueue nothing on it meanwhile).
pub fn host_pointer(buffer: &Buffer) -> Result<*mut u8> {
    if buffer.device().device_type() != DeviceType::Cpu {
        return Err(Error::invalid(format!(
            "a host pointer: expected a buffer on the CPU, found one on {}",
            buffer.device()
        )));
    }
    let memory = buffer
        .handle()
        .downcast_ref::<HostMemory>()
        .ok_or_else(|| Error::invalid("a host pointer: the CPU buffer is not host memory"))?;
    // The buffer is a block at `offset` of the allocator's segment.
    Ok(memory.as_ptr().wrapping_add(buffer.offset()))
}

//! PTX kernels: loading modules, checking and launching.
//!
//! # Parameter convention
//!
//! A kernel's PTX entry point (named [`Kernel::name`]) takes, in order:
//!
//! 1. each bound buffer as a 64-bit device pointer (`.param .u64`), in
//!    binding order;
//! 2. the launch's parameter block split into 32-bit values (`.param .u32`
//!    or `.param .f32`), in order: `n` then `alpha` for `saxpy`, `n` then
//!    `iters` for `spin`, `n` for `vector_add`;
//! 3. for PTX generated from WGSL (a kernel without a PTX override), each
//!    bound buffer's length in bytes (`.param .u64`), in binding order,
//!    which the generated bounds checks compare against. The parameter
//!    block is padded with zero words up to the WGSL struct's size.
//!
//! The block is [`Kernel::workgroup_size`] threads, the grid the launch's
//! grid. A launch whose buffer and parameter count does not match the entry
//! point's parameter list is refused with an error, never run.
//!
//! Modules are loaded with `cuModuleLoadDataEx` (the driver JIT-compiles
//! the PTX for the device) once per (device, kernel), kept for the process,
//! and the JIT's error log goes into the error when loading fails.

use std::ffi::{CString, c_uint, c_void};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUjit_option};

use super::Cuda;
use super::device::{Ctx, poisoned};
use super::loader::{call, describe, status};
use super::memory::CudaBuffer;
use super::stream::CudaStream;
use crate::backend::typed::{Binding, Kernels};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// A loaded kernel.
pub(super) struct Function {
    func: sys::CUfunction,
    /// Parameters of the PTX entry point.
    params: usize,
    /// Generated from WGSL: takes the buffers' lengths after the
    /// parameter words, and this many words.
    generated: Option<usize>,
}
// SAFETY: module functions are driver objects usable from any thread; the
// module they belong to is never unloaded.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

fn kernel_error(kernel: &Kernel, message: impl Into<String>) -> Error {
    Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: message.into(),
    }
}

/// How many `.param` entries the PTX entry point `name` declares, or
/// `None` when the source has no such `.entry`.
pub fn entry_param_count(ptx: &str, name: &str) -> Option<usize> {
    let code = strip_comments(ptx);
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        let after = &rest[at + ".entry".len()..];
        let trimmed = after.trim_start();
        let ident_len = trimmed
            .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '$'))
            .unwrap_or(trimmed.len());
        if &trimmed[..ident_len] == name {
            let sig = trimmed[ident_len..].trim_start();
            if !sig.starts_with('(') {
                return Some(0);
            }
            let close = sig.find(')')?;
            return Some(sig[..close].matches(".param").count());
        }
        rest = after;
    }
    None
}

/// `ptx` without its `//` line comments (which may hold parentheses).
pub fn strip_comments(ptx: &str) -> String {
    ptx.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The kernel's function on `c`, loading its module on first use.
fn function(c: &'static Ctx, kernel: &Kernel) -> Result<Arc<Function>> {
    if kernel.ptx.is_none() && kernel.wgsl.is_none() {
        return Err(kernel_error(
            kernel,
            "has neither PTX nor WGSL, which the CUDA backend runs",
        ));
    }
    // Keyed by the source the kernel names (its override, else its WGSL,
    // printed strict or not): a `&'static str` lives at one address, so a
    // launch finds its function without generating or copying any PTX.
    let named = kernel.ptx.or(kernel.wgsl).unwrap_or_default();
    let strict = kernel.ptx.is_none() && kernel.strict_float;
    let key = (kernel.name, named.as_ptr() as usize, strict);
    let mut cache = c.functions.lock().map_err(|_| poisoned())?;
    if let Some(f) = cache.get(&key) {
        return Ok(Arc::clone(f));
    }
    let source = kernel.ptx_source()?;
    let ptx: &str = &source;
    let generated = match kernel.ptx {
        Some(_) => None,
        None => Some(kernel.program()?.param_bytes as usize / 4),
    };
    let params = entry_param_count(ptx, kernel.name).ok_or_else(|| {
        kernel_error(
            kernel,
            format!("the PTX source has no `.entry {}`", kernel.name),
        )
    })?;
    let image = CString::new(ptx)
        .map_err(|_| kernel_error(kernel, "the PTX source contains a NUL byte"))?;
    let name = CString::new(kernel.name)
        .map_err(|_| kernel_error(kernel, "the kernel name contains a NUL byte"))?;
    let _scope = c.scope()?;
    let mut log = vec![0u8; 8192];
    let mut options = [
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `image` is NUL-terminated PTX; the options point to a log
    // buffer of the size given (passed by value, as the driver expects);
    // a context is current.
    let r = status("cuModuleLoadDataEx", || unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            image.as_ptr().cast(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    })?;
    if r != sys::CUresult::CUDA_SUCCESS {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let jit = String::from_utf8_lossy(&log[..end]).trim().to_owned();
        return Err(kernel_error(
            kernel,
            format!(
                "PTX failed to load on cuda:{}: {}{}",
                c.index,
                describe(r),
                if jit.is_empty() {
                    String::new()
                } else {
                    format!(": {jit}")
                }
            ),
        ));
    }
    let mut func: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: `module` was just loaded; `name` is NUL-terminated.
    call("cuModuleGetFunction", || unsafe {
        sys::cuModuleGetFunction(&mut func, module, name.as_ptr())
    })
    .map_err(|e| kernel_error(kernel, format!("no entry point: {e}")))?;
    let f = Arc::new(Function {
        func,
        params,
        generated,
    });
    cache.insert(key, Arc::clone(&f));
    Ok(f)
}

impl Kernels for Cuda {
    /// `cuLaunchKernel`, with the parameter convention of the module docs.
    fn enqueue_kernel(
        &self,
        stream: CudaStream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[Binding<CudaBuffer>],
        params: &[u8],
    ) -> Result<()> {
        let c = stream.ctx;
        let f = function(c, kernel)?;
        if !params.len().is_multiple_of(4) {
            return Err(kernel_error(
                kernel,
                format!(
                    "expected a parameter block of 32-bit values (a multiple of 4 bytes), found {} bytes",
                    params.len()
                ),
            ));
        }
        let mut words = params.len() / 4;
        if let Some(declared) = f.generated {
            if words > declared {
                return Err(kernel_error(
                    kernel,
                    format!(
                        "expected a parameter block of at most {declared} 32-bit values (the WGSL struct), found {words}"
                    ),
                ));
            }
            words = declared;
        }
        let lengths = if f.generated.is_some() {
            buffers.len()
        } else {
            0
        };
        if buffers.len() + words + lengths != f.params {
            return Err(kernel_error(
                kernel,
                format!(
                    "the PTX entry point takes {} parameters, found {} buffers and {words} 32-bit values",
                    f.params,
                    buffers.len()
                ),
            ));
        }
        let info = c.info;
        for i in 0..3 {
            if i64::from(grid[i]) > i64::from(info.max_grid[i]) {
                return Err(kernel_error(
                    kernel,
                    format!(
                        "grid {grid:?} exceeds the device's maximum grid {:?}",
                        info.max_grid
                    ),
                ));
            }
        }
        let block = kernel.workgroup_size;
        let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
        if threads == 0
            || threads > u64::try_from(info.max_threads_per_block).unwrap_or(0)
            || (0..3).any(|i| i64::from(block[i]) > i64::from(info.max_block[i]))
        {
            return Err(kernel_error(
                kernel,
                format!(
                    "workgroup size {block:?} is not a valid CUDA block on this device (at most {:?} and {} threads)",
                    info.max_block, info.max_threads_per_block
                ),
            ));
        }
        if grid.contains(&0) {
            return Ok(()); // nothing to run
        }
        let _scope = c.scope()?;
        for b in buffers {
            b.buffer.used_on(stream)?;
        }
        // A binding is a range of an allocation: its device pointer is the
        // allocation's plus the offset.
        let mut pointers: Vec<sys::CUdeviceptr> = buffers
            .iter()
            .map(|b| b.buffer.ptr + b.offset as sys::CUdeviceptr)
            .collect();
        let mut values: Vec<u32> = params
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        values.resize(words, 0);
        // Each binding's length as WGSL sees it: rounded up to 4 bytes
        // within its allocation, as Vulkan and wgpu bind storage ranges
        // (an f16 tensor of odd length is stored as whole 32-bit words by
        // the kernels that pack halves).
        let mut lens: Vec<u64> = buffers[..lengths]
            .iter()
            .map(|b| {
                let room = b.buffer.len.saturating_sub(b.offset);
                b.len.next_multiple_of(4).min(room) as u64
            })
            .collect();
        let mut args: Vec<*mut c_void> = pointers
            .iter_mut()
            .map(|p| (p as *mut sys::CUdeviceptr).cast())
            .chain(values.iter_mut().map(|v| (v as *mut u32).cast()))
            .chain(lens.iter_mut().map(|l| (l as *mut u64).cast()))
            .collect();
        let (func, raw) = (f.func, stream.raw.0);
        // SAFETY: `args` holds one pointer per entry-point parameter (checked
        // above), each to a live value of the parameter's size (8-byte device
        // pointers, then 32-bit values, then 8-byte lengths); the driver copies them before
        // returning. Grid and block are within the device's limits; every
        // buffer stays alive until its work is done (freed stream-ordered).
        call("cuLaunchKernel", || unsafe {
            sys::cuLaunchKernel(
                func,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                raw,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
        .map_err(|e| kernel_error(kernel, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::entry_param_count;
    use crate::kernels;

    /// The demo kernels' generated PTX takes the buffers, the parameter
    /// words and the buffers' lengths, and fuses nothing itself: whether
    /// `saxpy`'s multiply and add become one FMA is ptxas's choice, which
    /// WGSL allows.
    #[test]
    fn entry_params_of_the_demo_kernels() {
        for (k, n) in [
            (kernels::VECTOR_ADD, 3 + 1 + 3),
            (kernels::SAXPY, 2 + 2 + 2),
            (kernels::SPIN, 1 + 2 + 1),
        ] {
            let ptx = k.ptx_source().expect("PTX generated from WGSL");
            assert_eq!(entry_param_count(&ptx, k.name), Some(n), "{}", k.name);
            for header in [".version", ".target sm_", ".address_size 64"] {
                assert!(ptx.contains(header), "{}: {header}", k.name);
            }
            assert!(
                ptx.contains(&format!(".visible .entry {}(", k.name)),
                "{}",
                k.name
            );
            assert!(
                !ptx.contains("fma") && !ptx.contains("mad.f32"),
                "{}",
                k.name
            );
        }
        assert_eq!(entry_param_count(".entry foo(.param .u32 a)", "fo"), None);
        assert_eq!(entry_param_count(".entry foo()", "foo"), Some(0));
    }
}

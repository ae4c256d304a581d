//! Loading libcuda, calling it safely, and what each device reports.
//!
//! cudarc loads libcuda lazily and panics when it is missing, so the
//! library is probed first ([`sys::is_culib_present`]); only when it is
//! present does any other entry point run. Every call also goes through
//! [`call`], which turns a status into a [`Result`] and a panic inside
//! cudarc (a symbol an old driver lacks) into an error, never an unwind
//! into the user's code.

use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUdevice_attribute as A, CUresult};

use super::TY;
use crate::error::{Error, Result};

/// The reason reported when libcuda cannot be loaded.
pub const NO_LIBRARY: &str = "the CUDA driver library (libcuda) was not found";

/// Runs one driver call; `what` names it in the error.
pub(super) fn call(what: &str, f: impl FnOnce() -> CUresult) -> Result<()> {
    match status(what, f)? {
        CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(cuda_error(what, r)),
    }
}

/// Runs one driver call and returns its status (for calls where a status
/// other than success is an answer, such as `CUDA_ERROR_NOT_READY`).
pub(super) fn status(what: &str, f: impl FnOnce() -> CUresult) -> Result<CUresult> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| {
        Error::backend(
            TY,
            format!("{what}: the CUDA driver library does not provide this entry point"),
        )
    })
}

/// Runs a query call: `Ok(true)` when done, `Ok(false)` when not ready.
pub(super) fn ready(what: &str, f: impl FnOnce() -> CUresult) -> Result<bool> {
    match status(what, f)? {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => Err(cuda_error(what, r)),
    }
}

/// The driver's name and description of a status.
pub(super) fn describe(r: CUresult) -> String {
    let text = |f: unsafe fn(CUresult, *mut *const c_char) -> CUresult| {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: the driver writes a pointer to a static, NUL-terminated
        // string (or leaves it null) for any status value.
        let ok = catch_unwind(AssertUnwindSafe(|| unsafe { f(r, &mut p) }))
            .is_ok_and(|s| s == CUresult::CUDA_SUCCESS);
        // SAFETY: on success `p` points to a static NUL-terminated string.
        (ok && !p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    match (text(sys::cuGetErrorName), text(sys::cuGetErrorString)) {
        (Some(name), Some(desc)) => format!("{name} ({desc})"),
        (Some(name), None) => name,
        _ => format!("{r:?}"),
    }
}

/// A driver error as Keel's error.
pub(super) fn cuda_error(what: &str, r: CUresult) -> Error {
    Error::backend(TY, format!("{what} failed: {}", describe(r)))
}

/// What one device reports, read once when the driver loads.
#[derive(Debug, Clone)]
pub(super) struct DeviceInfo {
    pub dev: sys::CUdevice,
    pub name: String,
    pub total_memory: u64,
    pub major: i32,
    pub minor: i32,
    pub sm_count: i32,
    pub clock_khz: i32,
    pub memory_clock_khz: i32,
    pub bus_width: i32,
    pub l2_bytes: i32,
    pub max_threads_per_block: i32,
    pub max_block: [i32; 3],
    pub max_grid: [i32; 3],
    pub warp_size: i32,
    pub shared_per_block: i32,
    pub memory_pools: bool,
    pub unified_addressing: bool,
    pub integrated: bool,
    pub pci: (i32, i32, i32),
}

/// The loaded driver: its version and its devices, in CUDA ordinal order.
#[derive(Debug)]
pub(super) struct Driver {
    pub version: i32,
    pub devices: Vec<DeviceInfo>,
}

static DRIVER: OnceLock<std::result::Result<Driver, String>> = OnceLock::new();

/// The driver, loaded on first use; the error is why CUDA cannot run.
pub(super) fn driver() -> std::result::Result<&'static Driver, &'static str> {
    DRIVER.get_or_init(load).as_ref().map_err(String::as_str)
}

fn load() -> std::result::Result<Driver, String> {
    // SAFETY: `is_culib_present` only tries to open the library by its
    // usual names and closes it again; it calls nothing inside it.
    let present = catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err(NO_LIBRARY.to_owned());
    }
    let reason = |e: Error| match e {
        Error::Backend { message, .. } => message,
        other => other.to_string(),
    };
    // SAFETY: cuInit takes flags (must be 0) and may be called many times.
    call("cuInit", || unsafe { sys::cuInit(0) }).map_err(reason)?;
    let mut version: c_int = 0;
    // SAFETY: writes one int.
    call("cuDriverGetVersion", || unsafe {
        sys::cuDriverGetVersion(&mut version)
    })
    .map_err(reason)?;
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    call("cuDeviceGetCount", || unsafe {
        sys::cuDeviceGetCount(&mut n)
    })
    .map_err(reason)?;
    if n <= 0 {
        return Err("the CUDA driver reports no CUDA device".to_owned());
    }
    let devices = (0..n.min(512))
        .map(|ordinal| device_info(ordinal).map_err(reason))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Driver { version, devices })
}

fn attr(dev: sys::CUdevice, a: A) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: writes one int; `dev` came from cuDeviceGet.
    call("cuDeviceGetAttribute", || unsafe {
        sys::cuDeviceGetAttribute(&mut v, a, dev)
    })?;
    Ok(v)
}

fn device_info(ordinal: c_int) -> Result<DeviceInfo> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: writes one device handle; the ordinal is below the count.
    call("cuDeviceGet", || unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    let mut name = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    call("cuDeviceGetName", || unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev)
    })?;
    // SAFETY: NUL-terminated by the driver within the array (and the last
    // byte is still 0 because the driver writes fewer than 256 bytes).
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut total: usize = 0;
    // SAFETY: writes one size.
    call("cuDeviceTotalMem", || unsafe {
        sys::cuDeviceTotalMem_v2(&mut total, dev)
    })?;
    let a = |x| attr(dev, x);
    Ok(DeviceInfo {
        dev,
        name,
        total_memory: total as u64,
        major: a(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        minor: a(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        sm_count: a(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        clock_khz: a(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        memory_clock_khz: a(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
        bus_width: a(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
        l2_bytes: a(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        max_threads_per_block: a(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block: [
            a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_grid: [
            a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        warp_size: a(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        shared_per_block: a(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        // Older drivers do not know this attribute: no pools then.
        memory_pools: a(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED).is_ok_and(|v| v != 0),
        unified_addressing: a(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0,
        integrated: a(A::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0,
        pci: (
            a(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            a(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            a(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        ),
    })
}

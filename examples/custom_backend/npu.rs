//! `npu`: a complete third-party backend, registered at run time in the
//! PrivateUse1 slot (c10's way of plugging in an out-of-tree device).
//!
//! The "NPU" is a simulated accelerator with two devices. Each device runs
//! its work on host threads, using Keel's host building blocks
//! (`keel::backend::cpu`); unlike Keel's CPU, its default stream is
//! asynchronous too, like a real accelerator's default queue, and the two
//! devices can copy each other's memory directly (simulated peer access).
//!
//! Everything a backend provides is here, written against Keel's backend
//! skeleton ([`keel::backend::typed::Backend`]): its devices, streams and
//! properties; being a host-thread device, it takes Keel's host events,
//! memory, copies and kernels by implementing
//! [`keel::backend::cpu::HostBackend`] (a GPU backend implements the
//! skeleton's `Events`, `Memory` and `Kernels` itself). The skeleton does
//! the rest (checks, the thread's current device and streams, the stream
//! pool, handle types), exactly as for Keel's own backends. Its buffers
//! come from Keel's caching allocator (`keel::memory`) like every
//! backend's: the backend allocates segments, and its kernels bind ranges
//! of them (`keel::backend::typed::Binding`; the host kernels split one
//! allocation into disjoint slices). After
//! [`install`], users reach it through the ordinary API: `"npu:1".parse::<Device>()`, `DeviceGuard`,
//! `get_stream_from_pool`, `Event`, `Buffer`, `Stream::launch`.

use std::sync::{LazyLock, OnceLock};

use keel::backend::cpu::{HostBackend, HostDevice, HostStream};
use keel::backend::pool::PoolCursors;
use keel::backend::typed::{Backend, Typed};
use keel::backend::{DeviceKind, DeviceProperties, TimestampSupport};
use keel::{Device, DeviceIndex, DeviceType, Error, Result, StreamId};

/// The name users write in device strings.
pub const NAME: &str = "npu";
/// Devices the simulated NPU has.
pub const DEVICES: DeviceIndex = 2;
const TY: DeviceType = DeviceType::PrivateUse1;
/// Priority levels of each device's stream pool.
const LEVELS: usize = 3;

static STATE: LazyLock<Vec<HostDevice>> = LazyLock::new(|| {
    (0..DEVICES)
        .map(|i| HostDevice::new(TY, i, LEVELS, false))
        .collect()
});

/// The backend: one host-thread device per NPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct Npu;

static NPU: Typed<Npu> = Typed::new(Npu);

/// Names the PrivateUse1 slot `npu` and registers the backend in it. Safe
/// to call more than once; every call returns the first call's result.
pub fn install() -> Result<()> {
    static INSTALLED: OnceLock<Result<()>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            keel::register_privateuse1_backend(NAME)?;
            // The profiler's hooks too: host streams time each operation
            // inside its own tasks.
            keel::backend::register_timed(TY, &NPU, Some(&NPU), &NPU)?;
            register_numerics()
        })
        .clone()
}

impl Backend for Npu {
    const TYPE: DeviceType = TY;
    type Device = HostDevice;
    type Stream = &'static HostStream;

    fn loaded(&self) -> std::result::Result<(), &str> {
        Ok(())
    }
    fn device_count(&self) -> DeviceIndex {
        DEVICES
    }
    fn device(&self, index: DeviceIndex) -> Result<&'static HostDevice> {
        usize::try_from(index)
            .ok()
            .and_then(|i| STATE.get(i))
            .ok_or_else(|| Error::invalid(format!("no {NAME} device {index}")))
    }
    fn cursors<'d>(&self, device: &'d HostDevice) -> &'d PoolCursors {
        device.cursors()
    }
    fn stream(&self, device: &'static HostDevice, id: StreamId) -> Result<&'static HostStream> {
        device.stream(id)
    }
    fn query_stream(&self, stream: &'static HostStream) -> Result<bool> {
        stream.query()
    }
    fn synchronize_stream(&self, stream: &'static HostStream) -> Result<()> {
        stream.synchronize()
    }
    fn synchronize_device(&self, device: &'static HostDevice) -> Result<()> {
        device.synchronize()
    }

    fn describe(&self, _device: &'static HostDevice, at: Device) -> Result<DeviceProperties> {
        let mut p = DeviceProperties::new(at, "Keel simulated NPU", DeviceKind::Other);
        p.vendor = "keel examples".to_owned();
        p.native_backend = "host threads (PrivateUse1)".to_owned();
        p.driver = "examples/custom_backend".to_owned();
        // Kernels run on host threads (`run_on_host`), which never fuse
        // or reorder float operations.
        p.strict_float = true;
        p.compute_units = Some(1);
        p.timestamps = Some(TimestampSupport {
            period_ns: 1.0,
            valid_bits: 64,
        });
        p.extra
            .push(("peer access".to_owned(), "all npu devices".to_owned()));
        Ok(p)
    }
}

/// Events, memory, copies and kernels are Keel's host ones (the CPU's);
/// the two devices read each other's memory directly.
impl HostBackend for Npu {
    fn host_peer_copy(&self, src: Device, dst: Device) -> bool {
        src.device_type() == TY && dst.device_type() == TY
    }
}

// --- Operators, serialization, device module (PrivateUse1 parity) -------

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use keel::dispatch::{KernelOutcome, OpCall};
use keel::kernel::{CpuInvocation, as_f32s, as_f32s_mut};
use keel::{BackendMeta, DType, Kernel, Tensor};

/// The operators the NPU has its own kernels for; the rest take the CPU
/// fallback.
pub const NPU_OPS: [&str; 7] = [
    "add",
    "mul.Scalar",
    "rand",
    "randn",
    "uniform_",
    "normal_",
    "randint",
];

/// The memory layout the NPU's serialization hook records (a stand-in for
/// a real accelerator's private formats, such as Ascend's `npu_format`).
pub const NPU_FORMAT: &str = "ND";

/// How many tensors saved from an NPU had their metadata read back by the
/// hook (for tests).
pub static META_LOADS: AtomicU64 = AtomicU64::new(0);

fn npu_add(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let n = inv.param_u32(0)? as usize;
    let [a, b, out] = &mut inv.buffers[..] else {
        return Err("expected 3 buffers".to_owned());
    };
    let (a, b, out) = (as_f32s(0, a)?, as_f32s(1, b)?, as_f32s_mut(2, out)?);
    for i in 0..n.min(out.len()) {
        out[i] = a[i] + b[i];
    }
    Ok(())
}

fn npu_mul_scalar(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let (n, s) = (inv.param_u32(0)? as usize, inv.param_f32(4)?);
    let [x, out] = &mut inv.buffers[..] else {
        return Err("expected 2 buffers".to_owned());
    };
    let (x, out) = (as_f32s(0, x)?, as_f32s_mut(1, out)?);
    for i in 0..n.min(out.len()) {
        out[i] = x[i] * s;
    }
    Ok(())
}

/// The NPU's own `add` kernel (f32; runs on the device's stream threads).
pub const NPU_ADD: Kernel = Kernel {
    name: "npu_add_f32",
    workgroup_size: [1, 1, 1],
    bindings: 3,
    wgsl: None,
    ptx: None,
    cpu: Some(npu_add),
    strict_float: false,
};

/// The NPU's own `mul.Scalar` kernel (f32).
pub const NPU_MUL_SCALAR: Kernel = Kernel {
    name: "npu_mul_scalar_f32",
    workgroup_size: [1, 1, 1],
    bindings: 2,
    wgsl: None,
    ptx: None,
    cpu: Some(npu_mul_scalar),
    strict_float: false,
};

/// The element count of an f32 tensor, or a declined call.
fn f32_count(call: &OpCall<'_>, t: &Tensor) -> std::result::Result<u32, KernelOutcome> {
    match (t.dtype(), u32::try_from(t.numel())) {
        (DType::F32, Ok(n)) => Ok(n),
        (d, _) => Err(KernelOutcome::Declined(format!(
            "the npu kernel of '{}' takes f32 tensors of at most u32::MAX elements, found {d} x {}",
            call.op(),
            t.numel()
        ))),
    }
}

fn add_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let (a, b) = (call.tensor(0)?, call.tensor(1)?);
    if a.shape() != b.shape() {
        return Err(Error::invalid(format!(
            "add: expected tensors of the same shape, found {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let n = match (f32_count(call, a), f32_count(call, b)) {
        (Ok(n), Ok(_)) => n,
        (Err(d), _) | (_, Err(d)) => return Ok(d),
    };
    // The kernel binds distinct buffers: `x + x` reads a copy of `x`.
    let b = if std::ptr::eq(a.buffer(), b.buffer()) {
        b.to(call.device, &call.stream)?
    } else {
        b.clone()
    };
    let out = Tensor::empty(a.shape(), DType::F32, call.device)?;
    call.stream.launch(
        &NPU_ADD,
        [1, 1, 1],
        &[a.buffer(), b.buffer(), out.buffer()],
        &n.to_le_bytes(),
    )?;
    Ok(KernelOutcome::one(out))
}

fn mul_scalar_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let s = call.scalar(1)? as f32;
    let n = match f32_count(call, x) {
        Ok(n) => n,
        Err(d) => return Ok(d),
    };
    let out = Tensor::empty(x.shape(), DType::F32, call.device)?;
    let params = [n.to_le_bytes(), s.to_le_bytes()].concat();
    call.stream.launch(
        &NPU_MUL_SCALAR,
        [1, 1, 1],
        &[x.buffer(), out.buffer()],
        &params,
    )?;
    Ok(KernelOutcome::one(out))
}

/// The NPU's serialization hooks (c10's `BackendMeta`): it records the
/// device index and memory format of each tensor it saves, and checks the
/// format when such a tensor is loaded (wherever it is loaded).
#[derive(Debug)]
pub struct NpuMeta;

impl BackendMeta for NpuMeta {
    fn save(&self, _name: &str, tensor: &Tensor) -> Result<BTreeMap<String, String>> {
        Ok(BTreeMap::from([
            ("format".to_owned(), NPU_FORMAT.to_owned()),
            ("index".to_owned(), tensor.device().index().to_string()),
        ]))
    }

    fn load(&self, name: &str, _tensor: &Tensor, meta: &BTreeMap<String, String>) -> Result<()> {
        match meta.get("format").map(String::as_str) {
            Some(NPU_FORMAT) => {
                META_LOADS.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            other => Err(Error::invalid(format!(
                "npu tensor '{name}': expected format {NPU_FORMAT}, found {other:?}"
            ))),
        }
    }
}

/// What `keel::device_module::<NpuModule>("npu")` returns: the backend's
/// own functions, like `torch.npu.*`.
#[derive(Debug)]
pub struct NpuModule;

impl NpuModule {
    /// Devices the NPU has.
    pub fn device_count(&self) -> usize {
        keel::device_count(TY)
    }

    /// Waits for everything enqueued on NPU `index`.
    pub fn synchronize(&self, index: DeviceIndex) -> Result<()> {
        keel::synchronize(Device::new(TY, index)?)
    }

    /// The operators with NPU kernels (the rest take the CPU fallback).
    pub fn native_ops(&self) -> &'static [&'static str] {
        &NPU_OPS
    }
}

/// [`install`], then the NPU's operator kernels ([`NPU_OPS`]), the CPU
/// fallback for every other operator, its serialization hooks
/// ([`NpuMeta`]) and its device module ([`NpuModule`]). Safe to call more
/// than once.
pub fn install_ops() -> Result<()> {
    static INSTALLED: OnceLock<Result<()>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            install()?;
            keel::dispatch::register_kernel("add", TY, add_kernel)?;
            keel::dispatch::register_kernel("mul.Scalar", TY, mul_scalar_kernel)?;
            // The random operators: Keel's Philox kernels run on the NPU's
            // host streams; seed and offset come from the NPU's own
            // generator (`NpuGenerator`), reserved by the public functions.
            for op in keel::dispatch::RANDOM_OPS {
                keel::dispatch::register_kernel(op, TY, keel::dispatch::random_kernel)?;
            }
            keel::dispatch::register_fallback(TY, keel::dispatch::cpu_fallback)?;
            keel::register_backend_meta(TY, NpuMeta);
            keel::register_device_module(NAME, NpuModule)
        })
        .clone()
}

// ---- Numerics: the NPU's generator and autocast dtypes ----

/// The NPU's random generator, registered for PrivateUse1 (c10's
/// `REGISTER_GENERATOR_PRIVATEUSE1`): Keel's Philox engine, so Keel's
/// random kernels run on it, with its state bytes tagged `NPU0` so that a
/// state saved from another device type's generator is refused.
#[derive(Debug)]
pub struct NpuGenerator(keel::generator::Philox);

/// The tag in front of an [`NpuGenerator`]'s state.
pub const NPU_STATE_TAG: &[u8; 4] = b"NPU0";

impl keel::generator::GeneratorImpl for NpuGenerator {
    fn device(&self) -> Device {
        self.0.device()
    }
    fn set_current_seed(&mut self, seed: u64) {
        self.0.set_current_seed(seed);
    }
    fn current_seed(&self) -> u64 {
        self.0.current_seed()
    }
    fn offset(&self) -> u64 {
        self.0.offset()
    }
    fn set_offset(&mut self, offset: u64) -> Result<()> {
        self.0.set_offset(offset)
    }
    fn reserve(&mut self, words: u64) -> Result<keel::generator::PhiloxState> {
        self.0.reserve(words)
    }
    fn get_state(&self) -> Vec<u8> {
        [NPU_STATE_TAG.as_slice(), &self.0.get_state()].concat()
    }
    fn set_state(&mut self, state: &[u8]) -> Result<()> {
        match state.strip_prefix(NPU_STATE_TAG.as_slice()) {
            Some(rest) => self.0.set_state(rest),
            None => Err(Error::invalid(format!(
                "expected an {NAME} generator state starting with \"NPU0\", found {:02x?}",
                &state[..state.len().min(4)]
            ))),
        }
    }
}

fn npu_generator(device: Device) -> Result<Box<dyn keel::generator::GeneratorImpl>> {
    Ok(Box::new(NpuGenerator(keel::generator::Philox::new(
        device,
        keel::generator::DEFAULT_SEED,
    ))))
}

/// Registers the generator factory and the autocast dtypes (the NPU, like
/// many accelerators, runs lower-precision work in `f16` only).
fn register_numerics() -> Result<()> {
    keel::generator::register_generator(TY, npu_generator)?;
    keel::autocast::register_amp_supported_dtypes(TY, &[keel::autocast::AutocastDtype::F16])
}

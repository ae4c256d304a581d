//! CUDA: a cudarc program's context, stream and memory in Keel, and
//! Keel's driver handles in the program. Needs an NVIDIA GPU: without one
//! each test prints why it skips (and fails where KEEL_REQUIRE_BACKENDS
//! names cuda).

use cudarc::driver::{CudaContext, DevicePtr};
use keel_device::interop::cuda as interop;
use keel_device::kernels::SAXPY;
use keel_device::profiler::{LaneKind, SpanKind};
use keel_device::testing::conformance;
use keel_device::{Buffer, DeviceType, Stream};

fn gpu() -> bool {
    conformance::device(DeviceType::Cuda).is_some()
}

#[test]
fn a_cudarc_stream_and_memory_carry_keel_work() {
    if !gpu() {
        return;
    }
    let ctx = CudaContext::new(0).expect("the program's context");
    let d = interop::adopt_context(&ctx).expect("adopt context");
    assert_eq!(d.to_string(), "cuda:0");
    let h = interop::handles(d).expect("handles");
    assert_eq!(h.context, ctx.cu_ctx(), "the primary context, shared");
    assert_eq!(h.device, ctx.cu_device());

    let theirs = ctx.new_stream().expect("the program's stream");
    let s = interop::adopt_stream(&theirs).expect("adopt stream");
    assert_eq!(s.device(), d);
    assert_eq!(
        s.id(),
        theirs.cu_stream() as usize as i64,
        "c10's external id"
    );
    assert_eq!(interop::adopt_stream(&theirs).expect("again"), s);
    assert_eq!(interop::stream(&s).expect("handle"), theirs.cu_stream());
    let default = keel_device::default_stream(d).expect("default");
    assert!(interop::stream(&default).expect("legacy").is_null());

    // Keel's kernel on the program's stream and memory, then the
    // program's copy on the same stream: in order, no synchronisation.
    let n = 4096usize;
    let x = theirs
        .clone_htod(&(0..n).map(|i| i as f32).collect::<Vec<_>>())
        .expect("x");
    let y = theirs.clone_htod(&vec![1.0f32; n]).expect("y");
    let (px, _gx) = x.device_ptr(&theirs);
    let (py, _gy) = y.device_ptr(&theirs);
    // SAFETY: the program's allocations of n f32 each, alive past the
    // Keel buffers.
    let (kx, ky) = unsafe {
        (
            interop::adopt_buffer(d, px, 4 * n).expect("adopt x"),
            interop::adopt_buffer(d, py, 4 * n).expect("adopt y"),
        )
    };
    assert_eq!(interop::buffer(&ky).expect("pointer"), py);
    s.launch(
        &SAXPY,
        SAXPY.grid_for(n as u64),
        &[&kx, &ky],
        &[(n as u32).to_le_bytes(), 3.0f32.to_le_bytes()].concat(),
    )
    .expect("saxpy on the program's stream");
    drop((kx, ky));
    let got = theirs.clone_dtoh(&y).expect("read");
    let want: Vec<f32> = (0..n).map(|i| 3.0 * i as f32 + 1.0).collect();
    assert_eq!(got, want);

    // The program reads a Keel buffer through its pointer.
    let k = Buffer::from_slice(&s, &[5.0f32; 64]).expect("keel buffer");
    s.synchronize().expect("sync");
    let mut host = [0.0f32; 64];
    // SAFETY: the pointer is the live Keel buffer's, 64 f32 long.
    unsafe {
        cudarc::driver::result::memcpy_dtoh_sync(&mut host, interop::buffer(&k).expect("ptr"))
    }
    .expect("copy");
    assert_eq!(host, [5.0f32; 64]);
    let mut e = keel_device::Event::new(DeviceType::Cuda);
    assert_eq!(interop::event(&e).expect("unrecorded"), None);
    e.record(&s).expect("record");
    assert!(interop::event(&e).expect("recorded").is_some());
}

#[test]
fn bad_cuda_objects_are_clear_errors() {
    if !gpu() {
        return;
    }
    let d = keel_device::Device::new(DeviceType::Cuda, 0).expect("cuda:0");
    // SAFETY: a null stream is checked before any use.
    let err = unsafe { interop::adopt_raw_stream(d, std::ptr::null_mut()) }.expect_err("null");
    assert!(err.to_string().contains("null"), "{err}");
    let other = CudaContext::new_non_primary(0, 0).expect("a context of its own");
    let err = interop::adopt_context(&other).expect_err("not primary");
    assert!(err.to_string().contains("primary context"), "{err}");
    let theirs = other.new_stream().expect("its stream");
    // SAFETY: a live stream, of another context than Keel's.
    let err = unsafe { interop::adopt_raw_stream(d, theirs.cu_stream()) }.expect_err("foreign ctx");
    assert!(
        err.to_string()
            .contains("expected a stream of cuda:0's primary context"),
        "{err}"
    );
    // An even id nobody adopted is no stream.
    let err = Stream::new(d, 4096).synchronize().expect_err("unknown");
    assert!(err.to_string().contains("unknown stream id"), "{err}");
    let cpu = Buffer::new(keel_device::Device::cpu(), 4).expect("cpu");
    assert!(interop::buffer(&cpu).is_err());
}

#[test]
fn a_device_range_times_the_program_work_on_its_stream() {
    if !gpu() {
        return;
    }
    let ctx = CudaContext::new(0).expect("context");
    let theirs = ctx.new_stream().expect("stream");
    let s = interop::adopt_stream(&theirs).expect("adopt");
    let mut big = theirs.alloc_zeros::<f32>(1 << 24).expect("alloc");
    let _one = crate::session();
    let session = keel_device::profiler::start().expect("session");
    {
        let _r = keel_device::profiler::device_range(&s, "program memsets");
        for _ in 0..4 {
            theirs
                .memset_zeros(&mut big)
                .expect("the program's own work");
        }
    }
    theirs.synchronize().expect("sync");
    let trace = session.stop();
    let range = trace
        .spans
        .iter()
        .find(|sp| sp.name == "program memsets")
        .expect("the range");
    assert_eq!(range.kind, SpanKind::Annotation);
    assert!(range.dur_ns > 0);
    assert!(matches!(
        trace.lanes[range.lane as usize].kind,
        LaneKind::Stream { stream, .. } if stream == s.id()
    ));
}

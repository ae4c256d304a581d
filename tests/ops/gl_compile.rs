//! The GL adapter of wgpu while a cold compile of the tiled matmul holds
//! its context: other threads' launches, reads and allocations on the
//! same device keep going (Note [GL context lock] in keel-device's wgpu
//! backend).

use keel::Buffer;
use keel::testing::{child, conformance};

/// Runs in a child process (a cold Mesa shader cache: see
/// `gl_compile_does_not_starve_other_threads`): one thread compiles the
/// tiled matmul kernel on the GL adapter while others keep launching
/// small kernels and reading buffers on the same device.
#[test]
#[ignore = "run by `gl_compile_does_not_starve_other_threads` in a child process"]
fn probe_gl_compile_contention() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Instant;

    use keel::compute::{self, MatmulPrecision, params::Param};

    let device = conformance::wgpu_adapter("GL").expect("the GL adapter (checked by the parent)");
    let upload = |stream: &keel::Stream, v: &[f32]| Buffer::from_slice(stream, v).expect("upload");
    // The small kernel the other threads launch, compiled before they start.
    let warm = keel::default_stream(device).expect("stream");
    let (x, out) = (upload(&warm, &[1.0; 8]), upload(&warm, &[0.0; 8]));
    compute::softmax_rows(&warm, &x, &out, 2, 4).expect("softmax");
    warm.synchronize().expect("synchronize");

    let stop = AtomicBool::new(false);
    let rounds = AtomicUsize::new(0);
    let longest = AtomicUsize::new(0);
    let (compile_s, got) = std::thread::scope(|s| {
        for t in 0..3 {
            let (stop, rounds, longest) = (&stop, &rounds, &longest);
            s.spawn(move || {
                let stream = keel::get_stream_from_pool(device, t % 2 == 0).expect("pool stream");
                let x = upload(&stream, &[0.0, 1.0, 2.0, 3.0]);
                let out = upload(&stream, &[0.0; 4]);
                while !stop.load(Ordering::Relaxed) {
                    let round = Instant::now();
                    compute::softmax_rows(&stream, &x, &out, 1, 4).expect("softmax");
                    let got = out.read_as::<f32>(&stream).expect("read");
                    let total: f32 = got.iter().sum();
                    assert!((total - 1.0).abs() < 1e-5, "{got:?}");
                    rounds.fetch_add(1, Ordering::Relaxed);
                    let ms = round.elapsed().as_millis() as usize;
                    longest.fetch_max(ms, Ordering::Relaxed);
                }
            });
        }
        // And one that only allocates and frees buffers.
        let (stop_a, rounds_a, longest_a) = (&stop, &rounds, &longest);
        s.spawn(move || {
            while !stop_a.load(Ordering::Relaxed) {
                let round = Instant::now();
                let b = Buffer::new(device, 1024).expect("alloc");
                assert_eq!(b.len(), 1024);
                drop(b);
                rounds_a.fetch_add(1, Ordering::Relaxed);
                let ms = round.elapsed().as_millis() as usize;
                longest_a.fetch_max(ms, Ordering::Relaxed);
            }
        });
        // A copy of the tiled kernel's source at another address: Keel's
        // pipeline cache keys on the source's address, so it compiles here,
        // cold (the parent disabled Mesa's disk cache).
        let mut kernel = compute::MATMUL_TILED.kernel;
        let source: &'static str = Box::leak(
            kernel
                .wgsl
                .expect("WGSL source")
                .to_owned()
                .into_boxed_str(),
        );
        kernel.wgsl = Some(source);
        let launch = compute::params::Launch {
            kernel,
            params: compute::MATMUL_TILED.params,
        };
        let stream = keel::default_stream(device).expect("stream");
        let (a, b) = (
            upload(&stream, &[1.0, 2.0, 3.0, 4.0]),
            upload(&stream, &[1.0, 0.0, 0.0, 1.0]),
        );
        let c = upload(&stream, &[0.0; 4]);
        let start = Instant::now();
        let p = MatmulPrecision::default();
        let values = [2, 2, 2, p.mode(), p.chunk()].map(Param::U32);
        launch
            .launch(&stream, [1, 1, 1], &[&a, &b, &c], &values)
            .expect("matmul");
        let compile_s = start.elapsed().as_secs_f64();
        let got = c.read_as::<f32>(&stream).expect("read");
        stop.store(true, Ordering::Relaxed);
        (compile_s, got)
    });
    assert_eq!(got, [1.0, 2.0, 3.0, 4.0]);
    assert!(rounds.load(Ordering::Relaxed) > 0, "the other threads ran");
    println!(
        "cold tiled matmul compile + launch: {compile_s:.2} s; {} small rounds meanwhile, the longest {} ms",
        rounds.load(Ordering::Relaxed),
        longest.load(Ordering::Relaxed)
    );
    println!("probe ok");
}

/// wgpu's GL backend panics in any thread that waits over
/// `CONTEXT_LOCK_TIMEOUT_SECS` (6 s with EGL, wgpu-hal 30) for the GL
/// context; a cold llvmpipe compile of the tiled matmul holds it that long.
/// Keel's GL context lock (Note [GL context lock] in the wgpu backend) makes
/// the other threads wait on Keel instead. Runs in a child process with
/// Mesa's shader cache off, so that the compile is cold.
#[test]
fn gl_compile_does_not_starve_other_threads() {
    if conformance::wgpu_adapter("GL").is_none() {
        return;
    }
    let stdout = child::probe(
        module_path!(),
        "probe_gl_compile_contention",
        &[("MESA_SHADER_CACHE_DISABLE", "true")],
    );
    assert!(stdout.contains("probe ok"), "{stdout}");
    println!("{stdout}");
}

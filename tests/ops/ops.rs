//! Operators through the dispatcher: every operator against a Rust
//! reference (computed in f64) on every backend that runs here (CPU,
//! Vulkan, wgpu's Vulkan and GL adapters, the `npu` example backend),
//! with shapes of 1, primes and sizes that are not multiples of 16 or
//! 256; the dtypes of the CPU kernels; the dispatcher's errors; the
//! fallback path (counted); operator spans in the profiler.
//!
//! Tolerances: elementwise `f32` results within 1e-6 relative (one
//! rounding); `matmul` within 1e-5 * k absolute on inputs in [-1, 1];
//! `sum` within 1e-5 * n absolute; `softmax` within 1e-6 absolute.
//! `f16`/`bf16` within their precision (2^-10, 2^-7 relative, plus the
//! accumulation for matmul). Integers exact (wrapping).
//!
//! A backend that cannot run here skips with the reason printed unless
//! `KEEL_REQUIRE_BACKENDS` names it. Results hold whether or not a device
//! type has its own kernel for `matmul`, `sum` and `softmax`; fallbacks are
//! only counted for calls that have no kernel (an f16 call on a GPU).

use crate::npu;

use half::{bf16, f16};
use keel::dispatch::{self, Arg, ArgKind, KernelOutcome, OpSchema};
use keel::testing::conformance::builtin_devices;
use keel::{DType, Device, DeviceType, Element, Error, Tensor};

/// Every device to test on (each absent one printed as skipped; CUDA
/// only where a GPU and its driver are present).
fn devices() -> Vec<Device> {
    npu::install_ops().expect("npu");
    let mut out: Vec<Device> = builtin_devices().into_iter().map(|(_, d)| d).collect();
    out.push(Device::new(DeviceType::PrivateUse1, 1).expect("npu:1"));
    out
}

/// Deterministic values in [-1, 1].
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f64], tol: impl Fn(f64) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let t = tol(w);
        assert!(
            (f64::from(g) - w).abs() <= t,
            "{what}: element {i}: expected {w} (within {t}), found {g}"
        );
    }
}

fn rel(r: f64) -> impl Fn(f64) -> f64 {
    move |w: f64| r * w.abs().max(1.0)
}

const LENGTHS: [usize; 6] = [1, 7, 16, 257, 1000, 4099];

#[test]
fn elementwise_on_every_device() {
    for d in devices() {
        for (k, &n) in LENGTHS.iter().enumerate() {
            let (a, b) = (values(n, 1 + k as u64), values(n, 100 + k as u64));
            let ta = Tensor::from_slice(&a, &[n], d).expect("a");
            let tb = Tensor::from_slice(&b, &[n], d).expect("b");
            let what = |op: &str| format!("{op} of {n} on {d}");
            let sum: Vec<f64> = a.iter().zip(&b).map(|(x, y)| f64::from(x + y)).collect();
            let prod: Vec<f64> = a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).collect();
            let plus: Vec<f64> = a.iter().map(|x| f64::from(x + 0.25)).collect();
            let times: Vec<f64> = a.iter().map(|x| f64::from(x * -3.0)).collect();
            let c = ta.add(&tb).expect("add");
            assert_eq!(c.device(), d);
            assert_eq!(c.shape(), &[n]);
            assert_close(
                &what("add"),
                &c.to_vec::<f32>().expect("read"),
                &sum,
                rel(1e-6),
            );
            let c = ta.mul(&tb).expect("mul");
            assert_close(
                &what("mul"),
                &c.to_vec::<f32>().expect("read"),
                &prod,
                rel(1e-6),
            );
            let c = ta.add_scalar(0.25).expect("add.Scalar");
            assert_close(
                &what("add.Scalar"),
                &c.to_vec::<f32>().expect("r"),
                &plus,
                rel(1e-6),
            );
            let c = ta.mul_scalar(-3.0).expect("mul.Scalar");
            assert_close(
                &what("mul.Scalar"),
                &c.to_vec::<f32>().expect("r"),
                &times,
                rel(1e-6),
            );
            // The same tensor twice: bound once, copied for the second.
            let c = ta.add(&ta).expect("x + x");
            let twice: Vec<f64> = a.iter().map(|x| f64::from(x + x)).collect();
            assert_close(
                &what("x + x"),
                &c.to_vec::<f32>().expect("r"),
                &twice,
                rel(1e-6),
            );
            // In place: every clone sees it.
            let alias = ta.clone();
            let r = ta.fill_(1.5).expect("fill_");
            assert_eq!(
                alias.to_vec::<f32>().expect("r"),
                vec![1.5; n],
                "fill_ on {d}"
            );
            assert_eq!(r.to_vec::<f32>().expect("r"), vec![1.5; n]);
            ta.copy_(&tb).expect("copy_");
            assert_eq!(alias.to_vec::<f32>().expect("r"), b, "copy_ on {d}");
        }
    }
}

fn matmul_reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
        }
    }
    c
}

#[test]
fn matmul_on_every_device() {
    let shapes = [
        (1, 1, 1),
        (1, 7, 1),
        (3, 1, 2),
        (7, 13, 5),
        (17, 33, 19),
        (16, 16, 16),
        (65, 31, 129),
        (100, 257, 3),
    ];
    for d in devices() {
        for (s, &(m, k, n)) in shapes.iter().enumerate() {
            let a = values(m * k, 7 + s as u64);
            let b = values(k * n, 70 + s as u64);
            let ta = Tensor::from_slice(&a, &[m, k], d).expect("a");
            let tb = Tensor::from_slice(&b, &[k, n], d).expect("b");
            let c = ta.matmul(&tb).expect("matmul");
            assert_eq!(c.shape(), &[m, n]);
            assert_eq!(c.device(), d);
            let want = matmul_reference(&a, &b, m, k, n);
            let tol = 1e-5 * k as f64;
            assert_close(
                &format!("matmul {m}x{k}x{n} on {d}"),
                &c.to_vec::<f32>().expect("read"),
                &want,
                |_| tol,
            );
        }
    }
}

#[test]
fn sum_and_softmax_on_every_device() {
    for d in devices() {
        for (k, &n) in LENGTHS.iter().enumerate() {
            let x = values(n, 300 + k as u64);
            let t = Tensor::from_slice(&x, &[n], d).expect("x");
            let s = t.sum().expect("sum");
            assert_eq!(s.shape(), &[] as &[usize]);
            assert_eq!(s.numel(), 1);
            let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
            assert_close(
                &format!("sum of {n} on {d}"),
                &s.to_vec::<f32>().expect("read"),
                &[want],
                |_| 1e-5 * n as f64,
            );
        }
        for (k, &(rows, cols)) in [(1, 1), (1, 7), (3, 17), (5, 257), (2, 1000)]
            .iter()
            .enumerate()
        {
            // Large values: a softmax that does not subtract the maximum
            // overflows exp().
            let x: Vec<f32> = values(rows * cols, 500 + k as u64)
                .iter()
                .map(|v| v * 100.0 + 50.0)
                .collect();
            let t = Tensor::from_slice(&x, &[rows, cols], d).expect("x");
            let p = t.softmax().expect("softmax");
            assert_eq!(p.shape(), &[rows, cols]);
            let mut want = Vec::new();
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let max = row
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
                let e: Vec<f64> = row.iter().map(|&v| (f64::from(v) - max).exp()).collect();
                let total: f64 = e.iter().sum();
                want.extend(e.iter().map(|v| v / total));
            }
            assert_close(
                &format!("softmax {rows}x{cols} on {d}"),
                &p.to_vec::<f32>().expect("read"),
                &want,
                |_| 1e-6,
            );
        }
    }
}

/// `add`, `mul`, `sum`, `matmul`, `fill_` for dtype `T` on `d`, against
/// references computed with `T`'s own arithmetic (or f64 for floats).
fn dtype_suite<T: Element>(d: Device, tol: f64) {
    let n = 37;
    let a: Vec<T> = (0..n).map(|i| T::from_f64((i % 11) as f64)).collect();
    let b: Vec<T> = (0..n).map(|i| T::from_f64((i % 5) as f64 + 1.0)).collect();
    let ta = Tensor::from_slice(&a, &[n], d).expect("a");
    let tb = Tensor::from_slice(&b, &[n], d).expect("b");
    let what = format!("{:?} on {d}", T::DTYPE);
    assert_eq!(ta.dtype(), T::DTYPE);
    let close = |got: Vec<T>, want: Vec<f64>, op: &str| {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let g = g.to_f64();
            assert!(
                (g - w).abs() <= tol * w.abs().max(1.0),
                "{op} {what}: element {i}: expected {w}, found {g}"
            );
        }
    };
    let add: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x.add(*y).to_f64()).collect();
    close(
        ta.add(&tb).expect("add").to_vec::<T>().expect("r"),
        add,
        "add",
    );
    let mul: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x.mul(*y).to_f64()).collect();
    close(
        ta.mul(&tb).expect("mul").to_vec::<T>().expect("r"),
        mul,
        "mul",
    );
    let sum: f64 = a.iter().map(|v| v.to_f64()).sum();
    close(
        ta.sum().expect("sum").to_vec::<T>().expect("r"),
        vec![sum],
        "sum",
    );
    let plus: Vec<f64> = a.iter().map(|x| x.add(T::from_f64(2.0)).to_f64()).collect();
    close(
        ta.add_scalar(2.0).expect("add.S").to_vec::<T>().expect("r"),
        plus,
        "add.Scalar",
    );
    // (37 x 1) @ (1 x 37): every product once.
    let col = Tensor::from_slice(&a, &[n, 1], d).expect("col");
    let row = Tensor::from_slice(&b, &[1, n], d).expect("row");
    let outer: Vec<f64> = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| x.mul(*y).to_f64()))
        .collect();
    close(
        col.matmul(&row).expect("matmul").to_vec::<T>().expect("r"),
        outer,
        "matmul",
    );
    ta.fill_(3.0).expect("fill_");
    close(ta.to_vec::<T>().expect("r"), vec![3.0; n], "fill_");
}

#[test]
fn every_dtype_on_every_device() {
    for d in devices() {
        dtype_suite::<f32>(d, 1e-6);
        dtype_suite::<f16>(d, 1e-3);
        dtype_suite::<bf16>(d, 8e-3);
        dtype_suite::<i32>(d, 0.0);
        dtype_suite::<u32>(d, 0.0);
        dtype_suite::<u8>(d, 0.0);
    }
    // Integers wrap, as PyTorch's do.
    let t = Tensor::from_slice(&[200u8, 100], &[2], Device::cpu()).expect("u8");
    assert_eq!(
        t.add(&t).expect("add").to_vec::<u8>().expect("r"),
        vec![144, 200]
    );
    // softmax is for floating dtypes.
    let e = t.softmax().expect_err("u8 softmax");
    assert!(
        e.to_string().contains("expected a floating-point dtype"),
        "{e}"
    );
}

#[test]
fn constructors_and_typed_reads() {
    for d in devices() {
        let z = Tensor::zeros(&[2, 3], DType::I32, d).expect("zeros");
        assert_eq!(z.to_vec::<i32>().expect("r"), vec![0; 6]);
        assert_eq!(
            (z.shape(), z.numel(), z.dtype()),
            (&[2, 3][..], 6, DType::I32)
        );
        let o = Tensor::ones(&[4], DType::BF16, d).expect("ones");
        assert_eq!(o.to_vec::<bf16>().expect("r"), vec![bf16::ONE; 4]);
        let f = Tensor::full(&[3], 2.5, DType::F16, d).expect("full");
        assert_eq!(f.to_vec::<f16>().expect("r"), vec![f16::from_f32(2.5); 3]);
        let r = Tensor::arange(5, DType::U32, d).expect("arange");
        assert_eq!(r.to_vec::<u32>().expect("r"), vec![0, 1, 2, 3, 4]);
        let e = r.to_vec::<f32>().expect_err("wrong type");
        assert_eq!(
            e.to_string(),
            "to_vec: expected the element type of the tensor's dtype u32, found f32"
        );
        // Moved to the CPU and back.
        let cpu_stream = keel::current_stream(Device::cpu()).expect("s");
        let back = r.to(Device::cpu(), &cpu_stream).expect("to cpu");
        assert!(back.device().is_cpu());
        assert_eq!(back.to_vec::<u32>().expect("r"), vec![0, 1, 2, 3, 4]);
    }
    let e = Tensor::from_slice(&[1.0f32, 2.0], &[3], Device::cpu()).expect_err("count");
    assert_eq!(
        e.to_string(),
        "from_slice: expected 3 elements for shape [3], found 2"
    );
}

#[test]
fn mixed_devices_are_pytorchs_error() {
    let npu1 = devices().pop().expect("npu");
    let a = Tensor::ones(&[2], DType::F32, npu1).expect("a");
    let b = Tensor::ones(&[2], DType::F32, Device::cpu()).expect("b");
    let e = a.add(&b).expect_err("mixed");
    assert_eq!(
        e.to_string(),
        "Expected all tensors to be on the same device, but found at least two devices, npu:1 and cpu:0!"
    );
    assert!(matches!(e, Error::TensorDeviceMismatch { .. }));
    // Wrong kinds are reported before mixed devices, wherever the
    // mismatched tensor is.
    let e = dispatch::call("add.Scalar", &[(&a).into(), (&b).into()]).expect_err("kinds first");
    assert_eq!(
        e.to_string(),
        "add.Scalar: expected arguments add.Scalar(Tensor self, Scalar other), found (Tensor, Tensor)"
    );
    // copy_ takes its source from anywhere, and converts dtypes (on the
    // CPU: the npu's and GPUs' copy_ declines, the fallback converts).
    let ints = Tensor::from_slice(&[7i32, -3], &[2], Device::cpu()).expect("ints");
    a.copy_(&ints).expect("copy_ i32 -> f32 onto the npu");
    assert_eq!(a.to_vec::<f32>().expect("r"), vec![7.0, -3.0]);
    let halves = Tensor::zeros(&[2], DType::F16, Device::cpu()).expect("f16");
    halves
        .copy_(&a)
        .expect("copy_ f32 on the npu -> f16 on the cpu");
    assert_eq!(
        halves.to_vec::<f16>().expect("r"),
        vec![f16::from_f32(7.0), f16::from_f32(-3.0)]
    );
    let b = Tensor::from_slice(&[4.0f32, 5.0], &[2], Device::cpu()).expect("b");
    a.copy_(&b).expect("copy_ across devices");
    assert_eq!(a.to_vec::<f32>().expect("r"), vec![4.0, 5.0]);
}

#[test]
fn dispatcher_errors_name_what_was_expected() {
    let cpu = Device::cpu();
    let a = Tensor::ones(&[2, 3], DType::F32, cpu).expect("a");
    let b = Tensor::ones(&[3], DType::F32, cpu).expect("b");
    let e = a.add(&b).expect_err("shapes");
    assert_eq!(
        e.to_string(),
        "add: expected tensors of the same shape, found [2, 3] and [3]"
    );
    // Shapes of more than 4 dimensions (held apart from the inline ones).
    let five = Tensor::ones(&[1, 2, 1, 2, 3], DType::F32, cpu).expect("5-D");
    let sum = five.add(&five).expect("5-D add");
    assert_eq!(sum.shape(), &[1, 2, 1, 2, 3]);
    assert_eq!(sum.to_vec::<f32>().expect("r"), vec![2.0; 12]);
    let other = Tensor::ones(&[1, 2, 1, 3, 2], DType::F32, cpu).expect("5-D");
    let e = five.add(&other).expect_err("5-D shapes");
    assert_eq!(
        e.to_string(),
        "add: expected tensors of the same shape, found [1, 2, 1, 2, 3] and [1, 2, 1, 3, 2]"
    );
    let t = Tensor::ones(&[3, 2], DType::F32, cpu).expect("t");
    let e = a.add(&t).expect_err("transposed shapes");
    assert_eq!(
        e.to_string(),
        "add: expected tensors of the same shape, found [2, 3] and [3, 2]"
    );
    let e = a.matmul(&a).expect_err("inner dims");
    assert_eq!(
        e.to_string(),
        "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"
    );
    let i = Tensor::ones(&[2, 3], DType::I32, cpu).expect("i");
    let e = a.add(&i).expect_err("dtypes");
    assert_eq!(
        e.to_string(),
        "add: expected every tensor to have dtype f32, found i32"
    );
    let e = dispatch::call("no_such_op", &[(&a).into()]).expect_err("unknown");
    assert!(
        e.to_string()
            .starts_with("unknown operator 'no_such_op': expected one of "),
        "{e}"
    );
    let e = dispatch::call("add", &[(&a).into(), Arg::Scalar(1.0)]).expect_err("kinds");
    assert_eq!(
        e.to_string(),
        "add: expected arguments add(Tensor self, Tensor other), found (Tensor, Scalar)"
    );
    let e = dispatch::call("add", &[(&a).into()]).expect_err("too few");
    assert_eq!(
        e.to_string(),
        "add: expected arguments add(Tensor self, Tensor other), found (Tensor)"
    );
    let e = dispatch::call("add", &[Arg::Scalar(1.0)]).expect_err("no tensor");
    assert_eq!(
        e.to_string(),
        "add: expected at least one tensor argument, found none"
    );

    // An operator with no kernel for a device type and no fallback there.
    dispatch::define_op(OpSchema::new("npu_only", &[("self", ArgKind::Tensor)])).expect("define");
    let e = dispatch::call("npu_only", &[(&a).into()]).expect_err("no kernel");
    assert!(matches!(
        e,
        Error::NoKernel {
            device_type: DeviceType::Cpu,
            ..
        }
    ));
    assert!(
        e.to_string().starts_with(
            "could not run 'npu_only' on cpu devices: it has no cpu kernel and cpu has no fallback"
        ),
        "{e}"
    );
    let e = dispatch::define_op(OpSchema::new("npu_only", &[])).expect_err("redefined");
    assert!(e.to_string().contains("already defined"), "{e}");
}

#[test]
fn third_party_operators_take_scalars_and_ints() {
    // `axpb(x, a, times)`: a*x + 1, `times` times; registered at run time.
    let schema = OpSchema::new(
        "axpb_test",
        &[
            ("self", ArgKind::Tensor),
            ("a", ArgKind::Scalar),
            ("times", ArgKind::Int),
        ],
    );
    dispatch::define_op(schema).expect("define");
    dispatch::register_kernel("axpb_test", DeviceType::Cpu, |call| {
        let mut x = call.tensor(0)?.clone();
        for _ in 0..call.int(2)? {
            x = x.mul_scalar(call.scalar(1)?)?.add_scalar(1.0)?;
        }
        Ok(KernelOutcome::one(x))
    })
    .expect("register");
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], Device::cpu()).expect("x");
    let out =
        dispatch::call("axpb_test", &[(&x).into(), Arg::Scalar(2.0), Arg::Int(3)]).expect("call");
    // 1 -> 3 -> 7 -> 15; 2 -> 5 -> 11 -> 23
    assert_eq!(out[0].to_vec::<f32>().expect("r"), vec![15.0, 23.0]);
}

/// A kernel registered on one thread is what the next call runs on every
/// thread, although each thread keeps the entries it used last
/// (Note [Per-thread dispatch cache]).
#[test]
fn a_new_kernel_reaches_threads_that_cached_the_old_one() {
    use std::sync::mpsc;
    let schema = OpSchema::new("cache_probe_test", &[("self", ArgKind::Tensor)]);
    dispatch::define_op(schema).expect("define");
    let register = |k: f64| {
        dispatch::register_kernel("cache_probe_test", DeviceType::Cpu, move |call| {
            Ok(KernelOutcome::one(call.tensor(0)?.add_scalar(k)?))
        })
        .expect("register")
    };
    register(1.0);
    let (to_worker, requests) = mpsc::channel::<()>();
    let (replies, from_worker) = mpsc::channel::<Vec<f32>>();
    let worker = std::thread::spawn(move || {
        let x = Tensor::from_slice(&[10.0f32], &[1], Device::cpu()).expect("x");
        for () in requests {
            // Twice per request: the second call is served from the cache.
            for _ in 0..2 {
                let out = dispatch::call("cache_probe_test", &[(&x).into()]).expect("call");
                replies
                    .send(out[0].to_vec::<f32>().expect("read"))
                    .expect("reply");
            }
        }
    });
    let ask = || {
        to_worker.send(()).expect("ask");
        [
            from_worker.recv().expect("first"),
            from_worker.recv().expect("second"),
        ]
    };
    assert_eq!(ask(), [vec![11.0], vec![11.0]]);
    register(100.0);
    assert_eq!(ask(), [vec![110.0], vec![110.0]]);
    register(1000.0);
    assert_eq!(ask(), [vec![1010.0], vec![1010.0]]);
    drop(to_worker);
    worker.join().expect("worker");
}

#[test]
fn declined_calls_and_missing_kernels_take_the_fallback() {
    for d in devices().into_iter().filter(|d| !d.is_cpu()) {
        // f16 has no GPU (or npu) kernel: every GPU kernel declines it.
        let before = dispatch::fallback_count("add");
        let a = Tensor::full(&[5], 1.5, DType::F16, d).expect("a");
        let c = a.add(&a).expect("f16 add");
        assert_eq!(c.device(), d);
        assert_eq!(c.to_vec::<f16>().expect("r"), vec![f16::from_f32(3.0); 5]);
        assert!(
            dispatch::fallback_count("add") > before,
            "add f16 on {d}: not counted"
        );
        // fill_ in place through the fallback: written back.
        let before = dispatch::fallback_count("fill_");
        a.fill_(-2.0).expect("fill_");
        assert_eq!(a.to_vec::<f16>().expect("r"), vec![f16::from_f32(-2.0); 5]);
        assert!(
            dispatch::fallback_count("fill_") > before,
            "fill_ f16 on {d}"
        );
    }
    // The npu has no kernel for matmul (and never will in this example).
    let npu1 = Device::new(DeviceType::PrivateUse1, 1).expect("npu");
    let before = dispatch::fallback_count("matmul");
    let a = Tensor::ones(&[2, 2], DType::F32, npu1).expect("a");
    a.matmul(&a).expect("matmul");
    assert!(dispatch::fallback_count("matmul") > before);
}

#[test]
fn save_and_load_across_devices() {
    let dir = std::env::temp_dir().join(format!("keel-ops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let devs = devices();
    let x = values(6, 9);
    for (i, &from) in devs.iter().enumerate() {
        let path = dir.join(format!("t{i}.safetensors"));
        let a = Tensor::from_slice(&x, &[2, 3], from).expect("a");
        let b = Tensor::arange(7, DType::U8, from).expect("b");
        let h = Tensor::full(&[3], 0.5, DType::BF16, from).expect("h");
        keel::save(&path, &[("a", &a), ("b", &b), ("h", &h)]).expect("save");
        for &to in &devs {
            let loads = npu::META_LOADS.load(std::sync::atomic::Ordering::Relaxed);
            let loaded = keel::load(&path, to).expect("load");
            let names: Vec<&str> = loaded.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["a", "b", "h"]);
            assert!(loaded.iter().all(|(_, t)| t.device() == to));
            assert_eq!(loaded[0].1.shape(), &[2, 3]);
            assert_eq!(loaded[0].1.to_vec::<f32>().expect("r"), x, "{from} -> {to}");
            assert_eq!(
                loaded[1].1.to_vec::<u8>().expect("r"),
                (0..7).collect::<Vec<u8>>()
            );
            assert_eq!(
                loaded[2].1.to_vec::<bf16>().expect("r"),
                vec![bf16::from_f32(0.5); 3]
            );
            if from.device_type() == DeviceType::PrivateUse1 {
                // The npu's hook read back its metadata for each tensor.
                let now = npu::META_LOADS.load(std::sync::atomic::Ordering::Relaxed);
                assert!(now >= loads + 3, "npu metadata not read back");
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_files_are_clear_errors() {
    let cpu = Device::cpu();
    let t = Tensor::ones(&[4], DType::F32, cpu).expect("t");
    let path =
        std::env::temp_dir().join(format!("keel-ops-bad-{}.safetensors", std::process::id()));
    keel::save(&path, &[("t", &t)]).expect("save");
    let good = std::fs::read(&path).expect("read");
    std::fs::remove_file(&path).ok();
    // Every truncation, and garbage: an error, never a panic.
    for len in 0..good.len() {
        let e = keel::load_bytes(&good[..len], cpu).expect_err("truncated");
        assert!(matches!(e, Error::Serialization(_)), "{len}: {e}");
    }
    let e = keel::load_bytes(b"not a safetensors file at all", cpu).expect_err("garbage");
    assert!(
        e.to_string()
            .starts_with("safetensors error: expected a safetensors file"),
        "{e}"
    );
    // A dtype Keel does not have.
    let header = br#"{"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&[0; 8]);
    let e = keel::load_bytes(&file, cpu).expect_err("f64");
    assert_eq!(
        e.to_string(),
        "safetensors error: tensor 'x': expected a dtype Keel has (F32, F16, BF16, I32, U32, U8), found F64"
    );
    // Keel's device entry holding no device.
    let header = br#"{"__metadata__":{"keel.x.device":"gpu:zero"},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.push(7);
    let e = keel::load_bytes(&file, cpu).expect_err("bad device");
    assert!(
        e.to_string()
            .contains("expected a device in keel.x.device, found 'gpu:zero'"),
        "{e}"
    );
    let e = keel::load("/nonexistent/keel.safetensors", cpu).expect_err("missing");
    assert!(
        e.to_string()
            .starts_with("safetensors error: reading /nonexistent/keel.safetensors"),
        "{e}"
    );
    let e = keel::save(&path, &[("t", &t), ("t", &t)]).expect_err("twice");
    assert_eq!(
        e.to_string(),
        "safetensors error: expected distinct tensor names, found 't' twice"
    );
}

#[test]
fn device_modules_are_typed() {
    npu::install_ops().expect("npu");
    let m = keel::device_module::<npu::NpuModule>("npu").expect("module");
    assert_eq!(m.device_count(), 2);
    assert_eq!(m.native_ops(), &npu::NPU_OPS);
    let e = keel::device_module::<String>("npu").expect_err("wrong type");
    assert!(
        e.to_string()
            .starts_with("device module of 'npu': expected type alloc::string::String, found "),
        "{e}"
    );
    let e = keel::device_module::<npu::NpuModule>("vulkan").expect_err("none");
    assert_eq!(e.to_string(), "no device module is registered for 'vulkan'");
    let e = keel::device_module::<npu::NpuModule>("tpu").expect_err("unknown");
    assert!(e.to_string().contains("device type"), "{e}");
    let e = keel::register_device_module("npu", 5u32).expect_err("twice");
    assert!(
        e.to_string()
            .starts_with("The runtime module of 'npu' has already been registered with '"),
        "{e}"
    );
}

#[test]
fn operators_are_profiled_spans_with_their_kernels() {
    let devs = devices();
    let session = keel::profiler::start().expect("start");
    for &d in &devs {
        let a = Tensor::from_slice(&values(300, 3), &[300], d).expect("a");
        let c = a.add(&a).expect("add");
        c.to_vec::<f32>().expect("read");
        // matmul, sum and softmax (shapes no other test uses), the matmul
        // once more under a tf32 scope.
        let x = Tensor::from_slice(&values(37 * 41, 4), &[37, 41], d).expect("x");
        let y = Tensor::from_slice(&values(41 * 23, 5), &[41, 23], d).expect("y");
        x.matmul(&y).expect("matmul").to_vec::<f32>().expect("read");
        {
            let _tf32 = keel::precision::Scope::new()
                .allow_tf32(d.device_type(), true)
                .enter();
            x.matmul(&y).expect("matmul").to_vec::<f32>().expect("read");
        }
        x.sum().expect("sum").to_vec::<f32>().expect("read");
        x.softmax().expect("softmax").to_vec::<f32>().expect("read");
        rounding_pass_products(d);
        // Under autocast: the matmul runs in f16 (bf16 on the CPU).
        let _autocast = keel::autocast::autocast(d.device_type(), true, None).expect("autocast");
        x.matmul(&y).expect("autocast matmul");
    }
    let trace = session.stop();
    reduction_ops_ran_their_own_kernels(&trace, &devs);
    the_rounding_pass_ran_where_it_pays(&trace, &devs);
    use keel::profiler::{FlowKind, SpanKind};
    let ops: Vec<_> = trace
        .spans
        .iter()
        .filter(|s| s.kind == SpanKind::Operator && &*s.name == "add")
        // Other tests run at the same time: only this test's calls.
        .filter(|s| {
            s.args
                .iter()
                .any(|(k, v)| &**k == "Input Dims" && &**v == "[[300], [300]]")
        })
        .collect();
    assert!(ops.len() >= devs.len(), "operator spans: {}", ops.len());
    let mut kernels = std::collections::BTreeSet::new();
    // What each operator's flow reached, for a failure message.
    let mut reached = Vec::new();
    for op in &ops {
        let arg = |k: &str| {
            op.args
                .iter()
                .find(|(n, _)| &**n == k)
                .map(|(_, v)| v.to_string())
        };
        assert_eq!(arg("Input Dims").as_deref(), Some("[[300], [300]]"));
        assert_eq!(arg("Input type").as_deref(), Some("[\"float\", \"float\"]"));
        // The launches it made lie inside the operator span (host lane);
        // a launch and the kernel it ran share an operation id.
        let launched: Vec<u64> = trace
            .spans
            .iter()
            .filter(|s| {
                s.lane == op.lane
                    && s.kind == SpanKind::Kernel
                    && s.start_ns >= op.start_ns
                    && s.start_ns + s.dur_ns <= op.start_ns + op.dur_ns
            })
            .map(|s| s.op)
            .collect();
        assert!(!launched.is_empty(), "no launch inside the operator span");
        // A flow from the operator to a kernel it launched, which lies on
        // a stream lane. (Two spans of one lane can start at the same
        // nanosecond: the operation id tells them apart.)
        let flow = trace
            .flows
            .iter()
            .find(|f| {
                f.kind == FlowKind::Launch && f.from.lane == op.lane && f.from.ts_ns == op.start_ns
            })
            .unwrap_or_else(|| panic!("no flow from operator span at {}", op.start_ns));
        let kernel = trace
            .spans
            .iter()
            .find(|s| {
                s.lane == flow.to.lane
                    && s.start_ns == flow.to.ts_ns
                    && s.kind == SpanKind::Kernel
                    && launched.contains(&s.op)
            })
            .expect("the kernel the operator launched, at the flow's end");
        kernels.insert(kernel.name.to_string());
        let at: Vec<_> = trace
            .spans
            .iter()
            .filter(|s| s.lane == flow.to.lane && s.start_ns == flow.to.ts_ns)
            .map(|s| format!("{} {:?} {} ns", s.name, s.kind, s.dur_ns))
            .collect();
        reached.push(format!(
            "operator on {} at {} -> {} at {}: {at:?}",
            trace.lanes[op.lane as usize].name,
            op.start_ns,
            trace.lanes[flow.to.lane as usize].name,
            flow.to.ts_ns
        ));
    }
    // Each device ran its own kernel: the CPU's, the GPUs' f32 kernel (no
    // fallback), the npu's.
    for d in &devs {
        let want = match d.device_type() {
            DeviceType::Cpu => "add_cpu",
            DeviceType::PrivateUse1 => "npu_add_f32",
            _ => "add_f32",
        };
        assert!(
            kernels.contains(want),
            "{d}: no {want} in {kernels:?}; the flows reached:\n{}",
            reached.join("\n")
        );
    }
    // Exported as PyTorch's profiler writes operators.
    let mut json = Vec::new();
    keel::profiler::json::write_json(&trace, &mut json).expect("json");
    let json = String::from_utf8(json).expect("utf8");
    assert!(
        json.contains("\"cat\":\"cpu_op\",\"name\":\"add\""),
        "no cpu_op span"
    );
    assert!(
        json.contains("\"Input Dims\":\"[[300], [300]]\""),
        "no Input Dims"
    );
    // Keel reads its own file back exactly: operators stay operators.
    let back = keel::profiler::json::read_json(&json).expect("read back");
    let count = |t: &keel::profiler::Trace| {
        t.spans
            .iter()
            .filter(|s| s.kind == SpanKind::Operator)
            .count()
    };
    assert_eq!(count(&back), count(&trace));
    // And from its native format.
    use keel::profiler::file::{TraceFileFormat, from_bytes, to_bytes};
    let native = to_bytes(&trace, TraceFileFormat::Native).expect("native");
    assert_eq!(
        count(&from_bytes(&native).expect("read native")),
        count(&trace)
    );
}

/// The two tf32 products `the_rounding_pass_ran_where_it_pays` looks
/// for, on the 4x4 kernel: 520 x 3 x 520 (9 tiles each way: its inputs
/// rounded by `matmul_round_inputs` first, 13 workgroups for their 3,120
/// values) and 448 x 3 x 448 (7 tiles: rounded while staging; a pass
/// would take 11 workgroups). Shapes no other test uses.
fn rounding_pass_products(d: Device) {
    use keel::compute::{MatmulAlgorithm, MatmulOptions, MatmulPrecision, matmul};
    let stream = keel::default_stream(d).expect("stream");
    let opts = MatmulOptions {
        algorithm: MatmulAlgorithm::Tiled4x4,
        precision: MatmulPrecision::TF32,
    };
    for n in [520, 448] {
        let a = keel::Buffer::from_slice(&stream, &values(n * 3, 6)).expect("a");
        let b = keel::Buffer::from_slice(&stream, &values(n * 3, 7)).expect("b");
        let c = keel::Buffer::new(d, n * n * 4).expect("c");
        matmul(&stream, &a, &b, &c, n, 3, n, &opts).expect("matmul");
    }
    stream.synchronize().expect("synchronize");
}

/// The kernel spans of `trace` on `device`'s streams named `name` whose
/// grid is `grid`.
fn kernels_on<'t>(
    trace: &'t keel::profiler::Trace,
    device: Device,
    name: &str,
    grid: &str,
) -> Vec<&'t keel::profiler::Span> {
    use keel::profiler::{LaneKind, SpanKind};
    let device = device.to_string();
    trace
        .spans
        .iter()
        .filter(|s| s.kind == SpanKind::Kernel && &*s.name == name)
        .filter(|s| match &trace.lanes[s.lane as usize].kind {
            LaneKind::Stream { device: i, .. } => trace.devices[*i as usize].device == device,
            _ => false,
        })
        .filter(|s| s.args.iter().any(|(k, v)| &**k == "grid" && &**v == grid))
        .collect()
}

/// `rounding_pass_products` on each device: the 520^2 product launched
/// the rounding pass and then the 4x4 kernel on its 9 x 9 tiles, the
/// 448^2 one the 4x4 kernel alone.
fn the_rounding_pass_ran_where_it_pays(trace: &keel::profiler::Trace, devs: &[Device]) {
    for &d in devs {
        let pass = kernels_on(trace, d, "matmul_round_inputs", "13x1x1");
        let kernel = kernels_on(trace, d, "matmul_tiled_4x4", "9x9x1");
        assert_eq!(pass.len(), 1, "{d}: rounding passes of 13 workgroups");
        assert!(
            kernel.iter().any(|k| k.start_ns >= pass[0].start_ns),
            "{d}: no 4x4 kernel after the pass"
        );
        assert!(
            kernels_on(trace, d, "matmul_round_inputs", "11x1x1").is_empty(),
            "{d}: the 448^2 product ran the rounding pass"
        );
        assert_eq!(
            kernels_on(trace, d, "matmul_tiled_4x4", "7x7x1").len(),
            1,
            "{d}"
        );
    }
}

/// The operator spans of `op` whose "Input Dims" are `dims`.
fn op_spans<'t>(
    trace: &'t keel::profiler::Trace,
    op: &str,
    dims: &str,
) -> Vec<&'t keel::profiler::Span> {
    use keel::profiler::SpanKind;
    trace
        .spans
        .iter()
        .filter(|s| s.kind == SpanKind::Operator && &*s.name == op)
        .filter(|s| {
            s.args
                .iter()
                .any(|(k, v)| &**k == "Input Dims" && &**v == dims)
        })
        .collect()
}

/// The names of the kernels an operator span launched (through its flows).
fn launched(trace: &keel::profiler::Trace, op: &keel::profiler::Span) -> Vec<String> {
    use keel::profiler::{FlowKind, SpanKind};
    trace
        .flows
        .iter()
        .filter(|f| {
            f.kind == FlowKind::Launch
                && f.from.lane == op.lane
                && f.from.ts_ns >= op.start_ns
                && f.from.ts_ns <= op.start_ns + op.dur_ns
        })
        // Every kernel span where the flow ends (device clocks can be
        // coarse: two kernels may start at one timestamp).
        .flat_map(|f| {
            trace.spans.iter().filter(move |s| {
                s.lane == f.to.lane && s.start_ns == f.to.ts_ns && s.kind == SpanKind::Kernel
            })
        })
        .map(|s| s.name.to_string())
        .collect()
}

/// `matmul`, `sum` and `softmax` (f32) ran their device's own kernels on
/// every GPU (the compute kernels; a fallback would launch the CPU's
/// `matmul_cpu`, `sum_cpu`, `softmax_cpu`), and each matmul span says
/// which precision it ran with. Fallback counts are process-wide and other
/// tests run f16 matmuls through the fallback at the same time, so the
/// trace, which is this test's own, is what shows no fallback ran.
fn reduction_ops_ran_their_own_kernels(trace: &keel::profiler::Trace, devs: &[Device]) {
    let gpus = devs
        .iter()
        .filter(|d| {
            matches!(
                d.device_type(),
                DeviceType::Vulkan | DeviceType::Wgpu | DeviceType::Cuda
            )
        })
        .count();
    let cases = [
        ("matmul", "[[37, 41], [41, 23]]", "matmul_tiled"),
        ("sum", "[[37, 41]]", "sum_s"),
        ("softmax", "[[37, 41]]", "softmax_rows"),
    ];
    for (op, dims, gpu_kernel) in cases {
        let spans = op_spans(trace, op, dims);
        let names: Vec<Vec<String>> = spans.iter().map(|s| launched(trace, s)).collect();
        let on_gpu = names
            .iter()
            .filter(|k| {
                k.iter().any(|n| n.starts_with(gpu_kernel))
                    && !k.iter().any(|n| n.ends_with("_cpu"))
            })
            .count();
        // Each GPU's matmul ran twice (ieee, tf32); the CPU's tf32 matmul
        // runs the compute kernel's host twin, `matmul_tiled`, too.
        let want = if op == "matmul" { 2 * gpus + 1 } else { gpus };
        assert!(
            on_gpu >= want,
            "{op}: expected {want} spans that launched {gpu_kernel}* and no CPU kernel, found {on_gpu}: {names:?}"
        );
    }
    // The precision each matmul ran with, in its span.
    let precisions: Vec<String> = op_spans(trace, "matmul", "[[37, 41], [41, 23]]")
        .iter()
        .filter_map(|s| {
            s.args
                .iter()
                .find(|(k, _)| &**k == "precision")
                .map(|(_, v)| v.to_string())
        })
        .collect();
    let count = |p: &str| precisions.iter().filter(|v| *v == p).count();
    assert!(count("ieee") >= devs.len(), "{precisions:?}");
    assert!(count("tf32") >= devs.len(), "{precisions:?}");
    // Autocast's f16 matmuls ran on the GPUs: inputs converted by a
    // conversion kernel (which one names the f16 path that ran), the compute kernel, the result converted back;
    // the span says f16 (with the default split-K reduction in f16).
    let half = op_spans(trace, "matmul", "[[37, 41], [41, 23]]")
        .into_iter()
        .filter(|s| {
            s.args
                .iter()
                .any(|(k, v)| &**k == "precision" && v.starts_with("f16"))
        })
        .filter(|s| {
            let k = launched(trace, s);
            // The emulated conversion, or the native f16 pair where the
            // device stores f16 (`compute::f16_storage`).
            let emulated = k.iter().any(|n| n == "cast_f32_half");
            let native =
                k.iter().any(|n| n == "cast_f16_widen") && k.iter().any(|n| n == "cast_f16_narrow");
            // The tiled kernel for the device (`matmul_tiled_4x4` on a
            // GPU, `matmul_tiled` on lavapipe).
            k.iter().any(|n| n.starts_with("matmul_tiled")) && (emulated || native)
        })
        .count();
    assert!(
        half >= gpus,
        "autocast f16 matmuls on GPUs: {half} of {gpus}"
    );
    // The native f16 conversions ran exactly where the device has f16
    // storage: the f16 matmuls' spans name the path.
    let native_devices = devs
        .iter()
        .filter(|&&d| {
            let stream = keel::default_stream(d).expect("stream");
            keel::compute::f16_storage(&stream).expect("f16_storage")
        })
        .count();
    let native = op_spans(trace, "matmul", "[[37, 41], [41, 23]]")
        .into_iter()
        .filter(|s| launched(trace, s).iter().any(|n| n == "cast_f16_narrow"))
        .count();
    assert_eq!(
        native, native_devices,
        "f16 matmuls with native conversions: {native}, devices with f16 storage: {native_devices}"
    );
}

#[test]
fn empty_tensors_on_every_device() {
    for d in devices() {
        let e = Tensor::zeros(&[0], DType::F32, d).expect("empty");
        assert_eq!(e.numel(), 0);
        assert_eq!(
            e.add(&e).expect("add").to_vec::<f32>().expect("r"),
            Vec::<f32>::new()
        );
        assert_eq!(
            e.sum().expect("sum").to_vec::<f32>().expect("r"),
            vec![0.0],
            "{d}"
        );
        e.fill_(2.0).expect("fill_");
        // (2 x 0) @ (0 x 3): zeros.
        let a = Tensor::zeros(&[2, 0], DType::F32, d).expect("a");
        let b = Tensor::zeros(&[0, 3], DType::F32, d).expect("b");
        let c = a.matmul(&b).expect("matmul");
        assert_eq!(c.to_vec::<f32>().expect("r"), vec![0.0; 6], "{d}");
    }
}

#[test]
fn threads_dispatch_at_once() {
    let devs = devices();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let devs = &devs;
            scope.spawn(move || {
                for i in 0..50 {
                    let d = devs[(t + i) % devs.len()];
                    let x = Tensor::full(&[33], t as f64, DType::F32, d).expect("x");
                    let y = x.add_scalar(1.0).expect("add").mul(&x).expect("mul");
                    let want = (t as f32 + 1.0) * t as f32;
                    assert_eq!(y.to_vec::<f32>().expect("r"), vec![want; 33], "{d}");
                }
            });
        }
    });
}

/// The bits of an f32 tensor.
fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .expect("read")
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn random_operators_give_the_same_bits_on_every_device() {
    use keel::generator::Generator;
    use keel::random::{RandomOp, reference};
    let devs = devices();
    for seed in [0u64, 42, u64::MAX - 5] {
        for n in [1usize, 7, 1000, 4099] {
            let rand_want = reference(RandomOp::Rand, n, seed, 0).expect("ref");
            let int_want =
                reference(RandomOp::Randint { low: -5, high: 17 }, n, seed, 4100).expect("ref");
            let uni = RandomOp::Uniform { lo: -2.0, hi: 3.0 };
            let uni_want = reference(uni, n, seed, 8200).expect("ref");
            let randn_want = reference(RandomOp::Randn, n, seed, 12300).expect("ref");
            for &d in &devs {
                let what = format!("seed {seed}, n {n}, {d}");
                let g = Generator::new(d).expect("generator");
                g.manual_seed(seed);
                let r = dispatch::rand(&[n], d, Some(&g)).expect("rand");
                assert_eq!((r.device(), r.dtype()), (d, DType::F32));
                assert_eq!(bits(&r), rand_want, "rand: {what}");
                // The generator advanced by n rounded up to 4.
                assert_eq!(g.offset(), (n as u64).next_multiple_of(4), "{what}");
                g.set_offset(4100).expect("offset");
                let i = dispatch::randint(-5, 17, &[n], d, Some(&g)).expect("randint");
                let got: Vec<u32> = i
                    .to_vec::<i32>()
                    .expect("read")
                    .iter()
                    .map(|&v| v as u32)
                    .collect();
                assert_eq!(got, int_want, "randint: {what}");
                g.set_offset(8200).expect("offset");
                let u = Tensor::zeros(&[n], DType::F32, d).expect("u");
                let same = u.uniform_(-2.0, 3.0, Some(&g)).expect("uniform_");
                assert!(std::ptr::eq(same.buffer(), u.buffer()));
                assert_eq!(bits(&u), uni_want, "uniform_: {what}");
                g.set_offset(12300).expect("offset");
                let z = dispatch::randn(&[n], d, Some(&g)).expect("randn");
                for (k, (&gz, &wz)) in bits(&z).iter().zip(&randn_want).enumerate() {
                    let (gz, wz) = (f32::from_bits(gz), f32::from_bits(wz));
                    assert!(
                        (gz - wz).abs() <= 1e-5 * wz.abs().max(1.0),
                        "randn {what}: element {k}: {gz} vs {wz}"
                    );
                }
            }
        }
    }
}

#[test]
fn random_operators_replay_from_a_generator_state() {
    use keel::generator::{Generator, default_generator};
    for d in devices() {
        let g = Generator::new(d).expect("generator");
        g.manual_seed(1234);
        let state = g.get_state();
        let draw = || {
            let a = dispatch::randn(&[33, 3], d, Some(&g)).expect("randn");
            let x = Tensor::zeros(&[10], DType::F32, d).expect("x");
            x.normal_(2.0, 0.5, Some(&g)).expect("normal_");
            let r = dispatch::rand(&[5], d, Some(&g)).expect("rand");
            (bits(&a), bits(&x), bits(&r))
        };
        let first = draw();
        let second = draw();
        assert_ne!(first, second, "{d}: a second draw repeated the first");
        g.set_state(&state).expect("set_state");
        assert_eq!(draw(), first, "{d}: the state did not replay");
        // The default generator of the device serves calls without one
        // (other tests may draw from it too: it advanced at least by 8).
        let def = default_generator(d).expect("default");
        let before = def.offset();
        dispatch::rand(&[5], d, None).expect("rand");
        assert!(def.offset() >= before + 8, "{d}: default generator");
        // A generator of another device type is PyTorch's error.
        let other = if d.is_cpu() {
            Device::new(DeviceType::PrivateUse1, 0).expect("npu")
        } else {
            Device::cpu()
        };
        let wrong = Generator::new(other).expect("other generator");
        let e = dispatch::rand(&[5], d, Some(&wrong)).expect_err("wrong generator");
        assert!(e.to_string().contains("device type for generator"), "{e}");
        assert_eq!(wrong.offset(), 0, "a refused call reserved words");
        // Bad bounds and dtypes are clear errors that reserve nothing.
        let at = g.offset();
        let x = Tensor::zeros(&[4], DType::F32, d).expect("x");
        let e = x.uniform_(3.0, -2.0, Some(&g)).expect_err("lo > hi");
        assert!(e.to_string().contains("lo < hi"), "{e}");
        let e = dispatch::randint(5, 5, &[4], d, Some(&g)).expect_err("empty range");
        assert!(e.to_string().contains("low < high"), "{e}");
        let i = Tensor::zeros(&[4], DType::I32, d).expect("i");
        let e = i.normal_(0.0, 1.0, Some(&g)).expect_err("i32 normal_");
        assert!(e.to_string().contains("expected a f32 tensor"), "{e}");
        assert_eq!(g.offset(), at, "{d}: a refused call reserved words");
    }
}

#[test]
fn autocast_changes_the_dtype_a_matmul_runs_in_and_nothing_else() {
    use keel::autocast;
    let (m, k, n) = (33, 64, 17);
    let (av, bv) = (values(m * k, 901), values(k * n, 902));
    let want = matmul_reference(&av, &bv, m, k, n);
    // sum_k |a_ik b_kj|, for the error bound.
    let mut mag = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            mag[i * n + j] = (0..k)
                .map(|p| f64::from(av[i * k + p] * bv[p * n + j]).abs())
                .sum();
        }
    }
    for d in devices() {
        let ty = d.device_type();
        let a = Tensor::from_slice(&av, &[m, k], d).expect("a");
        let b = Tensor::from_slice(&bv, &[k, n], d).expect("b");
        let x = Tensor::from_slice(&values(257, 903), &[257], d).expect("x");
        let off = (
            a.matmul(&b).expect("matmul"),
            bits(&x.sum().expect("sum")),
            bits(&a.softmax().expect("softmax")),
            bits(&x.add(&x).expect("add")),
        );
        assert_eq!(off.0.dtype(), DType::F32);
        let dtype = {
            let _on = autocast::autocast(ty, true, None).expect("autocast");
            let dtype = DType::from(autocast::get_autocast_dtype(ty));
            let c = a.matmul(&b).expect("autocast matmul");
            assert_eq!((c.dtype(), c.device(), c.shape()), (dtype, d, &[m, n][..]));
            // Within the dtype's precision: each input rounded (2 eps per
            // product), the output rounded (eps).
            let (eps, got): (f64, Vec<f64>) = match dtype {
                DType::F16 => (
                    2f64.powi(-11),
                    c.to_vec::<f16>()
                        .expect("r")
                        .iter()
                        .map(|v| v.to_f64())
                        .collect(),
                ),
                DType::BF16 => (
                    2f64.powi(-8),
                    c.to_vec::<bf16>()
                        .expect("r")
                        .iter()
                        .map(|v| v.to_f64())
                        .collect(),
                ),
                other => panic!("{d}: autocast dtype {other}"),
            };
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let tol = 3.0 * eps * mag[i] + eps * w.abs() + 1e-6;
                assert!(
                    (g - w).abs() <= tol,
                    "{d}: autocast matmul element {i}: {g} vs {w} (within {tol})"
                );
            }
            // sum and softmax run in f32: the same bits as without
            // autocast; add is left in f32 (promote of f32).
            let s = x.sum().expect("sum");
            assert_eq!((s.dtype(), bits(&s)), (DType::F32, off.1.clone()), "{d}");
            assert_eq!(bits(&a.softmax().expect("softmax")), off.2, "{d}");
            assert_eq!(bits(&x.add(&x).expect("add")), off.3, "{d}");
            // A half input to sum runs in f32 under autocast.
            let h = c.sum().expect("sum of a half tensor");
            assert_eq!(h.dtype(), DType::F32, "{d}");
            dtype
        };
        // Off again: f32, the same bits as before.
        let again = a.matmul(&b).expect("matmul");
        assert_eq!(again.dtype(), DType::F32, "{d}");
        assert_eq!(bits(&again), bits(&off.0), "{d} (autocast was {dtype})");
    }
}

#[test]
fn half_conversions_and_matmul_on_every_device() {
    // copy_ between f32 and f16/bf16 (the GPUs' conversion kernel; odd
    // lengths, subnormals, overflow, ties), against the half crate's
    // from_f32 (-0.90820336: a value half's bf16::from_f64 rounded wrong).
    let mut xs = values(1001, 904);
    xs.extend([
        0.0,
        -0.0,
        65504.0,
        65520.0,
        -1.0e6,
        6.0e-8,
        3.0e-5,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8),
        3.3895e38,
        -0.908_203_36,
    ]);
    let n = xs.len();
    for d in devices() {
        let x = Tensor::from_slice(&xs, &[n], d).expect("x");
        let h = Tensor::empty(&[n], DType::F16, d).expect("h");
        h.copy_(&x).expect("to f16");
        let want: Vec<f16> = xs.iter().map(|&v| f16::from_f32(v)).collect();
        let got = h.to_vec::<f16>().expect("r");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{d}: f16 of {}", xs[i]);
        }
        let bf = Tensor::empty(&[n], DType::BF16, d).expect("bf");
        bf.copy_(&x).expect("to bf16");
        let want: Vec<u16> = xs.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        let got: Vec<u16> = bf
            .to_vec::<bf16>()
            .expect("r")
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(got, want, "{d}: bf16");
        // And back, exactly.
        let back = Tensor::empty(&[n], DType::F32, d).expect("back");
        back.copy_(&h).expect("from f16");
        let want: Vec<f32> = h
            .to_vec::<f16>()
            .expect("r")
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(
            bits(&back),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{d}"
        );
        back.copy_(&bf).expect("from bf16");
        let want: Vec<f32> = bf
            .to_vec::<bf16>()
            .expect("r")
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(
            bits(&back),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{d}"
        );
    }
}

#[test]
fn half_matmul_has_the_same_numerics_on_every_device() {
    // k = 600: three split-K chunks, rounded to the dtype (the default
    // reduced-precision reduction) on every backend.
    let (m, k, n) = (20, 600, 9);
    let (av, bv) = (values(m * k, 905), values(k * n, 906));
    for dtype in [DType::F16, DType::BF16] {
        let mut cpu: Option<Vec<f32>> = None;
        for d in devices() {
            let a32 = Tensor::from_slice(&av, &[m, k], d).expect("a");
            let b32 = Tensor::from_slice(&bv, &[k, n], d).expect("b");
            let (a, b) = (
                Tensor::empty(&[m, k], dtype, d).expect("a"),
                Tensor::empty(&[k, n], dtype, d).expect("b"),
            );
            a.copy_(&a32).expect("a");
            b.copy_(&b32).expect("b");
            let c = a.matmul(&b).expect("matmul");
            assert_eq!(c.dtype(), dtype);
            let c32 = Tensor::empty(&[m, n], DType::F32, d).expect("c32");
            c32.copy_(&c).expect("widen");
            let got = c32.to_vec::<f32>().expect("read");
            match &cpu {
                None => cpu = Some(got),
                Some(want) => {
                    let worst = got
                        .iter()
                        .zip(want)
                        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
                        .fold(0.0f32, f32::max);
                    println!("{dtype} matmul on {d}: worst difference from the CPU {worst:e}");
                    // The same kernels, the same numbers: bit-identical.
                    assert_eq!(
                        worst, 0.0,
                        "{dtype} matmul on {d}: {worst:e} from the CPU's"
                    );
                }
            }
        }
    }
}

/// bf16 and f16 tensors' `matmul` on CUDA tensor cores (a product of at
/// least `MMA_MIN_BLOCKS` tiles of 128 x 128, the dtypes' default
/// split-K plans): the 16-bit kernel reads the tensors' own values, and
/// with small integers, whose every chunk sum is exact in any order, the
/// result is the CPU's bit for bit. Skipped without such a device.
#[test]
fn half_matmul_on_tensor_cores_gives_the_cpus_bits() {
    let (m, k, n) = (1024, 300, 512);
    let mut ran = 0;
    for d in devices() {
        let stream = keel::default_stream(d).expect("stream");
        if !keel::compute::tf32_mma_supported(&stream).expect("query") {
            continue;
        }
        ran += 1;
        // bf16: integers in [-40, 40]; f16: in [0, 12], whose chunk sums
        // need rounding in f16.
        for (dtype, scale, offset) in [(DType::BF16, 40.0, 0.0), (DType::F16, 6.0, 6.0)] {
            let ints = |len: usize, seed: u64| -> Vec<f32> {
                values(len, seed)
                    .iter()
                    .map(|v| (v * scale + offset).round())
                    .collect()
            };
            let (av, bv) = (ints(m * k, 31), ints(k * n, 32));
            let product = |d: Device| -> Vec<u32> {
                let a32 = Tensor::from_slice(&av, &[m, k], d).expect("a");
                let b32 = Tensor::from_slice(&bv, &[k, n], d).expect("b");
                let a = Tensor::empty(&[m, k], dtype, d).expect("a");
                let b = Tensor::empty(&[k, n], dtype, d).expect("b");
                a.copy_(&a32).expect("a");
                b.copy_(&b32).expect("b");
                let c = a.matmul(&b).expect("matmul");
                let c32 = Tensor::empty(&[m, n], DType::F32, d).expect("c32");
                c32.copy_(&c).expect("widen");
                c32.to_vec::<f32>()
                    .expect("read")
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            };
            let (got, want) = (product(d), product(Device::cpu()));
            let differ = got.iter().zip(&want).position(|(g, w)| g != w);
            assert_eq!(
                differ, None,
                "{dtype} matmul on {d}: first output that differs"
            );
        }
    }
    if ran == 0 {
        println!("skipped: no CUDA device of compute capability 8.0 or later here");
    }
}

/// The README's kernel of one's own (`examples/own_kernel.wgsl`), made
/// with `Kernel::from_wgsl`, gives the host's bits on every device,
/// the third-party `npu` included, at a size that is not a multiple of
/// its workgroup.
#[test]
fn a_users_wgsl_kernel_runs_unchanged_on_every_device() {
    let kernel =
        keel::Kernel::from_wgsl("leaky_relu", include_str!("../../examples/own_kernel.wgsl"))
            .expect("the README's kernel compiles");
    assert_eq!(kernel.workgroup_size, [256, 1, 1]);
    assert_eq!(kernel.bindings, 2);
    let n = 70_001usize;
    let x = values(n, 11);
    let want: Vec<f32> = x
        .iter()
        .map(|&v| if v > 0.0 { v } else { v * 0.01 })
        .collect();
    let mut params = (n as u32).to_le_bytes().to_vec();
    params.extend(0.01f32.to_le_bytes());
    for d in devices() {
        let s = keel::default_stream(d).expect("stream");
        let xb = keel::Buffer::from_slice(&s, &x).expect("x");
        let out = keel::Buffer::new(d, 4 * n).expect("out");
        s.launch(&kernel, kernel.grid_for(n as u64), &[&xb, &out], &params)
            .unwrap_or_else(|e| panic!("{d}: {e}"));
        let got = out.read_as::<f32>(&s).expect("read");
        let wrong = (0..n).find(|&i| got[i].to_bits() != want[i].to_bits());
        assert_eq!(wrong, None, "{d}: first element that differs");
        // The same kernel with its translation to Rust as the host
        // implementation, as `examples/own_kernel.rs` runs it: the same
        // bits on host backends (the others compile the WGSL, as before).
        let native = keel::Kernel {
            cpu: Some(leaky_relu_native),
            ..kernel
        };
        out.write(&s, 0, &vec![0.0f32; n]).expect("clear");
        s.launch(&native, native.grid_for(n as u64), &[&xb, &out], &params)
            .unwrap_or_else(|e| panic!("{d}, translated: {e}"));
        let got = out.read_as::<f32>(&s).expect("read");
        let wrong = (0..n).find(|&i| got[i].to_bits() != want[i].to_bits());
        assert_eq!(wrong, None, "{d}, translated: first element that differs");
    }
}

/// `examples/own_kernel.wgsl` translated to Rust ahead of time, as the
/// example includes it.
mod own_kernel_translated {
    use keel::wgsl as keel_wgsl;
    include!("../../examples/translated/own_kernel.rs");
}

fn leaky_relu_native(inv: &mut keel::kernel::CpuInvocation<'_>) -> Result<(), String> {
    keel::kernel::run_translated(&own_kernel_translated::LEAKY_RELU, inv)
}

/// The example's translation (`examples/translated/own_kernel.rs`) is
/// what `keel::wgsl::rust` makes of `own_kernel.wgsl` today
/// (`KEEL_BLESS=1` rewrites it): how a program keeps its own kernels'
/// translations current.
#[test]
fn the_example_kernels_translation_is_current() {
    let program = keel::wgsl::compile(include_str!("../../examples/own_kernel.wgsl"), "leaky_relu")
        .expect("the README's kernel compiles");
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/translated/own_kernel.rs");
    let bless = std::env::var_os("KEEL_BLESS").is_some();
    let current = keel::wgsl::rust::check_file(&path, &[program], bless).expect("translates");
    assert!(
        current,
        "examples/translated/own_kernel.rs is stale: \
         `KEEL_BLESS=1 cargo test -p keel --test ops the_example_kernels_translation_is_current`"
    );
}

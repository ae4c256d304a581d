//! Keel's elementwise kernels translated to Rust ahead of time
//! (`tests/generated/mod.rs`) against hand-written Rust loops: the add of
//! `shaders/ops/add.wgsl` (`add_f32`, workgroups of 256), also on the
//! interpreter, and `saxpy`, over 2^22 `f32` (in memory) and 2^16 (in the
//! cache), on one thread and on every thread. Keel's goal is that its own
//! kernels run within 1.5x of the loop. Then one translated kernel with
//! and without the workgroups' own parts of its output (`bench_parts`),
//! and the reductions with barriers, translated in phases, against the
//! interpreter and a scalar loop (`bench_reduce`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use keel_wgsl::host::{HostOptions, run};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use zerocopy::{FromBytes, IntoBytes};

#[path = "../tests/generated/mod.rs"]
mod generated;

const RUNS: usize = 15;
/// Rounds of the paired comparison: the loop and the generated kernel
/// back to back, in alternating order, so that a slow spell of the
/// machine lands on both sides of a ratio.
const ROUNDS: usize = 31;

/// The median of `RUNS` timings of `f`, after one warm-up.
fn median(mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..RUNS).map(|_| time(&mut f)).collect();
    times.sort();
    times[RUNS / 2]
}

fn time(f: &mut impl FnMut()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

/// Per round, `b`'s time over `a`'s, measured back to back; gives the
/// sorted ratios and the median times of `a` and `b`.
fn paired(mut a: impl FnMut(), mut b: impl FnMut()) -> (Vec<f64>, Duration, Duration) {
    a();
    b();
    let mut ratios = Vec::with_capacity(ROUNDS);
    let mut ta = Vec::with_capacity(ROUNDS);
    let mut tb = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let (x, y) = if round % 2 == 0 {
            let x = time(&mut a);
            (x, time(&mut b))
        } else {
            let y = time(&mut b);
            (time(&mut a), y)
        };
        ratios.push(y.as_secs_f64() / x.as_secs_f64());
        ta.push(x);
        tb.push(y);
    }
    ratios.sort_by(f64::total_cmp);
    ta.sort();
    tb.sort();
    (ratios, ta[ROUNDS / 2], tb[ROUNDS / 2])
}

/// The hand-written loop, on `threads` threads (contiguous chunks).
fn rust_add(a: &[f32], b: &[f32], out: &mut [f32], threads: usize) {
    if threads <= 1 {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = x + y;
        }
        return;
    }
    let chunk = a.len().div_ceil(threads);
    std::thread::scope(|s| {
        for ((o, a), b) in out
            .chunks_mut(chunk)
            .zip(a.chunks(chunk))
            .zip(b.chunks(chunk))
        {
            s.spawn(move || {
                for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                    *o = x + y;
                }
            });
        }
    });
}

/// `y += alpha * x`, rounded after the multiply (as the kernel), on
/// `threads` threads.
fn rust_saxpy(x: &[f32], y: &mut [f32], alpha: f32, threads: usize) {
    let chunk = x.len().div_ceil(threads.max(1));
    let run = |y: &mut [f32], x: &[f32]| {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += alpha * x;
        }
    };
    if threads <= 1 {
        return run(y, x);
    }
    std::thread::scope(|s| {
        for (y, x) in y.chunks_mut(chunk).zip(x.chunks(chunk)) {
            s.spawn(move || run(y, x));
        }
    });
}

/// The translated `saxpy` (`crates/keel-device/shaders/saxpy.wgsl`), a
/// read-modify-write of `y`, against the loop: paired as `add_f32`.
fn bench_saxpy(x: &[f32], y: &[f32], threads: usize) {
    let n = x.len();
    let alpha = 0.5f32;
    let params: Vec<u8> = [n as u32, alpha.to_bits()]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let grid = [(n / 256) as u32, 1, 1];
    let options = HostOptions { threads };
    let data = std::cell::RefCell::new((x.to_vec(), y.to_vec()));
    let generated = || {
        let mut d = data.borrow_mut();
        let (x, y) = &mut *d;
        let mut bufs: Vec<&mut [u8]> = vec![x.as_mut_bytes(), y.as_mut_bytes()];
        generated::SAXPY
            .run_with(grid, &mut bufs, &params, &options)
            .expect("the generated saxpy runs");
        black_box(&y);
    };
    generated();
    let mut want = y.to_vec();
    rust_saxpy(x, &mut want, alpha, 1);
    assert!(data.borrow().1 == want, "the generated saxpy computed y");
    let (ratios, rust, gen_time) = paired(
        || {
            let mut d = data.borrow_mut();
            let (x, y) = &mut *d;
            rust_saxpy(x, y, alpha, threads);
            black_box(&y);
        },
        generated,
    );
    println!(
        "threads {threads}: saxpy: Rust loop {:8.3} ms, generated {:8.3} ms: {:.2}x [{:.2}, {:.2}]",
        ms(rust),
        ms(gen_time),
        ratios[ROUNDS / 2],
        ratios[0],
        ratios[ROUNDS - 1],
    );
}

/// Asserts that `out` holds `a + b`.
fn check(a: &[f32], b: &[f32], out: &[f32], what: &str) {
    let ok = a.iter().zip(b).zip(out).all(|((x, y), o)| x + y == *o);
    assert!(ok, "{what} computed the sums");
}

/// The loop with what the generated code must do to share the output
/// between threads without `unsafe`: relaxed atomic stores, one thread.
fn rust_add_atomic(a: &[f32], b: &[f32], out: &mut [f32]) {
    let out = <[AtomicU32]>::mut_from_bytes(out.as_mut_bytes()).expect("f32s are words");
    for ((o, &x), &y) in out.iter().zip(a).zip(b) {
        o.store((x + y).to_bits(), Relaxed);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs the comparison over `n` elements.
fn bench(n: usize) {
    let src = include_str!("../../../shaders/ops/add.wgsl");
    let program = keel_wgsl::compile(src, "add_f32").expect("add.wgsl compiles");
    let mut a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let mut b: Vec<f32> = (0..n).map(|i| (n - i) as f32 * 0.25).collect();
    let mut out = vec![0f32; n];
    let params = (n as u32).to_le_bytes();
    let grid = [(n / 256) as u32, 1, 1];
    let all = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "elementwise add_f32, {n} f32, workgroups of 256 \
         (generated against the loop: {ROUNDS} paired rounds, median ratio [min, max]; \
         others: median of {RUNS})"
    );
    for threads in [1, all] {
        let options = HostOptions { threads };
        // Both read the same inputs and write the same output, so that
        // neither finds the other's data in the cache.
        let data = std::cell::RefCell::new((a.clone(), b.clone(), vec![0f32; n]));
        let generated = || {
            let mut d = data.borrow_mut();
            let (a, b, out) = &mut *d;
            let mut bufs: Vec<&mut [u8]> =
                vec![a.as_mut_bytes(), b.as_mut_bytes(), out.as_mut_bytes()];
            generated::ADD_F32
                .run_with(grid, &mut bufs, &params, &options)
                .expect("the generated add runs");
            black_box(&out);
        };
        generated();
        check(&a, &b, &data.borrow().2, "the generated kernel");
        let (ratios, rust, gen_time) = paired(
            || {
                let mut d = data.borrow_mut();
                let (a, b, out) = &mut *d;
                rust_add(a, b, out, threads);
                black_box(&out);
            },
            generated,
        );
        check(&a, &b, &data.borrow().2, "the loop");
        out.fill(0.0);
        let host = median(|| {
            let mut bufs: Vec<&mut [u8]> =
                vec![a.as_mut_bytes(), b.as_mut_bytes(), out.as_mut_bytes()];
            run(&program, grid, &mut bufs, &params, &options).expect("the interpreter runs");
            black_box(&out);
        });
        check(&a, &b, &out, "the interpreter");
        if threads == 1 {
            out.fill(0.0);
            let atomic = median(|| {
                rust_add_atomic(&a, &b, &mut out);
                black_box(&out);
            });
            check(&a, &b, &out, "the atomic loop");
            println!(
                "threads 1: Rust loop with relaxed atomic stores {:8.3} ms ({:.2}x the loop's median)",
                ms(atomic),
                atomic.as_secs_f64() / rust.as_secs_f64()
            );
        }
        println!(
            "threads {threads}: Rust loop {:8.3} ms, generated {:8.3} ms: {:.2}x [{:.2}, {:.2}]; \
             interpreter {:8.3} ms ({:.2}x)",
            ms(rust),
            ms(gen_time),
            ratios[ROUNDS / 2],
            ratios[0],
            ratios[ROUNDS - 1],
            ms(host),
            host.as_secs_f64() / rust.as_secs_f64(),
        );
        bench_saxpy(&a, &b, threads);
    }
}

/// What owning parts is worth, and what it costs where no workgroup can:
/// the same translated kernel (`shifted`, an add written `shift`
/// elements along) with its parted path and without it
/// (`parted: None`), paired, one thread. At `shift` 0 every workgroup
/// runs on its part; at 1 none does, and the parted pass only evaluates
/// each workgroup's prologue before all of them run on the shared words.
fn bench_parts(n: usize) {
    let data = std::cell::RefCell::new((
        (0..n).map(|i| i as f32).collect::<Vec<f32>>(),
        vec![1.5f32; n],
        vec![0f32; n + 1],
    ));
    let options = HostOptions { threads: 1 };
    let grid = [(n / 256) as u32, 1, 1];
    let shared = keel_wgsl::native::Kernel {
        parted: None,
        ..generated::SHIFTED
    };
    for shift in [0u32, 1] {
        let params: Vec<u8> = [n as u32, shift]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let launch = |k: &keel_wgsl::native::Kernel| {
            let mut d = data.borrow_mut();
            let (a, b, out) = &mut *d;
            let mut bufs: Vec<&mut [u8]> =
                vec![a.as_mut_bytes(), b.as_mut_bytes(), out.as_mut_bytes()];
            k.run_with(grid, &mut bufs, &params, &options)
                .expect("the shifted add runs");
            black_box(&out);
        };
        let (ratios, without, with) = paired(|| launch(&shared), || launch(&generated::SHIFTED));
        let d = data.borrow();
        let s = shift as usize;
        assert!(
            (0..n).all(|i| d.2[i + s] == d.0[i] + d.1[i]),
            "the shifted add computed the sums"
        );
        println!(
            "parts, {n} f32, shift {shift}: shared {:8.3} ms, parted {:8.3} ms: {:.2}x [{:.2}, {:.2}]",
            ms(without),
            ms(with),
            ratios[ROUNDS / 2],
            ratios[0],
            ratios[ROUNDS - 1],
        );
    }
}

/// The two launches of a sum (`shaders/compute/sum.wgsl`) as Keel's
/// `compute::sum` makes them: per-workgroup partials, then one workgroup
/// over them. `kernel` runs a launch.
fn two_level_sum(
    x: &mut [f32],
    partials: &mut [f32],
    out: &mut [f32],
    kernel: &mut impl FnMut([u32; 3], &mut [&mut [u8]], &[u8]),
) {
    let groups = partials.len() as u32;
    let words = |w: [u32; 2]| -> Vec<u8> { w.iter().flat_map(|v| v.to_le_bytes()).collect() };
    let first = words([x.len() as u32, groups]);
    kernel(
        [groups, 1, 1],
        &mut [x.as_mut_bytes(), partials.as_mut_bytes()],
        &first,
    );
    let second = words([groups, 1]);
    kernel(
        [1, 1, 1],
        &mut [partials.as_mut_bytes(), out.as_mut_bytes()],
        &second,
    );
}

/// `sum_shared` (two launches, workgroups of 256 and barriers) over `n`
/// f32 and `softmax_rows` over `rows` x 1024, translated in phases, paired
/// against a scalar loop (the sum in one chain of adds; the softmax's
/// three passes over each row), and the interpreter's median.
fn bench_reduce(n: usize, rows: usize, threads: usize) {
    let options = HostOptions { threads };
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let groups = n.div_ceil(2048).min(1024);
    let data = std::cell::RefCell::new((x.clone(), vec![0f32; groups], vec![0f32; 1]));
    let translated = || {
        let mut d = data.borrow_mut();
        let (x, partials, out) = &mut *d;
        two_level_sum(x, partials, out, &mut |grid, bufs, params| {
            generated::SUM_SHARED
                .run_with(grid, bufs, params, &options)
                .expect("the translated sum runs");
        });
        black_box(&out);
    };
    let mut looped = 0f32;
    let (ratios, rust, gen_time) = paired(
        || {
            looped = black_box(&x).iter().sum::<f32>();
        },
        translated,
    );
    let sum = data.borrow().2[0];
    let rel = ((f64::from(sum) - f64::from(looped)) / f64::from(looped)).abs();
    assert!(rel < 1e-4, "the sums agree: {sum} against {looped}");
    let src = include_str!("../../../shaders/compute/sum.wgsl");
    let program = keel_wgsl::compile(src, "sum_shared").expect("sum.wgsl compiles");
    let host = median(|| {
        let mut d = data.borrow_mut();
        let (x, partials, out) = &mut *d;
        two_level_sum(x, partials, out, &mut |grid, bufs, params| {
            run(&program, grid, bufs, params, &options).expect("the interpreter runs");
        });
        black_box(&out);
    });
    assert_eq!(
        data.borrow().2[0],
        sum,
        "the interpreter gives the same bits"
    );
    report(
        &format!("threads {threads}: sum of {n} f32"),
        &ratios,
        [rust, gen_time, host],
    );

    const COLS: usize = 1024;
    let m: Vec<f32> = (0..rows * COLS)
        .map(|i| ((i * 7919) % 2000) as f32 * 1e-2 - 10.0)
        .collect();
    let params: Vec<u8> = [rows as u32, COLS as u32]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let grid = [rows as u32, 1, 1];
    let data = std::cell::RefCell::new((m.clone(), vec![0f32; rows * COLS]));
    let translated = || {
        let mut d = data.borrow_mut();
        let (m, out) = &mut *d;
        let mut bufs: Vec<&mut [u8]> = vec![m.as_mut_bytes(), out.as_mut_bytes()];
        generated::SOFTMAX_ROWS
            .run_with(grid, &mut bufs, &params, &options)
            .expect("the translated softmax runs");
        black_box(&out);
    };
    let mut reference = vec![0f32; rows * COLS];
    let (ratios, rust, gen_time) = paired(
        || {
            for (row, out) in m.chunks(COLS).zip(reference.chunks_mut(COLS)) {
                let max = row.iter().copied().fold(f32::MIN, f32::max);
                let total: f32 = row.iter().map(|v| (v - max).exp()).sum();
                for (o, v) in out.iter_mut().zip(row) {
                    *o = (v - max).exp() / total;
                }
            }
            black_box(&reference);
        },
        translated,
    );
    let worst = data
        .borrow()
        .1
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-5, "the softmaxes agree within {worst}");
    let src = include_str!("../../../shaders/compute/softmax_rows.wgsl");
    let program = keel_wgsl::compile(src, "softmax_rows").expect("softmax_rows.wgsl compiles");
    let host = median(|| {
        let mut d = data.borrow_mut();
        let (m, out) = &mut *d;
        let mut bufs: Vec<&mut [u8]> = vec![m.as_mut_bytes(), out.as_mut_bytes()];
        run(&program, grid, &mut bufs, &params, &options).expect("the interpreter runs");
        black_box(&out);
    });
    report(
        &format!("threads {threads}: softmax_rows {rows}x{COLS}"),
        &ratios,
        [rust, gen_time, host],
    );
}

/// Prints one line of [`bench_reduce`]: the loop's, the translation's
/// and the interpreter's medians, and the paired ratios.
fn report(what: &str, ratios: &[f64], [rust, translated, host]: [Duration; 3]) {
    println!(
        "{what}: scalar loop {:8.3} ms, translated {:8.3} ms: {:.2}x [{:.2}, {:.2}]; \
         interpreter {:8.3} ms ({:.2}x)",
        ms(rust),
        ms(translated),
        ratios[ROUNDS / 2],
        ratios[0],
        ratios[ROUNDS - 1],
        ms(host),
        host.as_secs_f64() / rust.as_secs_f64(),
    );
}

fn main() {
    if std::env::args().any(|a| a == "reduce") {
        for threads in [1, 2] {
            bench_reduce(1 << 22, 1024, threads);
        }
        return;
    }
    // In memory (what a large tensor meets), then in the cache, where the
    // loop's vector instructions count for more than memory does.
    bench(1 << 22);
    bench(1 << 16);
    bench_parts(1 << 22);
    bench_parts(1 << 16);
}

//! The random kernels on every backend that runs here (CPU, Vulkan, wgpu's
//! Vulkan and GL adapters, CUDA where present), against the host reference
//! (`keel::random::reference`, built on the Philox function that
//! `tests/numerics.rs` checks against Random123's known answers):
//!
//! - raw words and `rand` are bit-identical with the reference, hence with
//!   each other, for several seeds, offsets (odd ones, ones whose blocks
//!   cross 2^32, ones near the end of the stream) and lengths (1, primes,
//!   large), with two workgroup sizes and five grids (Keel's, a single
//!   workgroup that loops, a 2-D grid, a 3-D grid, an oversized one);
//! - `randint`, `uniform_`, `randn` and `normal_` are bit-identical too,
//!   `randn` at lengths up to 1,000,003 and at the positions where a GPU's
//!   `log` once went wrong, `normal_` where it rounds to subnormals,
//!   infinities and signed zeros;
//! - `randn` is standard normal over 10^7 draws (mean, variance, tails);
//! - Kolmogorov-Smirnov on 10^6 samples of `rand` and `randn` per backend;
//! - launches from a generator reserve its stream (offsets advance in
//!   multiples of 4), and `get_state`/`set_state` replays a launch.
//!
//! A backend that cannot run here is skipped with the reason printed,
//! unless `KEEL_REQUIRE_BACKENDS` names it (then the test fails).

use keel::generator::{Generator, PhiloxState};
use keel::random::{self, RandomOp};
use keel::testing::conformance::device;
use keel::{Buffer, Device, DeviceType, Kernel};

/// Every backend that runs here, with a label.
fn backends() -> Vec<(&'static str, Device)> {
    keel::testing::conformance::builtin_devices()
}

/// Runs `kernel` over `grid` (Keel's own grid when `None`) and reads the
/// `n` result words back. The buffer starts with a sentinel so that an
/// element a kernel forgot shows.
fn run(
    d: Device,
    kernel: &Kernel,
    grid: Option<[u32; 3]>,
    op: RandomOp,
    n: usize,
    seed: u64,
    offset: u64,
) -> Vec<u32> {
    let s = keel::default_stream(d).expect("stream");
    let out = Buffer::from_slice(&s, &vec![0xDEAD_BEEFu32; n + 1]).expect("buffer");
    match grid {
        None => random::launch(&s, op, &out, n, seed, offset).expect("launch"),
        Some(g) => random::launch_with_grid(&s, kernel, g, op, &out, n, seed, offset)
            .expect("launch with grid"),
    }
    let mut v: Vec<u32> = out.read_as(&s).expect("read");
    assert_eq!(v[n], 0xDEAD_BEEF, "the kernel wrote past n = {n}");
    v.truncate(n);
    v
}

fn check_validation(label: &str) {
    // Without the Vulkan backend built there is nothing to check.
    #[cfg(not(feature = "vulkan"))]
    let _ = label;
    #[cfg(feature = "vulkan")]
    if label == "vulkan" {
        assert_eq!(
            keel::backend::vulkan::validation_error_count(),
            0,
            "Vulkan validation errors: {:?}",
            keel::backend::vulkan::validation_messages()
        );
    }
}

const SEEDS: [u64; 4] = [0, 1, 0x0123_4567_89AB_CDEF, u64::MAX];

/// Offsets: block-aligned, odd, a block counter crossing 2^32 within the
/// launch, a counter with a high word, and the stream's last words.
fn offsets(n: usize) -> Vec<u64> {
    vec![
        0,
        1,
        3,
        4,
        7,
        (1u64 << 34) - 6,
        (1u64 << 40) + 9,
        u64::MAX - n as u64 - 2,
    ]
}

const LENGTHS: [usize; 6] = [1, 2, 5, 17, 1031, 65_537];

/// The grids tried for `kernel`: Keel's, one workgroup (loops over all
/// blocks), a 2-D one, a 3-D one, and far more invocations than blocks.
fn grids(kernel: &Kernel, n: usize, offset: u64) -> Vec<Option<[u32; 3]>> {
    let _ = (kernel, n, offset);
    vec![
        None,
        Some([1, 1, 1]),
        Some([3, 5, 1]),
        Some([2, 2, 3]),
        Some([700, 1, 1]),
    ]
}

#[test]
fn words_and_rand_are_bit_identical_on_every_backend_and_geometry() {
    let kernels: [(RandomOp, [Kernel; 2]); 2] = [
        (RandomOp::U32, [random::PHILOX_U32, random::PHILOX_U32_WG64]),
        (
            RandomOp::Rand,
            [random::PHILOX_RAND, random::PHILOX_RAND_WG64],
        ),
    ];
    for (label, d) in backends() {
        let mut launches = 0;
        for (i, &seed) in SEEDS.iter().enumerate() {
            // Every length with every seed; offsets rotate so that each
            // (seed, offset) pair and each (offset, length) pair occurs.
            for (j, &n) in LENGTHS.iter().enumerate() {
                let offs = offsets(n);
                for &offset in [
                    offs[(i + j) % offs.len()],
                    offs[(i + 2 * j + 3) % offs.len()],
                ]
                .iter()
                {
                    for (op, ks) in &kernels {
                        let want = random::reference(*op, n, seed, offset).expect("reference");
                        for k in ks {
                            for grid in grids(k, n, offset) {
                                let got = run(d, k, grid, *op, n, seed, offset);
                                if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
                                    panic!(
                                        "{label}: {op:?} seed {seed:#x} offset {offset} n {n} kernel {} grid {grid:?}: \
                                         element {at} is {:#010x}, the reference {:#010x}",
                                        k.name, got[at], want[at]
                                    );
                                }
                                launches += 1;
                            }
                        }
                    }
                }
            }
        }
        check_validation(label);
        println!("{label}: {launches} launches bit-identical with the reference");
    }
}

/// The reference's raw words really are the stream: position `p` is lane
/// `p % 4` of block `p / 4` (checked against the Philox function itself).
#[test]
fn reference_words_are_stream_positions() {
    for &seed in &SEEDS {
        for offset in offsets(9) {
            let got = random::reference(RandomOp::U32, 9, seed, offset).expect("reference");
            for (i, &w) in got.iter().enumerate() {
                let p = offset + i as u64;
                let block = keel::generator::philox4x32_10(
                    [(p / 4) as u32, ((p / 4) >> 32) as u32, 0, 0],
                    [seed as u32, (seed >> 32) as u32],
                );
                assert_eq!(w, block[(p % 4) as usize], "seed {seed:#x} position {p}");
            }
        }
    }
}

#[test]
fn randint_uniform_randn_and_normal_are_bit_identical() {
    let ops = [
        RandomOp::Randint { low: -5, high: 12 },
        RandomOp::Randint {
            low: i32::MIN,
            high: i32::MAX,
        },
        RandomOp::Uniform { lo: -2.0, hi: 3.0 },
        RandomOp::Uniform { lo: 0.5, hi: 0.75 },
        RandomOp::Randn,
        RandomOp::Normal {
            mean: 10.0,
            std: 0.5,
        },
    ];
    let n = 40_009;
    for (label, d) in backends() {
        for (seed, offset) in [(7u64, 0u64), (0xFEED_u64, 13)] {
            for op in ops {
                let want = random::reference(op, n, seed, offset).expect("reference");
                let got = run(d, &op.kernel(), None, op, n, seed, offset);
                assert_same(label, op, seed, offset, &got, &want);
            }
        }
        check_validation(label);
    }
}

/// `got` is `want` bit for bit; otherwise a message naming the first
/// element that differs.
fn assert_same(label: &str, op: RandomOp, seed: u64, offset: u64, got: &[u32], want: &[u32]) {
    assert_eq!(got.len(), want.len());
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{label}: {op:?} seed {seed:#x} offset {offset}: element {i} (stream position {}) is {:e} ({:#010x}), the reference {:e} ({:#010x})",
            offset + i as u64,
            f32::from_bits(got[i]),
            got[i],
            f32::from_bits(want[i]),
            want[i]
        );
    }
}

/// The exact Box-Muller value (in `f64`) of stream position `p` of `seed`.
fn exact_normal(seed: u64, p: u64) -> f64 {
    let words = random::reference(RandomOp::U32, 2, seed, p & !1).expect("reference");
    let u1 = 1.0 - f64::from(words[0] & 0xFF_FFFF) / 16_777_216.0;
    let u2 = f64::from(words[1] & 0xFF_FFFF) / 16_777_216.0;
    let r = (-2.0 * u1.ln()).sqrt();
    let t = std::f64::consts::TAU * u2;
    if p.is_multiple_of(2) {
        r * t.cos()
    } else {
        r * t.sin()
    }
}

/// `randn` is the same on every device for every length and seed, and
/// right where a GPU's `log` went wrong: seed 0 element 932,033 and seed 42
/// element 308,306 of a launch of 1,000,003 at offset 2,000,008 (stream
/// positions 2,932,041 and 2,308,314; the first word of the seed-42 pair
/// is 0x7e00002a, so u1 = 1 - 42 * 2^-24).
#[test]
fn randn_is_bit_identical_at_every_length_and_the_named_positions() {
    let seeds = [0u64, 42, (1u64 << 63) + 7];
    let offset = 2_000_008u64;
    let lengths = [1usize, 3, 1023, 4097, 1_000_003];
    let mut references = Vec::new();
    for &seed in &seeds {
        for &n in &lengths {
            let want = random::reference(RandomOp::Randn, n, seed, offset).expect("reference");
            references.push((seed, n, want));
        }
    }
    for (seed, element) in [(0u64, 932_033usize), (42, 308_306)] {
        let (_, _, want) = references
            .iter()
            .find(|(s, n, _)| *s == seed && *n == 1_000_003)
            .expect("the long launch");
        let got = f64::from(f32::from_bits(want[element]));
        let exact = exact_normal(seed, offset + element as u64);
        let ulp = f64::from(exact as f32).abs() * f64::from(f32::EPSILON);
        assert!(
            (got - exact).abs() <= ulp,
            "seed {seed} element {element}: {got} against the exact {exact}"
        );
    }
    let words = random::reference(RandomOp::U32, 1, 42, offset + 308_306).expect("word");
    assert_eq!(words[0], 0x7e00_002a, "the seed-42 case is the one named");
    for (label, d) in backends() {
        let started = std::time::Instant::now();
        for (seed, n, want) in &references {
            let got = run(
                d,
                &random::PHILOX_RANDN,
                None,
                RandomOp::Randn,
                *n,
                *seed,
                offset,
            );
            assert_same(label, RandomOp::Randn, *seed, offset, &got, want);
        }
        check_validation(label);
        println!(
            "{label}: randn bit-identical for lengths {lengths:?}, seeds {seeds:?} ({:?})",
            started.elapsed()
        );
    }
}

/// `normal_`'s `mean + std * z` rounds as IEEE 754 says on every device:
/// results that are subnormal, that overflow to infinity, signed zeros,
/// and sums that cancel.
#[test]
fn normal_rounds_the_same_everywhere_at_the_edges() {
    let p = |e: i32| 2f32.powi(e);
    let cases = [
        (0.0f32, 1.0f32),
        (-3.5, 1e-40),
        (0.0, 1e-45),
        (1e-38, 1e-38),
        (-0.0, 0.0),
        (-0.0, 1e-45),
        (3e38, 3e38),
        (-3e38, 1e38),
        (0.0, f32::MAX),
        (1.0, 1e-8),
        (-1.0, 0.75),
        (1.5, 3.0),
        (f32::MIN_POSITIVE, 1.2e-38),
        // Products and sums on both sides of 2^-125 (2.35e-38), where
        // the kernels switch between the hardware's multiply and add and
        // their integer ones.
        (3e-38, 2e-38),
        (-2.4e-38, 1e-38),
        // Both sides of each bound of the launch-wide test that lets a
        // launch skip the per-element checks (`normal_plain` in the
        // kernel): |mean| 2^-102 and 2^126, |std| 2^-69 and 2^123.
        (p(-102), p(-69)),
        (-p(-102) * 0.75, p(-69)),
        (p(-102), p(-69) * 0.75),
        (1.0, p(123) * 0.99),
        (p(126) * 0.99, p(-60)),
        (-p(126), 1.0),
        (0.0, p(123)),
        (-0.0, p(-69)),
    ];
    let n = 4097;
    let mut wanted = Vec::new();
    for &(mean, std) in &cases {
        let op = RandomOp::Normal { mean, std };
        let want = random::reference(op, n, 5, 3).expect("reference");
        wanted.push((op, want));
    }
    let all: Vec<f32> = wanted
        .iter()
        .flat_map(|(_, w)| w.iter().map(|b| f32::from_bits(*b)))
        .collect();
    assert!(all.iter().any(|v| v.is_infinite()), "an overflow is tried");
    assert!(all.iter().any(|v| v.is_subnormal()), "a subnormal is tried");
    assert!(
        all.iter().any(|v| *v == 0.0 && v.is_sign_negative()),
        "a negative zero is tried"
    );
    let plain = wanted
        .iter()
        .filter(|(op, _)| op.kernel().name == random::PHILOX_NORMAL_PLAIN.name)
        .count();
    assert!(
        plain >= 6 && plain < wanted.len() - 6,
        "both kernels are tried: {plain} of {} plain",
        wanted.len()
    );
    for (label, d) in backends() {
        for (op, want) in &wanted {
            // The kernel the op picks, and the checked one, which every
            // mean and std may take.
            for kernel in [op.kernel(), random::PHILOX_NORMAL] {
                let got = run(d, &kernel, None, *op, n, 5, 3);
                assert_same(label, *op, 5, 3, &got, want);
            }
        }
        check_validation(label);
    }
}

/// Ten million draws of `randn` (every device gives these same bits) are
/// standard normal: mean, variance, and the tails beyond 1 to 4.5 against
/// the normal CDF, each within five standard errors.
#[test]
fn randn_is_normal_over_ten_million_draws() {
    let n = 10_000_000usize;
    let draws = random::reference(RandomOp::Randn, n, 2024, 0).expect("reference");
    let (mut sum, mut sq) = (0f64, 0f64);
    let ks = [1.0f64, 2.0, 3.0, 4.0, 4.5];
    let mut beyond = [0usize; 5];
    for &b in &draws {
        let z = f64::from(f32::from_bits(b));
        sum += z;
        sq += z * z;
        for (k, count) in ks.iter().zip(beyond.iter_mut()) {
            if z.abs() > *k {
                *count += 1;
            }
        }
    }
    let nf = n as f64;
    let mean = sum / nf;
    let var = sq / nf - mean * mean;
    assert!(mean.abs() < 5.0 / nf.sqrt(), "mean {mean}");
    // The sample variance of a normal has standard error sqrt(2 / n).
    assert!(
        (var - 1.0).abs() < 5.0 * (2.0 / nf).sqrt(),
        "variance {var}"
    );
    for (k, count) in ks.iter().zip(beyond) {
        let p = 2.0 * normal_cdf(-k);
        let expected = p * nf;
        let se = (nf * p * (1.0 - p)).sqrt();
        assert!(
            (count as f64 - expected).abs() < 5.0 * se,
            "|z| > {k}: {count} draws, expected {expected:.0} +- {se:.0}"
        );
    }
}

#[test]
fn uniform_stays_below_hi_and_randint_in_range() {
    // A range where rand * width + lo rounds up to hi for about half the
    // words: in [2^23, 2^24) the f32 spacing is 1, so lo + u rounds to hi
    // for u >= 0.5. The kernel must keep every result below hi.
    let (lo, hi) = (16_777_215.0f32, 16_777_216.0f32);
    let n = 1 << 16;
    let words = random::reference(RandomOp::U32, n, 3, 0).expect("reference");
    let unclamped = words
        .iter()
        .filter(|&&w| random::to_unit(w) * (hi - lo) + lo >= hi)
        .count();
    assert!(
        unclamped > n / 3,
        "the case this test is about: {unclamped}"
    );
    for (label, d) in backends() {
        let got = run(
            d,
            &random::PHILOX_UNIFORM,
            None,
            RandomOp::Uniform { lo, hi },
            n,
            3,
            0,
        );
        assert!(
            got.iter().all(|&b| f32::from_bits(b) == lo),
            "{label}: uniform_ gave hi"
        );
    }
    let d = device(DeviceType::Cpu).expect("cpu");
    let got = run(
        d,
        &random::PHILOX_RANDINT,
        None,
        RandomOp::Randint { low: -3, high: 4 },
        n,
        3,
        0,
    );
    let mut seen = [0usize; 7];
    for v in got {
        let v = v as i32;
        assert!((-3..4).contains(&v), "randint gave {v}");
        seen[(v + 3) as usize] += 1;
    }
    assert!(seen.iter().all(|&c| c > n / 7 - 1000), "counts {seen:?}");
}

/// The standard normal CDF, through erfc (W. J. Cody's rational
/// approximations are overkill here: Abramowitz and Stegun 7.1.26 is
/// accurate to 1.5e-7, far below the KS critical values).
fn normal_cdf(x: f64) -> f64 {
    let z = x / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf_abs = 1.0 - poly * (-z * z).exp();
    let erf = if z >= 0.0 { erf_abs } else { -erf_abs };
    0.5 * (1.0 + erf)
}

/// The Kolmogorov-Smirnov statistic of `samples` against `cdf`.
fn ks_statistic(samples: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    samples
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

/// The critical value of the one-sample KS test at significance `alpha`
/// for large `n`: sqrt(-ln(alpha / 2) / 2) / sqrt(n).
fn ks_critical(alpha: f64, n: usize) -> f64 {
    (-(alpha / 2.0).ln() / 2.0).sqrt() / (n as f64).sqrt()
}

#[test]
fn kolmogorov_smirnov_on_a_million_samples() {
    const N: usize = 1_000_000;
    // Significance 1%: a correct generator fails one seed in a hundred;
    // the seeds are fixed, so the outcome is too.
    let critical = ks_critical(0.01, N);
    for (label, d) in backends() {
        for (op, cdf) in [
            (
                RandomOp::Rand,
                (|x: f64| x.clamp(0.0, 1.0)) as fn(f64) -> f64,
            ),
            (RandomOp::Randn, normal_cdf as fn(f64) -> f64),
        ] {
            let words = run(d, &op.kernel(), None, op, N, 2024, 0);
            let mut xs: Vec<f64> = words
                .iter()
                .map(|&b| f64::from(f32::from_bits(b)))
                .collect();
            let stat = ks_statistic(&mut xs, cdf);
            println!("{label}: {op:?} KS D = {stat:.6} (critical {critical:.6} at 1%)");
            assert!(
                stat < critical,
                "{label}: {op:?} KS statistic {stat} >= critical value {critical}"
            );
        }
    }
    // The test can fail: a biased sample (u^2 is not uniform) is rejected.
    let mut biased: Vec<f64> = random::reference(RandomOp::Rand, N, 2024, 0)
        .expect("reference")
        .iter()
        .map(|&b| f64::from(f32::from_bits(b)).powf(1.02))
        .collect();
    assert!(ks_statistic(&mut biased, |x| x.clamp(0.0, 1.0)) > critical);
}

#[test]
fn launches_from_a_generator_reserve_and_replay() {
    for (label, d) in backends() {
        let g = Generator::new(d).expect("generator");
        g.manual_seed(99);
        let s = keel::default_stream(d).expect("stream");
        let out = Buffer::new(d, 4 * 10).expect("buffer");
        let before = g.get_state();
        let first = random::launch_from(&g, &s, RandomOp::Rand, &out, 10).expect("launch");
        assert_eq!(
            first,
            PhiloxState {
                seed: 99,
                offset: 0
            }
        );
        let a: Vec<u32> = out.read_as(&s).expect("read");
        // 10 words reserve 12: offsets stay multiples of 4.
        assert_eq!(g.offset(), 12, "{label}");
        let second = random::launch_from(&g, &s, RandomOp::Rand, &out, 10).expect("launch");
        assert_eq!(second.offset, 12);
        let b: Vec<u32> = out.read_as(&s).expect("read");
        assert_ne!(a, b, "{label}: two draws gave the same numbers");
        assert_eq!(
            b,
            random::reference(RandomOp::Rand, 10, 99, 12).expect("reference")
        );
        g.set_state(&before).expect("set_state");
        random::launch_from(&g, &s, RandomOp::Rand, &out, 10).expect("launch");
        let replay: Vec<u32> = out.read_as(&s).expect("read");
        assert_eq!(replay, a, "{label}: set_state did not replay");
        // A refused launch leaves the generator where it was.
        let small = Buffer::new(d, 8).expect("buffer");
        let err = random::launch_from(&g, &s, RandomOp::Rand, &small, 10)
            .expect_err("a buffer too small");
        assert!(err.to_string().contains("must hold 10"), "{err}");
        assert_eq!(g.offset(), 12);
        // A generator of another device type is refused.
        if d.device_type() != DeviceType::Cpu {
            let cpu_gen = Generator::new(Device::new(DeviceType::Cpu, 0).expect("cpu"))
                .expect("cpu generator");
            let err = random::launch_from(&cpu_gen, &s, RandomOp::Rand, &out, 10)
                .expect_err("a cpu generator");
            assert_eq!(
                err.to_string(),
                format!(
                    "Expected a '{}' device type for generator but found 'cpu'",
                    d.device_type().name_lower()
                )
            );
            assert_eq!(cpu_gen.offset(), 0);
        }
    }
}

#[test]
fn bad_arguments_are_clear_errors() {
    let d = device(DeviceType::Cpu).expect("cpu");
    let s = keel::default_stream(d).expect("stream");
    let out = Buffer::new(d, 64).expect("buffer");
    let cases: [(RandomOp, &str); 4] = [
        (
            RandomOp::Uniform { lo: 1.0, hi: 1.0 },
            "uniform_ expects finite bounds with lo < hi, found lo=1, hi=1",
        ),
        (
            RandomOp::Normal {
                mean: 0.0,
                std: -1.0,
            },
            "normal_ expects a finite mean and a finite std >= 0.0, found mean=0, std=-1",
        ),
        (
            RandomOp::Randint { low: 4, high: 4 },
            "randint expects low < high, found low=4, high=4",
        ),
        (
            RandomOp::Uniform {
                lo: f32::MIN,
                hi: f32::MAX,
            },
            "uniform_ expects hi - lo to be finite",
        ),
    ];
    for (op, text) in cases {
        let err = random::launch(&s, op, &out, 4, 0, 0).expect_err("bad op");
        assert!(err.to_string().contains(text), "{err}");
    }
    // Zero elements: checked, nothing written, no generator words used.
    random::launch(&s, RandomOp::Rand, &out, 0, 0, 5).expect("n = 0");
    assert!(random::launch(&s, RandomOp::Randint { low: 1, high: 0 }, &out, 0, 0, 0).is_err());
    let g = Generator::new(d).expect("generator");
    random::launch_from(&g, &s, RandomOp::Randn, &out, 0).expect("n = 0");
    assert_eq!(g.offset(), 0);
    let err =
        random::launch(&s, RandomOp::Rand, &out, 4, 0, u64::MAX - 1).expect_err("past the end");
    assert!(
        err.to_string().contains("passes the end of the stream"),
        "{err}"
    );
    let err = random::launch_with_grid(
        &s,
        &random::PHILOX_RANDN,
        [1, 1, 1],
        RandomOp::Rand,
        &out,
        4,
        0,
        0,
    )
    .expect_err("wrong kernel");
    assert!(err.to_string().contains("does not compute Rand"), "{err}");
}

/// What each `Kernel` says matches its one WGSL source (the entry point
/// with the same workgroup size), and the PTX CUDA runs, generated from
/// it, takes the buffer, the eight parameter words and the buffer's
/// length (CUDA cannot run here; `ptxas` checks the PTX assembles).
#[test]
fn kernel_metadata_matches_the_sources() {
    let words = random::params(1, PhiloxState { seed: 0, offset: 0 }, 0, 0).len() / 4;
    for k in random::ALL {
        let wgsl = k.wgsl.expect("wgsl");
        let decl = format!(
            "@compute @workgroup_size({})\nfn {}(",
            k.workgroup_size[0], k.name
        );
        assert!(wgsl.contains(&decl), "{}: no `{decl}` in the WGSL", k.name);
        // One source: CUDA runs PTX generated from it, host backends its
        // translation to Rust.
        assert!(k.ptx.is_none() && k.cpu.is_some(), "{}", k.name);
        let ptx = k.ptx_source().expect("generated PTX");
        let params = keel::compute::params::ptx_entry_params(&ptx, k.name).expect("entry");
        assert_eq!(params.len(), k.bindings + words + k.bindings, "{}", k.name);
    }
}

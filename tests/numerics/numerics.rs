//! The numerics API: Philox against Random123's published known answers,
//! generators (seeding, offsets, states, forks, default generators,
//! threads, the `npu` example's registered generator), the precision
//! policy (hierarchy, legacy switches, defaults, scopes per thread, error
//! texts) and autocast (per-thread state, dtypes, operator policy, guard).
//!
//! The precision settings are process-wide by design (as PyTorch's are),
//! so the tests that read or write them hold `SETTINGS`; scopes are
//! thread-local and need no lock when a test overrides every level it
//! reads.

use crate::npu;

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;

use keel::autocast::{self, AutocastDtype, CastPolicy};
use keel::generator::{self, Generator, Philox, PhiloxState, philox4x32_10, stream_word};
use keel::precision::{
    self, Float32MatmulPrecision, Fp32Precision, MATMUL, MatmulInput, Rounding, Scope,
};
use keel::random::{self, RandomOp};
use keel::{Buffer, Device, DeviceType};

static SETTINGS: Mutex<()> = Mutex::new(());

fn settings() -> MutexGuard<'static, ()> {
    SETTINGS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn cpu() -> Device {
    Device::new(DeviceType::Cpu, 0).expect("cpu")
}

// ---- Philox ----

/// Random123's `tests/kat_vectors`, the three Philox4x32-10 lines:
/// counter (4 words), key (2 words), expected output (4 words).
#[test]
fn philox_matches_random123_known_answers() {
    let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        (
            [0, 0, 0, 0],
            [0, 0],
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
        ),
        (
            [0xffff_ffff; 4],
            [0xffff_ffff; 2],
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
        ),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];
    for (ctr, key, want) in kat {
        assert_eq!(
            philox4x32_10(ctr, key),
            want,
            "counter {ctr:08x?} key {key:08x?}"
        );
    }
    // The stream of seed 0 starts with the all-zero block.
    assert_eq!(stream_word(0, 0), 0x6627_e8d5);
    assert_eq!(stream_word(0, 3), 0x9b00_dbd8);
}

// ---- Generators ----

#[test]
fn seeding_offsets_and_reservations() {
    let g = Generator::new(cpu()).expect("generator");
    assert_eq!(g.initial_seed(), generator::DEFAULT_SEED);
    g.manual_seed(42);
    assert_eq!((g.initial_seed(), g.offset()), (42, 0));
    // PyTorch's rule: each reservation rounds up to a multiple of 4.
    let mut expect = 0;
    for (words, step) in [(1, 4), (4, 4), (5, 8), (0, 0), (1031, 1032)] {
        let at = g.reserve(words).expect("reserve");
        assert_eq!(
            at,
            PhiloxState {
                seed: 42,
                offset: expect
            }
        );
        expect += step;
        assert_eq!(g.offset(), expect, "after reserving {words}");
    }
    // manual_seed restarts the stream.
    g.manual_seed(42);
    assert_eq!(g.offset(), 0);
    let err = g.set_offset(6).expect_err("odd offset");
    assert_eq!(
        err.to_string(),
        "a Philox offset must be a multiple of 4 (each Philox block gives 4 words), found 6"
    );
    g.set_offset(8).expect("offset 8");
    // seed() is non-deterministic and becomes the initial seed.
    let (a, b) = (g.seed(), g.seed());
    assert_ne!(a, b);
    assert_eq!(g.initial_seed(), b);
    assert_eq!(g.offset(), 0);
    // Reserving past the end of the stream is an error.
    // The last whole block a reservation can end at starts at 2^64 - 8.
    g.set_offset(u64::MAX - 7).expect("last block");
    assert!(g.reserve(4).is_ok());
    let err = g.reserve(4).expect_err("past the end");
    assert!(err.to_string().contains("used up"), "{err}");
}

#[test]
fn get_state_and_set_state_replay_exactly() {
    let d = cpu();
    let s = keel::default_stream(d).expect("stream");
    let g = Generator::new(d).expect("generator");
    g.manual_seed(7);
    g.reserve(12).expect("reserve");
    let state = g.get_state();
    assert_eq!(state.len(), generator::PHILOX_STATE_LEN);
    let out = Buffer::new(d, 4 * 100).expect("buffer");
    let draw = |op| -> Vec<u32> {
        random::launch_from(&g, &s, op, &out, 100).expect("launch");
        out.read_as(&s).expect("read")
    };
    let first = [
        draw(RandomOp::Rand),
        draw(RandomOp::Randn),
        draw(RandomOp::U32),
    ];
    g.set_state(&state).expect("set_state");
    let again = [
        draw(RandomOp::Rand),
        draw(RandomOp::Randn),
        draw(RandomOp::U32),
    ];
    assert_eq!(first, again);
    assert_ne!(first[0], first[2]);
    // A state moves between generators.
    let h = Generator::new(d).expect("generator");
    h.set_state(&state).expect("set_state");
    assert_eq!((h.initial_seed(), h.offset()), (7, 12));
}

#[test]
fn malformed_states_are_clear_errors_and_change_nothing() {
    let g = Generator::new(cpu()).expect("generator");
    g.manual_seed(5);
    g.reserve(8).expect("reserve");
    let good = g.get_state();
    let mut bad_magic = good.clone();
    bad_magic[0] = b'X';
    let mut odd = good.clone();
    odd[12] = 3;
    let cases: [(&[u8], &str); 4] = [
        (
            &good[..19],
            "expected a 20-byte Philox generator state (magic \"KPX1\", seed u64, offset u64), found 19 bytes",
        ),
        (&[], "found 0 bytes"),
        (
            &bad_magic,
            "expected a Philox generator state starting with \"KPX1\", found [58, 50, 58, 31]",
        ),
        (&odd, "a Philox offset must be a multiple of 4"),
    ];
    for (state, text) in cases {
        let err = g.set_state(state).expect_err("malformed");
        assert!(err.to_string().contains(text), "{err}");
        assert_eq!(
            (g.initial_seed(), g.offset()),
            (5, 8),
            "a failed set_state changed the state"
        );
    }
}

#[test]
fn forks_are_independent_streams() {
    let g = Generator::new(cpu()).expect("generator");
    g.manual_seed(1234);
    let f1 = g.fork().expect("fork");
    assert_eq!(g.offset(), 4, "a fork reserves one block of the parent");
    let f2 = g.fork().expect("fork");
    // Deterministic: the same parent state forks the same child.
    let g2 = Generator::new(cpu()).expect("generator");
    g2.manual_seed(1234);
    assert_eq!(g2.fork().expect("fork").initial_seed(), f1.initial_seed());
    // Different keys, so different streams; drawing from one does not move
    // the others.
    let seeds: HashSet<u64> = [g.initial_seed(), f1.initial_seed(), f2.initial_seed()].into();
    assert_eq!(seeds.len(), 3);
    f1.reserve(1000).expect("reserve");
    assert_eq!((g.offset(), f2.offset()), (8, 0));
    // The streams look unrelated: no shared words in their first 4096,
    // and the correlation of their rand values is near 0.
    let n = 4096;
    let words = |seed| random::reference(RandomOp::U32, n, seed, 0).expect("reference");
    let (a, b) = (words(g.initial_seed()), words(f1.initial_seed()));
    let sa: HashSet<u32> = a.iter().copied().collect();
    let shared = b.iter().filter(|w| sa.contains(w)).count();
    assert!(shared <= 1, "{shared} shared words");
    let ua: Vec<f64> = a.iter().map(|&w| f64::from(random::to_unit(w))).collect();
    let ub: Vec<f64> = b.iter().map(|&w| f64::from(random::to_unit(w))).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (ma, mb) = (mean(&ua), mean(&ub));
    let cov: f64 = ua
        .iter()
        .zip(&ub)
        .map(|(x, y)| (x - ma) * (y - mb))
        .sum::<f64>();
    let var = |v: &[f64], m: f64| v.iter().map(|x| (x - m) * (x - m)).sum::<f64>();
    let r = cov / (var(&ua, ma) * var(&ub, mb)).sqrt();
    // 4 standard errors of a correlation of independent samples.
    assert!(r.abs() < 4.0 / (n as f64).sqrt(), "correlation {r}");
}

#[test]
fn default_generators_are_shared_per_device_and_seeded_together() {
    let d = cpu();
    let a = generator::default_generator(d).expect("default");
    let b = generator::default_generator(d).expect("default");
    assert!(a.same(&b), "two handles on one device's default generator");
    let own = Generator::new(d).expect("generator");
    assert!(!own.same(&a));
    generator::manual_seed(77);
    assert_eq!((a.initial_seed(), a.offset()), (77, 0));
    assert_eq!(b.initial_seed(), 77);
    assert_eq!(
        own.initial_seed(),
        generator::DEFAULT_SEED,
        "a user generator is not a default one"
    );
    // Index -1 is the current device.
    let current = generator::default_generator(Device::new(DeviceType::Cpu, -1).expect("cpu"))
        .expect("default");
    assert!(current.same(&a));
    // A device that does not exist has no generator.
    let missing = Device::new(DeviceType::Vulkan, 40).expect("vulkan:40");
    let err = Generator::new(missing).expect_err("vulkan:40");
    println!("vulkan:40: {err}");
    assert!(generator::default_generator(missing).is_err());
}

#[test]
fn threads_drawing_from_one_generator_get_disjoint_ranges() {
    let g = Generator::new(cpu()).expect("generator");
    g.manual_seed(9);
    let per_thread = 500;
    let ranges: Vec<(u64, u64)> = thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let g = g.clone();
                s.spawn(move || {
                    (0..per_thread)
                        .map(|i| {
                            let words = 1 + (t + i) % 9;
                            let at = g.reserve(words).expect("reserve");
                            (at.offset, at.offset + words.next_multiple_of(4))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    let mut sorted = ranges.clone();
    sorted.sort_unstable();
    for w in sorted.windows(2) {
        assert_eq!(
            w[0].1, w[1].0,
            "ranges overlap or leave a gap: {:?} {:?}",
            w[0], w[1]
        );
    }
    assert_eq!(sorted[0].0, 0);
    assert_eq!(sorted.last().map(|r| r.1), Some(g.offset()));
}

#[test]
fn a_third_party_backend_registers_its_generator() {
    let err = generator::register_generator(DeviceType::Cpu, |d| {
        Ok(Box::new(Philox::new(d, 0)) as Box<dyn generator::GeneratorImpl>)
    })
    .expect_err("cpu");
    assert_eq!(
        err.to_string(),
        "only the PrivateUse1 device type registers a generator; cpu uses Keel's Philox generator"
    );
    npu::install().expect("npu");
    let d: Device = "npu:1".parse().expect("npu:1");
    let g = Generator::new(d).expect("npu generator");
    assert_eq!(g.device(), d);
    g.manual_seed(31);
    let state = g.get_state();
    assert_eq!(
        &state[..4],
        npu::NPU_STATE_TAG,
        "the npu's own generator made it"
    );
    // A CPU generator's state is refused by the npu's generator.
    let cpu_state = Generator::new(cpu()).expect("cpu").get_state();
    let err = g.set_state(&cpu_state).expect_err("a cpu state");
    assert!(
        err.to_string().contains("expected an npu generator state"),
        "{err}"
    );
    // Registered once only.
    let err = generator::register_generator(DeviceType::PrivateUse1, |d| {
        Ok(Box::new(Philox::new(d, 0)) as Box<dyn generator::GeneratorImpl>)
    })
    .expect_err("twice");
    assert!(err.to_string().contains("already registered"), "{err}");
    // Keel's random kernels run on the npu from its generator, with the
    // numbers of every other backend.
    let s = keel::default_stream(d).expect("stream");
    let out = Buffer::new(d, 4 * 1001).expect("buffer");
    let at = random::launch_from(&g, &s, RandomOp::Rand, &out, 1001).expect("launch");
    let got: Vec<u32> = out.read_as(&s).expect("read");
    assert_eq!(
        got,
        random::reference(RandomOp::Rand, 1001, 31, at.offset).expect("reference")
    );
    // Its default generator and its autocast dtypes come from the backend.
    let def = generator::default_generator(d).expect("default");
    assert_eq!(&def.get_state()[..4], npu::NPU_STATE_TAG);
    assert_eq!(
        autocast::get_amp_supported_dtype(DeviceType::PrivateUse1),
        vec![AutocastDtype::F16]
    );
    let err = autocast::set_autocast_dtype(DeviceType::PrivateUse1, AutocastDtype::Bf16)
        .expect_err("bf16 on npu");
    assert_eq!(
        err.to_string(),
        "autocast on npu supports float16, found bfloat16"
    );
}

// ---- Precision policy ----

#[test]
fn precision_defaults_are_pytorchs() {
    let _s = settings();
    precision::reset_to_defaults();
    for ty in DeviceType::ALL {
        assert_eq!(precision::global_fp32_precision(), Fp32Precision::Ieee);
        assert_eq!(precision::backend_fp32_precision(ty), Fp32Precision::None);
        assert_eq!(
            precision::fp32_precision(ty, MATMUL).expect("matmul"),
            Fp32Precision::None
        );
        assert_eq!(
            precision::effective(ty, MATMUL).expect("matmul"),
            Fp32Precision::Ieee
        );
        assert!(!precision::allow_tf32(ty));
        assert!(precision::allow_fp16_reduced_precision_reduction(ty));
        assert!(precision::allow_bf16_reduced_precision_reduction(ty));
        assert!(!precision::allow_fp16_accumulation(ty));
    }
    assert_eq!(
        precision::float32_matmul_precision().expect("uniform"),
        Float32MatmulPrecision::Highest
    );
}

#[test]
fn the_hierarchy_resolves_family_then_backend_then_global() {
    let _s = settings();
    precision::reset_to_defaults();
    let (cuda, vk) = (DeviceType::Cuda, DeviceType::Vulkan);
    precision::set_global_fp32_precision("tf32").expect("global");
    assert_eq!(
        precision::effective(vk, "conv").expect("conv"),
        Fp32Precision::Tf32
    );
    precision::set_backend_fp32_precision(cuda, "bf16").expect("backend");
    assert_eq!(
        precision::effective(cuda, MATMUL).expect("m"),
        Fp32Precision::Bf16
    );
    assert_eq!(
        precision::effective(vk, MATMUL).expect("m"),
        Fp32Precision::Tf32
    );
    precision::set_fp32_precision(cuda, MATMUL, Fp32Precision::Ieee).expect("family");
    assert_eq!(
        precision::effective(cuda, MATMUL).expect("m"),
        Fp32Precision::Ieee
    );
    // A later family inherits like any other, with no registration.
    assert_eq!(
        precision::effective(cuda, "conv").expect("conv"),
        Fp32Precision::Bf16
    );
    precision::set_fp32_precision(cuda, "conv", "tf32").expect("conv");
    assert_eq!(
        precision::effective(cuda, "conv").expect("conv"),
        Fp32Precision::Tf32
    );
    // "none" goes back to inheriting.
    precision::set_fp32_precision(cuda, MATMUL, "none").expect("none");
    assert_eq!(
        precision::effective(cuda, MATMUL).expect("m"),
        Fp32Precision::Bf16
    );
    precision::set_backend_fp32_precision(cuda, "none").expect("none");
    assert_eq!(
        precision::effective(cuda, MATMUL).expect("m"),
        Fp32Precision::Tf32
    );
    // The mode a kernel takes follows.
    let mode = precision::matmul_mode(cuda);
    assert_eq!(mode.plan(MatmulInput::F32).input_rounding, Rounding::Tf32);
    precision::reset_to_defaults();
}

#[test]
fn legacy_switches_map_onto_the_hierarchy() {
    let _s = settings();
    precision::reset_to_defaults();
    let (cpu, cuda) = (DeviceType::Cpu, DeviceType::Cuda);
    precision::set_allow_tf32(cuda, true);
    assert!(precision::allow_tf32(cuda));
    assert!(!precision::allow_tf32(cpu));
    assert_eq!(
        precision::fp32_precision(cuda, MATMUL).expect("m"),
        Fp32Precision::Tf32
    );
    // Backends disagree now: the legacy getter has no one answer.
    let err = precision::float32_matmul_precision().expect_err("mixed");
    assert!(
        err.to_string().starts_with(
            "the float32 matmul precision differs between device types (cpu: ieee, cuda: tf32,"
        ),
        "{err}"
    );
    precision::set_allow_tf32(cuda, false);
    assert_eq!(
        precision::fp32_precision(cuda, MATMUL).expect("m"),
        Fp32Precision::Ieee
    );
    for (name, p, legacy) in [
        ("high", Fp32Precision::Tf32, Float32MatmulPrecision::High),
        (
            "medium",
            Fp32Precision::Bf16,
            Float32MatmulPrecision::Medium,
        ),
        (
            "highest",
            Fp32Precision::Ieee,
            Float32MatmulPrecision::Highest,
        ),
    ] {
        precision::set_float32_matmul_precision(name).expect("legacy");
        for ty in DeviceType::ALL {
            assert_eq!(
                precision::effective(ty, MATMUL).expect("m"),
                p,
                "{name} on {ty:?}"
            );
        }
        assert_eq!(
            precision::float32_matmul_precision().expect("uniform"),
            legacy
        );
        assert_eq!(precision::allow_tf32(cuda), p == Fp32Precision::Tf32);
    }
    // The reduced-precision switches, per backend.
    precision::set_allow_fp16_accumulation(cuda, true);
    precision::set_allow_fp16_reduced_precision_reduction(cuda, false);
    precision::set_allow_bf16_reduced_precision_reduction(cpu, false);
    let m = precision::matmul_mode(cuda);
    let f16 = m.plan(MatmulInput::F16);
    assert!(f16.accumulate_in_f16);
    assert_eq!(f16.partial_rounding, Rounding::None);
    assert_eq!(m.plan(MatmulInput::Bf16).partial_rounding, Rounding::Bf16);
    let c = precision::matmul_mode(cpu);
    assert_eq!(c.plan(MatmulInput::Bf16).partial_rounding, Rounding::None);
    assert!(!c.plan(MatmulInput::F16).accumulate_in_f16);
    assert_eq!(c.plan(MatmulInput::F16).partial_rounding, Rounding::F16);
    assert!(
        m.describe().contains("allow_fp16_accumulation=true"),
        "{}",
        m.describe()
    );
    precision::reset_to_defaults();
}

#[test]
fn invalid_values_are_errors_listing_the_valid_ones() {
    let _s = settings();
    precision::reset_to_defaults();
    let err = precision::set_backend_fp32_precision(DeviceType::Cuda, "TF32").expect_err("case");
    assert_eq!(
        err.to_string(),
        "invalid fp32_precision \"TF32\": expected one of \"ieee\", \"tf32\", \"bf16\", \"none\""
    );
    let err = precision::set_global_fp32_precision("none").expect_err("global none");
    assert!(
        err.to_string()
            .contains("expected one of \"ieee\", \"tf32\", \"bf16\""),
        "{err}"
    );
    let err = precision::set_float32_matmul_precision("low").expect_err("legacy");
    assert_eq!(
        err.to_string(),
        "invalid float32 matmul precision \"low\": expected one of \"highest\", \"high\", \"medium\""
    );
    let long = "x".repeat(500);
    let err =
        precision::set_fp32_precision(DeviceType::Cpu, MATMUL, long.as_str()).expect_err("long");
    assert!(
        err.to_string().len() < 140,
        "quotes at most a prefix: {err}"
    );
    let err =
        precision::set_fp32_precision(DeviceType::Cpu, "Mat Mul", "ieee").expect_err("family");
    assert!(
        err.to_string()
            .starts_with("invalid operator family \"Mat Mul\""),
        "{err}"
    );
    // Nothing changed.
    assert_eq!(
        precision::backend_fp32_precision(DeviceType::Cuda),
        Fp32Precision::None
    );
    assert_eq!(precision::global_fp32_precision(), Fp32Precision::Ieee);
}

#[test]
fn scopes_override_this_thread_only_and_restore() {
    let _s = settings();
    precision::reset_to_defaults();
    let ty = DeviceType::Wgpu;
    {
        let _outer = Scope::new()
            .global_fp32_precision("bf16")
            .expect("global")
            .allow_fp16_accumulation(ty, true)
            .enter();
        assert_eq!(
            precision::effective(ty, MATMUL).expect("m"),
            Fp32Precision::Bf16
        );
        {
            let _inner = Scope::new().allow_tf32(ty, true).enter();
            assert!(precision::allow_tf32(ty));
            assert!(precision::allow_fp16_accumulation(ty));
            // Another thread sees the process-wide settings.
            thread::scope(|s| {
                s.spawn(|| {
                    assert_eq!(
                        precision::effective(ty, MATMUL).expect("m"),
                        Fp32Precision::Ieee
                    );
                    assert!(!precision::allow_fp16_accumulation(ty));
                    // ...and its own scopes, which this thread does not see.
                    let _g = Scope::new()
                        .fp32_precision(ty, MATMUL, "bf16")
                        .expect("scope")
                        .enter();
                    assert_eq!(
                        precision::effective(ty, MATMUL).expect("m"),
                        Fp32Precision::Bf16
                    );
                })
                .join()
                .expect("thread");
            });
            assert!(precision::allow_tf32(ty));
        }
        assert!(!precision::allow_tf32(ty));
        assert_eq!(
            precision::effective(ty, MATMUL).expect("m"),
            Fp32Precision::Bf16
        );
        // A process-wide change under a scope: the scope still wins here.
        precision::set_global_fp32_precision("tf32").expect("global");
        assert_eq!(
            precision::effective(ty, MATMUL).expect("m"),
            Fp32Precision::Bf16
        );
    }
    // The scope ended: the process-wide value shows again.
    assert_eq!(
        precision::effective(ty, MATMUL).expect("m"),
        Fp32Precision::Tf32
    );
    assert!(!precision::allow_fp16_accumulation(ty));
    let err = Scope::new()
        .fp32_precision(ty, MATMUL, "fp8")
        .expect_err("bad");
    assert!(err.to_string().contains("expected one of"), "{err}");
    precision::reset_to_defaults();
}

#[test]
fn many_threads_with_their_own_scopes() {
    let _s = settings();
    precision::reset_to_defaults();
    let modes = [
        Fp32Precision::Ieee,
        Fp32Precision::Tf32,
        Fp32Precision::Bf16,
    ];
    thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                for i in 0..200 {
                    let want = modes[(t + i) % 3];
                    let _g = Scope::new()
                        .fp32_precision(DeviceType::Vulkan, MATMUL, want)
                        .expect("scope")
                        .enter();
                    assert_eq!(precision::matmul_mode(DeviceType::Vulkan).fp32, want);
                }
                assert_eq!(
                    precision::effective(DeviceType::Vulkan, MATMUL).expect("m"),
                    Fp32Precision::Ieee
                );
            });
        }
    });
}

// ---- Autocast ----

#[test]
fn autocast_defaults_and_per_thread_state() {
    for ty in [DeviceType::Cuda, DeviceType::Vulkan, DeviceType::Wgpu] {
        assert!(!autocast::is_autocast_enabled(ty));
        assert_eq!(autocast::get_autocast_dtype(ty), AutocastDtype::F16);
    }
    assert_eq!(
        autocast::get_autocast_dtype(DeviceType::Cpu),
        AutocastDtype::Bf16
    );
    autocast::set_autocast_enabled(DeviceType::Vulkan, true).expect("enable");
    autocast::set_autocast_dtype(DeviceType::Vulkan, AutocastDtype::Bf16).expect("bf16");
    thread::scope(|s| {
        s.spawn(|| {
            assert!(!autocast::is_autocast_enabled(DeviceType::Vulkan));
            assert_eq!(
                autocast::get_autocast_dtype(DeviceType::Vulkan),
                AutocastDtype::F16
            );
        })
        .join()
        .expect("thread");
    });
    assert!(autocast::is_autocast_enabled(DeviceType::Vulkan));
    assert_eq!(
        autocast::get_autocast_dtype(DeviceType::Vulkan),
        AutocastDtype::Bf16
    );
    let err =
        autocast::set_autocast_dtype(DeviceType::Vulkan, AutocastDtype::F32).expect_err("f32");
    assert_eq!(
        err.to_string(),
        "autocast on vulkan supports float16, bfloat16, found float32"
    );
    assert_eq!(
        autocast::get_autocast_dtype(DeviceType::Vulkan),
        AutocastDtype::Bf16
    );
    autocast::set_autocast_enabled(DeviceType::Vulkan, false).expect("disable");
    let err = "fp8".parse::<AutocastDtype>().expect_err("fp8");
    assert!(
        err.to_string()
            .contains("expected one of \"float32\", \"float16\", \"bfloat16\"")
    );
}

#[test]
fn autocast_changes_the_dtype_of_a_matmul_and_nothing_else() {
    let ty = DeviceType::Cuda;
    let f32s = [AutocastDtype::F32, AutocastDtype::F32];
    let ops = ["matmul", "sum", "softmax", "cat", "relu"];
    let off: Vec<_> = ops
        .iter()
        .map(|op| autocast::cast_dtype(ty, op, &f32s))
        .collect();
    assert!(off.iter().all(|d| *d == Some(AutocastDtype::F32)));
    let on: Vec<_> = {
        let _g = autocast::autocast(ty, true, None).expect("autocast");
        assert!(autocast::is_autocast_enabled(ty));
        ops.iter()
            .map(|op| autocast::cast_dtype(ty, op, &f32s))
            .collect()
    };
    assert!(!autocast::is_autocast_enabled(ty), "the guard restored");
    assert_eq!(
        on[0],
        Some(AutocastDtype::F16),
        "matmul runs in the autocast dtype"
    );
    assert_eq!(&on[1..], &off[1..], "nothing else changed");
    // Under autocast (PyTorch's casts): f32-policy ops lift lower-precision
    // inputs to f32, lower-precision ops cast every floating input to the
    // autocast dtype, promote ops promote the autocast dtype with each
    // input (f16 with bf16 is f32).
    let _g = autocast::autocast(ty, true, Some(AutocastDtype::Bf16)).expect("autocast");
    let (halves, bf16s) = ([AutocastDtype::F16], [AutocastDtype::Bf16]);
    let cast = |op: &str, inputs: &[AutocastDtype]| autocast::cast_dtype(ty, op, inputs);
    assert_eq!(cast("softmax", &halves), Some(AutocastDtype::F32));
    assert_eq!(cast("matmul", &halves), Some(AutocastDtype::Bf16));
    assert_eq!(cast("matmul", &f32s), Some(AutocastDtype::Bf16));
    assert_eq!(cast("cat", &bf16s), Some(AutocastDtype::Bf16));
    assert_eq!(cast("cat", &halves), Some(AutocastDtype::F32));
    assert_eq!(cast("cat", &f32s), Some(AutocastDtype::F32));
    assert_eq!(cast("relu", &halves), Some(AutocastDtype::F16));
    assert_eq!(autocast::cast_dtype(ty, "matmul", &[]), None);
}

#[test]
fn autocast_guards_nest_and_refuse_unsupported_dtypes() {
    let ty = DeviceType::Cpu;
    {
        let _a = autocast::autocast(ty, true, None).expect("outer");
        {
            let _b = autocast::autocast(ty, true, Some(AutocastDtype::F16)).expect("inner");
            assert_eq!(autocast::get_autocast_dtype(ty), AutocastDtype::F16);
            let _c = autocast::autocast(ty, false, None).expect("off");
            assert!(!autocast::is_autocast_enabled(ty));
        }
        assert!(autocast::is_autocast_enabled(ty));
        assert_eq!(autocast::get_autocast_dtype(ty), AutocastDtype::Bf16);
        let err = autocast::autocast(ty, true, Some(AutocastDtype::F32)).expect_err("f32");
        assert!(
            err.to_string()
                .contains("supports bfloat16, float16, found float32"),
            "{err}"
        );
        assert!(
            autocast::is_autocast_enabled(ty),
            "a refused guard changed nothing"
        );
    }
    assert!(!autocast::is_autocast_enabled(ty));
}

#[test]
fn autocast_policy_registry() {
    assert_eq!(
        autocast::op_policy(DeviceType::Cpu, "matmul"),
        CastPolicy::LowerPrecision
    );
    assert_eq!(
        autocast::op_policy(DeviceType::Cpu, "sum"),
        CastPolicy::Fp32
    );
    assert_eq!(
        autocast::op_policy(DeviceType::Cpu, "my_op"),
        CastPolicy::Unchanged
    );
    autocast::register_op_policy(None, "my_gemm", CastPolicy::LowerPrecision).expect("common");
    autocast::register_op_policy(Some(DeviceType::Wgpu), "my_gemm", CastPolicy::Fp32)
        .expect("wgpu");
    assert_eq!(
        autocast::op_policy(DeviceType::Cpu, "my_gemm"),
        CastPolicy::LowerPrecision
    );
    assert_eq!(
        autocast::op_policy(DeviceType::Wgpu, "my_gemm"),
        CastPolicy::Fp32
    );
    let err = autocast::register_op_policy(None, "", CastPolicy::Fp32).expect_err("empty");
    assert!(
        err.to_string().starts_with("invalid operator name"),
        "{err}"
    );
    let err = autocast::register_amp_supported_dtypes(DeviceType::Cuda, &[AutocastDtype::F16])
        .expect_err("cuda");
    assert!(err.to_string().contains("only the PrivateUse1"), "{err}");
}

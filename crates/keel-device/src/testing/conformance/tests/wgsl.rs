//! The WGSL feature corpus: one small kernel per feature a compute kernel
//! uses, each made with [`Kernel::from_wgsl`] and run unchanged on the
//! device under test, its output checked against values computed here by
//! WGSL's rules. Vulkan and wgpu compile the WGSL themselves; CUDA runs
//! the PTX generated from it and host backends run it on host threads, so
//! the corpus holds the generated ends to the same results.

use super::*;

/// One corpus kernel: its source, its buffers' initial words, its
/// parameter words, its grid, and the check of its buffers afterwards.
struct Case {
    name: &'static str,
    wgsl: &'static str,
    buffers: Vec<Vec<u32>>,
    params: Vec<u32>,
    grid: [u32; 3],
    /// What the device must offer.
    needs: Option<Need>,
    /// Devices whose compiler is known not to keep a WGSL rule the case
    /// checks, with why.
    known_gap: fn(Device) -> Option<&'static str>,
    check: fn(&[Vec<u32>]) -> Result<(), String>,
}

fn f(v: f32) -> u32 {
    v.to_bits()
}

fn expect_eq(what: &str, got: &[u32], want: &[u32]) -> Result<(), String> {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if got.len() >= want.len() => Ok(()),
        None => Err(format!(
            "{what}: {} words, expected {}",
            got.len(),
            want.len()
        )),
        Some(i) => Err(format!(
            "{what}[{i}]: found {:#010x} ({}), expected {:#010x} ({})",
            got[i],
            f32::from_bits(got[i]),
            want[i],
            f32::from_bits(want[i])
        )),
    }
}

const SCALARS: &str = include_str!("../wgsl/scalars.wgsl");

fn check_scalars(b: &[Vec<u32>]) -> Result<(), String> {
    let a = 1.5f32;
    let want = [
        f(-0.5 * 2.0 + 1.0),
        f(a * 2.0 + 1.0),
        f(a + 2.0 + -0.5),
        (5i32 * -7) as u32,
        (-7i32 / 2) as u32,
        (-7i32 % 2) as u32,
        1000 >> 3,
        1,
        500,
        f(-7.0),
        f(1.0 + 30.0),
        f(2.0 + 40.0),
    ];
    expect_eq("out", &b[0], &want)
}

const LAYOUT: &str = include_str!("../wgsl/struct_layout.wgsl");

/// `Item` is 32 bytes: `pos` at 0, `w` at 12, `id` at 16, `pair` at 24.
fn layout_items() -> Vec<u32> {
    let mut v = Vec::new();
    for i in 0..6u32 {
        let fi = i as f32;
        v.extend([f(fi), f(fi * 2.0), f(9.0), f(0.5), 100 * i, 0, 7, i]);
    }
    v
}

fn check_layout(b: &[Vec<u32>]) -> Result<(), String> {
    let want: Vec<u32> = (0..6u32)
        .map(|i| f(i as f32 * 2.0 + 0.5) + 100 * i + i)
        .collect();
    expect_eq("out", &b[1], &want)
}

const CONTROL: &str = include_str!("../wgsl/control.wgsl");

fn check_control(b: &[Vec<u32>]) -> Result<(), String> {
    let want: Vec<u32> = (0..48u32)
        .map(|i| {
            let mut acc = 0u32;
            let mut k = 0;
            loop {
                if k == i {
                    break;
                }
                // `continue` skips to the continuing block, which adds
                // one more.
                if k % 3 == 0 {
                    k += 1;
                } else {
                    acc += k;
                }
                k += 1;
                if k > 20 {
                    break;
                }
            }
            acc *= 8;
            acc += 1000 * i.min(5);
            let c = match i % 5 {
                0 => 10,
                1 | 2 => 20,
                _ if i > 40 => 99,
                _ => 30,
            };
            acc * 1000 + c
        })
        .collect();
    expect_eq("out", &b[0], &want)
}

const BUILTINS: &str = include_str!("../wgsl/builtins.wgsl");

fn check_builtins(b: &[Vec<u32>]) -> Result<(), String> {
    let (gx, gy) = (3u32, 2u32);
    let mut want = vec![0u32; (gx * 4 * gy * 2 * 2) as usize];
    for y in 0..gy * 2 {
        for x in 0..gx * 4 {
            let (lx, ly) = (x % 4, y % 2);
            let (wx, wy) = (x / 4, y / 2);
            let at = ((y * gx * 4 + x) * 2) as usize;
            want[at] = lx + 4 * ly + 16 * (wx + 16 * wy);
            want[at + 1] = lx + 16 * ly + 256 * gy;
        }
    }
    expect_eq("out", &b[0], &want)
}

const SHARED: &str = include_str!("../wgsl/shared_sum.wgsl");

fn check_shared(b: &[Vec<u32>]) -> Result<(), String> {
    let want: Vec<u32> = b[0].chunks(64).map(|c| c.iter().sum()).collect();
    expect_eq("sums", &b[1], &want)
}

const ATOMICS: &str = include_str!("../wgsl/atomics.wgsl");

fn check_atomics(b: &[Vec<u32>]) -> Result<(), String> {
    let n = 64 * 10;
    expect_eq("counters", &b[0], &[n, n - 1, u32::MAX, 2 * 64 * 10])?;
    expect_eq("signed", &b[1], &[(-(n as i32 - 1)) as u32, 7])
}

const SEMANTICS: &str = include_str!("../wgsl/semantics.wgsl");

fn check_semantics(b: &[Vec<u32>]) -> Result<(), String> {
    let want = [
        7,
        0,
        0x8000_0000,
        0,
        (-9i32) as u32,
        1 << (33 % 32),
        0x8000_0000 >> (33 % 32),
        // WGSL clamps to the f32 range inside the integer's: 2^31 - 128.
        0x7fff_ff80,
        0,
        i32::MIN as u32,
        3_000_000_000,
        f(1.5),
    ];
    expect_eq("out", &b[0], &want)?;
    // The out-of-bounds store may land in `small` (WGSL lets it write any
    // element of the same buffer; wgpu's binding may reach past its 16
    // bytes into the rest of the buffer's own block) or nowhere; a read
    // gives zero or a value of `small`, never anything from another buffer.
    let read = b[0][12];
    if read != 0 && read != 0xdead && !b[1].contains(&read) {
        return Err(format!("out-of-bounds read gave {read:#x}"));
    }
    if b[0][13..].iter().any(|&w| w != 0) {
        return Err("an out-of-bounds store reached another buffer".to_owned());
    }
    Ok(())
}

const MATH: &str = include_str!("../wgsl/math.wgsl");

/// The math kernel's inputs (`v`); word 19 is the bit pattern `0xabcd`.
fn math_inputs() -> Vec<u32> {
    let v = [
        0.75f32, 2.0, 3.0, -1.5, 1.25, 2.5, 3.25, -2.75, 5.0, 0.5, 1.0, -2.0, 0.0, 4.0, 6.0, -0.5,
        0.25, 0.6, 7.5,
    ];
    let mut w: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
    w.push(0xabcd);
    w
}

fn check_math(b: &[Vec<u32>]) -> Result<(), String> {
    let want = [
        2f32.sqrt(),
        0.75f32.exp(),
        3f32.ln(),
        0.75f32.sin(),
        0.75f32.cos(),
        2f32.sqrt(),
        1f32.atan2(-2.0),
        0.75f32.tanh(),
        -2.0 + 2.0 + 2.0 + 0.25 - 2.0,
        3.5,
        7.0 + 1.5 + 1.0,
        7.0 + 0.5,
        1.5,
    ];
    for (i, (&g, &w)) in b[0].iter().zip(&want).enumerate() {
        let g = f32::from_bits(g);
        // WGSL's accuracy for the transcendental functions is a few ulp
        // or an absolute bound near zero.
        if (g - w).abs() > 1e-5 * w.abs().max(1.0) {
            return Err(format!("out[{i}]: found {g}, expected {w}"));
        }
    }
    expect_eq(
        "bits",
        &b[1],
        &[
            10,
            0x8000_0000,
            3,
            1,
            0xbc,
            0xffff_fffc,
            0xffff_00ff,
            31 + 3,
            u32::MAX,
        ],
    )
}

const SUBGROUPS: &str = include_str!("../wgsl/subgroups.wgsl");

fn check_subgroups(b: &[Vec<u32>]) -> Result<(), String> {
    expect_eq("ok", &b[0], &[1; 64])
}

const F16: &str = include_str!("../wgsl/halves.wgsl");

fn check_f16(b: &[Vec<u32>]) -> Result<(), String> {
    let want: Vec<u32> = (0..16)
        .map(|i| {
            let x = half::f16::from_f32(i as f32 * 0.3);
            let h = half::f16::from_f32(x.to_f32() * 2.0);
            let h = half::f16::from_f32(h.to_f32() + 0.5);
            f(h.to_f32())
        })
        .collect();
    expect_eq("out", &b[1], &want)
}

fn f16_words() -> Vec<u32> {
    let h: Vec<u16> = (0..16)
        .map(|i| half::f16::from_f32(i as f32 * 0.3).to_bits())
        .collect();
    h.chunks(2)
        .map(|p| u32::from(p[0]) | u32::from(p[1]) << 16)
        .collect()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "scalars",
            wgsl: SCALARS,
            buffers: vec![vec![0; 12]],
            params: vec![f(1.5), 5, 1000],
            grid: [1, 1, 1],
            needs: None,
            known_gap: |_| None,
            check: check_scalars,
        },
        Case {
            name: "struct_layout",
            wgsl: LAYOUT,
            buffers: vec![layout_items(), vec![0; 6]],
            params: vec![],
            grid: [2, 1, 1],
            needs: None,
            known_gap: |_| None,
            check: check_layout,
        },
        Case {
            name: "control",
            wgsl: CONTROL,
            buffers: vec![vec![0; 48]],
            params: vec![],
            grid: [6, 1, 1],
            needs: None,
            known_gap: |_| None,
            check: check_control,
        },
        Case {
            name: "builtins",
            wgsl: BUILTINS,
            buffers: vec![vec![0; 96]],
            params: vec![],
            grid: [3, 2, 1],
            needs: None,
            known_gap: |_| None,
            check: check_builtins,
        },
        Case {
            name: "shared_sum",
            wgsl: SHARED,
            buffers: vec![(0..64 * 5).map(|i| i * 7 + 1).collect(), vec![0; 5]],
            params: vec![],
            grid: [5, 1, 1],
            needs: None,
            known_gap: |_| None,
            check: check_shared,
        },
        Case {
            name: "atomics",
            wgsl: ATOMICS,
            buffers: vec![vec![0; 4], vec![0, 0]],
            params: vec![],
            grid: [10, 1, 1],
            needs: None,
            known_gap: |_| None,
            check: check_atomics,
        },
        Case {
            name: "semantics",
            wgsl: SEMANTICS,
            buffers: vec![vec![0; 16], vec![0; 4]],
            params: vec![0, f(3e9), u32::MAX, 33],
            grid: [1, 1, 1],
            needs: None,
            known_gap: gl_integer_division,
            check: check_semantics,
        },
        Case {
            name: "math",
            wgsl: MATH,
            buffers: vec![vec![0; 13], vec![0; 9], math_inputs()],
            params: vec![],
            grid: [1, 1, 1],
            needs: None,
            known_gap: |_| None,
            check: check_math,
        },
        Case {
            name: "subgroups",
            wgsl: SUBGROUPS,
            buffers: vec![vec![0; 64]],
            params: vec![],
            grid: [1, 1, 1],
            needs: Some(Need::Subgroups),
            known_gap: |_| None,
            check: check_subgroups,
        },
        Case {
            name: "halves",
            wgsl: F16,
            buffers: vec![f16_words(), vec![0; 16]],
            params: vec![],
            grid: [2, 1, 1],
            needs: Some(Need::F16),
            known_gap: |_| None,
            check: check_f16,
        },
    ]
}

/// wgpu's GL adapter: naga's GLSL output divides integers as GLSL does,
/// so `x / 0` is not WGSL's `x` there.
fn gl_integer_division(d: Device) -> Option<&'static str> {
    let props = crate::properties(d).ok()?;
    let gl = props
        .extra
        .iter()
        .any(|(k, v)| k == "native API" && v == "GL");
    gl.then_some("naga's GLSL backend does not give WGSL's integer division by zero")
}

#[derive(Clone, Copy, Debug)]
enum Need {
    /// Subgroup arithmetic, ballots, votes and shuffles.
    Subgroups,
    /// `enable f16;` with f16 in storage buffers.
    F16,
}

/// Whether `d` offers `need`: the generated ends (CUDA's PTX, host
/// backends) always do; Vulkan and wgpu where the device reports it.
fn offers(d: Device, need: Need) -> bool {
    let generated = !matches!(d.device_type(), DeviceType::Vulkan | DeviceType::Wgpu);
    if generated {
        return true;
    }
    let Ok(props) = crate::properties(d) else {
        return false;
    };
    let get = |k: &str| {
        props
            .extra
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    match need {
        Need::Subgroups => {
            let ops = get("subgroup operations");
            ["arithmetic", "ballot", "shuffle", "vote"]
                .iter()
                .all(|o| ops.contains(o))
        }
        Need::F16 => get("f16 storage").starts_with("native"),
    }
}

/// Every corpus kernel, made with [`Kernel::from_wgsl`], gives WGSL's
/// results on the device; kernels needing a capability the device does
/// not report are skipped with a printed reason.
pub fn wgsl_feature_corpus_runs(d: Device, _cfg: &Config) {
    let s = pool(d);
    let mut failures = Vec::new();
    for case in cases() {
        if let Some(need) = case.needs
            && !offers(d, need)
        {
            println!(
                "{d}: corpus kernel `{}` skipped: the device does not offer {need:?}",
                case.name
            );
            continue;
        }
        if let Some(why) = (case.known_gap)(d) {
            println!("{d}: corpus kernel `{}` skipped: {why}", case.name);
            continue;
        }
        let kernel = Kernel::from_wgsl(case.name, case.wgsl).expect("the corpus compiles");
        let bufs: Vec<Buffer> = case
            .buffers
            .iter()
            .map(|words| Buffer::from_slice(&s, words).expect("buffer"))
            .collect();
        let refs: Vec<&Buffer> = bufs.iter().collect();
        let params: Vec<u8> = case.params.iter().flat_map(|w| w.to_le_bytes()).collect();
        s.launch(&kernel, case.grid, &refs, &params)
            .unwrap_or_else(|e| panic!("{d}: corpus kernel `{}`: {e}", case.name));
        let got: Vec<Vec<u32>> = bufs
            .iter()
            .map(|b| b.read_as::<u32>(&s).expect("read"))
            .collect();
        if let Err(e) = (case.check)(&got) {
            failures.push(format!("{}: {e}", case.name));
        }
    }
    assert!(failures.is_empty(), "{d}: {}", failures.join("\n"));
}

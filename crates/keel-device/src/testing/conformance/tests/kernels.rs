//! Kernel results and kernel errors.

use super::*;

/// The vector add kernel is exact at sizes around its workgroup size.
pub fn vector_add_is_correct(d: Device, _cfg: &Config) {
    let s = pool(d);
    for n in [1usize, 1000, 1_000_003] {
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| 0.25 * i as f32 - 3.0).collect();
        let (da, db) = (
            Buffer::from_slice(&s, &a).expect("a"),
            Buffer::from_slice(&s, &b).expect("b"),
        );
        let dc = Buffer::new(d, 4 * n).expect("c");
        s.launch(
            &VECTOR_ADD,
            VECTOR_ADD.grid_for(n as u64),
            &[&da, &db, &dc],
            &(n as u32).to_le_bytes(),
        )
        .expect("launch");
        let c = dc.read_as::<f32>(&s).expect("read");
        let wrong = (0..n).find(|&i| c[i] != a[i] + b[i]);
        assert_eq!(wrong, None, "n = {n}: first wrong element");
    }
}

/// Kernel errors say what is wrong, when the kernel source allows it
/// (see [`KernelSource`]): a missing source, a grid beyond the device's
/// maximum, a broken source; host kernels' failures (an `Err`, a binding
/// too short, a panic) are reported once by the next `synchronize`. The
/// stream works afterwards. Exclusive: it leaves errors on pool streams.
pub fn kernel_errors_are_clear(d: Device, cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let b = Buffer::new(d, 64).expect("alloc");
    let without_own_source = Kernel {
        wgsl: None,
        ptx: None,
        cpu: None,
        ..SAXPY
    };
    let c = Buffer::new(d, 64).expect("alloc");
    let e = s
        .launch(
            &without_own_source,
            [1, 1, 1],
            &[&b, &c],
            &saxpy_params(1, 1.0),
        )
        .expect_err("no source for this backend");
    assert_eq!(
        e.to_string(),
        format!(
            "kernel 'saxpy': has {}, which the {} backend runs",
            cfg.kernel_source.missing(),
            ty.backend_name()
        )
    );
    let props = crate::properties(d).expect("properties");
    if let Some(max) = props.max_workgroup_count
        && max[0] < u32::MAX
    {
        let e = s
            .launch(&SPIN, [max[0] + 1, 1, 1], &[&b], &spin_params(4, 3))
            .expect_err("grid too big");
        assert!(
            e.to_string().contains("exceeds the device's maximum"),
            "{e}"
        );
    }
    // Every backend compiles WGSL (Vulkan and wgpu themselves, CUDA and
    // host backends through keel-wgsl): a broken source is an error at
    // launch that names the line.
    let broken = Kernel {
        name: "broken",
        wgsl: Some("@compute @workgroup_size(1) fn broken() {\n let x: u32 = 1.5; }"),
        ptx: None,
        cpu: None,
        ..SPIN
    };
    let e = s
        .launch(&broken, [1, 1, 1], &[&b], &[])
        .expect_err("bad WGSL");
    assert!(e.to_string().starts_with("kernel 'broken': WGSL"), "{e}");
    match cfg.kernel_source {
        KernelSource::Wgsl => {}
        KernelSource::Ptx => {
            let broken = Kernel {
                name: "broken",
                ptx: Some(
                    ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry broken(.param .u64 p) { bogus; }",
                ),
                ..SPIN
            };
            let e = s
                .launch(&broken, [1, 1, 1], &[&b], &spin_params(4, 3))
                .expect_err("bad PTX");
            assert!(
                e.to_string()
                    .starts_with("kernel 'broken': PTX failed to load"),
                "{e}"
            );
        }
        KernelSource::Host => host_kernel_failures(d, &s, &b),
    }
    // The stream still works after refused or failed launches.
    s.launch(&SPIN, [1, 1, 1], &[&b], &spin_params(4, 3))
        .expect("spin");
    let got = b.read_as::<f32>(&s).expect("read");
    assert!(close(got[3], spin_reference(3, 3)), "{}", got[3]);
    s.synchronize().expect("no error left");
}

fn host_kernel_failures(d: Device, s: &Stream, b: &Buffer) {
    let broken = Kernel {
        name: "broken",
        cpu: Some(|_| Err("broken on purpose".to_owned())),
        wgsl: None,
        ptx: None,
        ..SPIN
    };
    s.launch(&broken, [1, 1, 1], &[b], &[])
        .expect("enqueued; fails when it runs");
    let e = s.synchronize().expect_err("the kernel failed");
    assert_eq!(e.to_string(), "kernel 'broken': broken on purpose");
    assert_eq!(s.synchronize(), Ok(()), "reported once");
    // A WGSL kernel over bindings shorter than its `n` follows WGSL's
    // bounds rules on the host as on a GPU: reads past the end give zero,
    // writes past the end are dropped, and nothing fails.
    let short = Buffer::from_slice(s, &[1.0f32, 2.0]).expect("alloc");
    let other = Buffer::from_slice(s, &[10.0f32, 20.0]).expect("alloc");
    s.launch(
        &SAXPY,
        SAXPY.grid_for(100),
        &[&short, &other],
        &saxpy_params(100, 3.0),
    )
    .expect("launch");
    s.synchronize()
        .expect("out-of-bounds accesses are not errors");
    assert_eq!(other.read_as::<f32>(s).expect("read"), [13.0, 26.0]);
    s.launch(&PANICS, [1, 1, 1], &[], &[]).expect("enqueued");
    let e = crate::synchronize(d).expect_err("the panic is reported");
    assert!(e.to_string().contains("kernel bug"), "{e}");
    // Host kernels get distinct buffers, so binding one twice is refused.
    let e = s
        .launch(&VECTOR_ADD, [1, 1, 1], &[b, b, b], &4u32.to_le_bytes())
        .expect_err("aliasing");
    assert!(
        e.to_string()
            .contains("same buffer is bound at bindings 0 and 1"),
        "{e}"
    );
}

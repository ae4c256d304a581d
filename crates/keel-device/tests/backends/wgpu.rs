//! wgpu-specific behaviour beyond the conformance suite
//! (`tests/conformance_wgpu.rs`): adapter order and properties, and
//! selection by environment (`WGPU_BACKEND`, `WGPU_ADAPTER_NAME`,
//! `WGPU_NOOP_BACKEND`, in child processes).

use keel_device::testing::{VectorAdds, child, conformance};
use keel_device::{Buffer, Device, DeviceType};

const TY: DeviceType = DeviceType::Wgpu;

fn api(d: Device) -> String {
    keel_device::properties(d)
        .expect("properties")
        .extra
        .into_iter()
        .find(|(k, _)| k == "native API")
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Runs the ignored test `probe` of this binary in a child process with
/// `env` set; asserts that it passed and printed "probe ok" (`context`
/// heads the message otherwise). Returns its output.
fn run_probe(probe: &str, env: &[(&str, &str)], context: &str) -> String {
    let stdout = child::probe(module_path!(), probe, env);
    assert!(stdout.contains("probe ok"), "{context}{stdout}");
    stdout
}

#[test]
fn adapters_are_in_the_documented_order() {
    let Some(_) = conformance::device(TY) else {
        return;
    };
    let rank = |a: &str| {
        ["Vulkan", "Metal", "DX12", "GL"]
            .iter()
            .position(|x| *x == a)
    };
    let keys: Vec<_> = conformance::usable_devices(TY)
        .into_iter()
        .map(|d| {
            let p = keel_device::properties(d).expect("properties");
            (rank(&api(d)), p.kind, p.name)
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "native API, then kind, then name");
    let p = keel_device::properties(Device::new(TY, 0).expect("wgpu:0")).expect("properties");
    assert!(
        p.native_backend.starts_with("wgpu/"),
        "{}",
        p.native_backend
    );
    assert!(p.max_workgroup_size.is_some() && p.max_workgroup_count.is_some());
}

/// Runs in a child process with the environment the parent chose.
#[test]
#[ignore = "run by `environment_selects_adapters` in child processes"]
fn probe_wgpu_environment() {
    let expect = std::env::var("KEEL_PROBE_EXPECT").expect("set by the parent");
    match expect.as_str() {
        "gl-only" => {
            let apis: Vec<String> = keel_device::devices(TY).into_iter().map(api).collect();
            assert!(!apis.is_empty(), "the GL adapter is found");
            assert!(apis.iter().all(|a| a == "GL"), "{apis:?}");
        }
        "none" => {
            assert_eq!(keel_device::device_count(TY), 0);
            let e = keel_device::availability(TY).expect_err("no adapter");
            assert!(
                e.to_string()
                    .starts_with("wgpu unavailable: no wgpu adapter found"),
                "{e}"
            );
            let e = Buffer::new(Device::new(TY, 0).expect("wgpu:0"), 4).expect_err("alloc");
            assert!(e.to_string().starts_with("wgpu unavailable"), "{e}");
            assert!(keel_device::is_available(DeviceType::Cpu));
        }
        "noop" => {
            let devices = keel_device::devices(TY);
            let apis: Vec<String> = devices.iter().map(|&d| api(d)).collect();
            assert_eq!(apis, ["noop"], "only wgpu's noop adapter");
            // It runs no kernels: the test pickers never choose it.
            assert_eq!(conformance::usable_devices(TY), Vec::<Device>::new());
            assert_eq!(conformance::device(TY), None);
            let d = devices[0];
            let s = keel_device::get_stream_from_pool(d, false).expect("stream");
            // Copies run on it: data round-trips.
            let data: Vec<u32> = (0..1024).collect();
            let a = Buffer::from_slice(&s, &data).expect("upload");
            let b = Buffer::from_slice(&s, &data).expect("upload");
            assert_eq!(b.read_as::<u32>(&s).expect("read"), data);
            // Launches complete at once, as seen by queries alone and by
            // a profiling session, which gets a device span for each.
            let out = Buffer::new(d, 4096).expect("out");
            let k = keel_device::kernels::VECTOR_ADD;
            let session = keel_device::profiler::start().expect("session");
            for _ in 0..1000 {
                s.launch(
                    &k,
                    k.grid_for(1024),
                    &[&a, &b, &out],
                    &1024u32.to_le_bytes(),
                )
                .expect("launch");
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !s.query().expect("query") {
                assert!(
                    std::time::Instant::now() < deadline,
                    "launches never completed"
                );
                std::thread::yield_now();
            }
            let trace = session.stop();
            let kernels = trace
                .spans
                .iter()
                .filter(|sp| {
                    sp.kind == keel_device::profiler::SpanKind::Kernel
                        && matches!(
                            trace.lanes[sp.lane as usize].kind,
                            keel_device::profiler::LaneKind::Stream { .. }
                        )
                })
                .count();
            assert_eq!(kernels, 1000, "one device span per launch");
        }
        other => panic!("unknown expectation {other}"),
    }
    println!("probe ok");
}

#[test]
fn environment_selects_adapters() {
    if conformance::device(TY).is_none() {
        return;
    }
    // The GL-only case needs a GL adapter that opens.
    let gl = conformance::wgpu_adapter("GL").is_some();
    for (var, value, expect) in [
        ("WGPU_BACKEND", "gl", "gl-only"),
        ("WGPU_ADAPTER_NAME", "no-such-adapter-keel", "none"),
        ("WGPU_NOOP_BACKEND", "1", "noop"),
    ] {
        if expect == "gl-only" && !gl {
            continue;
        }
        let mut env = vec![(var, value), ("KEEL_PROBE_EXPECT", expect)];
        if expect == "noop" {
            // The noop adapter alone (wgpu lists it only where enabled).
            env.push(("WGPU_BACKEND", "noop"));
        }
        run_probe("probe_wgpu_environment", &env, &format!("{var}={value}: "));
    }
}

/// Launches whose bind groups cannot be reused (Note [wgpu parameter
/// blocks] in `src/backend/wgpu/kernel.rs`): with `backend:direct` every
/// buffer is a wgpu buffer of its own, destroyed when freed, and there are
/// more of them than a pipeline keeps groups for. Each launch must bind
/// its own buffers and its own parameters.
#[test]
fn launches_bind_their_own_buffers_and_parameters() {
    if conformance::device(TY).is_none() {
        return;
    }
    run_probe(
        "probe_fresh_buffers_each_launch",
        &[("KEEL_ALLOC_CONF", "backend:direct")],
        "",
    );
}

#[test]
#[ignore = "run by `launches_bind_their_own_buffers_and_parameters` in a child process"]
fn probe_fresh_buffers_each_launch() {
    let k = keel_device::kernels::SAXPY;
    for d in conformance::usable_devices(TY) {
        let s = keel_device::default_stream(d).expect("stream");
        // Some buffers stay alive a while, so live and freed ones mix.
        let mut kept = std::collections::VecDeque::new();
        for i in 0..300u32 {
            let n = 1 + (i * 37) % 700;
            let x: Vec<f32> = (0..n).map(|j| j as f32).collect();
            let y = vec![i as f32; n as usize];
            let bx = Buffer::from_slice(&s, &x).expect("x");
            let by = Buffer::from_slice(&s, &y).expect("y");
            let alpha = 0.5 + i as f32;
            let params = [n.to_le_bytes(), alpha.to_le_bytes()].concat();
            s.launch(&k, k.grid_for(u64::from(n)), &[&bx, &by], &params)
                .expect("saxpy");
            let got = by.read_as::<f32>(&s).expect("read");
            for (j, g) in got.iter().enumerate() {
                let want = alpha * j as f32 + i as f32;
                assert!(
                    (g - want).abs() <= want.abs() * 1e-6,
                    "{d}, launch {i}, y[{j}] = {g}, expected {want}"
                );
            }
            if i % 7 == 0 {
                kept.push_back((bx, by));
                if kept.len() > 5 {
                    kept.pop_front();
                }
            }
        }
    }
    println!("probe ok");
}

/// A parameter block that immediate data cannot hold (an array) goes in a
/// uniform buffer of the launch's own (Note [wgpu parameter blocks]), on
/// every adapter; each launch reads its own parameters, and a block
/// shorter than the kernel declares reads zeros past its end, as immediate
/// data does.
#[test]
fn parameter_blocks_immediates_cannot_hold_go_in_a_uniform_buffer() {
    const WGSL: &str = "struct Params { n: u32, a: u32, b: u32, c: u32, v: array<vec4<u32>, 2> }\n\
        @group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
        @group(0) @binding(1) var<uniform> p: Params;\n\
        @compute @workgroup_size(64)\n\
        fn uniform_array(@builtin(global_invocation_id) g: vec3<u32>) {\n\
            if g.x < p.n { out[g.x] = p.v[1].z * 1000u + p.v[0].y + p.v[1].w + g.x; }\n\
        }";
    const K: keel_device::Kernel = keel_device::Kernel {
        name: "uniform_array",
        workgroup_size: [64, 1, 1],
        bindings: 1,
        wgsl: Some(WGSL),
        ptx: None,
        cpu: None,
        strict_float: false,
    };
    if conformance::device(TY).is_none() {
        return;
    }
    for d in conformance::usable_devices(TY) {
        let s = keel_device::default_stream(d).expect("stream");
        // Three full blocks, then one of 28 of its 48 bytes (rounded up to
        // 32, still short of the kernel's 48): v[1] reads as zeros.
        for round in 0..4u32 {
            let n = 100 + round;
            let out = Buffer::new(d, 4 * n as usize).expect("out");
            let full = [n, 0, 0, 0, 0, 7 + round, 0, 0, 0, 0, 5 * round, round];
            let words = if round < 3 { &full[..] } else { &full[..7] };
            let params: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            s.launch(&K, K.grid_for(u64::from(n)), &[&out], &params)
                .expect("launch");
            let got = out.read_as::<u32>(&s).expect("read");
            let v1 = if round < 3 {
                5 * round * 1000 + round
            } else {
                0
            };
            let want: Vec<u32> = (0..n).map(|i| v1 + 7 + round + i).collect();
            assert_eq!(got, want, "{d}, round {round}");
        }
    }
}

/// A profiled wgpu stream operation times itself: its own submission
/// writes its span's timestamps (the launch's compute pass, or the copy's
/// encoder), and the spans' times are read in batches. On both adapters:
///
/// - each of a few launches, synchronized, has its device span inside the
///   host interval around its launch and synchronize (within the
///   calibration's stated bound);
/// - many operations on one stream (more than the device's timestamp
///   slots hold at once, so slots are recycled, and many read batches):
///   every one has a device span, the stream's device spans do not
///   overlap, and the kernels' spans come in launch order.
///
/// One test for both adapters: a session records every thread.
#[test]
fn profiled_operations_time_themselves_in_order() {
    use keel_device::kernels::{SAXPY, SPIN};
    use keel_device::profiler::{LaneKind, SpanKind};

    for api_name in ["Vulkan", "GL"] {
        let Some(d) = conformance::wgpu_adapter(api_name) else {
            continue;
        };
        let s = keel_device::get_stream_from_pool(d, false).expect("stream");
        let n = 256u32;
        let out = Buffer::new(d, 4 * n as usize).expect("out");
        let x = Buffer::from_slice(&s, &vec![1.0f32; n as usize]).expect("x");
        let spin = |iters: u32| {
            s.launch(
                &SPIN,
                SPIN.grid_for(u64::from(n)),
                &[&out],
                &[n.to_le_bytes(), iters.to_le_bytes()].concat(),
            )
            .expect("spin");
        };
        let saxpy = || {
            s.launch(
                &SAXPY,
                SAXPY.grid_for(u64::from(n)),
                &[&x, &out],
                &[n.to_le_bytes(), 0.5f32.to_le_bytes()].concat(),
            )
            .expect("saxpy");
        };
        // Pipelines compiled outside the session.
        spin(1);
        saxpy();
        s.synchronize().expect("sync");

        let _one_session = crate::session();
        let session = keel_device::profiler::start().expect("session");
        let mut intervals = Vec::new();
        for _ in 0..3 {
            let before = session.now_ns();
            spin(5_000);
            s.synchronize().expect("sync");
            intervals.push((before, session.now_ns()));
        }
        // 2,600 launches (more than the 2,048 slot pairs), a write every
        // 100 and an untimed event every 250 (a span with no submission
        // of its own).
        const LAUNCHES: usize = 2600;
        let mut kernels = Vec::new();
        let mut event = keel_device::Event::new(TY);
        for i in 0..LAUNCHES {
            if i % 3 == 0 {
                spin(1);
                kernels.push("spin");
            } else {
                saxpy();
                kernels.push("saxpy");
            }
            if i % 100 == 0 {
                x.write(&s, 0, &1.0f32.to_le_bytes()).expect("write");
            }
            if i % 250 == 0 {
                event.record(&s).expect("record");
            }
        }
        s.synchronize().expect("sync");
        let trace = session.stop();

        let dev = trace
            .devices
            .iter()
            .position(|x| x.device == d.to_string())
            .expect("device in the trace") as u32;
        let lane = trace
            .lanes
            .iter()
            .position(|l| {
                l.kind
                    == LaneKind::Stream {
                        device: dev,
                        stream: s.id(),
                        thread: 0,
                    }
            })
            .expect("the stream's lane") as u32;
        let mut spans: Vec<_> = trace.spans.iter().filter(|sp| sp.lane == lane).collect();
        spans.sort_by_key(|sp| (sp.start_ns, sp.end_ns()));
        let bound = trace
            .calibrations
            .iter()
            .find(|c| c.device == dev)
            .expect("calibrated")
            .error_bound_ns;

        let timed: Vec<_> = spans
            .iter()
            .filter(|sp| sp.kind == SpanKind::Kernel)
            .collect();
        assert_eq!(
            timed.len(),
            3 + LAUNCHES,
            "{api_name}: one device span per launch"
        );
        for (i, (before, after)) in intervals.iter().enumerate() {
            let sp = timed[i];
            assert!(
                sp.name == "spin" && sp.start_ns + bound >= *before && sp.end_ns() <= after + bound,
                "{api_name}: launch {i}: device span {} {}..{} outside host interval \
                 {before}..{after} (+/- {bound} ns)",
                sp.name,
                sp.start_ns,
                sp.end_ns()
            );
            assert!(sp.dur_ns > 0, "{api_name}: the spin kernel took time");
        }
        let names: Vec<&str> = timed[3..].iter().map(|sp| &*sp.name).collect();
        assert!(
            names == kernels,
            "{api_name}: kernel spans out of launch order"
        );
        assert!(
            spans.iter().any(|sp| sp.kind == SpanKind::Copy),
            "{api_name}: the writes' device spans"
        );
        for w in spans.windows(2) {
            assert!(
                w[1].start_ns >= w[0].end_ns(),
                "{api_name}: device spans overlap on one stream: {} {}..{} and {} {}..{}",
                w[0].name,
                w[0].start_ns,
                w[0].end_ns(),
                w[1].name,
                w[1].start_ns,
                w[1].end_ns()
            );
        }
        assert_eq!(trace.dropped, 0);
    }
}

/// Runs the ignored test `probe` in a child process where this machine
/// has a wgpu Vulkan adapter (`what` names it in the failure).
fn run_probe_on_vulkan_adapter(probe: &str, what: &str) {
    if conformance::wgpu_adapter("Vulkan").is_some() {
        run_probe(probe, &[], &format!("the probe {what} failed:\n"));
    }
}

/// A wgpu device holds more timed events than it has timestamp slots
/// (4,096, handed out in pairs): once every pair is held, the values of
/// those whose work completed are read and moved out of the slots, which
/// are reused. The events still give their times, can be recorded again,
/// and a profiling session meanwhile times every operation (nothing is
/// counted as dropped). In a child process (`probe_more_timed_events_than_slots`):
/// it holds every slot of the device for a while.
#[test]
fn a_device_holds_more_timed_events_than_timestamp_slots() {
    run_probe_on_vulkan_adapter(
        "probe_more_timed_events_than_slots",
        "holding more timed events than slots",
    );
}

#[test]
#[ignore = "run in a child process by a_device_holds_more_timed_events_than_timestamp_slots"]
fn probe_more_timed_events_than_slots() {
    let d = conformance::wgpu_adapter("Vulkan").expect("a wgpu Vulkan adapter");
    // Two slots each: 6,000 of the device's 4,096 timestamp slots.
    conformance::timed_events_past_the_slots(d, 3_000);
    println!("probe ok");
}

/// Threads recording, recording again and dropping timed events on their
/// own streams, more than the device's slots hold, with a session
/// recording: every event keeps its own time (a slot being written again
/// is never moved out from under its event), and no span is dropped. In a
/// child process (`probe_timed_events_from_threads_past_the_slots`).
#[test]
fn timed_events_from_threads_past_the_slots_keep_their_times() {
    run_probe_on_vulkan_adapter(
        "probe_timed_events_from_threads_past_the_slots",
        "recording timed events from threads",
    );
}

#[test]
#[ignore = "run in a child process by timed_events_from_threads_past_the_slots_keep_their_times"]
fn probe_timed_events_from_threads_past_the_slots() {
    let d = conformance::wgpu_adapter("Vulkan").expect("a wgpu Vulkan adapter");
    let session = keel_device::profiler::start().expect("session");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let s = keel_device::get_stream_from_pool(d, false).expect("stream");
                let adds = VectorAdds::on(s);
                // Up to 1,000 live events per thread: 4,000 in all, for
                // 2,048 slot pairs.
                let mut held: Vec<keel_device::Event> = Vec::new();
                for i in 0..1500usize {
                    if i % 7 == 0 {
                        adds.launch();
                    }
                    let mut e = keel_device::Event::timed(TY);
                    e.record(&s).expect("record");
                    if i % 2 == 0 && !held.is_empty() {
                        let k = (i * 31) % held.len();
                        held[k].record(&s).expect("record again");
                    }
                    held.push(e);
                    if held.len() > 1000 {
                        held.drain(..100);
                    }
                }
                s.synchronize().expect("sync");
                for w in held.windows(2) {
                    w[0].elapsed_time(&w[1])
                        .expect("both events keep their times");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a recording thread");
    }
    let trace = session.stop();
    assert_eq!(trace.dropped, 0, "nothing dropped");
    println!("probe ok");
}

#[test]
#[ignore = "run in a child process by starting_without_a_display_session_prints_no_noise"]
fn probe_start_without_a_display_session() {
    let found = keel_device::devices(TY).len();
    println!("probe ok: {found} adapters");
}

/// Starting wgpu on a machine with no display session (an empty
/// `XDG_RUNTIME_DIR`, which libwayland calls invalid as it does a missing
/// one) writes nothing to stderr about it: with Mesa's device-select
/// layer libwayland complains once per instance. The child's other
/// stderr lines still arrive (the test harness's own).
#[test]
fn starting_without_a_display_session_prints_no_noise() {
    let full = child::test_name(module_path!(), "probe_start_without_a_display_session");
    let out = child::run(
        &[&full, "--exact", "--ignored", "--nocapture"],
        &[("XDG_RUNTIME_DIR", "")],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("probe ok"),
        "{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "{stderr}");
}

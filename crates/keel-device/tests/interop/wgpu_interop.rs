//! wgpu: a program's own device adopted as `wgpu:N`, on both of wgpu's
//! adapters here (lavapipe's Vulkan, llvmpipe's GL).

use std::sync::OnceLock;

use keel_device::interop::wgpu as interop;
use keel_device::kernels::SAXPY;
use keel_device::profiler::{LaneKind, SpanKind};
use keel_device::testing::conformance::{self, Config, KernelSource};
use keel_device::{Buffer, Device, DeviceType};

/// A program's own wgpu objects, and the Keel device they became.
pub struct Program {
    pub adapter: wgpu::Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub keel: Device,
}

fn make(api: &'static str) -> Option<Program> {
    // Keel's own adapter of that API decides whether the test runs (it
    // prints the reason, or fails where KEEL_REQUIRE_BACKENDS says so).
    conformance::wgpu_adapter(api)?;
    let backends = match api {
        "Vulkan" => wgpu::Backends::VULKAN,
        _ => wgpu::Backends::GL,
    };
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = pollster::block_on(instance.enumerate_adapters(backends))
        .into_iter()
        .next()?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("the program's device"),
        required_features: adapter.features() & interop::FEATURES,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .expect("the program's device");
    let keel = interop::adopt(&adapter, &device, &queue).expect("adopt");
    Some(Program {
        adapter,
        device,
        queue,
        keel,
    })
}

/// The program's device on the adapter of native API `api`, adopted once
/// per process; `None` (printed) where the machine has no such adapter.
pub fn program(api: &'static str) -> Option<&'static Program> {
    static VULKAN: OnceLock<Option<Program>> = OnceLock::new();
    static GL: OnceLock<Option<Program>> = OnceLock::new();
    let slot = if api == "Vulkan" { &VULKAN } else { &GL };
    slot.get_or_init(|| make(api)).as_ref()
}

/// Maps `buffer` (MAP_READ) and returns its bytes.
fn map_read(p: &Program, buffer: &wgpu::Buffer) -> Vec<u8> {
    let slice = buffer.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    p.device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    let bytes = slice.get_mapped_range().expect("mapped").to_vec();
    buffer.unmap();
    bytes
}

/// The program copies `range` into a buffer of its own, submitted on
/// Keel's `stream`, and reads it.
fn program_reads(
    p: &Program,
    stream: &keel_device::Stream,
    buffer: &wgpu::Buffer,
    offset: u64,
    size: u64,
) -> Vec<u8> {
    let staging = p.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("program staging"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = p.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
    interop::submit(stream, [enc.finish()]).expect("submit");
    map_read(p, &staging)
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(bytes)
}

#[test]
fn an_adopted_device_runs_keel_work_beside_the_program() {
    for api in ["Vulkan", "GL"] {
        let Some(p) = program(api) else {
            continue;
        };
        let d = p.keel;
        assert_eq!(d.device_type(), DeviceType::Wgpu);
        // Adopted devices come after Keel's own.
        assert!(
            usize::try_from(d.index()).expect("index")
                < keel_device::device_count(DeviceType::Wgpu)
        );
        let own = conformance::wgpu_adapter(api).expect("Keel's own adapter");
        assert!(own.index() < d.index(), "{own} before {d}");

        let props = keel_device::properties(d).expect("properties");
        assert!(props.extra.iter().any(|(k, _)| k == "adopted"), "{props:?}");
        let h = interop::handles(d).expect("handles");
        assert!(h.device == p.device && h.queue == p.queue && h.adapter == p.adapter);

        // Keel's kernels and copies on the program's device.
        let s = keel_device::get_stream_from_pool(d, false).expect("stream");
        assert!(interop::queue(&s).expect("queue") == p.queue);
        let n = 1000u32;
        let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let xb = Buffer::from_slice(&s, &x).expect("x");
        let yb = Buffer::from_slice(&s, &vec![1.0f32; n as usize]).expect("y");
        s.launch(
            &SAXPY,
            SAXPY.grid_for(u64::from(n)),
            &[&xb, &yb],
            &[n.to_le_bytes(), 2.0f32.to_le_bytes()].concat(),
        )
        .expect("saxpy");
        let want: Vec<f32> = x.iter().map(|v| 2.0 * v + 1.0).collect();
        assert_eq!(yb.read_as::<f32>(&s).expect("read"), want);

        // The program reads Keel's buffer through the handed-out range.
        let r = interop::buffer(&yb).expect("range");
        assert_eq!(r.size, u64::from(n) * 4);
        assert!(r.binding().is_some());
        let bytes = program_reads(p, &s, &r.buffer, r.offset, r.size);
        assert_eq!(f32s(&bytes), want);

        // Keel uses the program's buffer, and never destroys it.
        let own_buf = p.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("program data"),
            size: 64,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        p.queue
            .write_buffer(&own_buf, 0, bytemuck::cast_slice(&[3.0f32; 16]));
        let kb = interop::adopt_buffer(d, own_buf.clone()).expect("adopt buffer");
        assert_eq!(kb.len(), 64);
        assert_eq!(kb.read_as::<f32>(&s).expect("read"), [3.0f32; 16]);
        kb.write(&s, 16, &[7.0f32; 4]).expect("write");
        let ones = Buffer::from_slice(&s, &[1.0f32; 16]).expect("ones");
        s.launch(
            &SAXPY,
            SAXPY.grid_for(16),
            &[&ones, &kb],
            &[16u32.to_le_bytes(), 1.0f32.to_le_bytes()].concat(),
        )
        .expect("saxpy on the program's buffer");
        drop(kb);
        s.synchronize().expect("sync");
        let mut want = [4.0f32; 16];
        want[4..8].fill(8.0);
        assert_eq!(
            f32s(&program_reads(p, &s, &own_buf, 0, 64)),
            want,
            "still the program's"
        );

        // A launch past the program's buffer is the same error as for
        // Keel's own.
        let kb = interop::adopt_buffer(d, own_buf.clone()).expect("adopt buffer");
        let err = kb.read_async(&s, 60, 8).expect_err("past the end");
        assert!(err.to_string().contains("out of bounds"), "{err}");

        // Bad input: usages Keel cannot bind, another backend's buffer.
        let mappable = p.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let err = interop::adopt_buffer(d, mappable).expect_err("not storage");
        assert!(err.to_string().contains("expected usages"), "{err}");
        let cpu = Buffer::new(Device::cpu(), 4).expect("cpu buffer");
        let err = interop::buffer(&cpu).expect_err("a CPU buffer");
        assert!(err.to_string().contains("found one on cpu:0"), "{err}");
    }
}

/// A compute pipeline of the program's own (no Keel kernel): each
/// invocation spins `iters` times.
fn busy_pipeline(p: &Program) -> (wgpu::ComputePipeline, wgpu::BindGroup) {
    let module = p.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("program busy"),
        source: wgpu::ShaderSource::Wgsl(
            "@group(0) @binding(0) var<storage, read_write> acc: array<u32>;\n\
             @compute @workgroup_size(64)\n\
             fn busy(@builtin(global_invocation_id) g: vec3<u32>) {\n\
                 var x = g.x;\n\
                 for (var i = 0u; i < 20000u; i++) { x = x * 1664525u + 1013904223u; }\n\
                 acc[g.x] = x;\n\
             }"
            .into(),
        ),
    });
    let pipeline = p
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("busy"),
            layout: None,
            module: &module,
            entry_point: Some("busy"),
            compilation_options: Default::default(),
            cache: None,
        });
    let acc = p.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4 * 256,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let group = p.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: acc.as_entire_binding(),
        }],
    });
    (pipeline, group)
}

#[test]
fn scopes_on_the_program_passes_are_device_spans_inside_the_submitting_span() {
    let Some(p) = program("Vulkan") else {
        return;
    };
    let d = p.keel;
    if keel_device::properties(d)
        .expect("properties")
        .timestamps
        .is_none()
    {
        println!("skipped: {d} has no timestamps");
        return;
    }
    let s = keel_device::get_stream_from_pool(d, false).expect("stream");
    let (pipeline, group) = busy_pipeline(p);
    let record = |scopes: &mut interop::Scopes| {
        let mut enc = p.device.create_command_encoder(&Default::default());
        scopes.begin("encode", &mut enc).expect("begin");
        for name in ["first", "second"] {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(name),
                timestamp_writes: scopes.compute_pass(name),
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(4, 1, 1);
        }
        scopes.end(&mut enc).expect("end");
        enc.finish()
    };
    // With no session the scopes record nothing and cost nothing.
    let mut idle = interop::Scopes::new(&s).expect("scopes");
    assert!(!idle.recording());
    let buffer = record(&mut idle);
    idle.submit([buffer]).expect("submit");
    s.synchronize().expect("sync");

    let _one = crate::session();
    let session = keel_device::profiler::start().expect("session");
    // A scope left open is an error before anything is submitted.
    let mut open = interop::Scopes::new(&s).expect("scopes");
    let mut enc = p.device.create_command_encoder(&Default::default());
    open.begin("left open", &mut enc).expect("begin");
    let err = open.submit([enc.finish()]).expect_err("open scope");
    assert!(err.to_string().contains("\"left open\" open"), "{err}");
    let err = interop::Scopes::new(&s)
        .expect("scopes")
        .end(&mut p.device.create_command_encoder(&Default::default()))
        .expect_err("nothing to end");
    assert!(err.to_string().contains("found none"), "{err}");

    let frame_start = session.now_ns();
    {
        let _frame = keel_device::profiler::range("frame");
        let mut scopes = interop::Scopes::new(&s).expect("scopes");
        assert!(scopes.recording());
        let buffer = record(&mut scopes);
        scopes.submit([buffer]).expect("submit");
        s.synchronize().expect("sync");
    }
    let trace = session.stop();
    trace.check().expect("a well-formed trace");
    // No `trace.dropped == 0`: a session records the whole process, and
    // this binary's other tests run meanwhile (one releases its adopted
    // device, whose pending spans then count as dropped, as they should).
    let frame = trace
        .spans
        .iter()
        .find(|s| s.name == "frame")
        .expect("the host range");
    assert!(frame.start_ns >= frame_start);
    let name = d.to_string();
    let device_lane = |lane: u32| {
        matches!(trace.lanes[lane as usize].kind,
            LaneKind::Stream { device, .. } if trace.devices[device as usize].device == name)
    };
    let span = |name: &str| {
        trace
            .spans
            .iter()
            .find(|s| s.name == name && device_lane(s.lane))
            .unwrap_or_else(|| panic!("no device span {name}: {:?}", trace.spans))
    };
    let (encode, first, second, submit) = (
        span("encode"),
        span("first"),
        span("second"),
        span("queue submit"),
    );
    for s in [encode, first, second] {
        assert_eq!(s.kind, SpanKind::Annotation, "{}", s.name);
        assert_eq!(s.lane, submit.lane, "on the stream's lane");
    }
    assert_eq!(submit.kind, SpanKind::Kernel);
    let end = |s: &keel_device::profiler::Span| s.start_ns + s.dur_ns;
    // Calibrated inside the host span that submitted and waited (within
    // the calibration's error bound), nested as recorded, the two passes
    // in order.
    let bound = conformance::calibration_bound(&trace, d);
    for s in [submit, encode, first, second] {
        assert!(
            frame.start_ns <= s.start_ns + bound && end(s) <= end(frame) + bound,
            "{} {}..{} outside frame {}..{} (+/- {bound} ns)",
            s.name,
            s.start_ns,
            end(s),
            frame.start_ns,
            end(frame)
        );
    }
    assert!(submit.start_ns <= encode.start_ns && end(encode) <= end(submit));
    assert!(encode.start_ns <= first.start_ns && end(second) <= end(encode));
    assert!(end(first) <= second.start_ns);
    assert!(first.dur_ns > 0 && second.dur_ns > 0);
    // The submission's host span launches its device span.
    assert!(
        trace
            .spans
            .iter()
            .any(|h| h.name == "queue submit" && !device_lane(h.lane) && h.op == submit.op)
    );
}

mod adopted_vulkan_adapter {
    use super::*;
    keel_device::conformance_suite!(
        || program("Vulkan").map(|p| p.keel),
        Config {
            kernel_source: KernelSource::Wgsl,
            slow_spin: (4096, 200_000),
            // Note [lavapipe submissions wait] in tests/conformance/wgpu.rs.
            submit_waits_for_previous: program("Vulkan")
                .and_then(|p| keel_device::properties(p.keel).ok())
                .is_some_and(|p| p.name.contains("llvmpipe")),
            ..Config::default()
        }
    );
}

mod adopted_gl_adapter {
    use super::*;
    keel_device::conformance_suite!(
        || program("GL").map(|p| p.keel),
        Config {
            kernel_source: KernelSource::Wgsl,
            slow_spin: (4096, 200_000),
            blocking_submit: true,
            ..Config::default()
        }
    );
}

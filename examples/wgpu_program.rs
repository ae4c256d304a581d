//! A plain wgpu program, with its own device and its own WGSL pipelines
//! (no Keel kernel), watched by Keel's profiler: it hands its device to
//! Keel, its `tracing` spans become host spans, and scopes time its
//! compute passes on the GPU, on the device's lane below the spans that
//! submitted them.
//!
//! Run: `cargo run --release --features tracing --example wgpu_program --
//! [--serve ADDR] [--frames N] [--save FILE]`. With `--serve`, watch it
//! live: `keel-profiler --connect ADDR`. With `--save`, open the trace:
//! `keel-profiler --open FILE`. Without a GPU it runs on any wgpu adapter
//! (lavapipe, llvmpipe).

use std::time::Duration;

use keel::interop::wgpu as interop;
use tracing::{info, info_span};
use tracing_subscriber::layer::SubscriberExt;

/// The program's own kernels: a blur and a reduction, each invocation
/// doing enough work to show on a timeline.
const SHADER: &str = "
@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(64)
fn blur(@builtin(global_invocation_id) g: vec3<u32>) {
    let n = arrayLength(&data);
    let i = g.x;
    if i >= n { return; }
    var acc = data[i];
    for (var k = 1u; k < 64u; k++) {
        acc = 0.5 * acc + 0.25 * (data[(i + k) % n] + data[(i + n - k) % n]);
    }
    data[i] = acc;
}

@compute @workgroup_size(64)
fn reduce(@builtin(global_invocation_id) g: vec3<u32>) {
    let n = arrayLength(&data);
    let i = g.x;
    if i >= n / 2u { return; }
    var s = 0.0;
    for (var k = 0u; k < 32u; k++) { s += data[(i + k) % n] * 0.03125; }
    data[i] = s;
}
";

struct Options {
    serve: Option<String>,
    frames: u32,
    save: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        serve: None,
        frames: 20,
        save: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} expects a value"));
        match a.as_str() {
            "--serve" => o.serve = Some(value()?),
            "--save" => o.save = Some(value()?),
            "--frames" => {
                let v = value()?;
                o.frames = v
                    .parse()
                    .map_err(|_| format!("--frames expects a count, found {v:?}"))?;
            }
            _ => {
                return Err(format!(
                    "expected --serve ADDR, --frames N or --save FILE, found {a:?}"
                ));
            }
        }
    }
    Ok(o)
}

/// The program's device, made the way any wgpu program makes one, with
/// what its adapter offers of the features Keel uses.
fn program_device() -> Result<(wgpu::Adapter, wgpu::Device, wgpu::Queue), String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
        .map_err(|e| format!("no wgpu adapter: {e}"))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("wgpu_program"),
        required_features: adapter.features() & interop::FEATURES,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(|e| format!("requesting a device: {e}"))?;
    Ok((adapter, device, queue))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = options()?;
    // The program's tracing, with Keel's layer added.
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(keel::profiler::TracingLayer::new()),
    )?;
    let (adapter, device, queue) = program_device()?;
    let keel_device = interop::adopt(&adapter, &device, &queue)?;
    println!("{} is {keel_device}", keel::properties(keel_device)?.name);
    let stream = keel::default_stream(keel_device)?;

    // Serving live records as it goes; otherwise a session records.
    let server = match &o.serve {
        Some(addr) => {
            let s = keel::profiler::live::serve(addr.as_str())?;
            println!(
                "serving the live profile on {}; connect keel-profiler --connect {}",
                s.addr(),
                s.addr()
            );
            Some(s)
        }
        None => None,
    };
    let session = if server.is_none() {
        Some(keel::profiler::start()?)
    } else {
        None
    };

    let (pipelines, group) = {
        let _s = info_span!("setup").entered();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("program kernels"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        // One layout for both kernels, so one bind group serves both.
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("data"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            }],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("kernels"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = |entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let (blur, reduce) = (pipeline("blur"), pipeline("reduce"));
        let data = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("data"),
            size: 4 * (1 << 16),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&data, 0, bytemuck::cast_slice(&vec![1.0f32; 1 << 16]));
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: data.as_entire_binding(),
            }],
        });
        ((blur, reduce), group)
    };

    for frame in 0..o.frames {
        let _frame = info_span!("frame", frame).entered();
        let mut scopes = interop::Scopes::new(&stream)?;
        let buffer = {
            let _s = info_span!("encode").entered();
            let mut enc = device.create_command_encoder(&Default::default());
            scopes.begin("frame passes", &mut enc)?;
            for (name, pipeline) in [("blur", &pipelines.0), ("reduce", &pipelines.1)] {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(name),
                    timestamp_writes: scopes.compute_pass(name),
                });
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups((1 << 16) / 64, 1, 1);
            }
            scopes.end(&mut enc)?;
            enc.finish()
        };
        {
            let _s = info_span!("submit").entered();
            scopes.submit([buffer])?;
        }
        {
            let _s = info_span!("wait").entered();
            stream.synchronize()?;
        }
        info!(frame, "frame done");
        if server.is_some() {
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    if let Some(session) = session {
        let trace = session.stop();
        let gpu = trace
            .spans
            .iter()
            .filter(|s| s.name == "blur" || s.name == "reduce")
            .count();
        println!(
            "recorded {} spans ({gpu} timed passes of the program's own), {} markers",
            trace.spans.len(),
            trace.instants.len()
        );
        if let Some(path) = &o.save {
            keel::profiler::save_trace(&trace, std::path::Path::new(path))?;
            println!("saved {path}; open it with keel-profiler --open {path}");
        }
    }
    if let Some(server) = server {
        println!("served {} viewers", server.viewers_served());
        server.stop();
    }
    Ok(())
}

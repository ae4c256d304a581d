//! A tour of Keel's device model on the devices present: devices and their
//! properties, the current device and stream, the stream pool, guards,
//! events with timing, buffers, a kernel, and a two-stream overlap.
//!
//! Run: `cargo run --release --example tour`

use std::time::Instant;

use keel::{
    Buffer, Device, DeviceGuard, DeviceType, Event, MultiStreamGuard, Stream, StreamGuard, kernels,
};

fn main() -> keel::Result<()> {
    println!("Keel {} — devices", env!("CARGO_PKG_VERSION"));
    for ty in DeviceType::ALL {
        match keel::availability(ty) {
            Ok(()) => {
                for d in keel::devices(ty) {
                    // Listed, but it may still fail to open (wgpu's GL
                    // adapter on NVIDIA's headless EGL, say).
                    let p = match keel::properties(d) {
                        Ok(p) => p,
                        Err(e) => {
                            println!("  {:<10} -- does not open: {e}", d.to_string());
                            continue;
                        }
                    };
                    let mem = p.total_memory.map_or("?".to_owned(), |m| {
                        format!("{:.1} GiB", m as f64 / (1u64 << 30) as f64)
                    });
                    println!(
                        "  {:<10} {} ({}, {}, {mem}, {} compute units)",
                        d.to_string(),
                        p.name,
                        p.kind,
                        p.native_backend,
                        p.compute_units.map_or("?".to_owned(), |c| c.to_string())
                    );
                }
            }
            Err(reason) => println!("  {:<10} -- {reason}", ty.to_string()),
        }
    }

    let cpu: Device = "cpu".parse()?;
    println!("\nparsing: {:?}", "cuda:1".parse::<Device>()?);
    if let Err(e) = "cuda:01".parse::<Device>() {
        println!("bad input: {e}");
    }

    println!(
        "\ncurrent device: {}",
        keel::current_device(DeviceType::Cpu)?
    );
    println!("current stream: {}", keel::current_stream(cpu)?);
    let pool: Vec<Stream> = (0..33)
        .map(|_| keel::get_stream_from_pool(cpu, false))
        .collect::<keel::Result<_>>()?;
    println!(
        "pool: first {}, 33rd {} (round robin: {})",
        pool[0],
        pool[32],
        pool[0] == pool[32]
    );
    let high = keel::get_stream_from_pool(cpu, true)?;
    println!("high priority: {high} ({:?})", high.kind());

    {
        let _device = DeviceGuard::new(cpu)?;
        let guard = StreamGuard::new(pool[1])?;
        println!(
            "\ninside a StreamGuard: current stream {} (was {})",
            keel::current_stream(cpu)?,
            guard.original_stream()
        );
        let _multi = MultiStreamGuard::new(&[pool[2]])?;
        println!("inside a MultiStreamGuard: {}", keel::current_stream(cpu)?);
    }
    println!("after the guards: {}", keel::current_stream(cpu)?);

    // Two streams, an event between them, and timing.
    let (s1, s2) = (pool[3], pool[4]);
    let n = 4_000_000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = vec![1.5; n];
    let t0 = Instant::now();
    let (da, db) = (Buffer::from_slice(&s1, &a)?, Buffer::from_slice(&s1, &b)?);
    let mut uploaded = Event::new(DeviceType::Cpu);
    uploaded.record(&s1)?;
    s2.wait(&uploaded)?;
    let dc = Buffer::new(cpu, 4 * n)?;
    let (mut start, mut end) = (Event::timed(DeviceType::Cpu), Event::timed(DeviceType::Cpu));
    start.record(&s2)?;
    let k = kernels::VECTOR_ADD;
    s2.launch(
        &k,
        k.grid_for(n as u64),
        &[&da, &db, &dc],
        &(n as u32).to_le_bytes(),
    )?;
    end.record(&s2)?;
    println!(
        "\nhost time to enqueue two 16 MB uploads, a wait and vector_add: {:.3} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let c = dc.read_as::<f32>(&s2)?;
    println!(
        "vector_add of {n} elements: {:.3} ms on {s2}; c[12345] = {}",
        start.elapsed_time(&end)?,
        c[12345]
    );

    // Overlap: two independent streams run at the same time.
    let x = Buffer::from_slice(&s1, &a)?;
    let y = Buffer::from_slice(&s2, &b)?;
    let params = [(n as u32).to_le_bytes(), 2.0f32.to_le_bytes()].concat();
    let t0 = Instant::now();
    for _ in 0..10 {
        s1.launch(
            &kernels::SAXPY,
            kernels::SAXPY.grid_for(n as u64),
            &[&da, &x],
            &params,
        )?;
        s2.launch(
            &kernels::SAXPY,
            kernels::SAXPY.grid_for(n as u64),
            &[&db, &y],
            &params,
        )?;
    }
    keel::synchronize(cpu)?;
    println!(
        "20 saxpy launches on two streams: {:.1} ms wall",
        t0.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

//! Keeps a workload running and serves its profile live on loopback.
//! Connect a viewer with `keel::profiler::live::Client` (or the
//! keel-profiler app) to the printed address.
//!
//! Run: `cargo run --release --example serve_live [-- ADDR [SECONDS]]`
//! (default `127.0.0.1:7878`, forever).

use std::time::{Duration, Instant};

use keel::{Buffer, Device, DeviceType, Event, kernels};

fn main() -> keel::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7878".to_owned());
    let seconds: Option<u64> = args.next().and_then(|s| s.parse().ok());
    let server = keel::profiler::live::serve(addr.as_str())?;
    println!("serving the live profile on {}", server.addr());
    let devices: Vec<Device> = DeviceType::ALL
        .into_iter()
        .flat_map(keel::devices)
        .collect();
    let started = Instant::now();
    let mut round = 0u64;
    while seconds.is_none_or(|s| started.elapsed() < Duration::from_secs(s)) {
        for &d in &devices {
            let _r = keel::profiler::range(format!("round {round} on {d}"));
            let (a, b) = (
                keel::get_stream_from_pool(d, false)?,
                keel::get_stream_from_pool(d, false)?,
            );
            let n = 1u32 << 14;
            let x = Buffer::new(d, 4 * n as usize)?;
            let y = Buffer::from_slice(&b, &vec![0.5f32; n as usize])?;
            let spin = [n.to_le_bytes(), 200u32.to_le_bytes()].concat();
            a.launch(
                &kernels::SPIN,
                kernels::SPIN.grid_for(u64::from(n)),
                &[&x],
                &spin,
            )?;
            let mut e = Event::new(d.device_type());
            e.record(&a)?;
            b.wait(&e)?;
            let saxpy = [n.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
            b.launch(
                &kernels::SAXPY,
                kernels::SAXPY.grid_for(u64::from(n)),
                &[&x, &y],
                &saxpy,
            )?;
            b.synchronize()?;
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "served {} viewers, dropped {} chunks for slow viewers",
        server.viewers_served(),
        server.dropped_chunks()
    );
    server.stop();
    Ok(())
}

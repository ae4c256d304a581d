//! Records a short workload on every available device and writes
//! `trace.json` (open it in https://ui.perfetto.dev or chrome://tracing)
//! and `trace.keeltrace` (Keel's compact format).
//!
//! Per device: two streams with a cross-stream event wait (a producer
//! kernel, then a consumer that waits for it), timed events around the
//! consumer, and copies both ways. Each device's workload is one training
//! step (`keel::profiler::step()`, shown as `ProfilerStep#N` as PyTorch's
//! profiler writes it), so PyTorch's trace analysis (HolisticTraceAnalysis)
//! can break the JSON trace down by step.
//!
//! Run: `cargo run --release --example record_trace [-- OUT_DIR]`

use std::path::PathBuf;

use keel::{Buffer, Device, DeviceType, Event, kernels};

fn workload(d: Device) -> keel::Result<f64> {
    let ty = d.device_type();
    let _range = keel::profiler::range(format!("workload on {d}"));
    let producer = keel::get_stream_from_pool(d, false)?;
    let consumer = keel::get_stream_from_pool(d, true)?;
    let n = 1u32 << 16;
    let x = Buffer::new(d, 4 * n as usize)?;
    let y = Buffer::from_slice(&consumer, &vec![1.0f32; n as usize])?;
    let spin = [n.to_le_bytes(), 500u32.to_le_bytes()].concat();
    producer.launch(
        &kernels::SPIN,
        kernels::SPIN.grid_for(u64::from(n)),
        &[&x],
        &spin,
    )?;
    let mut produced = Event::new(ty);
    produced.record(&producer)?;
    consumer.wait(&produced)?;
    let (mut start, mut end) = (Event::timed(ty), Event::timed(ty));
    start.record(&consumer)?;
    let saxpy = [n.to_le_bytes(), 3.0f32.to_le_bytes()].concat();
    consumer.launch(
        &kernels::SAXPY,
        kernels::SAXPY.grid_for(u64::from(n)),
        &[&x, &y],
        &saxpy,
    )?;
    end.record(&consumer)?;
    let result = y.read_as::<f32>(&consumer)?;
    keel::profiler::mark(format!("{d}: y[1] = {}", result[1]));
    start.elapsed_time(&end)
}

fn main() -> keel::Result<()> {
    let out = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let session = keel::profiler::start()?;
    for ty in DeviceType::ALL {
        for d in keel::devices(ty) {
            keel::profiler::step();
            match workload(d) {
                Ok(ms) => println!("{d:>10}: consumer kernel took {ms:.3} ms (timed events)"),
                Err(e) => println!("{d:>10}: skipped: {e}"),
            }
        }
    }
    let trace = session.stop();
    if let Err(problems) = trace.check() {
        return Err(keel::Error::invalid(format!(
            "malformed trace: {problems:?}"
        )));
    }
    let json = out.join("trace.json");
    let native = out.join("trace.keeltrace");
    keel::profiler::save_trace(&trace, &json)?;
    keel::profiler::save_trace(&trace, &native)?;
    println!(
        "{} spans, {} flows, {} lanes on {} devices (calibration bounds: {})",
        trace.spans.len(),
        trace.flows.len(),
        trace.lanes.len(),
        trace.devices.len(),
        trace
            .calibrations
            .iter()
            .map(|c| format!(
                "{} +/- {} ns",
                trace.devices[c.device as usize].device, c.error_bound_ns
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("wrote {} and {}", json.display(), native.display());
    Ok(())
}

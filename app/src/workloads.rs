//! Built-in workloads: short real programs on a chosen device, each
//! recorded by a [`keel::profiler`] session, run on a background thread so
//! the UI stays responsive.

use std::sync::mpsc;

use keel::generator::Generator;
use keel::{Buffer, Device, Event, dispatch, kernels};

/// A built-in workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `z = x + y` on one stream, with copies both ways.
    VectorAdd,
    /// `y = a * x + y` on one stream.
    Saxpy,
    /// Two streams each running a spin kernel, so their work can overlap.
    TwoStreamOverlap,
    /// Timed events around a kernel; the elapsed time is reported.
    EventTiming,
    /// A producer stream records an event the consumer stream waits for.
    CrossStreamWait,
    /// Forward passes of a small MLP through the operator dispatcher
    /// (`matmul`, `add`, `softmax`, `sum`): operator spans over their
    /// kernels.
    Mlp,
}

impl Workload {
    /// Every workload, in menu order.
    pub const ALL: [Workload; 6] = [
        Workload::VectorAdd,
        Workload::Saxpy,
        Workload::TwoStreamOverlap,
        Workload::EventTiming,
        Workload::CrossStreamWait,
        Workload::Mlp,
    ];

    /// Its display name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::VectorAdd => "vector add",
            Workload::Saxpy => "saxpy",
            Workload::TwoStreamOverlap => "two-stream overlap",
            Workload::EventTiming => "event timing",
            Workload::CrossStreamWait => "cross-stream event wait",
            Workload::Mlp => "MLP forward",
        }
    }

    /// Runs the workload on `device` (inside whatever session is
    /// recording); returns a one-line result.
    pub fn run(self, device: Device) -> keel::Result<String> {
        let _range = keel::profiler::range(format!("{} on {device}", self.name()));
        let n: u32 = 1 << 14;
        let ty = device.device_type();
        match self {
            Workload::VectorAdd => {
                let s = keel::get_stream_from_pool(device, false)?;
                let x = Buffer::from_slice(&s, &vec![1.0f32; n as usize])?;
                let y = Buffer::from_slice(&s, &vec![2.0f32; n as usize])?;
                let z = Buffer::new(device, 4 * n as usize)?;
                s.launch(
                    &kernels::VECTOR_ADD,
                    kernels::VECTOR_ADD.grid_for(u64::from(n)),
                    &[&x, &y, &z],
                    &n.to_le_bytes(),
                )?;
                let out = z.read_as::<f32>(&s)?;
                Ok(format!(
                    "z[0] = {}",
                    out.first().copied().unwrap_or(f32::NAN)
                ))
            }
            Workload::Saxpy => {
                let s = keel::get_stream_from_pool(device, false)?;
                let x = Buffer::from_slice(&s, &vec![1.0f32; n as usize])?;
                let y = Buffer::from_slice(&s, &vec![1.0f32; n as usize])?;
                let params = [n.to_le_bytes(), 3.0f32.to_le_bytes()].concat();
                for _ in 0..4 {
                    s.launch(
                        &kernels::SAXPY,
                        kernels::SAXPY.grid_for(u64::from(n)),
                        &[&x, &y],
                        &params,
                    )?;
                }
                let out = y.read_as::<f32>(&s)?;
                Ok(format!(
                    "y[0] = {}",
                    out.first().copied().unwrap_or(f32::NAN)
                ))
            }
            Workload::TwoStreamOverlap => {
                let a = keel::get_stream_from_pool(device, false)?;
                let b = keel::get_stream_from_pool(device, false)?;
                let xa = Buffer::new(device, 4 * n as usize)?;
                let xb = Buffer::new(device, 4 * n as usize)?;
                let spin = [n.to_le_bytes(), 300u32.to_le_bytes()].concat();
                for _ in 0..3 {
                    a.launch(
                        &kernels::SPIN,
                        kernels::SPIN.grid_for(u64::from(n)),
                        &[&xa],
                        &spin,
                    )?;
                    b.launch(
                        &kernels::SPIN,
                        kernels::SPIN.grid_for(u64::from(n)),
                        &[&xb],
                        &spin,
                    )?;
                }
                a.synchronize()?;
                b.synchronize()?;
                Ok("both streams done".to_owned())
            }
            Workload::EventTiming => {
                let s = keel::get_stream_from_pool(device, false)?;
                let x = Buffer::new(device, 4 * n as usize)?;
                let (mut start, mut end) = (Event::timed(ty), Event::timed(ty));
                start.record(&s)?;
                let spin = [n.to_le_bytes(), 500u32.to_le_bytes()].concat();
                s.launch(
                    &kernels::SPIN,
                    kernels::SPIN.grid_for(u64::from(n)),
                    &[&x],
                    &spin,
                )?;
                end.record(&s)?;
                end.synchronize()?;
                let ms = start.elapsed_time(&end)?;
                Ok(format!("spin took {ms:.3} ms (timed events)"))
            }
            Workload::CrossStreamWait => {
                let producer = keel::get_stream_from_pool(device, false)?;
                let consumer = keel::get_stream_from_pool(device, true)?;
                let x = Buffer::new(device, 4 * n as usize)?;
                let y = Buffer::from_slice(&consumer, &vec![1.0f32; n as usize])?;
                let spin = [n.to_le_bytes(), 400u32.to_le_bytes()].concat();
                producer.launch(
                    &kernels::SPIN,
                    kernels::SPIN.grid_for(u64::from(n)),
                    &[&x],
                    &spin,
                )?;
                let mut produced = Event::new(ty);
                produced.record(&producer)?;
                consumer.wait(&produced)?;
                let params = [n.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
                consumer.launch(
                    &kernels::SAXPY,
                    kernels::SAXPY.grid_for(u64::from(n)),
                    &[&x, &y],
                    &params,
                )?;
                let out = y.read_as::<f32>(&consumer)?;
                Ok(format!(
                    "y[1] = {}",
                    out.get(1).copied().unwrap_or(f32::NAN)
                ))
            }
            Workload::Mlp => mlp(device),
        }
    }
}

/// Two forward passes of an MLP of batch 64 and width 256 (three layers
/// of `matmul` and a bias `add`, then `softmax` over each row and `sum`)
/// through the dispatcher, on the device's current stream. The total is
/// the batch size, each softmax row summing to one.
fn mlp(device: Device) -> keel::Result<String> {
    const BATCH: usize = 64;
    const WIDTH: usize = 256;
    let generator = Generator::new(device)?;
    generator.manual_seed(0);
    let scale = 1.0 / (WIDTH as f64).sqrt();
    let x = dispatch::randn(&[BATCH, WIDTH], device, Some(&generator))?;
    let mut layers = Vec::new();
    for _ in 0..3 {
        let w = dispatch::randn(&[WIDTH, WIDTH], device, Some(&generator))?.mul_scalar(scale)?;
        let b = dispatch::randn(&[BATCH, WIDTH], device, Some(&generator))?.mul_scalar(0.1)?;
        layers.push((w, b));
    }
    let mut total = 0.0;
    for _ in 0..2 {
        let mut h = x.clone();
        for (w, b) in &layers {
            h = h.matmul(w)?.add(b)?;
        }
        total = h
            .softmax()?
            .sum()?
            .to_vec::<f32>()?
            .first()
            .copied()
            .unwrap_or(f32::NAN);
    }
    Ok(format!("softmax total = {total:.3}"))
}

/// What a background run reports.
#[derive(Debug)]
pub enum RunMessage {
    /// `done` of `total` steps finished; the line says what just ran.
    Progress {
        /// Steps finished.
        done: usize,
        /// Steps in all.
        total: usize,
        /// What happened.
        line: String,
    },
    /// The session's trace, or why there is none.
    Finished(Result<Box<keel::profiler::Trace>, String>),
}

/// Runs `jobs` inside one profiler session, passing progress and the
/// result to `report`. Failing workloads are reported and skipped; the trace
/// holds the rest.
pub fn run_jobs(jobs: &[(Workload, Device)], report: &dyn Fn(RunMessage)) {
    let session = match keel::profiler::start() {
        Ok(s) => s,
        Err(e) => {
            report(RunMessage::Finished(Err(format!(
                "could not start profiling: {e}"
            ))));
            return;
        }
    };
    for (i, &(w, d)) in jobs.iter().enumerate() {
        let line = match w.run(d) {
            Ok(r) => format!("{} on {d}: {r}", w.name()),
            Err(e) => format!("{} on {d}: failed: {e}", w.name()),
        };
        report(RunMessage::Progress {
            done: i + 1,
            total: jobs.len(),
            line,
        });
    }
    report(RunMessage::Finished(Ok(Box::new(session.stop()))));
}

/// Starts [`run_jobs`] on a background thread; `wake` is called after
/// every message (to request a repaint).
pub fn spawn(
    jobs: Vec<(Workload, Device)>,
    wake: impl Fn() + Send + 'static,
) -> mpsc::Receiver<RunMessage> {
    let (tx, rx) = mpsc::channel();
    let worker_tx = tx.clone();
    let started = std::thread::Builder::new()
        .name("keel-workload".to_owned())
        .spawn(move || {
            run_jobs(&jobs, &|m| {
                let _ = worker_tx.send(m);
                wake();
            });
        });
    if let Err(e) = started {
        let _ = tx.send(RunMessage::Finished(Err(format!(
            "could not start a thread: {e}"
        ))));
    }
    rx
}

//! A third-party backend plugged into Keel at run time as `npu` (c10's
//! PrivateUse1), then used through the ordinary API.
//!
//! Run: `cargo run --example custom_backend`

mod npu;

use keel::{Buffer, DType, Device, DeviceGuard, DeviceType, Event, Tensor, kernels};

fn main() -> keel::Result<()> {
    npu::install()?;
    println!(
        "registered '{}' in the PrivateUse1 slot: {} devices",
        keel::privateuse1_backend_name().unwrap_or("?"),
        keel::device_count(DeviceType::PrivateUse1)
    );

    let npu1: Device = "npu:1".parse()?;
    let _guard = DeviceGuard::new(npu1)?;
    println!(
        "current device: {}",
        keel::current_device(DeviceType::PrivateUse1)?
    );
    let p = keel::properties(npu1)?;
    println!("{npu1}: {} ({}, {})", p.name, p.kind, p.native_backend);

    // Two streams: one uploads, the other computes after an event.
    let upload = keel::get_stream_from_pool(npu1, false)?;
    let compute = keel::get_stream_from_pool(npu1, true)?;
    println!("upload on {upload}, compute on {compute}");
    let n = 1 << 20;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let (da, db) = (
        Buffer::from_slice(&upload, &a)?,
        Buffer::from_slice(&upload, &b)?,
    );
    let dc = Buffer::new(npu1, 4 * n)?;
    let mut uploaded = Event::new(DeviceType::PrivateUse1);
    uploaded.record(&upload)?;
    compute.wait(&uploaded)?;

    let mut start = Event::timed(DeviceType::PrivateUse1);
    let mut end = Event::timed(DeviceType::PrivateUse1);
    start.record(&compute)?;
    let k = kernels::VECTOR_ADD;
    compute.launch(
        &k,
        k.grid_for(n as u64),
        &[&da, &db, &dc],
        &(n as u32).to_le_bytes(),
    )?;
    end.record(&compute)?;
    end.synchronize()?;
    println!(
        "vector_add of {n} elements: {:.3} ms",
        start.elapsed_time(&end)?
    );

    // Explicit moves: npu:1 -> npu:0 (peer copy) -> cpu (through the host).
    let npu0: Device = "npu:0".parse()?;
    let on_npu0 = dc.to(npu0, &keel::current_stream(npu0)?)?;
    let on_cpu = on_npu0.to(Device::cpu(), &keel::current_stream(Device::cpu())?)?;
    let c = on_cpu.read_as::<f32>(&keel::current_stream(Device::cpu())?)?;
    let ok = c.iter().enumerate().all(|(i, &v)| v == a[i] + b[i]);
    println!("moved npu:1 -> npu:0 -> cpu; result correct: {ok}");
    if !ok {
        return Err(keel::Error::invalid(
            "vector_add on npu gave a wrong result",
        ));
    }
    operators(npu1)
}

/// PrivateUse1 parity: the NPU's own kernels, the CPU fallback for the
/// rest, save/load with the NPU's metadata, and its device module.
fn operators(npu1: Device) -> keel::Result<()> {
    npu::install_ops()?;
    let module = keel::device_module::<npu::NpuModule>("npu")?;
    println!(
        "device module 'npu': {} devices, native kernels for {:?}",
        module.device_count(),
        module.native_ops()
    );

    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], npu1)?;
    let y = Tensor::full(&[2, 3], 0.5, DType::F32, npu1)?;
    // `add` and `mul.Scalar` run the NPU's kernels...
    let z = x.add(&y)?.mul_scalar(2.0)?;
    // ...`matmul` and `softmax` have none: the CPU fallback runs them
    // (with a warning, once per operator).
    let w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2], npu1)?;
    let p = z.matmul(&w)?.softmax()?;
    println!(
        "add + mul.Scalar on npu (own kernels): {:?}",
        z.to_vec::<f32>()?
    );
    println!(
        "matmul + softmax on npu (CPU fallback): {:?}",
        p.to_vec::<f32>()?
    );
    for op in ["add", "mul.Scalar", "matmul", "softmax"] {
        println!(
            "  {op}: {} fallback call(s)",
            keel::dispatch::fallback_count(op)
        );
    }

    // Saved from the NPU (with its metadata), loaded on the CPU.
    let path = std::env::temp_dir().join(format!("keel-npu-{}.safetensors", std::process::id()));
    keel::save(&path, &[("z", &z), ("p", &p)])?;
    let loaded = keel::load(&path, Device::cpu())?;
    std::fs::remove_file(&path).ok();
    for (name, t) in &loaded {
        println!("loaded '{name}' on {}: {:?}", t.device(), t.shape());
    }
    module.synchronize(npu1.index())?;
    Ok(())
}

//! The CPU backend: real asynchronous host streams, events, memory and
//! kernels, through the public API.

mod common;

use std::time::Instant;

use common::{GATED_FILL, PANICS, SLEEP, gate_params, open, pattern};
use keel::{Buffer, Device, DeviceGuard, DeviceType, Error, Event, Stream, StreamGuard, kernels};

fn cpu() -> Device {
    Device::new(DeviceType::Cpu, 0).expect("cpu:0")
}

fn pool() -> Stream {
    keel::get_stream_from_pool(cpu(), false).expect("pool stream")
}

#[test]
fn one_device_with_properties() {
    assert_eq!(keel::device_count(DeviceType::Cpu), 1);
    assert!(keel::is_available(DeviceType::Cpu));
    assert_eq!(keel::devices(DeviceType::Cpu), vec![cpu()]);
    assert_eq!(keel::current_device(DeviceType::Cpu), Ok(cpu()));
    keel::set_device(cpu()).expect("cpu:0");
    keel::set_device(Device::cpu()).expect("cpu");
    let p = keel::properties(Device::cpu()).expect("properties");
    assert_eq!(p.device, cpu());
    assert!(!p.name.is_empty());
    assert!(p.compute_units.is_some_and(|n| n >= 1));
    assert!(
        p.total_memory.is_some_and(|m| m > 0),
        "Linux reports MemTotal"
    );
    assert_eq!(p.kind, keel::DeviceKind::Cpu);
    assert!(p.timestamps.is_some());
}

#[test]
fn default_stream_runs_inline() {
    let s = keel::default_stream(Device::cpu()).expect("default");
    assert_eq!(s, Stream::default_for(cpu()));
    let b = Buffer::new(cpu(), 8).expect("alloc");
    b.write(&s, 0, &[1u32, 2]).expect("write");
    assert_eq!(s.query(), Ok(true), "inline work is done on return");
    assert_eq!(b.read_as::<u32>(&s).expect("read"), [1, 2]);
}

#[test]
fn pool_streams_run_asynchronously_and_events_track_them() {
    let s = pool();
    let buf = Buffer::new(cpu(), 4).expect("alloc");
    let mut before = Event::timed(DeviceType::Cpu);
    let mut after = Event::timed(DeviceType::Cpu);
    before.record(&s).expect("record");
    s.launch(&GATED_FILL, [1, 1, 1], &[&buf], &gate_params(1, 5.0))
        .expect("launch");
    after.record(&s).expect("record");
    assert_eq!(s.query(), Ok(false), "the gate holds the stream");
    assert_eq!(after.query(), Ok(false));
    let e = before.elapsed_time(&after).expect_err("not complete");
    assert_eq!(
        e.to_string(),
        "Both events must be completed before calculating elapsed time."
    );
    open(1);
    after.synchronize().expect("sync");
    assert_eq!(after.query(), Ok(true));
    assert!(before.elapsed_time(&after).expect("elapsed") >= 0.0);
    s.synchronize().expect("sync");
    assert_eq!(s.query(), Ok(true));
    assert_eq!(buf.read_as::<f32>(&s).expect("read"), [5.0]);
}

#[test]
fn wait_orders_work_across_streams() {
    let (producer, consumer) = (pool(), pool());
    assert_ne!(producer, consumer);
    let n = 1000u32;
    let x = Buffer::new(cpu(), 4 * n as usize).expect("alloc");
    let y = Buffer::from_slice(&consumer, &vec![1.0f32; n as usize]).expect("alloc");
    consumer.synchronize().expect("upload");
    producer
        .launch(&GATED_FILL, [1, 1, 1], &[&x], &gate_params(2, 3.0))
        .expect("producer");
    let mut produced = Event::new(DeviceType::Cpu);
    produced.record(&producer).expect("record");
    consumer.wait(&produced).expect("wait");
    let params = [n.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
    let k = kernels::SAXPY;
    consumer
        .launch(&k, k.grid_for(u64::from(n)), &[&x, &y], &params)
        .expect("consumer");
    let result = y.read_async(&consumer, 0, y.len()).expect("read");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        consumer.query(),
        Ok(false),
        "the consumer waits for the producer"
    );
    assert_eq!(result.is_ready(), Ok(false));
    open(2);
    let y: Vec<f32> = bytemuck::pod_collect_to_vec(&result.wait().expect("data"));
    assert!(
        y.iter().all(|&v| v == 7.0),
        "1 + 2 * 3 everywhere: {:?}",
        &y[..4]
    );
}

#[test]
fn work_within_a_stream_runs_in_order() {
    let s = pool();
    let b = Buffer::new(cpu(), 4).expect("alloc");
    for i in 0..500u32 {
        b.write(&s, 0, &[i]).expect("write");
    }
    let c = Buffer::new(cpu(), 4).expect("alloc");
    c.copy_from(&s, &b, 0, 0, 4).expect("copy");
    assert_eq!(c.read_as::<u32>(&s).expect("read"), [499]);
}

#[test]
fn elapsed_time_is_consistent_with_host_time() {
    let s = pool();
    let mut start = Event::timed(DeviceType::Cpu);
    let mut end = Event::timed(DeviceType::Cpu);
    let t0 = Instant::now();
    start.record(&s).expect("record");
    s.launch(&SLEEP, [1, 1, 1], &[], &20u32.to_le_bytes())
        .expect("sleep");
    end.record(&s).expect("record");
    end.synchronize().expect("sync");
    let host_ms = t0.elapsed().as_secs_f64() * 1e3;
    let ms = start.elapsed_time(&end).expect("elapsed");
    assert!(ms >= 19.0, "the stream slept 20 ms, measured {ms}");
    assert!(ms <= host_ms, "device {ms} ms within host {host_ms} ms");
}

#[test]
fn unrecorded_and_mismatched_events_on_cpu() {
    let e = Event::new(DeviceType::Cpu);
    assert_eq!(e.query(), Ok(true));
    assert_eq!(e.synchronize(), Ok(()));
    assert_eq!(e.block(&pool()), Ok(()));
    let mut e = Event::new(DeviceType::Cpu);
    let cuda0 = Stream::default_for(Device::new(DeviceType::Cuda, 0).expect("valid"));
    let err = e.record(&cuda0).expect_err("type");
    assert_eq!(
        err.to_string(),
        "Event device type CPU does not match recording stream's device type CUDA."
    );
    let mut untimed = Event::new(DeviceType::Cpu);
    untimed.record(&pool()).expect("record");
    let mut timed = Event::timed(DeviceType::Cpu);
    timed.record(&pool()).expect("record");
    let err = untimed.elapsed_time(&timed).expect_err("flags");
    assert_eq!(
        err.to_string(),
        "Both events must be created with argument 'enable_timing=True'."
    );
}

#[test]
fn stream_pool_round_robin() {
    let high: Vec<Stream> = (0..200)
        .map(|_| keel::get_stream_from_pool(cpu(), true).expect("pool"))
        .collect();
    let distinct: std::collections::HashSet<_> = high.iter().copied().collect();
    assert_eq!(distinct.len(), 32, "200 requests reuse 32 streams");
    // The pool is shared by every thread, so take a fresh window of 33.
    let first = keel::get_stream_from_pool(cpu(), true).expect("pool");
    let mut last = first;
    for _ in 0..32 {
        last = keel::get_stream_from_pool(cpu(), true).expect("pool");
    }
    assert_eq!(last, first, "the 33rd request returns the 1st");
    assert!(
        high.iter()
            .all(|s| matches!(s.kind(), keel::core::StreamKind::Pool { level: 1, .. }))
    );
}

#[test]
fn copies_round_trip_byte_exact() {
    let s = pool();
    for (i, len) in [0usize, 1, 4097, 16 * 1024 * 1024 + 3]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u32);
        let a = Buffer::from_slice(&s, &data).expect("upload");
        let b = a.to(cpu(), &s).expect("device to device");
        assert_eq!(b.len(), len);
        assert!(b.read(&s).expect("read") == data, "{len} bytes round trip");
    }
}

#[test]
fn vector_add_is_correct() {
    let s = pool();
    for n in [1usize, 1000, 1_000_003] {
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32 + 0.5).collect();
        let (da, db) = (
            Buffer::from_slice(&s, &a).expect("a"),
            Buffer::from_slice(&s, &b).expect("b"),
        );
        let dc = Buffer::new(cpu(), 4 * n).expect("c");
        let k = kernels::VECTOR_ADD;
        s.launch(
            &k,
            k.grid_for(n as u64),
            &[&da, &db, &dc],
            &(n as u32).to_le_bytes(),
        )
        .expect("launch");
        let c = dc.read_as::<f32>(&s).expect("read");
        assert!(
            c.iter().enumerate().all(|(i, &v)| v == a[i] + b[i]),
            "n = {n}"
        );
    }
}

#[test]
fn bad_requests_are_clear_errors() {
    let s = pool();
    let b = Buffer::new(cpu(), 16).expect("alloc");
    let e = b.write(&s, 12, &[0u32, 0]).expect_err("overflow");
    assert_eq!(
        e.to_string(),
        "write out of bounds: expected offset + length <= 16 (the buffer's size), found 12 + 8"
    );
    let e = b
        .read_async(&s, usize::MAX, 2)
        .expect_err("overflowing range");
    assert!(e.to_string().starts_with("read out of bounds"), "{e}");
    let k = kernels::VECTOR_ADD;
    let e = s
        .launch(&k, [1, 1, 1], &[&b, &b], &[])
        .expect_err("two of three");
    assert_eq!(
        e.to_string(),
        "kernel 'vector_add': expected 3 buffers, found 2"
    );
    let e = s
        .launch(&k, [1, 1, 1], &[&b, &b, &b], &4u32.to_le_bytes())
        .expect_err("aliasing");
    assert!(
        e.to_string()
            .contains("same buffer is bound at bindings 0 and 1"),
        "{e}"
    );
    let e = Buffer::new(cpu(), usize::MAX).expect_err("too big");
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    assert!(e.to_string().starts_with("out of memory on cpu:0"), "{e}");
    let e = b
        .read_as::<[u8; 3]>(&s)
        .expect_err("16 is not a multiple of 3");
    assert!(e.to_string().contains("multiple of 3 bytes"), "{e}");
    let bogus = Stream::new(cpu(), 2);
    let e = bogus.query().expect_err("even ids are not CPU streams");
    assert!(e.to_string().contains("unknown stream id 2"), "{e}");
}

#[test]
fn asynchronous_failures_are_reported_once_by_synchronize() {
    let s = pool();
    let short = Buffer::new(cpu(), 8).expect("alloc");
    let k = kernels::SAXPY;
    let params = [100u32.to_le_bytes(), 1.0f32.to_le_bytes()].concat();
    s.launch(
        &k,
        k.grid_for(100),
        &[&short, &short.to(cpu(), &s).expect("copy")],
        &params,
    )
    .expect("enqueued; fails when it runs");
    let e = s.synchronize().expect_err("kernel failed");
    assert_eq!(
        e.to_string(),
        "kernel 'saxpy': binding 0: expected at least 100 elements, found 2"
    );
    assert_eq!(s.synchronize(), Ok(()), "reported once");
    s.launch(&PANICS, [1, 1, 1], &[], &[]).expect("enqueued");
    let e = keel::synchronize(cpu()).expect_err("panic reported");
    assert!(e.to_string().contains("kernel bug"), "{e}");
    // The stream's worker survived the panic.
    let b = Buffer::from_slice(&s, &[9u8]).expect("upload");
    assert_eq!(b.read(&s).expect("read"), [9]);
}

#[test]
fn synchronize_device_waits_for_every_stream() {
    let (s1, s2) = (pool(), pool());
    let (b1, b2) = (
        Buffer::new(cpu(), 4).expect("b1"),
        Buffer::new(cpu(), 4).expect("b2"),
    );
    s1.launch(&GATED_FILL, [1, 1, 1], &[&b1], &gate_params(3, 1.0))
        .expect("launch");
    s2.launch(&GATED_FILL, [1, 1, 1], &[&b2], &gate_params(3, 2.0))
        .expect("launch");
    let opener = std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_millis(30));
        open(3);
    });
    keel::synchronize(Device::cpu()).expect("sync");
    assert_eq!((s1.query(), s2.query()), (Ok(true), Ok(true)));
    opener.join().expect("opener");
}

#[test]
fn guards_switch_the_current_cpu_stream() {
    let s = pool();
    let before = keel::current_stream(Device::cpu()).expect("current");
    {
        let _d = DeviceGuard::new(Device::cpu()).expect("device guard");
        let g = StreamGuard::new(s).expect("stream guard");
        assert_eq!(keel::current_stream(Device::cpu()), Ok(s));
        assert_eq!(g.original_stream(), before);
    }
    assert_eq!(keel::current_stream(Device::cpu()), Ok(before));
    keel::set_current_stream(s).expect("set");
    assert_eq!(keel::current_stream(cpu()), Ok(s));
    keel::set_current_stream(before).expect("restore");
    let e = keel::set_current_stream(Stream::new(cpu(), 1 << 20 | 1)).expect_err("bad id");
    assert!(e.to_string().contains("unknown stream id"), "{e}");
}

//! Timed events and event misuse.

use super::*;

/// Timed events measure device time: within the host's time around it and
/// most of it (host backends: at least the time a kernel slept).
pub fn elapsed_time_matches_host_time(d: Device, cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let mut start = Event::timed(ty);
    let mut end = Event::timed(ty);
    s.synchronize().expect("idle");
    let t0 = Instant::now();
    start.record(&s).expect("record");
    let host_kernel = cfg.kernel_source == KernelSource::Host;
    if host_kernel {
        s.launch(&SLEEP, [1, 1, 1], &[], &20u32.to_le_bytes())
            .expect("sleep");
    } else {
        launch_spin(&s, &out, n, iters);
    }
    end.record(&s).expect("record");
    end.synchronize().expect("sync");
    let host_ms = t0.elapsed().as_secs_f64() * 1e3;
    let ms = start.elapsed_time(&end).expect("elapsed");
    assert!(ms > 0.0, "positive: {ms}");
    assert!(
        ms <= host_ms * 1.01 + 0.05,
        "device {ms} ms within host {host_ms} ms"
    );
    if host_kernel {
        assert!(ms >= 19.0, "the stream slept 20 ms, measured {ms}");
    } else {
        assert!(
            ms >= host_ms * 0.05,
            "device {ms} ms is most of host {host_ms} ms"
        );
    }
    // A second pair on the same events (re-record) measures again.
    start.record(&s).expect("re-record");
    end.record(&s).expect("re-record");
    end.synchronize().expect("sync");
    let empty = start.elapsed_time(&end).expect("elapsed");
    assert!(
        empty >= 0.0 && empty < ms,
        "an empty interval {empty} < {ms}"
    );
}

/// c10's event rules, on this backend: never-recorded events are complete,
/// and misuse is an error with c10's message.
pub fn event_misuse_is_a_clear_error(d: Device, _cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let never = Event::new(ty);
    assert_eq!(never.query(), Ok(true), "never recorded: complete");
    assert_eq!(never.synchronize(), Ok(()));
    assert_eq!(never.block(&s), Ok(()));
    let other = if ty == DeviceType::Cpu {
        DeviceType::Cuda
    } else {
        DeviceType::Cpu
    };
    let mut e = Event::new(ty);
    let foreign = Stream::default_for(Device::new(other, 0).expect("valid"));
    let err = e.record(&foreign).expect_err("another device type");
    assert_eq!(
        err.to_string(),
        format!(
            "Event device type {} does not match recording stream's device type {}.",
            ty.name_upper(),
            other.name_upper()
        )
    );
    let (a, b) = (Event::timed(ty), Event::timed(ty));
    let err = a.elapsed_time(&b).expect_err("never recorded");
    assert_eq!(
        err.to_string(),
        "Both events must be recorded before calculating elapsed time."
    );
    let mut untimed = Event::new(ty);
    untimed.record(&s).expect("record");
    let mut timed = Event::timed(ty);
    timed.record(&s).expect("record");
    timed.synchronize().expect("sync");
    let err = untimed.elapsed_time(&timed).expect_err("flags");
    assert_eq!(
        err.to_string(),
        "Both events must be created with argument 'enable_timing=True'."
    );
    // An event stays on the device it was first recorded on.
    if let Some(&d2) = other_devices(d).iter().find(|o| o.device_type() == ty) {
        let err = untimed.record(&pool(d2)).expect_err("another device");
        assert_eq!(
            err.to_string(),
            format!(
                "Event device index {} does not match recording stream's device index {}.",
                d.index(),
                d2.index()
            )
        );
    }
}

//! What a device reports, moving buffers between devices, and clear errors for bad requests.

use super::*;

/// The device reports itself: properties name it, it is listed and
/// available, timestamps (where offered) have a period.
pub fn properties_describe_the_device(d: Device, _cfg: &Config) {
    let ty = d.device_type();
    let p = crate::properties(d).expect("properties");
    assert_eq!(p.device, d);
    assert!(!p.name.is_empty(), "a name");
    assert!(!p.native_backend.is_empty(), "a native backend");
    assert!(crate::devices(ty).contains(&d), "{d} is listed");
    assert_eq!(crate::availability(ty), Ok(()));
    if let Some(t) = p.timestamps {
        assert!(t.period_ns > 0.0 && t.valid_bits > 0, "{t:?}");
    }
}

/// `Buffer::to` moves data within the device, to every other device
/// present (of this backend, directly or through the host; of every other
/// backend) and back, byte-exact. Mixing devices in one call is an error.
pub fn moves_between_devices(d: Device, _cfg: &Config) {
    let s = pool(d);
    let data = pattern((1 << 20) + 3, 3);
    let a = Buffer::from_slice(&s, &data).expect("upload");
    let same = a.to(d, &s).expect("within the device");
    assert_eq!(same.device(), d);
    assert!(same.read(&s).expect("read") == data, "{d} -> {d}");
    // The host path reads on the source device's current stream: make it
    // the stream the data was written on, as in PyTorch.
    let _current = StreamGuard::new(s).expect("s current");
    let others = other_devices(d);
    for &o in &others {
        let so = pool(o);
        let there = a.to(o, &so).expect("move there");
        assert_eq!((there.device(), there.len()), (o, data.len()));
        // A direct (peer) copy back runs on `s`, which does not wait for
        // `so` by itself.
        so.synchronize().expect("moved there");
        let _there_current = StreamGuard::new(so).expect("so current");
        let back = there.to(d, &s).expect("move back");
        assert!(back.read(&s).expect("read") == data, "{d} -> {o} -> {d}");
    }
    if let Some(&o) = others.first() {
        let e = a
            .write(&pool(o), 0, &[1u8])
            .expect_err("a stream of another device");
        assert_eq!(
            e,
            Error::DeviceMismatch {
                first: d,
                second: o
            }
        );
        let e = a.to(d, &pool(o)).expect_err("a stream of another device");
        assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    }
}

/// What the public objects check before a backend sees a request: ranges,
/// binding counts, element sizes, devices.
pub fn bad_requests_are_clear_errors(d: Device, _cfg: &Config) {
    let s = pool(d);
    let b = Buffer::new(d, 16).expect("alloc");
    let e = b.write(&s, 12, &[0u32, 0]).expect_err("overflow");
    assert_eq!(
        e.to_string(),
        "write out of bounds: expected offset + length <= 16 (the buffer's size), found 12 + 8"
    );
    let e = b
        .read_async(&s, usize::MAX, 2)
        .expect_err("overflowing range");
    assert!(e.to_string().starts_with("read out of bounds"), "{e}");
    let c = Buffer::new(d, 8).expect("alloc");
    let e = c.copy_from(&s, &b, 4, 0, 16).expect_err("source range");
    assert!(
        e.to_string().starts_with("copy source out of bounds"),
        "{e}"
    );
    let e = c.copy_from(&s, &b, 0, 4, 8).expect_err("destination range");
    assert!(
        e.to_string().starts_with("copy destination out of bounds"),
        "{e}"
    );
    let e = s
        .launch(&VECTOR_ADD, [1, 1, 1], &[&b, &c], &[])
        .expect_err("two of three");
    assert_eq!(
        e.to_string(),
        "kernel 'vector_add': expected 3 buffers, found 2"
    );
    let e = b
        .read_as::<[u8; 3]>(&s)
        .expect_err("16 is not a multiple of 3");
    assert!(e.to_string().contains("multiple of 3 bytes"), "{e}");
    if let Some(&o) = other_devices(d).first() {
        let elsewhere = Buffer::new(o, 16).expect("alloc");
        let e = s
            .launch(
                &VECTOR_ADD,
                [1, 1, 1],
                &[&b, &elsewhere, &b],
                &4u32.to_le_bytes(),
            )
            .expect_err("mixed devices");
        assert_eq!(
            e,
            Error::DeviceMismatch {
                first: d,
                second: o
            }
        );
    }
    // The stream still works.
    b.write(&s, 0, &[7u32]).expect("write");
    assert_eq!(b.read_as::<u32>(&s).expect("read")[0], 7);
}

//! Uploads, readbacks and copies, in flight and within one buffer.

use super::*;

/// Device-to-device copies are byte-exact, at any size and at every phase
/// of source and destination offsets (backends that copy in words handle
/// the rest themselves).
pub fn copies_round_trip(d: Device, _cfg: &Config) {
    let s = pool(d);
    for (seed, len) in [0usize, 1, 4097, 16 * 1024 * 1024 + 3]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, seed as u32);
        let a = Buffer::from_slice(&s, &data).expect("upload");
        let b = Buffer::new(d, len).expect("alloc");
        b.copy_from(&s, &a, 0, 0, len).expect("device to device");
        let back = b.read(&s).expect("download");
        assert!(back == data, "{len} bytes round trip byte-exact");
    }
    let data = pattern(10_007, 11);
    let a = Buffer::from_slice(&s, &data).expect("upload");
    let b = Buffer::new(d, 10_007).expect("alloc");
    for (so, dof, len) in [(1, 2, 1001), (3, 0, 4), (0, 3, 17), (5, 5, 9000), (2, 1, 1)] {
        b.copy_from(&s, &a, so, dof, len).expect("copy");
        let got = b
            .read_async(&s, dof, len)
            .expect("read")
            .wait()
            .expect("wait");
        assert!(got == data[so..so + len], "copy {so} -> {dof} of {len}");
    }
    // Writes land at their offset; reads of a part.
    let a = Buffer::from_slice(&s, &[1u8, 2, 3, 4, 5, 6, 7, 8]).expect("a");
    let b = Buffer::from_slice(&s, &[0u8; 8]).expect("b");
    b.copy_from(&s, &a, 2, 5, 3).expect("copy");
    b.write(&s, 0, &[9u8]).expect("write");
    assert_eq!(b.read(&s).expect("read"), [9, 0, 0, 0, 0, 3, 4, 5]);
    let part = a.read_async(&s, 6, 2).expect("read").wait().expect("wait");
    assert_eq!(part, [7, 8]);
}

/// Transfers enqueued back to back, without waiting in between, keep their
/// own data even where a backend reuses staging memory between transfers
/// (wgpu keeps its mappable buffers): each read sees exactly the writes
/// enqueued before it on the stream.
pub fn transfers_in_flight_keep_their_data(d: Device, _cfg: &Config) {
    let s = pool(d);
    let mut mirror = vec![0u8; 8192];
    let b = Buffer::from_slice(&s, &mirror).expect("alloc");
    let mut reads = Vec::new();
    let writes = [
        (0, 8192),
        (0, 100),
        (4, 4000),
        (3, 7),
        (8, 3000),
        (4096, 4096),
        (0, 5000),
        (12, 4),
    ];
    for (i, (offset, len)) in writes.into_iter().enumerate() {
        let data = pattern(len, 100 + i as u32);
        b.write(&s, offset, &data).expect("write");
        mirror[offset..offset + len].copy_from_slice(&data);
        let read = b.read_async(&s, 0, mirror.len()).expect("read");
        reads.push((read, mirror.clone()));
    }
    for (i, (read, want)) in reads.into_iter().enumerate() {
        let got = read.wait().expect("wait");
        assert!(
            got == want,
            "read {i} sees the writes enqueued before it, and only those"
        );
    }
}

/// A copy within one buffer whose ranges overlap is an error on every
/// backend (and enqueues nothing); disjoint ranges within one buffer, and
/// any ranges across two buffers, copy.
pub fn copies_within_one_buffer(d: Device, _cfg: &Config) {
    let s = pool(d);
    let data = pattern(64, 5);
    let a = Buffer::from_slice(&s, &data).expect("upload");
    for (so, dof, len) in [(0, 8, 16), (8, 0, 16), (4, 4, 1), (0, 0, 64), (10, 13, 7)] {
        let e = a
            .copy_from(&s, &a, so, dof, len)
            .expect_err("overlapping ranges within one buffer");
        assert_eq!(
            e.to_string(),
            format!(
                "copy within one buffer: expected non-overlapping ranges, found {so}..{} and {dof}..{}",
                so + len,
                dof + len
            )
        );
    }
    assert!(
        a.read(&s).expect("read") == data,
        "refused copies changed nothing"
    );
    // Disjoint, touching and unaligned ranges within one buffer; an empty
    // copy overlaps nothing.
    let mut want = data.clone();
    for (so, dof, len) in [(0, 32, 32), (33, 1, 7), (40, 41, 0)] {
        a.copy_from(&s, &a, so, dof, len).expect("disjoint ranges");
        want.copy_within(so..so + len, dof);
    }
    assert!(
        a.read(&s).expect("read") == want,
        "disjoint copies within one buffer"
    );
    // Two buffers: the same ranges are no overlap.
    let other = pattern(64, 6);
    let b = Buffer::from_slice(&s, &other).expect("upload");
    b.copy_from(&s, &a, 0, 8, 16).expect("two buffers");
    let mut want_b = other.clone();
    want_b[8..24].copy_from_slice(&want[0..16]);
    assert!(
        b.read(&s).expect("read") == want_b,
        "copy between two buffers"
    );
}

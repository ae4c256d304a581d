//! The caching allocator on the backend: stream-ordered reuse, record_stream, statistics, out of memory, direct mode, garbage collection.

use super::*;

/// Two streams of `d` that differ.
fn two_streams(d: Device) -> (Stream, Stream) {
    let s1 = pool(d);
    let s2 = (0..64)
        .map(|_| pool(d))
        .find(|s| *s != s1)
        .expect("a second pool stream");
    (s1, s2)
}

/// The hazard of the stream section of PyTorch's CUDA semantics: a buffer
/// allocated on `s1` is read by work on `s2` that has not run yet, and is
/// dropped. Without `record_stream` the block is handed out again at once
/// on `s1` (documented: the caller must say that `s2` uses it); with
/// `record_stream(s2)` it is not reused before `s2`'s work completes, and
/// the data that work reads stays intact. Host backends hold `s2` with a
/// gate (certain); GPU backends with a slow spin, asserting only what
/// cannot race ("a reused block implies `s2`'s work had completed").
pub fn freed_blocks_wait_for_recorded_streams(d: Device, cfg: &Config) {
    const LEN: usize = 3 << 20; // large pool: a segment of its own
    let n = LEN / 4;
    let (s1, s2) = two_streams(d);
    // Sized before the cache is emptied: sizing allocates.
    let (n_spin, iters) = slow_spin(d, cfg);
    crate::memory::empty_cache(d).expect("empty_cache");
    let original: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let newer = vec![-1.0f32; n];
    let gated = gated(cfg);
    for record in [false, true] {
        let hold = Buffer::new_on(&s2, 4 * n_spin as usize).expect("hold");
        let out = Buffer::empty_on(&s2, LEN).expect("out");
        let a = Buffer::from_slice(&s1, &original).expect("a");
        s1.synchronize().expect("upload");
        // s2: busy, then reads `a`.
        let busy = Busy::launch(&s2, cfg, &hold, iters);
        out.copy_from(&s2, &a, 0, 0, LEN).expect("copy on s2");
        if record {
            a.record_stream(&s2).expect("record_stream");
        }
        let a_block = (a.handle().clone(), a.offset());
        drop(a);
        if record && gated {
            // The snapshot shows the block waiting for s2.
            let snapshot = crate::memory::memory_snapshot(d).expect("snapshot");
            let pending: Vec<_> = snapshot
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == crate::memory::BlockState::Pending)
                .collect();
            assert_eq!(pending.len(), 1, "{snapshot:?}");
            assert_eq!(pending[0].stream_uses, [s2]);
            assert_eq!(pending[0].requested_size, LEN as u64);
        }
        let b = Buffer::empty_on(&s1, LEN).expect("b");
        let reused = b.handle().ptr_eq(&a_block.0) && b.offset() == a_block.1;
        let s2_done = s2.query().expect("query");
        b.write(&s1, 0, &newer).expect("overwrite");
        s1.synchronize().expect("overwrite done");
        busy.release();
        s2.synchronize().expect("s2");
        let seen = out.read_as::<f32>(&s2).expect("read out");
        if !record {
            assert!(
                reused,
                "without record_stream the block is handed out again at once"
            );
            if gated {
                assert!(
                    seen == newer,
                    "without record_stream, s2 reads the new owner's data (the hazard)"
                );
            }
        } else {
            if gated {
                assert!(!reused, "a block s2 still uses is not reused");
            }
            assert!(
                !reused || s2_done,
                "a reused block implies s2's work had completed"
            );
            assert!(seen == original, "the data s2's work reads stays intact");
            // Once s2's work is done the pending block is free again.
            drop(b);
            let snapshot = crate::memory::memory_snapshot(d).expect("snapshot");
            assert!(
                snapshot
                    .iter()
                    .flat_map(|s| &s.blocks)
                    .all(|b| b.state != crate::memory::BlockState::Pending),
                "no block is still pending after s2 completed"
            );
        }
    }
}

/// Two buffers carved from one segment, bound together in one launch,
/// give the right results (each backend binds ranges of its allocation).
pub fn suballocated_buffers_bind_together(d: Device, _cfg: &Config) {
    let s = pool(d);
    let n = 1000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32 + 1.0).collect();
    let da = Buffer::from_slice(&s, &a).expect("a");
    let db = Buffer::from_slice(&s, &b).expect("b");
    let dc = Buffer::empty_on(&s, 4 * n).expect("c");
    if crate::api::properties(d)
        .expect("properties")
        .exclusive_allocations
    {
        // Kernels hold whole allocations here: a buffer each.
        assert!(
            !da.handle().ptr_eq(db.handle()) && !db.handle().ptr_eq(dc.handle()),
            "small buffers of a device with exclusive allocations have their own"
        );
    } else {
        assert!(
            da.handle().ptr_eq(db.handle()) && db.handle().ptr_eq(dc.handle()),
            "three small buffers on one stream share a segment"
        );
        assert!(
            da.offset() != db.offset() && db.offset() != dc.offset() && da.offset() != dc.offset()
        );
    }
    assert!([&da, &db, &dc].iter().all(|b| b.offset() % 512 == 0));
    s.launch(
        &VECTOR_ADD,
        VECTOR_ADD.grid_for(n as u64),
        &[&da, &db, &dc],
        &(n as u32).to_le_bytes(),
    )
    .expect("launch");
    let c = dc.read_as::<f32>(&s).expect("read");
    assert_eq!(
        (0..n).find(|&i| c[i] != a[i] + b[i]),
        None,
        "first wrong element"
    );
    // The neighbours are untouched, and copies between blocks of one
    // segment work.
    assert_eq!(da.read_as::<f32>(&s).expect("a"), a);
    assert_eq!(db.read_as::<f32>(&s).expect("b"), b);
    da.copy_from(&s, &db, 8, 4, 400)
        .expect("copy within a segment");
    let got = da.read_as::<f32>(&s).expect("a after copy");
    assert_eq!(got[1..101], b[2..102]);
    assert_eq!(got[0], a[0]);
}

/// Statistics follow allocations and frees (PyTorch's keys), peaks reset,
/// `empty_cache` gives free segments back, the summary and the snapshot
/// describe them, and a new buffer is zeroed even on a reused block.
pub fn memory_statistics_follow_buffers(d: Device, _cfg: &Config) {
    use crate::memory;
    let s = pool(d);
    memory::empty_cache(d).expect("empty_cache");
    let before = memory::memory_stats(d).expect("stats");
    let key = |m: &std::collections::BTreeMap<String, i64>, k: &str| {
        *m.get(k).unwrap_or_else(|| panic!("key {k}"))
    };
    let b = Buffer::empty_on(&s, 1000).expect("small");
    let big = Buffer::empty_on(&s, 4 << 20).expect("large");
    let m = memory::memory_stats(d).expect("stats");
    let delta = |k: &str| key(&m, k) - key(&before, k);
    assert_eq!(delta("allocated_bytes.all.current"), 1024 + (4 << 20));
    assert_eq!(delta("allocated_bytes.small_pool.current"), 1024);
    assert_eq!(delta("allocated_bytes.large_pool.current"), 4 << 20);
    assert_eq!(delta("requested_bytes.all.current"), 1000 + (4 << 20));
    assert_eq!(delta("allocation.all.current"), 2);
    assert_eq!(delta("active_bytes.all.current"), 1024 + (4 << 20));
    assert!(delta("reserved_bytes.large_pool.current") >= 4 << 20);
    assert_eq!(
        memory::memory_allocated(d).expect("allocated") as i64,
        key(&m, "allocated_bytes.all.current")
    );
    assert!(
        memory::max_memory_allocated(d).expect("peak") >= memory::memory_allocated(d).expect("cur")
    );
    assert!(
        memory::memory_reserved(d).expect("reserved") >= memory::memory_allocated(d).expect("cur")
    );
    let snap = memory::memory_snapshot(d).expect("snapshot");
    let seg = snap
        .iter()
        .find(|seg| seg.blocks.iter().any(|b| b.requested_size == 4 << 20))
        .expect("the large block's segment");
    assert!(!seg.small_pool);
    assert_eq!(seg.stream, s);
    assert_eq!(seg.blocks[0].state, memory::BlockState::Active);
    drop(big);
    let after_free = memory::memory_stats(d).expect("stats");
    assert_eq!(
        key(&after_free, "allocated_bytes.all.current"),
        key(&before, "allocated_bytes.all.current") + 1024
    );
    assert_eq!(
        key(&after_free, "reserved_bytes.all.current"),
        key(&m, "reserved_bytes.all.current"),
        "a freed block stays cached"
    );
    memory::reset_peak_memory_stats(d).expect("reset");
    assert_eq!(
        memory::max_memory_allocated(d).expect("peak"),
        memory::memory_allocated(d).expect("current")
    );
    memory::empty_cache(d).expect("empty_cache");
    let emptied = memory::memory_stats(d).expect("stats");
    assert_eq!(
        key(&emptied, "reserved_bytes.large_pool.current"),
        key(&before, "reserved_bytes.large_pool.current"),
        "empty_cache released the free large segment"
    );
    assert!(key(&emptied, "num_device_free") > key(&before, "num_device_free"));
    let summary = memory::memory_summary(d).expect("summary");
    assert!(summary.contains(&d.to_string()), "{summary}");
    assert!(summary.contains("Allocated memory") && summary.contains("from small pool"));
    // A zeroed buffer on a reused (dirty) block.
    b.write(&s, 0, &[0xabu8; 1000]).expect("dirty");
    s.synchronize().expect("dirty");
    drop(b);
    let z = Buffer::new_on(&s, 1000).expect("zeroed");
    assert!(z.read(&s).expect("read").iter().all(|&x| x == 0), "zeroed");
}

/// Out of memory under a small budget: the cache is freed and the
/// allocation retried once (`num_alloc_retries`); then a clear error with
/// what was asked and what is allocated and reserved (`num_ooms`).
pub fn out_of_memory_retries_then_reports(d: Device, _cfg: &Config) {
    use crate::memory;
    struct Restore(Device, crate::memory::AllocConfig);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = crate::memory::set_config(self.0, self.1);
        }
    }
    let (s, s2) = two_streams(d);
    let _restore = Restore(d, memory::config(d).expect("config"));
    memory::empty_cache(d).expect("empty_cache");
    let base = memory::memory_reserved(d).expect("reserved");
    let big = memory::segment_for(d, 3 << 20).expect("segment size");
    memory::set_memory_budget(d, Some(base + big)).expect("budget");
    let st0 = memory::stats(d).expect("stats");
    // A segment filling the budget (4 MiB, or 3 MiB where every buffer
    // has its own), freed into the cache.
    drop(Buffer::empty_on(&s, 3 << 20).expect("fits the budget"));
    // A small segment (on another stream) needs more: the cached segment
    // is released and the allocation retried, successfully.
    let small = Buffer::empty_on(&s2, 1000).expect("fits after a retry");
    let st1 = memory::stats(d).expect("stats");
    assert_eq!(st1.num_alloc_retries, st0.num_alloc_retries + 1);
    assert_eq!(st1.num_ooms, st0.num_ooms);
    // Cached again; it is released for the next request's retry.
    drop(small);
    // 5 MiB never fits 4 MiB: retried, then out of memory.
    let e = Buffer::empty_on(&s, 5 << 20).expect_err("over the budget");
    let st2 = memory::stats(d).expect("stats");
    assert_eq!(st2.num_alloc_retries, st1.num_alloc_retries + 1);
    assert_eq!(st2.num_ooms, st1.num_ooms + 1);
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let msg = e.to_string();
    for part in [
        format!("out of memory on {d}: tried to allocate 5242880 bytes (5.00 MiB)"),
        "a memory budget of".to_owned(),
        "is allocated by buffers".to_owned(),
        "is reserved by Keel's caching allocator".to_owned(),
        "max_split_size_mb".to_owned(),
    ] {
        assert!(msg.contains(&part), "{part:?} in {msg}");
    }
    let m = memory::memory_stats(d).expect("stats");
    assert_eq!(m["num_ooms"], st2.num_ooms as i64);
    assert_eq!(m["num_alloc_retries"], st2.num_alloc_retries as i64);
}

/// `backend:direct`: every buffer is its own backend allocation, given back
/// when the buffer is dropped (nothing cached).
pub fn direct_mode_goes_to_the_backend(d: Device, _cfg: &Config) {
    use crate::memory::{self, AllocBackend, AllocConfig};
    let s = pool(d);
    let saved = memory::config(d).expect("config");
    memory::set_config(
        d,
        AllocConfig {
            backend: AllocBackend::Direct,
            ..saved
        },
    )
    .expect("direct");
    let run = || {
        let st0 = memory::stats(d).expect("stats");
        let a = Buffer::from_slice(&s, &[1.0f32, 2.0, 3.0]).expect("a");
        let b = Buffer::from_slice(&s, &[10.0f32, 20.0, 30.0]).expect("b");
        assert!(!a.handle().ptr_eq(b.handle()), "separate allocations");
        assert_eq!(a.offset(), 0);
        s.launch(&SAXPY, SAXPY.grid_for(3), &[&a, &b], &saxpy_params(3, 2.0))
            .expect("saxpy");
        assert_eq!(b.read_as::<f32>(&s).expect("read"), [12.0, 24.0, 36.0]);
        let st1 = memory::stats(d).expect("stats");
        assert_eq!(st1.num_device_alloc, st0.num_device_alloc + 2);
        drop((a, b));
        let st2 = memory::stats(d).expect("stats");
        assert_eq!(st2.num_device_free, st0.num_device_free + 2);
        assert_eq!(
            st2.reserved_bytes.all.current,
            st0.reserved_bytes.all.current
        );
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    memory::set_config(d, saved).expect("restore");
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

/// `garbage_collection_threshold`: before reserving a new segment, free
/// cached segments are released while the reserved memory would exceed the
/// threshold's share of the capacity (here the budget), with no
/// out-of-memory retry.
pub fn garbage_collection_releases_before_growing(d: Device, _cfg: &Config) {
    use crate::memory;
    let s = pool(d);
    let saved = memory::config(d).expect("config");
    memory::empty_cache(d).expect("empty_cache");
    let base = memory::memory_reserved(d).expect("reserved");
    // 4 MiB and 2 MiB segments, or 3 MiB and 1 KiB where every buffer has
    // its own.
    let (big, small) = (
        memory::segment_for(d, 3 << 20).expect("segment size"),
        memory::segment_for(d, 1000).expect("segment size"),
    );
    memory::set_config(
        d,
        memory::AllocConfig {
            garbage_collection_threshold: Some(0.5),
            memory_budget: Some(base + 2 * big),
            ..saved
        },
    )
    .expect("config");
    let run = || {
        drop(Buffer::empty_on(&s, 3 << 20).expect("a big segment"));
        let st0 = memory::stats(d).expect("stats");
        assert_eq!(memory::memory_reserved(d).expect("reserved"), base + big);
        let _small = Buffer::empty_on(&s, 1000).expect("a small segment");
        let st1 = memory::stats(d).expect("stats");
        assert_eq!(
            memory::memory_reserved(d).expect("reserved"),
            base + small,
            "the free big segment was released first"
        );
        assert_eq!(st1.num_device_free, st0.num_device_free + 1);
        assert_eq!(st1.num_alloc_retries, st0.num_alloc_retries, "no retry");
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    memory::set_config(d, saved).expect("restore");
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

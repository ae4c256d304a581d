//! The allocator's bookkeeping under random allocation sequences
//! (proptest), with no device: blocks tile their segments, live blocks never
//! overlap, free neighbours are always merged, the statistics equal the sum
//! of the blocks, and releasing the cache returns every free segment.

use proptest::prelude::*;

use super::allocator::{
    Allocation, BlockState, LARGE_BUFFER, MIN_BLOCK, Policy, Pools, SMALL_SEGMENT, SMALL_SIZE,
    SegmentSnapshot, StatArray, round_size,
};
use crate::core::{Device, Stream};

fn stream(i: u8) -> Stream {
    Stream::new(Device::cpu(), i64::from(i) * 2 + 1)
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { len: u64, stream: u8 },
    Free(usize),
    Use(usize, u8),
    Complete(usize),
    EmptyCache,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..=4096, 0u8..2).prop_map(|(len, stream)| Op::Alloc { len, stream }),
        4 => (4097u64..=SMALL_SIZE, 0u8..2).prop_map(|(len, stream)| Op::Alloc { len, stream }),
        2 => (SMALL_SIZE + 1..=40 << 20, 0u8..2).prop_map(|(len, stream)| Op::Alloc { len, stream }),
        8 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), 0u8..3).prop_map(|(i, s)| Op::Use(i, s)),
        2 => any::<usize>().prop_map(Op::Complete),
        1 => Just(Op::EmptyCache),
    ]
}

struct Live {
    a: Allocation,
    len: u64,
    stream: Stream,
}

/// Sums over the snapshot, per pool: (all, small, large).
fn sums(snap: &[SegmentSnapshot], f: impl Fn(&SegmentSnapshot) -> i64) -> [i64; 3] {
    let small: i64 = snap.iter().filter(|s| s.small_pool).map(&f).sum();
    let large: i64 = snap.iter().filter(|s| !s.small_pool).map(&f).sum();
    [small + large, small, large]
}

fn current(a: &StatArray) -> [i64; 3] {
    [a.all.current, a.small_pool.current, a.large_pool.current]
}

fn check(pools: &Pools<()>, live: &[Live], pending: &[(Allocation, u64)]) {
    let snap = pools.snapshot();
    for s in &snap {
        // Blocks tile the segment, in order, 512-byte aligned.
        let mut at = 0;
        for b in &s.blocks {
            assert_eq!(b.offset, at, "blocks tile {s:?}");
            assert_eq!(b.address, s.address + b.offset);
            assert!(b.size > 0 && b.size.is_multiple_of(MIN_BLOCK));
            at += b.size;
        }
        assert_eq!(at, s.size, "blocks cover {s:?}");
        // Free neighbours are merged.
        for w in s.blocks.windows(2) {
            assert!(
                !(w[0].state == BlockState::Free && w[1].state == BlockState::Free),
                "adjacent free blocks in {s:?}"
            );
        }
        if pools.policy().own_segments {
            assert_eq!(s.blocks.len(), 1, "a block per segment {s:?}");
        } else if s.small_pool {
            assert_eq!(s.size, SMALL_SEGMENT);
        }
    }
    // The free lists hold exactly the free blocks.
    let mut free: Vec<(bool, u64, u64)> = snap
        .iter()
        .flat_map(|s| {
            s.blocks
                .iter()
                .filter(|b| b.state == BlockState::Free)
                .map(move |b| (s.small_pool, b.address, b.size))
        })
        .collect();
    free.sort_unstable();
    assert_eq!(pools.free_list(), free, "free lists");
    // Segments do not overlap in the address space.
    for w in snap.windows(2) {
        assert!(w[0].address + w[0].size <= w[1].address);
    }
    // Every live allocation is an active block of its stream, big enough.
    let blocks: Vec<(&SegmentSnapshot, &super::allocator::BlockSnapshot)> = snap
        .iter()
        .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
        .collect();
    for l in live {
        let (s, b) = blocks
            .iter()
            .find(|(_, b)| b.address == l.a.addr)
            .expect("live block present");
        assert_eq!(b.state, BlockState::Active);
        assert_eq!(b.size, l.a.size);
        assert!(b.size >= l.len && b.requested_size == l.len);
        assert_eq!(s.stream, l.stream, "a block serves its segment's stream");
    }
    for (p, _) in pending {
        let (_, b) = blocks
            .iter()
            .find(|(_, b)| b.address == p.addr)
            .expect("pending block present");
        assert_eq!(b.state, BlockState::Pending);
    }
    // No two live blocks overlap (their ranges in the address space).
    let mut ranges: Vec<(u64, u64)> = live
        .iter()
        .map(|l| (l.a.addr, l.a.addr + l.a.size))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].1 <= w[1].0, "live blocks overlap: {w:?}");
    }
    let active_count = blocks
        .iter()
        .filter(|(_, b)| b.state == BlockState::Active)
        .count();
    assert_eq!(active_count, live.len());
    // Statistics equal the sums of the blocks.
    let st = pools.stats();
    let of_state = |pred: &dyn Fn(BlockState) -> bool| {
        sums(&snap, |s| {
            s.blocks
                .iter()
                .filter(|b| pred(b.state))
                .map(|b| b.size as i64)
                .sum()
        })
    };
    assert_eq!(
        current(&st.allocated_bytes),
        of_state(&|b| b == BlockState::Active)
    );
    assert_eq!(
        current(&st.active_bytes),
        of_state(&|b| b != BlockState::Free)
    );
    assert_eq!(current(&st.reserved_bytes), sums(&snap, |s| s.size as i64));
    assert_eq!(current(&st.segment), sums(&snap, |_| 1));
    assert_eq!(
        current(&st.allocation),
        sums(&snap, |s| s
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Active)
            .count() as i64)
    );
    assert_eq!(
        current(&st.requested_bytes),
        sums(&snap, |s| s
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Active)
            .map(|b| b.requested_size as i64)
            .sum())
    );
    assert_eq!(
        current(&st.inactive_split_bytes),
        sums(&snap, |s| {
            if s.blocks.len() > 1 {
                s.blocks
                    .iter()
                    .filter(|b| b.state == BlockState::Free)
                    .map(|b| b.size as i64)
                    .sum()
            } else {
                0
            }
        })
    );
    for a in [&st.allocated_bytes, &st.reserved_bytes, &st.active_bytes] {
        assert!(a.all.peak >= a.all.current);
        assert_eq!(a.all.current, a.small_pool.current + a.large_pool.current);
    }
}

fn alloc(pools: &mut Pools<()>, len: u64, s: Stream) -> Allocation {
    if let Some(a) = pools.alloc_cached(len, s) {
        return a;
    }
    let size = round_size(len);
    pools.release_smaller(s, size);
    let sid = pools.add_segment((), pools.segment_size(size), s, size <= SMALL_SIZE);
    pools.alloc_in(sid, len)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_the_invariants(
        ops in proptest::collection::vec(op(), 1..120),
        split_limit in prop_oneof![Just(None), (2u64..=32).prop_map(Some)],
        own_segments in any::<bool>(),
    ) {
        let policy = Policy {
            max_split_size: split_limit.map_or(u64::MAX, |m| m << 20),
            own_segments,
        };
        let mut pools: Pools<()> = Pools::new(policy);
        let mut live: Vec<Live> = Vec::new();
        let mut pending: Vec<(Allocation, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { len, stream: s } => {
                    let a = alloc(&mut pools, len, stream(s));
                    live.push(Live { a, len, stream: stream(s) });
                }
                Op::Free(i) if !live.is_empty() => {
                    let l = live.swap_remove(i % live.len());
                    if pools.free(l.a.block).is_some() {
                        pending.push((l.a, l.len));
                    }
                }
                Op::Use(i, s) if !live.is_empty() => {
                    let l = &live[i % live.len()];
                    pools.record_use(l.a.block, stream(s));
                }
                Op::Complete(i) if !pending.is_empty() => {
                    let (a, _) = pending.swap_remove(i % pending.len());
                    pools.release_pending(a.block);
                }
                Op::EmptyCache => {
                    let before = pools.stats().reserved_bytes.all.current;
                    let released = pools.release_free_segments(|_| true);
                    let freed: u64 = released.iter().map(|r| r.size).sum();
                    prop_assert_eq!(before - freed as i64, pools.stats().reserved_bytes.all.current);
                    // Every free segment went back.
                    for s in pools.snapshot() {
                        prop_assert!(
                            !(s.blocks.len() == 1 && s.blocks[0].state == BlockState::Free),
                            "a free segment stayed cached: {:?}", s
                        );
                    }
                }
                _ => {}
            }
            check(&pools, &live, &pending);
        }
        // Freeing everything, completing the pending uses and emptying the
        // cache returns every byte.
        for l in live.drain(..) {
            if pools.free(l.a.block).is_some() {
                pending.push((l.a, l.len));
            }
        }
        for (a, _) in pending.drain(..) {
            pools.release_pending(a.block);
        }
        check(&pools, &live, &pending);
        pools.release_free_segments(|_| true);
        prop_assert!(pools.snapshot().is_empty());
        let st = pools.stats();
        prop_assert_eq!(st.reserved_bytes.all.current, 0);
        prop_assert_eq!(st.allocated_bytes.all.current, 0);
        prop_assert_eq!(st.num_device_alloc, st.num_device_free);
    }
}

#[test]
fn small_requests_share_a_segment_and_reuse_freed_blocks() {
    let mut p: Pools<()> = Pools::new(Policy::default());
    let s = stream(0);
    let a = alloc(&mut p, 100, s);
    let b = alloc(&mut p, 4096, s);
    assert_eq!(a.segment, b.segment, "one 2 MiB segment");
    assert_eq!((a.offset, a.size), (0, 512));
    assert_eq!((b.offset, b.size), (512, 4096));
    assert_eq!(p.stats().reserved_bytes.all.current, SMALL_SEGMENT as i64);
    assert_eq!(p.free(a.block), None);
    // Best fit: the 512-byte hole, not the big tail.
    let c = alloc(&mut p, 300, s);
    assert_eq!(c.addr, a.addr);
    // Another stream gets its own segment.
    let d = alloc(&mut p, 300, stream(1));
    assert_ne!(d.segment, a.segment);
}

/// Host memory's policy: every block its own segment of its rounded
/// size, never split; a free one serves requests of at least half its
/// size, best fit; a request no free block serves first releases its
/// stream's smaller free blocks, up to its size.
#[test]
fn own_segments_give_every_block_an_allocation() {
    let mut p: Pools<()> = Pools::new(Policy {
        own_segments: true,
        ..Policy::default()
    });
    let s = stream(0);
    let a = alloc(&mut p, 100, s);
    let b = alloc(&mut p, 4096, s);
    assert_ne!(a.segment, b.segment, "a segment each");
    assert_eq!((a.offset, a.size, b.offset, b.size), (0, 512, 0, 4096));
    assert_eq!(p.stats().reserved_bytes.all.current, 512 + 4096);
    assert_eq!(p.stats().segment.all.current, 2);
    // Freed blocks are cached whole; best fit.
    assert_eq!(p.free(a.block), None);
    assert_eq!(p.free(b.block), None);
    let c = alloc(&mut p, 300, s);
    assert_eq!((c.segment, c.size), (a.segment, 512));
    // 1536 bytes are less than half the free 4096: a new segment.
    let d = alloc(&mut p, 1500, s);
    assert_ne!(d.segment, b.segment);
    assert_eq!(d.size, 1536);
    // 3072 bytes take the 4096-byte block whole.
    let e = alloc(&mut p, 3000, s);
    assert_eq!((e.segment, e.size), (b.segment, 4096));
    assert_eq!(p.stats().inactive_split.all.current, 0);
    assert_eq!(p.stats().reserved_bytes.all.current, 512 + 1536 + 4096);
    // 8192 bytes: no free block serves it; the smaller free ones (1536,
    // then 512) are released before it is reserved.
    assert_eq!(p.free(c.block), None);
    assert_eq!(p.free(d.block), None);
    let released = p.release_smaller(s, 8192);
    assert_eq!(
        released.iter().map(|r| r.size).collect::<Vec<_>>(),
        [1536, 512]
    );
    assert_eq!(p.stats().reserved_bytes.all.current, 4096);
    // Another stream's free blocks are not touched.
    let f = alloc(&mut p, 512, stream(1));
    assert_eq!(p.free(f.block), None);
    assert!(p.release_smaller(s, 8192).is_empty());
    // Large requests too: their own size, not rounded to 2 MiB.
    let g = alloc(&mut p, (3 << 20) + 1, s);
    assert_eq!(g.size, (3 << 20) + 512);
    for x in [e, g] {
        assert_eq!(p.free(x.block), None);
    }
    assert_eq!(p.release_free_segments(|_| true).len(), 3);
    assert_eq!(p.stats().reserved_bytes.all.current, 0);
    // Shared segments release nothing this way.
    let mut shared: Pools<()> = Pools::new(Policy::default());
    let h = alloc(&mut shared, 512, s);
    assert_eq!(shared.free(h.block), None);
    assert!(shared.release_smaller(s, 8192).is_empty());
}

/// The training-step trace (`testing::alloc_trace`) replayed on the
/// pools alone, under each policy: peak reserved / peak allocated.
/// Both stay within PyTorch's 1.1-1.3 on such a trace: with a segment per
/// block (host memory), reusing blocks up to twice a request's size and
/// trading smaller free blocks for a new size make up for not splitting.
#[cfg(feature = "testing")]
#[test]
fn training_step_fragmentation_by_policy() {
    use crate::testing::alloc_trace::{TraceOp, training_steps};
    let trace = training_steps(3);
    let mut ratios = Vec::new();
    for (own_segments, bound) in [(false, 1.3), (true, 1.3)] {
        let mut p: Pools<()> = Pools::new(Policy {
            own_segments,
            ..Policy::default()
        });
        let mut live: Vec<Option<Allocation>> = Vec::new();
        for op in &trace {
            match *op {
                TraceOp::Alloc {
                    id,
                    bytes,
                    stream: s,
                } => {
                    if live.len() <= id {
                        live.resize(id + 1, None);
                    }
                    live[id] = Some(alloc(&mut p, bytes as u64, stream(s as u8)));
                }
                TraceOp::Free { id } => {
                    let a = live[id].take().expect("a live buffer");
                    assert_eq!(p.free(a.block), None);
                }
            }
        }
        let st = p.stats();
        let ratio = st.reserved_bytes.all.peak as f64 / st.allocated_bytes.all.peak as f64;
        assert!(
            ratio <= bound,
            "own_segments {own_segments}: peak reserved / peak allocated {ratio:.3}, expected at most {bound}"
        );
        let requested = st.reserved_bytes.all.peak as f64 / st.requested_bytes.all.peak as f64;
        ratios.push((ratio, requested));
    }
    println!(
        "peak reserved / peak allocated (/ peak requested): shared {:.3} ({:.3}), own {:.3} ({:.3})",
        ratios[0].0, ratios[0].1, ratios[1].0, ratios[1].1
    );
}

#[test]
fn large_requests_get_their_own_rounded_segment() {
    let mut p: Pools<()> = Pools::new(Policy::default());
    let a = alloc(&mut p, (3 << 20) + 1, stream(0));
    assert!(!a.small);
    assert_eq!(p.stats().reserved_bytes.large_pool.current, 4 << 20);
    assert_eq!(p.free(a.block), None);
    // A 1.5 MiB request reuses it: the 2.5 MiB rest is split off.
    let b = alloc(&mut p, 3 << 19, stream(0));
    assert_eq!(b.addr, a.addr);
    assert_eq!(p.stats().segment.all.current, 1);
    assert_eq!(p.snapshot()[0].blocks.len(), 2);
}

#[test]
fn oversize_blocks_are_never_split() {
    let mut p: Pools<()> = Pools::new(Policy {
        own_segments: false,
        max_split_size: 8 << 20,
    });
    let a = alloc(&mut p, 10 << 20, stream(0));
    p.free(a.block);
    // A smaller (non-oversize) request does not take the oversize block.
    let b = alloc(&mut p, 2 << 20, stream(0));
    assert_ne!(b.segment, a.segment);
    // An oversize request takes it whole, unsplit.
    let c = alloc(&mut p, 9 << 20, stream(0));
    assert_eq!((c.addr, c.size), (a.addr, 10 << 20));
    assert_eq!(p.stats().oversize_allocations.current, 1);
    p.free(c.block);
    // Far bigger blocks than an oversize request are left alone.
    let big = alloc(&mut p, 40 << 20, stream(0));
    p.free(big.block);
    let d = alloc(&mut p, 9 << 20, stream(0));
    assert_eq!(d.addr, a.addr, "best fit among the oversize blocks");
    const { assert!(40 << 20 >= (9 << 20) + LARGE_BUFFER) };
}

#[test]
fn pending_blocks_wait_for_release() {
    let mut p: Pools<()> = Pools::new(Policy::default());
    let a = alloc(&mut p, 1000, stream(0));
    p.record_use(a.block, stream(0)); // its own stream: ignored
    p.record_use(a.block, stream(1));
    assert_eq!(p.free(a.block), Some(vec![stream(1)]));
    let b = alloc(&mut p, 1000, stream(0));
    assert_ne!(b.addr, a.addr, "a pending block is not reused");
    assert_eq!(p.stats().allocated_bytes.all.current, 1024);
    assert_eq!(p.stats().active_bytes.all.current, 2048);
    p.release_pending(a.block);
    let c = alloc(&mut p, 1000, stream(0));
    assert_eq!(c.addr, a.addr);
}

#[test]
fn summary_table_lines_up() {
    let mut p: Pools<()> = Pools::new(Policy::default());
    let a = alloc(&mut p, 1000, stream(0));
    let _b = alloc(&mut p, 5 << 20, stream(0));
    p.free(a.block);
    let table = super::stats::memory_summary_of(Device::cpu(), p.stats());
    let widths: Vec<usize> = table.lines().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|&w| w == 77), "{table}");
    assert!(
        table.contains("| Allocated memory      |   6.00 MiB |"),
        "{table}"
    );
    assert!(
        table.contains("| Reserved segments     |         2  |"),
        "{table}"
    );
    let m = super::stats::memory_stats_of(p.stats());
    assert_eq!(m["allocated_bytes.all.current"], 6 << 20);
    assert_eq!(m["allocated_bytes.all.peak"], (6 << 20) + 1024);
    assert_eq!(m["reserved_bytes.small_pool.current"], 2 << 20);
    assert_eq!(m["num_sync_all_streams"], 0);
    assert_eq!(m.len(), 9 * 3 * 4 + 2 * 4 + 5);
}

/// The device allocator on a real CPU device, under random sequences of
/// allocations, frees, other streams' uses, cache emptying (from this and
/// other threads) and peak resets: every check finds the statistics equal
/// to a model of the buffers (current, peak and totals) and to the sums of
/// the snapshot's blocks.
mod statistics {
    use proptest::prelude::*;

    use super::super::{BlockState, DeviceAllocator, standalone};
    use crate::backend::BufferHandle;
    use crate::core::{Device, DeviceType, Stream};

    fn cpu0() -> Device {
        Device::new(DeviceType::Cpu, 0).expect("cpu:0")
    }

    struct Held {
        handle: BufferHandle,
        block: super::super::Block,
        len: usize,
        offset: usize,
        /// The block's rounded size and stream, as the pools hold them.
        size: u64,
        stream: crate::core::StreamId,
    }

    fn streams() -> [Stream; 2] {
        let d = cpu0();
        let s1 = crate::api::get_stream_from_pool(d, false).expect("pool");
        let s2 = (0..64)
            .map(|_| crate::api::get_stream_from_pool(d, false).expect("pool"))
            .find(|s| *s != s1)
            .expect("a second pool stream");
        [s1, s2]
    }

    fn alloc(a: &DeviceAllocator, len: usize, s: Stream) -> Held {
        let x = a.allocate(len, s).expect("allocate");
        let id = x.block.id().expect("a block");
        let state = super::super::lock(&a.state);
        let (size, stream) = (state.pools.block_size(id), state.pools.stream_of(id).id());
        drop(state);
        Held {
            handle: x.handle,
            block: x.block,
            len,
            offset: x.offset,
            size,
            stream,
        }
    }

    fn free(a: &DeviceAllocator, h: Held) {
        a.free(h.block.id().expect("a block"), h.handle, h.offset);
    }

    #[derive(Default)]
    struct Model {
        current: i64,
        peak: i64,
        requested: i64,
        allocs: u64,
        frees: u64,
        requested_total: u64,
    }

    fn check(a: &DeviceAllocator, m: &Model) {
        let snap = a.snapshot();
        let st = a.stats();
        let blocks = || snap.iter().flat_map(|s| &s.blocks);
        let sum = |f: &dyn Fn(BlockState) -> bool| -> i64 {
            blocks().filter(|b| f(b.state)).map(|b| b.size as i64).sum()
        };
        assert_eq!(st.allocated_bytes.all.current, m.current);
        assert_eq!(st.allocated_bytes.all.peak, m.peak);
        assert_eq!(st.requested_bytes.all.current, m.requested);
        assert_eq!(st.allocation.all.allocated, m.allocs);
        assert_eq!(st.allocation.all.freed, m.frees);
        assert_eq!(st.active.all.allocated, m.allocs);
        assert_eq!(st.requested_bytes.all.allocated, m.requested_total);
        assert_eq!(sum(&|s| s == BlockState::Active), m.current);
        assert_eq!(sum(&|s| s != BlockState::Free), st.active_bytes.all.current);
        assert_eq!(
            snap.iter().map(|s| s.size as i64).sum::<i64>(),
            st.reserved_bytes.all.current
        );
        let split_free: Vec<_> = snap
            .iter()
            .filter(|s| s.blocks.len() > 1)
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::Free)
            .collect();
        assert_eq!(split_free.len() as i64, st.inactive_split.all.current);
        for s in &snap {
            for w in s.blocks.windows(2) {
                assert!(
                    !(w[0].state == BlockState::Free && w[1].state == BlockState::Free),
                    "cached blocks were merged back: {s:?}"
                );
            }
        }
        for x in [&st.allocation, &st.allocated_bytes, &st.active_bytes] {
            assert_eq!(
                x.all.allocated,
                x.small_pool.allocated + x.large_pool.allocated
            );
            assert_eq!(x.all.freed, x.small_pool.freed + x.large_pool.freed);
            assert_eq!(x.all.current, x.small_pool.current + x.large_pool.current);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc { len: usize, stream: u8 },
        Free(usize),
        Use(usize),
        Check,
        EmptyCache,
        EmptyCacheElsewhere,
        ResetPeaks,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (prop::sample::select(vec![512usize, 3000, 4096, 70_000, 3 << 20]), 0u8..2)
                .prop_map(|(len, stream)| Op::Alloc { len, stream }),
            8 => any::<usize>().prop_map(Op::Free),
            1 => any::<usize>().prop_map(Op::Use),
            2 => Just(Op::Check),
            1 => Just(Op::EmptyCache),
            1 => Just(Op::EmptyCacheElsewhere),
            1 => Just(Op::ResetPeaks),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn the_statistics_follow_a_model_of_the_buffers(
            ops in proptest::collection::vec(op(), 1..150),
        ) {
            let a = standalone(cpu0());
            let ss = streams();
            let mut live: Vec<Held> = Vec::new();
            let mut m = Model::default();
            for op in ops {
                match op {
                    Op::Alloc { len, stream } => {
                        let h = alloc(a, len, ss[usize::from(stream)]);
                        m.current += h.size as i64;
                        m.peak = m.peak.max(m.current);
                        m.requested += len as i64;
                        m.allocs += 1;
                        m.requested_total += len as u64;
                        live.push(h);
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let h = live.swap_remove(i % live.len());
                        m.current -= h.size as i64;
                        m.requested -= h.len as i64;
                        m.frees += 1;
                        free(a, h);
                    }
                    Op::Use(i) if !live.is_empty() => {
                        let h = &live[i % live.len()];
                        let other = if h.stream == ss[0].id() { ss[1] } else { ss[0] };
                        a.record_stream(&h.handle, h.block.id().expect("a block"), other).expect("record_stream");
                    }
                    Op::Check => check(a, &m),
                    Op::EmptyCache => a.empty_cache(),
                    Op::EmptyCacheElsewhere => {
                        std::thread::scope(|t| {
                            t.spawn(|| a.empty_cache());
                        });
                    }
                    Op::ResetPeaks => {
                        a.reset_peaks();
                        m.peak = m.current;
                    }
                    _ => {}
                }
            }
            check(a, &m);
            for h in live.drain(..) {
                m.current -= h.size as i64;
                m.requested -= h.len as i64;
                m.frees += 1;
                free(a, h);
            }
            check(a, &m);
            // Pending uses complete (nothing runs on the CPU streams).
            for s in ss {
                s.synchronize().expect("sync");
            }
            a.empty_cache();
            prop_assert!(a.snapshot().is_empty(), "{:?}", a.snapshot());
            let st = a.stats();
            prop_assert_eq!(st.reserved_bytes.all.current, 0);
            prop_assert_eq!(st.num_device_alloc, st.num_device_free);
        }
    }
}

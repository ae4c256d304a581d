//! PyTorch memory snapshots (`keel_trace::snapshot`): the real GPT-2
//! snapshot of an H200 (`tests/data/import/gpt2_train_memory_snapshot.pickle.gz`,
//! the `torch.cuda.memory._dump_snapshot` of the run whose Kineto trace is
//! beside it) with exact counts, small pickles covering every opcode the
//! reader supports, old and damaged snapshots, the allocator replay checked
//! against the final state, the link to the profiler trace, and thousands
//! of mutated inputs.
//!
//! The expected numbers of the real snapshot come from Python's own
//! `pickle.load` of the same file (a one-off run while writing this test:
//! counts of `segments`, blocks by `state`, entries by `action`, distinct
//! `(name, filename, line)` frames and distinct stacks; the curves as
//! PyTorch's viewer sums them: `alloc` adds the entry's `size`,
//! `free_completed` subtracts it, starting from the final state's
//! `requested_size`s less the history's net; the live blocks at the peak
//! by replaying forward from the blocks PyTorch's viewer calls "initially
//! allocated"). The pickles of `tests/data/pickle/` and their expected
//! values come from `tests/data/pickle/make_pickles.py`.

mod common;

use common::{Rng, mutate};

use std::path::PathBuf;

use keel_trace::snapshot::pickle::{Item, Pickle, Value};
use keel_trace::snapshot::{
    self, Action, BlockState, Snapshot, StackId, largest_blocks, load_snapshot, operator_at,
    read_snapshot, state_at, timeline,
};

fn data(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(path)
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(data(path)).expect("fixture")
}

const REAL: &str = "import/gpt2_train_memory_snapshot.pickle.gz";

fn real() -> Snapshot {
    load_snapshot(&data(REAL)).expect("the real snapshot loads")
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

#[test]
fn the_real_snapshot_has_what_python_reads() {
    let s = real();
    assert_eq!(s.segments.len(), 138);
    let blocks: Vec<_> = s.segments.iter().flat_map(|g| &g.blocks).collect();
    assert_eq!(blocks.len(), 755);
    let count = |st| blocks.iter().filter(|b| b.state == st).count();
    assert_eq!(count(BlockState::ActiveAllocated), 595);
    assert_eq!(count(BlockState::ActivePendingFree), 1);
    assert_eq!(count(BlockState::Inactive), 159);
    assert_eq!(s.segments.iter().filter(|g| g.small).count(), 4);
    assert_eq!(
        s.segments.iter().map(|g| g.total_size).sum::<u64>(),
        8_084_520_960
    );
    // Blocks tile their segments, and the segments' own totals agree.
    for g in &s.segments {
        let allocated: u64 = g
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size)
            .sum();
        assert_eq!(g.allocated_size, Some(allocated));
        let mut at = g.address;
        for b in &g.blocks {
            assert_eq!(b.address, at);
            at += b.size;
        }
        assert_eq!(at, g.address + g.total_size);
    }
    assert_eq!(s.device_traces.len(), 1);
    let trace = &s.device_traces[0];
    assert_eq!(trace.len(), 15_983);
    let actions = |a| trace.iter().filter(|e| e.action == a).count();
    assert_eq!(actions(Action::Alloc), 5587);
    assert_eq!(actions(Action::FreeRequested), 5140);
    assert_eq!(actions(Action::FreeCompleted), 5139);
    assert_eq!(actions(Action::SegmentAlloc), 117);
    assert_eq!(trace[0].time_us, Some(1_795_840_242_906_160));
    assert_eq!(trace[15_982].time_us, Some(1_795_840_245_331_061));
    assert!(
        trace.windows(2).all(|w| w[0].time_us <= w[1].time_us),
        "history in time order"
    );
    // Frames and stacks interned: 555 distinct frames in 251 distinct
    // stacks (the empty one included), for 16,876 stacks in the file.
    assert_eq!(s.frames().len(), 555);
    assert_eq!(s.stack_count(), 251);
    let first = &trace[0];
    assert_eq!(first.action, Action::SegmentAlloc);
    assert_eq!(first.addr, 140_482_464_186_368);
    assert_eq!(first.size, 2_097_152);
    assert_eq!(first.stream, 1_176_774_272);
    let frames: Vec<_> = s.stack(first.stack).collect();
    assert_eq!(frames.len(), 45);
    assert_eq!(frames[0].name, "torch::unwind::unwind()");
    assert_eq!(frames[0].filename, "??");
    let step = frames
        .iter()
        .find(|f| f.name == "step")
        .expect("python frame");
    assert_eq!(
        (step.filename.as_str(), step.line),
        ("make_torch_traces.py", 90)
    );
    // One frame, one allocation, wherever it is used.
    let unwind: Vec<_> = s.device_traces[0]
        .iter()
        .filter_map(|e| s.stack(e.stack).next())
        .collect();
    assert!(unwind.len() > 15_000);
    assert!(
        unwind
            .iter()
            .all(|f| std::ptr::eq(f.name.as_str(), unwind[0].name.as_str()))
    );
    // An entry is numbers and a stack id.
    assert_eq!(std::mem::size_of::<keel_trace::snapshot::TraceEntry>(), 48);
    // The same file decompressed reads the same.
    let plain = gunzip(&read(REAL));
    assert_eq!(read_snapshot(&plain).expect("plain"), s);
}

#[test]
fn the_timeline_is_the_memory_viewers() {
    let s = real();
    let t = timeline(&s, 0);
    assert_eq!(t.allocated.len(), 15_983);
    assert_eq!(t.initial_allocated, 497_759_232);
    assert_eq!(t.initial_reserved, 555_745_280);
    assert_eq!(t.peak.bytes, 7_701_353_752);
    assert_eq!(t.peak.entry, Some(5385));
    assert_eq!(t.peak.time_us, Some(1_795_840_245_135_851));
    assert_eq!(t.allocated.last(), Some(&1_561_468_496));
    assert_eq!(t.reserved.last(), Some(&8_084_520_960));
    assert_eq!(t.reserved.iter().max(), Some(&8_084_520_960));
    assert!(t.allocated.iter().all(|&a| a >= 0 && a <= t.peak.bytes));
    // PyTorch's viewer counts what was allocated before the history
    // another way: frees of blocks it never saw allocated, and blocks
    // alive at the end with no alloc in the history. Both agree.
    let trace = &s.device_traces[0];
    let mut open = std::collections::HashMap::new();
    let mut before = 0i64;
    for e in trace {
        match e.action {
            Action::Alloc => {
                open.insert(e.addr, e.size);
            }
            Action::FreeCompleted if open.remove(&e.addr).is_none() => before += e.size as i64,
            _ => {}
        }
    }
    for b in s.segments.iter().flat_map(|g| &g.blocks) {
        if b.state.is_active() && !open.contains_key(&b.address) {
            before += b.requested_size.expect("requested") as i64;
        }
    }
    assert_eq!(before, t.initial_allocated);
    assert_eq!(snapshot::timelines(&s), vec![t]);
}

#[test]
fn replaying_the_history_backward_and_forward_gives_the_final_state_back() {
    let s = real();
    let n = s.device_traces[0].len();
    let end = state_at(&s, 0, Some(n - 1));
    assert_eq!(end.mismatches(), 0);
    // The final state, as the snapshot has it.
    let final_segments = end.segments();
    assert_eq!(final_segments.len(), 138);
    let mut start = state_at(&s, 0, None);
    assert_eq!(start.mismatches(), 0, "every undo fits");
    assert_eq!(start.after(), None);
    // 117 segments were reserved in the history.
    assert_eq!(start.segments().len(), 21);
    assert_eq!(start.reserved_bytes(), 555_745_280);
    assert_eq!(start.requested_bytes(), 497_759_232);
    let live: usize = start
        .segments()
        .iter()
        .map(|g| g.blocks.iter().filter(|b| b.state.is_active()).count())
        .sum();
    assert_eq!(live, 148);
    start.seek(&s, Some(n - 1));
    assert_eq!(start.mismatches(), 0, "every redo fits");
    assert_eq!(start.segments(), final_segments);
    // And block for block what the file says (free gaps merged as the
    // allocator merges them).
    for (g, at) in s.segments.iter().zip({
        let mut sorted = s.segments.clone();
        sorted.sort_by_key(|g| g.address);
        let by_addr: std::collections::HashMap<u64, usize> = final_segments
            .iter()
            .enumerate()
            .map(|(i, g)| (g.address, i))
            .collect();
        s.segments
            .iter()
            .map(move |g| by_addr[&g.address])
            .collect::<Vec<_>>()
    }) {
        let replayed = &final_segments[at];
        assert_eq!(replayed.total_size, g.total_size);
        let active: Vec<_> = g
            .blocks
            .iter()
            .filter(|b| b.state.is_active())
            .map(|b| (b.address, b.size, b.requested_size, b.state, b.stack))
            .collect();
        let replayed_active: Vec<_> = replayed
            .blocks
            .iter()
            .filter(|b| b.state.is_active())
            .map(|b| (b.address, b.size, Some(b.requested), b.state, b.stack))
            .collect();
        assert_eq!(active, replayed_active, "segment {:#x}", g.address);
    }
}

#[test]
fn the_state_at_the_peak_matches_the_timeline_and_names_its_blocks() {
    let s = real();
    let t = timeline(&s, 0);
    let peak = state_at(&s, 0, t.peak.entry);
    assert_eq!(peak.requested_bytes() as i64, t.peak.bytes);
    assert_eq!(peak.active_bytes(), 7_709_319_680);
    let live: usize = peak
        .segments()
        .iter()
        .map(|g| g.blocks.iter().filter(|b| b.state.is_active()).count())
        .sum();
    assert_eq!(live, 920);
    // Seeking there from elsewhere gives the same state.
    let mut moved = state_at(&s, 0, Some(100));
    moved.seek(&s, t.peak.entry);
    assert_eq!(moved.segments(), peak.segments());
    let mut moved = state_at(&s, 0, None);
    moved.seek(&s, t.peak.entry);
    assert_eq!(moved.segments(), peak.segments());
    // At every 1,000th entry the replayed blocks add up to the curve.
    for i in (0..s.device_traces[0].len()).step_by(1000) {
        let st = state_at(&s, 0, Some(i));
        assert_eq!(st.requested_bytes() as i64, t.allocated[i], "entry {i}");
        assert_eq!(st.reserved_bytes() as i64, t.reserved[i], "entry {i}");
    }
    let top = largest_blocks(&s, 0, 5);
    let got: Vec<_> = top.iter().map(|b| (b.address, b.size, b.alloc)).collect();
    assert_eq!(
        got,
        [
            (0x7fc2_5e00_0000, 823_410_688, Some(5272)),
            (0x7fc2_dc00_0000, 823_410_688, Some(5380)),
            (0x7fc3_0e00_0000, 823_410_688, Some(5385)),
            (0x7fc4_ac00_0000, 155_189_248, None),
            (0x7fc2_a899_e600, 154_389_504, Some(3676)),
        ]
    );
    assert_eq!(
        snapshot::short_frames(&s, top[0].stack, 3),
        [
            "cross_entropy (functional.py:3504)",
            "fixed_cross_entropy (loss_utils.py:40)",
            "ForCausalLMLoss (loss_utils.py:70)"
        ]
    );
    // Allocated in the backward pass: no Python frames.
    assert_eq!(
        snapshot::short_frames(&s, top[1].stack, 3),
        ["aten::nll_loss_backward", "NllLossBackward0"]
    );
    assert_eq!(top[3].stack, StackId::EMPTY);
    // By time: the peak's own time finds the peak's entry.
    assert_eq!(snapshot::entry_at(&s, 0, 1_795_840_245_135_851), Some(5385));
    assert_eq!(snapshot::entry_at(&s, 0, 0), None);
}

#[test]
fn the_text_report_is_stable_and_says_what_matters() {
    let s = real();
    let report = snapshot::text(&s, 5);
    assert_eq!(report, snapshot::text(&s, 5));
    for line in [
        "memory snapshot: 138 segments, 755 blocks, 1 devices with history, 15983 entries, 555 frames, 251 stacks",
        "device 0: 15983 entries",
        "  time: 1795840242906160 us to 1795840245331061 us (2.425 s)",
        "  allocated: start 497759232 B (474.70 MiB), end 1561468496 B (1.45 GiB)",
        "  peak allocated: 7701353752 B (7.17 GiB) after entry 5385 at 1795840245135851 us",
        "  reserved: start 555745280 B (530.00 MiB), peak 8084520960 B (7.53 GiB), end 8084520960 B (7.53 GiB)",
        "    1. 823410688 B (785.27 MiB) at 0x7fc25e000000, stream 0, active_allocated, allocated at entry 5272 (1795840245133958 us)",
        "         cross_entropy (functional.py:3504)",
        "         aten::nll_loss_backward",
        "    4. 155189248 B (148.00 MiB) at 0x7fc4ac000000, stream 0, active_allocated, allocated before the history",
    ] {
        assert!(
            report.lines().any(|l| l == line),
            "missing {line:?} in\n{report}"
        );
    }
}

/// The trace's file time of its t = 0, in ns: `baseTimeNanoseconds` plus
/// the raw `ts` of `ProfilerStep#2` (4983219173403.537 µs in the file)
/// less where the import put that span.
fn origin_ns(t: &keel_trace::Trace) -> i64 {
    const BASE_NS: i64 = 1_790_857_026_000_000_000;
    const STEP2_TS_NS: i64 = 4_983_219_173_403_537;
    let step = t
        .spans
        .iter()
        .find(|s| s.name == "ProfilerStep#2")
        .expect("step 2");
    BASE_NS + STEP2_TS_NS - step.start_ns as i64
}

#[test]
fn allocations_link_to_the_operators_of_the_profiler_trace() {
    let t =
        keel_trace::load_trace(&data("import/gpt2_train_h200.pt.trace.json.gz")).expect("trace");
    let s = real();
    let origin = origin_ns(&t);
    // The import keeps the same origin, so the app links without this
    // test's arithmetic.
    assert_eq!(t.origin_ns, Some(origin));
    let end_ns = t.spans.iter().map(|sp| sp.end_ns()).max().expect("spans");
    let mut linked = std::collections::HashMap::<String, usize>::new();
    let mut inside = 0;
    for e in s.device_traces[0]
        .iter()
        .filter(|e| e.action == Action::Alloc)
    {
        let us = e.time_us.expect("time");
        let ns = i128::from(us) * 1000 - i128::from(origin);
        if ns < 0 || ns > i128::from(end_ns) {
            assert_eq!(operator_at(&t, origin, us), None);
            continue;
        }
        inside += 1;
        if let Some(i) = operator_at(&t, origin, us) {
            *linked
                .entry(t.spans[i as usize].name.to_string())
                .or_default() += 1;
        }
    }
    // Python's count over the same files: 2,570 allocations fall in the
    // trace, each inside a cpu_op, innermost most often these.
    assert_eq!(inside, 2570);
    assert_eq!(linked.values().sum::<usize>(), 2570);
    let mut top: Vec<_> = linked.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top: Vec<_> = top.iter().take(5).map(|(n, c)| (n.as_str(), *c)).collect();
    assert_eq!(
        top,
        [
            ("aten::empty_strided", 884),
            ("aten::empty", 496),
            ("aten::sum", 290),
            ("aten::mul", 264),
            ("aten::mm", 198)
        ]
    );
}

/// A decoded value in the form `make_pickles.py`'s `canon` writes.
fn canon(p: &Pickle, v: Value) -> serde_json::Value {
    canon_to(p, v, 64)
}

/// [`canon`] to `depth` levels: a damaged pickle can hold a list that
/// contains itself (a memo fetch appended to its own list), which Python
/// loads as a cycle too.
fn canon_to(p: &Pickle, v: Value, depth: usize) -> serde_json::Value {
    use serde_json::{Value as J, json};
    if depth == 0 {
        return json!("...");
    }
    let all =
        |items: &[Value]| -> Vec<J> { items.iter().map(|x| canon_to(p, *x, depth - 1)).collect() };
    match p.get(v) {
        Item::None => J::Null,
        Item::Bool(b) => J::Bool(b),
        Item::Int(i) => json!({ "int": i.to_string() }),
        Item::BigInt(n) => json!({ "bigint_bytes": n }),
        Item::Float(x) => json!({ "float": format!("{x:?}") }),
        Item::Str(s) => J::String(s.to_owned()),
        Item::Bytes(b) => {
            json!({ "bytes": b.iter().map(|x| format!("{x:02x}")).collect::<String>() })
        }
        Item::List(l) => J::Array(all(l)),
        Item::Tuple(t) => json!({ "tuple": all(t) }),
        Item::Dict(d) => {
            json!({ "dict": d.chunks(2).map(|kv| J::Array(all(kv))).collect::<Vec<_>>() })
        }
    }
}

#[test]
fn every_supported_opcode_decodes_as_python_loads_it() {
    let expected: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&read("pickle/expected.json")).expect("expected.json");
    assert_eq!(expected.len(), 8);
    for (name, want) in expected {
        let bytes = read(&format!("pickle/opcodes/{name}.pickle"));
        let p = Pickle::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(canon(&p, p.root()), want, "{name}");
    }
    // Memo fetches share their object: the frame dict fetched three times
    // is one node.
    let bytes = read("pickle/opcodes/proto4_frames.pickle");
    let p = Pickle::parse(&bytes).expect("parses");
    let Item::Dict(top) = p.get(p.root()) else {
        panic!("a dict")
    };
    let frames = p.lookup(top, "frames").expect("frames");
    let Item::List(frames) = p.get(frames) else {
        panic!("a list")
    };
    assert_eq!(frames.len(), 3);
    assert!(p.identity(frames[0]).is_some());
    assert!(
        frames
            .iter()
            .all(|f| p.identity(*f) == p.identity(frames[0]))
    );
}

#[test]
fn what_the_reader_refuses_is_named_with_its_offset() {
    let refused: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&read("pickle/refused.json")).expect("refused.json");
    assert_eq!(refused.len(), 5);
    for (name, want) in refused {
        let bytes = read(&format!("pickle/refused/{name}.pickle"));
        let err = Pickle::parse(&bytes).expect_err(&name).to_string();
        let op = want["opcode"].as_str().expect("opcode");
        let at = want["byte"].as_u64().expect("byte");
        assert!(
            err.contains(&format!("found opcode {op} at byte {at}")),
            "{name}: {err}"
        );
        assert!(read_snapshot(&bytes).is_err());
    }
}

#[test]
fn older_snapshots_open_with_what_they_have() {
    let s = read_snapshot(&read("pickle/old_format.pickle")).expect("old format");
    assert!(s.device_traces.is_empty());
    assert_eq!(s.segments.len(), 1);
    let g = &s.segments[0];
    assert!(g.small);
    let got: Vec<_> = g
        .blocks
        .iter()
        .map(|b| (b.address, b.size, b.requested_size, b.state))
        .collect();
    assert_eq!(
        got,
        [
            (4096, 1024, Some(1000), BlockState::ActiveAllocated),
            (5120, 512, Some(4), BlockState::ActivePendingFree),
            (5632, 1536, None, BlockState::Inactive),
        ]
    );
    let f: Vec<_> = s.stack(g.blocks[0].stack).collect();
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].name.as_str(), f[0].line), ("step", 7));
    assert_eq!(g.blocks[1].stack, g.blocks[0].stack);
    let t = timeline(&s, 0);
    assert_eq!((t.initial_allocated, t.initial_reserved), (1004, 3072));
    assert!(t.allocated.is_empty());
    assert!(snapshot::text(&s, 3).contains("before the first entry"));
    // A key missing is named with its entry.
    let err = read_snapshot(&read("pickle/missing_key.pickle"))
        .expect_err("no size")
        .to_string();
    assert!(
        err.contains("device_traces[0][1]: expected a key \"size\", found none"),
        "{err}"
    );
}

#[test]
fn extreme_values_and_an_inconsistent_history_are_counted_not_panicked_on() {
    let s = read_snapshot(&read("pickle/extreme_values.pickle")).expect("reads");
    assert_eq!(s.device_traces.len(), 3);
    assert_eq!(s.device_traces[0].len(), 12);
    assert_eq!(
        s.device_traces[0][11].action,
        Action::FreeCompleted,
        "`free`"
    );
    assert_eq!(s.device_traces[2][0].time_us, None);
    assert_eq!(s.device_traces[2][0].stream, 0);
    let all = snapshot::timelines(&s);
    assert_eq!(all.len(), 4, "devices 0 to 3");
    for t in &all {
        let n = s.device_traces.get(t.device).map_or(0, Vec::len);
        let mut st = state_at(&s, t.device, None);
        for i in 0..n {
            st.seek(&s, Some(i));
            let _ = st.segments();
            let _ = st.largest(3);
        }
        st.seek(&s, None);
        if t.device == 0 {
            assert!(st.mismatches() > 0, "the history does not fit");
        }
    }
    let report = snapshot::text(&s, 3);
    assert!(report.contains("device 3: 0 entries"), "{report}");
    assert_eq!(snapshot::entry_at(&s, 0, i64::MIN), Some(0));
    let t = keel_trace::Trace::default();
    assert_eq!(operator_at(&t, i64::MAX, i64::MIN), None);
    assert_eq!(operator_at(&t, i64::MIN, i64::MAX), None);
}

#[test]
fn wrong_types_and_huge_lengths_are_errors_that_say_what_and_where() {
    // A str where an address should be, quoted short.
    let mut p = vec![0x80, 4, b'}', b'(', 0x8c, 8];
    p.extend(b"segments");
    p.extend([b']', b'}', 0x8c, 7]);
    p.extend(b"address");
    p.extend([b'X']);
    let long = "0x7f".repeat(100);
    p.extend((long.len() as u32).to_le_bytes());
    p.extend(long.as_bytes());
    p.extend([b's', b'a', b'u', b'.']);
    let err = read_snapshot(&p).expect_err("a str address").to_string();
    assert!(
        err.contains(
            "segments[0].address: expected an integer of 0 or more, found a str \"0x7f0x7f"
        ),
        "{err}"
    );
    assert!(err.len() < 200, "a short prefix: {err}");
    // Lengths claiming more than the input: only what the input holds is
    // read, and the error says what was claimed and what was there.
    for (case, bytes, says) in [
        (
            "BINUNICODE8 of 2^62",
            {
                let mut b = vec![0x80, 4, 0x8d];
                b.extend((1u64 << 62).to_le_bytes());
                b.extend(b"abc.");
                b
            },
            "expected a string or bytes of less than 4 GiB, found 4611686018427387904 bytes",
        ),
        (
            "BINBYTES of 4 GB",
            {
                let mut b = vec![0x80, 4, b'B'];
                b.extend(u32::MAX.to_le_bytes());
                b.push(b'.');
                b
            },
            "expected 4294967295 more bytes, found 1 before the end of the input",
        ),
        (
            "LONG4 of 2 GB",
            {
                let mut b = vec![0x80, 4, 0x8b];
                b.extend(i32::MAX.to_le_bytes());
                b.push(b'.');
                b
            },
            "expected 2147483647 more bytes, found 1 before the end of the input",
        ),
    ] {
        let err = Pickle::parse(&bytes).expect_err(case).to_string();
        assert!(
            err.contains(says) && err.contains("at byte 2"),
            "{case}: {err}"
        );
    }
    // A memo id of 4 billion is kept sparse, and found again.
    let mut b = vec![0x80, 4, b'K', 7, b'r'];
    b.extend(4_000_000_000u32.to_le_bytes());
    b.push(b'0');
    b.push(b'j');
    b.extend(4_000_000_000u32.to_le_bytes());
    b.push(b'.');
    let p = Pickle::parse(&b).expect("sparse memo");
    assert_eq!(p.get(p.root()), Item::Int(7));
    // A fetch of a memo id never put.
    let err = Pickle::parse(&[0x80, 4, b'h', 3, b'.'])
        .expect_err("no memo")
        .to_string();
    assert!(err.contains("memo id 3"), "{err}");
    // Cut short, and a key Python could not hash.
    let err = Pickle::parse(&[0x80, 4, b'}'])
        .expect_err("cut")
        .to_string();
    assert!(
        err.contains("found the end of the input at byte 3"),
        "{err}"
    );
    let err = Pickle::parse(&[0x80, 4, b'}', b']', b'N', b's', b'.'])
        .expect_err("list key")
        .to_string();
    assert!(
        err.contains("expected a hashable dict key, found a list"),
        "{err}"
    );
    // Not a snapshot at all.
    let err = read_snapshot(&[0x80, 4, b'K', 1, b'.'])
        .expect_err("an int")
        .to_string();
    assert!(
        err.contains("the top level: expected a dict with segments"),
        "{err}"
    );
    assert!(read_snapshot(b"").is_err());
    assert!(read_snapshot(&[0x1f, 0x8b, 0, 0]).is_err());
}

/// Opcodes and fields that stress the reader when spliced in.
const TOKENS: &[&[u8]] = &[
    b"(",
    b"e",
    b"u",
    b"s",
    b"a",
    b"0",
    b"1",
    b"2",
    b".",
    b"\x94",
    b"h\x00",
    b"j\xff\xff\xff\xff",
    b"r\xff\xff\xff\x7f",
    b"\x8d\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"X\xff\xff\xff\xff",
    b"\x8b\xff\xff\xff\x7f",
    b"\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x8c\x05state",
    b"\x8c\x04size",
    b"\x8c\x06action\x8c\x05alloc",
    b"c__builtin__\nset\n",
    b"\x80\x09",
];

#[test]
fn mutated_snapshots_and_pickles_never_panic() {
    let mut fixtures = vec![
        read("pickle/snapshot_small.pickle"),
        read("pickle/old_format.pickle"),
        read("pickle/extreme_values.pickle"),
    ];
    for name in [
        "proto2_mixed",
        "proto2_long_memo",
        "proto4_frames",
        "raw_stack_ops",
    ] {
        fixtures.push(read(&format!("pickle/opcodes/{name}.pickle")));
    }
    let small = read_snapshot(&fixtures[0]).expect("the small snapshot");
    assert_eq!(small.segments.len(), 12);
    assert_eq!(small.device_traces[0].len(), 60);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut opened = 0;
    let mut errors = 0;
    let decoded = std::cell::Cell::new(0);
    let cases = 2500;
    for (f, input) in fixtures.iter().enumerate() {
        for case in 0..cases {
            let bytes = mutate(&mut rng, input, TOKENS);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // The snapshots' own pickles are decoded by read_snapshot.
                if let Some(p) = (f >= 2).then(|| Pickle::parse(&bytes).ok()).flatten() {
                    decoded.set(decoded.get() + 1);
                    let _ = canon_to(&p, p.root(), 16);
                }
                let r = read_snapshot(&bytes);
                if let Ok(s) = &r {
                    // The analyses run on whatever was read.
                    for d in 0..s.device_traces.len().max(1) {
                        let t = timeline(s, d);
                        let st = state_at(s, d, t.peak.entry);
                        let _ = st.segments();
                    }
                    let _ = snapshot::text(s, 3);
                }
                r.map(|_| ())
            }));
            match result {
                Err(_) => panic!("fixture {f}, case {case} panicked on {} bytes", bytes.len()),
                Ok(Ok(())) => opened += 1,
                Ok(Err(e)) => {
                    let m = e.to_string();
                    assert!(m.contains("expected"), "{m}");
                    assert!(m.len() < 400, "short: {m}");
                    errors += 1;
                }
            }
        }
    }
    // Both outcomes are exercised.
    eprintln!(
        "{opened} snapshots opened, {} pickles decoded, {errors} errors",
        decoded.get()
    );
    assert!(opened > 200, "only {opened} opened");
    assert!(decoded.get() > 500, "only {} decoded", decoded.get());
    assert!(errors > cases, "only {errors} errors");
    for len in [0, 1, 7, 100, 5000] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let _ = read_snapshot(&bytes);
    }
}

#[test]
fn a_snapshot_is_told_from_a_trace_by_its_first_byte() {
    use keel_trace::snapshot::is_snapshot;
    assert_eq!(is_snapshot(&data(REAL)), Ok(true), "gzip-compressed");
    let plain = std::env::temp_dir().join(format!("keel-snapshot-{}.pickle", std::process::id()));
    std::fs::write(&plain, gunzip(&read(REAL))).expect("write");
    assert_eq!(is_snapshot(&plain), Ok(true), "plain");
    let _ = std::fs::remove_file(&plain);
    for trace in [
        "import/gpt2_train_h200.pt.trace.json.gz",
        "import/kineto.json",
        "import/kineto.json.zst",
    ] {
        assert_eq!(is_snapshot(&data(trace)), Ok(false), "{trace}");
    }
    let e = is_snapshot(&data("import/no such file")).expect_err("missing");
    assert!(e.to_string().contains("no such file"), "{e}");
}

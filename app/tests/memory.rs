//! The Memory tab driven by egui_kittest on the real app (snapshot
//! `memory` in `tests/snapshots/`, also the README's
//! `assets/keel-profiler-memory.png`): the allocated and reserved curves
//! per device, the segment map following the pointer (and pinned by a
//! click), block tooltips, the timeline's keys, a live trace growing, and
//! allocations streamed from a live server.

use egui::{Key, Modifiers, Pos2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use keel::profiler::{
    ALLOCATED_COUNTER, BlockState, Counter, Lane, LaneKind, MemoryAction, MemoryEvent, MemoryMap,
    RESERVED_COUNTER, Span, SpanKind, TRACE_VERSION, Trace, TraceDevice,
};
use keel_profiler::cli::Options;
use keel_profiler::{App, Tab};

fn harness(app: App) -> Harness<'static, App> {
    Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app)
}

fn hover(h: &mut Harness<'_, App>, pos: Pos2) {
    h.hover_at(pos);
    h.step();
    h.step();
}

fn click(h: &mut Harness<'_, App>, pos: Pos2) {
    hover(h, pos);
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        });
    }
    h.step();
    h.step();
}

const MIB: u64 = 1 << 20;

/// The events of a small training-step-like sequence on `device`: a 2 MiB
/// small-pool segment with activations on streams 7 and 9, a 20 MiB
/// large-pool segment holding a weight, frees leaving cached ranges.
fn events(device: u32, t0: u64) -> Vec<MemoryEvent> {
    use MemoryAction::*;
    let small = 0x7f00_0020_0000;
    let large = 0x7f00_4000_0000;
    let steps: [(MemoryAction, u64, u64, u64, Option<i64>); 12] = [
        (SegmentAlloc, small, small, 2 * MIB, None),
        (Alloc, small, small, 256 << 10, Some(7)),
        (Alloc, small + (256 << 10), small, 512 << 10, Some(9)),
        (Alloc, small + (768 << 10), small, 128 << 10, Some(7)),
        (SegmentAlloc, large, large, 20 * MIB, None),
        (Alloc, large, large, 12 * MIB, Some(7)),
        (Free, small, small, 256 << 10, Some(7)),
        (Alloc, small + (896 << 10), small, 640 << 10, Some(9)),
        (Free, small + (256 << 10), small, 512 << 10, Some(9)),
        (Alloc, large + 12 * MIB, large, 6 * MIB, Some(9)),
        (Free, large + 12 * MIB, large, 6 * MIB, Some(9)),
        (Oom, 0, 0, 64 << 30, None),
    ];
    let (mut allocated, mut reserved) = (0u64, 0u64);
    steps
        .iter()
        .enumerate()
        .map(|(i, &(action, addr, segment, bytes, stream))| {
            match action {
                Alloc => allocated += bytes,
                Free => allocated -= bytes,
                SegmentAlloc => reserved += bytes,
                SegmentFree => reserved -= bytes,
                Oom => {}
            }
            MemoryEvent {
                ts_ns: t0 + 100_000 * (i as u64 + 1),
                device,
                action,
                addr,
                segment,
                bytes,
                stream,
                small_pool: segment == small,
                allocated,
                reserved,
            }
        })
        .collect()
}

/// The two curves of the events of `device`, a point where a total
/// changed (as the recorder makes them).
fn curves(memory: &[MemoryEvent], device: u32) -> Vec<Counter> {
    let mut out = Vec::new();
    for (name, total) in [
        (
            ALLOCATED_COUNTER,
            (|m: &MemoryEvent| m.allocated) as fn(&MemoryEvent) -> u64,
        ),
        (RESERVED_COUNTER, |m: &MemoryEvent| m.reserved),
    ] {
        let mut points: Vec<(u64, i64)> = Vec::new();
        for m in memory.iter().filter(|m| m.device == device) {
            let v = total(m) as i64;
            if points.last().is_none_or(|p| p.1 != v) {
                points.push((m.ts_ns, v));
            }
        }
        out.push(Counter {
            device,
            name: name.to_owned(),
            points,
        });
    }
    out
}

fn trace() -> Trace {
    let mut memory = events(0, 0);
    memory.extend(events(1, 50_000));
    memory.sort_by_key(|m| m.ts_ns);
    let mut counters = curves(&memory, 0);
    counters.extend(curves(&memory, 1));
    Trace {
        version: TRACE_VERSION,
        devices: vec![
            TraceDevice {
                device: "vulkan:0".to_owned(),
                name: "llvmpipe".to_owned(),
                properties: Vec::new(),
            },
            TraceDevice {
                device: "cpu:0".to_owned(),
                name: "host".to_owned(),
                properties: Vec::new(),
            },
        ],
        lanes: vec![Lane {
            kind: LaneKind::Host { thread: 1 },
            name: "main".to_owned(),
            group: String::new(),
        }],
        spans: vec![Span {
            lane: 0,
            name: "train step".into(),
            kind: SpanKind::Annotation,
            start_ns: 0,
            dur_ns: 1_300_000,
            op: 0,
            args: Vec::new(),
        }],
        counters,
        memory,
        ..Trace::default()
    }
}

fn memory_app(trace: Trace) -> Harness<'static, App> {
    let mut app = App::new(&Options::default());
    app.set_trace(trace, "memory test");
    app.tab = Tab::Memory;
    let mut h = harness(app);
    h.run_steps(3);
    h
}

/// The screen x of time `t` over the curves.
fn x_of(h: &Harness<'_, App>, t: u64) -> f32 {
    let app = h.state();
    let area = app.memory.curves_area;
    let tl = &app.timeline;
    area.left() + ((t as f64 - tl.start_ns) / tl.width_ns) as f32 * area.width()
}

#[test]
fn the_segment_map_follows_the_pointer_and_shows_blocks() {
    let t = trace();
    let mut h = memory_app(t.clone());
    assert_eq!(h.state().tab, Tab::Memory);
    assert!(h.query_by_label_contains("Segment map of").is_some());
    // Without a cursor the map shows the end: the OOM is reported.
    assert!(h.query_by_label_contains("out of memory at").is_some());
    let at_end = MemoryMap::at(&t, 0, u64::MAX);
    assert_eq!(h.state().memory.rows, at_end.rows());

    // Over the curves at 0.65 ms: the map of that time.
    let area = h.state().memory.curves_area;
    let x = x_of(&h, 650_000) + 0.5;
    hover(&mut h, Pos2::new(x, area.top() + 20.0));
    let cursor = h.state().memory.cursor_ns.expect("a cursor");
    let px = h.state().timeline.width_ns / f64::from(area.width());
    assert!((cursor as f64 - 650_000.0).abs() <= px + 1.0, "{cursor}");
    let expected = MemoryMap::at(&t, 0, cursor).rows();
    assert_eq!(h.state().memory.rows, expected);
    // Two segments; the small one has three active blocks and a free tail.
    assert_eq!(expected.len(), 2);
    let states: Vec<(BlockState, Option<i64>)> = expected[0]
        .blocks
        .iter()
        .map(|b| (b.state, b.stream))
        .collect();
    assert_eq!(
        states,
        [
            (BlockState::Active, Some(7)),
            (BlockState::Active, Some(9)),
            (BlockState::Active, Some(7)),
            (BlockState::Free, None)
        ]
    );
    assert!(
        h.query_by_label_contains("allocated 12.88 MiB, reserved 22.00 MiB, 2 segments")
            .is_some()
    );

    // A click pins the cursor: moving on leaves the map where it was.
    click(&mut h, Pos2::new(x, area.top() + 20.0));
    assert!(h.state().memory.pinned);
    let later = x_of(&h, 1_100_000);
    hover(&mut h, Pos2::new(later, area.top() + 20.0));
    assert_eq!(h.state().memory.cursor_ns, Some(cursor));
    assert!(h.query_by_label_contains("(pinned)").is_some());

    // Hovering a block shows its address, size, stream and since when.
    let second = h
        .state()
        .memory
        .drawn
        .iter()
        .find(|d| d.row == 0 && d.block == 1)
        .copied()
        .expect("the second block is drawn");
    hover(&mut h, second.rect.center());
    // Tooltips show once the pointer rests (egui's tooltip delay).
    h.run_steps(8);
    assert!(h.query_by_label("active block").is_some());
    assert!(
        h.query_by_label(&format!(
            "address {:#x}",
            0x7f00_0020_0000_u64 + (256 << 10)
        ))
        .is_some()
    );
    assert!(h.query_by_label("size 512.00 KiB (524288 bytes)").is_some());
    assert!(h.query_by_label("stream 9").is_some());
    assert!(
        h.query_by_label("since 300.00 us (from the trace's start)")
            .is_some()
    );
    h.snapshot("memory");

    // The device picker shows the other device's map.
    h.state_mut().memory.device = Some(1);
    h.run_steps(2);
    assert_eq!(h.state().memory.rows, MemoryMap::at(&t, 1, cursor).rows());
}

#[test]
fn the_memory_view_shares_the_timelines_keys() {
    let mut h = memory_app(trace());
    let w0 = h.state().timeline.width_ns;
    h.key_press(Key::W);
    h.run_steps(2);
    let w1 = h.state().timeline.width_ns;
    assert!(
        (w1 - w0 / 1.25).abs() < 1e-6 * w0,
        "W zooms in: {w0} -> {w1}"
    );
    let s1 = h.state().timeline.start_ns;
    h.key_press(Key::D);
    h.run_steps(2);
    let s2 = h.state().timeline.start_ns;
    assert!((s2 - (s1 + 0.1 * w1)).abs() < 1e-6 * w1, "D pans later");
    // The timeline shows the same window.
    h.state_mut().tab = Tab::Timeline;
    h.run_steps(2);
    assert_eq!(h.state().timeline.width_ns, w1);
}

#[test]
fn a_live_trace_grows_the_map() {
    let t = trace();
    // The first half arrives, then the rest, as live fragments do.
    let half = t.memory.len() / 2;
    let first = Trace {
        memory: t.memory[..half].to_vec(),
        ..t.clone()
    };
    let mut h = memory_app(first);
    let before = h.state().memory.rows.clone();
    assert_eq!(
        before,
        MemoryMap::at(&t, 0, t.memory[half - 1].ts_ns).rows()
    );
    let rest = Trace {
        memory: t.memory[half..].to_vec(),
        counters: Vec::new(),
        spans: Vec::new(),
        ..t.clone()
    };
    std::sync::Arc::get_mut(h.state_mut().view.as_mut().expect("a view"))
        .expect("the view is the app's alone")
        .append(rest)
        .expect("append");
    h.run_steps(2);
    assert_eq!(h.state().memory.rows, MemoryMap::at(&t, 0, u64::MAX).rows());
    assert_ne!(h.state().memory.rows, before);
}

#[test]
fn a_trace_without_allocator_events_says_so() {
    let mut t = trace();
    t.memory.clear();
    t.counters.clear();
    let h = memory_app(t);
    assert!(h.query_by_label_contains("No allocator events").is_some());
}

/// End to end: a live server streams a program's allocations; the app
/// appends them and its Memory tab shows the newest map of the device.
#[test]
fn live_allocations_reach_the_memory_view() {
    use std::time::{Duration, Instant};
    let options = keel::profiler::live::LiveOptions {
        interval: Duration::from_millis(20),
        ..Default::default()
    };
    let server = keel::profiler::live::serve_with("127.0.0.1:0", options).expect("serve");
    let app = App::new(&Options {
        connect: vec![server.addr().to_string()],
        ..Options::default()
    });
    let mut h = harness(app);
    let cpu = keel::Device::cpu();
    let mut kept = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let events = |h: &Harness<'_, App>| h.state().view.as_ref().map_or(0, |v| v.trace.memory.len());
    while events(&h) < 8 {
        assert!(
            Instant::now() < deadline,
            "no live allocator events arrived in 60 s (error: {:?})",
            h.state().error
        );
        kept.push(keel::Buffer::new(cpu, 3 << 10).expect("buffer"));
        drop(keel::Buffer::new(cpu, 1 << 10).expect("buffer"));
        std::thread::sleep(Duration::from_millis(20));
        h.step();
    }
    h.state_mut().tab = Tab::Memory;
    h.run_steps(2);
    let app = h.state();
    assert!(app.error.is_none(), "{:?}", app.error);
    let view = app.view.as_ref().expect("a live view");
    let device = app.memory.device.expect("a device shown");
    // Named after the program that streams it.
    assert_eq!(
        view.trace.devices[device as usize].device,
        format!("{} \u{b7} cpu:0", server.program().name)
    );
    assert_eq!(
        app.memory.rows,
        MemoryMap::at(&view.trace, device, u64::MAX).rows()
    );
    // The buffers still alive are active blocks of the map.
    let active = app
        .memory
        .rows
        .iter()
        .flat_map(|r| &r.blocks)
        .filter(|b| b.state == BlockState::Active)
        .count();
    assert!(active >= 1, "{:?}", app.memory.rows);
    assert!(
        view.trace
            .counters
            .iter()
            .any(|c| c.name == ALLOCATED_COUNTER)
    );
    server.stop();
    drop(kept);
}

//! Area selection on the real GPT-2 training trace of an H200, driven by
//! egui_kittest on the real app: Shift+drag over lanes and time, a drag on
//! the ruler for every lane, the selection panel's three tables, Esc.

use egui::{Event, Modifiers, PointerButton, Pos2, pos2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use keel_profiler::cli::Options;
use keel_profiler::selection::{Selection, analyse};
use keel_profiler::{App, Tab};

const GPT2: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crates/keel-trace/tests/data/import/gpt2_train_h200.pt.trace.json.gz"
);

fn gpt2() -> Harness<'static, App> {
    let mut app = App::new(&Options::default());
    app.open(std::path::Path::new(GPT2));
    assert_eq!(app.error, None);
    assert_eq!(app.tab, Tab::Timeline);
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
    h.run_steps(3);
    h
}

/// A drag from `a` to `b` with `modifiers` held.
fn drag(h: &mut Harness<'_, App>, a: Pos2, b: Pos2, modifiers: Modifiers) {
    h.hover_at(a);
    h.step();
    h.event(Event::ModifiersChanged(modifiers));
    h.event(Event::PointerButton {
        pos: a,
        button: PointerButton::Primary,
        pressed: true,
        modifiers,
    });
    h.step();
    for k in 1..=4 {
        let f = k as f32 / 4.0;
        h.event(Event::PointerMoved(a + (b - a) * f));
        h.step();
    }
    h.event(Event::PointerButton {
        pos: b,
        button: PointerButton::Primary,
        pressed: false,
        modifiers,
    });
    h.step();
    h.event(Event::ModifiersChanged(Modifiers::NONE));
    h.step();
    h.step();
}

#[test]
fn shift_drag_selects_lanes_and_time_and_the_panel_analyses_them() {
    let mut h = gpt2();
    let (area, start, width, tops, row_h) = {
        let t = &h.state().timeline;
        (
            t.layout.area,
            t.start_ns,
            t.width_ns,
            t.layout.lane_tops.clone(),
            t.layout.row_h,
        )
    };
    let view = h.state().view.as_ref().expect("a trace");
    // From the first GPU stream's lane down to the first host thread's,
    // over the middle of the trace.
    let gpu = (0..view.lanes.len())
        .find(|&p| view.lanes[p].device)
        .expect("a GPU stream");
    let host = (0..view.lanes.len())
        .filter(|&p| !view.lanes[p].device && view.lanes[p].span_count > 1_000)
        .find(|&p| tops[p].is_some_and(|y| y > area.top() && y < area.bottom() - 10.0))
        .expect("a busy host thread on screen");
    let y0 = tops[gpu].expect("GPU lane shown") + row_h / 2.0;
    let y1 = tops[host].expect("host lane shown") + row_h / 2.0;
    let (x0, x1) = (
        area.left() + area.width() * 0.3,
        area.left() + area.width() * 0.6,
    );
    drag(&mut h, pos2(x0, y0), pos2(x1, y1), Modifiers::SHIFT);
    let app = h.state();
    // The drag selected, it did not pan.
    assert_eq!(app.timeline.start_ns, start, "a Shift+drag does not pan");
    let sel = app.timeline.area.clone().expect("an area selection");
    assert!(
        sel.lanes.contains(&gpu) && sel.lanes.contains(&host),
        "{sel:?} gpu {gpu} host {host} y {y0} {y1} tops {tops:?} area {area:?}"
    );
    assert!(sel.lanes.iter().all(|&p| tops[p].is_some_and(|y| y < y1)));
    let t_of = |x: f32| start + f64::from((x - area.left()) / area.width()) * width;
    assert!((sel.t0 as f64 - t_of(x0)).abs() < width / 500.0);
    assert!((sel.t1 as f64 - t_of(x1)).abs() < width / 500.0);
    // The panel shows the analysis of exactly that selection.
    let sum = app.area.clone().expect("the selection analysed");
    let view = app.view.as_ref().expect("a trace");
    assert_eq!(sum, analyse(view, &sel));
    assert!(sum.spans > 100, "{}", sum.spans);
    assert!(!sum.flame.frames.is_empty());
    assert_eq!(sum.devices.len(), 1);
    h.get_by_label("By name");
    let top = keel_profiler::analysis::short(&sum.names[0].name, 60);
    h.get_by_label(&top);
    // The flame graph and the GPU table.
    h.get_by_label("Flame graph").click();
    h.run_steps(2);
    assert!(
        h.query_by_label_contains("frames,").is_some(),
        "the flame graph's summary line"
    );
    h.get_by_label("GPU").click();
    h.run_steps(2);
    h.get_by_label(&sum.devices[0].device);
    h.get_by_label(&sum.devices[0].streams[0].label);
    // Clicking a name searches the timeline for it.
    h.get_by_label("By name").click();
    h.run_steps(2);
    h.get_by_label(&top).click();
    h.run_steps(3);
    assert_eq!(h.state().timeline.search.query, sum.names[0].name.as_str());
    assert!(!h.state().timeline.search.matches.is_empty());
    // Esc clears the selection (the search box does not have focus).
    h.state_mut().timeline.search.open = false;
    h.run_steps(1);
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    assert!(h.state().timeline.area.is_none() && h.state().area.is_none());
    assert!(
        h.query_by_label("Flame graph").is_none(),
        "the panel is gone"
    );
}

#[test]
fn a_drag_on_the_ruler_selects_every_lane_and_a_plain_drag_still_pans() {
    let mut h = gpt2();
    let area = h.state().timeline.layout.area;
    let (x0, x1) = (
        area.left() + area.width() * 0.2,
        area.left() + area.width() * 0.25,
    );
    let ruler_y = area.top() - 8.0;
    drag(
        &mut h,
        pos2(x0, ruler_y),
        pos2(x1, ruler_y),
        Modifiers::NONE,
    );
    let app = h.state();
    let sel = app
        .timeline
        .area
        .clone()
        .expect("a selection from the ruler");
    let view = app.view.as_ref().expect("a trace");
    let shown: Vec<usize> = (0..view.lanes.len())
        .filter(|&p| app.timeline.layout.lane_tops[p].is_some())
        .collect();
    assert_eq!(sel.lanes, shown, "every lane shown");
    let sum = app.area.clone().expect("analysed");
    assert_eq!(
        sum,
        analyse(
            view,
            &Selection {
                lanes: shown,
                t0: sel.t0,
                t1: sel.t1
            }
        )
    );
    // A drag over the lanes without Shift pans as before and keeps the
    // selection.
    let start = h.state().timeline.start_ns;
    let y = area.top() + 40.0;
    drag(
        &mut h,
        pos2(area.center().x, y),
        pos2(area.center().x - 200.0, y),
        Modifiers::NONE,
    );
    assert!(h.state().timeline.start_ns > start, "the view panned");
    assert_eq!(h.state().timeline.area.as_ref(), Some(&sel));
}

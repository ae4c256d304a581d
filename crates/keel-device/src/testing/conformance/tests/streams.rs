//! Order within a stream, waits across streams, queries, synchronize, the stream pool.

use super::*;

/// Copies and kernels on one stream run in submission order.
pub fn in_order_within_a_stream(d: Device, _cfg: &Config) {
    let s = pool(d);
    let b = Buffer::new(d, 4).expect("alloc");
    for i in 0..200u32 {
        b.write(&s, 0, &[i]).expect("write");
    }
    let c = Buffer::new(d, 4).expect("alloc");
    c.copy_from(&s, &b, 0, 0, 4).expect("copy");
    assert_eq!(
        c.read_as::<u32>(&s).expect("read"),
        [199],
        "writes ran in order"
    );
    // Kernels too: ten saxpy launches accumulate in order with the copies
    // between them.
    let n = 1000u32;
    let x = Buffer::from_slice(&s, &vec![1.0f32; n as usize]).expect("x");
    let y = Buffer::from_slice(&s, &vec![0.0f32; n as usize]).expect("y");
    for k in 0..10 {
        saxpy(&s, &x, &y, n, 1.0);
        if k == 4 {
            // Overwrite y midway: later launches must see the new value.
            y.write(&s, 0, &vec![100.0f32; n as usize]).expect("write");
        }
    }
    let y = y.read_as::<f32>(&s).expect("read");
    assert!(
        y.iter().all(|&v| v == 105.0),
        "100 + 5 launches after the write: {}",
        y[0]
    );
}

/// `stream.wait(event)` orders a consumer after a producer on another
/// stream, without blocking the host.
pub fn producer_consumer_across_streams(d: Device, cfg: &Config) {
    let (producer, consumer) = (pool(d), pool(d));
    assert_ne!(producer, consumer);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let y = Buffer::from_slice(&consumer, &vec![1.0f32; n as usize]).expect("y");
    consumer.synchronize().expect("upload");
    let busy = Busy::launch(&producer, cfg, &out, iters);
    let mut produced = Event::new(d.device_type());
    produced.record(&producer).expect("record");
    consumer.wait(&produced).expect("wait");
    saxpy(&consumer, &out, &y, n, 2.0);
    let result = y.read_async(&consumer, 0, y.len()).expect("read");
    if cfg.submit_waits_for_previous {
        // The producer may have finished while these were submitted, and
        // may finish at any moment; the answers must agree: the read is
        // the consumer's last work, so a ready read means a done consumer.
        let ready = result.is_ready().expect("is_ready");
        let done = consumer.query().expect("query");
        assert!(!ready || done, "the read is ready, so its stream is done");
    } else if !cfg.blocking_submit {
        assert_eq!(
            consumer.query(),
            Ok(false),
            "the consumer waits for the producer"
        );
        assert_eq!(result.is_ready(), Ok(false), "the read waits too");
    }
    busy.release();
    let y: Vec<f32> = bytemuck::pod_collect_to_vec(&result.wait().expect("data"));
    for i in (0..n).step_by((n as usize / 16).max(1)) {
        let want = 1.0 + 2.0 * busy.value(i);
        assert!(
            close(y[i as usize], want),
            "y[{i}] = {}, want {want}",
            y[i as usize]
        );
    }
}

/// Streams and events report "not yet complete" while work runs (where
/// submission does not block), and complete after `synchronize`.
pub fn query_before_and_after_completion(d: Device, cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let mut start = Event::timed(ty);
    let mut done = Event::timed(ty);
    // An untimed event too: backends may track it differently (the host
    // streams as a position in the stream's order).
    let mut untimed = Event::new(ty);
    start.record(&s).expect("record");
    let busy = Busy::launch(&s, cfg, &out, iters);
    done.record(&s).expect("record");
    untimed.record(&s).expect("record");
    if cfg.blocking_submit {
        // The work ran inside its submissions, so nothing is left to run:
        // a query may answer "not yet" until the backend notices, and must
        // notice with no thread synchronizing.
        let deadline = Instant::now() + Duration::from_secs(30);
        for (what, event) in [("timed", &done), ("untimed", &untimed)] {
            while !event.query().expect("query") {
                assert!(
                    Instant::now() < deadline,
                    "submission blocks, yet queries did not see the {what} event after it \
                     complete within 30 s"
                );
                std::thread::yield_now();
            }
        }
    } else if cfg.submit_waits_for_previous {
        // Recording `done` (a submission) may have waited for the slow
        // kernel, and the work may finish at any moment: whatever the
        // answers, they must agree (`done` is the stream's last work).
        let before = done.query().expect("query");
        let stream = s.query().expect("query");
        let after = done.query().expect("query");
        assert!(!before || stream, "the event is complete, so is its stream");
        assert!(
            !stream || after,
            "the stream is complete, so is its last event"
        );
        match start.elapsed_time(&done) {
            Ok(ms) => assert!(ms >= 0.0),
            Err(e) => assert_eq!(
                e.to_string(),
                "Both events must be completed before calculating elapsed time."
            ),
        }
    } else {
        assert_eq!(done.query(), Ok(false), "the work is still running");
        assert_eq!(untimed.query(), Ok(false), "the work is still running");
        assert_eq!(s.query(), Ok(false));
        let e = start.elapsed_time(&done).expect_err("not complete");
        assert_eq!(
            e.to_string(),
            "Both events must be completed before calculating elapsed time."
        );
    }
    busy.release();
    untimed.synchronize().expect("event sync");
    assert_eq!(untimed.query(), Ok(true));
    done.synchronize().expect("event sync");
    assert_eq!(done.query(), Ok(true));
    assert_eq!(s.query(), Ok(true));
    assert!(start.elapsed_time(&done).expect("elapsed") >= 0.0);
    let got = out.read_as::<f32>(&s).expect("read");
    assert!(close(got[n as usize - 1], busy.value(n - 1)));
}

/// Polling alone reaches completion: an event's and a stream's `query`
/// and a read's `is_ready`, asked in a loop while the work runs and after,
/// report it complete without any thread synchronizing (c10's `while not
/// stream.query(): ...`). A backend that learns of completion only when
/// someone waits fails here.
pub fn queries_alone_see_completion(d: Device, cfg: &Config) {
    let s = pool(d);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let busy = Busy::launch(&s, cfg, &out, iters / 4);
    let mut done = Event::new(d.device_type());
    done.record(&s).expect("record");
    let read = out.read_async(&s, 0, out.len()).expect("read");
    // Asked once before the work may finish, then until it has.
    let early = done.query().expect("query");
    busy.release();
    let deadline = Instant::now() + Duration::from_secs(30);
    let poll = |what: &str, ready: &dyn Fn() -> bool| {
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "{what} did not report the work complete within 30 s of polling (first answer: {early})"
            );
            std::thread::yield_now();
        }
    };
    poll("the event's query", &|| done.query().expect("query"));
    poll("the read's is_ready", &|| {
        read.is_ready().expect("is_ready")
    });
    poll("the stream's query", &|| s.query().expect("query"));
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read.wait().expect("data"));
    let last = n as usize - 1;
    assert!(
        close(got[last], busy.value(n - 1)),
        "{} != {}",
        got[last],
        busy.value(n - 1)
    );
}

/// `synchronize(device)` waits for every stream of the device.
pub fn synchronize_waits_for_everything(d: Device, cfg: &Config) {
    let (s1, s2) = (pool(d), pool(d));
    let (n, iters) = slow_spin(d, cfg);
    let (a, b) = (
        Buffer::new(d, 4 * n as usize).expect("a"),
        Buffer::new(d, 4 * n as usize).expect("b"),
    );
    let busy = [(s1, &a), (s2, &b)].map(|(s, buf)| Busy::launch(&s, cfg, buf, iters / 4));
    let want: Vec<f32> = busy.iter().map(|b| b.value(n - 1)).collect();
    // Gated work opens a little later, from another thread.
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        busy.iter().for_each(Busy::release);
    });
    crate::synchronize(d).expect("device synchronize");
    assert_eq!((s1.query(), s2.query()), (Ok(true), Ok(true)));
    opener.join().expect("opener");
    for (buf, want) in [&a, &b].into_iter().zip(want) {
        let got = buf.read_as::<f32>(&s1).expect("read");
        assert!(
            close(got[n as usize - 1], want),
            "{} != {want}",
            got[n as usize - 1]
        );
    }
    launch_spin(&s1, &a, n, iters / 4);
    s1.synchronize().expect("stream synchronize");
    assert_eq!(s1.query(), Ok(true));
}

/// 32 pool streams per priority level, handed out round-robin; every one
/// works.
pub fn stream_pool_round_robin(d: Device, _cfg: &Config) {
    let many: Vec<Stream> = (0..200)
        .map(|_| crate::get_stream_from_pool(d, true).expect("pool"))
        .collect();
    let distinct: HashSet<Stream> = many.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        32,
        "200 requests reuse the 32 streams of a level"
    );
    assert!(
        many.iter()
            .all(|s| matches!(s.kind(), StreamKind::Pool { .. })),
        "pool streams"
    );
    let first = crate::get_stream_from_pool(d, true).expect("pool");
    let mut last = first;
    for _ in 0..32 {
        last = crate::get_stream_from_pool(d, true).expect("pool");
    }
    assert_eq!(last, first, "the 33rd request returns the 1st");
    let normal = crate::get_stream_from_pool(d, false).expect("pool");
    assert!(
        !distinct.contains(&normal),
        "normal and high priority are separate pools"
    );
    for s in distinct.iter().take(4) {
        let b = Buffer::from_slice(s, &[s.id() as u32]).expect("upload");
        assert_eq!(b.read_as::<u32>(s).expect("read"), [s.id() as u32]);
    }
}

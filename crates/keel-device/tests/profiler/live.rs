//! Live streaming over loopback: a viewer receives fragments of a running
//! workload; a slow viewer never blocks the program (drops are counted); a
//! malformed peer gets a clear error on either side; only loopback by
//! default.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use std::time::{Duration, Instant};

use keel_device::profiler::live::{self, Chunk, Client, LiveOptions};
use keel_device::profiler::{SpanKind, Trace};
use keel_device::{Buffer, Device, DeviceType, kernels};

use crate::serial;

/// `rounds` spin launches on a CPU pool stream, each waited for.
pub(crate) fn work(rounds: u32) {
    let d = Device::new(DeviceType::Cpu, 0).expect("cpu");
    let s = keel_device::get_stream_from_pool(d, false).expect("stream");
    let n = 1024u32;
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    for _ in 0..rounds {
        let params = [n.to_le_bytes(), 100u32.to_le_bytes()].concat();
        s.launch(
            &kernels::SPIN,
            kernels::SPIN.grid_for(u64::from(n)),
            &[&out],
            &params,
        )
        .expect("spin");
        s.synchronize().expect("sync");
    }
}

#[test]
fn a_viewer_receives_the_running_workload() {
    let _s = serial();
    let options = LiveOptions {
        interval: Duration::from_millis(20),
        ..LiveOptions::default()
    };
    let server = live::serve_with("127.0.0.1:0", options).expect("serve");
    let mut client = Client::connect(server.addr()).expect("connect");
    let mut merged = Trace::default();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut kernels_seen = 0;
    while kernels_seen < 5 && Instant::now() < deadline {
        work(3);
        match client.next_chunk().expect("chunk") {
            Chunk::Fragment(f) => merged.merge(*f).expect("merge"),
            Chunk::Dropped(n) => panic!("a fast viewer dropped {n} chunks"),
        }
        kernels_seen = merged
            .spans
            .iter()
            .filter(|s| s.kind == SpanKind::Kernel && s.name == "spin")
            .count();
    }
    assert!(kernels_seen >= 5, "kernels arrived live: {kernels_seen}");
    assert!(merged.devices.iter().any(|d| d.device == "cpu:0"));
    // A second viewer gets the tables first.
    let mut late = Client::connect(server.addr()).expect("connect");
    match late.next_chunk().expect("tables") {
        Chunk::Fragment(t) => assert!(!t.lanes.is_empty(), "the first chunk carries the lanes"),
        Chunk::Dropped(_) => panic!("tables first"),
    }
    assert_eq!(server.viewers_served(), 2);
    server.stop();
    assert!(
        !keel_device::profiler::enabled(),
        "stopping the server ends the session"
    );
}

#[test]
fn a_slow_viewer_never_blocks_the_program() {
    let _s = serial();
    let options = LiveOptions {
        interval: Duration::from_millis(5),
        queue_chunks: 1,
        ..LiveOptions::default()
    };
    let server = live::serve_with("127.0.0.1:0", options).expect("serve");
    // Handshake by hand, then never read again.
    let mut slow = TcpStream::connect(server.addr()).expect("connect");
    let mut hello = [0u8; 16];
    slow.read_exact(&mut hello).expect("hello");
    slow.write_all(b"KEELLIVE").expect("magic");
    slow.write_all(&1u32.to_le_bytes()).expect("version");
    let started = Instant::now();
    // Marks with big, distinct names (the string table would share equal
    // ones) until the socket buffers are full and the queue overflows.
    let big = "x".repeat(16 * 1024);
    let mut i = 0u64;
    while server.dropped_chunks() == 0 && started.elapsed() < Duration::from_secs(30) {
        for _ in 0..50 {
            keel_device::profiler::mark(format!("{big}{i}"));
            i += 1;
        }
        work(1);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(server.dropped_chunks() > 0, "drops are counted");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the program kept running"
    );
    drop(slow);
    server.stop();
}

#[test]
fn malformed_peers_get_clear_errors() {
    let _s = serial();
    let server = live::serve("127.0.0.1:0").expect("serve");
    // A client that speaks garbage: the server closes that connection only.
    let mut bad = TcpStream::connect(server.addr()).expect("connect");
    let mut hello = [0u8; 30];
    bad.read_exact(&mut hello).expect("hello");
    assert_eq!(&hello[..8], b"KEELLIVE");
    let mut name = vec![0u8; usize::from(u16::from_le_bytes([hello[28], hello[29]]))];
    bad.read_exact(&mut name).expect("program name");
    bad.write_all(b"GET / HTTP/1.1\r\n").expect("write");
    bad.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = bad.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no chunks for a bad handshake");
    // The server keeps serving good viewers.
    let mut good = Client::connect(server.addr()).expect("connect");
    assert!(matches!(good.next_chunk(), Ok(Chunk::Fragment(_))));
    server.stop();

    // A fake server that sends a bad chunk: the client closes with an error.
    let fake = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = fake.local_addr().expect("addr");
    let peer = std::thread::spawn(move || {
        let (mut s, _) = fake.accept().expect("accept");
        s.write_all(b"KEELLIVE").expect("magic");
        s.write_all(&live::PROTOCOL_VERSION.to_le_bytes())
            .expect("version");
        s.write_all(&1u32.to_le_bytes()).expect("trace version");
        s.write_all(&0i64.to_le_bytes()).expect("origin");
        s.write_all(&7u32.to_le_bytes()).expect("pid");
        s.write_all(&4u16.to_le_bytes()).expect("name length");
        s.write_all(b"fake").expect("name");
        let mut answer = [0u8; 12];
        s.read_exact(&mut answer).expect("answer");
        // A fragment whose payload is not the native format.
        s.write_all(&8u32.to_le_bytes()).expect("len");
        s.write_all(&[1]).expect("kind");
        s.write_all(b"garbage!").expect("payload");
        // Then a header claiming a 1 GiB chunk.
        s.write_all(&(1u32 << 30).to_le_bytes()).expect("len");
        s.write_all(&[1]).expect("kind");
    });
    let mut client = Client::connect(addr).expect("connect");
    let program = client.program().expect("program").clone();
    assert_eq!((program.name.as_str(), program.pid), ("fake", 7));
    let e = client.next_chunk().expect_err("not a trace");
    assert!(e.to_string().contains("trace format error"), "{e}");
    let e = client.next_chunk().expect_err("closed after an error");
    assert!(e.to_string().contains("not connected"), "{e}");
    peer.join().expect("peer");

    // A server of another protocol version, and one whose hello names a
    // program longer than a hello may.
    for (version, name_len) in [(1u32, 4u16), (live::PROTOCOL_VERSION, 9000)] {
        let odd = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = odd.local_addr().expect("addr");
        let t = std::thread::spawn(move || {
            let (mut s, _) = odd.accept().expect("accept");
            s.write_all(b"KEELLIVE").expect("magic");
            s.write_all(&version.to_le_bytes()).expect("version");
            // The client may close as soon as it has read what it refuses.
            let _ = s.write_all(&1u32.to_le_bytes());
            let _ = s.write_all(&[0; 12]);
            let _ = s.write_all(&name_len.to_le_bytes());
        });
        let e = Client::connect(addr).expect_err("refused");
        let wanted = if version == 1 {
            "expected protocol version 2, found 1"
        } else {
            "expected a program name of at most 255 bytes, found 9000"
        };
        assert!(e.to_string().contains(wanted), "{e}");
        t.join().expect("thread");
    }

    // Not a Keel server at all.
    let other = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = other.local_addr().expect("addr");
    let t = std::thread::spawn(move || {
        let (mut s, _) = other.accept().expect("accept");
        s.write_all(b"HTTP/1.1 400 Bad Request\r\n").expect("write");
    });
    let e = Client::connect(addr).expect_err("not keel");
    assert!(e.to_string().contains("KEELLIVE"), "{e}");
    t.join().expect("thread");
}

#[test]
fn only_loopback_by_default() {
    let _s = serial();
    let e = live::serve("0.0.0.0:0").expect_err("not loopback");
    assert!(e.to_string().contains("expected a loopback address"), "{e}");
    assert!(
        !keel_device::profiler::enabled(),
        "a refused serve starts no session"
    );
    let e = live::serve("127.0.0.1:0").and_then(|s| {
        let second = keel_device::profiler::start().map(drop);
        s.stop();
        second
    });
    assert!(e.is_err(), "serving holds the session");
}

#[test]
fn a_publisher_streams_what_its_program_sends() {
    let options = LiveOptions {
        program_name: Some("bridge \u{2014} ünïcode".to_owned()),
        ..LiveOptions::default()
    };
    let publisher = live::publish("127.0.0.1:0", options).expect("publish");
    let mut client = Client::connect(publisher.addr()).expect("connect");
    let program = client.program().expect("program").clone();
    assert_eq!(&program, publisher.program());
    assert_eq!(program.name, "bridge \u{2014} ünïcode");
    assert_eq!(program.pid, std::process::id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as i64;
    assert!(
        (now - program.origin_unix_ns).abs() < 60_000_000_000,
        "the origin is the publisher's start on the Unix clock: {} vs now {now}",
        program.origin_unix_ns
    );
    // The tables come first, then what the program sends, in order.
    assert!(matches!(client.next_chunk(), Ok(Chunk::Fragment(_))));
    let deadline = Instant::now() + Duration::from_secs(10);
    while publisher.viewers() == 0 {
        assert!(Instant::now() < deadline, "the viewer was never registered");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut got = Vec::new();
    for n in [3usize, 5] {
        publisher.send(&host_spans(n)).expect("send");
    }
    while got.len() < 2 {
        match client.next_chunk().expect("chunk") {
            Chunk::Fragment(t) => got.push(t.spans.len()),
            Chunk::Dropped(n) => assert_eq!(n, 0, "nothing is dropped for a reading viewer"),
        }
    }
    assert_eq!(got, vec![3, 5]);
    // An idle program still says it is alive.
    let quiet = Instant::now();
    assert_eq!(client.next_chunk().expect("heartbeat"), Chunk::Dropped(0));
    assert!(quiet.elapsed() < Duration::from_secs(3));
    publisher.stop();
    assert!(
        client.next_chunk().is_err(),
        "stopping closes the connection"
    );
}

/// A trace of `n` spans on one host thread.
fn host_spans(n: usize) -> Trace {
    use keel_device::profiler::{Lane, LaneKind, Span};
    Trace {
        version: keel_device::profiler::TRACE_VERSION,
        lanes: vec![Lane {
            kind: LaneKind::Host { thread: 1 },
            name: "main".to_owned(),
            group: String::new(),
        }],
        spans: (0..n as u64)
            .map(|i| Span {
                lane: 0,
                name: "step".into(),
                kind: SpanKind::Annotation,
                start_ns: i * 1000,
                dur_ns: 500,
                op: 0,
                args: Vec::new(),
            })
            .collect(),
        ..Trace::default()
    }
}

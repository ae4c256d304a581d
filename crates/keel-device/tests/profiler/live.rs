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
    let mut hello = [0u8; 16];
    bad.read_exact(&mut hello).expect("hello");
    assert_eq!(&hello[..8], b"KEELLIVE");
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
        s.write_all(&1u32.to_le_bytes()).expect("version");
        s.write_all(&1u32.to_le_bytes()).expect("trace version");
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
    let e = client.next_chunk().expect_err("not a trace");
    assert!(e.to_string().contains("trace format error"), "{e}");
    let e = client.next_chunk().expect_err("closed after an error");
    assert!(e.to_string().contains("not connected"), "{e}");
    peer.join().expect("peer");

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

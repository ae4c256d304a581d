//! Live streaming: a TCP server in the profiled process and a client for
//! viewers.
//!
//! [`serve`] streams this process's recording session. [`publish`] streams
//! traces a program makes itself (a bridge from another profiler, a
//! generator), through the same protocol, without starting a session.
//!
//! # Protocol (version 2)
//! All integers are little-endian.
//!
//! 1. On connect the server sends its hello: the 8 bytes `KEELLIVE`, `u32`
//!    protocol version, `u32` trace-model version, then the program that
//!    streams ([`Program`]): `i64` origin (the Unix time in ns of its
//!    traces' time 0), `u32` process id, `u16` name length and the name in
//!    UTF-8 (at most 255 bytes). The origin puts several programs, and a
//!    program that restarted, on one clock.
//! 2. The client answers with the same 8 bytes and the `u32` protocol
//!    version it speaks. A mismatch closes the connection.
//! 3. The server then sends chunks: `u32` payload length, `u8` kind, then
//!    the payload (length counts the payload only, at most 64 MiB).
//!    - kind 1, *fragment*: a trace fragment in the [native
//!      format](keel_trace::native), self-contained (its own string table, device
//!      and lane tables). The first fragment after the handshake carries
//!      every device and lane seen so far; later ones carry what was
//!      recorded since the previous one. Viewers merge fragments with
//!      [`Trace::merge`].
//!    - kind 2, *dropped*: `u64` total chunks this viewer has missed
//!      because it read too slowly.
//!
//! # Never blocking the profiled program
//! Each fragment goes to every viewer's bounded queue; for [`serve`], a
//! collector thread makes the session emit every `interval`. A full queue
//! drops the fragment for that viewer and counts it; only the viewer's own
//! writer thread ever waits on its socket.
//!
//! # Safety of the listening address
//! [`serve`] and [`publish`] bind loopback addresses only; listening on
//! another address needs [`LiveOptions::allow_remote`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::collect::{self, Sink};
use crate::error::{Error, Result};
use keel_trace::native;
use keel_trace::{TRACE_VERSION, Trace};

/// The live protocol's version.
pub const PROTOCOL_VERSION: u32 = 2;
const MAGIC: &[u8; 8] = b"KEELLIVE";
/// The largest chunk payload either side accepts.
pub const MAX_CHUNK: usize = 64 << 20;
const KIND_FRAGMENT: u8 = 1;
const KIND_DROPPED: u8 = 2;
/// The longest program name a hello carries, in bytes.
const MAX_NAME: usize = 255;

fn io(what: &str, e: std::io::Error) -> Error {
    Error::Backend {
        backend: "profiler live".to_owned(),
        message: format!("{what}: {e}"),
    }
}

fn protocol(message: impl Into<String>) -> Error {
    Error::Backend {
        backend: "profiler live".to_owned(),
        message: message.into(),
    }
}

/// The program a live server streams, as its hello says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Program {
    /// Its name (the executable's file stem unless
    /// [`LiveOptions::program_name`] says otherwise).
    pub name: String,
    /// Its process id.
    pub pid: u32,
    /// The Unix time, in ns, of its traces' time 0.
    pub origin_unix_ns: i64,
}

impl Program {
    /// This process, with its traces' time 0 at `origin` (an instant of
    /// this process's monotonic clock).
    fn this_process(name: Option<&str>, origin: Instant) -> Program {
        let name = name.map_or_else(
            || {
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| "program".to_owned())
            },
            str::to_owned,
        );
        Program {
            name: clip(&name, MAX_NAME).to_owned(),
            pid: std::process::id(),
            origin_unix_ns: unix_ns_at(origin),
        }
    }

    /// A label for the program's lanes: `train (pid 4242)`.
    pub fn label(&self) -> String {
        format!("{} (pid {})", self.name, self.pid)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let name = clip(&self.name, MAX_NAME);
        out.extend_from_slice(&self.origin_unix_ns.to_le_bytes());
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
    }
}

/// The longest prefix of `s` of at most `max` bytes ending at a character
/// boundary.
fn clip(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The Unix time, in ns, of `at` (an instant of the monotonic clock).
fn unix_ns_at(at: Instant) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let ago = Instant::now().saturating_duration_since(at).as_nanos() as i64;
    now - ago
}

/// How [`serve_with`] and [`publish`] run.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Allow listening on a non-loopback address (off by default: a trace
    /// shows what a program does).
    pub allow_remote: bool,
    /// How often the collector drains the recording buffers ([`serve`]
    /// only).
    pub interval: Duration,
    /// Fragments each viewer may have queued before new ones are dropped.
    pub queue_chunks: usize,
    /// The program name viewers show (`None`: the executable's file stem).
    pub program_name: Option<String>,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            allow_remote: false,
            interval: Duration::from_millis(100),
            queue_chunks: 64,
            program_name: None,
        }
    }
}

struct Viewer {
    tx: SyncSender<Arc<Vec<u8>>>,
    dropped: Arc<AtomicU64>,
}

struct Shared {
    stop: AtomicBool,
    viewers: Mutex<Vec<Viewer>>,
    /// Every device and lane seen so far, as a fragment with no events:
    /// the first thing a new viewer receives.
    tables: Mutex<Trace>,
    /// The program, set before the first viewer is accepted.
    program: OnceLock<Program>,
    dropped_total: AtomicU64,
    viewers_served: AtomicU64,
}

/// A server streaming the traces its owner [`send`](Self::send)s to every
/// connected viewer; dropping it (or [`stop`](Self::stop)) closes every
/// connection.
pub struct Publisher {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Publisher({})", self.addr)
    }
}

/// A running live server; dropping it (or [`stop`](Self::stop)) ends the
/// recording session and closes every connection.
pub struct LiveServer {
    publisher: Publisher,
    collector: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LiveServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveServer({})", self.publisher.addr)
    }
}

/// Serves the profile of this process live on a loopback address
/// (`"127.0.0.1:0"` picks a free port; see [`LiveServer::addr`]).
/// Starts a recording session, so no other session may be running.
pub fn serve(addr: impl ToSocketAddrs) -> Result<LiveServer> {
    serve_with(addr, LiveOptions::default())
}

/// [`serve`] with options.
pub fn serve_with(addr: impl ToSocketAddrs, options: LiveOptions) -> Result<LiveServer> {
    let listener = bind(addr, &options)?;
    let shared = new_shared();
    let epoch = collect::begin(Box::new(LiveSink {
        shared: Arc::clone(&shared),
    }))?;
    let _ = shared.program.set(Program::this_process(
        options.program_name.as_deref(),
        epoch,
    ));
    let collector = {
        let shared = Arc::clone(&shared);
        let interval = options.interval;
        std::thread::Builder::new()
            .name("keel-live-collector".to_owned())
            .spawn(move || {
                while !shared.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(interval);
                    collect::flush();
                }
            })
    };
    let started = collector
        .map_err(|e| io("starting the collector thread", e))
        .and_then(|c| Ok((c, start(listener, &shared, &options)?)));
    match started {
        Ok((collector, publisher)) => Ok(LiveServer {
            publisher,
            collector: Some(collector),
        }),
        Err(e) => {
            shared.stop.store(true, Ordering::Relaxed);
            drop(collect::end());
            Err(e)
        }
    }
}

/// Publishes traces live on a loopback address without recording: the
/// caller [`send`](Publisher::send)s fragments whose times count from the
/// moment of this call (the program's origin).
pub fn publish(addr: impl ToSocketAddrs, options: LiveOptions) -> Result<Publisher> {
    let listener = bind(addr, &options)?;
    let shared = new_shared();
    let _ = shared.program.set(Program::this_process(
        options.program_name.as_deref(),
        Instant::now(),
    ));
    start(listener, &shared, &options)
}

fn new_shared() -> Arc<Shared> {
    Arc::new(Shared {
        stop: AtomicBool::new(false),
        viewers: Mutex::new(Vec::new()),
        tables: Mutex::new(Trace {
            version: TRACE_VERSION,
            ..Trace::default()
        }),
        program: OnceLock::new(),
        dropped_total: AtomicU64::new(0),
        viewers_served: AtomicU64::new(0),
    })
}

/// Binds a listener, refusing non-loopback addresses unless allowed.
fn bind(addr: impl ToSocketAddrs, options: &LiveOptions) -> Result<TcpListener> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| io("resolving the listen address", e))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::invalid("serve: the address resolved to nothing"));
    }
    if !options.allow_remote
        && let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback())
    {
        return Err(Error::invalid(format!(
            "serve: expected a loopback address, found {a}; set LiveOptions::allow_remote to listen on other interfaces"
        )));
    }
    let listener = TcpListener::bind(&addrs[..]).map_err(|e| io("binding the live server", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| io("configuring the listener", e))?;
    Ok(listener)
}

/// Starts the accept thread.
fn start(listener: TcpListener, shared: &Arc<Shared>, options: &LiveOptions) -> Result<Publisher> {
    let addr = listener
        .local_addr()
        .map_err(|e| io("reading the bound address", e))?;
    let acceptor = {
        let shared = Arc::clone(shared);
        let queue = options.queue_chunks.max(1);
        std::thread::Builder::new()
            .name("keel-live-accept".to_owned())
            .spawn(move || accept_loop(&listener, &shared, queue))
            .map_err(|e| io("starting the accept thread", e))?
    };
    Ok(Publisher {
        addr,
        shared: Arc::clone(shared),
        acceptor: Some(acceptor),
    })
}

impl Publisher {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The program viewers are told about.
    pub fn program(&self) -> &Program {
        // Set before the publisher is returned.
        self.shared.program.get().expect("program set at start")
    }

    /// Sends `fragment` (times in ns from [`Program::origin_unix_ns`]) to
    /// every viewer; never waits for one (see the module docs). A fragment
    /// that cannot be encoded or is over [`MAX_CHUNK`] is dropped, counted
    /// and returned as an error.
    pub fn send(&self, fragment: &Trace) -> Result<()> {
        broadcast(&self.shared, fragment)
    }

    /// Fragments dropped for slow viewers so far (all viewers together).
    pub fn dropped_chunks(&self) -> u64 {
        self.shared.dropped_total.load(Ordering::Relaxed)
    }

    /// Viewers that completed the handshake so far.
    pub fn viewers_served(&self) -> u64 {
        self.shared.viewers_served.load(Ordering::Relaxed)
    }

    /// Viewers connected now.
    pub fn viewers(&self) -> usize {
        lock(&self.shared.viewers).len()
    }

    /// Stops serving and closes every connection.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        lock(&self.shared.viewers).clear();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl LiveServer {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.publisher.addr
    }

    /// The program viewers are told about (this process).
    pub fn program(&self) -> &Program {
        self.publisher.program()
    }

    /// Fragments dropped for slow viewers so far (all viewers together).
    pub fn dropped_chunks(&self) -> u64 {
        self.publisher.dropped_chunks()
    }

    /// Viewers that completed the handshake so far.
    pub fn viewers_served(&self) -> u64 {
        self.publisher.viewers_served()
    }

    /// Stops serving and ends the recording session.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.publisher.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.collector.take() {
            let _ = t.join();
            let _ = collect::end();
        }
        self.publisher.shutdown();
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn chunk(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 5);
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.push(kind);
    v.extend_from_slice(payload);
    v
}

/// The live server's sink: each fragment goes to every viewer's queue.
struct LiveSink {
    shared: Arc<Shared>,
}

impl Sink for LiveSink {
    fn emit(&mut self, fragment: Trace) {
        if let Err(e) = broadcast(&self.shared, &fragment) {
            eprintln!("keel live: {e}");
        }
    }

    /// The server's session returns no trace: its fragments went out live.
    fn finish(self: Box<Self>) -> Trace {
        Trace {
            version: TRACE_VERSION,
            ..Trace::default()
        }
    }
}

/// Hands `fragment` to every viewer's queue, dropping (and counting) it
/// for those whose queue is full.
fn broadcast(shared: &Shared, fragment: &Trace) -> Result<()> {
    if shared.stop.load(Ordering::Relaxed) {
        return Ok(()); // the server is closing: no viewer is left to send to
    }
    remember_tables(shared, fragment);
    let empty = fragment.spans.is_empty()
        && fragment.instants.is_empty()
        && fragment.flows.is_empty()
        && fragment.counters.is_empty()
        && fragment.memory.is_empty()
        && fragment.dropped == 0;
    if empty {
        return Ok(());
    }
    let bytes = native::to_native_bytes(fragment).inspect_err(|_| {
        shared.dropped_total.fetch_add(1, Ordering::Relaxed);
    })?;
    if bytes.len() > MAX_CHUNK {
        shared.dropped_total.fetch_add(1, Ordering::Relaxed);
        return Err(Error::invalid(format!(
            "live: dropped a {}-byte fragment; a chunk holds at most {MAX_CHUNK} bytes",
            bytes.len()
        )));
    }
    let message = Arc::new(chunk(KIND_FRAGMENT, &bytes));
    let mut viewers = lock(&shared.viewers);
    viewers.retain(|v| match v.tx.try_send(Arc::clone(&message)) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) => {
            v.dropped.fetch_add(1, Ordering::Relaxed);
            shared.dropped_total.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(TrySendError::Disconnected(_)) => false,
    });
    Ok(())
}

/// Keeps the union of devices and lanes seen, for new viewers.
fn remember_tables(shared: &Shared, fragment: &Trace) {
    let mut tables = lock(&shared.tables);
    let _ = tables.merge(fragment.tables_only());
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, queue: usize) {
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let shared = Arc::clone(shared);
                let _ = std::thread::Builder::new()
                    .name("keel-live-viewer".to_owned())
                    .spawn(move || {
                        let _ = serve_viewer(stream, &shared, queue);
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn serve_viewer(mut stream: TcpStream, shared: &Shared, queue: usize) -> Result<()> {
    stream
        .set_nonblocking(false)
        .map_err(|e| io("configuring a viewer socket", e))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| io("configuring a viewer socket", e))?;
    let _ = stream.set_nodelay(true);
    let mut hello = Vec::with_capacity(64);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    hello.extend_from_slice(&TRACE_VERSION.to_le_bytes());
    shared
        .program
        .get()
        .ok_or_else(|| protocol("the program is not known yet"))?
        .encode(&mut hello);
    stream
        .write_all(&hello)
        .map_err(|e| io("sending the hello", e))?;
    let mut answer = [0u8; 12];
    stream
        .read_exact(&mut answer)
        .map_err(|e| io("reading the viewer's handshake", e))?;
    if &answer[..8] != MAGIC {
        return Err(protocol("viewer handshake: expected the KEELLIVE magic"));
    }
    let version = u32::from_le_bytes([answer[8], answer[9], answer[10], answer[11]]);
    if version != PROTOCOL_VERSION {
        return Err(protocol(format!(
            "viewer handshake: expected protocol version {PROTOCOL_VERSION}, found {version}"
        )));
    }
    let (tx, rx) = sync_channel::<Arc<Vec<u8>>>(queue);
    let dropped = Arc::new(AtomicU64::new(0));
    // The tables go out before this viewer can receive any fragment, with
    // the viewer list locked so no fragment slips between the two.
    let tables = {
        let mut viewers = lock(&shared.viewers);
        let tables = native::to_native_bytes(&lock(&shared.tables))?;
        viewers.push(Viewer {
            tx,
            dropped: Arc::clone(&dropped),
        });
        tables
    };
    shared.viewers_served.fetch_add(1, Ordering::Relaxed);
    stream
        .write_all(&chunk(KIND_FRAGMENT, &tables))
        .map_err(|e| io("sending the tables", e))?;
    write_loop(stream, &rx, &dropped, shared)
}

fn write_loop(
    mut stream: TcpStream,
    rx: &Receiver<Arc<Vec<u8>>>,
    dropped: &AtomicU64,
    shared: &Shared,
) -> Result<()> {
    let mut reported = 0;
    let mut last_write = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let Ok(message) = rx.recv_timeout(Duration::from_millis(100)) else {
            // An idle program still says it is alive once a second (the
            // drop count, which viewers take as it is), so a viewer tells
            // a quiet program from a lost connection.
            if last_write.elapsed() >= Duration::from_secs(1) {
                let now = dropped.load(Ordering::Relaxed);
                stream
                    .write_all(&chunk(KIND_DROPPED, &now.to_le_bytes()))
                    .map_err(|e| io("writing to a viewer", e))?;
                reported = now;
                last_write = Instant::now();
            }
            continue;
        };
        last_write = Instant::now();
        let now = dropped.load(Ordering::Relaxed);
        if now != reported {
            stream
                .write_all(&chunk(KIND_DROPPED, &now.to_le_bytes()))
                .map_err(|e| io("writing to a viewer", e))?;
            reported = now;
        }
        stream
            .write_all(&message)
            .map_err(|e| io("writing to a viewer", e))?;
    }
    Ok(())
}

/// What a [`Client`] receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// A trace fragment (merge it with [`Trace::merge`]).
    Fragment(Box<Trace>),
    /// The total number of fragments this viewer has missed so far.
    Dropped(u64),
}

/// A viewer's connection to a [`LiveServer`].
#[derive(Debug)]
pub struct Client {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    program: Option<Program>,
}

impl Client {
    /// Connects and completes the handshake.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client> {
        let addr = addr
            .to_socket_addrs()
            .map_err(|e| io("resolving the server address", e))?
            .next()
            .ok_or_else(|| Error::invalid("connect: the address resolved to nothing"))?;
        let mut c = Client {
            addr,
            stream: None,
            program: None,
        };
        c.reconnect()?;
        Ok(c)
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The program at the other end, as the last handshake said (a
    /// restarted program has a new process id and origin).
    pub fn program(&self) -> Option<&Program> {
        self.program.as_ref()
    }

    /// Whether a connection is open.
    pub fn is_connected(&self) -> bool {
        self.stream.is_some()
    }

    /// Drops the current connection (if any) and connects again.
    pub fn reconnect(&mut self) -> Result<()> {
        self.stream = None;
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))
            .map_err(|e| io(&format!("connecting to {}", self.addr), e))?;
        // Servers send at least one chunk a second (see `write_loop`).
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| io("configuring the socket", e))?;
        let mut hello = [0u8; 16];
        s.read_exact(&mut hello)
            .map_err(|e| io("reading the server hello", e))?;
        if &hello[..8] != MAGIC {
            return Err(protocol(
                "server hello: expected the KEELLIVE magic (is this a Keel live server?)",
            ));
        }
        let version = u32::from_le_bytes([hello[8], hello[9], hello[10], hello[11]]);
        if version != PROTOCOL_VERSION {
            return Err(protocol(format!(
                "server hello: expected protocol version {PROTOCOL_VERSION}, found {version}"
            )));
        }
        let program = read_program(&mut s)?;
        let mut answer = Vec::with_capacity(12);
        answer.extend_from_slice(MAGIC);
        answer.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        s.write_all(&answer)
            .map_err(|e| io("sending the handshake", e))?;
        self.stream = Some(s);
        self.program = Some(program);
        Ok(())
    }

    /// The next chunk. Malformed input closes the connection with a clear
    /// error (call [`reconnect`](Self::reconnect) to continue).
    pub fn next_chunk(&mut self) -> Result<Chunk> {
        let Some(s) = self.stream.as_mut() else {
            return Err(protocol("not connected: call reconnect()"));
        };
        let result = read_chunk(s);
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    /// The next chunk, reconnecting (up to `attempts` times, 200 ms apart)
    /// when the connection drops.
    pub fn next_chunk_reconnecting(&mut self, attempts: u32) -> Result<Chunk> {
        let mut last = None;
        for _ in 0..=attempts {
            if self.stream.is_none()
                && let Err(e) = self.reconnect()
            {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            match self.next_chunk() {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| protocol("no connection")))
    }
}

fn read_chunk(s: &mut TcpStream) -> Result<Chunk> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head)
        .map_err(|e| io("reading a chunk header", e))?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > MAX_CHUNK {
        return Err(protocol(format!(
            "chunk header: expected a payload of at most {MAX_CHUNK} bytes, found {len}"
        )));
    }
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)
        .map_err(|e| io(&format!("reading a {len}-byte chunk"), e))?;
    match head[4] {
        KIND_FRAGMENT => Ok(Chunk::Fragment(Box::new(native::read_native(&payload)?))),
        KIND_DROPPED => {
            let bytes: [u8; 8] = payload.as_slice().try_into().map_err(|_| {
                protocol(format!(
                    "dropped chunk: expected an 8-byte count, found {len} bytes"
                ))
            })?;
            Ok(Chunk::Dropped(u64::from_le_bytes(bytes)))
        }
        k => Err(protocol(format!(
            "chunk header: expected kind 1 (fragment) or 2 (dropped), found {k}"
        ))),
    }
}

/// Reads the program part of a server hello.
fn read_program(s: &mut TcpStream) -> Result<Program> {
    let mut head = [0u8; 14];
    s.read_exact(&mut head)
        .map_err(|e| io("reading the server hello", e))?;
    let origin_unix_ns = i64::from_le_bytes(head[..8].try_into().unwrap_or_default());
    let pid = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    let len = usize::from(u16::from_le_bytes([head[12], head[13]]));
    if len > MAX_NAME {
        return Err(protocol(format!(
            "server hello: expected a program name of at most {MAX_NAME} bytes, found {len}"
        )));
    }
    let mut name = vec![0u8; len];
    s.read_exact(&mut name)
        .map_err(|e| io("reading the server hello", e))?;
    let name = String::from_utf8(name).map_err(|e| {
        let bytes = e.into_bytes();
        protocol(format!(
            "server hello: expected a UTF-8 program name, found {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(32)])
        ))
    })?;
    Ok(Program {
        name,
        pid,
        origin_unix_ns,
    })
}

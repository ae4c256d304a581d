//! Test data: the ranks of a data-parallel job made from one real PyTorch
//! (Kineto) trace, with what is known about them by construction.
//!
//! The real GPT-2 training trace (`tests/data/import/gpt2_train_h200...`)
//! ran on one GPU and has no NCCL kernels, so each rank is that trace with
//! three changes, all by exact integer arithmetic on the file's decimal
//! microseconds (no float rounding):
//!
//! - **Clock skew**: every `ts` of rank `r` is moved by `skews_ns[r]`, as
//!   if its host's clock ran that far ahead (`baseTimeNanoseconds` stays,
//!   so the file's own times move).
//! - **Profile window**: rank `r` drops the events (other than metadata)
//!   that start in the first `trims_ns[r]` of the trace, as if its profiler
//!   began that much later; so the files' earliest events differ, and
//!   aligning them on their starts is not the same as on their clocks.
//!   Trims stay well before the first collective.
//! - **Collectives**: the kernels `GammaBetaBackwardCUDAKernelTemplate`
//!   (the weight and bias gradients of each layer norm's backward, 25 per
//!   step, 50 in the trace) become [`COLLECTIVE`] all-reduces, moved to
//!   their own stream ([`NCCL_STREAM`], as NCCL runs its own) with their
//!   launch flows. Rank [`Job::late`] enters the `n`-th one
//!   [`Job::delay_ns`]`(n)` late: its kernel starts that much later,
//!   while every other rank's starts on time and lasts that much longer
//!   (it waits), so a collective ends on every rank at the same moment,
//!   up to a jitter of at most [`Job::jitter_ns`] either way on each
//!   rank's end.
//!
//! So by construction: the clock skew of rank `r` against rank 0 is
//! `skews_ns[r] - skews_ns[0]`, and the ends of the matched collectives
//! tell it within `2 * jitter_ns`; the late rank starts last in every
//! collective, by `delay_ns(n)` (within `4 * jitter_ns` once skews are
//! estimated).

use serde_json::Value;

/// The name the marked kernels get.
pub const COLLECTIVE: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";

/// The kernels marked as collectives (a name fragment).
const MARKED: &str = "GammaBetaBackwardCUDAKernelTemplate";

/// The stream (tid on the GPU's pid) collectives are moved to.
pub const NCCL_STREAM: i64 = 99;

/// The marked kernels in the real trace.
pub const MARKED_COUNT: usize = 50;

/// The real trace every rank is made from.
pub fn source() -> Vec<u8> {
    use std::io::Read;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/import/gpt2_train_h200.pt.trace.json.gz");
    let file = std::fs::File::open(path).expect("the GPT-2 trace");
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut text)
        .expect("gunzip");
    text
}

/// A job: what each rank's file differs by.
#[derive(Debug, Clone)]
pub struct Job {
    /// Per rank, how far its clock is ahead, ns.
    pub skews_ns: Vec<i64>,
    /// Per rank, how much later its profile window opens, ns.
    pub trims_ns: Vec<u64>,
    /// The rank that enters collectives late.
    pub late: usize,
    /// The bound of each rank's jitter on a collective's end, ns.
    pub jitter_ns: u64,
}

impl Job {
    /// `ranks` ranks with skews of up to a few ms either way, windows
    /// opening up to 3 ms apart, and the last rank late.
    pub fn new(ranks: usize) -> Job {
        Job {
            skews_ns: (0..ranks as i64)
                .map(|r| {
                    if r == 0 {
                        0
                    } else {
                        (r * 1_370_123) % 4_000_000 - 1_500_000
                    }
                })
                .collect(),
            trims_ns: (0..ranks as u64)
                .map(|r| (r * 1_130_017) % 3_000_000)
                .collect(),
            late: ranks - 1,
            jitter_ns: 2_000,
        }
    }

    /// How late the late rank enters collective `n`: 20 to 90 us.
    pub fn delay_ns(n: usize) -> u64 {
        20_000 + 7_000 * (n as u64 % 11)
    }

    /// The jitter on rank `rank`'s end of collective `n`, in
    /// `-jitter_ns..=jitter_ns` (deterministic).
    pub fn jitter(&self, rank: usize, n: usize) -> i64 {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ((rank as u64) << 32 | n as u64);
        for _ in 0..3 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        let span = 2 * self.jitter_ns + 1;
        (x % span) as i64 - self.jitter_ns as i64
    }
}

/// A decimal number of microseconds (at most three decimals, as Kineto
/// writes them) as exact ns.
fn ns_of(v: &Value) -> Option<i128> {
    let text = match v {
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    assert!(frac.len() <= 3, "more than ns precision: {text}");
    let frac: i128 = format!("{frac:0<3}").parse().expect("digits");
    let int: i128 = int.parse().expect("an integer part");
    Some(if int < 0 || text.starts_with('-') {
        int * 1000 - frac
    } else {
        int * 1000 + frac
    })
}

/// Exact ns as a JSON number of microseconds with three decimals.
fn number(ns: i128) -> Value {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    serde_json::from_str(&format!("{sign}{}.{:03}", a / 1000, a % 1000)).expect("a number")
}

/// The ranks' files (JSON text), one per rank of `job`, from `source`
/// (the real trace's JSON text).
pub fn make(source: &[u8], job: &Job) -> Vec<Vec<u8>> {
    let mut trace: Value = serde_json::from_slice(source).expect("the real trace is JSON");
    // The top-level fields are copied per rank, the events rewritten.
    let Value::Array(events) = trace["traceEvents"].take() else {
        panic!("expected a traceEvents array");
    };
    let first = events
        .iter()
        .filter(|e| e["ph"] != "M")
        .filter_map(|e| ns_of(&e["ts"]))
        .min()
        .expect("events");
    // The marked kernels in order of start, by correlation id (which
    // their launch flows carry as `id`).
    let mut marked: Vec<(i128, i64)> = events
        .iter()
        .filter(|e| e["cat"] == "kernel" && e["name"].as_str().is_some_and(|n| n.contains(MARKED)))
        .map(|e| {
            (
                ns_of(&e["ts"]).expect("a kernel ts"),
                e["args"]["correlation"].as_i64().expect("a correlation"),
            )
        })
        .collect();
    marked.sort_unstable();
    assert_eq!(
        marked.len(),
        MARKED_COUNT,
        "the real trace's marked kernels"
    );
    let nth: std::collections::HashMap<i64, usize> = marked
        .iter()
        .enumerate()
        .map(|(n, &(_, c))| (c, n))
        .collect();

    (0..job.skews_ns.len())
        .map(|rank| {
            let skew = i128::from(job.skews_ns[rank]);
            let cut = first + i128::from(job.trims_ns[rank]);
            let mut out = Vec::with_capacity(events.len() + 1);
            for e in &events {
                let ts = ns_of(&e["ts"]);
                let meta = e["ph"] == "M";
                if !meta && ts.is_some_and(|t| t < cut) {
                    continue;
                }
                let mut e = e.clone();
                let collective = match (&e["cat"], &e["args"]["correlation"], &e["id"]) {
                    (c, corr, _) if c == "kernel" => corr.as_i64().and_then(|c| nth.get(&c)),
                    (c, _, id) if c == "ac2g" && e["ph"] == "f" => {
                        id.as_i64().and_then(|c| nth.get(&c))
                    }
                    _ => None,
                }
                .copied();
                let mut start = ts;
                if let (Some(n), Some(t)) = (collective, ts) {
                    let delay = i128::from(Job::delay_ns(n));
                    let jitter = i128::from(job.jitter(rank, n));
                    if rank == job.late {
                        start = Some(t + delay);
                    }
                    if e["ph"] == "X" {
                        let dur = ns_of(&e["dur"]).expect("a kernel dur");
                        let dur = if rank == job.late {
                            dur + jitter
                        } else {
                            dur + delay + jitter
                        };
                        e["dur"] = number(dur);
                        e["name"] = Value::from(COLLECTIVE);
                        e["args"]["stream"] = Value::from(NCCL_STREAM);
                    }
                    e["tid"] = Value::from(NCCL_STREAM);
                }
                if let Some(t) = start {
                    e["ts"] = number(t + skew);
                }
                out.push(e);
            }
            out.push(serde_json::json!({
                "ph": "M", "name": "thread_name", "pid": 0, "tid": NCCL_STREAM,
                "args": {"name": format!("stream {NCCL_STREAM} ")}
            }));
            let mut file = trace.clone();
            file["traceEvents"] = Value::Array(out);
            file["distributedInfo"] = serde_json::json!({
                "backend": "nccl", "rank": rank, "world_size": job.skews_ns.len()
            });
            serde_json::to_vec(&file).expect("JSON")
        })
        .collect()
}

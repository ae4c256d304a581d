//! An allocation trace shaped like a training step, for the caching
//! allocator's fragmentation test and benchmark: weights allocated once,
//! many activations in the forward pass, gradients in the backward pass
//! that free the activations in reverse, temporaries freed soon after
//! they are made, an input batch and gradient buckets on a second stream,
//! frees in mixed order.

use crate::Buffer;
use crate::core::Stream;
use crate::error::Result;

/// One step of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate buffer `id` of `bytes` on stream `stream` (0 or 1).
    Alloc {
        /// The buffer's id (an index into the replay's table).
        id: usize,
        /// Its size.
        bytes: usize,
        /// Which of the two streams.
        stream: usize,
    },
    /// Drop buffer `id`.
    Free {
        /// The buffer's id.
        id: usize,
    },
}

struct Gen {
    ops: Vec<TraceOp>,
    next: usize,
    rng: u64,
}

impl Gen {
    fn rand(&mut self, lo: usize, hi: usize) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        lo + (self.rng % (hi - lo + 1) as u64) as usize
    }

    fn alloc(&mut self, bytes: usize, stream: usize) -> usize {
        let id = self.next;
        self.next += 1;
        self.ops.push(TraceOp::Alloc { id, bytes, stream });
        id
    }

    fn free(&mut self, id: usize) {
        self.ops.push(TraceOp::Free { id });
    }
}

/// `steps` training steps of a 48-layer model, as the issue describes
/// one: a few large weights (6 matrices of 4 to 16 MiB, 52 MiB in all) and
/// small parameters (4 to 64 KiB each), allocated once on stream 0; per
/// step, an input batch on stream 1 (the loader's), three activations per
/// layer (16 KiB to 1 MiB, each the same size every step: same model, same
/// batch), temporaries of 1 to 64 KiB freed soon in mixed order, and in
/// the backward pass activation gradients that free the activations in
/// reverse, weight gradients on stream 1 freed in mixed order as their
/// buckets fill. Deterministic.
pub fn training_steps(steps: usize) -> Vec<TraceOp> {
    let mut g = Gen {
        ops: Vec::new(),
        next: 0,
        rng: 0x9e37_79b9_7f4a_7c15,
    };
    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;
    const LAYERS: usize = 48;
    let large = [16 * MIB, 8 * MIB, 8 * MIB, 4 * MIB, 4 * MIB, 12 * MIB];
    let mut weights = Vec::new();
    for (i, &w) in large.iter().enumerate() {
        weights.push((g.alloc(w, 0), w, i * 8));
    }
    for l in 0..LAYERS {
        let p = g.rand(4, 64) * KIB;
        weights.push((g.alloc(p, 0), p, l));
    }
    let acts: Vec<[usize; 3]> = (0..LAYERS)
        .map(|_| [0; 3].map(|_| g.rand(16, 1024) * KIB))
        .collect();
    for _ in 0..steps {
        let batch = g.alloc(512 * KIB, 1);
        let mut live = Vec::new();
        let mut temps = Vec::new();
        for (l, sizes) in acts.iter().enumerate() {
            live.push(sizes.map(|a| g.alloc(a, 0)));
            for _ in 0..2 {
                let t = g.rand(1, 64) * KIB;
                temps.push(g.alloc(t, 0));
            }
            while temps.len() > 3 {
                let i = g.rand(0, temps.len() - 1);
                let t = temps.swap_remove(i);
                g.free(t);
            }
            if l == 0 {
                g.free(batch);
            }
        }
        for t in temps.drain(..) {
            g.free(t);
        }
        let mut grads = Vec::new();
        let mut upstream: Vec<usize> = Vec::new();
        for l in (0..LAYERS).rev() {
            let ga = acts[l].map(|a| g.alloc(a, 0));
            for id in live[l] {
                g.free(id);
            }
            for u in upstream.drain(..) {
                g.free(u);
            }
            upstream.extend(ga);
            for &(_, w, layer) in &weights {
                if layer == l {
                    grads.push(g.alloc(w, 1));
                }
            }
            while grads.len() > 4 {
                let i = g.rand(0, grads.len() - 1);
                let x = grads.swap_remove(i);
                g.free(x);
            }
        }
        for u in upstream {
            g.free(u);
        }
        while !grads.is_empty() {
            let i = g.rand(0, grads.len() - 1);
            let x = grads.swap_remove(i);
            g.free(x);
        }
    }
    for (w, _, _) in weights {
        g.free(w);
    }
    g.ops
}

/// Replays `trace` with uninitialised buffers ([`Buffer::empty_on`]) on
/// `streams` (of one device); every buffer is dropped at the end.
pub fn replay(streams: [Stream; 2], trace: &[TraceOp]) -> Result<()> {
    let ids = trace
        .iter()
        .filter_map(|op| match op {
            TraceOp::Alloc { id, .. } => Some(id + 1),
            TraceOp::Free { .. } => None,
        })
        .max()
        .unwrap_or(0);
    let mut live: Vec<Option<Buffer>> = (0..ids).map(|_| None).collect();
    for op in trace {
        match *op {
            TraceOp::Alloc { id, bytes, stream } => {
                live[id] = Some(Buffer::empty_on(&streams[stream], bytes)?);
            }
            TraceOp::Free { id } => live[id] = None,
        }
    }
    Ok(())
}

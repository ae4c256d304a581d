//! Aligning two sequences of names (operator names as ids): which
//! elements of one pair with which of the other, in order.
//!
//! Note [Bounded alignment]: the alignment is Myers' O(ND) difference
//! algorithm run in rounds, each round allowed at most [`ROUND_EDITS`]
//! edits and a window of [`WINDOW`] elements of each side. A round that
//! reaches the end of both windows keeps its whole path; one that runs out
//! of edits keeps the path to the point it reached furthest along the
//! diagonal (the most elements of both sides consumed) only up to its
//! first `ROUND_EDITS / 2` edits, so every kept edit had half a round of
//! look-ahead. Two sequences that differ by at most `ROUND_EDITS / 2`
//! edits between matched stretches get a minimal alignment (a longest
//! common subsequence); a longer inserted or removed block is still
//! walked through, a round at a time, possibly with some elements paired
//! that a global LCS would not pair. In exchange, a round costs at most
//! `ROUND_EDITS^2` steps plus its snakes (bounded by the window), memory is
//! the round's `ROUND_EDITS^2` furthest points whatever the input's size,
//! and the result depends on the input alone. The `similar` crate's
//! Myers bounds its work only by a wall-clock deadline, after which its
//! result depends on the machine's speed and load; a diff that scripts
//! compare must not.

/// The most edits one round may spend; see Note [Bounded alignment].
pub(crate) const ROUND_EDITS: usize = 128;

/// The most elements of each side one round looks at.
pub(crate) const WINDOW: usize = 1 << 13;

/// The matched pairs `(i, j)` (`a[i] == b[j]`) of an alignment of `a` and
/// `b`, both indices increasing; see Note [Bounded alignment].
pub(crate) fn align(a: &[u32], b: &[u32]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut round = Round::default();
    let (mut i, mut j) = (0usize, 0usize);
    loop {
        while i < a.len() && j < b.len() && a[i] == b[j] {
            out.push((i as u32, j as u32));
            i += 1;
            j += 1;
        }
        if i == a.len() || j == b.len() {
            return out;
        }
        let n = (a.len() - i).min(WINDOW);
        let m = (b.len() - j).min(WINDOW);
        let (x, y) = round.run(&a[i..i + n], &b[j..j + m]);
        out.extend(
            round
                .pairs
                .iter()
                .map(|&(p, q)| ((i + p) as u32, (j + q) as u32)),
        );
        // A round always consumes something (x + y >= 1), so this ends.
        i += x;
        j += y;
    }
}

/// One round's buffers, reused across rounds.
#[derive(Default)]
struct Round {
    /// `v[k + ROUND_EDITS + 1]`: the furthest x reached on diagonal k.
    v: Vec<usize>,
    /// After each edit count d, `v` on diagonals `-d..=d`: d's entries
    /// start at `d * d`.
    snaps: Vec<usize>,
    /// The pairs the round keeps, relative to its windows.
    pairs: Vec<(usize, usize)>,
    /// The point just after the path's `ROUND_EDITS / 2`-th edit.
    cut: (usize, usize),
}

impl Round {
    /// Aligns `a` and `b` (both non-empty, `a[0] != b[0]`) as far as one
    /// round goes; returns how much of each it consumed, and leaves the
    /// kept pairs in `self.pairs`.
    fn run(&mut self, a: &[u32], b: &[u32]) -> (usize, usize) {
        let (n, m) = (a.len() as isize, b.len() as isize);
        let dmax = ROUND_EDITS as isize;
        let off = dmax + 1;
        self.v.clear();
        self.v.resize(2 * ROUND_EDITS + 3, 0);
        self.snaps.clear();
        self.pairs.clear();
        let v = &mut self.v;
        let at = |k: isize| (off + k) as usize;
        let mut reached = None;
        'edits: for d in 0..=dmax {
            // Diagonals that stay inside the grid (Myers' bounds).
            let kmin = -(d - 2 * (d - m).max(0));
            let kmax = d - 2 * (d - n).max(0);
            let mut k = kmin;
            while k <= kmax {
                let mut x = if k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]) {
                    v[at(k + 1)] as isize
                } else {
                    v[at(k - 1)] as isize + 1
                };
                let mut y = x - k;
                while x < n && y < m && a[x as usize] == b[y as usize] {
                    x += 1;
                    y += 1;
                }
                v[at(k)] = x as usize;
                if x >= n && y >= m {
                    reached = Some((d, k));
                    self.snaps.extend_from_slice(&v[at(-d)..=at(d)]);
                    break 'edits;
                }
                k += 2;
            }
            self.snaps.extend_from_slice(&v[at(-d)..=at(d)]);
        }
        let (d, k, keep_all) = match reached {
            Some((d, k)) => (d, k, true),
            None => {
                // The furthest point among those reached with all the
                // round's edits; ties go to the diagonal nearest the
                // middle, then the lower one.
                let kmin = -(dmax - 2 * (dmax - m).max(0));
                let kmax = dmax - 2 * (dmax - n).max(0);
                let mut best = (kmin, isize::MIN);
                let mut k = kmin;
                while k <= kmax {
                    let x = v[at(k)] as isize;
                    let score = 2 * x - k;
                    let better = score > best.1
                        || (score == best.1 && k.abs() < best.0.abs())
                        || (score == best.1 && k.abs() == best.0.abs() && k < best.0);
                    if better {
                        best = (k, score);
                    }
                    k += 2;
                }
                (dmax, best.0, false)
            }
        };
        self.trace_back(d, k);
        if keep_all {
            return (a.len(), b.len());
        }
        // Out of edits: keep the path up to its half-way edit.
        let (cx, cy) = self.cut;
        self.pairs.retain(|&(p, _)| p < cx);
        (cx, cy)
    }
}

impl Round {
    /// Walks the path from (the furthest point on diagonal `k` after `d`
    /// edits) back to the origin, leaving its pairs in `self.pairs` in
    /// order and, in `self.cut`, the point just after its
    /// `ROUND_EDITS / 2`-th edit.
    fn trace_back(&mut self, d: isize, k: isize) {
        let snap = |e: isize, k: isize| self.snaps[(e * e + k + e) as usize] as isize;
        let mut x = snap(d, k);
        let mut y = x - k;
        let half = (ROUND_EDITS / 2) as isize;
        let mut cut = (0, 0);
        let mut pairs = Vec::new();
        for e in (1..=d).rev() {
            let k = x - y;
            let down = k == -e || (k != e && snap(e - 1, k - 1) < snap(e - 1, k + 1));
            let kp = if down { k + 1 } else { k - 1 };
            let xs = snap(e - 1, kp);
            let ys = xs - kp;
            let (mx, my) = if down { (xs, ys + 1) } else { (xs + 1, ys) };
            // The snake after this edit.
            let mut t = x - mx;
            while t > 0 {
                t -= 1;
                pairs.push(((mx + t) as usize, (my + t) as usize));
            }
            if e == half {
                cut = (mx as usize, my as usize);
            }
            x = xs;
            y = ys;
        }
        // The snake before the first edit (empty when the caller stripped
        // the common prefix, kept for generality).
        while x > 0 && y > 0 {
            x -= 1;
            y -= 1;
            pairs.push((x as usize, y as usize));
        }
        pairs.reverse();
        self.pairs = pairs;
        self.cut = cut;
    }
}

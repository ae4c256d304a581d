//! Aligning two sequences of names (operator names as ids): which
//! elements of one pair with which of the other, in order.
//!
//! Note [Bounded alignment]: the alignment is Myers' O(ND) difference
//! algorithm run in rounds, each round allowed at most [`ROUND_EDITS`]
//! edits and a window of [`WINDOW`] elements of each side, after the
//! common prefix is taken off.
//!
//! - A round that reaches the end of both windows keeps its whole path: a
//!   minimal alignment (a longest common subsequence) of the windows; up
//!   to its last pair only when the sequences go on past the windows,
//!   whose corner cuts them at an arbitrary place.
//! - One that runs out of edits with a path that still pairs elements
//!   (at least `ROUND_EDITS / 4` of them) keeps that path, to the point it
//!   reached furthest (the most elements of both sides consumed), up to
//!   its `ROUND_EDITS / 2`-th edit, so every kept edit had half a round of
//!   look-ahead.
//! - One whose paths are nearly all edits is inside a block that one side
//!   inserted or replaced: a path of edits alone cannot tell insertions
//!   from deletions there. The sequences re-synchronise at the nearest
//!   pair of positions `(p, q)` (least `p + q`) where [`GRAM`] elements
//!   agree; everything before it on both sides is left unpaired. With no
//!   such pair inside the windows, both windows are left unpaired.
//!
//! Two sequences that differ by at most `ROUND_EDITS / 2` edits between
//! matched stretches thus get an LCS; an inserted or removed block up to
//! the window's length is skipped whole; a longer one loses the pairs of
//! up to a window of the other side. In exchange, a round costs at most
//! `ROUND_EDITS^2` steps plus its snakes and a hash of each window, memory
//! is bounded by the round (`ROUND_EDITS^2` furthest points, a window's
//! hashes) whatever the input's size, and the result depends on the input
//! alone. The `similar` crate's Myers bounds its work only by a wall-clock
//! deadline, after which its result depends on the machine's speed and
//! load; a diff that scripts compare must not.

use std::collections::HashMap;

/// The most edits one round may spend; see Note [Bounded alignment].
pub(crate) const ROUND_EDITS: usize = 128;

/// The most elements of each side one round looks at.
pub(crate) const WINDOW: usize = 1 << 13;

/// How many elements in a row must agree to re-synchronise.
pub(crate) const GRAM: usize = 4;

/// The matched pairs `(i, j)` (`a[i] == b[j]`) of an alignment of `a` and
/// `b`, both indices increasing; see Note [Bounded alignment].
pub(crate) fn align(a: &[u32], b: &[u32]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut round = Round::default();
    let mut grams = HashMap::new();
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
        let (wa, wb) = (&a[i..i + n], &b[j..j + m]);
        let at_end = i + n == a.len() && j + m == b.len();
        let (x, y) = match round.run(wa, wb, at_end) {
            Outcome::Path(x, y) => {
                out.extend(
                    round
                        .pairs
                        .iter()
                        .map(|&(p, q)| ((i + p) as u32, (j + q) as u32)),
                );
                (x, y)
            }
            Outcome::Edits => resync(wa, wb, &mut grams).unwrap_or((n, m)),
        };
        // Every branch consumes something (x + y >= 1), so this ends.
        i += x;
        j += y;
    }
}

/// The nearest `(p, q)` (least `p + q`, then least `p`) where `GRAM`
/// elements of `a` from `p` equal those of `b` from `q`.
fn resync(a: &[u32], b: &[u32], grams: &mut HashMap<[u32; GRAM], usize>) -> Option<(usize, usize)> {
    grams.clear();
    for (q, w) in b.windows(GRAM).enumerate() {
        let key: [u32; GRAM] = w.try_into().ok()?;
        grams.entry(key).or_insert(q);
    }
    let mut best: Option<(usize, usize)> = None;
    for (p, w) in a.windows(GRAM).enumerate() {
        if best.is_some_and(|(bp, bq)| p >= bp + bq) {
            break;
        }
        let key: [u32; GRAM] = w.try_into().ok()?;
        if let Some(&q) = grams.get(&key)
            && best.is_none_or(|(bp, bq)| p + q < bp + bq)
        {
            best = Some((p, q));
        }
    }
    // (0, 0) would mean the windows start equal, which the caller's
    // prefix strip rules out; keep progress certain all the same.
    best.filter(|&(p, q)| p + q > 0)
}

/// What a round found.
enum Outcome {
    /// A path worth keeping, up to (x, y); its pairs are in `Round::pairs`.
    Path(usize, usize),
    /// Out of edits with paths that pair next to nothing.
    Edits,
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
    /// round goes; `at_end` when they are the ends of both sequences.
    fn run(&mut self, a: &[u32], b: &[u32], at_end: bool) -> Outcome {
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
                // x + y = edits + 2 * pairs along the path.
                if (best.1 - dmax) / 2 < dmax / 4 {
                    return Outcome::Edits;
                }
                (dmax, best.0, false)
            }
        };
        self.trace_back(d, k);
        if keep_all {
            // Edits after the last pair only meet the windows' corner: the
            // sequences go on, and the next round decides them.
            return match self.pairs.last() {
                Some(&(x, y)) if !at_end => Outcome::Path(x + 1, y + 1),
                _ => Outcome::Path(a.len(), b.len()),
            };
        }
        // Out of edits: keep the path up to its half-way edit.
        let (cx, cy) = self.cut;
        self.pairs.retain(|&(p, _)| p < cx);
        Outcome::Path(cx, cy)
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The length of a longest common subsequence, by dynamic programming.
    fn lcs(a: &[u32], b: &[u32]) -> usize {
        let mut row = vec![0usize; b.len() + 1];
        for &x in a {
            let mut diag = 0;
            for (j, &y) in b.iter().enumerate() {
                let up = row[j + 1];
                row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
                diag = up;
            }
        }
        row[b.len()]
    }

    fn valid(a: &[u32], b: &[u32], pairs: &[(u32, u32)]) {
        for w in pairs.windows(2) {
            assert!(w[0].0 < w[1].0 && w[0].1 < w[1].1, "{w:?}");
        }
        for &(i, j) in pairs {
            assert_eq!(a[i as usize], b[j as usize]);
        }
    }

    /// xorshift64: test sequences without a dependency.
    fn random(n: usize, alphabet: u32, seed: u64) -> Vec<u32> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % u64::from(alphabet)) as u32
            })
            .collect()
    }

    proptest! {
        /// Within one round's budget the alignment is an LCS.
        #[test]
        fn short_sequences_get_a_longest_common_subsequence(
            a in proptest::collection::vec(0u32..6, 0..40),
            b in proptest::collection::vec(0u32..6, 0..40),
        ) {
            let pairs = align(&a, &b);
            valid(&a, &b, &pairs);
            prop_assert_eq!(pairs.len(), lcs(&a, &b));
        }
    }

    /// A block far longer than a round's edits, inserted or removed, and
    /// single removals after it: everything else pairs with itself.
    #[test]
    fn long_blocks_are_skipped_whole() {
        let a = random(50_000, 10_000, 7);
        let block: Vec<u32> = random(3_000, 10_000, 99)
            .into_iter()
            .map(|x| x + 10_000)
            .collect();
        let mut b = a[..20_000].to_vec();
        b.extend(&block);
        let removed: Vec<usize> = (0..50).map(|k| 21_000 + k * 500).collect();
        // `from[j]` is the index in `a` of `b[j]`, or none.
        let mut from: Vec<Option<u32>> = (0..20_000).map(Some).collect();
        from.extend(std::iter::repeat_n(None, block.len()));
        for (i, &x) in a.iter().enumerate().skip(20_000) {
            if !removed.contains(&i) {
                b.push(x);
                from.push(Some(i as u32));
            }
        }
        let pairs = align(&a, &b);
        valid(&a, &b, &pairs);
        assert_eq!(pairs.len(), a.len() - removed.len());
        assert!(pairs.iter().all(|&(i, j)| from[j as usize] == Some(i)));
        // The other way round: the block removed.
        let back = align(&b, &a);
        assert_eq!(back.len(), a.len() - removed.len());
        assert!(back.iter().all(|&(j, i)| from[j as usize] == Some(i)));
    }

    /// Operator sequences repeat (one layer after another): one operator
    /// removed from a periodic sequence pairs every other one.
    #[test]
    fn periodic_sequences_lose_only_the_removed_element() {
        let a: Vec<u32> = (0..10_000).map(|i| (i % 50) as u32).collect();
        let mut b = a.clone();
        b.remove(5_000);
        let pairs = align(&a, &b);
        assert_eq!(pairs.len(), a.len() - 1);
        assert!(pairs.iter().all(|&(i, j)| i == j + u32::from(j >= 5_000)));
    }

    /// Nothing in common: no pairs, in bounded time.
    #[test]
    fn unrelated_sequences_pair_nothing() {
        let a = random(100_000, 1 << 20, 3);
        let b: Vec<u32> = random(90_000, 1 << 20, 5)
            .into_iter()
            .map(|x| x + (1 << 20))
            .collect();
        assert!(align(&a, &b).is_empty());
        assert!(align(&a, &[]).is_empty());
        assert!(align(&[], &b).is_empty());
    }
}

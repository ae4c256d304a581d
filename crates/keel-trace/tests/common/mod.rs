//! What several test files of this crate share: the deterministic
//! generator and byte mutations that fuzz the readers, the section
//! directory of a native file, and span starts by name.

// Each test file uses a part.
#![allow(dead_code)]

use keel_trace::Trace;

/// A xorshift generator: the same inputs on every run.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `input` with one to four edits: a bit flipped, cut short, a range
/// dropped, one of `tokens` spliced in, a range repeated, a byte replaced.
pub fn mutate(rng: &mut Rng, input: &[u8], tokens: &[&[u8]]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(6) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= 1 << rng.below(8);
            }
            1 => b.truncate(at),
            2 => {
                let end = (at + rng.below(64)).min(b.len());
                b.drain(at..end);
            }
            3 => {
                let t = tokens[rng.below(tokens.len())];
                b.splice(at..at, t.iter().copied());
            }
            4 => {
                let end = (at + rng.below(200)).min(b.len());
                let copy = b[at..end].to_vec();
                b.splice(at..at, copy);
            }
            _ => {
                let i = at.min(b.len().saturating_sub(1));
                if let Some(x) = b.get_mut(i) {
                    *x = rng.next() as u8;
                }
            }
        }
    }
    b
}

/// The byte range of the body of section `kind` in a version 2 native
/// file, from its directory.
pub fn section_body(bytes: &[u8], kind: u32) -> std::ops::Range<usize> {
    let le = |at: usize, n: usize| {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(&bytes[at..at + n]);
        u64::from_le_bytes(v) as usize
    };
    (0..le(12, 4))
        .map(|i| 16 + 20 * i)
        .find(|&at| le(at, 4) == kind as usize)
        .map(|at| le(at + 4, 8)..le(at + 4, 8) + le(at + 12, 8))
        .expect("the section is listed")
}

/// The starts of `t`'s spans named `name`, in the trace's order.
pub fn starts_of(t: &Trace, name: &str) -> Vec<u64> {
    t.spans
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.start_ns)
        .collect()
}

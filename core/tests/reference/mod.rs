//! The independent references the boxing tests share: a generator every rank replays alike,
//! OneFlow's balanced split by definition, slabs cut by filtering every element's index, and
//! the placement shapes the property tests draw. Each test binary uses some of them.
#![allow(dead_code)]

use gflow_core::{NdSbp, Placement, Sbp};
use proptest::prelude::*;

/// (ranks, placement, SBP) layouts that split a 2-D tensor every way the operator tests need:
/// 3 uneven ranks split on each dim, and a 2x2 placement split on both, then broadcast on its
/// first axis.
pub fn split_layouts() -> Vec<(usize, Placement, NdSbp)> {
    let line = || Placement::new("cpu", [0, 1, 2]).expect("a placement of 3 ranks");
    let square = || Placement::new("cpu", [[0, 1], [2, 3]]).expect("a 2x2 placement");
    vec![
        (3, line(), Sbp::split(1).into()),
        (3, line(), Sbp::split(0).into()),
        (4, square(), [Sbp::split(0), Sbp::split(1)].into()),
        (4, square(), [Sbp::broadcast(), Sbp::split(1)].into()),
    ]
}

/// A tiny deterministic generator so every rank derives the same reference.
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

/// Balanced part `i` of `len` over `n` (API.md: the first len % n parts get one more).
pub fn part(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    let sizes: Vec<usize> = (0..n).map(|k| len / n + usize::from(k < len % n)).collect();
    let start: usize = sizes[..i].iter().sum();
    start..start + sizes[i]
}

/// The slab `range` of dimension `d`, by filtering every element's multi-index.
pub fn slab(
    v: &[f64],
    shape: &[usize],
    d: usize,
    range: std::ops::Range<usize>,
) -> (Vec<f64>, Vec<usize>) {
    let mut out = vec![];
    for (flat, x) in v.iter().enumerate() {
        let mut rem = flat;
        let mut idx = vec![0; shape.len()];
        for k in (0..shape.len()).rev() {
            idx[k] = rem % shape[k];
            rem /= shape[k];
        }
        if range.contains(&idx[d]) {
            out.push(*x);
        }
    }
    let mut s = shape.to_vec();
    s[d] = range.len();
    (out, s)
}

/// A placement's shape of 1 to 3 axes holding at most `world` ranks.
pub fn hierarchy_strategy(world: usize) -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        (1..=world).prop_map(|a| vec![a]),
        (1..=3usize, 1..=3usize).prop_map(|(a, b)| vec![a, b]),
        (1..=2usize, 1..=2usize, 1..=2usize).prop_map(|(a, b, c)| vec![a, b, c]),
    ]
    .prop_filter("fits the world", move |h| {
        h.iter().product::<usize>() <= world
    })
}

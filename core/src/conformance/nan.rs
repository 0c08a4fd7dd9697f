//! NaN and signed zeros through max and min: elementwise `maximum`/`minimum`, the `max`/`min`
//! reductions over a last and a middle dim (short lines and lines a GPU cuts in parts) and
//! softmax's line max, against the CPU backend's definitions (PyTorch's): a NaN operand wins,
//! else the larger (smaller); of equal operands `maximum`/`minimum` give the first and the
//! reductions the earlier element, so -0.0 and 0.0 come out as on the CPU.

use super::{computed, expect, vals};
use crate::backend::{Backend, BinaryOp, Kernels, ReduceKind, Resident};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::{Buffer, HostData};

/// The CPU's `maximum` (`minimum`) of `a` and `b`: `a` of equals (as PyTorch's CPU and NumPy).
fn binary_ref(max: bool, a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if (max && b > a) || (!max && b < a) {
        b
    } else {
        a
    }
}

/// The CPU's `max` (`min`) reduction over the middle dim of `x` viewed as (outer, len, inner),
/// folded in order from -inf (+inf): a NaN wins and stays, the earlier of equals stays.
fn reduce_ref(max: bool, x: &[f64], (outer, len, inner): (usize, usize, usize)) -> Vec<f64> {
    let start = if max {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    };
    (0..outer * inner)
        .map(|o| {
            (0..len).fold(start, |acc, l| {
                let v = x[(o / inner * len + l) * inner + o % inner];
                if (max && v > acc) || (!max && v < acc) || v.is_nan() {
                    v
                } else {
                    acc
                }
            })
        })
        .collect()
}

/// The CPU's (log-)softmax over the middle dim of (outer, len, inner), in f64: a line holding a
/// NaN has a NaN max, so it is NaN throughout (also the `softmax` case's reference).
pub(super) fn softmax_ref(
    x: &[f64],
    (outer, len, inner): (usize, usize, usize),
    log: bool,
) -> Vec<f64> {
    let m = reduce_ref(true, x, (outer, len, inner));
    let mut out = vec![0.0; x.len()];
    for (o, &m) in m.iter().enumerate() {
        let at = |l: usize| (o / inner * len + l) * inner + o % inner;
        let s: f64 = (0..len).map(|l| (x[at(l)] - m).exp()).sum();
        for l in 0..len {
            let v = x[at(l)] - m;
            out[at(l)] = if log { v - s.ln() } else { v.exp() / s };
        }
    }
    out
}

/// `got` must live on the device and equal `want` exactly: NaN where `want` is NaN (any
/// payload), and zeros of the same sign.
fn exact(k: &dyn Kernels, what: &str, got: &Buffer, want: &[f64], dtype: DType) -> Result<()> {
    expect(k, what, got, want, dtype)?;
    let got: Vec<f64> = got.host()?.to_vec();
    match got.iter().zip(want).position(|(g, w)| {
        !(g.is_nan() && w.is_nan()) && (g != w || g.is_sign_negative() != w.is_sign_negative())
    }) {
        None => Ok(()),
        Some(i) => Err(Error::InvalidArgument {
            op: "conformance",
            reason: format!(
                "{what} ({dtype}): element {i} is {:?}, reference {:?}",
                got[i], want[i]
            ),
        }),
    }
}

fn host_of(dtype: DType, v: &[f64]) -> HostData {
    HostData::F64(v.to_vec()).cast(dtype)
}

/// Max and min propagate NaN, elementwise, in reductions over a last and a middle dim and in
/// softmax's line max, in every dtype the backend computes in or stores (16-bit floats are
/// computed in f32); signed zeros come out as on the CPU.
pub fn nan_max_min<B: Backend + 'static>(r: &Resident<B>) -> Result<()> {
    let k: &dyn Kernels = r;
    let halves = [DType::F16, DType::BF16]
        .into_iter()
        .filter(|&d| r.backend().stores(d));
    for dtype in computed(k).chain(halves) {
        let round = |v: &[f64]| -> (Buffer, Vec<f64>) {
            let h = host_of(dtype, v);
            let back = h.to_vec::<f64>();
            (Buffer::from(h), back)
        };
        let nan = f64::NAN;
        // elementwise, without and with broadcasting: NaN on either side, equal zeros both ways
        let (a, av) = round(&[nan, 1.0, -0.0, 0.0, 2.0, -3.0, 5.0, 5.0]);
        let (b, bv) = round(&[1.0, nan, 0.0, -0.0, 2.0, 4.0, -5.0, 5.0]);
        let (c, cv) = round(&[-0.0, nan, 0.0, 3.0]);
        for (op, max) in [(BinaryOp::Maximum, true), (BinaryOp::Minimum, false)] {
            let want: Vec<f64> = av
                .iter()
                .zip(&bv)
                .map(|(&p, &q)| binary_ref(max, p, q))
                .collect();
            let got = k.binary(op, &a, &[2, 4], &b, &[2, 4], &[2, 4])?;
            exact(k, &format!("{op:?}"), &got, &want, dtype)?;
            let want: Vec<f64> = (0..8).map(|i| binary_ref(max, av[i], cv[i % 4])).collect();
            let got = k.binary(op, &a, &[2, 4], &c, &[4], &[2, 4])?;
            exact(k, &format!("{op:?} broadcast"), &got, &want, dtype)?;
        }
        // (4, 3, 5), lines of 5 along the last dim, of 3 along the middle one (shorter than 8:
        // the CPU folds them in order): NaN first, last, twice and nowhere, and equal zeros of
        // both signs where they are the max or the min
        let mut x = vals(60, 71, false);
        let set: [(usize, &[f64]); 6] = [
            (0, &[nan]),
            (9, &[nan]),
            (11, &[nan, -1.5, nan]),
            (
                15,
                &[-0.0, 0.0, -1.0, -0.0, -2.0, 0.0, -0.0, -1.0, -2.0, -0.0],
            ),
            (25, &[-0.0, 0.0, 1.0, 2.0, 0.0, 0.0, -0.0, 1.0, 0.0, 2.0]),
            (45, &[0.0, -0.0]),
        ];
        for (at, v) in set {
            x[at..at + v.len()].copy_from_slice(v);
        }
        x[50] = -0.0;
        x[51] = 0.0;
        x[55] = 1.0;
        x[56] = -1.0;
        let (xb, xv) = round(&x);
        let shape = [4usize, 3, 5];
        for (op, max) in [(ReduceKind::Max, true), (ReduceKind::Min, false)] {
            let got = k.reduce(op, &xb, &shape, &[2])?;
            exact(
                k,
                &format!("{op:?} over the last dim"),
                &got,
                &reduce_ref(max, &xv, (12, 5, 1)),
                dtype,
            )?;
            let got = k.reduce(op, &xb, &shape, &[1])?;
            exact(
                k,
                &format!("{op:?} over the middle dim"),
                &got,
                &reduce_ref(max, &xv, (4, 3, 5)),
                dtype,
            )?;
            let got = k.reduce(op, &xb, &shape, &[0, 1, 2])?;
            let want = reduce_ref(max, &xv, (1, 60, 1));
            exact(k, &format!("{op:?} over every dim"), &got, &want, dtype)?;
        }
        // long lines (cut in parts on a GPU): one NaN deep in one line, none in the other
        let long = 20_000;
        let mut x = vals(2 * long, 72, false);
        x[13_579] = nan;
        let (lb, lv) = round(&x);
        let mut t = vals(2 * long, 73, false);
        t[2 * 15_001 + 1] = nan;
        let (tb, tv) = round(&t);
        for (op, max) in [(ReduceKind::Max, true), (ReduceKind::Min, false)] {
            let got = k.reduce(op, &lb, &[2, long], &[1])?;
            exact(
                k,
                &format!("{op:?} of long rows"),
                &got,
                &reduce_ref(max, &lv, (2, long, 1)),
                dtype,
            )?;
            let got = k.reduce(op, &tb, &[long, 2], &[0])?;
            exact(
                k,
                &format!("{op:?} of long columns"),
                &got,
                &reduce_ref(max, &tv, (1, long, 2)),
                dtype,
            )?;
        }
        // softmax: the lines holding a NaN are NaN, the others as usual
        if matches!(dtype, DType::F32 | DType::F64) {
            for log in [false, true] {
                for (dim, view) in [(2, (12, 5, 1)), (1, (4, 3, 5))] {
                    let got = k.softmax(&xb, &shape, dim, log)?;
                    let want = softmax_ref(&xv, view, log);
                    expect(
                        k,
                        &format!("softmax dim {dim} log {log}"),
                        &got,
                        &want,
                        dtype,
                    )?;
                }
                // (columns: rows of a length past a small binding limit are another matter)
                let got = k.softmax(&tb, &[long, 2], 0, log)?;
                let want = softmax_ref(&tv, (1, long, 2), log);
                expect(
                    k,
                    &format!("softmax of long columns log {log}"),
                    &got,
                    &want,
                    dtype,
                )?;
            }
        }
    }
    Ok(())
}

//! CPU kernels of every dtype for comparisons, selection, casts, clamping, powers, triangles,
//! arg-reductions, sorting positions, cumulative sums and indexing along a dim. They are also the host path of device backends for
//! the kernels those do not have natively (`Kernels`' default methods).

use crate::backend::CmpOp;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{broadcast_strides, strides};
use crate::storage::{HostData, Stored, map_same, with_vec};

/// Calls `f(out_index, offsets)` for every element of `out_shape`, with the element's offsets in
/// each input broadcast to it (`shapes` right-aligned with `out_shape`).
pub(crate) fn for_each_broadcast(
    out_shape: &[usize],
    shapes: &[&[usize]],
    mut f: impl FnMut(usize, &[usize]),
) {
    let n: usize = out_shape.iter().product();
    if n == 0 {
        return;
    }
    let st: Vec<Vec<usize>> = shapes
        .iter()
        .map(|s| broadcast_strides(s, out_shape))
        .collect();
    let nd = out_shape.len();
    let mut idx = vec![0usize; nd];
    let mut offs = vec![0usize; shapes.len()];
    for o in 0..n {
        f(o, &offs);
        // Advance the counter and each input's offset.
        let mut d = nd;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for (off, s) in offs.iter_mut().zip(&st) {
                *off += s[d];
            }
            if idx[d] < out_shape[d] {
                break;
            }
            for (off, s) in offs.iter_mut().zip(&st) {
                *off -= s[d] * out_shape[d];
            }
            idx[d] = 0;
        }
    }
}

/// Applies `$body` with `$a`, `$b` the same-typed vectors inside two host buffers; `$wrap`
/// wraps the result (a variant name keeps the operands' dtype, `Ok` keeps it as is).
macro_rules! same_typed {
    ($x:expr, $y:expr, $a:ident, $b:ident => $wrap:ident($body:expr)) => {
        match ($x, $y) {
            (HostData::F32($a), HostData::F32($b)) => Ok(same_typed!(@w $wrap F32 $body)),
            (HostData::F64($a), HostData::F64($b)) => Ok(same_typed!(@w $wrap F64 $body)),
            (HostData::I64($a), HostData::I64($b)) => Ok(same_typed!(@w $wrap I64 $body)),
            (HostData::I32($a), HostData::I32($b)) => Ok(same_typed!(@w $wrap I32 $body)),
            (HostData::F16($a), HostData::F16($b)) => Ok(same_typed!(@w $wrap F16 $body)),
            (HostData::BF16($a), HostData::BF16($b)) => Ok(same_typed!(@w $wrap BF16 $body)),
            (HostData::Bool($a), HostData::Bool($b)) => Ok(same_typed!(@w $wrap Bool $body)),
            (x, y) => Err(Error::DTypeMismatch {
                expected: x.dtype(),
                got: y.dtype(),
            }),
        }
    };
    (@w same $v:ident $body:expr) => { HostData::$v($body) };
    (@w plain $v:ident $body:expr) => { $body };
}

/// `op(a, b)` elementwise with broadcasting, as Bool.
pub(crate) fn compare(
    op: CmpOp,
    a: &HostData,
    a_shape: &[usize],
    b: &HostData,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<HostData> {
    fn cmp<T: PartialOrd>(op: CmpOp, x: &T, y: &T) -> bool {
        match op {
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
        }
    }
    let mut out = vec![0u8; out_shape.iter().product()];
    same_typed!(a, b, x, y => plain(for_each_broadcast(out_shape, &[a_shape, b_shape], |o, off| {
        out[o] = u8::from(cmp(op, &x[off[0]], &y[off[1]]));
    })))?;
    Ok(HostData::Bool(out))
}

/// `cond ? a : b` elementwise with broadcasting over all three.
pub(crate) fn select(
    [cond, a, b]: [&HostData; 3],
    shapes: [&[usize]; 3],
    out_shape: &[usize],
) -> Result<HostData> {
    let HostData::Bool(c) = cond else {
        return Err(Error::DTypeMismatch {
            expected: DType::Bool,
            got: cond.dtype(),
        });
    };
    fn pick<T: Copy + Default>(
        c: &[u8],
        x: &[T],
        y: &[T],
        shapes: [&[usize]; 3],
        out_shape: &[usize],
    ) -> Vec<T> {
        if let [only] = c {
            // one condition for all (what `expand` runs): a broadcast copy, row by row
            return if *only != 0 {
                broadcast(x, shapes[1], out_shape)
            } else {
                broadcast(y, shapes[2], out_shape)
            };
        }
        if shapes.iter().all(|s| *s == out_shape) {
            // no broadcasting: one pass over the three
            return c
                .iter()
                .zip(x.iter().zip(y))
                .map(|(&c, (&x, &y))| if c != 0 { x } else { y })
                .collect();
        }
        let mut out = vec![T::default(); out_shape.iter().product()];
        for_each_broadcast(out_shape, &shapes, |o, off| {
            out[o] = if c[off[0]] != 0 { x[off[1]] } else { y[off[2]] };
        });
        out
    }
    same_typed!(a, b, x, y => same(pick(c, x, y, shapes, out_shape)))
}

/// `x` (of `shape`) broadcast to `out_shape`: whole rows of the last dim copied, or filled
/// where that dim is broadcast, with the counter over the other dims advanced once per row.
fn broadcast<T: Copy>(x: &[T], shape: &[usize], out_shape: &[usize]) -> Vec<T> {
    let n: usize = out_shape.iter().product();
    if n == 0 {
        return vec![];
    }
    if let [one] = x {
        return vec![*one; n];
    }
    let nd = out_shape.len();
    let st = broadcast_strides(shape, out_shape);
    let (len, step) = (out_shape[nd - 1], st[nd - 1]);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; nd - 1];
    let mut off = 0;
    for _ in 0..n / len {
        if step == 0 {
            out.extend(std::iter::repeat_n(x[off], len));
        } else {
            out.extend_from_slice(&x[off..off + len]);
        }
        for d in (0..nd - 1).rev() {
            idx[d] += 1;
            off += st[d];
            if idx[d] < out_shape[d] {
                break;
            }
            off -= st[d] * out_shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// `x` cast to `dtype`.
pub(crate) fn cast(x: &HostData, dtype: DType) -> HostData {
    x.cast(dtype)
}

/// Applies `$f` to every element as f64 (integers saturate back), keeping the dtype.
fn map_f64(x: &HostData, f: impl Fn(f64) -> f64) -> HostData {
    fn go<T: Stored>(v: &[T], f: &impl Fn(f64) -> f64) -> Vec<T> {
        v.iter().map(|&e| T::from_f64(f(e.to_f64()))).collect()
    }
    match x {
        HostData::F32(v) => HostData::F32(v.iter().map(|&e| f(e as f64) as f32).collect()),
        HostData::F64(v) => HostData::F64(go(v, &f)),
        HostData::I64(v) => HostData::I64(go(v, &f)),
        HostData::I32(v) => HostData::I32(go(v, &f)),
        HostData::F16(v) => HostData::F16(go(v, &f)),
        HostData::BF16(v) => HostData::BF16(go(v, &f)),
        HostData::Bool(v) => HostData::Bool(go(v, &f)),
    }
}

/// `x^e` elementwise (floats).
pub(crate) fn pow_scalar(x: &HostData, e: f64) -> HostData {
    match x {
        HostData::F32(v) => HostData::F32(v.iter().map(|&a| a.powf(e as f32)).collect()),
        _ => map_f64(x, |a| a.powf(e)),
    }
}

/// `x` clamped to `[lo, hi]` (`min(max(x, lo), hi)`, as PyTorch: NaN stays NaN, a NaN bound
/// gives NaN).
pub(crate) fn clamp(x: &HostData, lo: Option<f64>, hi: Option<f64>) -> HostData {
    let f = |a: f64| {
        let a = lo.map_or(a, |l| if a < l || l.is_nan() { l } else { a });
        hi.map_or(a, |h| if a > h || h.is_nan() { h } else { a })
    };
    match x {
        HostData::I64(v) => {
            // Exact for integers beyond 2^53: compare in i64 with the bounds rounded inward.
            let (l, h) = (lo.map(|l| l.ceil() as i64), hi.map(|h| h.floor() as i64));
            HostData::I64(
                v.iter()
                    .map(|&a| {
                        let a = l.map_or(a, |l| a.max(l));
                        h.map_or(a, |h| a.min(h))
                    })
                    .collect(),
            )
        }
        _ => map_f64(x, f),
    }
}

/// The lower (or upper) triangle over the last two dims of `x` (of `shape`), whose first
/// element sits at global (row, column) `origin`: elements with `col - row <= k` (`>= k` for
/// the upper one) are kept, the others zeroed.
pub(crate) fn triangle(
    x: &HostData,
    shape: &[usize],
    k: i64,
    upper: bool,
    origin: (usize, usize),
) -> HostData {
    let n = shape.len();
    let (rows, cols) = (shape[n - 2], shape[n - 1]);
    let keep = |i: usize| {
        let (r, c) = ((i / cols) % rows.max(1), i % cols.max(1));
        let diff = (c + origin.1) as i64 - (r + origin.0) as i64;
        if upper { diff >= k } else { diff <= k }
    };
    fn zero_out<T: Copy + Default>(v: &[T], keep: impl Fn(usize) -> bool) -> Vec<T> {
        v.iter()
            .enumerate()
            .map(|(i, &e)| if keep(i) { e } else { T::default() })
            .collect()
    }
    map_same!(x, v => zero_out(v, keep))
}

/// The index (I64, within this buffer) of the largest (or smallest) element along `dim`; ties
/// and NaNs as PyTorch: the first NaN wins, else the lowest index among equals. Elements
/// compare in their own type (I64 beyond 2^53 exactly).
pub(crate) fn arg_reduce(x: &HostData, shape: &[usize], dim: usize, max: bool) -> HostData {
    fn go<T: PartialOrd + Copy>(vals: &[T], shape: &[usize], dim: usize, max: bool) -> Vec<i64> {
        // NaN is the only value not comparable with itself.
        let nan = |v: T| v.partial_cmp(&v).is_none();
        let outer: usize = shape[..dim].iter().product();
        let len = shape[dim];
        let inner: usize = shape[dim + 1..].iter().product();
        let mut out = vec![0i64; outer * inner];
        for o in 0..outer {
            for i in 0..inner {
                let mut best = 0usize;
                for l in 1..len {
                    let (v, b) = (
                        vals[(o * len + l) * inner + i],
                        vals[(o * len + best) * inner + i],
                    );
                    let better = if nan(b) {
                        false
                    } else if nan(v) {
                        true
                    } else if max {
                        v > b
                    } else {
                        v < b
                    };
                    if better {
                        best = l;
                    }
                }
                out[o * inner + i] = best as i64;
            }
        }
        out
    }
    HostData::I64(with_vec!(x, v => go(v, shape, dim, max)))
}

/// The (I64) positions that sort each line of `x` along `dim`: ascending, or descending when
/// `descending`; stable (equal elements keep their order), NaN counted above every number (last
/// ascending, first descending) and NaNs equal to each other, as PyTorch's `sort(stable=True)`.
/// Elements compare in their own type.
pub(crate) fn argsort(x: &HostData, shape: &[usize], dim: usize, descending: bool) -> HostData {
    fn go<T: PartialOrd + Copy>(
        vals: &[T],
        shape: &[usize],
        dim: usize,
        descending: bool,
    ) -> Vec<i64> {
        let len = shape[dim];
        let inner: usize = shape[dim + 1..].iter().product();
        let lines = vals.len() / len.max(1);
        // NaN is the only value not comparable with itself; it orders above every number.
        let key = |a: T, b: T| match a.partial_cmp(&b) {
            Some(o) => o,
            None => (a.partial_cmp(&a).is_none()).cmp(&b.partial_cmp(&b).is_none()),
        };
        let mut out = vec![0i64; vals.len()];
        let mut order: Vec<usize> = Vec::with_capacity(len);
        for line in 0..lines {
            let (o, i) = (line / inner, line % inner);
            let at = |l: usize| vals[(o * len + l) * inner + i];
            order.clear();
            order.extend(0..len);
            // a stable sort: equal keys keep their index order
            order.sort_by(|&p, &q| {
                let c = key(at(p), at(q));
                if descending { c.reverse() } else { c }
            });
            for (r, &p) in order.iter().enumerate() {
                out[(o * len + r) * inner + i] = p as i64;
            }
        }
        out
    }
    HostData::I64(with_vec!(x, v => go(v, shape, dim, descending)))
}

/// Inclusive cumulative sums along `dim`, in `x`'s dtype: floats accumulated in f64 (PyTorch's
/// CPU accumulates f32 in f64 too, so a NaN or inf reaches only the sums from it on and large
/// cancellations stay exact), integers in their own type, wrapping.
pub(crate) fn cumsum(x: &HostData, shape: &[usize], dim: usize) -> HostData {
    fn scan<T: Copy, A: Copy>(
        v: &[T],
        shape: &[usize],
        dim: usize,
        zero: A,
        add: impl Fn(A, T) -> A,
        back: impl Fn(A) -> T,
    ) -> Vec<T> {
        let len = shape[dim];
        let inner: usize = shape[dim + 1..].iter().product();
        let mut out = v.to_vec();
        if len * inner == 0 {
            return out;
        }
        let mut acc = vec![zero; inner];
        for (src, dst) in v.chunks(len * inner).zip(out.chunks_mut(len * inner)) {
            acc.fill(zero);
            for (row, o) in src.chunks(inner).zip(dst.chunks_mut(inner)) {
                for ((a, &e), o) in acc.iter_mut().zip(row).zip(o) {
                    *a = add(*a, e);
                    *o = back(*a);
                }
            }
        }
        out
    }
    match x {
        HostData::I64(v) => HostData::I64(scan(v, shape, dim, 0, i64::wrapping_add, |a| a)),
        HostData::I32(v) => HostData::I32(scan(v, shape, dim, 0, i32::wrapping_add, |a| a)),
        other => map_same!(other, v => scan(
            v,
            shape,
            dim,
            0.0,
            |a: f64, e| a + Stored::to_f64(e),
            Stored::from_f64
        )),
    }
}

/// `a op b` bitwise for integer or Bool data of one dtype, broadcast to `out_shape`.
pub(crate) fn bitwise(
    op: crate::backend::BitwiseOp,
    a: &HostData,
    a_shape: &[usize],
    b: &HostData,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<HostData> {
    use crate::backend::BitwiseOp;
    use std::ops::{BitAnd, BitOr, BitXor};
    fn go<T: Copy + BitAnd<Output = T> + BitOr<Output = T> + BitXor<Output = T>>(
        op: BitwiseOp,
        a: &[T],
        b: &[T],
        shapes: [&[usize]; 3],
    ) -> Vec<T> {
        let mut out = Vec::with_capacity(shapes[2].iter().product());
        for_each_broadcast(shapes[2], &shapes[..2], |_, at| {
            let (x, y) = (a[at[0]], b[at[1]]);
            out.push(match op {
                BitwiseOp::And => x & y,
                BitwiseOp::Or => x | y,
                BitwiseOp::Xor => x ^ y,
            });
        });
        out
    }
    let shapes = [a_shape, b_shape, out_shape];
    Ok(match (a, b) {
        (HostData::I64(x), HostData::I64(y)) => HostData::I64(go(op, x, y, shapes)),
        (HostData::I32(x), HostData::I32(y)) => HostData::I32(go(op, x, y, shapes)),
        (HostData::Bool(x), HostData::Bool(y)) => HostData::Bool(go(op, x, y, shapes)),
        (x, y) => {
            return Err(Error::DTypeMismatch {
                expected: x.dtype(),
                got: y.dtype(),
            });
        }
    })
}

/// Integer indices as i64 (I64 or I32 data).
pub(crate) fn indices(idx: &HostData) -> Result<Vec<i64>> {
    match idx {
        HostData::I64(v) => Ok(v.clone()),
        HostData::I32(v) => Ok(v.iter().map(|&i| i64::from(i)).collect()),
        other => Err(Error::DTypeMismatch {
            expected: DType::I64,
            got: other.dtype(),
        }),
    }
}

/// The flat offsets in `x_shape` picked by `torch.gather(x, dim, idx)`; indices already
/// checked by core, and those outside `0..x_shape[dim]` skipped (`None`).
fn gather_offsets(
    x_shape: &[usize],
    dim: usize,
    idx: &[i64],
    idx_shape: &[usize],
) -> Vec<Option<usize>> {
    let xs = strides(x_shape);
    let is = strides(idx_shape);
    (0..idx.len())
        .map(|o| {
            let i = idx[o];
            if i < 0 || i as usize >= x_shape[dim] {
                return None;
            }
            let mut off = 0;
            for d in 0..idx_shape.len() {
                let c = (o / is[d]) % idx_shape[d].max(1);
                off += if d == dim { i as usize } else { c } * xs[d];
            }
            Some(off)
        })
        .collect()
}

/// PyTorch's `torch.gather(x, dim, idx)`: `out[..i..] = x[..idx[..i..]..]` along `dim`.
pub(crate) fn gather_dim(
    x: &HostData,
    x_shape: &[usize],
    dim: usize,
    idx: &HostData,
    idx_shape: &[usize],
) -> Result<HostData> {
    let offs = gather_offsets(x_shape, dim, &indices(idx)?, idx_shape);
    Ok(map_same!(x, v => offs.iter().map(|o| o.map_or_else(Default::default, |o| v[o])).collect()))
}

/// PyTorch's `zeros(out_shape).scatter_add_(dim, idx, src)`: `src`'s elements added at
/// `idx` along `dim`.
pub(crate) fn scatter_add_dim(
    src: &HostData,
    out_shape: &[usize],
    dim: usize,
    idx: &HostData,
    idx_shape: &[usize],
) -> Result<HostData> {
    let offs = gather_offsets(out_shape, dim, &indices(idx)?, idx_shape);
    let n: usize = out_shape.iter().product();
    let mut out = vec![0.0f64; n];
    let vals = src.to_f64_vec();
    for (o, off) in offs.iter().enumerate() {
        if let Some(off) = off {
            out[*off] += vals[o];
        }
    }
    Ok(HostData::F64(out).into_dtype(src.dtype()))
}

/// Rows of a `(rows, row_len)` table holding global rows `start..start + rows`, picked by
/// global row indices: indices outside the range give rows of zeros (so the parts of a table
/// split over its rows sum to the whole lookup).
pub(crate) fn gather_rows_partial(
    table: &HostData,
    rows: usize,
    row_len: usize,
    idx: &HostData,
    start: usize,
) -> Result<HostData> {
    let idx = indices(idx)?;
    Ok(map_same!(table, v => {
        let mut out = Vec::with_capacity(idx.len() * row_len);
        for &i in &idx {
            let local = i - start as i64;
            if local >= 0 && (local as usize) < rows {
                let r = local as usize;
                out.extend_from_slice(&v[r * row_len..(r + 1) * row_len]);
            } else {
                out.resize(out.len() + row_len, Default::default());
            }
        }
        out
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::f16;

    /// The row-by-row broadcast copy equals the element-by-element definition, for size-1
    /// dims anywhere (the last one included), missing leading dims, one element and 0-d.
    #[test]
    fn broadcast_copies_equal_the_definition() {
        for (shape, out) in [
            (vec![3, 1, 4], vec![2, 3, 5, 4]),
            (vec![1, 5, 1], vec![3, 5, 2]),
            (vec![4], vec![3, 4]),
            (vec![1], vec![2, 3]),
            (vec![], vec![3]),
            (vec![2, 3], vec![2, 3]),
            (vec![2, 1], vec![2, 0]),
        ] {
            let x: Vec<u32> = (0..shape.iter().product::<usize>() as u32).collect();
            let mut want = vec![0; out.iter().product()];
            for_each_broadcast(&out, &[&shape], |o, off| want[o] = x[off[0]]);
            assert_eq!(broadcast(&x, &shape, &out), want, "{shape:?} -> {out:?}");
        }
    }

    #[test]
    fn broadcast_iteration_matches_the_definition() {
        let mut seen = vec![];
        for_each_broadcast(&[2, 3], &[&[2, 1], &[3]], |o, off| {
            seen.push((o, off.to_vec()))
        });
        assert_eq!(
            seen,
            vec![
                (0, vec![0, 0]),
                (1, vec![0, 1]),
                (2, vec![0, 2]),
                (3, vec![1, 0]),
                (4, vec![1, 1]),
                (5, vec![1, 2])
            ]
        );
    }

    #[test]
    fn gather_and_scatter_along_a_dim() -> Result<()> {
        let x = HostData::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let idx = HostData::from_vec(vec![2i64, 0, 1, 1]);
        let g = gather_dim(&x, &[2, 3], 1, &idx, &[2, 2])?;
        assert_eq!(g.to_vec::<f64>(), vec![3.0, 1.0, 5.0, 5.0]);
        let s = scatter_add_dim(&g, &[2, 3], 1, &idx, &[2, 2])?;
        assert_eq!(s.to_vec::<f64>(), vec![1.0, 0.0, 3.0, 0.0, 10.0, 0.0]);
        Ok(())
    }

    #[test]
    fn clamp_with_a_nan_bound_gives_nan() {
        let x = HostData::from_vec(vec![0.0f32, 1.0, f32::NAN]);
        for (lo, hi) in [(Some(f64::NAN), None), (None, Some(f64::NAN))] {
            let y = clamp(&x, lo, hi).to_vec::<f32>();
            assert!(y.iter().all(|v| v.is_nan()), "{lo:?} {hi:?}: {y:?}");
        }
        // Ordinary bounds: NaN stays NaN; lo > hi gives hi (PyTorch's min(max(x, lo), hi)).
        let y = clamp(&x, Some(0.5), Some(0.75)).to_vec::<f32>();
        assert_eq!(&y[..2], &[0.5, 0.75]);
        assert!(y[2].is_nan());
        assert_eq!(
            clamp(&x, Some(3.0), Some(1.0)).to_vec::<f32>()[..2],
            [1.0, 1.0]
        );
    }

    #[test]
    fn arg_reduce_compares_in_the_elements_type() {
        let x = HostData::from_vec(vec![1i64 << 53, (1 << 53) + 1, i64::MIN, i64::MIN + 1]);
        assert_eq!(arg_reduce(&x, &[2, 2], 1, true).to_vec::<i64>(), vec![1, 1]);
        assert_eq!(
            arg_reduce(&x, &[2, 2], 1, false).to_vec::<i64>(),
            vec![0, 0]
        );
        let h = HostData::from_vec(vec![f16::from_f32(1.0), f16::NAN, f16::NAN]);
        assert_eq!(arg_reduce(&h, &[3], 0, false).to_vec::<i64>(), vec![1]);
    }

    #[test]
    fn triangles_use_global_positions() {
        let x = HostData::from_vec(vec![1i64; 6]);
        // Rows 1..3 of a matrix, columns 0..3: tril(0) keeps col <= row.
        let t = triangle(&x, &[2, 3], 0, false, (1, 0));
        assert_eq!(t.to_vec::<i64>(), vec![1, 1, 0, 1, 1, 1]);
    }
}

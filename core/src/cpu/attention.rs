//! Fused scaled dot-product attention on the CPU, forward and backward, one head per task in
//! blocks of query rows (FlashAttention's order): a block's scores, their softmax and its
//! products stay in cache, where the composed form writes and reads the whole (heads, seq_q,
//! seq_k) score tensor several times. A causal block multiplies only the keys its rows may see
//! (query `i` sees keys `0..=i`, PyTorch's top-left alignment). The backward recomputes a
//! block's probabilities from `q` and `k` rather than keeping them.

use rayon::prelude::*;

use super::kernels::{Float, dot_row, fold_row, wide};
use super::sgemm::{Packed, View, product, product_packed};
use crate::backend::AttentionDims;
use crate::error::{Error, Result};

/// Query rows per block: a (64, seq_k) block of scores stays in L2 for keys in the thousands.
const BLOCK: usize = 64;

/// A right operand of [`gemm_into`]: its view, and its panels where it was packed once for all
/// of a head's blocks (a head's keys and values; a block's own rows are not).
struct Rhs<'a, T> {
    view: View<'a, T>,
    packed: Option<Packed>,
}

impl<'a, T: Float> Rhs<'a, T> {
    /// `view` (k, n), packed now where the AVX-512 kernel takes it.
    fn packed(view: View<'a, T>, (k, n): (usize, usize)) -> Self {
        let packed = Packed::new(view, k, n);
        Rhs { view, packed }
    }

    /// `view` as it is.
    fn plain(view: View<'a, T>) -> Self {
        Rhs { view, packed: None }
    }
}

/// `dst = [dst +] beta * lhs * rhs` for an (m, k) `lhs`, a (k, n) `rhs` (or the leading (k, n)
/// of a packed one) and a row-major (m, n) `dst` (accumulating when `acc`), on the calling
/// thread.
fn gemm_into<T: Float>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    lhs: View<'_, T>,
    rhs: &Rhs<'_, T>,
    acc: bool,
    beta: T,
) -> Result<()> {
    let (rhs, packed) = (rhs.view, rhs.packed.as_ref());
    if dst.len() < m * n || !lhs.holds(m, k) || !rhs.holds(k, n) {
        return Err(Error::Internal(format!(
            "attention product ({m}, {k}) x ({k}, {n}) outside its buffers"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    // SAFETY: MaybeUninit<T> has T's layout, and the product writes only initialised values.
    let slots = unsafe { &mut *(std::ptr::from_mut(dst) as *mut [std::mem::MaybeUninit<T>]) };
    if let Some(p) = packed
        && product_packed(slots, n, (m, n, k), (lhs, p), (acc, beta))
    {
        return Ok(());
    }
    if product(slots, n, (m, n, k), (lhs, rhs), (acc, beta), false) {
        return Ok(());
    }
    if k == 0 {
        if !acc {
            dst[..m * n].fill(T::zero());
        }
        return Ok(());
    }
    // SAFETY: checked above: lhs and rhs hold their (m, k) and (k, n) matrices under their
    // strides and dst holds m x n row-major elements; dst is a `&mut` slice, so it aliases
    // neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            acc,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            T::one(),
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    Ok(())
}

/// Keys visible to query row `row` of `keys` (all, or `0..=row` when causal).
fn visible(d: &AttentionDims, row: usize, keys: usize) -> usize {
    if d.causal { (row + 1).min(keys) } else { keys }
}

/// One block's probabilities: the scores of rows `r0..r0 + rb` of `q` against keys `0..keys`
/// (`kt` the head's keys transposed; `keys` wide rows in `s`), softmaxed in place over the
/// visible keys, zero past them.
fn probabilities<T: Float>(
    d: &AttentionDims,
    (q, kt): (&[T], &Rhs<'_, T>),
    s: &mut [T],
    (r0, rb, keys): (usize, usize, usize),
) -> Result<()> {
    let scale = T::from(d.scale).unwrap_or_else(T::one);
    let hd = d.head_dim;
    gemm_into(s, (rb, keys, hd), View::rows(q, r0, hd), kt, false, scale)?;
    let max = |a: T, v: T| if v > a || v.is_nan() { v } else { a };
    wide(
        #[inline(always)]
        || {
            for (i, row) in s[..rb * keys].chunks_mut(keys).enumerate() {
                let (live, dead) = row.split_at_mut(visible(d, r0 + i, keys));
                let m = fold_row(live, T::neg_infinity(), max);
                for e in live.iter_mut() {
                    *e = (*e - m).exp_v();
                }
                let inv = T::one() / fold_row(live, T::zero(), |a, v| a + v);
                for e in live.iter_mut() {
                    *e = *e * inv;
                }
                dead.fill(T::zero());
            }
        },
    );
    Ok(())
}

/// The blocks of one head: `(first row, rows, keys the block multiplies)`.
fn blocks(d: &AttentionDims) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    (0..d.seq_q).step_by(BLOCK).map(move |r0| {
        let rb = BLOCK.min(d.seq_q - r0);
        let keys = if d.causal {
            (r0 + rb).min(d.seq_k)
        } else {
            d.seq_k
        };
        (r0, rb, keys)
    })
}

/// One head's slices of (heads, rows, cols) data.
fn head<T>(x: &[T], h: usize, rows: usize, cols: usize) -> &[T] {
    x.get(h * rows * cols..(h + 1) * rows * cols).unwrap_or(&[])
}

/// Checks that `q`, `k`, `v` hold `d`'s heads.
fn check<T>(d: &AttentionDims, q: &[T], k: &[T], v: &[T]) -> Result<()> {
    let want = [
        d.heads * d.seq_q * d.head_dim,
        d.heads * d.seq_k * d.head_dim,
        d.heads * d.seq_k * d.v_dim,
    ];
    if [q.len(), k.len(), v.len()] != want {
        return Err(Error::Internal(format!(
            "attention of {d:?} on q, k, v of {}, {}, {} elements",
            q.len(),
            k.len(),
            v.len()
        )));
    }
    Ok(())
}

/// `softmax(scale * q kᵀ [causal]) v` for (heads, seq_q, head_dim) `q`, (heads, seq_k,
/// head_dim) `k` and (heads, seq_k, v_dim) `v`: (heads, seq_q, v_dim), heads on all threads.
pub(super) fn attention<T: Float>(q: &[T], k: &[T], v: &[T], d: &AttentionDims) -> Result<Vec<T>> {
    check(d, q, k, v)?;
    let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
    let mut out = vec![T::zero(); d.heads * tq * dv];
    if out.is_empty() {
        return Ok(out);
    }
    out.par_chunks_mut(tq * dv)
        .enumerate()
        // one scores block per task rather than per head
        .try_for_each_init(
            || vec![T::zero(); BLOCK.min(tq) * tk],
            |s, (h, o)| {
                let qh = head(q, h, tq, hd);
                let kt = Rhs::packed(View::transposed(head(k, h, tk, hd), hd), (hd, tk));
                let vr = Rhs::packed(View::rows(head(v, h, tk, dv), 0, dv), (tk, dv));
                for (r0, rb, keys) in blocks(d) {
                    probabilities(d, (qh, &kt), s, (r0, rb, keys))?;
                    gemm_into(
                        &mut o[r0 * dv..(r0 + rb) * dv],
                        (rb, dv, keys),
                        View::rows(s, 0, keys),
                        &vr,
                        false,
                        T::one(),
                    )?;
                }
                Ok::<(), Error>(())
            },
        )?;
    Ok(out)
}

/// The gradients of [`attention`] for the output gradient `g` (heads, seq_q, v_dim): per head,
/// `dq` (seq_q, head_dim), then `dk` (seq_k, head_dim), then `dv` (seq_k, v_dim), packed.
pub(super) fn attention_grad<T: Float>(
    q: &[T],
    k: &[T],
    v: &[T],
    g: &[T],
    d: &AttentionDims,
) -> Result<Vec<T>> {
    check(d, q, k, v)?;
    let (tq, tk, hd, dvw) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
    if g.len() != d.heads * tq * dvw {
        return Err(Error::Internal(format!(
            "attention gradient of {d:?} with {} elements",
            g.len()
        )));
    }
    let per = tq * hd + tk * hd + tk * dvw;
    let mut out = vec![T::zero(); d.heads * per];
    if out.is_empty() {
        return Ok(out);
    }
    let scale = T::from(d.scale).unwrap_or_else(T::one);
    let block = BLOCK.min(tq) * tk;
    let scratch = || (vec![T::zero(); block], vec![T::zero(); block]);
    out.par_chunks_mut(per)
        .enumerate()
        .try_for_each_init(scratch, |(p, ds), (h, o)| {
            let (qh, kh, vh) = (head(q, h, tq, hd), head(k, h, tk, hd), head(v, h, tk, dvw));
            let kt = Rhs::packed(View::transposed(kh, hd), (hd, tk));
            let vt = Rhs::packed(View::transposed(vh, dvw), (dvw, tk));
            let kr = Rhs::packed(View::rows(kh, 0, hd), (tk, hd));
            let gh = head(g, h, tq, dvw);
            let (dq, rest) = o.split_at_mut(tq * hd);
            let (dk, dv) = rest.split_at_mut(tk * hd);
            for (r0, rb, keys) in blocks(d) {
                probabilities(d, (qh, &kt), p, (r0, rb, keys))?;
                // dP = dO vᵀ, then dS = P (dP - rowsum(P dP)) in its place
                gemm_into(
                    ds,
                    (rb, keys, dvw),
                    View::rows(gh, r0, dvw),
                    &vt,
                    false,
                    T::one(),
                )?;
                wide(
                    #[inline(always)]
                    || {
                        for (pr, dr) in p[..rb * keys]
                            .chunks(keys)
                            .zip(ds[..rb * keys].chunks_mut(keys))
                        {
                            let dot = dot_row(pr, dr, T::zero());
                            for (e, &x) in dr.iter_mut().zip(pr) {
                                *e = x * (*e - dot);
                            }
                        }
                    },
                );
                // dv += Pᵀ dO; dq = scale dS k; dk += scale dSᵀ q
                gemm_into(
                    dv,
                    (keys, dvw, rb),
                    View::transposed(p, keys),
                    &Rhs::plain(View::rows(gh, r0, dvw)),
                    true,
                    T::one(),
                )?;
                gemm_into(
                    &mut dq[r0 * hd..(r0 + rb) * hd],
                    (rb, hd, keys),
                    View::rows(ds, 0, keys),
                    &kr,
                    false,
                    scale,
                )?;
                gemm_into(
                    dk,
                    (keys, hd, rb),
                    View::transposed(ds, keys),
                    &Rhs::plain(View::rows(qh, r0, hd)),
                    true,
                    scale,
                )?;
            }
            Ok::<(), Error>(())
        })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention in f64 by its definition, one score at a time.
    fn naive(q: &[f64], k: &[f64], v: &[f64], d: &AttentionDims) -> Vec<f64> {
        let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
        let mut out = vec![0.0; d.heads * tq * dv];
        for h in 0..d.heads {
            for i in 0..tq {
                let n = visible(d, i, tk);
                let s: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..hd)
                            .map(|c| q[(h * tq + i) * hd + c] * k[(h * tk + j) * hd + c])
                            .sum::<f64>()
                            * d.scale
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for (j, x) in s.iter().enumerate() {
                    let p = (x - m).exp() / z;
                    for c in 0..dv {
                        out[(h * tq + i) * dv + c] += p * v[(h * tk + j) * dv + c];
                    }
                }
            }
        }
        out
    }

    fn data(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i as u64 * 2_654_435_761 + seed * 97) % 1000) as f64 / 500.0 - 1.0)
            .collect()
    }

    fn dims(heads: usize, tq: usize, tk: usize, causal: bool) -> AttentionDims {
        AttentionDims {
            heads,
            seq_q: tq,
            seq_k: tk,
            head_dim: 5,
            v_dim: 3,
            scale: 0.4,
            causal,
        }
    }

    /// q, k and v for `d` (all heads), from seeds `seed`, `seed + 1` and `seed + 2`.
    fn inputs(d: &AttentionDims, seed: u64) -> [Vec<f64>; 3] {
        [
            data(d.heads * d.seq_q * d.head_dim, seed),
            data(d.heads * d.seq_k * d.head_dim, seed + 1),
            data(d.heads * d.seq_k * d.v_dim, seed + 2),
        ]
    }

    #[test]
    fn matches_the_definition_across_blocks_and_causal_edges() -> Result<()> {
        // 150 query rows: three blocks, the last partial; fewer and more keys than queries.
        for (tq, tk) in [(150, 150), (150, 70), (70, 150), (1, 1)] {
            for causal in [false, true] {
                let d = dims(3, tq, tk, causal);
                let [q, k, v] = inputs(&d, 1);
                let got = attention(&q, &k, &v, &d)?;
                for (a, b) in got.iter().zip(naive(&q, &k, &v, &d)) {
                    assert!(
                        (a - b).abs() < 1e-12,
                        "{tq}x{tk} causal {causal}: {a} vs {b}"
                    );
                }
            }
        }
        Ok(())
    }

    #[test]
    fn gradients_match_finite_differences_of_the_definition() -> Result<()> {
        for (tq, tk) in [(130, 130), (130, 66)] {
            for causal in [false, true] {
                let d = dims(2, tq, tk, causal);
                let ins = inputs(&d, 4);
                let g = data(2 * tq * 3, 7);
                let grad = attention_grad(&ins[0], &ins[1], &ins[2], &g, &d)?;
                // unpack the per-head [dq | dk | dv] into one gradient per input
                let sizes = [tq * 5, tk * 5, tk * 3];
                let per: usize = sizes.iter().sum();
                let loss = |x: &[Vec<f64>; 3]| -> f64 {
                    naive(&x[0], &x[1], &x[2], &d)
                        .iter()
                        .zip(&g)
                        .map(|(a, b)| a * b)
                        .sum()
                };
                for (which, size) in sizes.iter().enumerate() {
                    let at: usize = sizes[..which].iter().sum();
                    // a few elements of each head's gradient
                    for h in 0..2 {
                        for e in [0, size / 3, size - 1] {
                            let idx = h * size + e;
                            let mut plus = ins.clone();
                            plus[which][idx] += 1e-6;
                            let mut minus = ins.clone();
                            minus[which][idx] -= 1e-6;
                            let fd = (loss(&plus) - loss(&minus)) / 2e-6;
                            let got = grad[h * per + at + e];
                            assert!(
                                (got - fd).abs() < 1e-6 * (1.0 + fd.abs()),
                                "input {which} head {h} element {e} ({tq}x{tk} causal \
                                 {causal}): {got} vs {fd}"
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// f32 takes the AVX-512 products with a head's keys and values packed once, where the CPU
    /// has it (f64 above takes `gemm`): both against the f64 definition.
    #[test]
    fn f32_forward_and_gradients_match_the_definition() -> Result<()> {
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        for causal in [false, true] {
            let (tq, tk) = (150, 130);
            let d = dims(2, tq, tk, causal);
            let ins = inputs(&d, 8);
            let g = data(2 * tq * 3, 11);
            let (q, k, v) = (f32s(&ins[0]), f32s(&ins[1]), f32s(&ins[2]));
            let out = attention(&q, &k, &v, &d)?;
            for (a, b) in out.iter().zip(naive(&ins[0], &ins[1], &ins[2], &d)) {
                assert!(
                    (f64::from(*a) - b).abs() < 1e-5,
                    "causal {causal}: {a} vs {b}"
                );
            }
            let got = attention_grad(&q, &k, &v, &f32s(&g), &d)?;
            let want = attention_grad(&ins[0], &ins[1], &ins[2], &g, &d)?;
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*a) - b).abs() < 1e-4 * (1.0 + b.abs()),
                    "gradient element {i}, causal {causal}: {a} vs {b}"
                );
            }
        }
        Ok(())
    }
}

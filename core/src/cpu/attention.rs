//! Fused scaled dot-product attention on the CPU, forward and backward, one head per task in
//! blocks of query rows (FlashAttention's order): a block's scores, their softmax and its
//! products stay in cache, where the composed form writes and reads the whole (heads, seq_q,
//! seq_k) score tensor several times. A causal block multiplies only the keys its rows may see
//! (query `i` sees keys `0..=i`, PyTorch's top-left alignment). The forward normalises a
//! block's output rather than its probabilities and, where a backward will follow, also returns
//! each query row's log-sum-exp (after the output, in the same buffer); the backward takes the
//! output and the log-sum-exp, recomputes a block's
//! probabilities from `q`, `k` and that log-sum-exp in one pass (`exp(scale q kᵀ - lse)`: no
//! row max, sum or normalisation) and takes `rowsum(P dP)` as `rowsum(dO O)`, `v_dim` wide
//! rather than `seq_k` (FlashAttention-2's backward).

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::kernels::{Float, dot_row, fold_row, wide};
use super::sgemm::{Packed, View, product, product_packed};
use crate::backend::{AttentionDims, AttentionLayout as Layout, AttentionRows as Rows};
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

/// One block's scaled scores: rows `r0..r0 + rb` of problem `h`'s queries (`q` laid out as
/// `at`) against keys `0..keys` (`kt` the head's keys transposed), `scale q kᵀ` in `keys` wide
/// rows of `s`.
fn scores<T: Float>(
    d: &AttentionDims,
    (at, q, h, kt): (&Rows, &[T], usize, &Rhs<'_, T>),
    s: &mut [T],
    (r0, rb, keys): (usize, usize, usize),
) -> Result<()> {
    let scale = T::from(d.scale).unwrap_or_else(T::one);
    gemm_into(
        s,
        (rb, keys, d.head_dim),
        at.view(q, h, r0),
        kt,
        false,
        scale,
    )
}

/// A forward block's unnormalised probabilities: [`scores`], then in place `exp(s - max)` over
/// each row's visible keys and zero past them; per row, `1 / sum` in `inv` and, where `lse`
/// has room (a saving forward), the log-sum-exp `max + ln(sum)`.
fn exponentials<T: Float>(
    d: &AttentionDims,
    operands: (&Rows, &[T], usize, &Rhs<'_, T>),
    (s, inv, lse): (&mut [T], &mut [T], &mut [T]),
    (r0, rb, keys): (usize, usize, usize),
) -> Result<()> {
    scores(d, operands, s, (r0, rb, keys))?;
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
                let sum = fold_row(live, T::zero(), |a, v| a + v);
                inv[i] = T::one() / sum;
                if let Some(l) = lse.get_mut(i) {
                    *l = m + sum.ln();
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

/// A matrix view of an operand's rows ([`AttentionRows`]: core's description of where each
/// problem's rows lie, which the GPU backends share), for the products.
trait Views {
    /// Problem `p`'s rows from `r0` on, as a matrix.
    fn view<'a, T>(&self, x: &'a [T], p: usize, r0: usize) -> View<'a, T>;
    /// Problem `p`'s rows, transposed.
    fn view_t<'a, T>(&self, x: &'a [T], p: usize) -> View<'a, T>;
}

impl Views for Rows {
    fn view<'a, T>(&self, x: &'a [T], p: usize, r0: usize) -> View<'a, T> {
        View {
            data: x.get(self.start(p) + r0 * self.row..).unwrap_or(&[]),
            rs: self.row,
            cs: 1,
        }
    }

    fn view_t<'a, T>(&self, x: &'a [T], p: usize) -> View<'a, T> {
        View {
            data: x.get(self.start(p)..).unwrap_or(&[]),
            rs: 1,
            cs: self.row,
        }
    }
}

/// A new buffer the problems' tasks write at once, each its own rows, never zeroed first.
struct Shared<T> {
    ptr: *mut T,
    len: usize,
    /// Elements written so far.
    written: AtomicUsize,
}

// SAFETY: tasks write disjoint elements through it (see `put`); T is plain data.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T: Copy> Shared<T> {
    /// A `len`-element buffer written by `fill` through [`Shared::put`]: an error unless it
    /// wrote every element.
    fn build(len: usize, fill: impl FnOnce(&Shared<T>) -> Result<()>) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(len);
        let dst = Shared {
            ptr: out.as_mut_ptr(),
            len,
            written: AtomicUsize::new(0),
        };
        fill(&dst)?;
        let written = dst.written.into_inner();
        if written != len {
            return Err(Error::Internal(format!(
                "attention wrote {written} of its {len} output elements"
            )));
        }
        // SAFETY: every element was written (the layouts' problems cover the output without
        // overlapping, and `put` counted `len` elements).
        unsafe { out.set_len(len) };
        Ok(out)
    }

    /// Copies the contiguous `width`-element rows of `src` to problem `p`'s rows from `r0` on.
    ///
    /// # Safety
    /// No other thread reads or writes those elements meanwhile: each problem's rows belong
    /// to one task, and a layout's problems do not overlap.
    unsafe fn put(&self, rows: &Rows, (p, r0): (usize, usize), src: &[T], width: usize) {
        if width == 0 {
            return;
        }
        for (i, r) in src.chunks_exact(width).enumerate() {
            let at = rows.start(p) + (r0 + i) * rows.row;
            assert!(at + width <= self.len, "attention row outside its buffer");
            // SAFETY: inside the buffer (asserted); disjoint from other tasks' (the caller's
            // promise); `src` is a different allocation.
            unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), self.ptr.add(at), width) };
        }
        self.written
            .fetch_add(src.len() / width * width, Ordering::Relaxed);
    }

    /// [`Shared::put`] of `scale.len()` rows of `src`, each `width` elements multiplied by its
    /// `scale`.
    ///
    /// # Safety
    /// As [`Shared::put`].
    unsafe fn put_scaled(
        &self,
        rows: &Rows,
        (p, r0): (usize, usize),
        (src, width): (&[T], usize),
        scale: &[T],
    ) where
        T: Float,
    {
        assert!(
            src.len() >= scale.len() * width,
            "attention rows outside their scratch"
        );
        wide(
            #[inline(always)]
            || {
                for (i, &f) in scale.iter().enumerate() {
                    let at = rows.start(p) + (r0 + i) * rows.row;
                    assert!(at + width <= self.len, "attention row outside its buffer");
                    let row = &src[i * width..(i + 1) * width];
                    // SAFETY: inside the buffer (asserted); disjoint from other tasks' (the
                    // caller's promise); `src` is another allocation.
                    unsafe {
                        let out = self.ptr.add(at);
                        for (c, &x) in row.iter().enumerate() {
                            out.add(c).write(x * f);
                        }
                    }
                }
            },
        );
        self.written
            .fetch_add(scale.len() * width, Ordering::Relaxed);
    }
}

/// `softmax(scale * q kᵀ [causal]) v` for (heads, seq_q, head_dim) `q`, (heads, seq_k,
/// head_dim) `k` and (heads, seq_k, v_dim) `v`: (heads, seq_q, v_dim), heads on all threads;
/// with `save`, followed in the same buffer by each query row's log-sum-exp (heads, seq_q) of
/// its visible scaled scores (what [`attention_grad`] takes).
pub(super) fn attention<T: Float>(
    q: &[T],
    k: &[T],
    v: &[T],
    d: &AttentionDims,
    save: bool,
) -> Result<Vec<T>> {
    forward([q, k, v], d, &Layout::dense(d), save)
}

/// [`attention`] of a packed (batch, seq, heads, 3, head_dim) `qkv` (`d.heads` = batch x
/// `heads`; self-attention, so `seq_k == seq_q` and `v_dim == head_dim`): (batch, seq, heads,
/// head_dim), read and written in place; with `save`, followed in the same buffer by each
/// query row's log-sum-exp (batch, seq, heads).
pub(super) fn attention_packed<T: Float>(
    qkv: &[T],
    d: &AttentionDims,
    heads: usize,
    save: bool,
) -> Result<Vec<T>> {
    forward([qkv, qkv, qkv], d, &Layout::packed(d, heads), save)
}

/// Attention of q, k, v laid out as `lay` says: a new output in `lay.out`'s places, and with
/// `save` after it each row's log-sum-exp in `lay.lse`'s.
fn forward<T: Float>(
    qkv: [&[T]; 3],
    d: &AttentionDims,
    lay: &Layout,
    save: bool,
) -> Result<Vec<T>> {
    lay.check("attention", d, qkv.map(<[T]>::len), None)?;
    let [q, k, v] = qkv;
    let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
    let outputs = d.heads * tq * dv;
    // the log-sum-exp's places, after the output's
    let lse_at = Rows {
        at: outputs + lay.lse.at,
        ..lay.lse
    };
    let rows = BLOCK.min(tq);
    // per task: a scores block, its output before normalising, 1 / sum and lse
    let scratch = || {
        let z = |n| vec![T::zero(); n];
        let saving = if save { rows } else { 0 };
        (z(rows * tk), z(rows * dv), z(rows), z(saving))
    };
    let len = outputs + if save { d.heads * tq } else { 0 };
    Shared::build(len, |dst| {
        (0..d.heads)
            .into_par_iter()
            .try_for_each_init(scratch, |(s, o, inv, lse), h| {
                let kt = Rhs::packed(lay.k.view_t(k, h), (hd, tk));
                let vr = Rhs::packed(lay.v.view(v, h, 0), (tk, dv));
                for (r0, rb, keys) in blocks(d) {
                    exponentials(d, (&lay.q, q, h, &kt), (s, inv, lse), (r0, rb, keys))?;
                    gemm_into(
                        o,
                        (rb, dv, keys),
                        View::rows(s, 0, keys),
                        &vr,
                        false,
                        T::one(),
                    )?;
                    // the output rows normalised as they are stored (v_dim wide, not the
                    // probabilities' seq_k), and the log-sum-exp when saving
                    // SAFETY: problem h's rows are this task's alone.
                    unsafe { dst.put_scaled(&lay.out, (h, r0), (o, dv), &inv[..rb]) };
                    if let Some(l) = lse.get(..rb) {
                        // SAFETY: as above.
                        unsafe { dst.put(&lse_at, (h, r0), l, 1) };
                    }
                }
                Ok::<(), Error>(())
            })
    })
}

/// The gradients of [`attention`] for the output gradient `g` (heads, seq_q, v_dim), given the
/// output `out` and the log-sum-exp `lse` (heads, seq_q) of [`attention`] with `save`: `dq`
/// (heads, seq_q, head_dim), then `dk` (heads, seq_k, head_dim), then `dv` (heads, seq_k,
/// v_dim), each whole, so that the caller splits them off without copying.
pub(super) fn attention_grad<T: Float>(
    [q, k, v]: [&[T]; 3],
    g: &[T],
    [out, lse]: [&[T]; 2],
    d: &AttentionDims,
) -> Result<Vec<T>> {
    backward([q, k, v], [g, out, lse], d, &Layout::dense(d))
}

/// The gradient of [`attention_packed`] for the output gradient `g` (batch, seq, heads,
/// head_dim), given the output `out` and the log-sum-exp `lse` (batch, seq, heads) of
/// [`attention_packed`] with `save`: `dqkv` in `qkv`'s layout.
pub(super) fn attention_packed_grad<T: Float>(
    qkv: &[T],
    g: &[T],
    [out, lse]: [&[T]; 2],
    d: &AttentionDims,
    heads: usize,
) -> Result<Vec<T>> {
    backward([qkv, qkv, qkv], [g, out, lse], d, &Layout::packed(d, heads))
}

/// The gradients of attention laid out as `lay` says, for the output gradient `g` and the
/// output `out` in `lay.out`'s places and the log-sum-exp `lse` in `lay.lse`'s: one buffer
/// holding `dq`, `dk`, `dv` in `lay.grads`' places.
fn backward<T: Float>(
    qkv: [&[T]; 3],
    [g, out, lse]: [&[T]; 3],
    d: &AttentionDims,
    lay: &Layout,
) -> Result<Vec<T>> {
    let saved = Some([g, out, lse].map(<[T]>::len));
    lay.check("attention_grad", d, qkv.map(<[T]>::len), saved)?;
    let [q, k, v] = qkv;
    let (tq, tk, hd, dvw) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
    let [dq_at, dk_at, dv_at] = lay.grads;
    let scale = T::from(d.scale).unwrap_or_else(T::one);
    let rows = BLOCK.min(tq);
    // per task: P and dS blocks, a block's dq, and the head's dk and dv as they accumulate
    let scratch = || {
        let z = |n| vec![T::zero(); n];
        (
            z(rows * tk),
            z(rows * tk),
            z(rows * hd),
            z(tk * hd),
            z(tk * dvw),
        )
    };
    Shared::build(d.heads * (tq * hd + tk * hd + tk * dvw), |dst| {
        (0..d.heads)
            .into_par_iter()
            .try_for_each_init(scratch, |(p, ds, dq, dk, dv), h| {
                let kt = Rhs::packed(lay.k.view_t(k, h), (hd, tk));
                let vt = Rhs::packed(lay.v.view_t(v, h), (dvw, tk));
                let kr = Rhs::packed(lay.k.view(k, h, 0), (tk, hd));
                dk.fill(T::zero());
                dv.fill(T::zero());
                for (r0, rb, keys) in blocks(d) {
                    scores(d, (&lay.q, q, h, &kt), p, (r0, rb, keys))?;
                    let gb = lay.out.view(g, h, r0);
                    let ob = lay.out.view(out, h, r0);
                    let lb = lay.lse.view(lse, h, r0);
                    // dP = dO vᵀ; then in one pass P = exp(scale q kᵀ - lse) over the visible
                    // keys (zero past them) and dS = P (dP - rowsum(P dP)) in dP's place, with
                    // rowsum(P dP) = rowsum(dO O)
                    gemm_into(ds, (rb, keys, dvw), gb, &vt, false, T::one())?;
                    wide(
                        #[inline(always)]
                        || {
                            let rows = p[..rb * keys]
                                .chunks_mut(keys)
                                .zip(ds[..rb * keys].chunks_mut(keys));
                            for (i, (pr, dr)) in rows.enumerate() {
                                let o = &ob.data[i * ob.rs..i * ob.rs + dvw];
                                let gr = &gb.data[i * gb.rs..i * gb.rs + dvw];
                                let (dot, l) = (dot_row(gr, o, T::zero()), lb.data[i * lb.rs]);
                                let n = visible(d, r0 + i, keys);
                                let (live, dead) = pr.split_at_mut(n);
                                for (e, x) in live.iter_mut().zip(dr[..n].iter_mut()) {
                                    let pe = (*e - l).exp_v();
                                    *e = pe;
                                    *x = pe * (*x - dot);
                                }
                                dead.fill(T::zero());
                                dr[n..].fill(T::zero());
                            }
                        },
                    );
                    // dv += Pᵀ dO; dq = scale dS k; dk += scale dSᵀ q
                    gemm_into(
                        dv,
                        (keys, dvw, rb),
                        View::transposed(p, keys),
                        &Rhs::plain(gb),
                        true,
                        T::one(),
                    )?;
                    gemm_into(
                        dq,
                        (rb, hd, keys),
                        View::rows(ds, 0, keys),
                        &kr,
                        false,
                        scale,
                    )?;
                    // SAFETY: problem h's rows are this task's alone.
                    unsafe { dst.put(&dq_at, (h, r0), &dq[..rb * hd], hd) };
                    gemm_into(
                        dk,
                        (keys, hd, rb),
                        View::transposed(ds, keys),
                        &Rhs::plain(lay.q.view(q, h, r0)),
                        true,
                        scale,
                    )?;
                }
                // SAFETY: as above.
                unsafe {
                    dst.put(&dk_at, (h, 0), dk, hd);
                    dst.put(&dv_at, (h, 0), dv, dvw);
                }
                Ok::<(), Error>(())
            })
    })
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

    /// [`attention_grad`] after the saving forward it takes.
    fn grad<T: Float>(q: &[T], k: &[T], v: &[T], g: &[T], d: &AttentionDims) -> Result<Vec<T>> {
        let saved = attention(q, k, v, d, true)?;
        let (out, lse) = saved.split_at(d.heads * d.seq_q * d.v_dim);
        attention_grad([q, k, v], g, [out, lse], d)
    }

    /// [`attention_packed_grad`] after the saving forward it takes.
    fn packed_grad<T: Float>(qkv: &[T], g: &[T], d: &AttentionDims, h: usize) -> Result<Vec<T>> {
        let saved = attention_packed(qkv, d, h, true)?;
        let (out, lse) = saved.split_at(d.heads * d.seq_q * d.v_dim);
        attention_packed_grad(qkv, g, [out, lse], d, h)
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
                let got = attention(&q, &k, &v, &d, false)?;
                let want = naive(&q, &k, &v, &d);
                for (a, b) in got.iter().zip(&want) {
                    assert!(
                        (a - b).abs() < 1e-12,
                        "{tq}x{tk} causal {causal}: {a} vs {b}"
                    );
                }
                // saving: the output, then each row's log-sum-exp of its visible scaled scores
                let saved = attention(&q, &k, &v, &d, true)?;
                assert_eq!(saved.len(), 3 * tq * 4);
                let (out, lses) = saved.split_at(3 * tq * 3);
                assert_eq!(out, &got[..]);
                for (r, &l) in lses.iter().enumerate() {
                    let (h, i) = (r / tq, r % tq);
                    let lse = (0..visible(&d, i, tk))
                        .map(|j| {
                            let s: f64 = (0..5)
                                .map(|c| q[(h * tq + i) * 5 + c] * k[(h * tk + j) * 5 + c])
                                .sum();
                            (s * d.scale).exp()
                        })
                        .sum::<f64>()
                        .ln();
                    assert!((l - lse).abs() < 1e-12, "lse {l} vs {lse}");
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
                let grad = grad(&ins[0], &ins[1], &ins[2], &g, &d)?;
                // [dq | dk | dv], each whole (heads, seq, width)
                let sizes = [tq * 5, tk * 5, tk * 3];
                let loss = |x: &[Vec<f64>; 3]| -> f64 {
                    naive(&x[0], &x[1], &x[2], &d)
                        .iter()
                        .zip(&g)
                        .map(|(a, b)| a * b)
                        .sum()
                };
                for (which, size) in sizes.iter().enumerate() {
                    let at: usize = 2 * sizes[..which].iter().sum::<usize>();
                    // a few elements of each head's gradient
                    for h in 0..2 {
                        for e in [0, size / 3, size - 1] {
                            let idx = h * size + e;
                            let mut plus = ins.clone();
                            plus[which][idx] += 1e-6;
                            let mut minus = ins.clone();
                            minus[which][idx] -= 1e-6;
                            let fd = (loss(&plus) - loss(&minus)) / 2e-6;
                            let got = grad[at + h * size + e];
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
            let out = attention(&q, &k, &v, &d, false)?;
            for (a, b) in out.iter().zip(naive(&ins[0], &ins[1], &ins[2], &d)) {
                assert!(
                    (f64::from(*a) - b).abs() < 1e-5,
                    "causal {causal}: {a} vs {b}"
                );
            }
            let got = grad(&q, &k, &v, &f32s(&g), &d)?;
            let want = grad(&ins[0], &ins[1], &ins[2], &g, &d)?;
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*a) - b).abs() < 1e-4 * (1.0 + b.abs()),
                    "gradient element {i}, causal {causal}: {a} vs {b}"
                );
            }
        }
        Ok(())
    }

    /// (batch, seq, heads, 3, dim) `qkv` as separate dense (batch x heads, seq, dim) q, k, v.
    fn unpack(qkv: &[f64], (b, t, h, hd): (usize, usize, usize, usize)) -> [Vec<f64>; 3] {
        let mut parts = [vec![], vec![], vec![]];
        for (i, part) in parts.iter_mut().enumerate() {
            for bi in 0..b {
                for hi in 0..h {
                    for ti in 0..t {
                        let at = (((bi * t + ti) * h + hi) * 3 + i) * hd;
                        part.extend_from_slice(&qkv[at..at + hd]);
                    }
                }
            }
        }
        parts
    }

    /// (batch x heads, seq, dim) dense data as (batch, seq, heads, dim), or back when `back`.
    fn interleave(x: &[f64], (b, t, h, hd): (usize, usize, usize, usize), back: bool) -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        for bi in 0..b {
            for hi in 0..h {
                for ti in 0..t {
                    let dense = ((bi * h + hi) * t + ti) * hd;
                    let mixed = ((bi * t + ti) * h + hi) * hd;
                    let (from, to) = if back { (mixed, dense) } else { (dense, mixed) };
                    out[to..to + hd].copy_from_slice(&x[from..from + hd]);
                }
            }
        }
        out
    }

    /// The packed layout's forward and gradient equal the dense kernels' on the same heads
    /// (which the tests above hold to the definition), in f64 and in f32.
    #[test]
    fn packed_qkv_matches_separate_heads() -> Result<()> {
        // 130 rows: two blocks, the second partial
        let (b, t, h, hd) = (2, 130, 3, 5);
        for causal in [false, true] {
            let mut d = dims(b * h, t, t, causal);
            d.v_dim = hd;
            let qkv = data(b * t * h * 3 * hd, 3);
            let g = data(b * t * h * hd, 9);
            let [q, k, v] = unpack(&qkv, (b, t, h, hd));
            let out = attention_packed(&qkv, &d, h, false)?;
            let want = interleave(&attention(&q, &k, &v, &d, false)?, (b, t, h, hd), false);
            assert_eq!(out.len(), want.len());
            for (x, y) in out.iter().zip(&want) {
                assert!((x - y).abs() < 1e-12, "causal {causal}: {x} vs {y}");
            }
            // the dense gradient (dq | dk | dv, each (b h, t, hd)) back in qkv's layout
            let dense_g = interleave(&g, (b, t, h, hd), true);
            let grads = grad(&q, &k, &v, &dense_g, &d)?;
            let whole = b * h * t * hd;
            let mut want = vec![0.0; qkv.len()];
            for p in 0..b * h {
                let (bi, hi) = (p / h, p % h);
                for i in 0..3 {
                    for ti in 0..t {
                        let from = i * whole + p * t * hd + ti * hd;
                        let to = (((bi * t + ti) * h + hi) * 3 + i) * hd;
                        want[to..to + hd].copy_from_slice(&grads[from..from + hd]);
                    }
                }
            }
            let got = packed_grad(&qkv, &g, &d, h)?;
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (x - y).abs() < 1e-12,
                    "gradient {i}, causal {causal}: {x} vs {y}"
                );
            }
            let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
            let out32 = attention_packed(&f32s(&qkv), &d, h, false)?;
            let got32 = packed_grad(&f32s(&qkv), &f32s(&g), &d, h)?;
            for (x, y) in out32.iter().zip(&out).chain(got32.iter().zip(&got)) {
                assert!(
                    (f64::from(*x) - y).abs() < 1e-4 * (1.0 + y.abs()),
                    "f32 {x} vs {y}"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn a_buffer_too_short_for_its_layout_is_an_error() {
        let d = AttentionDims {
            v_dim: 5,
            ..dims(2, 4, 4, false)
        };
        let qkv = vec![0.0f64; 2 * 4 * 3 * 5 - 1];
        assert!(attention_packed(&qkv, &d, 2, false).is_err());
        let (full, g) = (vec![0.0; qkv.len() + 1], vec![0.0; 2 * 4 * 5]);
        let lse = vec![0.0; 2 * 4];
        assert!(attention_packed_grad(&full, &g[1..], [&g, &lse], &d, 2).is_err());
        assert!(attention_packed_grad(&full, &g, [&g[1..], &lse], &d, 2).is_err());
        assert!(attention_packed_grad(&full, &g, [&g, &lse[1..]], &d, 2).is_err());
        assert!(attention_packed_grad(&full, &g, [&g, &lse], &d, 2).is_ok());
    }
}

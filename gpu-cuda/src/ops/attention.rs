//! Fused scaled dot-product attention, forward and backward, as core's CPU kernels compute it
//! (`cpu/attention.rs`), in FlashAttention's order (`kernels/gflow.cu`): the (seq_q, seq_k)
//! scores are never stored. The forward (`attention_*`) runs one thread per query row, an online
//! softmax over tiles of keys and values staged in shared memory, and with `save` writes each
//! row's log-sum-exp after the output. The backward is two kernels: `attention_dq_*`, one thread
//! per query row (dq, and each row's `rowsum(dO O)` into a scratch buffer), then
//! `attention_dkv_*`, one thread per key row (dk and dv), both recomputing the probabilities as
//! `exp(scale q kᵀ - lse)`. A block is [`ROWS`] consecutive rows of one problem, so the launch
//! is problems x row blocks (at most `MAX_BLOCKS`; the kernels loop over the rest). Dense
//! (heads, seq, dim) operands and one packed (batch, seq, heads, 3, head_dim) `qkv` are one code
//! path: each operand goes to the kernels as a row layout ([`Rows`], core's `Rows`).

use cudarc::driver::{DeviceRepr, PushKernelArg};
use gflow_core::backend::AttentionDims;
use gflow_core::{Error, Result};

use crate::launch::blocks_of;
use crate::memory::Float;
use crate::{CudaBackend, CudaStorage};

/// Threads per block of the attention kernels, one per row (the source's `ATT_ROWS`).
const ROWS: usize = 64;

/// Where one operand keeps each problem's rows (the source's `AttRows`, core's `Rows`): problem
/// `p`'s row `i` starts at `at + (p / per) * batch + (p % per) * head + i * row`, its elements
/// contiguous.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rows {
    at: u64,
    per: u64,
    batch: u64,
    head: u64,
    row: u64,
}

impl Rows {
    /// Contiguous (problems, rows, width) data from element `at`, problems `stride` apart.
    fn dense(at: usize, stride: usize, width: usize) -> Rows {
        Rows {
            at: at as u64,
            per: 1,
            batch: stride as u64,
            head: 0,
            row: width as u64,
        }
    }

    /// (batch, seq, heads, lanes) data of which each head reads `at..at + width` of its
    /// `lanes` elements per row.
    fn interleaved(seq: usize, heads: usize, lanes: usize, at: usize) -> Rows {
        Rows {
            at: at as u64,
            per: heads.max(1) as u64,
            batch: (seq * heads * lanes) as u64,
            head: lanes as u64,
            row: (heads * lanes) as u64,
        }
    }

    /// The elements a buffer needs for `problems` problems of `rows` rows of `width` laid out
    /// so: the end of the last problem's last row.
    fn span(&self, (problems, rows, width): (usize, usize, usize)) -> u64 {
        if problems == 0 || rows == 0 || width == 0 {
            return 0;
        }
        let last = (problems - 1) as u64;
        self.at
            + last / self.per * self.batch
            + (self.per - 1).min(last) * self.head
            + (rows - 1) as u64 * self.row
            + width as u64
    }
}

/// An attention's operands and sizes, passed to the kernels by value (the source's
/// `AttLayout`): q, k, v, the output (and the output gradient), each query row's log-sum-exp,
/// and the backward's dq, dk and dv in its one output buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Layout {
    q: Rows,
    k: Rows,
    v: Rows,
    out: Rows,
    lse: Rows,
    dq: Rows,
    dk: Rows,
    dv: Rows,
    heads: u64,
    seq_q: u64,
    seq_k: u64,
    head_dim: u64,
    v_dim: u64,
    causal: u64,
}

// SAFETY: plain u64s, laid out as the source's `struct AttLayout` (repr(C), no padding).
unsafe impl DeviceRepr for Layout {}

impl Layout {
    /// `d`'s sizes with the operands in `places` (q, k, v, out, lse, dq, dk, dv).
    fn new(d: &AttentionDims, places: [Rows; 8]) -> Layout {
        let [q, k, v, out, lse, dq, dk, dv] = places;
        Layout {
            q,
            k,
            v,
            out,
            lse,
            dq,
            dk,
            dv,
            heads: d.heads as u64,
            seq_q: d.seq_q as u64,
            seq_k: d.seq_k as u64,
            head_dim: d.head_dim as u64,
            v_dim: d.v_dim as u64,
            causal: u64::from(d.causal),
        }
    }

    /// Separate dense (heads, seq, dim) q, k, v and output, a (heads, seq_q) log-sum-exp; the
    /// gradients one after another, `dq` (heads, seq_q, head_dim), `dk` (heads, seq_k,
    /// head_dim), `dv` (heads, seq_k, v_dim).
    fn dense(d: &AttentionDims) -> Layout {
        let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
        let (nq, nk) = (d.heads * tq * hd, d.heads * tk * hd);
        Layout::new(
            d,
            [
                Rows::dense(0, tq * hd, hd),
                Rows::dense(0, tk * hd, hd),
                Rows::dense(0, tk * dv, dv),
                Rows::dense(0, tq * dv, dv),
                Rows::dense(0, tq, 1),
                Rows::dense(0, tq * hd, hd),
                Rows::dense(nq, tk * hd, hd),
                Rows::dense(nq + nk, tk * dv, dv),
            ],
        )
    }

    /// One (batch, seq, heads, 3, head_dim) `qkv` holding each head's q, k and v side by side,
    /// `heads` per batch row, a (batch, seq, heads, head_dim) output and a (batch, seq, heads)
    /// log-sum-exp; the gradients where q, k and v are.
    fn packed(d: &AttentionDims, heads: usize) -> Layout {
        let (t, hd) = (d.seq_q, d.head_dim);
        let part = |i| Rows::interleaved(t, heads, 3 * hd, i * hd);
        Layout::new(
            d,
            [
                part(0),
                part(1),
                part(2),
                Rows::interleaved(t, heads, hd, 0),
                Rows::interleaved(t, heads, 1, 0),
                part(0),
                part(1),
                part(2),
            ],
        )
    }

    /// Sizes as usizes: (problems, seq_q, seq_k, head_dim, v_dim).
    fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        let n = |x: u64| x as usize;
        (
            n(self.heads),
            n(self.seq_q),
            n(self.seq_k),
            n(self.head_dim),
            n(self.v_dim),
        )
    }

    /// An error naming the first of `operands` (name, buffer length, places, rows per problem,
    /// width) whose buffer is shorter than its places need.
    fn check(
        &self,
        op: &'static str,
        operands: &[(&str, usize, Rows, usize, usize)],
    ) -> Result<()> {
        let heads = self.heads as usize;
        for &(name, len, rows, n, width) in operands {
            let need = rows.span((heads, n, width));
            if (len as u64) < need {
                return Err(Error::ShapeMismatch {
                    op,
                    shapes: vec![vec![len], vec![heads, n, width]],
                    reason: format!(
                        "{name} holds {len} elements; {heads} problems of {n} rows of {width} \
                         laid out as {rows:?} need {need}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// [`Layout::check`] of q, k and v.
    fn check_inputs(&self, op: &'static str, [q, k, v]: [&CudaStorage; 3]) -> Result<()> {
        let (_, tq, tk, hd, dv) = self.sizes();
        self.check(
            op,
            &[
                ("q", q.len, self.q, tq, hd),
                ("k", k.len, self.k, tk, hd),
                ("v", v.len, self.v, tk, dv),
            ],
        )
    }
}

/// [`Backend::attention`](gflow_core::backend::Backend::attention) on this device.
pub(crate) fn attention(
    c: &CudaBackend,
    q: &CudaStorage,
    k: &CudaStorage,
    v: &CudaStorage,
    dims: AttentionDims,
    save: bool,
) -> Result<CudaStorage> {
    let lay = Layout::dense(&dims);
    by_float!(q, "attention", T => c.attention_t::<T>([q, k, v], &lay, dims.scale, save))
}

/// [`Backend::attention_packed`](gflow_core::backend::Backend::attention_packed) on this device.
pub(crate) fn attention_packed(
    c: &CudaBackend,
    qkv: &CudaStorage,
    dims: AttentionDims,
    heads: usize,
    save: bool,
) -> Result<CudaStorage> {
    let lay = Layout::packed(&dims, heads);
    by_float!(qkv, "attention_packed", T => c.attention_t::<T>([qkv; 3], &lay, dims.scale, save))
}

/// [`Backend::attention_grad`](gflow_core::backend::Backend::attention_grad) on this device.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_grad(
    c: &CudaBackend,
    q: &CudaStorage,
    k: &CudaStorage,
    v: &CudaStorage,
    g: &CudaStorage,
    out: &CudaStorage,
    lse: &CudaStorage,
    dims: AttentionDims,
) -> Result<CudaStorage> {
    let lay = Layout::dense(&dims);
    by_float!(q, "attention_grad", T =>
        c.attention_grad_t::<T>([q, k, v], [g, out, lse], &lay, dims.scale))
}

/// [`Backend::attention_packed_grad`](gflow_core::backend::Backend::attention_packed_grad) on
/// this device.
pub(crate) fn attention_packed_grad(
    c: &CudaBackend,
    qkv: &CudaStorage,
    g: &CudaStorage,
    out: &CudaStorage,
    lse: &CudaStorage,
    dims: AttentionDims,
    heads: usize,
) -> Result<CudaStorage> {
    let lay = Layout::packed(&dims, heads);
    by_float!(qkv, "attention_packed_grad", T =>
        c.attention_grad_t::<T>([qkv; 3], [g, out, lse], &lay, dims.scale))
}

impl CudaBackend {
    /// The forward on operands laid out as `lay` says: a new output in `lay.out`'s places and,
    /// with `save`, after it each query row's log-sum-exp in `lay.lse`'s.
    fn attention_t<T: Float>(
        &self,
        qkv: [&CudaStorage; 3],
        lay: &Layout,
        scale: f64,
        save: bool,
    ) -> Result<CudaStorage> {
        lay.check_inputs("attention", qkv)?;
        let (heads, tq, _, _, dv) = lay.sizes();
        let outputs = heads * tq * dv;
        let len = outputs + if save { heads * tq } else { 0 };
        let mut a = *lay;
        a.lse.at += outputs as u64;
        a.check(
            "attention",
            &[
                ("the output", outputs, a.out, tq, dv),
                (
                    "the output and log-sum-exp",
                    len,
                    a.lse,
                    tq,
                    usize::from(save),
                ),
            ],
        )?;
        let out = self.alloc::<T>(len)?;
        let [q, k, v] = qkv.map(|x| self.float::<T>(x));
        let (q, k, v) = (q?, k?, v?);
        if heads * tq > 0 {
            let (scale, save) = (T::from_f64(scale), i32::from(save));
            let cfg = blocks_of(heads * tq.div_ceil(ROWS), ROWS as u32);
            // SAFETY: attention_* takes (q, k, v, out, layout, scale, save) and runs with
            // ATT_ROWS threads per block; it reads q, k, v and writes out (and with save the
            // log-sum-exp) only inside the places checked above.
            unsafe {
                self.launch(&format!("attention_{}", T::SUFFIX), cfg, |l| {
                    l.arg(q)
                        .arg(k)
                        .arg(v)
                        .arg(&out)
                        .arg(&a)
                        .arg(&scale)
                        .arg(&save);
                })
            }?;
        }
        Ok(T::wrap(out, len))
    }

    /// The backward on operands laid out as `lay` says, for the output gradient `g`, the
    /// output `out` and its log-sum-exp `lse`: one buffer holding dq, dk and dv in `lay`'s
    /// gradient places. dq's kernel also leaves each query row's `rowsum(dO O)` in a scratch
    /// buffer for dk's and dv's.
    fn attention_grad_t<T: Float>(
        &self,
        qkv: [&CudaStorage; 3],
        [g, out, lse]: [&CudaStorage; 3],
        lay: &Layout,
        scale: f64,
    ) -> Result<CudaStorage> {
        let op = "attention_grad";
        lay.check_inputs(op, qkv)?;
        let (heads, tq, tk, hd, dv) = lay.sizes();
        let len = heads * (tq * hd + tk * hd + tk * dv);
        lay.check(
            op,
            &[
                ("the output gradient", g.len, lay.out, tq, dv),
                ("the output", out.len, lay.out, tq, dv),
                ("the log-sum-exp", lse.len, lay.lse, tq, 1),
                ("dq", len, lay.dq, tq, hd),
                ("dk", len, lay.dk, tk, hd),
                ("dv", len, lay.dv, tk, dv),
            ],
        )?;
        let grads = self.alloc::<T>(len)?;
        let dsum = self.alloc::<T>(heads * tq)?;
        let [q, k, v] = qkv.map(|x| self.float::<T>(x));
        let (q, k, v) = (q?, k?, v?);
        let [g, out, lse] = [g, out, lse].map(|x| self.float::<T>(x));
        let (g, out, lse) = (g?, out?, lse?);
        let scale = T::from_f64(scale);
        if heads * tq > 0 {
            let cfg = blocks_of(heads * tq.div_ceil(ROWS), ROWS as u32);
            // SAFETY: attention_dq_* takes (q, k, v, g, out, lse, grads, dsum, layout, scale)
            // and runs with ATT_ROWS threads per block; it reads its inputs and writes dq only
            // inside the places checked above, and dsum (heads * seq_q) at each query row.
            unsafe {
                self.launch(&format!("attention_dq_{}", T::SUFFIX), cfg, |l| {
                    l.arg(q)
                        .arg(k)
                        .arg(v)
                        .arg(g)
                        .arg(out)
                        .arg(lse)
                        .arg(&grads)
                        .arg(&dsum)
                        .arg(lay)
                        .arg(&scale);
                })
            }?;
        }
        if heads * tk > 0 {
            let cfg = blocks_of(heads * tk.div_ceil(ROWS), ROWS as u32);
            // SAFETY: attention_dkv_* takes (q, k, v, g, lse, dsum, grads, layout, scale) and
            // runs with ATT_ROWS threads per block; it reads its inputs and dsum (written by
            // attention_dq_* before it on the stream) and writes dk and dv only inside the
            // places checked above.
            unsafe {
                self.launch(&format!("attention_dkv_{}", T::SUFFIX), cfg, |l| {
                    l.arg(q)
                        .arg(k)
                        .arg(v)
                        .arg(g)
                        .arg(lse)
                        .arg(&dsum)
                        .arg(&grads)
                        .arg(lay)
                        .arg(&scale);
                })
            }?;
        }
        Ok(T::wrap(grads, len))
    }
}

#[cfg(test)]
mod tests {
    use super::{Layout, ROWS, Rows};
    use gflow_core::backend::AttentionDims;

    /// The first element of problem `p`'s row `i` under `r`, as the kernels compute it.
    fn at(r: &Rows, p: u64, i: u64) -> u64 {
        r.at + p / r.per * r.batch + p % r.per * r.head + i * r.row
    }

    fn dims(heads: usize, (tq, tk): (usize, usize), (hd, dv): (usize, usize)) -> AttentionDims {
        AttentionDims {
            heads,
            seq_q: tq,
            seq_k: tk,
            head_dim: hd,
            v_dim: dv,
            scale: 0.5,
            causal: true,
        }
    }

    #[test]
    fn the_source_has_the_hosts_block_size_and_layout() {
        let src = crate::device::SOURCE[0];
        assert!(src.contains(&format!("#define ATT_ROWS {ROWS}\n")));
        // the fields in Layout's order, all u64 (no padding either side)
        assert!(src.contains("struct AttRows {\n    u64 at, per, batch, head, row;\n};"));
        assert!(src.contains(
            "    AttRows q, k, v, out, lse, dq, dk, dv;\n    \
             u64 heads, seq_q, seq_k, head_dim, v_dim, causal;\n"
        ));
        assert_eq!(std::mem::size_of::<Layout>(), (8 * 5 + 6) * 8);
    }

    #[test]
    fn packed_places_are_the_qkv_and_output_elements() {
        // (batch 2, seq 5, heads 3, 3, head_dim 4)
        let (b, t, h, hd) = (2, 5, 3, 4);
        let lay = Layout::packed(&dims(b * h, (t, t), (hd, hd)), h);
        let (b, t, h, hd) = (b as u64, t as u64, h as u64, hd as u64);
        for (bi, ti, hi) in [(0, 0, 0), (1, 4, 2), (1, 2, 0), (0, 3, 1)] {
            let p = bi * h + hi;
            let row = (bi * t + ti) * h + hi;
            for (c, r) in [lay.q, lay.k, lay.v].iter().enumerate() {
                assert_eq!(at(r, p, ti), (row * 3 + c as u64) * hd);
            }
            assert_eq!([lay.dq, lay.dk, lay.dv], [lay.q, lay.k, lay.v]);
            assert_eq!(at(&lay.out, p, ti), row * hd);
            assert_eq!(at(&lay.lse, p, ti), row);
        }
        // the last row ends each buffer
        assert_eq!(lay.q.span((6, 5, 4)), b * t * h * 3 * hd - 2 * hd);
        assert_eq!(lay.v.span((6, 5, 4)), b * t * h * 3 * hd);
        assert_eq!(lay.out.span((6, 5, 4)), b * t * h * hd);
        assert_eq!(lay.lse.span((6, 5, 1)), b * t * h);
    }

    #[test]
    fn dense_gradients_lie_one_after_another() {
        let (n, tq, tk, hd, dv) = (3, 5, 7, 4, 6);
        let lay = Layout::dense(&dims(n, (tq, tk), (hd, dv)));
        let (nq, nk, nv) = (n * tq * hd, n * tk * hd, n * tk * dv);
        assert_eq!(lay.dq.span((n, tq, hd)), nq as u64);
        assert_eq!(at(&lay.dk, 0, 0), nq as u64);
        assert_eq!(lay.dk.span((n, tk, hd)), (nq + nk) as u64);
        assert_eq!(at(&lay.dv, 0, 0), (nq + nk) as u64);
        assert_eq!(lay.dv.span((n, tk, dv)), (nq + nk + nv) as u64);
        assert_eq!(at(&lay.v, 2, 3), ((2 * tk + 3) * dv) as u64);
        assert_eq!(lay.lse.span((n, tq, 1)), (n * tq) as u64);
    }
}

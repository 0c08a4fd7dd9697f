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
//! path: each operand goes to the kernels as a row layout (core's [`AttentionLayout`]).

use cudarc::driver::{DeviceRepr, PushKernelArg};
use gflow_core::Result;
use gflow_core::backend::{AttentionDims, AttentionLayout, AttentionRows};

use crate::launch::blocks_of;
use crate::memory::Float;
use crate::{CudaBackend, CudaStorage};

/// Threads per block of the attention kernels, one per row (the source's `ATT_ROWS`).
const ROWS: usize = 64;

/// One operand's rows as the kernels read them (the source's `AttRows`): core's
/// [`AttentionRows`] in u64s.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rows {
    at: u64,
    per: u64,
    batch: u64,
    head: u64,
    row: u64,
}

impl From<AttentionRows> for Rows {
    fn from(r: AttentionRows) -> Rows {
        let n = |x: usize| x as u64;
        Rows {
            at: n(r.at),
            per: n(r.per),
            batch: n(r.batch),
            head: n(r.head),
            row: n(r.row),
        }
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
    /// `d`'s sizes with the operands where `lay` puts them.
    fn new(d: &AttentionDims, lay: &AttentionLayout) -> Layout {
        let [dq, dk, dv] = lay.grads.map(Rows::from);
        let n = |x: usize| x as u64;
        Layout {
            q: lay.q.into(),
            k: lay.k.into(),
            v: lay.v.into(),
            out: lay.out.into(),
            lse: lay.lse.into(),
            dq,
            dk,
            dv,
            heads: n(d.heads),
            seq_q: n(d.seq_q),
            seq_k: n(d.seq_k),
            head_dim: n(d.head_dim),
            v_dim: n(d.v_dim),
            causal: u64::from(d.causal),
        }
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
    let lay = AttentionLayout::dense(&dims);
    by_float!(q, "attention", T => c.attention_t::<T>([q, k, v], (&dims, &lay), save))
}

/// [`Backend::attention_packed`](gflow_core::backend::Backend::attention_packed) on this device.
pub(crate) fn attention_packed(
    c: &CudaBackend,
    qkv: &CudaStorage,
    dims: AttentionDims,
    heads: usize,
    save: bool,
) -> Result<CudaStorage> {
    let lay = AttentionLayout::packed(&dims, heads);
    by_float!(qkv, "attention_packed", T => c.attention_t::<T>([qkv; 3], (&dims, &lay), save))
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
    let lay = AttentionLayout::dense(&dims);
    by_float!(q, "attention_grad", T =>
        c.attention_grad_t::<T>([q, k, v], [g, out, lse], (&dims, &lay)))
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
    let lay = AttentionLayout::packed(&dims, heads);
    by_float!(qkv, "attention_packed_grad", T =>
        c.attention_grad_t::<T>([qkv; 3], [g, out, lse], (&dims, &lay)))
}

impl CudaBackend {
    /// The forward on operands laid out as `lay` says: a new output in `lay.out`'s places and,
    /// with `save`, after it each query row's log-sum-exp in `lay.lse`'s.
    fn attention_t<T: Float>(
        &self,
        qkv: [&CudaStorage; 3],
        (d, lay): (&AttentionDims, &AttentionLayout),
        save: bool,
    ) -> Result<CudaStorage> {
        let op = "attention";
        lay.check(op, d, qkv.map(|x| x.len), None)?;
        let (heads, tq, dv) = (d.heads, d.seq_q, d.v_dim);
        let outputs = heads * tq * dv;
        let len = outputs + if save { heads * tq } else { 0 };
        // the log-sum-exp follows the output in its buffer
        let lse = AttentionRows {
            at: lay.lse.at + outputs,
            ..lay.lse
        };
        lay.out.check(op, "the output", outputs, (heads, tq, dv))?;
        let saved = (heads, tq, usize::from(save));
        lse.check(op, "the output and log-sum-exp", len, saved)?;
        let a = Layout::new(d, &AttentionLayout { lse, ..*lay });
        let out = self.alloc::<T>(len)?;
        let [q, k, v] = qkv.map(|x| self.float::<T>(x));
        let (q, k, v) = (q?, k?, v?);
        if heads * tq > 0 {
            let (scale, save) = (T::from_f64(d.scale), i32::from(save));
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
        (d, lay): (&AttentionDims, &AttentionLayout),
    ) -> Result<CudaStorage> {
        let op = "attention_grad";
        let saved = [g, out, lse].map(|x| x.len);
        lay.check(op, d, qkv.map(|x| x.len), Some(saved))?;
        let (heads, tq, tk, hd, dv) = (d.heads, d.seq_q, d.seq_k, d.head_dim, d.v_dim);
        let len = heads * (tq * hd + tk * hd + tk * dv);
        let [dq, dk, dvs] = lay.grads;
        dq.check(op, "dq", len, (heads, tq, hd))?;
        dk.check(op, "dk", len, (heads, tk, hd))?;
        dvs.check(op, "dv", len, (heads, tk, dv))?;
        let a = Layout::new(d, lay);
        let grads = self.alloc::<T>(len)?;
        let dsum = self.alloc::<T>(heads * tq)?;
        let [q, k, v] = qkv.map(|x| self.float::<T>(x));
        let (q, k, v) = (q?, k?, v?);
        let [g, out, lse] = [g, out, lse].map(|x| self.float::<T>(x));
        let (g, out, lse) = (g?, out?, lse?);
        let scale = T::from_f64(d.scale);
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
                        .arg(&a)
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
                        .arg(&a)
                        .arg(&scale);
                })
            }?;
        }
        Ok(T::wrap(grads, len))
    }
}

#[cfg(test)]
mod tests {
    use super::{Layout, ROWS};

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
}

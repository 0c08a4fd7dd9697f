//! Fused scaled dot-product attention (no mask but the causal one): one kernel forward and one
//! backward on the CPU, instead of a scale, two products, a mask add and a softmax that each
//! write the whole (batch, heads, seq_q, seq_k) score tensor. Batch or heads split keep their
//! split (no communication); with q, k and v broadcast and v a partial sum, the output is a
//! partial sum (attention is linear in v), and the backward is linear in the output gradient.
//!
//! Where a backward will follow, the forward kernel also returns each query row's log-sum-exp
//! (after the output, in its buffer); the op splits it off (the output keeps its buffer, the
//! log-sum-exp is copied: one element per row) and hands it to its caller beside the output
//! (an op has one output), as a tensor of the output's layout without its last dim. The
//! backward op takes the output and the log-sum-exp as two more inputs, so it recomputes the
//! probabilities in one pass and takes `rowsum(P dP)` as `rowsum(dO O)` (FlashAttention's
//! backward). The log-sum-exp depends on q and k alone: where v is a partial sum (q and k
//! broadcast) every rank holds all of it, so it is broadcast.

use super::{Kernel, Op, Signature, side};
use crate::autograd::{is_grad_enabled, record};
use crate::backend::{AttentionDims, Kernels};
use crate::boxing::Dist;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::{NdSbp, Sbp};
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// The tags of attention's second results (see [`side`]): they are taken right after the op
/// that left them, by the code that dispatched it.
const LSE: side::Tag = ("attention log-sum-exp", [0, 0]);
const DK_DV: side::Tag = ("attention dk, dv", [0, 0]);

/// Splits a saving forward kernel's buffer into the output (its first `outputs` elements, in
/// place) and the log-sum-exp after them, which it leaves for [`take_lse`].
fn split_lse(backend: &dyn Kernels, buf: Buffer, outputs: usize) -> Result<Buffer> {
    let (out, lse) = split_at(backend, buf, outputs)?;
    side::leave(LSE, vec![lse]);
    Ok(out)
}

/// `buf`'s first `at` elements and the rest, where `buf` lives: cut on the host, or copied into
/// two new buffers on its device (no download).
fn split_at(backend: &dyn Kernels, buf: Buffer, at: usize) -> Result<(Buffer, Buffer)> {
    if buf.device_copy().is_none() {
        let mut head = buf.into_host()?;
        let tail = head.split_off(at);
        return Ok((Buffer::from(head), Buffer::from(tail)));
    }
    let len = buf.len();
    let head = backend.slice(&buf, &[len], &[0], &[at])?;
    let tail = backend.slice(&buf, &[len], &[at], &[len - at])?;
    Ok((head, tail))
}

/// A tensor of shape `shape` in `like`'s layout (its SBP on the leading batch and head dims,
/// which the attention gradients share) from this rank's component (`None` off the placement).
fn component_like(buf: Option<Buffer>, shape: &[usize], like: &Tensor) -> Result<Tensor> {
    match (like.dist(), buf) {
        (None, Some(buf)) => Tensor::from_vec_data(buf, shape, like.device()),
        (Some(d), buf) => Tensor::from_component(buf, shape, like.dtype(), d.clone()),
        (None, None) => Err(Error::Internal(
            "attention's backward kept no dk, dv".into(),
        )),
    }
}

/// `dk` and `dv` of shapes `k` and `v` that the [`AttentionGrad`] that made `dq` left (none on
/// a rank off the placement), in `dq`'s layout.
fn take_grads(dq: &Tensor, [k, v]: [&[usize]; 2]) -> Result<[Tensor; 2]> {
    let mut left = side::take(DK_DV).unwrap_or_default().into_iter();
    let (dk, dv) = (left.next(), left.next());
    Ok([component_like(dk, k, dq)?, component_like(dv, v, dq)?])
}

/// The log-sum-exp the saving forward that made `out` left, as a tensor of
/// `out`'s layout without its last dim (a partial-sum output's broadcast: see the module docs).
fn take_lse(out: &Tensor) -> Result<Tensor> {
    let buf = side::take(LSE).and_then(|v| v.into_iter().next());
    let shape = &out.shape()[..out.ndim() - 1];
    match out.dist() {
        None => {
            let buf = buf.ok_or_else(|| Error::Internal("attention kept no log-sum-exp".into()))?;
            Tensor::from_vec_data(buf, shape, out.device())
        }
        Some(d) => {
            let sbp: Vec<Sbp> = d
                .nd_sbp
                .as_slice()
                .iter()
                .map(|s| match s {
                    Sbp::Partial(_) => Sbp::Broadcast,
                    other => *other,
                })
                .collect();
            let dist = Dist::new(d.placement.clone(), NdSbp::from(sbp));
            Tensor::from_component(buf, shape, out.dtype(), dist)
        }
    }
}

/// Attention of (batch, heads, seq, dim) inputs q, k, v; with `save`, it keeps the
/// log-sum-exp for [`AttentionGrad`] (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(super) struct Attention {
    pub(super) scale: f64,
    pub(super) causal: bool,
    pub(super) save: bool,
}

impl Attention {
    /// The kernel's dims for local (batch, heads, seq, dim) `q` and `v` shapes and `k`'s length.
    fn dims(&self, q: &[usize], v: &[usize]) -> AttentionDims {
        AttentionDims {
            heads: q[0] * q[1],
            seq_q: q[2],
            seq_k: v[2],
            head_dim: q[3],
            v_dim: v[3],
            scale: self.scale,
            causal: self.causal,
        }
    }

    /// Every operand split alike on batch or heads, or all broadcast; operand `linear` a
    /// partial sum makes a partial sum when the rest are broadcast.
    fn signatures(inputs: usize, linear: usize) -> Vec<Signature> {
        let mut v: Vec<Signature> = (0..2)
            .map(|d| Signature::new(vec![Sbp::Split(d); inputs], Sbp::Split(d)))
            .collect();
        v.push(Signature::new(vec![Sbp::Broadcast; inputs], Sbp::Broadcast));
        let sum = Sbp::Partial(ReduceOp::Sum);
        let mut partial = vec![Sbp::Broadcast; inputs];
        partial[linear] = sum;
        v.push(Signature::new(partial, sum));
        v
    }
}

impl Op for Attention {
    fn name(&self) -> &'static str {
        "scaled_dot_product_attention"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let [q, k, v] = [shapes[0], shapes[1], shapes[2]];
        let fits = [q, k, v].iter().all(|s| s.len() == 4)
            && q[..2] == k[..2]
            && k[..3] == v[..3]
            && q[3] == k[3];
        if !fits {
            return Err(Error::ShapeMismatch {
                op: self.name(),
                shapes: vec![q.to_vec(), k.to_vec(), v.to_vec()],
                reason: "q, k, v must be (batch, heads, seq, head_dim) with one batch and head \
                         count, matching head_dim and key/value lengths"
                    .into(),
            });
        }
        Ok(vec![q[0], q[1], q[2], v[3]])
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        Attention::signatures(3, 2)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let dims = self.dims(&k.shapes[0], &k.shapes[2]);
        let [q, kk, v] = [k.inputs[0], k.inputs[1], k.inputs[2]];
        let out = k.backend.attention(q, kk, v, dims, self.save)?;
        if !self.save {
            return Ok(out);
        }
        split_lse(k.backend, out, dims.heads * dims.seq_q * dims.v_dim)
    }
}

/// Checks that a backward op's output gradient `g` and output `o` have the forward's output
/// shape `out`, and its log-sum-exp `lse` that shape without its last dim.
fn output_grad(op: &'static str, out: Vec<usize>, [g, o, lse]: [&[usize]; 3]) -> Result<()> {
    if g != out.as_slice() || o != out.as_slice() || lse != &out[..out.len() - 1] {
        return Err(Error::ShapeMismatch {
            op,
            shapes: vec![out, g.to_vec(), o.to_vec(), lse.to_vec()],
            reason: "the output gradient and the output must have the output's shape, and the \
                     log-sum-exp that shape without its last dim"
                .into(),
        });
    }
    Ok(())
}

/// The gradients of [`Attention`]: inputs (q, k, v, the output's gradient, the output and its
/// log-sum-exp from the saving forward), output `dq`; `dk` and `dv` (in the kernel's buffer
/// after `dq`, split off without copying) wait for [`take_grads`], as the log-sum-exp does. A
/// partial-sum output gradient (the rest broadcast) makes the gradients partial sums: the
/// backward is linear in it (`rowsum(dO O)` too).
pub(super) struct AttentionGrad(pub(super) Attention);

impl Op for AttentionGrad {
    fn name(&self) -> &'static str {
        "scaled_dot_product_attention_grad"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let out = self.0.infer(&shapes[..3])?;
        output_grad(self.name(), out, [shapes[3], shapes[4], shapes[5]])?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        Attention::signatures(6, 3)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let dims = self.0.dims(&k.shapes[0], &k.shapes[2]);
        let [q, kk, v] = [k.inputs[0], k.inputs[1], k.inputs[2]];
        let [g, out, lse] = [k.inputs[3], k.inputs[4], k.inputs[5]];
        let grads = k.backend.attention_grad(q, kk, v, g, out, lse, dims)?;
        let (dq, rest) = split_at(k.backend, grads, q.len())?;
        let (dk, dv) = split_at(k.backend, rest, kk.len())?;
        side::leave(DK_DV, vec![dk, dv]);
        Ok(dq)
    }
}

/// Self-attention of one packed (batch, seq, heads, 3, head_dim) projection holding each
/// head's q, k and v side by side (FlashAttention's qkv-packed form, heads outermost so that a
/// split over heads keeps a head's q, k and v together): a (batch, seq, heads, head_dim)
/// output, read and written in place (no transposes either way). Batch or heads split keep
/// their split.
#[derive(Clone, Copy, Debug)]
pub(super) struct PackedAttention(pub(super) Attention);

impl PackedAttention {
    /// The kernel's dims and heads per batch row for a local (batch, seq, heads, 3, dim) `qkv`.
    fn dims(&self, qkv: &[usize]) -> (AttentionDims, usize) {
        let dims = AttentionDims {
            heads: qkv[0] * qkv[2],
            seq_q: qkv[1],
            seq_k: qkv[1],
            head_dim: qkv[4],
            v_dim: qkv[4],
            scale: self.0.scale,
            causal: self.0.causal,
        };
        (dims, qkv[2])
    }

    /// Every operand split alike on batch (0) or heads (2), or all broadcast; the output
    /// gradient (operand 1 of the backward) a partial sum makes the gradient one.
    fn signatures(inputs: usize) -> Vec<Signature> {
        let mut v: Vec<Signature> = [0, 2]
            .iter()
            .map(|&d| Signature::new(vec![Sbp::Split(d); inputs], Sbp::Split(d)))
            .collect();
        v.push(Signature::new(vec![Sbp::Broadcast; inputs], Sbp::Broadcast));
        if inputs > 1 {
            let sum = Sbp::Partial(ReduceOp::Sum);
            let mut partial = vec![Sbp::Broadcast; inputs];
            partial[1] = sum;
            v.push(Signature::new(partial, sum));
        }
        v
    }
}

impl Op for PackedAttention {
    fn name(&self) -> &'static str {
        "qkv_packed_attention"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let s = shapes[0];
        if s.len() != 5 || s[3] != 3 {
            return Err(Error::ShapeMismatch {
                op: self.name(),
                shapes: vec![s.to_vec()],
                reason: "qkv must be (batch, seq, heads, 3, head_dim)".into(),
            });
        }
        Ok(vec![s[0], s[1], s[2], s[4]])
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        PackedAttention::signatures(1)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let (dims, heads) = self.dims(&k.shapes[0]);
        let out = k
            .backend
            .attention_packed(k.inputs[0], dims, heads, self.0.save)?;
        if !self.0.save {
            return Ok(out);
        }
        split_lse(k.backend, out, dims.heads * dims.seq_q * dims.v_dim)
    }
}

/// The gradient of [`PackedAttention`]: inputs (qkv, the output's gradient, the output and its
/// (batch, seq, heads) log-sum-exp from the saving forward), output `dqkv` in `qkv`'s layout.
pub(super) struct PackedAttentionGrad(pub(super) PackedAttention);

impl Op for PackedAttentionGrad {
    fn name(&self) -> &'static str {
        "qkv_packed_attention_grad"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let out = self.0.infer(&shapes[..1])?;
        output_grad(self.name(), out, [shapes[1], shapes[2], shapes[3]])?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        PackedAttention::signatures(4)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let (dims, heads) = self.0.dims(&k.shapes[0]);
        let [qkv, g, out, lse] = [k.inputs[0], k.inputs[1], k.inputs[2], k.inputs[3]];
        k.backend
            .attention_packed_grad(qkv, g, out, lse, dims, heads)
    }
}

impl Tensor {
    /// Attention by the fused kernels where they apply (q, k and v on one device, f32 or f64,
    /// no dim but batch and heads split, keys present); `None` where the caller composes it.
    ///
    /// # Errors
    /// Operator errors and communication failures of boxing.
    pub(crate) fn fused_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        scale: f64,
        causal: bool,
    ) -> Option<Result<Tensor>> {
        let ins = [self, k, v];
        let applies = ins.iter().all(|t| {
            t.device() == self.device()
                && matches!(t.dtype(), DType::F32 | DType::F64)
                && t.dtype() == self.dtype()
                && t.ndim() == 4
                && !t.sbp().is_some_and(|s| {
                    s.as_slice()
                        .iter()
                        .any(|x| x.split_dim().is_some_and(|d| d >= 2))
                })
        }) && k.shape()[2] > 0;
        if !applies {
            return None;
        }
        let save = is_grad_enabled() && ins.iter().any(|t| t.requires_grad());
        let op = Attention {
            scale,
            causal,
            save,
        };
        if !save {
            return Some(super::dispatch(&op, &ins));
        }
        let (out, lse) = match with_lse(&op, &ins) {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        Some(record(
            Ok(out),
            "scaled_dot_product_attention",
            &ins,
            move |c, g| {
                let [q, k, v] = [&c.inputs[0], &c.inputs[1], &c.inputs[2]];
                side::take(DK_DV);
                let dq = super::dispatch(&AttentionGrad(op), &[q, k, v, g, c.out, &lse])?;
                let [dk, dv] = take_grads(&dq, [k.shape(), v.shape()])?;
                Ok(vec![Some(dq), Some(dk), Some(dv)])
            },
        ))
    }

    /// Packed self-attention by the fused kernels where they apply (f32 or f64, on any
    /// device); `None` where the caller composes it.
    ///
    /// # Errors
    /// Operator errors and communication failures of boxing.
    pub(crate) fn fused_packed_attention(
        &self,
        scale: f64,
        causal: bool,
    ) -> Option<Result<Tensor>> {
        let applies = matches!(self.dtype(), DType::F32 | DType::F64);
        if !applies {
            return None;
        }
        let save = is_grad_enabled() && self.requires_grad();
        let op = PackedAttention(Attention {
            scale,
            causal,
            save,
        });
        let ins = [self];
        if !save {
            return Some(super::dispatch(&op, &ins));
        }
        let (out, lse) = match with_lse(&op, &ins) {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        Some(record(
            Ok(out),
            "qkv_packed_attention",
            &ins,
            move |c, g| {
                let grad = PackedAttentionGrad(op);
                let dqkv = super::dispatch(&grad, &[&c.inputs[0], g, c.out, &lse])?;
                Ok(vec![Some(dqkv)])
            },
        ))
    }
}

/// A saving forward `op` on `ins`: its output and the log-sum-exp it kept.
fn with_lse(op: &dyn Op, ins: &[&Tensor]) -> Result<(Tensor, Tensor)> {
    side::take(LSE);
    let out = super::dispatch(op, ins)?;
    let lse = take_lse(&out)?;
    Ok((out, lse))
}

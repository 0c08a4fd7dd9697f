//! Fused scaled dot-product attention (no mask but the causal one): one kernel forward and one
//! backward on the CPU, instead of a scale, two products, a mask add and a softmax that each
//! write the whole (batch, heads, seq_q, seq_k) score tensor. Batch or heads split keep their
//! split (no communication); with q, k and v broadcast and v a partial sum, the output is a
//! partial sum (attention is linear in v), and the backward is linear in the output gradient.
//!
//! Where a backward will follow, the forward op saves each query row's log-sum-exp after its
//! output row (one more column: (batch, heads, seq, v_dim + 1), or (batch, seq, heads,
//! head_dim + 1) packed); the caller's output is that buffer narrowed to `v_dim` (a copy of
//! the output, not recorded), and the backward op takes the saved buffer as one more input, so
//! it recomputes the probabilities in one pass (FlashAttention's backward). The log-sum-exp is
//! not linear in v, so a saving forward has no partial-sum signature (a partial v is reduced
//! first).

use super::shape_ops::Narrow;
use super::{Kernel, Op, Signature};
use crate::autograd::{is_grad_enabled, record};
use crate::backend::AttentionDims;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::{Device, Tensor};

/// Attention of (batch, heads, seq, dim) inputs q, k, v; with `save`, each output row is
/// followed by its log-sum-exp for [`AttentionGrad`].
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

    /// Every operand split alike on batch or heads, or all broadcast; operand `linear` (where
    /// given) a partial sum makes a partial sum when the rest are broadcast.
    fn signatures(inputs: usize, linear: Option<usize>) -> Vec<Signature> {
        let mut v: Vec<Signature> = (0..2)
            .map(|d| Signature::new(vec![Sbp::Split(d); inputs], Sbp::Split(d)))
            .collect();
        v.push(Signature::new(vec![Sbp::Broadcast; inputs], Sbp::Broadcast));
        if let Some(linear) = linear {
            let sum = Sbp::Partial(ReduceOp::Sum);
            let mut partial = vec![Sbp::Broadcast; inputs];
            partial[linear] = sum;
            v.push(Signature::new(partial, sum));
        }
        v
    }

    /// This op without saving: the shape of the output the user sees.
    fn plain(self) -> Attention {
        Attention {
            save: false,
            ..self
        }
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
        Ok(vec![q[0], q[1], q[2], v[3] + usize::from(self.save)])
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        Attention::signatures(3, (!self.save).then_some(2))
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let dims = self.dims(&k.shapes[0], &k.shapes[2]);
        k.backend
            .attention(k.inputs[0], k.inputs[1], k.inputs[2], dims, self.save)
    }
}

/// Checks that a backward op's output gradient `g` has the forward's output shape `out` and
/// its `saved` output the saving forward's shape `with_lse`.
fn output_grad(
    op: &'static str,
    [out, with_lse]: [Vec<usize>; 2],
    [g, saved]: [&[usize]; 2],
) -> Result<()> {
    if g != out.as_slice() || saved != with_lse.as_slice() {
        return Err(Error::ShapeMismatch {
            op,
            shapes: vec![out, g.to_vec(), saved.to_vec()],
            reason: "the output gradient must have the output's shape, and the saved output \
                     one more column"
                .into(),
        });
    }
    Ok(())
}

/// The signatures of a backward op with `inputs` operands, the output gradient at `g` and the
/// saved output last: a partial-sum output gradient (the rest broadcast) makes the gradients
/// partial sums (the backward is linear in it: `rowsum(dO O)` too, `O` broadcast).
fn grad_signatures(mut v: Vec<Signature>, inputs: usize, g: usize) -> Vec<Signature> {
    let sum = Sbp::Partial(ReduceOp::Sum);
    let mut partial = vec![Sbp::Broadcast; inputs];
    partial[g] = sum;
    v.push(Signature::new(partial, sum));
    v
}

/// The gradients of [`Attention`]: inputs (q, k, v, the output's gradient, the output saved
/// by the saving forward), output (batch, heads, packed) holding per head `dq`, then `dk`,
/// then `dv`, flattened.
pub(super) struct AttentionGrad(pub(super) Attention);

impl Op for AttentionGrad {
    fn name(&self) -> &'static str {
        "scaled_dot_product_attention_grad"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let fwd = &shapes[..3];
        let outs = [self.0.plain().infer(fwd)?, self.0.infer(fwd)?];
        output_grad(self.name(), outs, [shapes[3], shapes[4]])?;
        let [q, k, v] = [shapes[0], shapes[1], shapes[2]];
        Ok(vec![q[0], q[1], q[2] * q[3] + k[2] * k[3] + v[2] * v[3]])
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        grad_signatures(Attention::signatures(5, None), 5, 3)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let dims = self.0.dims(&k.shapes[0], &k.shapes[2]);
        k.backend.attention_grad(
            [k.inputs[0], k.inputs[1], k.inputs[2]],
            k.inputs[3],
            k.inputs[4],
            dims,
        )
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

    /// Every operand split alike on batch (0) or heads (2), or all broadcast.
    fn signatures(inputs: usize) -> Vec<Signature> {
        let mut v: Vec<Signature> = [0, 2]
            .iter()
            .map(|&d| Signature::new(vec![Sbp::Split(d); inputs], Sbp::Split(d)))
            .collect();
        v.push(Signature::new(vec![Sbp::Broadcast; inputs], Sbp::Broadcast));
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
        Ok(vec![s[0], s[1], s[2], s[4] + usize::from(self.0.save)])
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        PackedAttention::signatures(1)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let (dims, heads) = self.dims(&k.shapes[0]);
        k.backend
            .attention_packed(k.inputs[0], dims, heads, self.0.save)
    }
}

/// The gradient of [`PackedAttention`]: inputs (qkv, the output's gradient, the output saved
/// by the saving forward), output `dqkv` in `qkv`'s layout.
pub(super) struct PackedAttentionGrad(pub(super) PackedAttention);

impl Op for PackedAttentionGrad {
    fn name(&self) -> &'static str {
        "qkv_packed_attention_grad"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let fwd = &shapes[..1];
        let plain = PackedAttention(self.0.0.plain());
        let outs = [plain.infer(fwd)?, self.0.infer(fwd)?];
        output_grad(self.name(), outs, [shapes[1], shapes[2]])?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, _: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        grad_signatures(PackedAttention::signatures(3), 3, 1)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let (dims, heads) = self.0.dims(&k.shapes[0]);
        k.backend
            .attention_packed_grad(k.inputs[0], k.inputs[1], k.inputs[2], dims, heads)
    }
}

impl Tensor {
    /// Attention by the fused kernels where they apply (on the CPU, f32 or f64, no dim but
    /// batch and heads split, keys present); `None` where the caller composes it.
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
            t.device() == Device::Cpu
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
        let saved = match super::dispatch(&op, &ins) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        Some(record(
            without_lse(&saved),
            "scaled_dot_product_attention",
            &ins,
            move |c, g| {
                let [q, k, v] = [&c.inputs[0], &c.inputs[1], &c.inputs[2]];
                let packed = super::dispatch(&AttentionGrad(op), &[q, k, v, g, &saved])?;
                let mut at = 0;
                let mut part = |t: &Tensor| -> Result<Option<Tensor>> {
                    let s = t.shape();
                    let n = s[2] * s[3];
                    let grad = packed.narrow(2, at, n)?.reshape(s)?;
                    at += n;
                    Ok(Some(grad))
                };
                Ok(vec![part(q)?, part(k)?, part(v)?])
            },
        ))
    }

    /// Packed self-attention by the fused kernels where they apply (on the CPU, f32 or
    /// f64); `None` where the caller composes it.
    ///
    /// # Errors
    /// Operator errors and communication failures of boxing.
    pub(crate) fn fused_packed_attention(
        &self,
        scale: f64,
        causal: bool,
    ) -> Option<Result<Tensor>> {
        let applies =
            self.device() == Device::Cpu && matches!(self.dtype(), DType::F32 | DType::F64);
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
        let saved = match super::dispatch(&op, &ins) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        Some(record(
            without_lse(&saved),
            "qkv_packed_attention",
            &ins,
            move |c, g| {
                let grad = super::dispatch(&PackedAttentionGrad(op), &[&c.inputs[0], g, &saved])?;
                Ok(vec![Some(grad)])
            },
        ))
    }
}

/// The output in a saving forward's `saved` buffer: all but its last column (the
/// log-sum-exp), copied, not recorded.
fn without_lse(saved: &Tensor) -> Result<Tensor> {
    let last = saved.ndim() - 1;
    let len = saved.shape()[last] - 1;
    super::dispatch(
        &Narrow {
            dim: last,
            start: 0,
            len,
        },
        &[saved],
    )
}

//! `softmax` and `log_softmax` over one dimension.

use super::{Kernel, Op, Signature, check_dim, line_signatures};
use crate::autograd::record;
use crate::error::Result;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

pub(super) struct Softmax {
    pub(super) dim: usize,
    pub(super) log: bool,
}

impl Op for Softmax {
    fn name(&self) -> &'static str {
        if self.log { "log_softmax" } else { "softmax" }
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        check_dim(self.name(), self.dim, shapes[0].len())?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        line_signatures(shapes[0].len(), self.dim, 1)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend
            .softmax(k.inputs[0], &k.shapes[0], self.dim, self.log)
    }
}

/// The gradient of [`Softmax`]: inputs (its output, the output's gradient), one fused kernel.
struct SoftmaxGrad(Softmax);

impl Op for SoftmaxGrad {
    fn name(&self) -> &'static str {
        if self.0.log {
            "log_softmax_grad"
        } else {
            "softmax_grad"
        }
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        check_dim(self.name(), self.0.dim, shapes[0].len())?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        line_signatures(shapes[0].len(), self.0.dim, 2)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.softmax_grad(
            k.inputs[0],
            k.inputs[1],
            &k.shapes[0],
            self.0.dim,
            self.0.log,
        )
    }
}

/// The input gradient of a (log-)softmax over `dim` with output `y`: one fused kernel where
/// every rank computes on the CPU, else composed of elementwise ops and a reduction (native on
/// the GPUs).
fn softmax_backward(y: &Tensor, g: &Tensor, dim: usize, log: bool) -> Result<Tensor> {
    if y.computes_on_cpu() {
        return super::dispatch(&SoftmaxGrad(Softmax { dim, log }), &[y, g]);
    }
    if log {
        // dx = g - softmax * sum(g)
        let total = g.sum(dim, true)?;
        g.sub(&y.exp()?.mul(&total)?)
    } else {
        // dx = y * (g - sum(g * y))
        let dot = g.mul(y)?.sum(dim, true)?;
        y.mul(&g.sub(&dot)?)
    }
}

impl Tensor {
    /// A global tensor with its partial axes reduced to broadcast (an all-reduce of a small
    /// statistic), so that combining it with the split operand needs no other move.
    pub(crate) fn resolved(&self) -> Result<Tensor> {
        match (self.placement(), self.sbp()) {
            (Some(p), Some(s)) if s.as_slice().iter().any(|x| matches!(x, Sbp::Partial(_))) => {
                self.to_global(p, crate::autograd::partial_to_broadcast(s))
            }
            _ => Ok(self.clone()),
        }
    }

    /// Whether a global tensor is split along `dim` on some placement axis.
    fn splits_dim(&self, dim: usize) -> bool {
        self.sbp()
            .is_some_and(|s| s.as_slice().contains(&Sbp::Split(dim)))
    }

    /// Softmax over `dim`. Over a split dim it runs as a max and a sum of partials (two small
    /// all-reduces), so a vocabulary-parallel row is never gathered.
    ///
    /// # Errors
    /// `DimOutOfRange`; communication failures of boxing.
    pub fn softmax(&self, dim: usize) -> Result<Tensor> {
        if self.splits_dim(dim) && self.shape()[dim] > 0 {
            // Over a split dim: a max and a sum of partials, never gathering the dim.
            let m = self.detach().max(dim, true)?.resolved()?;
            let e = self.sub(&m)?.exp()?;
            return e.div(&e.sum(dim, true)?.resolved()?);
        }
        record(
            super::dispatch(&Softmax { dim, log: false }, &[self]),
            "softmax",
            &[self],
            move |c, g| Ok(vec![Some(softmax_backward(c.out, g, dim, false)?)]),
        )
    }

    /// Log-softmax over `dim` (computed stably, not as `log(softmax)`: `(x - max) - ln sum`, as
    /// PyTorch, where `x - (max + ln sum)` would lose the low bits of large inputs); over a split
    /// dim from a max and a sum of partials, never gathering the dim.
    ///
    /// # Errors
    /// `DimOutOfRange`; communication failures of boxing.
    pub fn log_softmax(&self, dim: usize) -> Result<Tensor> {
        if self.splits_dim(dim) && self.shape()[dim] > 0 {
            let m = self.detach().max(dim, true)?.resolved()?;
            let shifted = self.sub(&m)?;
            let ln_sum = shifted.exp()?.sum(dim, true)?.resolved()?.log()?;
            return shifted.sub(&ln_sum);
        }
        record(
            super::dispatch(&Softmax { dim, log: true }, &[self]),
            "log_softmax",
            &[self],
            move |c, g| Ok(vec![Some(softmax_backward(c.out, g, dim, true)?)]),
        )
    }
}

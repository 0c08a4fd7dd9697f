//! Fused LayerNorm and RMSNorm normalisation over trailing dims: one kernel forward and one
//! backward instead of the seven elementwise and reduction ops of the composed form. Used on
//! the CPU when the normalised dims are not split (a split one runs composed: partial
//! statistics and small all-reduces, never gathering the row).

use super::{Kernel, Op, Signature};
use crate::autograd::record;
use crate::error::{Error, Result};
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::{Device, Tensor};

/// Normalises the trailing `dims` dims: LayerNorm's `(x - mean) / sqrt(var + eps)` when
/// `center`, RMSNorm's `x / sqrt(mean(x^2) + eps)` otherwise.
#[derive(Clone, Copy)]
struct Norm {
    dims: usize,
    eps: f64,
    center: bool,
}

impl Norm {
    /// Split any dim but the normalised ones, or broadcast, for `inputs` operands alike.
    fn signatures(&self, shapes: &[&[usize]], inputs: usize) -> Vec<Signature> {
        let batch = shapes[0].len() - self.dims;
        let mut v: Vec<Signature> = (0..batch)
            .map(|d| Signature::new(vec![Sbp::Split(d); inputs], Sbp::Split(d)))
            .collect();
        v.push(Signature::new(vec![Sbp::Broadcast; inputs], Sbp::Broadcast));
        v
    }

    /// Elements of one normalised row of a local box of `shape`.
    fn cols(&self, shape: &[usize]) -> usize {
        shape[shape.len() - self.dims..].iter().product()
    }

    fn check(&self, shape: &[usize]) -> Result<()> {
        if self.dims == 0 || self.dims > shape.len() {
            return Err(Error::InvalidArgument {
                op: self.name(),
                reason: format!(
                    "normalising {} trailing dims of a tensor with {} dims",
                    self.dims,
                    shape.len()
                ),
            });
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        if self.center {
            "layer_norm"
        } else {
            "rms_norm"
        }
    }
}

impl Op for Norm {
    fn name(&self) -> &'static str {
        Norm::name(self)
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        self.check(shapes[0])?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        Norm::signatures(self, shapes, 1)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend
            .norm(k.inputs[0], self.cols(&k.shapes[0]), self.eps, self.center)
    }
}

/// The gradient of [`Norm`]: inputs (x, the output's gradient).
struct NormGrad(Norm);

impl Op for NormGrad {
    fn name(&self) -> &'static str {
        if self.0.center {
            "layer_norm_grad"
        } else {
            "rms_norm_grad"
        }
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        self.0.check(shapes[0])?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        self.0.signatures(shapes, 2)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let n = self.0;
        k.backend.norm_grad(
            k.inputs[0],
            k.inputs[1],
            n.cols(&k.shapes[0]),
            n.eps,
            n.center,
        )
    }
}

impl Tensor {
    /// Whether the fused normalisation of the trailing `dims` dims applies: on the CPU, with
    /// none of those dims split.
    fn fused_norm(&self, dims: usize) -> bool {
        let on_cpu = self.device() == Device::Cpu;
        let batch = self.ndim().saturating_sub(dims);
        let split_norm_dim = self.sbp().is_some_and(|s| {
            s.as_slice()
                .iter()
                .any(|x| x.split_dim().is_some_and(|d| d >= batch))
        });
        on_cpu && (1..=self.ndim()).contains(&dims) && !split_norm_dim
    }

    /// The trailing `dims` dims normalised, LayerNorm's way when `center` (without its affine
    /// weight and bias), else RMSNorm's; `None` where the fused kernel does not apply (the
    /// caller composes it from elementwise ops and reductions).
    ///
    /// # Errors
    /// Communication failures of boxing.
    pub(crate) fn fused_normalize(
        &self,
        dims: usize,
        eps: f64,
        center: bool,
    ) -> Option<Result<Tensor>> {
        if !self.fused_norm(dims) {
            return None;
        }
        let op = Norm { dims, eps, center };
        Some(record(
            super::dispatch(&op, &[self]),
            op.name(),
            &[self],
            move |c, g| {
                let x = &c.inputs[0];
                Ok(vec![Some(super::dispatch(&NormGrad(op), &[x, g])?)])
            },
        ))
    }
}

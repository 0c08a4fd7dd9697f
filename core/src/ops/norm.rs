//! Fused LayerNorm and RMSNorm over trailing dims, their affine weight and bias included: one
//! kernel forward, and one backward for the input and the parameters together, instead of the
//! ten elementwise and reduction ops of the composed form. Used on the CPU when the normalised
//! dims are not split (a split one runs composed: partial statistics and small all-reduces,
//! never gathering the row).

use std::sync::Mutex;

use super::{Kernel, Op, Signature};
use crate::autograd::record;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::{Device, Tensor};

/// Normalises the trailing `dims` dims: LayerNorm's `(x - mean) / sqrt(var + eps)` when
/// `center`, RMSNorm's `x / sqrt(mean(x^2) + eps)` otherwise; then `* weight` and `+ bias`
/// where `affine` says they are inputs (after `x`, of the normalised shape).
#[derive(Clone, Copy)]
struct Norm {
    dims: usize,
    eps: f64,
    center: bool,
    /// Whether a weight, and a bias, follow `x` among the inputs.
    affine: (bool, bool),
}

impl Norm {
    /// `rows` row-shaped operands split alike on any dim but the normalised ones, or all
    /// broadcast; then `params` broadcast operands; giving `out(d)` for split `d`.
    fn signatures(
        &self,
        shapes: &[&[usize]],
        (rows, params): (usize, usize),
        out: impl Fn(usize) -> Sbp,
    ) -> Vec<Signature> {
        let batch = shapes[0].len() - self.dims;
        let inputs = |s: Sbp| {
            let mut v = vec![s; rows];
            v.extend(vec![Sbp::Broadcast; params]);
            v
        };
        let mut v: Vec<Signature> = (0..batch)
            .map(|d| Signature::new(inputs(Sbp::Split(d)), out(d)))
            .collect();
        v.push(Signature::new(inputs(Sbp::Broadcast), Sbp::Broadcast));
        v
    }

    /// The weight and the bias among [`Norm`]'s inputs (after `x`).
    fn params<'a>(&self, inputs: &[&'a Buffer]) -> [Option<&'a Buffer>; 2] {
        let at = |i: usize| inputs.get(i).copied();
        let w = if self.affine.0 { at(1) } else { None };
        let b = if self.affine.1 {
            at(1 + usize::from(self.affine.0))
        } else {
            None
        };
        [w, b]
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
        let norm_shape = &shapes[0][shapes[0].len() - self.dims..];
        if let Some(p) = shapes[1..].iter().find(|p| **p != norm_shape) {
            return Err(Error::ShapeMismatch {
                op: self.name(),
                shapes: vec![shapes[0].to_vec(), p.to_vec()],
                reason: "the weight and bias must have the normalised shape".into(),
            });
        }
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let params = usize::from(self.affine.0) + usize::from(self.affine.1);
        Norm::signatures(self, shapes, (1, params), Sbp::Split)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.norm(
            k.inputs[0],
            self.params(&k.inputs),
            self.cols(&k.shapes[0]),
            self.eps,
            self.center,
        )
    }
}

/// The input gradient of [`Norm`]: inputs (x, the output's gradient, the weight if any). With
/// a [`Stash`] it computes the parameters' gradients in the same pass and leaves them there
/// for the [`NormParamGrad`] of the same backward.
struct NormGrad<'a>(Norm, Option<&'a Stash>);

/// The parameters' gradients a [`NormGrad`] computed beside the input's, for the
/// [`NormParamGrad`] of the same backward. Both use it only when their local `x` and `g` are
/// the tensors' own components (no boxing in between, which could hand either op other rows):
/// the addresses of those, alive for the whole backward, are the stash's key.
struct Stash {
    key: (usize, usize),
    params: Mutex<Option<Buffer>>,
}

impl Stash {
    /// A stash for the backward of `x` with output gradient `g`, or `None` where a component
    /// is missing (a rank outside the placement).
    fn new(x: &Tensor, g: &Tensor) -> Result<Option<Stash>> {
        let (Some(xb), Some(gb)) = (x.read(), g.read()) else {
            return Ok(None);
        };
        Ok(Some(Stash {
            key: (Stash::address(&xb)?, Stash::address(&gb)?),
            params: Mutex::new(None),
        }))
    }

    /// Where a local input's host data lives.
    fn address(b: &Buffer) -> Result<usize> {
        Ok(b.host()?.as_bytes().as_ptr() as usize)
    }

    /// Whether `x` and `g` are the components the stash was made for.
    fn matches(&self, x: &Buffer, g: &Buffer) -> Result<bool> {
        Ok((Stash::address(x)?, Stash::address(g)?) == self.key)
    }

    fn put(&self, params: Buffer) {
        *self.params.lock().unwrap_or_else(|e| e.into_inner()) = Some(params);
    }

    fn take(&self) -> Option<Buffer> {
        self.params.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Op for NormGrad<'_> {
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
        self.0
            .signatures(shapes, (2, usize::from(self.0.affine.0)), Sbp::Split)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let n = self.0;
        // inputs (x, g, the weight if any)
        let w = if n.affine.0 {
            k.inputs.get(2).copied()
        } else {
            None
        };
        let (x, g, cols) = (k.inputs[0], k.inputs[1], n.cols(&k.shapes[0]));
        let mut dx = k
            .backend
            .norm_grads(x, g, w, cols, n.eps, n.center)?
            .into_host()?;
        let params = dx.split_off(x.len());
        if let Some(stash) = self.1.filter(|s| s.matches(x, g).unwrap_or(false)) {
            stash.put(Buffer::from(params));
        }
        Ok(Buffer::from(dx))
    }
}

/// The weight's and the bias's gradients of [`Norm`], stacked as (2, normalised shape): inputs
/// (x, the output's gradient). Rows split on a batch dim give partial sums. Those a [`Stash`]
/// holds for the same inputs are taken, not computed again.
struct NormParamGrad<'a>(Norm, Option<&'a Stash>);

impl Op for NormParamGrad<'_> {
    fn name(&self) -> &'static str {
        if self.0.center {
            "layer_norm_param_grad"
        } else {
            "rms_norm_param_grad"
        }
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        self.0.check(shapes[0])?;
        let mut out = vec![2];
        out.extend_from_slice(&shapes[0][shapes[0].len() - self.0.dims..]);
        Ok(out)
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        self.0
            .signatures(shapes, (2, 0), |_| Sbp::Partial(ReduceOp::Sum))
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let n = self.0;
        let (x, g) = (k.inputs[0], k.inputs[1]);
        if let Some(stash) = self.1.filter(|s| s.matches(x, g).unwrap_or(false))
            && let Some(kept) = stash.take()
        {
            return Ok(kept);
        }
        k.backend
            .norm_param_grad(x, g, n.cols(&k.shapes[0]), n.eps, n.center)
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

    /// The trailing `dims` dims normalised, LayerNorm's way when `center`, else RMSNorm's, then
    /// `* weight + bias` where given; `None` where the fused kernels do not apply (the caller
    /// composes it from elementwise ops and reductions).
    ///
    /// # Errors
    /// Communication failures of boxing.
    pub(crate) fn fused_normalize(
        &self,
        dims: usize,
        eps: f64,
        center: bool,
        (weight, bias): (Option<&Tensor>, Option<&Tensor>),
    ) -> Option<Result<Tensor>> {
        let params: Vec<&Tensor> = weight.into_iter().chain(bias).collect();
        let alike = params
            .iter()
            .all(|p| p.dtype() == self.dtype() && p.device() == self.device());
        if !self.fused_norm(dims) || !alike {
            return None;
        }
        let op = Norm {
            dims,
            eps,
            center,
            affine: (weight.is_some(), bias.is_some()),
        };
        let mut inputs = vec![self];
        inputs.extend(&params);
        Some(record(
            super::dispatch(&op, &inputs),
            op.name(),
            &inputs,
            move |c, g| {
                let x = &c.inputs[0];
                let mut grad_in = vec![x, g];
                if op.affine.0 {
                    grad_in.push(&c.inputs[1]);
                }
                let affine = op.affine != (false, false);
                let stash = if affine { Stash::new(x, g)? } else { None };
                let stash = stash.as_ref();
                let mut grads = vec![Some(super::dispatch(&NormGrad(op, stash), &grad_in)?)];
                if affine {
                    let both = super::dispatch(&NormParamGrad(op, stash), &[x, g])?;
                    let norm_shape = &x.shape()[x.ndim() - dims..];
                    let row = |i: usize| both.narrow(0, i, 1)?.reshape(norm_shape);
                    if op.affine.0 {
                        grads.push(Some(row(0)?));
                    }
                    if op.affine.1 {
                        grads.push(Some(row(1)?));
                    }
                }
                Ok(grads)
            },
        ))
    }
}

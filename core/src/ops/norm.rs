//! Fused LayerNorm and RMSNorm over trailing dims, their affine weight and bias included: one
//! kernel forward, and one backward for the input and the parameters together, instead of the
//! ten elementwise and reduction ops of the composed form (on a GPU: the input's gradient and
//! the parameters' are separate kernels). Used where the normalised dims are not split (a split
//! one runs composed: partial statistics and small all-reduces, never gathering the row).

use super::{Kernel, Op, Signature, side};
use crate::autograd::record;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

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
        let params: Vec<&Buffer> = self.params(&k.inputs).into_iter().flatten().collect();
        k.backend.norm(
            k.inputs[0],
            &params,
            self.cols(&k.shapes[0]),
            self.eps,
            self.center,
            [self.affine.0, self.affine.1],
        )
    }
}

/// The input gradient of [`Norm`]: inputs (x, the output's gradient, the weight if any). Its
/// kernel computes the parameters' gradients in the same pass; where its local `x` and `g` are
/// the components named by `own` (the tensors' own, no boxing in between, which could hand
/// either op other rows), it leaves them (see [`side`]) for the [`NormParamGrad`] of the same
/// backward.
struct NormGrad {
    norm: Norm,
    own: Option<[usize; 2]>,
}

/// What a [`NormGrad`] leaves for the [`NormParamGrad`] given the components `own`.
fn params_tag(own: [usize; 2]) -> side::Tag {
    ("norm parameter gradients", own)
}

/// Whether the local inputs `x` and `g` are the components `own`.
fn are(own: Option<[usize; 2]>, x: &Buffer, g: &Buffer) -> Option<[usize; 2]> {
    let seen = [side::address(x).ok()?, side::address(g).ok()?];
    own.filter(|o| *o == seen)
}

impl Op for NormGrad {
    fn name(&self) -> &'static str {
        if self.norm.center {
            "layer_norm_grad"
        } else {
            "rms_norm_grad"
        }
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        self.norm.check(shapes[0])?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        self.norm
            .signatures(shapes, (2, usize::from(self.norm.affine.0)), Sbp::Split)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let n = self.norm;
        // inputs (x, g, the weight if any)
        let w = if n.affine.0 {
            k.inputs.get(2).copied()
        } else {
            None
        };
        let (x, g, cols) = (k.inputs[0], k.inputs[1], n.cols(&k.shapes[0]));
        if [x, g].iter().any(|b| b.device_copy().is_some()) {
            // on a device: the input's gradient alone (the parameters' are their own kernels)
            let w: Vec<&Buffer> = w.into_iter().collect();
            return k.backend.norm_input_grad(x, g, &w, cols, n.eps, n.center);
        }
        let mut dx = k
            .backend
            .norm_grads(x, g, w, cols, n.eps, n.center)?
            .into_host()?;
        let params = dx.split_off(x.len());
        if let Some(own) = are(self.own, x, g) {
            side::leave(params_tag(own), vec![Buffer::from(params)]);
        }
        Ok(Buffer::from(dx))
    }
}

/// The weight's and the bias's gradients of [`Norm`], stacked as (2, normalised shape): inputs
/// (x, the output's gradient). Rows split on a batch dim give partial sums. Those a
/// [`NormGrad`] left for the same components `own` are taken, not computed again.
struct NormParamGrad {
    norm: Norm,
    own: Option<[usize; 2]>,
}

impl Op for NormParamGrad {
    fn name(&self) -> &'static str {
        if self.norm.center {
            "layer_norm_param_grad"
        } else {
            "rms_norm_param_grad"
        }
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        self.norm.check(shapes[0])?;
        let mut out = vec![2];
        out.extend_from_slice(&shapes[0][shapes[0].len() - self.norm.dims..]);
        Ok(out)
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        self.norm
            .signatures(shapes, (2, 0), |_| Sbp::Partial(ReduceOp::Sum))
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let n = self.norm;
        let (x, g) = (k.inputs[0], k.inputs[1]);
        if let Some(own) = are(self.own, x, g)
            && let Some(left) = side::take(params_tag(own)).and_then(|v| v.into_iter().next())
        {
            return Ok(left);
        }
        k.backend
            .norm_param_grad(x, g, n.cols(&k.shapes[0]), n.eps, n.center)
    }
}

impl Tensor {
    /// Whether the fused normalisation of the trailing `dims` dims applies: with none of those
    /// dims split, on the CPU (of every rank) or in f32 or f64 on a device (a 16-bit float there
    /// runs composed, computing in f32).
    fn fused_norm(&self, dims: usize) -> bool {
        let fits = self.computes_on_cpu() || matches!(self.dtype(), DType::F32 | DType::F64);
        let batch = self.ndim().saturating_sub(dims);
        let split_norm_dim = self.sbp().is_some_and(|s| {
            s.as_slice()
                .iter()
                .any(|x| x.split_dim().is_some_and(|d| d >= batch))
        });
        fits && (1..=self.ndim()).contains(&dims) && !split_norm_dim
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
                // the components the two ops share, alive for the whole backward
                let own = match (affine, x.read(), g.read()) {
                    (true, Some(xb), Some(gb)) => Some([side::address(&xb)?, side::address(&gb)?]),
                    _ => None,
                };
                let grad = NormGrad { norm: op, own };
                let mut grads = vec![Some(super::dispatch(&grad, &grad_in)?)];
                if affine {
                    let both = super::dispatch(&NormParamGrad { norm: op, own }, &[x, g])?;
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

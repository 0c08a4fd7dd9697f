//! `sum mean max` over dimensions, with `keepdim`.

use super::{Kernel, Op, Signature, check_dim};
use crate::autograd::{Ctx, record};
use crate::backend::ReduceKind;
use crate::backend::UnaryOp;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Sum,
    Mean,
    Max,
}

pub(super) struct Reduce {
    pub(super) kind: Kind,
    pub(super) dims: Vec<usize>,
    pub(super) keepdim: bool,
}

impl Reduce {
    fn partial(&self) -> ReduceOp {
        if self.kind == Kind::Max {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        }
    }
}

impl Op for Reduce {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Sum => "sum",
            Kind::Mean => "mean",
            Kind::Max => "max",
        }
    }

    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let s = shapes[0];
        for &d in &self.dims {
            check_dim(self.name(), d, s.len())?;
        }
        Ok((0..s.len())
            .filter_map(|d| match (self.dims.contains(&d), self.keepdim) {
                (false, _) => Some(s[d]),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect())
    }

    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let nd = shapes[0].len();
        let p = Sbp::Partial(self.partial());
        let mut v: Vec<Signature> = (0..nd)
            .map(|d| {
                if self.dims.contains(&d) {
                    Signature::new([Sbp::Split(d)], p)
                } else {
                    let shift = if self.keepdim {
                        0
                    } else {
                        self.dims.iter().filter(|&&x| x < d).count()
                    };
                    Signature::new([Sbp::Split(d)], Sbp::Split(d - shift))
                }
            })
            .collect();
        v.push(Signature::new([Sbp::Broadcast], Sbp::Broadcast));
        v.push(Signature::new([p], p));
        v
    }

    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let kind = if self.kind == Kind::Max {
            ReduceKind::Max
        } else {
            ReduceKind::Sum
        };
        let out = k
            .backend
            .reduce(kind, k.inputs[0], &k.shapes[0], &self.dims)?;
        if self.kind == Kind::Mean {
            // Divide by the logical count, so that partial sums of a split dim add up to the mean.
            let count: usize = self.dims.iter().map(|&d| k.global_shapes[0][d]).product();
            return k.backend.scale(&out, 1.0 / count as f64);
        }
        Ok(out)
    }
}

/// Dimensions to reduce: one `usize`, or a list (`&[usize]`, `[usize; N]`, `Vec<usize>`); an empty
/// list means every dimension.
pub trait Dims {
    /// The dimensions.
    fn dims(self) -> Vec<usize>;
}
impl Dims for usize {
    fn dims(self) -> Vec<usize> {
        vec![self]
    }
}
impl Dims for &[usize] {
    fn dims(self) -> Vec<usize> {
        self.to_vec()
    }
}
impl<const N: usize> Dims for [usize; N] {
    fn dims(self) -> Vec<usize> {
        self.to_vec()
    }
}
impl<const N: usize> Dims for &[usize; N] {
    fn dims(self) -> Vec<usize> {
        self.to_vec()
    }
}
impl Dims for Vec<usize> {
    fn dims(self) -> Vec<usize> {
        self
    }
}

fn reduce(t: &Tensor, kind: Kind, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
    let dims = dims.dims();
    let mut dims: Vec<usize> = if dims.is_empty() {
        (0..t.ndim()).collect()
    } else {
        dims
    };
    dims.sort_unstable();
    if dims.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::InvalidArgument {
            op: "reduce",
            reason: format!("dimension listed twice in {dims:?}"),
        });
    }
    let op = Reduce {
        kind,
        dims,
        keepdim,
    };
    let out = super::dispatch(&op, &[t]);
    record(out, op.name(), &[t], move |c, g| {
        Ok(vec![Some(reduce_backward(&op, c, g)?)])
    })
}

/// Sum: the gradient spreads over the reduced dims; mean: divided by the count; max: it goes to
/// the maxima, shared equally between ties (as PyTorch's `amax`).
fn reduce_backward(op: &Reduce, c: &Ctx<'_>, g: &Tensor) -> Result<Tensor> {
    let x = &c.inputs[0];
    let keep: Vec<usize> = (0..x.ndim())
        .map(|d| {
            if op.dims.contains(&d) {
                1
            } else {
                x.shape()[d]
            }
        })
        .collect();
    let g = g.reshape(&keep)?;
    match op.kind {
        Kind::Sum => g.expand(x.shape()),
        Kind::Mean => {
            let count: usize = op.dims.iter().map(|&d| x.shape()[d]).product();
            g.mul_scalar(1.0 / count.max(1) as f64)?.expand(x.shape())
        }
        Kind::Max => {
            let m = c.out.reshape(&keep)?.expand(x.shape())?;
            // x <= max everywhere, so step(max - x) is 0 exactly at the maxima.
            let mask = m.sub(x)?.unary(UnaryOp::Step)?.neg()?.add_scalar(1.0)?;
            let ties = mask.sum(op.dims.clone(), true)?;
            g.div(&ties)?.expand(x.shape())?.mul(&mask)
        }
    }
}

impl Tensor {
    /// Sum over `dims` (one dim or a list; all dims when the list is empty), keeping them as size
    /// 1 when `keepdim`.
    ///
    /// # Errors
    /// `DimOutOfRange`, `InvalidArgument` for a repeated dim; communication failures of boxing.
    pub fn sum(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        reduce(self, Kind::Sum, dims, keepdim)
    }

    /// Mean over `dims` (all dims when empty).
    ///
    /// # Errors
    /// As [`Tensor::sum`].
    pub fn mean(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        reduce(self, Kind::Mean, dims, keepdim)
    }

    /// Maximum over `dims` (all dims when empty).
    ///
    /// # Errors
    /// As [`Tensor::sum`].
    pub fn max(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        reduce(self, Kind::Max, dims, keepdim)
    }
}

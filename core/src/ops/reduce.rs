//! `sum mean max` over dimensions, with `keepdim`.

use super::{Kernel, Op, Signature, check_dim};
use crate::autograd::{Ctx, record};
use crate::backend::ReduceKind;
use crate::dtype::DType;
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
    Min,
}

pub(super) struct Reduce {
    pub(super) kind: Kind,
    pub(super) dims: Vec<usize>,
    pub(super) keepdim: bool,
}

impl Reduce {
    fn partial(&self) -> ReduceOp {
        match self.kind {
            Kind::Max => ReduceOp::Max,
            Kind::Min => ReduceOp::Min,
            Kind::Sum | Kind::Mean => ReduceOp::Sum,
        }
    }
}

impl Op for Reduce {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Sum => "sum",
            Kind::Mean => "mean",
            Kind::Max => "max",
            Kind::Min => "min",
        }
    }

    fn any_dtype(&self) -> bool {
        true
    }

    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let s = shapes[0];
        for &d in &self.dims {
            check_dim(self.name(), d, s.len())?;
            if matches!(self.kind, Kind::Max | Kind::Min) {
                check_nonempty(self.name(), s, d)?;
            }
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
        let kind = match self.kind {
            Kind::Max => ReduceKind::Max,
            Kind::Min => ReduceKind::Min,
            Kind::Sum | Kind::Mean => ReduceKind::Sum,
        };
        if self.kind == Kind::Mean {
            // Divide by the logical count, so that partial sums of a split dim add up to the
            // mean; a 16-bit mean sums and divides in f32 and rounds once (its sum may pass
            // f16's 65504 where the mean does not).
            let count: usize = self.dims.iter().map(|&d| k.global_shapes[0][d]).product();
            let dtype = k.inputs[0].dtype();
            if dtype.is_half() {
                let wide = k.backend.cast(k.inputs[0], DType::F32)?;
                let sum = k.backend.reduce(kind, &wide, &k.shapes[0], &self.dims)?;
                let mean = k.backend.scale(&sum, 1.0 / count as f64)?;
                return k.backend.cast(&mean, dtype);
            }
            let sum = k
                .backend
                .reduce(kind, k.inputs[0], &k.shapes[0], &self.dims)?;
            return k.backend.scale(&sum, 1.0 / count as f64);
        }
        k.backend
            .reduce(kind, k.inputs[0], &k.shapes[0], &self.dims)
    }
}

/// Refuses a max, min, argmax or argmin over a dim of size 0 (it has no value to give), as
/// PyTorch does; decided from the logical shape, so every rank of a placement agrees.
fn check_nonempty(op: &'static str, shape: &[usize], dim: usize) -> Result<()> {
    if shape[dim] == 0 {
        return Err(Error::ShapeMismatch {
            op,
            shapes: vec![shape.to_vec()],
            reason: format!("expected reduction dim {dim} to have non-zero size"),
        });
    }
    Ok(())
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
            op: match kind {
                Kind::Sum => "sum",
                Kind::Mean => "mean",
                Kind::Max => "max",
                Kind::Min => "min",
            },
            reason: format!("dimension listed twice in {dims:?}"),
        });
    }
    let op = Reduce {
        kind,
        dims,
        keepdim,
    };
    // As PyTorch: sums of Bool and integers are I64, a mean of them is F32, a max or min of
    // Bool is computed on integers and stays Bool.
    let dtype = t.dtype();
    let t = &match kind {
        _ if dtype.is_float() => t.clone(),
        Kind::Sum | Kind::Max | Kind::Min => t.to_dtype(DType::I64)?,
        Kind::Mean => t.to_dtype(DType::F32)?,
    };
    let out = super::dispatch(&op, &[t]);
    let out = record(out, op.name(), &[t], move |c, g| {
        Ok(vec![Some(reduce_backward(&op, c, g)?)])
    })?;
    match kind {
        Kind::Max | Kind::Min if dtype == DType::Bool || dtype == DType::I32 => out.to_dtype(dtype),
        _ => Ok(out),
    }
}

/// Sum: the gradient spreads over the reduced dims (as a gradient that broadcasts to the
/// input); mean: divided by the count; max: it goes to
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
    // sum and mean: the gradient repeated over the reduced dims, left unexpanded (the engine
    // expands it only for a consumer that needs the full shape, see `record`)
    match op.kind {
        Kind::Sum => Ok(g),
        Kind::Mean => {
            let count: usize = op.dims.iter().map(|&d| x.shape()[d]).product();
            g.mul_scalar(1.0 / count.max(1) as f64)
        }
        Kind::Max | Kind::Min => {
            let m = c.out.reshape(&keep)?.expand(x.shape())?;
            let mask = x.eq(&m)?.to_dtype(g.dtype())?;
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

    /// Variance over `dims` (all dims when empty) with Bessel's `correction`, as PyTorch's
    /// `var`: the squared deviations from the mean summed and divided by `N - correction`
    /// (`correction` 1: the unbiased estimate, PyTorch's default; 0: the population variance;
    /// `N - correction <= 0` divides by 0, giving inf or NaN, as PyTorch). Composed of
    /// [`Tensor::mean`] and [`Tensor::sum`], so a split dim stays split (partial sums) and it
    /// is differentiable.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4], Device::Cpu)?;
    /// let unbiased = x.var(0, 1.0, false)?.to_vec::<f32>()?[0];
    /// assert!((unbiased - 5.0 / 3.0).abs() < 1e-6);
    /// assert_eq!(x.std(0, 0.0, false)?.to_vec::<f32>()?, [1.25f32.sqrt()]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::mean`] (integer and Bool inputs included: `var` needs floats, as PyTorch).
    pub fn var(&self, dims: impl Dims, correction: f64, keepdim: bool) -> Result<Tensor> {
        let dims = dims.dims();
        if self.dtype().is_half() {
            // squares of 16-bit deviations pass 65504 long before the variance does: in f32,
            // rounded once (as PyTorch)
            return self
                .to_dtype(DType::F32)?
                .var(dims, correction, keepdim)?
                .to_dtype(self.dtype());
        }
        let d = self.sub(&self.mean(dims.clone(), true)?)?;
        let ss = d.mul(&d)?.sum(dims.clone(), keepdim)?;
        let all: Vec<usize> = if dims.is_empty() {
            (0..self.ndim()).collect()
        } else {
            dims
        };
        let n: usize = all.iter().map(|&d| self.shape()[d]).product();
        ss.mul_scalar(1.0 / (n as f64 - correction).max(0.0))
    }

    /// Standard deviation: the square root of [`Tensor::var`]. Its gradient is PyTorch's:
    /// zero where the deviation is 0 (a constant), where the square root's would be NaN.
    ///
    /// # Errors
    /// As [`Tensor::var`].
    pub fn std(&self, dims: impl Dims, correction: f64, keepdim: bool) -> Result<Tensor> {
        if self.dtype().is_half() {
            return self
                .to_dtype(DType::F32)?
                .std(dims, correction, keepdim)?
                .to_dtype(self.dtype());
        }
        let var = self.var(dims, correction, keepdim)?;
        let root = crate::autograd::no_grad(|| var.sqrt())?;
        record(Ok(root), "std", &[&var], |c, g| {
            // d sqrt(v) = 1 / (2 sqrt(v)), taken as 0 where sqrt(v) is 0
            let two = c.out.mul_scalar(2.0)?;
            let inv = two.scalar_like(1.0)?.div(&two)?;
            let zero = c.out.eq(&c.out.scalar_like(0.0)?)?;
            let d = zero.where_cond(&two.scalar_like(0.0)?, &inv)?;
            Ok(vec![Some(g.mul(&d)?)])
        })
    }

    /// Maximum over `dims` (all dims when empty).
    ///
    /// # Errors
    /// As [`Tensor::sum`]; `ShapeMismatch` for a reduced dim of size 0 (as PyTorch).
    pub fn max(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        reduce(self, Kind::Max, dims, keepdim)
    }

    /// Minimum over `dims` (all dims when empty); the gradient is shared between ties.
    ///
    /// # Errors
    /// As [`Tensor::max`].
    pub fn min(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        reduce(self, Kind::Min, dims, keepdim)
    }

    /// `log(sum(exp(x)))` over `dims` (all dims when empty), computed stably: the maximum is
    /// taken out first. Over a split dim it runs as a max and a sum of partials (two small
    /// all-reduces), never gathering the dim. Over an empty dim it is `-inf`, as PyTorch; integer
    /// and Bool inputs give F32 (the default float), as PyTorch.
    ///
    /// # Errors
    /// As [`Tensor::sum`] (naming `logsumexp`).
    pub fn logsumexp(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        self.logsumexp_inner(dims.dims(), keepdim)
            .map_err(super::renamed("logsumexp"))
    }

    fn logsumexp_inner(&self, dims: Vec<usize>, keepdim: bool) -> Result<Tensor> {
        for &d in &dims {
            check_dim("logsumexp", d, self.ndim())?;
        }
        if !self.dtype().is_float() {
            // As PyTorch: integer and Bool inputs compute in the default float dtype.
            return self.to_dtype(DType::F32)?.logsumexp_inner(dims, keepdim);
        }
        let all: Vec<usize> = if dims.is_empty() {
            (0..self.ndim()).collect()
        } else {
            dims.clone()
        };
        if all.iter().any(|&d| self.shape()[d] == 0) {
            // log(0) = -inf; there is no maximum to take out.
            return self.exp()?.sum(dims, keepdim)?.log();
        }
        let m = self.detach().max(dims.clone(), true)?.resolved()?;
        // Rows of infinities (all -inf, or a +inf) subtract nothing, as PyTorch.
        let inf = m.abs()?.eq(&m.scalar_like(f64::INFINITY)?)?;
        let m = m.masked_fill(&inf, 0.0)?;
        let out = self
            .sub(&m)?
            .exp()?
            .sum(dims, true)?
            .resolved()?
            .log()?
            .add(&m)?;
        if keepdim {
            return Ok(out);
        }
        let shape: Vec<usize> = (0..self.ndim())
            .filter(|d| !all.contains(d))
            .map(|d| self.shape()[d])
            .collect();
        out.reshape(&shape)
    }

    /// The index (I64) of the largest element along `dim`; ties take the lowest index (also
    /// across ranks: a split `dim` is gathered first).
    ///
    /// # Errors
    /// `DimOutOfRange`, `ShapeMismatch` for a dim of size 0 (as PyTorch); communication
    /// failures of boxing.
    pub fn argmax(&self, dim: usize, keepdim: bool) -> Result<Tensor> {
        super::dispatch(
            &ArgReduce {
                dim,
                keepdim,
                max: true,
            },
            &[&self.detach()],
        )
    }

    /// The index (I64) of the smallest element along `dim`; ties take the lowest index.
    ///
    /// # Errors
    /// As [`Tensor::argmax`].
    pub fn argmin(&self, dim: usize, keepdim: bool) -> Result<Tensor> {
        super::dispatch(
            &ArgReduce {
                dim,
                keepdim,
                max: false,
            },
            &[&self.detach()],
        )
    }
}

/// `argmax`/`argmin` along one dim.
struct ArgReduce {
    dim: usize,
    keepdim: bool,
    max: bool,
}

impl Op for ArgReduce {
    fn name(&self) -> &'static str {
        if self.max { "argmax" } else { "argmin" }
    }
    fn out_dtype(&self, _: &[DType]) -> Result<DType> {
        Ok(DType::I64)
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let s = shapes[0];
        check_dim(self.name(), self.dim, s.len())?;
        check_nonempty(self.name(), s, self.dim)?;
        Ok((0..s.len())
            .filter_map(|d| match (d == self.dim, self.keepdim) {
                (false, _) => Some(s[d]),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        // Indices are positions in the whole dim: that dim must be whole on each rank.
        let mut v: Vec<Signature> = (0..shapes[0].len())
            .filter(|&d| d != self.dim)
            .map(|d| {
                let shift = usize::from(!self.keepdim && d > self.dim);
                Signature::new([Sbp::Split(d)], Sbp::Split(d - shift))
            })
            .collect();
        v.push(Signature::new([Sbp::Broadcast], Sbp::Broadcast));
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend
            .arg_reduce(k.inputs[0], &k.shapes[0], self.dim, self.max)
    }
}

/// The sum of the squares of all elements, one element (shape `[1]`): a gradient's squared
/// norm in one kernel ([`crate::backend::Kernels::sum_squares`]). A split input gives a partial
/// sum; not recorded for autograd.
struct SumSquares;

impl Op for SumSquares {
    fn name(&self) -> &'static str {
        "sum_squares"
    }
    fn infer(&self, _: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(vec![1])
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let mut v: Vec<Signature> = (0..shapes[0].len())
            .map(|d| Signature::new([Sbp::Split(d)], Sbp::Partial(ReduceOp::Sum)))
            .collect();
        v.push(Signature::new([Sbp::Broadcast], Sbp::Broadcast));
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.sum_squares(k.inputs[0])
    }
}

impl Tensor {
    /// The sum of the squares of all elements as a one-element tensor of this dtype (see
    /// [`SumSquares`]); no gradient flows through it.
    ///
    /// # Errors
    /// Kernel errors and communication failures of boxing.
    pub(crate) fn sum_squares(&self) -> Result<Tensor> {
        super::dispatch(&SumSquares, &[self])
    }
}

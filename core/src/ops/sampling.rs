//! `topk` and `multinomial`, as PyTorch's, built from operators that already have every SBP
//! signature, backward and backend: `topk` is the first `k` positions of a stable `argsort`,
//! its values gathered from the input so that gradients flow to them; `multinomial` compares
//! uniform draws with the running sums of the weights (with replacement) or takes the top
//! `num_samples` of Gumbel-perturbed log weights (without: sequential sampling without
//! replacement, in one pass). Random draws are placement-invariant, as `Tensor::rand`'s.

use super::check_dim;
use crate::autograd::{no_grad, target_like};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// The `k` largest elements along `dim` (the smallest when `!largest`), in order, and their
    /// I64 indices: PyTorch's `topk` with `sorted=True`. Ties take the lower index first; NaN
    /// counts as larger than every number (first when `largest`, last otherwise), as PyTorch.
    /// Gradients flow to the chosen elements. Float and integer dtypes.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 5.0, 0.0, 2.0], &[2, 3], Device::Cpu)?;
    /// let (values, indices) = x.topk(2, 1, true)?;
    /// assert_eq!(values.to_vec::<f32>()?, [5.0, 3.0, 5.0, 2.0]);
    /// assert_eq!(indices.to_vec::<i64>()?, [1, 2, 0, 2]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange`; `InvalidArgument` for `k` larger than the dim; `UnsupportedDType` for
    /// a Bool tensor (as PyTorch); communication failures of boxing.
    pub fn topk(&self, k: usize, dim: usize, largest: bool) -> Result<(Tensor, Tensor)> {
        check_dim("topk", dim, self.ndim())?;
        let n = self.shape()[dim];
        if k > n {
            return Err(Error::InvalidArgument {
                op: "topk",
                reason: format!("k = {k} is larger than dim {dim} of size {n}"),
            });
        }
        if self.dtype() == DType::Bool {
            return Err(Error::UnsupportedDType {
                op: "topk",
                dtype: self.dtype(),
                device: self.device().to_string(),
            });
        }
        let indices = no_grad(|| self.argsort(dim, largest)?.narrow(dim, 0, k))?;
        Ok((self.gather(dim, &indices)?, indices))
    }

    /// `num_samples` category indices per row of the non-negative weights along the last dim
    /// (PyTorch's `multinomial`: rows need not sum to 1), I64 of shape `(..., num_samples)`.
    /// With `replacement` each draw is independent; without it a category is drawn at most
    /// once per row (and needs that many categories of positive weight).
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let w = Tensor::from_vec(vec![0.0f32, 3.0, 0.0, 1.0], &[1, 4], Device::Cpu)?;
    /// let draws = w.multinomial(2, false)?.to_vec::<i64>()?;
    /// assert!(draws == [1, 3] || draws == [3, 1]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` for a 0-d tensor, a negative, infinite or NaN weight, a row of zero
    /// sum, no samples asked for, or (without replacement) more samples than categories of
    /// positive weight; `UnsupportedDType` for integer or Bool weights; communication failures.
    pub fn multinomial(&self, num_samples: usize, replacement: bool) -> Result<Tensor> {
        let bad = |reason: String| Error::InvalidArgument {
            op: "multinomial",
            reason,
        };
        if self.ndim() == 0 || num_samples == 0 {
            return Err(bad(format!(
                "needs weights of 1 or more dims and 1 or more samples, got shape {:?} and \
                 {num_samples} samples",
                self.shape()
            )));
        }
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "multinomial",
                dtype: self.dtype(),
                device: self.device().to_string(),
            });
        }
        no_grad(|| {
            let last = self.ndim() - 1;
            let w = self.to_dtype(DType::F64)?;
            let all: Vec<usize> = (0..w.ndim()).collect();
            let (lowest, largest) = (
                w.min(all.clone(), false)?.to_vec::<f64>()?,
                w.max(all, false)?.to_vec::<f64>()?,
            );
            let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
            if !finite(&lowest) || !finite(&largest) || lowest.iter().any(|&x| x < 0.0) {
                return Err(bad(format!(
                    "weights must be finite and non-negative, found values from {lowest:?} to \
                     {largest:?}"
                )));
            }
            let positive = w
                .gt(&Tensor::full_dtype(&[], 0.0, DType::F64, target_like(&w))?)?
                .sum(last, false)?;
            let rows: Vec<usize> = (0..positive.ndim()).collect();
            let positive = positive.min(rows, false)?.to_vec::<i64>()?;
            let least = positive.first().copied().unwrap_or(0) as usize;
            if least == 0 {
                return Err(bad("a row of weights sums to zero".into()));
            }
            if !replacement && num_samples > least {
                return Err(bad(format!(
                    "{num_samples} samples without replacement from a row with only {least} \
                     categories of positive weight"
                )));
            }
            let mut shape = w.shape().to_vec();
            shape[last] = num_samples;
            if replacement {
                // the first category whose running sum exceeds a uniform draw scaled to the
                // row's total: the count of running sums not above it
                let cdf = w.cumsum(last)?;
                let n = w.shape()[last];
                let total = cdf.narrow(last, n - 1, 1)?;
                let u = Tensor::rand_dtype(&shape, DType::F64, target_like(&w))?.mul(&total)?;
                let below = cdf.unsqueeze(last)?.le(&u.unsqueeze(last + 1)?)?;
                let count = below.sum(last + 1, false)?;
                count.minimum(&Tensor::full_dtype(
                    &[],
                    (n - 1) as f64,
                    DType::I64,
                    target_like(&w),
                )?)
            } else {
                // Gumbel-top-k: log w + G, G = -log(-log U), keeps the top num_samples
                let u = Tensor::rand_dtype(w.shape(), DType::F64, target_like(&w))?;
                let tiny = f64::MIN_POSITIVE;
                let gumbel = u.clamp(Some(tiny), None)?.log()?.neg()?.log()?.neg()?;
                let keys = w.log()?.add(&gumbel)?;
                Ok(keys.topk(num_samples, last, true)?.1)
            }
        })
    }
}

//! Products: `prod` over dims and `cumprod` along one, composed of `narrow`, `cat` and `mul`,
//! so that every backend, dtype and layout has them, and their gradients are the chain rule
//! through the multiplications: exact where inputs are zero (the product of the others), where
//! dividing the product by the input would give NaN.

use super::check_dim;
use super::reduce::Dims;
use crate::autograd::target_like;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;

/// The dtype products are computed in (16-bit floats in f32, rounded once; integers and Bool
/// in i64) and the dtype they give (PyTorch's: integers and Bool become i64).
fn dtypes(dtype: DType) -> (DType, DType) {
    match dtype {
        DType::F16 | DType::BF16 => (DType::F32, dtype),
        d if d.is_float() => (d, d),
        _ => (DType::I64, DType::I64),
    }
}

/// Ones of `x`'s dtype and placement in `x`'s shape with dim `d` of size `n`.
fn ones_along(x: &Tensor, d: usize, n: usize) -> Result<Tensor> {
    let mut shape = x.shape().to_vec();
    shape[d] = n;
    Tensor::full_dtype(&shape, 1.0, x.dtype(), target_like(x))
}

/// The product over dim `d`, kept with size 1: halves multiplied pairwise (log2 of the dim's
/// size multiplications), an odd last slice carried to the next round.
fn prod_dim(x: &Tensor, d: usize) -> Result<Tensor> {
    let mut x = x.clone();
    if x.shape()[d] == 0 {
        return ones_along(&x, d, 1);
    }
    while x.shape()[d] > 1 {
        let n = x.shape()[d];
        let half = n / 2;
        let p = x.narrow(d, 0, half)?.mul(&x.narrow(d, half, half)?)?;
        x = if n % 2 == 1 {
            Tensor::cat(&[p, x.narrow(d, n - 1, 1)?], d)?
        } else {
            p
        };
    }
    Ok(x)
}

impl Tensor {
    /// The product over `dims` (every dim when empty), as `torch.prod`: integers and Bool give
    /// i64, 16-bit floats multiply in f32 and round once; the product of an empty dim is 1. The
    /// gradient is each input's product of the others, exact also at zeros.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 0.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.prod(1, false)?.to_vec::<f32>()?, [6.0, 0.0]);
    /// assert_eq!(x.prod(vec![], false)?.to_vec::<f32>()?, [0.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange` for a bad dim; communication failures of boxing.
    pub fn prod(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let mut dims = dims.dims();
        for &d in &dims {
            check_dim("prod", d, self.ndim())?;
        }
        if dims.is_empty() {
            dims = (0..self.ndim()).collect();
        }
        let (work, out) = dtypes(self.dtype());
        let mut x = self.to_dtype(work)?;
        for &d in &dims {
            x = prod_dim(&x, d)?;
        }
        if !keepdim {
            let shape: Vec<usize> = (0..self.ndim())
                .filter(|d| !dims.contains(d))
                .map(|d| self.shape()[d])
                .collect();
            x = x.reshape(&shape)?;
        }
        x.to_dtype(out)
    }

    /// Running products along `dim`, as `torch.cumprod` (dtypes as [`Tensor::prod`]): a scan
    /// of log2 of the dim's size rounds, each multiplying by the values shifted by a power of
    /// two. Gradients are exact at zeros, as [`Tensor::prod`]'s.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 0.0, 6.0], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.cumprod(1)?.to_vec::<f32>()?, [1.0, 2.0, 6.0, 4.0, 0.0, 0.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange` for a bad `dim`; communication failures of boxing.
    pub fn cumprod(&self, dim: usize) -> Result<Tensor> {
        check_dim("cumprod", dim, self.ndim())?;
        let (work, out) = dtypes(self.dtype());
        let mut y = self.to_dtype(work)?;
        let n = y.shape()[dim];
        let mut step = 1;
        while step < n {
            let shifted = Tensor::cat(
                &[ones_along(&y, dim, step)?, y.narrow(dim, 0, n - step)?],
                dim,
            )?;
            y = y.mul(&shifted)?;
            step *= 2;
        }
        y.to_dtype(out)
    }
}

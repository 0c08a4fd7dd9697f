//! Cumulative sums: `cumsum` as PyTorch's, built from products with a triangle of ones over
//! blocks (and the blocks' totals scanned the same way), so it has every operator's SBP
//! signatures, backward and backends, and costs O(n * BLOCK) for a dim of n, never an n x n
//! matrix.

use super::check_dim;
use crate::autograd::target_like;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;

/// Elements summed by one product with the triangle of ones.
const BLOCK: usize = 64;

impl Tensor {
    /// Inclusive cumulative sums along `dim` (PyTorch's `cumsum`): element i is the sum of
    /// elements 0..=i. Floats keep their dtype (16-bit ones are summed in f32 and rounded once,
    /// as PyTorch's CPU sums them); integers and Bool give I64, as PyTorch.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.cumsum(1)?.to_vec::<f32>()?, [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
    /// assert_eq!(x.cumsum(0)?.to_vec::<f32>()?, [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange` for a bad `dim`; a backend's `UnsupportedDType` (integer sums are
    /// products of I64 matrices).
    pub fn cumsum(&self, dim: usize) -> Result<Tensor> {
        check_dim("cumsum", dim, self.ndim())?;
        let dtype = self.dtype();
        let (work, out) = match dtype {
            DType::F16 | DType::BF16 => (DType::F32, dtype),
            d if d.is_float() => (d, d),
            _ => (DType::I64, DType::I64),
        };
        let last = self.ndim() - 1;
        let x = self.to_dtype(work)?;
        let x = if dim == last {
            x
        } else {
            x.transpose(dim, last)?
        };
        let shape = x.shape().to_vec();
        let n = shape[last];
        let rows = shape[..last].iter().product::<usize>();
        if n == 0 || rows == 0 {
            return self.to_dtype(out);
        }
        let y = scan_rows(&x.reshape(&[rows, n])?)?.reshape(&shape)?;
        let y = if dim == last {
            y
        } else {
            y.transpose(dim, last)?
        };
        y.to_dtype(out)
    }
}

/// Inclusive prefix sums of each row of the 2-D `x`: blocks of [`BLOCK`] summed by a product
/// with an upper triangle of ones, and each block's offset (the sum of the blocks before it)
/// the same scan of the blocks' totals, shifted by one.
fn scan_rows(x: &Tensor) -> Result<Tensor> {
    let (rows, n) = (x.shape()[0], x.shape()[1]);
    if n <= BLOCK {
        return x.matmul(&upper_ones(n, x)?);
    }
    let blocks = n.div_ceil(BLOCK);
    let padded = blocks * BLOCK;
    let x = if padded == n {
        x.clone()
    } else {
        let zeros = Tensor::full_dtype(&[rows, padded - n], 0.0, x.dtype(), target_like(x))?;
        Tensor::cat(&[x, &zeros], 1)?
    };
    // (rows * blocks, BLOCK): each block's own prefix sums.
    let within = x
        .reshape(&[rows * blocks, BLOCK])?
        .matmul(&upper_ones(BLOCK, &x)?)?;
    let totals = within.narrow(1, BLOCK - 1, 1)?.reshape(&[rows, blocks])?;
    let through = scan_rows(&totals)?;
    let zero = Tensor::full_dtype(&[rows, 1], 0.0, x.dtype(), target_like(&x))?;
    let before = Tensor::cat(&[&zero, &through.narrow(1, 0, blocks - 1)?], 1)?;
    let out = (&within.reshape(&[rows, blocks, BLOCK])? + &before.unsqueeze(2)?)?;
    out.reshape(&[rows, padded])?.narrow(1, 0, n)
}

/// The (n, n) upper triangle of ones (row i, column j: 1 where i <= j) in `like`'s dtype and
/// placement (broadcast).
fn upper_ones(n: usize, like: &Tensor) -> Result<Tensor> {
    Tensor::full_dtype(&[n, n], 1.0, like.dtype(), target_like(like))?.triu(0)
}

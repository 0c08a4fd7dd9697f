//! `sort` and `argsort` along a dim, as PyTorch's with `stable=True`: one kernel gives the
//! sorting positions ([`crate::backend::Kernels::argsort`]) and the values are gathered from
//! the input with them, so gradients flow back to where each value came from. The sorted dim
//! must be whole on a rank (a split there is gathered first); a split on any other dim stays.

use super::{Kernel, Op, Signature, check_dim, line_signatures};
use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::error::Result;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// The positions that sort `x` along `dim`.
struct Argsort {
    dim: usize,
    descending: bool,
}

impl Op for Argsort {
    fn name(&self) -> &'static str {
        "argsort"
    }
    fn out_dtype(&self, _: &[DType]) -> Result<DType> {
        Ok(DType::I64)
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        check_dim("argsort", self.dim, shapes[0].len())?;
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        // positions are within the whole dim: it must be whole on each rank
        line_signatures(shapes[0].len(), self.dim, 1)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend
            .argsort(k.inputs[0], &k.shapes[0], self.dim, self.descending)
    }
}

impl Tensor {
    /// The I64 positions that sort `self` along `dim` (ascending, or descending when
    /// `descending`), of `self`'s shape: PyTorch's `argsort(stable=True)`. Equal elements keep
    /// their order; NaN counts as larger than every number (last ascending, first descending).
    /// Every dtype; no gradient.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![3.0f32, 1.0, f32::NAN, 1.0, 2.0, 0.0], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.argsort(1, false)?.to_vec::<i64>()?, [1, 0, 2, 2, 0, 1]);
    /// assert_eq!(x.argsort(1, true)?.to_vec::<i64>()?, [2, 0, 1, 1, 0, 2]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange`; communication failures of boxing.
    pub fn argsort(&self, dim: usize, descending: bool) -> Result<Tensor> {
        check_dim("argsort", dim, self.ndim())?;
        super::dispatch(&Argsort { dim, descending }, &[&self.detach()])
    }

    /// `self` sorted along `dim` and the I64 positions the values came from: PyTorch's
    /// `sort(stable=True)` (see [`Tensor::argsort`] for the order). Gradients flow to the
    /// elements where the sorted values came from.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![2i64, -1, 2, 0], &[4], Device::Cpu)?;
    /// let (values, indices) = x.sort(0, true)?;
    /// assert_eq!(values.to_vec::<i64>()?, [2, 2, 0, -1]);
    /// assert_eq!(indices.to_vec::<i64>()?, [0, 2, 3, 1]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange`; communication failures of boxing.
    pub fn sort(&self, dim: usize, descending: bool) -> Result<(Tensor, Tensor)> {
        let indices = no_grad(|| self.argsort(dim, descending))?;
        Ok((self.gather(dim, &indices)?, indices))
    }
}

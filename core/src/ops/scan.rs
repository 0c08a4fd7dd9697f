//! Cumulative sums: `cumsum` as PyTorch's, one scan kernel on every backend
//! ([`crate::backend::Kernels::cumsum`]); its gradient is the reversed cumulative sum of the
//! output's. A split on any other dim stays (and a partial sum stays partial: the scan is
//! linear); a split on the scanned dim is gathered first.

use super::{Kernel, Op, Signature, check_dim, line_signatures};
use crate::autograd::record;
use crate::dtype::DType;
use crate::error::Result;
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// Inclusive prefix sums along `dim`.
struct CumSum {
    dim: usize,
}

impl Op for CumSum {
    fn name(&self) -> &'static str {
        "cumsum"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        // along whole lines, and linear (partial sums stay partial)
        let mut v = line_signatures(shapes[0].len(), self.dim, 1);
        v.push(Signature::new(
            [Sbp::Partial(ReduceOp::Sum)],
            Sbp::Partial(ReduceOp::Sum),
        ));
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.cumsum(k.inputs[0], &k.shapes[0], self.dim)
    }
}

impl Tensor {
    /// Inclusive cumulative sums along `dim` (PyTorch's `cumsum`): element i is the sum of
    /// elements 0..=i. Floats keep their dtype (16-bit ones are summed in f32 and rounded once;
    /// the CPU accumulates in f64, as PyTorch's, so a NaN or inf reaches only the sums from it
    /// on); integers and Bool give I64, as PyTorch.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.cumsum(1)?.to_vec::<f32>()?, [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
    /// assert_eq!(x.cumsum(0)?.to_vec::<f32>()?, [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    /// let y = Tensor::from_vec(vec![1.0f64, f64::NAN, 2.0], &[3], Device::Cpu)?;
    /// assert_eq!(y.cumsum(0)?.to_vec::<f64>()?[0], 1.0);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange` for a bad `dim`; communication failures of boxing.
    pub fn cumsum(&self, dim: usize) -> Result<Tensor> {
        check_dim("cumsum", dim, self.ndim())?;
        let dtype = self.dtype();
        let (work, out) = match dtype {
            DType::F16 | DType::BF16 => (DType::F32, dtype),
            d if d.is_float() => (d, d),
            _ => (DType::I64, DType::I64),
        };
        let x = self.to_dtype(work)?;
        let y = record(
            super::dispatch(&CumSum { dim }, &[&x]),
            "cumsum",
            &[&x],
            move |_, g| Ok(vec![Some(g.flip(&[dim])?.cumsum(dim)?.flip(&[dim])?)]),
        )?;
        y.to_dtype(out)
    }
}

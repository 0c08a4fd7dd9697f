//! Bitwise `and`, `or`, `xor` of integer and Bool tensors with broadcasting, as PyTorch's
//! `bitwise_and` etc.: one host kernel ([`crate::backend::Kernels::bitwise`]), the dtype
//! PyTorch's result type of the two (floats refused), elementwise signatures; no gradient.

use super::binary::{broadcast_shapes, broadcast_signatures};
use super::{Kernel, Op, Signature};
use crate::backend::BitwiseOp;
use crate::error::{Error, Result};
use crate::storage::Buffer;
use crate::tensor::Tensor;

struct Bitwise(BitwiseOp);

impl Op for Bitwise {
    fn name(&self) -> &'static str {
        match self.0 {
            BitwiseOp::And => "bitwise_and",
            BitwiseOp::Or => "bitwise_or",
            BitwiseOp::Xor => "bitwise_xor",
        }
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        broadcast_shapes(self.name(), shapes[0], shapes[1])
    }
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        broadcast_signatures(shapes, out)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.bitwise(
            self.0,
            k.inputs[0],
            &k.shapes[0],
            k.inputs[1],
            &k.shapes[1],
            &k.out_shape,
        )
    }
}

impl Tensor {
    /// `self op other` bitwise, broadcasting, in PyTorch's result type of the two.
    fn bitwise(&self, op: BitwiseOp, other: &Tensor) -> Result<Tensor> {
        let dtype = super::result_type(&[self, other]);
        if dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: Bitwise(op).name(),
                dtype,
                device: self.device().to_string(),
            });
        }
        let (a, b) = (
            self.to_dtype(dtype)?.detach(),
            other.to_dtype(dtype)?.detach(),
        );
        super::dispatch(&Bitwise(op), &[&a, &b])
    }

    /// `self & other` elementwise for integer and Bool tensors (broadcasting; PyTorch's
    /// result type), as `torch.bitwise_and`.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![12i64, -1, 5], &[3], Device::Cpu)?;
    /// let b = Tensor::from_vec(vec![10i64, 7, 3], &[3], Device::Cpu)?;
    /// assert_eq!(a.bitwise_and(&b)?.to_vec::<i64>()?, [8, 7, 1]);
    /// assert_eq!(a.bitwise_or(&b)?.to_vec::<i64>()?, [14, -1, 7]);
    /// assert_eq!(a.bitwise_xor(&b)?.to_vec::<i64>()?, [6, -8, 6]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `UnsupportedDType` for float operands (as PyTorch); as [`Tensor::add`].
    pub fn bitwise_and(&self, other: &Tensor) -> Result<Tensor> {
        self.bitwise(BitwiseOp::And, other)
    }

    /// `self | other`, as [`Tensor::bitwise_and`].
    ///
    /// # Errors
    /// As [`Tensor::bitwise_and`].
    pub fn bitwise_or(&self, other: &Tensor) -> Result<Tensor> {
        self.bitwise(BitwiseOp::Or, other)
    }

    /// `self ^ other`, as [`Tensor::bitwise_and`].
    ///
    /// # Errors
    /// As [`Tensor::bitwise_and`].
    pub fn bitwise_xor(&self, other: &Tensor) -> Result<Tensor> {
        self.bitwise(BitwiseOp::Xor, other)
    }
}

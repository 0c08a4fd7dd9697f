//! `RMSNorm`: root-mean-square normalisation over the last dim with a learned scale.

use super::Module;
use crate::error::{Error, Result};
use crate::tensor::{Device, Tensor};

/// `x / sqrt(mean(x^2, last dim) + eps) * weight` (eps 1e-6, weight starting at ones), as
/// PyTorch's `nn.RMSNorm(dim, eps=1e-6)`.
#[derive(Clone, Debug)]
pub struct RMSNorm {
    dim: usize,
    eps: f64,
    weight: Tensor,
}

impl RMSNorm {
    /// Normalises over a last dim of size `dim`.
    ///
    /// ```
    /// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
    /// let norm = nn::RMSNorm::new(2)?;
    /// let x = Tensor::from_vec(vec![3.0f64, 4.0], &[1, 2], Device::Cpu)?;
    /// let y = norm.forward(&x.to_dtype(DType::F32)?)?.to_vec::<f32>()?;
    /// let rms = (12.5f32 + 1e-6).sqrt();
    /// assert!((y[0] - 3.0 / rms).abs() < 1e-6 && (y[1] - 4.0 / rms).abs() < 1e-6);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` for `dim == 0`.
    pub fn new(dim: usize) -> Result<RMSNorm> {
        if dim == 0 {
            return Err(Error::InvalidArgument {
                op: "RMSNorm::new",
                reason: "the normalised dim must be positive".into(),
            });
        }
        Ok(RMSNorm {
            dim,
            eps: 1e-6,
            weight: Tensor::ones(&[dim], Device::Cpu)?.set_requires_grad(true),
        })
    }

    /// The same layer with another epsilon.
    pub fn with_eps(mut self, eps: f64) -> RMSNorm {
        self.eps = eps;
        self
    }
}

impl Module for RMSNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.shape().last() != Some(&self.dim) {
            return Err(Error::ShapeMismatch {
                op: "RMSNorm",
                shapes: vec![x.shape().to_vec(), vec![self.dim]],
                reason: "the input's last dim must be the normalised dim".into(),
            });
        }
        if let Some(y) = x.fused_normalize(1, self.eps, false, (Some(&self.weight), None)) {
            return in_input_dtype(x, y?);
        }
        let last = x.ndim() - 1;
        let inv = x
            .square()?
            .mean(last, true)?
            .add_scalar(self.eps)?
            .rsqrt()?;
        in_input_dtype(x, x.mul(&inv)?.mul(&self.weight)?)
    }

    fn parameters(&self) -> Vec<Tensor> {
        vec![self.weight.clone()]
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".into(), self.weight.clone())]
    }

    fn map_parameters(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.weight = f(&self.weight)?;
        Ok(())
    }
}

/// A normalisation's output `y` in its input's dtype, as PyTorch's norms give it: a bf16 input
/// with f32 parameters (a model kept in f32, activations in bf16) stays bf16, where the product
/// with the parameters would promote it.
pub(super) fn in_input_dtype(x: &Tensor, y: Tensor) -> Result<Tensor> {
    if y.dtype() != x.dtype() && x.dtype().is_float() {
        y.to_dtype(x.dtype())
    } else {
        Ok(y)
    }
}

//! Training utilities: gradient clipping.

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// PyTorch's `clip_grad_norm_`: the global 2-norm of every parameter's gradient (over all
/// parameters, whatever their SBP: each gradient's squared sum is reduced over its placement,
/// so every rank gets the same norm), and, when `max_norm / (norm + 1e-6)` is below 1, every
/// gradient scaled by it in place. Parameters without a gradient are skipped. Returns the
/// norm before clipping.
///
/// ```
/// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
/// let w = Tensor::from_vec(vec![1.0f64, 2.0], &[2], Device::Cpu)?.set_requires_grad(true);
/// w.mul(&w)?.sum(Vec::new(), false)?.backward()?; // grad = 2w = (2, 4)
/// let norm = nn::utils::clip_grad_norm(&[w.clone()], 1.0)?;
/// assert!((norm - 20f64.sqrt()).abs() < 1e-12);
/// let g = w.grad().unwrap().to_vec::<f64>()?;
/// assert!(((g[0] * g[0] + g[1] * g[1]).sqrt() - 1.0).abs() < 1e-5);
/// # Ok::<(), gflow_core::Error>(())
/// ```
///
/// # Errors
/// `InvalidArgument` for a negative or non-finite `max_norm`; communication failures.
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> Result<f64> {
    if !(max_norm >= 0.0 && max_norm.is_finite()) {
        return Err(Error::InvalidArgument {
            op: "clip_grad_norm",
            reason: format!("max_norm must be a finite non-negative number, got {max_norm}"),
        });
    }
    let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
    let mut total = 0.0f64;
    for g in &grads {
        let sq = crate::no_grad(|| {
            g.to_dtype(crate::DType::F64)?
                .square()?
                .sum(Vec::new(), false)
        })?;
        match sq.to_vec::<f64>() {
            Ok(v) => total += v.first().copied().unwrap_or(0.0),
            // A rank outside this gradient's placement holds none of it.
            Err(Error::NotInPlacement { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    // Each gradient is replaced by its scaled copy one at a time: holding them all here too
    // would keep a second copy of every gradient alive (a model's size, at the step's peak).
    drop(grads);
    let norm = total.sqrt();
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        for p in params {
            if let Some(g) = p.grad() {
                p.set_grad(Some(crate::no_grad(|| g.mul_scalar(coef))?));
            }
        }
    }
    Ok(norm)
}

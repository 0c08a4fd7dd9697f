//! Losses and stateless functions.

use crate::autograd::target_like;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Target, Tensor};

/// Mean squared error over all elements: `mean((pred - target)^2)`.
///
/// # Errors
/// `ShapeMismatch` when the shapes differ; operator errors.
pub fn mse_loss(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    if pred.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            op: "mse_loss",
            shapes: vec![pred.shape().to_vec(), target.shape().to_vec()],
            reason: "prediction and target must have the same shape".into(),
        });
    }
    pred.sub(target)?.square()?.mean(Vec::new(), false)
}

/// Cross-entropy of `logits` (N, C) against `target`: class indices (I64, shape (N)) or class
/// probabilities (the logits' shape and dtype), averaged over the N samples, as PyTorch's
/// `cross_entropy`. Computed with a stable log-softmax.
///
/// # Errors
/// `ShapeMismatch` for shapes that do not fit; `InvalidArgument` for an index outside 0..C;
/// operator errors.
pub fn cross_entropy(logits: &Tensor, target: &Tensor) -> Result<Tensor> {
    let bad = |reason: &str| Error::ShapeMismatch {
        op: "cross_entropy",
        shapes: vec![logits.shape().to_vec(), target.shape().to_vec()],
        reason: reason.into(),
    };
    if logits.ndim() != 2 {
        return Err(bad("logits must be (N, C)"));
    }
    let (n, c) = (logits.shape()[0], logits.shape()[1]);
    let probs = if target.dtype() == DType::I64 {
        if target.shape() != [n] {
            return Err(bad("class indices must have shape (N)"));
        }
        one_hot(target, c, logits.dtype(), target_like(target))?
    } else if target.shape() == logits.shape() {
        target.clone()
    } else {
        return Err(bad("class probabilities must have the logits' shape"));
    };
    let picked = logits.log_softmax(1)?.mul(&probs)?;
    picked
        .sum(Vec::new(), false)?
        .mul_scalar(-1.0 / n.max(1) as f64)
}

/// Rows of the `c`-by-`c` identity picked by the indices: one-hot vectors (not differentiable).
fn one_hot(indices: &Tensor, c: usize, dtype: DType, target: Target) -> Result<Tensor> {
    let eye: Vec<f64> = (0..c * c)
        .map(|i| if i / c == i % c { 1.0 } else { 0.0 })
        .collect();
    let eye = match dtype {
        DType::F64 => Tensor::from_vec(eye, &[c, c], target)?,
        _ => Tensor::from_vec(
            eye.into_iter().map(|x| x as f32).collect::<Vec<_>>(),
            &[c, c],
            target,
        )?,
    };
    eye.gather_rows(indices)
}

//! Losses and stateless functions.

use crate::autograd::target_like;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::sbp::Sbp;
use crate::tensor::Tensor;

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

/// Cross-entropy of `logits` (N, C) against `target`: class indices (I64 or I32, shape (N))
/// or class probabilities (the logits' shape and dtype), averaged over the N samples, as
/// PyTorch's `cross_entropy`. With indices it costs O(N·C) (the target logits gathered, or,
/// for logits split over the class dim, a mask of the target classes; never a C×C matrix), and
/// logits split over the class dim stay split: `logsumexp` runs as a max and a sum of partials
/// and the target logit is a partial sum (Megatron's vocabulary-parallel loss, from the
/// signatures alone).
///
/// ```
/// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
/// let logits = Tensor::from_vec(vec![0.0f64, 0.0, 0.0, 0.0], &[2, 2], Device::Cpu)?;
/// let target = Tensor::from_vec(vec![0i64, 1], &[2], Device::Cpu)?;
/// let loss = nn::functional::cross_entropy(&logits, &target)?.to_vec::<f64>()?[0];
/// assert!((loss - 2f64.ln()).abs() < 1e-12);
/// # Ok::<(), gflow_core::Error>(())
/// ```
///
/// # Errors
/// `ShapeMismatch` for shapes that do not fit; `IndexOutOfRange` for a class index outside
/// 0..C; operator errors.
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
    if target.dtype().is_int() {
        if target.shape() != [n] {
            return Err(bad("class indices must have shape (N)"));
        }
        check_classes(target, c)?;
        let split_classes = logits
            .dist()
            .is_some_and(|d| d.nd_sbp.as_slice().contains(&Sbp::Split(1)));
        let picked = if split_classes {
            // each rank's classes: the target logit where a rank holds it, zero elsewhere
            let classes =
                Tensor::arange_dtype(c, DType::I64, target_like(logits))?.reshape(&[1, c])?;
            let mask = classes.eq(&target.reshape(&[n, 1])?)?;
            let zero = logits.detach().mul_scalar(0.0)?;
            mask.where_cond(logits, &zero)?.sum(1, false)?.resolved()?
        } else {
            // one read per sample (the mask took three passes over the logits)
            logits
                .gather(1, &target.to_dtype(DType::I64)?.reshape(&[n, 1])?)?
                .reshape(&[n])?
        };
        return logits
            .logsumexp(1, false)?
            .sub(&picked)?
            .sum(Vec::new(), false)?
            .mul_scalar(1.0 / n.max(1) as f64);
    }
    if target.shape() != logits.shape() {
        return Err(bad("class probabilities must have the logits' shape"));
    }
    let picked = logits.log_softmax(1)?.mul(target)?;
    picked
        .sum(Vec::new(), false)?
        .mul_scalar(-1.0 / n.max(1) as f64)
}

/// `IndexOutOfRange` when a class index lies outside `0..c` (on every rank alike: the count of
/// bad indices is reduced over the placement).
fn check_classes(target: &Tensor, c: usize) -> Result<()> {
    let t = target.detach();
    if c == 0 && t.shape().iter().product::<usize>() > 0 {
        // No class at all: every index is out of range (the shapes are global, so every rank
        // refuses alike, without communication).
        let index = t
            .to_local()
            .ok()
            .and_then(|l| l.to_vec_cast::<i64>().ok())
            .and_then(|v| v.first().copied())
            .unwrap_or(0);
        return Err(Error::IndexOutOfRange {
            op: "cross_entropy",
            index,
            size: 0,
        });
    }
    let inside = t.clamp(Some(0.0), Some(c.saturating_sub(1) as f64))?;
    let outside = inside.ne(&t)?;
    let count = match outside.sum(Vec::new(), false)?.to_vec::<i64>() {
        // A rank outside the placement holds nothing to check.
        Err(Error::NotInPlacement { .. }) => return Ok(()),
        other => other?,
    };
    if count.first().copied().unwrap_or(0) == 0 {
        return Ok(());
    }
    // Name one offending index where this rank holds it.
    let index = t
        .to_local()
        .ok()
        .and_then(|l| l.to_vec::<i64>().ok())
        .and_then(|v| v.into_iter().find(|&i| i < 0 || i as u64 >= c as u64))
        .unwrap_or(-1);
    Err(Error::IndexOutOfRange {
        op: "cross_entropy",
        index,
        size: c,
    })
}

/// Self-attention of one fused projection, as FlashAttention's qkv-packed form: `qkv`
/// (batch, seq, heads, 3, head_dim) holds each head's q, k and v side by side, and the result
/// is [`scaled_dot_product_attention`] of them, laid out (batch, seq, heads, head_dim) so that
/// a reshape to (batch, seq, heads x head_dim) feeds the output projection. On the CPU one
/// kernel reads and writes these layouts in place (no head transposes either way, forward or
/// backward); elsewhere it is composed. Heads outermost keep a head's q, k and v together
/// under a split over heads: batch or heads split, it runs with no communication.
///
/// ```
/// # use gflow_core::{Device, Tensor};
/// # use gflow_core::nn::functional::{qkv_packed_attention, scaled_dot_product_attention};
/// # fn main() -> gflow_core::Result<()> {
/// let qkv = Tensor::randn(&[2, 5, 3, 3, 4], Device::Cpu)?; // (batch, seq, heads, 3, dim)
/// let y = qkv_packed_attention(&qkv, true)?;
/// assert_eq!(y.shape(), &[2, 5, 3, 4]);
/// let part = |i| qkv.narrow(3, i, 1)?.reshape(&[2, 5, 3, 4])?.transpose(1, 2);
/// let want = scaled_dot_product_attention(&part(0)?, &part(1)?, &part(2)?, None, true)?;
/// let (got, want) = (y.to_vec::<f32>()?, want.transpose(1, 2)?.to_vec::<f32>()?);
/// assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5));
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// `ShapeMismatch` where `qkv` is not (batch, seq, heads, 3, head_dim); operator errors.
pub fn qkv_packed_attention(qkv: &Tensor, is_causal: bool) -> Result<Tensor> {
    let s = qkv.shape().to_vec();
    if s.len() != 5 || s[3] != 3 {
        return Err(Error::ShapeMismatch {
            op: "qkv_packed_attention",
            shapes: vec![s],
            reason: "qkv must be (batch, seq, heads, 3, head_dim)".into(),
        });
    }
    let scale = 1.0 / (s[4] as f64).sqrt();
    if s[4] > 0
        && let Some(fused) = qkv.fused_packed_attention(scale, is_causal)
    {
        return fused;
    }
    let part = |i| -> Result<Tensor> {
        qkv.narrow(3, i, 1)?
            .reshape(&[s[0], s[1], s[2], s[4]])?
            .transpose(1, 2)
    };
    scaled_dot_product_attention(&part(0)?, &part(1)?, &part(2)?, None, is_causal)?.transpose(1, 2)
}

/// Attention as PyTorch's `scaled_dot_product_attention`: `softmax(q kᵀ / sqrt(head_dim) +
/// mask) v` on (batch, heads, seq, head_dim) tensors. `mask` (broadcasting to (.., seq_q,
/// seq_k)) is Bool (true = may attend) or a float added to the scores; `is_causal` lets query
/// `i` attend to keys `0..=i`. A query whose keys are all masked out gets zeros, and zero
/// gradients (PyTorch's safe softmax), not NaN. With heads split, every step keeps the split:
/// no communication.
///
/// # Errors
/// `ShapeMismatch` for inputs that are not 4-D or do not fit; `InvalidArgument` for a mask
/// together with `is_causal` (as PyTorch); `UnsupportedDType` for a mask neither Bool nor a
/// float dtype; operator errors.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    is_causal: bool,
) -> Result<Tensor> {
    let fits = q.ndim() == 4
        && k.ndim() == 4
        && v.ndim() == 4
        && q.shape()[3] == k.shape()[3]
        && k.shape()[2] == v.shape()[2];
    if !fits {
        return Err(Error::ShapeMismatch {
            op: "scaled_dot_product_attention",
            shapes: vec![q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec()],
            reason: "q, k, v must be (batch, heads, seq, head_dim) with matching head_dim and \
                     key/value lengths"
                .into(),
        });
    }
    if mask.is_some() && is_causal {
        return Err(Error::InvalidArgument {
            op: "scaled_dot_product_attention",
            reason: "a mask together with is_causal: fold the causal mask into `mask` \
                     (PyTorch refuses the pair too)"
                .into(),
        });
    }
    if let Some(m) = mask
        && !(m.dtype() == DType::Bool || m.dtype().is_float())
    {
        return Err(Error::UnsupportedDType {
            op: "scaled_dot_product_attention (mask)",
            dtype: m.dtype(),
            device: "any (a mask is Bool or a float dtype)".into(),
        });
    }
    let (tq, tk, d) = (q.shape()[2], k.shape()[2], q.shape()[3]);
    let scale = 1.0 / (d as f64).sqrt();
    // (A head_dim of 0 takes the composed path: its scores are zeros, as PyTorch's.)
    if mask.is_none()
        && d > 0
        && let Some(fused) = q.fused_attention(k, v, scale, is_causal)
    {
        return fused;
    }
    // q is scaled before the product (seq_k / head_dim times fewer elements than the scores),
    // and k is read transposed in place.
    let mut scores = q.mul_scalar(scale)?.matmul_nt(k)?;
    // Masks are added to the scores as 0 / -inf of their own (small) shape: a broadcast add
    // forward and an identity backward, where a fill would select over every score both ways.
    if is_causal {
        let above =
            Tensor::full_dtype(&[tq, tk], f64::NEG_INFINITY, q.dtype(), target_like(q))?.triu(1)?;
        scores = scores.add(&above)?;
    }
    if let Some(m) = mask {
        scores = if m.dtype() == DType::Bool {
            let blocked = m.eq(&Tensor::full_dtype(&[], 0.0, DType::Bool, target_like(m))?)?;
            let zeros = Tensor::full_dtype(m.shape(), 0.0, q.dtype(), target_like(m))?;
            scores.add(&zeros.masked_fill(&blocked, f64::NEG_INFINITY)?)?
        } else {
            scores.add(m)?
        };
        return safe_softmax(&scores)?.matmul(v);
    }
    scores.softmax(3)?.matmul(v)
}

/// Softmax over the last dim where a row of only `-inf` gives zeros (PyTorch's
/// `_safe_softmax`, what its attention uses): such a row's scores are replaced by zeros before
/// the softmax and its probabilities by zeros after, so neither the output nor any gradient
/// is NaN (the softmax saves finite probabilities for its backward). A NaN score still gives
/// NaN.
fn safe_softmax(scores: &Tensor) -> Result<Tensor> {
    let last = scores.ndim() - 1;
    let scalar = |v: f64| Tensor::full_dtype(&[], v, scores.dtype(), target_like(scores));
    let dead = scores
        .detach()
        .max(last, true)?
        .eq(&scalar(f64::NEG_INFINITY)?)?;
    let zero = scalar(0.0)?;
    let live = dead.where_cond(&zero, scores)?;
    dead.where_cond(&zero, &live.softmax(last)?)
}

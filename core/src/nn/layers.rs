//! The layers: `Linear`, `ReLU`, `GELU`, `Embedding`, `LayerNorm`, `Dropout`.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Module;
use crate::autograd::{partial_to_broadcast, target_like};
use crate::backend::UnaryOp;
use crate::error::{Error, Result};
use crate::ops::Dims;
use crate::tensor::{Device, Target, Tensor};

/// `y = x W^T + b`, with `W` of shape (out, in) and `b` of shape (out), as in PyTorch.
#[derive(Clone, Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

/// Uniform values in [-bound, bound) of `shape` (local; the rank's own random stream).
fn uniform(shape: &[usize], bound: f64) -> Result<Tensor> {
    Tensor::rand(shape, Device::Cpu)?
        .mul_scalar(2.0 * bound)?
        .add_scalar(-bound)
}

impl Linear {
    /// A layer from `in_features` to `out_features`, initialised as PyTorch does (weight and
    /// bias uniform in ±1/sqrt(in_features)) from gflow's random stream: local tensors, which
    /// [`Module::to_global`] turns global (broadcast takes rank 0's values).
    ///
    /// # Errors
    /// Errors of tensor creation.
    pub fn new(in_features: usize, out_features: usize, bias: bool) -> Result<Linear> {
        let bound = if in_features == 0 {
            0.0
        } else {
            1.0 / (in_features as f64).sqrt()
        };
        let weight = uniform(&[out_features, in_features], bound)?;
        let bias = bias.then(|| uniform(&[out_features], bound)).transpose()?;
        Linear::from_tensors(weight, bias)
    }

    /// A layer around given tensors: `weight` of shape (out, in) and `bias` of shape (out), as
    /// OneFlow and PyTorch store them; local or global (any placement and SBP, e.g. split for
    /// tensor parallelism). They become parameters (`requires_grad`).
    ///
    /// # Errors
    /// `ShapeMismatch` for a weight that is not 2-D or a bias that does not match it;
    /// `DTypeMismatch` for a bias of another dtype than the weight's.
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        let bad = |reason: &str| Error::ShapeMismatch {
            op: "Linear::from_tensors",
            shapes: std::iter::once(weight.shape().to_vec())
                .chain(bias.iter().map(|b| b.shape().to_vec()))
                .collect(),
            reason: reason.into(),
        };
        if weight.ndim() != 2 {
            return Err(bad("the weight must be 2-D (out, in)"));
        }
        if bias
            .as_ref()
            .is_some_and(|b| b.shape() != [weight.shape()[0]])
        {
            return Err(bad("the bias must be 1-D with the weight's out size"));
        }
        if let Some(b) = bias.as_ref().filter(|b| b.dtype() != weight.dtype()) {
            return Err(Error::DTypeMismatch {
                expected: weight.dtype(),
                got: b.dtype(),
            });
        }
        Ok(Linear {
            weight: weight.set_requires_grad(true),
            bias: bias.map(|b| b.set_requires_grad(true)),
        })
    }

    /// The weight, (out, in).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias, (out).
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
}

impl Module for Linear {
    /// `x` of shape (..., in), or (in) for one sample, as in PyTorch.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.ndim() == 1 {
            let y = self.forward(&x.reshape(&[1, x.shape()[0]])?)?;
            return y.reshape(&[self.weight.shape()[0]]);
        }
        match &self.bias {
            Some(b) => x.linear(&self.weight, b),
            None => x.matmul_nt(&self.weight),
        }
    }

    fn parameters(&self) -> Vec<Tensor> {
        std::iter::once(self.weight.clone())
            .chain(self.bias.clone())
            .collect()
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        std::iter::once(("weight".to_string(), self.weight.clone()))
            .chain(self.bias.clone().map(|b| ("bias".to_string(), b)))
            .collect()
    }

    fn map_parameters(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.weight = f(&self.weight)?;
        if let Some(b) = &self.bias {
            self.bias = Some(f(b)?);
        }
        Ok(())
    }
}

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, $method:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$method()
            }
            fn parameters(&self) -> Vec<Tensor> {
                vec![]
            }
        }
    };
}

activation!(
    /// `max(x, 0)`.
    ReLU,
    relu
);
activation!(
    /// SiLU (swish): `x * sigmoid(x)`.
    SiLU,
    silu
);
activation!(
    /// GELU (tanh approximation).
    #[allow(clippy::upper_case_acronyms)]
    GELU,
    gelu
);

/// A lookup table of `num` vectors of size `dim`: integer indices of any shape give their rows.
#[derive(Clone, Debug)]
pub struct Embedding {
    weight: Tensor,
}

impl Embedding {
    /// A table initialised from N(0, 1), as PyTorch does (local; see [`Linear::new`]).
    ///
    /// # Errors
    /// Errors of tensor creation.
    pub fn new(num: usize, dim: usize) -> Result<Embedding> {
        Embedding::from_tensor(Tensor::randn(&[num, dim], Device::Cpu)?)
    }

    /// A layer around a given (num, dim) table, local or global (split(1) shards the vectors,
    /// broadcast replicates the table).
    ///
    /// # Errors
    /// `ShapeMismatch` for a table that is not 2-D.
    pub fn from_tensor(weight: Tensor) -> Result<Embedding> {
        if weight.ndim() != 2 {
            return Err(Error::ShapeMismatch {
                op: "Embedding::from_tensor",
                shapes: vec![weight.shape().to_vec()],
                reason: "the table must be 2-D (num, dim)".into(),
            });
        }
        Ok(Embedding {
            weight: weight.set_requires_grad(true),
        })
    }

    /// The table.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }
}

impl Module for Embedding {
    /// `x` holds I64 indices.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.weight.gather_rows(x)
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

/// Normalises over the last dims to zero mean and unit variance (biased), then scales and
/// shifts elementwise, as PyTorch's `LayerNorm`.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    shape: Vec<usize>,
    eps: f64,
    weight: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    /// Normalises over trailing dims of sizes `shape` (one size or a list), eps 1e-5, weight
    /// ones and bias zeros.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty shape; errors of tensor creation.
    pub fn new(shape: impl Dims) -> Result<LayerNorm> {
        let shape = shape.dims();
        if shape.is_empty() {
            return Err(Error::InvalidArgument {
                op: "LayerNorm::new",
                reason: "the normalised shape needs at least one dimension".into(),
            });
        }
        Ok(LayerNorm {
            eps: 1e-5,
            weight: Tensor::ones(&shape, Device::Cpu)?.set_requires_grad(true),
            bias: Tensor::zeros(&shape, Device::Cpu)?.set_requires_grad(true),
            shape,
        })
    }

    /// The same layer with another epsilon.
    pub fn with_eps(mut self, eps: f64) -> LayerNorm {
        self.eps = eps;
        self
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.shape.len();
        if x.ndim() < n || x.shape()[x.ndim() - n..] != self.shape[..] {
            return Err(Error::ShapeMismatch {
                op: "LayerNorm",
                shapes: vec![x.shape().to_vec(), self.shape.clone()],
                reason: "the input must end with the normalised shape".into(),
            });
        }
        if let Some(y) =
            x.fused_normalize(n, self.eps, true, (Some(&self.weight), Some(&self.bias)))
        {
            return super::norm::in_input_dtype(x, y?);
        }
        let dims: Vec<usize> = (x.ndim() - n..x.ndim()).collect();
        let centred = x.sub(&x.mean(dims.clone(), true)?)?;
        let var = centred.square()?.mean(dims, true)?;
        let y = centred.div(&var.add_scalar(self.eps)?.sqrt()?)?;
        super::norm::in_input_dtype(x, y.mul(&self.weight)?.add(&self.bias)?)
    }

    fn parameters(&self) -> Vec<Tensor> {
        vec![self.weight.clone(), self.bias.clone()]
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("weight".into(), self.weight.clone()),
            ("bias".into(), self.bias.clone()),
        ]
    }

    fn map_parameters(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.weight = f(&self.weight)?;
        self.bias = f(&self.bias)?;
        Ok(())
    }
}

/// Zeroes each element with probability `p` while training and scales the rest by
/// `1 / (1 - p)`; the identity in evaluation. On global tensors the mask is placement-invariant
/// (drawn like [`Tensor::rand`]): the same seed drops the same logical elements on any number
/// of ranks and under any SBP.
#[derive(Debug)]
pub struct Dropout {
    p: f64,
    training: AtomicBool,
}

impl Dropout {
    /// Dropout with probability `p` in [0, 1].
    ///
    /// # Errors
    /// `InvalidArgument` for `p` outside [0, 1].
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::InvalidArgument {
                op: "Dropout::new",
                reason: format!("probability {p} is not in [0, 1]"),
            });
        }
        Ok(Dropout {
            p,
            training: AtomicBool::new(true),
        })
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training.load(Ordering::Relaxed) || self.p == 0.0 {
            return Ok(x.clone());
        }
        if !x.dtype().is_float() {
            // As PyTorch's dropout in training, which takes floating-point input only.
            return Err(Error::InvalidArgument {
                op: "Dropout",
                reason: format!("input: expected a floating-point dtype, got {}", x.dtype()),
            });
        }
        if self.p == 1.0 {
            return x.mul_scalar(0.0);
        }
        let target = match (target_like(x), x.sbp()) {
            (Target::Global(p, _), Some(sbp)) => Target::Global(p, partial_to_broadcast(sbp)),
            (t, _) => t,
        };
        let keep = Tensor::rand_dtype(x.shape(), x.dtype(), target)?
            .add_scalar(-self.p)?
            .unary(UnaryOp::Step)?
            .mul_scalar(1.0 / (1.0 - self.p))?;
        x.mul(&keep)
    }

    fn parameters(&self) -> Vec<Tensor> {
        vec![]
    }

    fn set_training(&self, training: bool) {
        self.training.store(training, Ordering::Relaxed);
    }
}

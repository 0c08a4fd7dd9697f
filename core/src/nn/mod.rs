//! Neural-network modules on local or global tensors, as PyTorch and OneFlow name them: a
//! [`Module`] maps a tensor to a tensor and owns parameters (tensor handles that optimizers
//! update in place). Modules hold no communication: on global parameters the operators'
//! signatures and boxing supply it.

pub mod functional;
mod layers;
mod norm;
pub mod utils;

pub use layers::{Dropout, Embedding, GELU, LayerNorm, Linear, ReLU, SiLU};
pub use norm::RMSNorm;

use crate::error::Result;
use crate::placement::Placement;
use crate::sbp::NdSbp;
use crate::tensor::Tensor;

/// A layer or model.
pub trait Module: Send + Sync {
    /// Applies the module to `x`.
    ///
    /// # Errors
    /// Errors of the operators it runs (shapes, placements, communication).
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Handles to the module's own parameters (not copies), in a fixed order.
    fn parameters(&self) -> Vec<Tensor>;

    /// Replaces every parameter with `f(parameter)`, in [`Module::parameters`] order (used by
    /// [`Module::to_global`] and [`Module::to_local`]). Modules without parameters need not
    /// implement it; the default refuses when there are parameters to replace.
    ///
    /// # Errors
    /// The first error of `f`; `InvalidArgument` from the default when the module has
    /// parameters.
    fn map_parameters(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        let _ = f;
        if self.parameters().is_empty() {
            Ok(())
        } else {
            Err(crate::Error::InvalidArgument {
                op: "Module::map_parameters",
                reason: "this module has parameters but does not implement map_parameters, \
                         which to_global and to_local need"
                    .into(),
            })
        }
    }

    /// Switches training behaviour (dropout) on or off; on by default.
    fn set_training(&self, _training: bool) {}

    /// This module with every parameter converted to a global tensor on `placement` with
    /// `sbp` (see [`Tensor::to_global`]); parameters stay leaves that require gradients.
    ///
    /// # Errors
    /// Errors of [`Tensor::to_global`].
    fn to_global(mut self, placement: &Placement, sbp: impl Into<NdSbp>) -> Result<Self>
    where
        Self: Sized,
    {
        let sbp = sbp.into();
        self.map_parameters(&mut |t| as_parameter(t, |t| t.to_global(placement, sbp.clone())))?;
        Ok(self)
    }

    /// This module with every parameter replaced by this rank's component (see
    /// [`Tensor::to_local`]).
    ///
    /// # Errors
    /// `NotInPlacement` on a rank outside a parameter's placement.
    fn to_local(mut self) -> Result<Self>
    where
        Self: Sized,
    {
        self.map_parameters(&mut |t| as_parameter(t, Tensor::to_local))?;
        Ok(self)
    }
}

/// `f(t)` as a new leaf parameter (unrecorded), requiring a gradient when `t` did.
fn as_parameter(t: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let out = crate::autograd::no_grad(|| f(t))?.detach();
    Ok(out.set_requires_grad(t.requires_grad()))
}

/// Modules applied in order, each to the previous one's output.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    /// An empty sequence (the identity).
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Appends `m`.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, m: impl Module + 'static) -> Sequential {
        self.layers.push(Box::new(m));
        self
    }

    /// The number of modules.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no modules.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sequential({} modules)", self.layers.len())
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for m in &self.layers {
            y = m.forward(&y)?;
        }
        Ok(y)
    }

    fn parameters(&self) -> Vec<Tensor> {
        self.layers.iter().flat_map(|m| m.parameters()).collect()
    }

    fn map_parameters(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.layers.iter_mut().try_for_each(|m| m.map_parameters(f))
    }

    fn set_training(&self, training: bool) {
        self.layers.iter().for_each(|m| m.set_training(training));
    }
}

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

use crate::dtype::DType;
use crate::error::Result;
use crate::placement::Placement;
use crate::sbp::NdSbp;
use crate::state_dict::StateDict;
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

    /// Replaces every parameter with `f(parameter)`, in [`Module::parameters`] order (a new
    /// tensor in each field; [`Module::to_global`] converts in place instead, so handles held
    /// elsewhere follow). Modules without parameters need not
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
                         which this call needs"
                    .into(),
            })
        }
    }

    /// Handles to the module's parameters with dotted names: field names in layers
    /// (`"weight"`, `"bias"`), positions in a [`Sequential`] (`"0.weight"`). The default names
    /// [`Module::parameters`] by position (`"0"`, `"1"`, ...); a module with fields should name
    /// them, as checkpoints key parameters by these names.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.parameters()
            .into_iter()
            .enumerate()
            .map(|(i, t)| (i.to_string(), t))
            .collect()
    }

    /// Switches training behaviour (dropout) on or off; on by default.
    fn set_training(&self, _training: bool) {}

    /// This module with every parameter converted to a global tensor on `placement` with
    /// `sbp` (see [`Tensor::to_global`]); parameters stay leaves that require gradients.
    /// Conversion is in place ([`Tensor::become_tensor`]): handles taken before it, such as an
    /// optimizer's, see the converted parameters.
    ///
    /// # Errors
    /// Errors of [`Tensor::to_global`].
    fn to_global(self, placement: &Placement, sbp: impl Into<NdSbp>) -> Result<Self>
    where
        Self: Sized,
    {
        let sbp = sbp.into();
        self.to_global_with(placement, |_, _| sbp.clone())
    }

    /// This module with each parameter converted to a global tensor on `placement` with the
    /// SBP `layout(name, shape)` gives it (names as [`Module::named_parameters`], the shape the
    /// parameter's current one): tensor parallelism or FSDP in one call. In place, as
    /// [`Module::to_global`].
    ///
    /// ```
    /// use gflow_core::nn::{Linear, Module};
    /// use gflow_core::{simulate, Placement, Sbp};
    /// let sbps = simulate(2, |_env| {
    ///     let p = Placement::new("cpu", [0, 1])?;
    ///     let layer = Linear::new(4, 6, true)?.to_global_with(&p, |name, _shape| {
    ///         if name == "weight" { Sbp::split(0).into() } else { Sbp::broadcast().into() }
    ///     })?;
    ///     Ok(layer.weight().sbp().map(ToString::to_string))
    /// })?;
    /// assert_eq!(sbps[0].as_deref(), Some("(split(dim=0),)"));
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Errors of [`Tensor::to_global`] (e.g. an SBP that does not fit the placement).
    fn to_global_with(
        self,
        placement: &Placement,
        mut layout: impl FnMut(&str, &[usize]) -> NdSbp,
    ) -> Result<Self>
    where
        Self: Sized,
    {
        convert_in_place(&self, |name, t| {
            t.to_global(placement, layout(name, t.shape()))
        })?;
        Ok(self)
    }

    /// This module with every parameter cast to `dtype` (PyTorch's `module.to(dtype)`: `F64`
    /// for a float64 reference, `BF16` for mixed precision). In place, as
    /// [`Module::to_global`].
    ///
    /// ```
    /// use gflow_core::nn::{Linear, Module};
    /// use gflow_core::DType;
    /// let layer = Linear::new(3, 2, true)?.to_dtype(DType::F64)?;
    /// assert_eq!(layer.weight().dtype(), DType::F64);
    /// assert!(layer.weight().requires_grad());
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` when `dtype` is not a floating-point dtype.
    fn to_dtype(self, dtype: DType) -> Result<Self>
    where
        Self: Sized,
    {
        if !dtype.is_float() {
            return Err(crate::Error::InvalidArgument {
                op: "Module::to_dtype",
                reason: format!("parameters cast to a floating-point dtype, got {dtype:?}"),
            });
        }
        convert_in_place(&self, |_, t| t.to_dtype(dtype))?;
        Ok(self)
    }

    /// This module with every parameter replaced by this rank's component (see
    /// [`Tensor::to_local`]), in place as [`Module::to_global`].
    ///
    /// # Errors
    /// `NotInPlacement` on a rank outside a parameter's placement.
    fn to_local(self) -> Result<Self>
    where
        Self: Sized,
    {
        convert_in_place(&self, |_, t| t.to_local())?;
        Ok(self)
    }

    /// The parameters as a [`StateDict`], keyed by [`Module::named_parameters`]: handles, so
    /// [`Module::load_state_dict`] or a checkpoint load into it fills this module.
    fn state_dict(&self) -> StateDict {
        let mut sd = StateDict::new();
        sd.insert_module("", self);
        sd
    }

    /// Copies every parameter's value from the tensor of the same name in `sd` (any layout:
    /// converted to the parameter's), in place. Collective for global parameters.
    ///
    /// # Errors
    /// `Checkpoint` for a name `sd` lacks or a tensor of another shape or dtype; errors of
    /// the conversion.
    fn load_state_dict(&self, sd: &StateDict) -> Result<()> {
        self.named_parameters()
            .iter()
            .try_for_each(|(name, p)| crate::state_dict::copy_from(sd, name, p))
    }
}

/// `ts` without repeats of a tensor (the same handle, [`Tensor::same_as`]), first ones kept:
/// a tied parameter is one parameter to optimizers, norms and containers.
pub(crate) fn distinct(ts: impl IntoIterator<Item = Tensor>) -> Vec<Tensor> {
    let mut out: Vec<Tensor> = vec![];
    for t in ts {
        if !out.iter().any(|d| d.same_as(&t)) {
            out.push(t);
        }
    }
    out
}

/// Converts each distinct parameter of `m` with `f(name, parameter)` and makes the parameter
/// that result in place, a leaf requiring gradients as before.
fn convert_in_place(
    m: &(impl Module + ?Sized),
    mut f: impl FnMut(&str, &Tensor) -> Result<Tensor>,
) -> Result<()> {
    let mut done: Vec<Tensor> = vec![];
    for (name, p) in m.named_parameters() {
        if done.iter().any(|d| d.same_as(&p)) {
            continue;
        }
        let new = as_parameter(&p, |t| f(&name, t))?;
        p.become_tensor(&new)?;
        done.push(p);
    }
    Ok(())
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

    /// The layers' parameters in order, each once: a parameter shared by two layers (tied
    /// weights) is one parameter, as in PyTorch, so optimizers update it once.
    fn parameters(&self) -> Vec<Tensor> {
        distinct(self.layers.iter().flat_map(|m| m.parameters()))
    }

    fn map_parameters(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        self.layers.iter_mut().try_for_each(|m| m.map_parameters(f))
    }

    /// Named as [`Module::named_parameters`] says, a shared parameter under its first name
    /// only (PyTorch's `remove_duplicate=True`).
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut named: Vec<(String, Tensor)> = vec![];
        let all = self.layers.iter().enumerate().flat_map(|(i, m)| {
            m.named_parameters()
                .into_iter()
                .map(move |(n, t)| (format!("{i}.{n}"), t))
        });
        for (name, t) in all {
            if !named.iter().any(|(_, d)| d.same_as(&t)) {
                named.push((name, t));
            }
        }
        named
    }

    fn set_training(&self, training: bool) {
        self.layers.iter().for_each(|m| m.set_training(training));
    }
}

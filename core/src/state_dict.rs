//! [`StateDict`]: what a checkpoint holds, by name. Tensors are *handles* (a model's parameters,
//! an optimizer's moments): saving reads them, loading fills those very tensors in place, so
//! a model and an optimizer built before the load see the loaded values. Small values (a step
//! number, the random generator's state) are `i64`s. Core does no I/O: the files are the
//! `gflow-checkpoint` crate's business.

use std::collections::BTreeMap;

use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::optim::Optimizer;
use crate::rng::RngState;
use crate::storage::HostData;
use crate::tensor::Tensor;

/// One entry of a [`StateDict`].
#[derive(Clone, Debug)]
pub enum Entry {
    /// A tensor handle (local or global).
    Tensor(Tensor),
    /// A small value.
    Value(i64),
}

/// Named tensors (handles) and small values, in name order (the same on every rank, so the
/// collective save and load visit them in one order).
///
/// ```
/// use gflow_core::{nn::{self, Module}, optim, StateDict};
/// let model = nn::Sequential::new().add(nn::Linear::new(3, 2, true)?);
/// let opt = optim::Adam::new(model.parameters(), 0.1);
/// let mut sd = StateDict::new();
/// sd.insert_module("model", &model);
/// sd.insert_optimizer("opt", &opt);
/// sd.insert_value("step", 7);
/// assert!(sd.get("model.0.weight").is_some_and(|w| w.same_as(&model.parameters()[0])));
/// assert!(sd.get("opt.state.0.exp_avg").is_some());
/// assert_eq!(sd.value("step"), Some(7));
/// # Ok::<(), gflow_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct StateDict {
    entries: BTreeMap<String, Entry>,
    /// The first failure of an insertion (optimizer state that could not be made), reported
    /// by [`StateDict::check`] (which save and load call) so that insertions stay infallible.
    error: Option<String>,
}

/// `prefix.name`, or `name` for an empty prefix.
fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl StateDict {
    /// An empty state dict.
    pub fn new() -> StateDict {
        StateDict::default()
    }

    /// Adds (or replaces) the tensor `name`: a handle to `t`, which a load fills in place.
    pub fn insert(&mut self, name: &str, t: &Tensor) {
        self.entries
            .insert(name.to_string(), Entry::Tensor(t.clone()));
    }

    /// Adds every parameter of `module` as `prefix.<name>` with the names of
    /// [`Module::named_parameters`] (`"model.0.weight"`, ...).
    pub fn insert_module(&mut self, prefix: &str, module: &(impl Module + ?Sized)) {
        for (name, t) in module.named_parameters() {
            self.insert(&join(prefix, &name), &t);
        }
    }

    /// Adds the state of `opt` as `prefix.<name>` ([`Optimizer::state_tensors`]: per parameter
    /// `state.{i}.step` and its moments), making zero state for parameters not stepped yet so
    /// that a load has tensors to fill.
    pub fn insert_optimizer(&mut self, prefix: &str, opt: &(impl Optimizer + ?Sized)) {
        match opt.state_tensors() {
            Ok(state) => state
                .iter()
                .for_each(|(name, t)| self.insert(&join(prefix, name), t)),
            Err(e) => {
                self.error
                    .get_or_insert(format!("optimizer {prefix:?}: {e}"));
            }
        }
    }

    /// Adds (or replaces) the small value `name`.
    pub fn insert_value(&mut self, name: &str, v: i64) {
        self.entries.insert(name.to_string(), Entry::Value(v));
    }

    /// Adds the random generator's state as the values `name.seed` and `name.counter`
    /// (restore it with [`StateDict::rng_state`] and [`crate::rng::set_rng_state`]).
    pub fn insert_rng_state(&mut self, name: &str, state: RngState) {
        self.insert_value(&join(name, "seed"), state.seed as i64);
        self.insert_value(&join(name, "counter"), state.counter as i64);
    }

    /// The state [`StateDict::insert_rng_state`] stored under `name`.
    pub fn rng_state(&self, name: &str) -> Option<RngState> {
        Some(RngState {
            seed: self.value(&join(name, "seed"))? as u64,
            counter: self.value(&join(name, "counter"))? as u64,
        })
    }

    /// The tensor `name` (a handle).
    pub fn get(&self, name: &str) -> Option<Tensor> {
        match self.entries.get(name)? {
            Entry::Tensor(t) => Some(t.clone()),
            Entry::Value(_) => None,
        }
    }

    /// The small value `name`.
    pub fn value(&self, name: &str) -> Option<i64> {
        match self.entries.get(name)? {
            Entry::Value(v) => Some(*v),
            Entry::Tensor(_) => None,
        }
    }

    /// Every name, tensors and values, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// Every entry, in name order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Fails with the first insertion that could not complete.
    ///
    /// # Errors
    /// `InvalidArgument` naming the failed insertion.
    pub fn check(&self) -> Result<()> {
        match &self.error {
            None => Ok(()),
            Some(reason) => Err(Error::InvalidArgument {
                op: "StateDict::insert_optimizer",
                reason: reason.clone(),
            }),
        }
    }
}

/// Fills `dst` in place with the value of `sd`'s tensor `name` (see [`assign`]).
///
/// # Errors
/// `Checkpoint` for a missing name or a tensor of another shape or dtype; as [`assign`].
pub fn copy_from(sd: &StateDict, name: &str, dst: &Tensor) -> Result<()> {
    let src = sd.get(name).ok_or_else(|| Error::Checkpoint {
        path: format!("state dict entry {name:?}"),
        reason: "the state dict has no such tensor".into(),
    })?;
    if src.shape() != dst.shape() || src.dtype() != dst.dtype() {
        return Err(Error::Checkpoint {
            path: format!("state dict entry {name:?}"),
            reason: format!(
                "holds {:?} {}, the destination is {:?} {}",
                src.shape(),
                src.dtype(),
                dst.shape(),
                dst.dtype()
            ),
        });
    }
    assign(dst, &src)
}

/// Writes the logical value of `src` into `dst` in place, whatever their layouts (collective
/// when either is global: `src` is converted to `dst`'s layout). A local tensor stands for its
/// whole value on every rank.
///
/// # Errors
/// `ShapeMismatch`/`DTypeMismatch` when shapes or dtypes differ; conversion errors.
pub fn assign(dst: &Tensor, src: &Tensor) -> Result<()> {
    if src.shape() != dst.shape() {
        return Err(Error::ShapeMismatch {
            op: "assign",
            shapes: vec![dst.shape().to_vec(), src.shape().to_vec()],
            reason: "the source must have the destination's shape".into(),
        });
    }
    if src.dtype() != dst.dtype() {
        return Err(Error::DTypeMismatch {
            expected: dst.dtype(),
            got: src.dtype(),
        });
    }
    let value = no_grad(|| -> Result<Option<crate::storage::Buffer>> {
        Ok(match (dst.dist(), src.dist()) {
            (Some(d), _) => {
                let src = match src.dist() {
                    Some(_) => src.clone(),
                    None => src.to_global(
                        &d.placement,
                        crate::sbp::NdSbp::broadcast(d.placement.ndim()),
                    )?,
                };
                let moved = src.to_global(&d.placement, d.nd_sbp.clone())?;
                moved.read().map(|b| b.clone())
            }
            (None, Some(_)) => Some(src.to_host()?.into()),
            (None, None) => src.read().map(|b| b.clone()),
        })
    })?;
    if let (Some(v), Some(mut w)) = (value, dst.write()) {
        // Host storage is overwritten where it lies, so views of it (Python's zero-copy
        // `numpy()`) see the new value and never a freed buffer; device storage is replaced.
        if w.resident_on().is_none() && w.len() == v.len() {
            w.host_mut()?
                .as_bytes_mut()
                .copy_from_slice(v.host()?.as_bytes());
        } else {
            *w = v;
        }
    }
    Ok(())
}

impl Tensor {
    /// Calls `f` with this rank's component as host data (downloaded from a device if need
    /// be); `None` on a rank outside the placement. What checkpoints write.
    ///
    /// # Errors
    /// The device's error when a download fails.
    pub fn with_component<R>(&self, f: impl FnOnce(&HostData) -> R) -> Result<Option<R>> {
        match self.read() {
            None => Ok(None),
            Some(b) => Ok(Some(f(b.host()?))),
        }
    }

    /// Calls `f` with this rank's component as writable host data, in place (every handle sees
    /// the change; a device copy, now stale, is dropped); `None` off the placement. What
    /// checkpoints read into.
    ///
    /// # Errors
    /// The device's error when a download fails; the error of `f`.
    pub fn with_component_mut<R>(
        &self,
        f: impl FnOnce(&mut HostData) -> Result<R>,
    ) -> Result<Option<R>> {
        match self.write() {
            None => Ok(None),
            Some(mut b) => Ok(Some(f(b.host_mut()?)?)),
        }
    }
}

//! In-place operators: `x.add_(y)`, `sub_`, `mul_`, `div_`, `zero_`, `fill_`, `copy_`,
//! `clamp_`, `masked_fill_`, `bitwise_and_` (`_or_`, `_xor_`) and `x += y`, `-=`, `*=`, `/=`,
//! `&=`, `|=`, `^=`. The Python object stays the same tensor: its identity, `requires_grad`,
//! `.grad`, placement and SBP are kept, so OneFlow's manual-SGD idiom works unchanged:
//!
//! ```python
//! with flow.no_grad():
//!     w -= 0.1 * w.grad
//! w.grad.zero_()
//! ```
//!
//! The new value is computed by gflow's ordinary operators and written into the tensor's
//! storage with `gflow_core::state_dict::assign` (in its own layout: a collective for a global
//! tensor), so every handle on that storage (`x.data`, optimizers' handles, `numpy()` views)
//! sees it. As PyTorch: a leaf that requires grad may only be changed under `flow.no_grad()`;
//! a result recorded for autograd (or a tensor given a recorded value) is updated on the graph,
//! the Python object now naming the recorded result. A handle read from `w.grad` gives `w` a
//! new gradient instead of writing into storage that backward may share between gradients.
//! An in-place operator on a view (`x[0]`, `x[:, 1:3]`, `x.narrow`, `x.view`, `x.t()`,
//! `x.permute`, ...) also changes the tensor it was taken from, through the view's write-back,
//! and one on a tensor refreshes its live views (and theirs), as PyTorch's views sharing
//! storage behave (gflow's views hold copies, kept in step this way).

use gflow::{Target, Tensor};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::ops::{Bitwise, bitwise, bitwise_dtype, operand, target_like};
use crate::select::{Bounds, check_bool_mask};
use crate::tensor::{PyTensor, is_grad_enabled, run};

/// `value` made to fit `dst`: broadcast to its shape, cast to its dtype (never a float into
/// an integer tensor, as PyTorch), in its placement and SBP.
fn fit(dst: &Tensor, value: Tensor, name: &'static str) -> gflow::Result<Tensor> {
    let v = if value.shape() == dst.shape() {
        value
    } else if value.ndim() < dst.ndim() {
        let mut s = vec![1; dst.ndim() - value.ndim()];
        s.extend_from_slice(value.shape());
        value.reshape(&s)?.expand(dst.shape())?
    } else {
        value.expand(dst.shape())?
    };
    if v.shape() != dst.shape() {
        return Err(gflow::Error::ShapeMismatch {
            op: name,
            shapes: vec![dst.shape().to_vec(), v.shape().to_vec()],
            reason: "an in-place result must have the shape of the tensor it is written to".into(),
        });
    }
    let v = match (v.dtype(), dst.dtype()) {
        (a, b) if a == b => v,
        (a, b) if a.is_float() && !b.is_float() => {
            return Err(gflow::Error::DTypeMismatch {
                expected: b,
                got: a,
            });
        }
        (_, b) => v.to_dtype(b)?,
    };
    match (dst.placement(), dst.sbp()) {
        (Some(p), Some(s)) if v.placement() != Some(p) || v.sbp() != Some(s) => {
            v.to_global(p, s.clone())
        }
        _ => Ok(v),
    }
}

/// Where `t` lies: its placement and SBP (a partial one as broadcast), or its device; a random
/// value drawn there is drawn part by part.
fn own_target(t: &Tensor) -> Target {
    match (t.placement(), t.sbp()) {
        (Some(p), Some(s)) if !s.has_partial() => Target::Global(p.clone(), s.clone()),
        (Some(p), _) => Target::Global(p.clone(), gflow::NdSbp::broadcast(p.ndim())),
        _ => Target::Local(t.device()),
    }
}

/// The dtype random values for `t` are drawn in: its own, which must be a float (PyTorch
/// refuses `normal_` of an integer tensor too).
fn random_dtype(t: &Tensor, op: &'static str) -> gflow::Result<gflow::DType> {
    if t.dtype().is_float() {
        Ok(t.dtype())
    } else {
        Err(gflow::Error::UnsupportedDType {
            op,
            dtype: t.dtype(),
            device: t.device().to_string(),
        })
    }
}

/// The function of an in-place update: the tensor's new value from its current one.
type NewValue<'a> = Box<dyn FnOnce(&Tensor) -> gflow::Result<Tensor> + Send + 'a>;

impl PyTensor {
    /// Replaces the value of the tensor behind `slf` with `f(value)` in place (see the module
    /// docs); `global`: some operand is global (a collective).
    pub(crate) fn update<'py>(
        slf: &Bound<'py, Self>,
        name: &'static str,
        global: bool,
        f: impl FnOnce(&Tensor) -> gflow::Result<Tensor> + Send,
    ) -> PyResult<Bound<'py, Self>> {
        Self::update_boxed(slf, name, global, Box::new(f))
    }

    /// [`PyTensor::update`] with the new value's function boxed (a view's write-back updates
    /// its base the same way, recursively).
    fn update_boxed<'py>(
        slf: &Bound<'py, Self>,
        name: &'static str,
        global: bool,
        f: NewValue<'_>,
    ) -> PyResult<Bound<'py, Self>> {
        let py = slf.py();
        let this = slf.get();
        let t = this.get();
        let grad_mode = is_grad_enabled();
        if grad_mode && t.requires_grad() && t.is_leaf() {
            return Err(PyRuntimeError::new_err(format!(
                "a leaf tensor that requires grad is used in an in-place operation ({name}); \
                 change it under `with flow.no_grad():`"
            )));
        }
        // a view writes through to the tensors it was taken from: refuse before changing
        // anything when one of them is a leaf that requires grad (as PyTorch)
        let mut up = this.view_of().map(|v| v.base.clone_ref(py));
        while let Some(b) = up {
            let base = b.bind(py).get();
            let bt = base.get();
            if grad_mode && bt.requires_grad() && bt.is_leaf() {
                return Err(PyRuntimeError::new_err(format!(
                    "a view of a leaf tensor that requires grad is used in an in-place \
                     operation ({name}); change it under `with flow.no_grad():`"
                )));
            }
            up = base.view_of().map(|v| v.base.clone_ref(py));
        }
        let global = global || t.is_global();
        let dst = t.clone();
        let value = run(py, global, move || fit(&dst, f(&dst)?, name))?;
        if value.requires_grad() {
            this.set(value);
        } else if let Some(owner) = this.grad_of() {
            owner.set_grad(Some(value.clone()));
            this.set(value);
        } else {
            run(py, global, move || {
                gflow_core::state_dict::assign(&t, &value)
            })?;
        }
        if let Some(view) = this.view_of() {
            // the base changes through the write-back, and refreshes its views (this one too)
            let (now, back) = (this.get(), view.back.clone());
            Self::update_boxed(
                view.base.bind(py),
                name,
                global,
                Box::new(move |b| back(b, &now)),
            )?;
        } else {
            Self::refresh_views(slf, global)?;
        }
        Ok(slf.clone())
    }

    /// Reads every live view of `slf` (and theirs) again from its new value. Not for a global
    /// tensor: which views are still alive depends on each process's garbage collection, and
    /// reading a view of a global tensor may be a collective, which every rank must run alike.
    fn refresh_views(slf: &Bound<'_, Self>, global: bool) -> PyResult<()> {
        let py = slf.py();
        let base = slf.get().get();
        if base.is_global() {
            return Ok(());
        }
        for v in slf.get().live_views(py) {
            let Some(read) = v.get().view_of().map(|w| w.read.clone()) else {
                continue;
            };
            let b = base.clone();
            let value = run(py, global, move || read(&b))?;
            v.get().set(value);
            Self::refresh_views(&v, global)?;
        }
        Ok(())
    }

    /// `self op= other` for a bitwise `op` (see [`crate::ops::bitwise`]): a result of a higher
    /// dtype category than `self` (a Bool tensor and an integer) is refused, as PyTorch's.
    fn bitwise_update<'py>(
        slf: &Bound<'py, Self>,
        name: &'static str,
        other: &Bound<'py, PyAny>,
        op: Bitwise,
    ) -> PyResult<Bound<'py, Self>> {
        let t = slf.get().get();
        let b = operand(slf.py(), &t, other)?;
        let dtype = bitwise_dtype(op, &t, &b)?;
        if t.dtype() == gflow::DType::Bool && dtype != gflow::DType::Bool {
            return Err(crate::error::to_py(gflow::Error::DTypeMismatch {
                expected: t.dtype(),
                got: dtype,
            }));
        }
        let global = b.is_global();
        Self::update(slf, name, global, move |t| bitwise(op, t, &b, dtype))
    }

    /// `self op= other` for a tensor or number `other` (times `alpha` when given).
    fn update_with<'py>(
        slf: &Bound<'py, Self>,
        name: &'static str,
        other: &Bound<'py, PyAny>,
        alpha: Option<&Bound<'py, PyAny>>,
        f: impl FnOnce(&Tensor, &Tensor) -> gflow::Result<Tensor> + Send,
    ) -> PyResult<Bound<'py, Self>> {
        let py = slf.py();
        let t = slf.get().get();
        let mut b = operand(py, &t, other)?;
        if let Some(alpha) = alpha {
            let a = operand(py, &b, alpha)?;
            let global = b.is_global() || a.is_global();
            b = run(py, global, move || b.mul(&a))?;
        }
        let global = b.is_global();
        Self::update(slf, name, global, move |t| f(t, &b))
    }
}

#[pymethods]
impl PyTensor {
    /// `x.add_(y, alpha=1)`: `x += alpha * y` in place; returns `x`.
    #[pyo3(signature = (other, *, alpha = None))]
    fn add_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        alpha: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        Self::update_with(slf, "add_", other, alpha, |a, b| a.add(b))
    }

    /// `x.sub_(y, alpha=1)`: `x -= alpha * y` in place; returns `x`.
    #[pyo3(signature = (other, *, alpha = None))]
    fn sub_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        alpha: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        Self::update_with(slf, "sub_", other, alpha, |a, b| a.sub(b))
    }

    /// `x.mul_(y)`: `x *= y` in place; returns `x`.
    fn mul_<'py>(slf: &Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        Self::update_with(slf, "mul_", other, None, |a, b| a.mul(b))
    }

    /// `x.div_(y)`: `x /= y` in place; returns `x`.
    fn div_<'py>(slf: &Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        Self::update_with(slf, "div_", other, None, |a, b| a.div(b))
    }

    fn __iadd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::update_with(slf, "+=", other, None, |a, b| a.add(b)).map(drop)
    }

    fn __isub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::update_with(slf, "-=", other, None, |a, b| a.sub(b)).map(drop)
    }

    fn __imul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::update_with(slf, "*=", other, None, |a, b| a.mul(b)).map(drop)
    }

    fn __itruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::update_with(slf, "/=", other, None, |a, b| a.div(b)).map(drop)
    }

    fn __iand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::bitwise_update(slf, "&=", other, Bitwise::And).map(drop)
    }

    fn __ior__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::bitwise_update(slf, "|=", other, Bitwise::Or).map(drop)
    }

    fn __ixor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::bitwise_update(slf, "^=", other, Bitwise::Xor).map(drop)
    }

    /// `x.bitwise_and_(y)`: `x &= y`; returns `x`.
    fn bitwise_and_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        Self::bitwise_update(slf, "bitwise_and_", other, Bitwise::And)
    }

    /// `x.bitwise_or_(y)`: `x |= y`; returns `x`.
    fn bitwise_or_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        Self::bitwise_update(slf, "bitwise_or_", other, Bitwise::Or)
    }

    /// `x.bitwise_xor_(y)`: `x ^= y`; returns `x`.
    fn bitwise_xor_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        Self::bitwise_update(slf, "bitwise_xor_", other, Bitwise::Xor)
    }

    /// `x.fill_(value)`: every element set to `value`; returns `x`.
    fn fill_<'py>(slf: &Bound<'py, Self>, value: f64) -> PyResult<Bound<'py, Self>> {
        Self::update(slf, "fill_", false, move |t| {
            Tensor::full_dtype(&[], value, t.dtype(), target_like(t))
        })
    }

    /// `x.normal_(mean=0, std=1)`: every element drawn from N(mean, std^2) (placement-invariant,
    /// as `flow.randn`: each rank draws only its own part); returns `x`.
    #[pyo3(signature = (mean = 0.0, std = 1.0))]
    fn normal_<'py>(slf: &Bound<'py, Self>, mean: f64, std: f64) -> PyResult<Bound<'py, Self>> {
        Self::update(slf, "normal_", false, move |t| {
            Tensor::randn_dtype(t.shape(), random_dtype(t, "normal_")?, own_target(t))?
                .mul_scalar(std)?
                .add_scalar(mean)
        })
    }

    /// `x.uniform_(a=0, b=1)`: every element drawn uniformly from [a, b) (placement-invariant);
    /// returns `x`.
    #[pyo3(signature = (a = 0.0, b = 1.0))]
    fn uniform_<'py>(slf: &Bound<'py, Self>, a: f64, b: f64) -> PyResult<Bound<'py, Self>> {
        Self::update(slf, "uniform_", false, move |t| {
            Tensor::rand_dtype(t.shape(), random_dtype(t, "uniform_")?, own_target(t))?
                .mul_scalar(b - a)?
                .add_scalar(a)
        })
    }

    /// `x.zero_()`: every element set to 0; returns `x`.
    fn zero_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        Self::fill_(slf, 0.0)
    }

    /// `x.copy_(src)`: the value of `src` (broadcast and cast to `x`'s shape and dtype, moved to
    /// `x`'s placement and SBP) written into `x`; returns `x`.
    fn copy_<'py>(slf: &Bound<'py, Self>, src: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        let t = slf.get().get();
        let s = operand(slf.py(), &t, src)?;
        let global = s.is_global();
        Self::update(slf, "copy_", global, move |t| {
            // another dtype is cast to this tensor's, as PyTorch's (floats to integers toward
            // zero, to Bool `!= 0`)
            let s = s.to_dtype(t.dtype())?;
            if t.is_global() && s.is_local() {
                // A local source stands for its whole value on every rank.
                let p = t.placement().cloned().ok_or_else(|| {
                    gflow::Error::Internal("a global tensor without a placement".into())
                })?;
                let sbp = gflow::NdSbp::broadcast(p.ndim());
                return s.to_global(&p, sbp);
            }
            Ok(s)
        })
    }

    /// `x.clamp_(min, max)`: values limited to `[min, max]` (numbers or tensors, as `clamp`)
    /// in place; returns `x`.
    #[pyo3(signature = (min = None, max = None))]
    fn clamp_<'py>(
        slf: &Bound<'py, Self>,
        min: Option<&Bound<'py, PyAny>>,
        max: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        let bounds = Bounds::of(slf.py(), &slf.get().get(), min, max)?;
        let global = bounds.is_global();
        Self::update(slf, "clamp_", global, move |t| bounds.apply(t))
    }

    /// As `clamp_`.
    #[pyo3(signature = (min = None, max = None))]
    fn clip_<'py>(
        slf: &Bound<'py, Self>,
        min: Option<&Bound<'py, PyAny>>,
        max: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        Self::clamp_(slf, min, max)
    }

    /// `x.masked_fill_(mask, value)`: `value` where `mask` is true, in place; returns `x`.
    fn masked_fill_<'py>(
        slf: &Bound<'py, Self>,
        mask: &PyTensor,
        value: f64,
    ) -> PyResult<Bound<'py, Self>> {
        let m = mask.get();
        check_bool_mask(&m)?;
        let global = m.is_global();
        Self::update(slf, "masked_fill_", global, move |t| {
            t.masked_fill(&m, value)
        })
    }
}

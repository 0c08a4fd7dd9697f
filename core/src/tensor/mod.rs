//! One `Tensor` type, local or global. A tensor is a cheap handle (`Arc`); its data sits behind a
//! lock so that optimizers can update parameters in place and every handle sees the update.
//!
//! A global tensor has a logical shape, a [`Placement`] and an [`NdSbp`]; on a rank of the
//! placement it holds that rank's component (its box of the logical tensor, or a partial
//! summand), elsewhere nothing.

mod convert;
mod create;
mod display;

pub use crate::device::Device;
pub use create::{IntoTarget, Target};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::autograd::GradFn;

use crate::boxing::Dist;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::sbp::NdSbp;
use crate::storage::Buffer;

#[derive(Debug)]
enum Kind {
    Local(Device),
    Global(Dist),
}

/// Shared, lockable storage of one component.
type Shared = Arc<RwLock<Buffer>>;

#[derive(Debug)]
struct TensorImpl {
    shape: Vec<usize>,
    dtype: DType,
    kind: Kind,
    /// `None` on ranks outside a global tensor's placement.
    data: Option<Shared>,
    /// Whether gradients flow to (a leaf) or through (a result) this tensor.
    requires_grad: AtomicBool,
    /// The accumulated gradient of a leaf (or of a result after [`Tensor::retain_grad`]).
    grad: Mutex<Option<Tensor>>,
    /// Whether [`Tensor::backward`] keeps this result's gradient (set by `retain_grad`).
    retains_grad: AtomicBool,
    /// How this tensor was computed, for the backward pass.
    grad_fn: Mutex<GradFn>,
    /// The tensor this one became by [`Tensor::become_tensor`]: every handle reads through it.
    next: OnceLock<Tensor>,
}

impl TensorImpl {
    fn new(shape: Vec<usize>, dtype: DType, kind: Kind, data: Option<Shared>) -> TensorImpl {
        TensorImpl {
            shape,
            dtype,
            kind,
            data,
            requires_grad: AtomicBool::new(false),
            grad: Mutex::new(None),
            retains_grad: AtomicBool::new(false),
            grad_fn: Mutex::new(GradFn::Leaf),
            next: OnceLock::new(),
        }
    }
}

/// A local or global tensor.
#[derive(Clone, Debug)]
pub struct Tensor(Handle);

/// A shared tensor that follows in-place conversions: it dereferences to the last tensor of
/// its `next` chain (usually itself), so every handle sees a parameter converted by
/// `Module::to_global` in place.
#[derive(Clone, Debug)]
struct Handle(Arc<TensorImpl>);

impl std::ops::Deref for Handle {
    type Target = TensorImpl;
    fn deref(&self) -> &TensorImpl {
        let mut t = &*self.0;
        while let Some(n) = t.next.get() {
            t = &n.0.0;
        }
        t
    }
}

impl Handle {
    fn new(imp: TensorImpl) -> Handle {
        Handle(Arc::new(imp))
    }

    /// The tensor's parts when this is its only handle and it was never converted in place.
    fn try_unwrap(self) -> std::result::Result<TensorImpl, Handle> {
        if self.0.next.get().is_some() {
            return Err(self);
        }
        Arc::try_unwrap(self.0).map_err(Handle)
    }
}

impl Tensor {
    fn local_from(data: Buffer, shape: Vec<usize>, device: Device) -> Tensor {
        Tensor(Handle::new(TensorImpl::new(
            shape,
            data.dtype(),
            Kind::Local(device),
            Some(Arc::new(RwLock::new(data))),
        )))
    }

    fn global_from(data: Option<Buffer>, shape: Vec<usize>, dtype: DType, dist: Dist) -> Tensor {
        Tensor(Handle::new(TensorImpl::new(
            shape,
            dtype,
            Kind::Global(dist),
            data.map(|d| Arc::new(RwLock::new(d))),
        )))
    }

    /// Wraps this rank's component of a global tensor without communication: `component` is this
    /// rank's box of the logical tensor under `dist` (or a partial summand), `None` off the
    /// placement. Operators use it to wrap a local kernel's output with the inferred SBP; the
    /// caller guarantees the ranks' components form a valid layout.
    ///
    /// # Errors
    /// `SbpAxesMismatch`/`SplitDimOutOfRange` for a `dist` that does not fit `shape`;
    /// `DataShapeMismatch` when the component's size is not that of this rank's box, or a
    /// component is given (or missing) on a rank outside (inside) the placement.
    pub fn from_component(
        component: Option<Buffer>,
        shape: &[usize],
        dtype: DType,
        dist: Dist,
    ) -> Result<Tensor> {
        dist.nd_sbp.check(&dist.placement, shape.len())?;
        let rank = crate::env::current().rank();
        let want = dist
            .placement
            .index_of(rank)
            .map(|i| crate::shape::region_shape(&dist.region_of_index(shape, i)));
        match (&component, &want) {
            (Some(c), Some(w)) if c.len() == crate::shape::numel(w) && c.dtype() == dtype => {}
            (None, None) => {}
            (Some(c), Some(_)) if c.dtype() != dtype => {
                return Err(Error::DTypeMismatch {
                    expected: dtype,
                    got: c.dtype(),
                });
            }
            _ => {
                return Err(Error::DataShapeMismatch {
                    len: component.as_ref().map_or(0, Buffer::len),
                    shape: want.unwrap_or_default(),
                });
            }
        }
        Ok(Tensor::global_from(component, shape.to_vec(), dtype, dist))
    }

    /// The logical shape (for a global tensor, the global shape).
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.0.shape.len()
    }

    /// Number of logical elements.
    pub fn numel(&self) -> usize {
        self.0.shape.iter().product()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Whether this is a global tensor.
    pub fn is_global(&self) -> bool {
        matches!(self.0.kind, Kind::Global(_))
    }

    /// Whether this is a local tensor.
    pub fn is_local(&self) -> bool {
        !self.is_global()
    }

    /// The SBP of a global tensor, `None` for a local one.
    pub fn sbp(&self) -> Option<&NdSbp> {
        self.dist().map(|d| &d.nd_sbp)
    }

    /// The placement of a global tensor, `None` for a local one.
    pub fn placement(&self) -> Option<&Placement> {
        self.dist().map(|d| &d.placement)
    }

    /// The device of a local tensor, or of a global tensor's components.
    pub fn device(&self) -> Device {
        match &self.0.kind {
            Kind::Local(d) => *d,
            // Global tensors are only built on placements whose device resolved.
            Kind::Global(d) => {
                Device::for_placement(d.placement.device_type()).unwrap_or(Device::Cpu)
            }
        }
    }

    /// Whether every rank computes this tensor on the CPU: a local tensor on the CPU, or a
    /// global one whose placement resolves to the CPU on each of its ranks. Paths that exist
    /// only on the CPU (fused kernels) branch on this, never on this rank's own device, so
    /// every rank of a mixed placement (`GFLOW_DEVICE_OVERRIDE`: some ranks on a GPU, some on
    /// the CPU) runs the same operators and the same boxing.
    pub(crate) fn computes_on_cpu(&self) -> bool {
        match &self.0.kind {
            Kind::Local(d) => *d == Device::Cpu,
            Kind::Global(d) => {
                let ty = d.placement.device_type();
                // Without an override every rank resolves the placement's type alike.
                if std::env::var_os("GFLOW_DEVICE_OVERRIDE").is_none() {
                    return ty == crate::placement::DeviceType::Cpu;
                }
                d.placement.ranks().iter().all(|&r| {
                    crate::env::device_type_of(r, ty) == crate::placement::DeviceType::Cpu
                })
            }
        }
    }

    /// The layout of a global tensor.
    pub fn dist(&self) -> Option<&Dist> {
        match &self.0.kind {
            Kind::Global(d) => Some(d),
            Kind::Local(_) => None,
        }
    }

    /// Whether this rank holds a component (always true for a local tensor).
    pub fn has_local(&self) -> bool {
        self.0.data.is_some()
    }

    /// Reads this rank's component (`None` outside the placement).
    pub(crate) fn read(&self) -> Option<RwLockReadGuard<'_, Buffer>> {
        self.0
            .data
            .as_ref()
            .map(|d| d.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Writes this rank's component (`None` outside the placement).
    pub(crate) fn write(&self) -> Option<RwLockWriteGuard<'_, Buffer>> {
        self.0
            .data
            .as_ref()
            .map(|d| d.write().unwrap_or_else(|p| p.into_inner()))
    }

    /// The backend holding this rank's component in device memory (`None`: it is only in host
    /// memory, or this rank holds none). A GPU operator's result stays on its device until the
    /// host reads it, so a chain of GPU operators never copies through the host.
    pub fn resident_on(&self) -> Option<&'static str> {
        self.read().and_then(|b| b.resident_on())
    }

    /// Whether this rank's component has a copy in host memory (reading it costs no download).
    pub fn has_host_copy(&self) -> bool {
        self.read().is_some_and(|b| b.has_host_copy())
    }

    /// Whether two handles refer to the same tensor.
    pub fn same_as(&self, other: &Tensor) -> bool {
        std::ptr::eq::<TensorImpl>(&*self.0, &*other.0)
    }

    /// A new handle with the same shape, layout and storage but no autograd history: it does not
    /// require gradients, and in-place updates of either are seen by both.
    pub fn detach(&self) -> Tensor {
        let kind = match &self.0.kind {
            Kind::Local(d) => Kind::Local(*d),
            Kind::Global(d) => Kind::Global(d.clone()),
        };
        Tensor(Handle::new(TensorImpl::new(
            self.0.shape.clone(),
            self.0.dtype,
            kind,
            self.0.data.clone(),
        )))
    }

    /// Marks this tensor as a leaf whose gradient [`Tensor::backward`] accumulates (or stops
    /// that); returns the handle, so `Tensor::randn(..)?.set_requires_grad(true)` reads well.
    pub fn set_requires_grad(&self, on: bool) -> Tensor {
        self.0.requires_grad.store(on, Ordering::Relaxed);
        self.clone()
    }

    /// Whether gradients are computed for this tensor (a marked leaf, or a result of operations
    /// on one while gradients were enabled).
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// Whether this tensor was made by the user rather than recorded from an operation.
    pub fn is_leaf(&self) -> bool {
        matches!(*self.grad_fn_lock(), GradFn::Leaf)
    }

    /// Keeps this tensor's gradient in [`Tensor::grad`] after backward passes, as PyTorch's
    /// `retain_grad`: a result of recorded operations (not a leaf) otherwise passes its gradient
    /// on and keeps none. A leaf keeps its gradient anyway (nothing changes). The kept gradient
    /// has this tensor's placement and SBP and accumulates over backward passes, as a leaf's.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?.set_requires_grad(true);
    /// let y = x.mul(&x)?;                 // y = x², a result
    /// y.retain_grad()?;
    /// y.mul(&x)?.sum([0], false)?.backward()?;   // d(sum y·x)/dy = x
    /// assert_eq!(y.grad().unwrap().to_vec::<f32>()?, vec![1.0, 2.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` when the tensor does not require a gradient (there would be none to
    /// keep).
    pub fn retain_grad(&self) -> Result<()> {
        if !self.requires_grad() {
            return Err(Error::InvalidArgument {
                op: "retain_grad",
                reason: "the tensor does not require grad, so it gets no gradient to keep".into(),
            });
        }
        if !self.is_leaf() {
            self.0.retains_grad.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether [`Tensor::retain_grad`] was called on this result (false for a leaf, as
    /// PyTorch's `retains_grad`).
    pub fn retains_grad(&self) -> bool {
        self.0.retains_grad.load(Ordering::Relaxed)
    }

    /// The gradient accumulated by [`Tensor::backward`], with this tensor's placement and SBP.
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .grad
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces (or clears) the accumulated gradient.
    pub fn set_grad(&self, grad: Option<Tensor>) {
        *self.0.grad.lock().unwrap_or_else(|p| p.into_inner()) = grad;
    }

    pub(crate) fn grad_fn_lock(&self) -> std::sync::MutexGuard<'_, GradFn> {
        self.0.grad_fn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A key naming this tensor (not its storage) while it lives.
    pub(crate) fn key(&self) -> usize {
        std::ptr::from_ref::<TensorImpl>(&*self.0) as usize
    }

    /// Makes this tensor `new` for every handle, in place: shape, dtype, layout, data, gradient
    /// and autograd state are from then on `new`'s (as PyTorch's `param.data = ...`). What
    /// `Module::to_global` uses so that optimizers built before the conversion update the
    /// converted parameters. This tensor's own data is freed when no other handle shares it.
    ///
    /// # Errors
    /// `InvalidArgument` when `new` is this tensor or already follows it (a cycle).
    pub fn become_tensor(&self, new: &Tensor) -> Result<()> {
        let mut t = &*new.0;
        loop {
            if std::ptr::eq(t, &*self.0) {
                return Err(Error::InvalidArgument {
                    op: "Tensor::become_tensor",
                    reason: "a tensor cannot become itself or a tensor that follows it".into(),
                });
            }
            match t.next.get() {
                Some(n) => t = &n.0.0,
                None => break,
            }
        }
        let old: &TensorImpl = &self.0;
        if old.next.set(new.clone()).is_err() {
            return Err(Error::Internal(
                "a tensor's forward link was set twice".into(),
            ));
        }
        if let Some(d) = &old.data
            && Arc::strong_count(d) == 1
        {
            let mut w = d.write().unwrap_or_else(|p| p.into_inner());
            *w = crate::storage::HostData::filled(old.dtype, 0, 0.0).into();
        }
        Ok(())
    }
}

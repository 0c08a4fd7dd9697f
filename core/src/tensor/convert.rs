//! Conversions: `to_global` (local -> global and global -> global boxing), `to_local`, `to_vec`.

use crate::autograd::{partial_to_broadcast, record};
use crate::boxing::{self, Dist, exec, from_local};
use std::borrow::Cow;

use crate::dtype::{DType, Element};
use crate::env;
use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::sbp::NdSbp;
use crate::shape::region_shape;
use crate::storage::{Buffer, HostData};

use super::{Device, Tensor};

/// The gradient of a local tensor that became a component of a global one under `dist`, from
/// the global gradient `g`: this rank's box of `g` (the whole of it on broadcast and partial
/// axes, as OneFlow gives), zeros outside the placement.
fn local_grad(
    x: &Tensor,
    g: &Tensor,
    dist: &Dist,
    source: Option<&crate::shape::Region>,
    balanced: bool,
) -> Result<Tensor> {
    let p = &dist.placement;
    let sbp = if balanced {
        partial_to_broadcast(&dist.nd_sbp)
    } else {
        NdSbp::broadcast(p.ndim())
    };
    let boxed = g.to_global(p, sbp)?;
    let Some(region) = source else {
        return Tensor::full_dtype(x.shape(), 0.0, x.dtype(), Device::Cpu);
    };
    let mut local = boxed.to_local()?;
    if !balanced {
        for (d, r) in region.iter().enumerate() {
            local = local.narrow(d, r.start, r.len())?;
        }
    }
    Ok(local)
}

/// Boxes this rank's component `data` of a tensor of `shape` laid out as `src` to `dist`.
fn rebox(
    shape: &[usize],
    dtype: DType,
    src: &Dist,
    dist: Dist,
    data: Option<Cow<'_, HostData>>,
) -> Result<Tensor> {
    let plan = boxing::plan(shape, dtype.size(), src, &dist)?;
    let out = exec::execute(&plan, shape, dtype, data, env::current().comm())?;
    Ok(Tensor::global_from(
        out.map(Buffer::from),
        shape.to_vec(),
        dtype,
        dist,
    ))
}

impl Tensor {
    /// [`Tensor::to_global`] to `dist` for a global tensor that is not recorded for autograd,
    /// consuming it: when this is the only handle to the only copy of its data, boxing works on
    /// that data in place instead of copying it (the gradients' all-reduce).
    pub(crate) fn into_global(self, dist: &Dist) -> Result<Tensor> {
        let Some(src) = self.dist().cloned().filter(|_| !self.requires_grad()) else {
            return self.to_global(&dist.placement, dist.nd_sbp.clone());
        };
        let (shape, dtype) = (self.shape().to_vec(), self.dtype());
        let data = match self.0.try_unwrap() {
            Err(shared) => return Tensor(shared).to_global(&dist.placement, dist.nd_sbp.clone()),
            Ok(imp) => imp
                .data
                .map(|d| match std::sync::Arc::try_unwrap(d) {
                    Ok(lock) => lock
                        .into_inner()
                        .unwrap_or_else(|p| p.into_inner())
                        .into_host(),
                    Err(shared) => shared
                        .read()
                        .unwrap_or_else(|p| p.into_inner())
                        .host()
                        .cloned(),
                })
                .transpose()?,
        };
        rebox(&shape, dtype, &src, dist.clone(), data.map(Cow::Owned))
    }

    /// Converts to a global tensor on `placement` with `sbp`.
    ///
    /// From a local tensor, the ranks' local tensors are the components: `split(d)` concatenates
    /// them along `d` (sizes may differ per rank), `broadcast` takes the data of the first rank of
    /// each broadcast group, `partial_*` treats them as summands (or min/max operands). From a
    /// global tensor it boxes to the new placement and SBP, moving only what must move; the value
    /// is unchanged. Every rank of the world calls it (SPMD).
    ///
    /// # Errors
    /// `SbpAxesMismatch`, `SplitDimOutOfRange`, `RankOutOfWorld`, `LocalShapeMismatch`,
    /// `DTypeMismatch`, `BackendUnavailable`; communication failures.
    pub fn to_global(&self, placement: &Placement, sbp: impl Into<NdSbp>) -> Result<Tensor> {
        let sbp = sbp.into();
        crate::profile::scope(|| "boxing".into(), || self.to_global_now(placement, sbp))
    }

    fn to_global_now(&self, placement: &Placement, sbp: NdSbp) -> Result<Tensor> {
        let dist = Dist::new(placement.clone(), sbp);
        let env = env::current();
        placement.check_world(env.world_size())?;
        // The SBP count is known everywhere; split dims are checked against the shape that every
        // rank agrees on (the global shape, or the exchanged local shapes).
        if dist.nd_sbp.len() != placement.ndim() {
            dist.nd_sbp.check(placement, 0)?;
        }
        Device::for_placement(placement.device_type())?;
        match self.dist() {
            None => {
                let data = self.read().ok_or(Error::WrongKind {
                    op: "to_global",
                    needs: "local",
                })?;
                let made = from_local::from_local((data.host()?, self.shape()), &dist, env.comm())?;
                drop(data);
                let out = Tensor::global_from(
                    made.component.map(Buffer::from),
                    made.shape,
                    made.dtype,
                    dist.clone(),
                );
                let (source, balanced) = (made.source, made.balanced);
                record(Ok(out), "to_global", &[self], move |c, g| {
                    Ok(vec![Some(local_grad(
                        &c.inputs[0],
                        g,
                        &dist,
                        source.as_ref(),
                        balanced,
                    )?)])
                })
            }
            // The same layout: nothing moves, and the result shares this tensor's storage (as
            // OneFlow and DTensor give back the tensor itself), so a GPU component is neither
            // downloaded nor copied.
            Some(src) if *src == dist => {
                let same = Tensor(super::Handle::new(super::TensorImpl::new(
                    self.shape().to_vec(),
                    self.dtype(),
                    super::Kind::Global(dist),
                    self.0.data.clone(),
                )));
                record(Ok(same), "to_global", &[self], |_, g| {
                    Ok(vec![Some(g.clone())])
                })
            }
            Some(src) => {
                let data = self.read();
                let host = data.as_deref().map(Buffer::host).transpose()?;
                let out = rebox(
                    self.shape(),
                    self.dtype(),
                    src,
                    dist,
                    host.map(Cow::Borrowed),
                );
                drop(data);
                let back = src.clone();
                record(out, "to_global", &[self], move |_, g| {
                    let sbp = partial_to_broadcast(&back.nd_sbp);
                    Ok(vec![Some(g.to_global(&back.placement, sbp)?)])
                })
            }
        }
    }

    /// This rank's component of a global tensor, as a local tensor sharing its storage (a local
    /// tensor is returned as is).
    ///
    /// # Errors
    /// `NotInPlacement` on a rank outside the placement.
    pub fn to_local(&self) -> Result<Tensor> {
        let Some(dist) = self.dist() else {
            return Ok(self.clone());
        };
        let rank = env::current().rank();
        let (Some(i), Some(data)) = (dist.placement.index_of(rank), self.0.data.as_ref()) else {
            return Err(Error::NotInPlacement {
                rank,
                placement: dist.placement.to_string(),
            });
        };
        let local = Tensor(super::Handle::new(super::TensorImpl::new(
            region_shape(&dist.region_of_index(self.shape(), i)),
            self.dtype(),
            super::Kind::Local(self.device()),
            Some(data.clone()),
        )));
        // The gradients of the components are the components of the gradient.
        record(Ok(local), "to_local", &[self], |c, g| {
            let x = &c.inputs[0];
            let data = g.read().map(|d| d.clone());
            let dist = x
                .dist()
                .cloned()
                .ok_or(Error::Internal("to_local of a local".into()))?;
            Ok(vec![Some(Tensor::from_component(
                data,
                x.shape(),
                x.dtype(),
                dist,
            )?)])
        })
    }

    /// This local tensor on `device` (a copy there; itself when it is already there).
    /// Operators never move data between devices on their own: inputs on different devices
    /// are `DeviceMismatch`, and `to_device` is how one is moved. Gradients flow back to the
    /// source device.
    ///
    /// ```
    /// # use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?;
    /// assert_eq!(x.to_device(Device::Cpu)?.to_vec::<f32>()?, vec![1.0, 2.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `WrongKind` for a global tensor; `BackendUnavailable` naming `device` when this process
    /// has no such device.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if self.is_global() {
            return Err(Error::WrongKind {
                op: "to_device",
                needs: "local",
            });
        }
        let from = self.device();
        if device == from {
            return Ok(self.clone());
        }
        let data = self.to_host()?;
        let moved = Tensor::from_vec_data(data.into(), self.shape(), device);
        record(moved, "to_device", &[self], move |_, g| {
            Ok(vec![Some(g.to_device(from)?)])
        })
    }

    /// The whole logical value, row-major, as `T`, the tensor's element type (`f32` for
    /// `F32`, `bool` for `Bool`, ...). For a global tensor this is a collective on its
    /// placement (like OneFlow's `numpy()`: box to broadcast, take the local copy).
    /// [`Tensor::to_vec_cast`] converts to another type.
    ///
    /// ```
    /// use gflow_core::{DType, Device, Error, Tensor};
    /// let x = Tensor::from_vec(vec![1.5f32, -2.0], &[2], Device::Cpu)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![1.5, -2.0]);
    /// assert!(matches!(x.to_vec::<f64>(), Err(Error::DTypeMismatch { .. })));
    /// assert_eq!(x.to_vec_cast::<i64>()?, vec![1, -2]);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// `DTypeMismatch` when `T` is not the element type (checked before any communication, on
    /// every rank alike); `NotInPlacement` on a rank outside the placement; communication
    /// failures.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                expected: self.dtype(),
                got: T::DTYPE,
            });
        }
        self.to_vec_cast()
    }

    /// [`Tensor::to_vec`] converted to any element type `T`, as PyTorch casts (floats to
    /// integers truncate, to `bool` is `!= 0`).
    ///
    /// # Errors
    /// As [`Tensor::to_vec`], less the dtype check.
    pub fn to_vec_cast<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.to_host()?.to_vec())
    }

    /// The whole logical value as host data (see [`Tensor::to_vec`]).
    ///
    /// # Errors
    /// As [`Tensor::to_vec`].
    pub fn to_host(&self) -> Result<HostData> {
        let Some(dist) = self.dist() else {
            return match self.read() {
                Some(d) => d.host().cloned(),
                None => Ok(HostData::F32(vec![])),
            };
        };
        let rank = env::current().rank();
        if !dist.placement.contains(rank) {
            return Err(Error::NotInPlacement {
                rank,
                placement: dist.placement.to_string(),
            });
        }
        let b = NdSbp::broadcast(dist.placement.ndim());
        let full = if dist.nd_sbp == b {
            self.clone()
        } else {
            self.to_global(&dist.placement, b)?
        };
        let data = full.read().ok_or(Error::NotInPlacement {
            rank,
            placement: dist.placement.to_string(),
        })?;
        data.host().cloned()
    }
}

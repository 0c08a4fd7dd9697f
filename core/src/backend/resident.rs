//! [`Resident`]: a device backend whose results stay on the device. Its [`Kernels`](super::Kernels)
//! methods are generated from the kernel list in `backend.rs`; this file holds what they share.

use std::sync::{Arc, Mutex};

use super::Backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::{Buffer, DeviceBuffer, HostData};

/// A device [`Backend`] seen as [`Kernels`](super::Kernels): an input already on this device is
/// used where it is; a host input is uploaded and the upload kept in its buffer for the next
/// kernel; results stay on the device until the host reads them.
pub struct Resident<B> {
    backend: Arc<B>,
    /// The device's name in results' [`DeviceBuffer::backend`] (`wgpu:0`).
    label: &'static str,
}

impl<B: Backend + 'static> Resident<B> {
    /// Wraps a device backend (its results say they live on its backend's name).
    pub fn new(backend: B) -> Resident<B> {
        let label = backend.name();
        Resident {
            backend: Arc::new(backend),
            label,
        }
    }

    /// Wraps the backend of device `ordinal` (its results live on `wgpu:1`, `cuda:0`, ...).
    pub fn on(backend: B, ordinal: usize) -> Resident<B> {
        let label = device_label(&format!("{}:{ordinal}", backend.name()));
        Resident {
            backend: Arc::new(backend),
            label,
        }
    }

    /// `x` on this device: its copy there if it has one, else an upload (a copy on another
    /// device of the same backend type is not this device's).
    pub(super) fn input(&self, x: &Buffer) -> Result<Arc<dyn DeviceBuffer>> {
        if let Some(d) = x.device_copy()
            && d.as_any()
                .downcast_ref::<Held<B>>()
                .is_some_and(|h| Arc::ptr_eq(&h.backend, &self.backend))
        {
            return Ok(d.clone());
        }
        let held: Arc<dyn DeviceBuffer> = Arc::new(Held {
            backend: self.backend.clone(),
            label: self.label,
            storage: self.backend.upload(x.host()?)?,
        });
        x.keep_device_copy(held.clone());
        Ok(held)
    }

    /// Whether the device holds every one of `xs`' dtypes (else the kernel runs on the host).
    pub(super) fn holds(&self, xs: &[&Buffer]) -> bool {
        xs.iter().all(|x| self.backend.stores(x.dtype()))
    }

    /// Whether the device holds and computes every one of `xs`' dtypes (else the arithmetic
    /// runs on the host: integers on wgpu, f64 on wgpu).
    pub(super) fn computes_all(&self, xs: &[&Buffer]) -> bool {
        xs.iter()
            .all(|x| self.backend.stores(x.dtype()) && self.backend.computes(x.dtype()))
    }

    /// Whether the device casts `x` (it holds its dtype and [`Backend::casts`] from it).
    pub(super) fn converts(&self, x: &Buffer) -> bool {
        self.backend.stores(x.dtype()) && self.backend.casts(x.dtype())
    }

    /// Whether a kernel computing on the 16-bit float `x` runs on the device in f32: the device
    /// holds and casts its dtype and computes f32, but not its dtype itself.
    pub(super) fn widens(&self, x: &Buffer) -> bool {
        let (d, b) = (x.dtype(), &self.backend);
        d.is_half()
            && b.stores(d)
            && b.casts(d)
            && !b.computes(d)
            && b.stores(DType::F32)
            && b.computes(DType::F32)
    }

    /// The backend's storage inside a buffer made by [`Resident::input`].
    pub(super) fn storage(d: &Arc<dyn DeviceBuffer>) -> Result<&B::Storage> {
        d.as_any()
            .downcast_ref::<Held<B>>()
            .map(|h| &h.storage)
            .ok_or_else(|| Error::Internal("a device buffer of another backend".into()))
    }

    /// [`Backend::adam_step`] on buffers of this device that are theirs alone (see
    /// [`Buffer::device_mut`]); `false`, with nothing written, otherwise.
    pub(super) fn adam_in_place(
        &self,
        p: &mut Buffer,
        g: &Buffer,
        [m, v]: [&mut Buffer; 2],
        h: &super::AdamStep,
    ) -> Result<bool> {
        let dtype = p.dtype();
        let same = [g, &*m, &*v]
            .iter()
            .all(|b| b.dtype() == dtype && b.len() == p.len());
        if !same || !self.computes_all(&[p]) {
            return Ok(false);
        }
        let g = self.input(g)?;
        let g = Self::storage(&g)?;
        let mine = |b| held_mut(b, &self.backend);
        let (Some(p), Some(m), Some(v)) = (mine(p), mine(m), mine(v)) else {
            return Ok(false);
        };
        self.backend.adam_step(p, g, [m, v], h)
    }

    /// The backend this wraps (for its own methods beyond [`Kernels`](super::Kernels)).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// A result of the backend as a buffer living on this device (what every kernel returns).
    pub fn keep(&self, out: B::Storage) -> Buffer {
        let (dtype, len) = (self.backend.dtype(&out), self.backend.len(&out));
        Buffer::on_device(
            dtype,
            len,
            Arc::new(Held {
                backend: self.backend.clone(),
                label: self.label,
                storage: out,
            }),
        )
    }
}

/// A buffer of backend `B`, with the backend that downloads it.
struct Held<B: Backend> {
    backend: Arc<B>,
    label: &'static str,
    storage: B::Storage,
}

/// The one `'static` copy of a device's label (a handful per process: one per device).
fn device_label(label: &str) -> &'static str {
    static LABELS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let Ok(mut labels) = LABELS.lock() else {
        return "device";
    };
    if let Some(l) = labels.iter().find(|l| **l == label) {
        return l;
    }
    let l: &'static str = Box::leak(label.to_string().into_boxed_str());
    labels.push(l);
    l
}

/// `b`'s storage on `backend`'s device for writing in place, where no other buffer shares it.
fn held_mut<'a, B: Backend + 'static>(
    b: &'a mut Buffer,
    backend: &Arc<B>,
) -> Option<&'a mut B::Storage> {
    let held = b.device_mut()?.as_any_mut().downcast_mut::<Held<B>>()?;
    Arc::ptr_eq(&held.backend, backend).then_some(&mut held.storage)
}

impl<B: Backend + 'static> DeviceBuffer for Held<B> {
    fn backend(&self) -> &'static str {
        self.label
    }
    fn download(&self) -> Result<HostData> {
        self.backend.download(&self.storage)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

//! Devices, one per rank as in OneFlow: a [`Device`] names a device type and an ordinal, a
//! process computes on its own device of each type (ordinal `LOCAL_RANK % count`, or the one
//! `GFLOW_DEVICE_OVERRIDE` pins), and [`devices`] lists what this process can use.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::backend::{Kernels, kernels_at};
use crate::error::{Error, Result};
use crate::placement::DeviceType;

/// Where a local tensor (or a global tensor's component) lives and is computed.
///
/// `Device::Wgpu` and `Device::Cuda` name this process's own device of that type (ordinal
/// `LOCAL_RANK % count`, `count` the devices of that type on the host, unless
/// `GFLOW_DEVICE_OVERRIDE` pins another); [`Device::wgpu`] and [`Device::cuda`] name an
/// ordinal. Two values are equal when they name the same device, so `Device::Wgpu` equals
/// `Device::wgpu(0)` on a process whose own wgpu ordinal is 0.
///
/// ```
/// # use gflow_core::Device;
/// assert_eq!(Device::cuda(1).to_string(), "cuda:1");
/// assert_eq!(Device::wgpu(0).ordinal(), 0);
/// assert_eq!(Device::Cpu.to_string(), "cpu");
/// assert_ne!(Device::cuda(0), Device::cuda(1));
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Device {
    /// Host memory, computed by the CPU backend.
    Cpu,
    /// This process's own wgpu device (results stay in device memory).
    Wgpu,
    /// This process's own CUDA device (results stay in device memory).
    Cuda,
    /// The wgpu adapter of this ordinal ([`Device::wgpu`]).
    WgpuOrdinal(usize),
    /// The CUDA device of this ordinal ([`Device::cuda`]).
    CudaOrdinal(usize),
}

impl Device {
    /// The wgpu adapter of ordinal `n` (adapters in [`devices`] order: discrete GPUs first).
    pub fn wgpu(n: usize) -> Device {
        Device::WgpuOrdinal(n)
    }

    /// The CUDA device of ordinal `n` (as CUDA numbers them under `CUDA_VISIBLE_DEVICES`).
    pub fn cuda(n: usize) -> Device {
        Device::CudaOrdinal(n)
    }

    /// The device type whose kernels compute on this device.
    pub fn device_type(self) -> DeviceType {
        match self {
            Device::Cpu => DeviceType::Cpu,
            Device::Wgpu | Device::WgpuOrdinal(_) => DeviceType::Wgpu,
            Device::Cuda | Device::CudaOrdinal(_) => DeviceType::Cuda,
        }
    }

    /// The ordinal: 0 for the CPU, the named one, or this process's own for `Device::Wgpu` and
    /// `Device::Cuda` (0 where the host has no device of that type).
    pub fn ordinal(&self) -> usize {
        match *self {
            Device::Cpu => 0,
            Device::WgpuOrdinal(n) | Device::CudaOrdinal(n) => n,
            Device::Wgpu | Device::Cuda => own_ordinal(self.device_type()).unwrap_or(0),
        }
    }

    /// The device a rank uses for a placement's device type: `cpu`, `wgpu` and `cuda` as named,
    /// `gpu` CUDA where a driver and device are present, else wgpu; always this process's own
    /// device of the type. `GFLOW_DEVICE_OVERRIDE` (`RANK:TYPE[:ORDINAL],...`, e.g.
    /// `0:cuda:1,1:wgpu:0,2:cpu`) replaces type and ordinal for the ranks it names, so one
    /// machine can host a mixed cluster.
    ///
    /// # Errors
    /// `BackendUnavailable` when the device type has no backend, or this rank's ordinal no
    /// device; `Environment` for a malformed override.
    pub fn for_placement(t: DeviceType) -> Result<Device> {
        let t = crate::env::current()
            .device_override()?
            .map_or(t, |(t, _)| t);
        match t {
            DeviceType::Cpu => Ok(Device::Cpu),
            DeviceType::Wgpu => Device::Wgpu.kernels().map(|_| Device::Wgpu),
            DeviceType::Cuda => Device::Cuda.kernels().map(|_| Device::Cuda),
            DeviceType::Gpu => match Device::Cuda.kernels() {
                Ok(_) => Ok(Device::Cuda),
                Err(cuda) => Device::Wgpu
                    .kernels()
                    .map(|_| Device::Wgpu)
                    .map_err(|wgpu| Error::BackendUnavailable {
                        device: "gpu".into(),
                        reason: format!("neither CUDA ({cuda}) nor wgpu ({wgpu}) is usable here"),
                    }),
            },
        }
    }

    /// The kernels that compute on this device (its backend opened on first use).
    ///
    /// # Errors
    /// `BackendUnavailable` naming the device (`wgpu:1`) when it does not exist here.
    pub fn kernels(self) -> Result<Arc<dyn Kernels>> {
        let t = self.device_type();
        let ordinal = match self {
            Device::Wgpu | Device::Cuda => own_ordinal(t)?,
            d => d.ordinal(),
        };
        kernels_at(t, ordinal)
    }

    /// The same device with its ordinal resolved (`Device::Wgpu` -> `Device::wgpu(n)`).
    fn key(self) -> (DeviceType, usize) {
        (self.device_type(), self.ordinal())
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        self.device_type() == other.device_type()
            && (matches!(
                (self, other),
                (Device::Wgpu, Device::Wgpu) | (Device::Cuda, Device::Cuda)
            ) || self.key() == other.key())
    }
}

impl Eq for Device {}

impl Hash for Device {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.key().hash(h);
    }
}

impl fmt::Display for Device {
    /// `cpu`, `wgpu:0`, `cuda:1` (`Device::Wgpu` prints this process's own ordinal).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            d => write!(f, "{}:{}", d.device_type(), d.ordinal()),
        }
    }
}

/// This process's ordinal for `t` (`Wgpu` or `Cuda`): the one `GFLOW_DEVICE_OVERRIDE` pins for
/// this rank, else `LOCAL_RANK % count` (0 without a device: opening it then says why).
///
/// # Errors
/// `Environment` for a malformed override.
pub fn own_ordinal(t: DeviceType) -> Result<usize> {
    let env = crate::env::current();
    if let Some((o, Some(n))) = env.device_override()?
        && (o == t || o == DeviceType::Gpu)
    {
        return Ok(n);
    }
    let count = crate::backend::device_list(t).len();
    Ok(if count == 0 {
        0
    } else {
        env.local_rank() % count
    })
}

/// What kind of hardware a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// A GPU with its own memory.
    Discrete,
    /// A GPU sharing the host's memory.
    Integrated,
    /// A virtual GPU (a VM's).
    Virtual,
    /// A CPU, or a software rasterizer such as lavapipe.
    Cpu,
    /// Not reported.
    Other,
}

/// One device this process can use, as [`devices`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device type (`Cpu`, `Wgpu`, `Cuda`).
    pub device_type: DeviceType,
    /// Its ordinal among the devices of its type ([`Device::wgpu`], [`Device::cuda`]).
    pub ordinal: usize,
    /// The device's name, as its driver reports it.
    pub name: String,
    /// The API that drives it: `Vulkan`, `Metal`, `Dx12`, `Gl`, `CUDA`, or `host`.
    pub api: String,
    /// Discrete, integrated, virtual or CPU.
    pub kind: DeviceKind,
    /// Its memory in bytes, where the API reports it.
    pub memory: Option<u64>,
}

impl DeviceInfo {
    /// The [`Device`] value naming this device.
    pub fn device(&self) -> Device {
        match self.device_type {
            DeviceType::Wgpu => Device::wgpu(self.ordinal),
            DeviceType::Cuda => Device::cuda(self.ordinal),
            _ => Device::Cpu,
        }
    }
}

/// Every device this process can use: the CPU, then each wgpu adapter and each CUDA device of
/// the backends this build holds, by type and ordinal. Needs no `init()`.
///
/// ```
/// let all = gflow_core::devices();
/// assert_eq!(all[0].device(), gflow_core::Device::Cpu);
/// ```
pub fn devices() -> Vec<DeviceInfo> {
    let cpu = DeviceInfo {
        device_type: DeviceType::Cpu,
        ordinal: 0,
        name: format!(
            "{} CPU ({} threads)",
            std::env::consts::ARCH,
            std::thread::available_parallelism().map_or(1, usize::from)
        ),
        api: "host".into(),
        kind: DeviceKind::Cpu,
        memory: None,
    };
    let mut out = vec![cpu];
    for t in [DeviceType::Wgpu, DeviceType::Cuda] {
        out.extend(crate::backend::device_list(t).iter().cloned());
    }
    out
}

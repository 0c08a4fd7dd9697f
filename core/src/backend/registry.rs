//! Which GPU backends this build holds, their devices, and each device's kernels (opened once).

use std::sync::{Arc, Mutex, OnceLock};

use super::Kernels;
use crate::cpu::CpuBackend;
use crate::device::DeviceInfo;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placement::DeviceType;

/// Whether ranks computing on `device` can run arithmetic in `dtype`: everything but F64 on
/// wgpu (WGSL has no f64). Core refuses the rest on every rank of a placement before any
/// kernel runs (`Error::UnsupportedDType`); integers and 16-bit floats a GPU kernel does not
/// take run on the host copy.
pub fn device_computes(device: DeviceType, dtype: DType) -> bool {
    !(device == DeviceType::Wgpu && dtype == DType::F64)
}

/// Whether the backend named `name` (`wgpu`, `cuda`) must be present: `GFLOW_REQUIRE_BACKEND`
/// lists such names, comma-separated (CI sets `wgpu`, a GPU machine `wgpu,cuda`), so tests fail
/// instead of skipping where the backend belongs.
pub fn required(name: &str) -> bool {
    std::env::var("GFLOW_REQUIRE_BACKEND")
        .is_ok_and(|v| v.split(',').any(|n| n.trim().eq_ignore_ascii_case(name)))
}

/// Says that `test` skipped and why, on the process's real standard error: the test harness
/// captures `eprintln!` of passing tests, and a skip must be seen in every log.
pub fn say_skipped(test: &str, why: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\n!!! SKIPPED {test}: {why} !!!\n");
}

/// A GPU backend this build holds, found by core on first use (no `init()` needed): the
/// `gflow` crate submits one per backend feature with `inventory::submit!`.
pub struct BackendRegistration {
    /// The device type it computes for (`Wgpu` or `Cuda`).
    pub device: DeviceType,
    /// Opens the device of an ordinal (called once per process and ordinal).
    pub open: fn(usize) -> Result<Arc<dyn Kernels>>,
    /// The devices of this type on the host, by ordinal (called once per process).
    pub list: fn() -> Vec<DeviceInfo>,
}

inventory::collect!(BackendRegistration);

fn registration(device: DeviceType) -> Option<&'static BackendRegistration> {
    inventory::iter::<BackendRegistration>
        .into_iter()
        .find(|r| r.device == device)
}

/// The devices of type `device` on this host, by ordinal (empty without a backend or device;
/// listed once per process).
pub fn device_list(device: DeviceType) -> &'static [DeviceInfo] {
    static WGPU: OnceLock<Vec<DeviceInfo>> = OnceLock::new();
    static CUDA: OnceLock<Vec<DeviceInfo>> = OnceLock::new();
    let cell = match device {
        DeviceType::Wgpu => &WGPU,
        DeviceType::Cuda => &CUDA,
        DeviceType::Cpu | DeviceType::Gpu => return &[],
    };
    cell.get_or_init(|| registration(device).map_or_else(Vec::new, |r| (r.list)()))
}

/// A device's kernels once made, or why they could not be.
type Made = std::result::Result<Arc<dyn Kernels>, String>;

static MADE: Mutex<Vec<((DeviceType, usize), Made)>> = Mutex::new(Vec::new());

/// The kernels of this process's own device of type `device` (see [`crate::Device::kernels`]).
///
/// # Errors
/// `BackendUnavailable` when no backend is built in for it or it has no device here.
pub fn kernels(device: DeviceType) -> Result<Arc<dyn Kernels>> {
    match device {
        DeviceType::Cpu => kernels_at(DeviceType::Cpu, 0),
        t => kernels_at(t, crate::device::own_ordinal(t)?),
    }
}

/// The kernels of device `ordinal` of type `device`, its backend opened on first use.
///
/// # Errors
/// `BackendUnavailable` naming the device (`cuda:1`) when this build has no backend for the
/// type or the host no device of that ordinal.
pub fn kernels_at(device: DeviceType, ordinal: usize) -> Result<Arc<dyn Kernels>> {
    if device == DeviceType::Cpu {
        static CPU: OnceLock<Arc<dyn Kernels>> = OnceLock::new();
        return Ok(CPU.get_or_init(|| Arc::new(CpuBackend)).clone());
    }
    let unavailable = |reason: String| Error::BackendUnavailable {
        device: format!("{device}:{ordinal}"),
        reason,
    };
    let mut made = MADE
        .lock()
        .map_err(|_| Error::Internal("backend registry poisoned".into()))?;
    if let Some((_, r)) = made.iter().find(|(k, _)| *k == (device, ordinal)) {
        return r.clone().map_err(unavailable);
    }
    let count = device_list(device).len();
    let r = match registration(device) {
        None => Err(format!(
            "this program was built without a {device} backend (the gflow crate's `{device}` feature)"
        )),
        Some(_) if ordinal >= count => Err(format!(
            "no {device} device of ordinal {ordinal}: this host has {count}"
        )),
        Some(reg) => (reg.open)(ordinal).map_err(|e| e.to_string()),
    };
    made.push(((device, ordinal), r.clone()));
    r.map_err(unavailable)
}

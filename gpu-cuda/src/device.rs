//! Finding the CUDA libraries and devices, and opening one: its stream, cuBLAS handle and the
//! kernels compiled by NVRTC.

use std::collections::HashMap;

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaContext;
use gflow_core::backend::{KernelLang, kernel_constants};
use gflow_core::{DeviceInfo, DeviceKind, DeviceType, Error, Result};

use crate::{CudaBackend, device_error, ptx_cache};

/// The kernels' CUDA C++ source: the kernels, then the casts (which use the kernels' helpers).
pub(crate) const SOURCE: [&str; 2] = [
    include_str!("../kernels/gflow.cu"),
    include_str!("../kernels/convert.cu"),
];

/// The kernels `kernels/gflow.cu` and `kernels/convert.cu` define.
const FUNCTIONS: [&str; 14] = [
    "unary_f32",
    "unary_f64",
    "binary_flat_f32",
    "binary_flat_f64",
    "binary_bcast_f32",
    "binary_bcast_f64",
    "reduce_rows_f32",
    "reduce_rows_f64",
    "reduce_strided_f32",
    "reduce_strided_f64",
    "softmax_rows_f32",
    "softmax_rows_f64",
    "adam_f32",
    "adam_f64",
];
/// The rest of the kernels (split only to keep lines short).
const MORE_FUNCTIONS: [&str; 49] = [
    "softmax_strided_f32",
    "softmax_strided_f64",
    "scatter_add_rows_f32",
    "scatter_add_rows_f64",
    "strided_w2",
    "strided_w4",
    "strided_w8",
    "gather_rows_w2",
    "gather_rows_w4",
    "gather_rows_w8",
    "triangle_w2",
    "triangle_w4",
    "triangle_w8",
    "arg_reduce_f32",
    "arg_reduce_f64",
    "argsort_f32",
    "argsort_f64",
    "cumsum_f32",
    "cumsum_f64",
    "compare_f32",
    "compare_f64",
    "where_w2",
    "where_w4",
    "where_w8",
    "convert",
    "gather_rows_partial_w2",
    "gather_rows_partial_w4",
    "gather_rows_partial_w8",
    "gather_dim_w2",
    "gather_dim_w4",
    "gather_dim_w8",
    "norm_f32",
    "norm_f64",
    "norm_input_grad_f32",
    "norm_input_grad_f64",
    "norm_stats_f32",
    "norm_stats_f64",
    "norm_param_part_f32",
    "norm_param_part_f64",
    "unary_mul_f32",
    "unary_mul_f64",
    "sum_squares_f32",
    "sum_squares_f64",
    "attention_f32",
    "attention_f64",
    "attention_dq_f32",
    "attention_dq_f64",
    "attention_dkv_f32",
    "attention_dkv_f64",
];

/// Whether the CUDA driver, NVRTC and cuBLAS libraries can be loaded (cudarc panics on first
/// use of a missing one, so nothing else may be called before this says yes).
pub fn libraries_present() -> std::result::Result<(), String> {
    // SAFETY: these only try to dlopen the libraries by name; no symbol is called.
    let checks = unsafe {
        [
            ("driver (libcuda)", cudarc::driver::sys::is_culib_present()),
            ("NVRTC (libnvrtc)", cudarc::nvrtc::sys::is_culib_present()),
            (
                "cuBLAS (libcublas)",
                cudarc::cublas::sys::is_culib_present(),
            ),
        ]
    };
    let missing: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| *n)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the CUDA {} cannot be loaded on this machine",
            missing.join(", ")
        ))
    }
}

/// The CUDA devices of this host, by ordinal (as `CUDA_VISIBLE_DEVICES` numbers them), for
/// `gflow::devices()`; empty without the CUDA libraries or a device.
pub fn device_infos() -> Vec<DeviceInfo> {
    if libraries_present().is_err() {
        return vec![];
    }
    // cudarc panics on a missing symbol (a driver older than its bindings): then no devices.
    std::panic::catch_unwind(|| {
        let count = CudaContext::device_count().unwrap_or(0).max(0) as usize;
        (0..count)
            .map(|ordinal| {
                let ctx = CudaContext::new(ordinal).ok();
                DeviceInfo {
                    device_type: DeviceType::Cuda,
                    ordinal,
                    name: ctx
                        .as_ref()
                        .and_then(|c| c.name().ok())
                        .unwrap_or_else(|| format!("CUDA device {ordinal}")),
                    api: "CUDA".into(),
                    kind: DeviceKind::Discrete,
                    memory: ctx.and_then(|c| c.total_mem().ok()).map(|m| m as u64),
                }
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The kernels' PTX for the virtual architecture `arch` (`compute_80`), compiled by NVRTC with
/// the op codes before the source, or read from the kernel cache (`GFLOW_CACHE_DIR`, else
/// `~/.cache/gflow`, keyed by source, architecture and NVRTC release) where
/// an earlier process stored it. It needs the NVRTC library only (no driver or device), so the
/// source's compilation is checked wherever NVRTC is.
///
/// # Errors
/// `BackendUnavailable` without the NVRTC library; `Device` with NVRTC's log when the source
/// does not compile, or when a kernel the backend loads is missing from the PTX.
pub fn kernels_ptx(arch: &str) -> Result<String> {
    // SAFETY: this only tries to dlopen the library by name; no symbol is called.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::BackendUnavailable {
            device: "cuda".into(),
            reason: "the NVRTC library (libnvrtc) cannot be loaded on this machine".into(),
        });
    }
    let source = format!(
        "{}{}{}",
        kernel_constants(KernelLang::Cuda),
        SOURCE[0],
        SOURCE[1]
    );
    let entry = |name: &str| format!(".entry {name}(");
    let missing = |ptx: &str| {
        FUNCTIONS
            .iter()
            .chain(&MORE_FUNCTIONS)
            .find(|name| !ptx.contains(&entry(name)))
            .copied()
    };
    let path = ptx_cache::directory()
        .zip(nvrtc_version())
        .map(|(dir, v)| ptx_cache::file(&dir, "cuda-kernels", &[&source, arch, &v]));
    let ptx = ptx_cache::cached(
        path.as_deref(),
        |ptx| missing(ptx).is_none(),
        || {
            cudarc::nvrtc::compile_ptx_with_opts(
                &source,
                cudarc::nvrtc::CompileOptions {
                    options: vec![format!("--gpu-architecture={arch}")],
                    ..Default::default()
                },
            )
            .map(|ptx| ptx.to_src())
            .map_err(|e| device_error(format!("NVRTC: {e:?}")))
        },
    )?;
    match missing(&ptx) {
        Some(name) => Err(device_error(format!("NVRTC: no kernel {name} in the PTX"))),
        None => Ok(ptx),
    }
}

/// NVRTC's release (`12.4`), part of the kernel cache's key: another release may compile the
/// same source differently (`None`, no caching, where NVRTC does not say).
fn nvrtc_version() -> Option<String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked by the caller); the call writes two ints.
    let ok = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS;
    ok.then(|| format!("{major}.{minor}"))
}

/// The virtual architectures this NVRTC compiles for, as compute capabilities times ten (`75`,
/// `80`, `90`, ...): each CUDA release drops old ones (CUDA 13 has no `compute_70`) and adds new.
///
/// # Errors
/// `BackendUnavailable` without the NVRTC library; `Device` when NVRTC fails.
pub fn nvrtc_archs() -> Result<Vec<u32>> {
    // SAFETY: this only tries to dlopen the library by name; no symbol is called.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::BackendUnavailable {
            device: "cuda".into(),
            reason: "the NVRTC library (libnvrtc) cannot be loaded on this machine".into(),
        });
    }
    let mut n: std::ffi::c_int = 0;
    // SAFETY: NVRTC writes one int through the pointer.
    unsafe { cudarc::nvrtc::sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(|e| device_error(format!("NVRTC: {e:?}")))?;
    let mut archs: Vec<std::ffi::c_int> = vec![0; n.max(0) as usize];
    // SAFETY: NVRTC writes `n` ints, the length of `archs`.
    unsafe { cudarc::nvrtc::sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(|e| device_error(format!("NVRTC: {e:?}")))?;
    Ok(archs.into_iter().map(|a| a.max(0) as u32).collect())
}

/// The architecture to compile for on a device of compute capability `cc` (times ten): `cc`
/// itself where NVRTC has it, else the newest older one it has (the driver compiles that
/// PTX for the device), or `None` when NVRTC has only newer ones.
fn arch_for(cc: u32, archs: &[u32]) -> Option<u32> {
    archs.iter().copied().filter(|&a| a <= cc).max()
}

/// Makes the device's default memory pool (where cudarc's stream-ordered allocations come
/// from) keep the memory freed into it: with the driver's default release threshold of 0, every
/// synchronization hands it back to the OS and the next allocations map it again (a 64 MiB
/// `add` then ran at a fifth of the copy bandwidth). PyTorch's caching allocator keeps it too.
/// Devices without memory pools allocate synchronously: nothing to keep.
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    use cudarc::driver::sys;
    let pools = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
    if ctx.attribute(pools).map_err(device_error)? == 0 {
        return Ok(());
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: the driver writes the pool handle of this context's device, then reads one u64
    // (the attribute's type) through the pointer.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .map_err(device_error)?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast(),
        )
        .result()
        .map_err(device_error)
    }
}

impl CudaBackend {
    /// CUDA device 0 (`CUDA_VISIBLE_DEVICES` picks it, as usual).
    ///
    /// # Errors
    /// `BackendUnavailable` when a CUDA library or a device is missing, or the kernels do not
    /// compile for it.
    pub fn new() -> Result<CudaBackend> {
        CudaBackend::with_ordinal(0)
    }

    /// CUDA device `ordinal`.
    ///
    /// # Errors
    /// `BackendUnavailable` naming `cuda:ORDINAL` when a CUDA library or that device is
    /// missing, or the kernels do not compile for it.
    pub fn with_ordinal(ordinal: usize) -> Result<CudaBackend> {
        let unavailable = |reason: String| Error::BackendUnavailable {
            device: format!("cuda:{ordinal}"),
            reason,
        };
        libraries_present().map_err(unavailable)?;
        // cudarc panics on a missing symbol (a driver older than its bindings): a typed error.
        std::panic::catch_unwind(|| Self::open(ordinal))
            .map_err(|_| unavailable("the CUDA libraries lack a function cudarc needs".into()))?
            .map_err(|e| unavailable(e.to_string()))
    }

    pub(crate) fn open(ordinal: usize) -> Result<CudaBackend> {
        let ctx = CudaContext::new(ordinal).map_err(device_error)?;
        // One stream orders everything, so cudarc's per-buffer events are not needed.
        // SAFETY: no buffer exists yet and all work goes to the one stream below.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        // a performance setting only: a driver that refuses it still allocates correctly
        keep_freed_memory(&ctx).ok();
        let (major, minor) = ctx.compute_capability().map_err(device_error)?;
        let cc = (major * 10 + minor).max(0) as u32;
        let archs = nvrtc_archs()?;
        let arch = arch_for(cc, &archs).ok_or_else(|| {
            device_error(format!(
                "NVRTC compiles for compute capabilities {archs:?} (times ten), none at or \
                 below this device's {major}.{minor}"
            ))
        })?;
        let ptx = kernels_ptx(&format!("compute_{arch}"))?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(device_error)?;
        let mut functions = HashMap::new();
        for name in FUNCTIONS.iter().chain(&MORE_FUNCTIONS) {
            let f = module.load_function(name).map_err(device_error)?;
            functions.insert((*name).to_string(), f);
        }
        let blas = CudaBlas::new(stream.clone()).map_err(device_error)?;
        let name = ctx.name().map_err(device_error)?;
        Ok(CudaBackend {
            stream,
            blas,
            functions,
            name: format!("{name} (sm_{major}{minor})"),
        })
    }

    /// The device's name and architecture, for reports.
    pub fn device_name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::arch_for;

    #[test]
    fn the_newest_architecture_not_above_the_device_is_chosen() {
        let archs = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(arch_for(90, &archs), Some(90));
        assert_eq!(arch_for(87, &archs), Some(86));
        assert_eq!(arch_for(70, &archs), None);
        assert_eq!(arch_for(121, &archs), Some(120));
    }
}

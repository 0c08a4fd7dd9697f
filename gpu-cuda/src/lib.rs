//! gflow's CUDA backend: core's [`Backend`] on cudarc, loaded at run time (it builds with no
//! CUDA toolkit and runs only where the driver is). Matrix products are cuBLAS (strided batched
//! GEMM, default math mode, so f32 is true f32 and never TF32); every other kernel is CUDA C++
//! in `kernels/gflow.cu` and `kernels/convert.cu` (the casts), compiled once per process by
//! NVRTC for the device's architecture.
//!
//! Arithmetic is f32 and f64. The device holds every dtype: F16 and BF16 as their 16-bit
//! patterns (one `u16` each), I32, F32, F64 and I64 natively, Bool as one 32-bit word per
//! element (true when nonzero); it moves, slices, permutes, concatenates, gathers and masks
//! them all as 2-, 4- or 8-byte words (the `_w2`, `_w4`, `_w8` kernels), with I64 or I32
//! indices. Casts from F32, F64, F16, BF16 and I32 to every dtype run on the device by bits
//! (`kernels/convert.cu`), bit for bit the host's (the `half` crate's round to nearest even,
//! NaN payloads, saturating float to integer). 16-bit arithmetic is f32 on the device: core's
//! `Resident` casts up, runs the f32 kernel and casts back (PyTorch's opmath); integer
//! arithmetic and casts from I64 and Bool run on the host copy.
//!
//! cudarc panics when a CUDA library is missing, so [`CudaBackend::new`] checks for the
//! driver, NVRTC and cuBLAS libraries before touching cudarc and returns `BackendUnavailable`
//! without them. Allocations go through the driver's stream-ordered memory
//! pool (`cuMemAllocAsync`), which keeps freed blocks for reuse: that is the buffer pool.

#[macro_use]
mod memory;
mod device;
mod launch;
mod ops;
mod ptx_cache;

pub use device::{device_infos, kernels_ptx, libraries_present, nvrtc_archs};
pub use memory::CudaStorage;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaFunction, CudaStream};
use gflow_core::backend::Backend;
use gflow_core::shape::StridedCopy;
use gflow_core::{DType, Error, HostData, Result};

use crate::memory::Buf;

fn device_error(reason: impl std::fmt::Display) -> Error {
    Error::Device {
        device: "cuda".into(),
        reason: reason.to_string(),
    }
}

/// The CUDA device 0 of this process, its stream, cuBLAS handle and compiled kernels.
pub struct CudaBackend {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    functions: HashMap<String, CudaFunction>,
    name: String,
}

impl Backend for CudaBackend {
    type Storage = CudaStorage;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn sync(&self) -> Result<()> {
        self.stream.synchronize().map_err(device_error)
    }

    fn adam_step(
        &self,
        p: &mut CudaStorage,
        g: &CudaStorage,
        [m, v]: [&mut CudaStorage; 2],
        h: &gflow_core::backend::AdamStep,
    ) -> Result<bool> {
        ops::adam_step(self, p, g, [m, v], h)
    }

    /// A memset on the stream.
    fn zeros(&self, dtype: DType, len: usize) -> Result<CudaStorage> {
        self.alloc_dtype(dtype, len, true)
    }

    /// F32 and F64: 16-bit floats compute in f32 through core's `Resident` (cast on the
    /// device), I32 and I64 arithmetic runs on the host copy.
    fn computes(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::F64)
    }

    fn stores(&self, _dtype: DType) -> bool {
        true
    }

    /// From F32, F64, F16, BF16 and I32 to every dtype (`kernels/convert.cu`); I64 and Bool
    /// on the host.
    fn casts(&self, from: DType) -> bool {
        ops::CAST_SOURCES.contains(&from)
    }

    fn upload(&self, data: &HostData) -> Result<CudaStorage> {
        let len = data.len();
        let mut out = self.alloc_like(data.dtype(), len)?;
        if len > 0 {
            let s = &self.stream;
            match (&mut out.buf, data) {
                (Buf::F32(d), HostData::F32(v)) => s.memcpy_htod(v, d),
                (Buf::F64(d), HostData::F64(v)) => s.memcpy_htod(v, d),
                (Buf::I64(d), HostData::I64(v)) => s.memcpy_htod(v, d),
                (Buf::I32(d), HostData::I32(v)) => s.memcpy_htod(v, d),
                (Buf::F16(d) | Buf::BF16(d), HostData::F16(_) | HostData::BF16(_)) => {
                    let bits: Vec<u16> = bytemuck::pod_collect_to_vec(data.as_bytes());
                    s.memcpy_htod(&bits, d)
                }
                (Buf::Bool(d), HostData::Bool(v)) => {
                    let words: Vec<u32> = v.iter().map(|&b| u32::from(b != 0)).collect();
                    s.memcpy_htod(&words, d)
                }
                _ => {
                    return Err(Error::Internal(format!(
                        "no CUDA buffer for {}",
                        data.dtype()
                    )));
                }
            }
            .map_err(device_error)?;
        }
        Ok(out)
    }

    fn download(&self, s: &CudaStorage) -> Result<HostData> {
        if s.len == 0 {
            return Ok(HostData::from_bytes(s.dtype(), &[]));
        }
        let st = &self.stream;
        let data = match &s.buf {
            Buf::F32(b) => HostData::F32(st.clone_dtoh(&b.slice(..s.len)).map_err(device_error)?),
            Buf::F64(b) => HostData::F64(st.clone_dtoh(&b.slice(..s.len)).map_err(device_error)?),
            Buf::I64(b) => HostData::I64(st.clone_dtoh(&b.slice(..s.len)).map_err(device_error)?),
            Buf::I32(b) => HostData::I32(st.clone_dtoh(&b.slice(..s.len)).map_err(device_error)?),
            Buf::F16(b) | Buf::BF16(b) => {
                let bits = st.clone_dtoh(&b.slice(..s.len)).map_err(device_error)?;
                HostData::from_bytes(s.dtype(), bytemuck::cast_slice(&bits))
            }
            Buf::Bool(b) => {
                let words = st.clone_dtoh(&b.slice(..s.len)).map_err(device_error)?;
                HostData::Bool(words.iter().map(|&w| u8::from(w != 0)).collect())
            }
        };
        st.synchronize().map_err(device_error)?;
        Ok(data)
    }

    fn dtype(&self, s: &CudaStorage) -> DType {
        s.dtype()
    }

    fn len(&self, s: &CudaStorage) -> usize {
        s.len
    }

    fn copy_boxes(
        &self,
        dtype: DType,
        len: usize,
        put: bool,
        copies: &[(&CudaStorage, StridedCopy)],
    ) -> Result<CudaStorage> {
        ops::copy_boxes(self, dtype, len, put, copies)
    }

    // Every other kernel of core's list: the function of its name in `ops`, one file per
    // operator family.
    gflow_core::kernel_table!(forward ops);
}

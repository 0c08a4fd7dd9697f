//! gflow's wgpu backend: core's [`Backend`] as WGSL compute shaders (`shaders/`), on the adapters
//! wgpu finds, one per ordinal ([`adapters`]: Vulkan, Metal, DX12; lavapipe, Mesa's software
//! Vulkan, in CI).
//!
//! Arithmetic is f32 (WGSL has no portable f64 transcendentals). The device holds every dtype:
//! F32, I32, F64, I64 and Bool (one 32-bit word per element, true when nonzero) are moved,
//! sliced, permuted, concatenated, gathered and masked as 32-bit words; F16 and BF16 are packed
//! two per word (element `2k` in the low half), and their kernels write one whole word per
//! thread (`strided16.wgsl`, `convert.wgsl`, `halves.wgsl`), so no two threads share a word.
//! Casts between F32, F16, BF16 and I32 (and from them to F64, I64 and Bool) run on the device
//! by bits (`convert.wgsl`), bit for bit the host's. 16-bit arithmetic is f32 on the device:
//! core's `Resident` casts up, runs the f32 kernel and casts back (PyTorch's opmath); integer
//! and f64 arithmetic run on the host copy. Where the adapter has `SHADER_F16` (and
//! `GFLOW_WGPU_F16` is not `0`) the device is opened with it and the F16 <-> F32 casts use
//! WGSL's `f16` (`convert_f16.wgsl`). Every dispatch runs inside a
//! wgpu error scope, so a validation or out-of-memory error is a [`gflow_core::Error::Device`],
//! never wgpu's default panic; no adapter is `BackendUnavailable`.

mod bind;
mod device;
mod ops;
mod pool;

pub use device::{adapters, device_infos};
pub use pool::WgpuStorage;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gflow_core::backend::Backend;
use gflow_core::shape::StridedCopy;
use gflow_core::{DType, Error, HostData, Result};

use crate::pool::Pool;

/// The bits of f32 -inf (the start of a max).
const NEG_INF: u32 = 0xff80_0000;

/// Most iterations a kernel's loops run in one invocation. lavapipe (llvmpipe) silently ends
/// an invocation's loops after 65535 iterations in all, so longer work is cut in pieces
/// (reductions in runs, long softmax lines and scatter index lists in passes, products over
/// long inner dims in chunks); on hardware the pieces cost little.
const LOOP_MAX: usize = 16384;

/// Bytes of one element for the word kernels: its size, but a whole word for Bool (so the word
/// kernels move it). 16-bit floats are packed ([`storage_bytes`]) and reach word kernels only
/// unpacked, one per word.
pub(crate) fn elem_bytes(dtype: DType) -> usize {
    dtype.size().max(4)
}

/// Bytes of `len` elements of `dtype` in a device buffer (16-bit floats two per word).
pub(crate) fn storage_bytes(len: usize, dtype: DType) -> usize {
    if dtype.is_half() {
        len.div_ceil(2) * 4
    } else {
        len * elem_bytes(dtype)
    }
}

fn device_error(reason: impl std::fmt::Display) -> Error {
    Error::Device {
        device: "wgpu".into(),
        reason: reason.to_string(),
    }
}

/// The wgpu device, its queue, and the compiled kernels.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter: String,
    /// Compiled kernels and their bind group layouts, by name.
    pipelines: Mutex<HashMap<&'static str, (wgpu::ComputePipeline, wgpu::BindGroupLayout)>>,
    /// Recorded kernels not yet submitted: submitted together (a submission per kernel cost
    /// more than most kernels), before any read, queue write or wait.
    pending: Mutex<Vec<wgpu::CommandBuffer>>,
    max_binding: u64,
    max_buffer: u64,
    /// Alignment of a binding's offset into a buffer.
    align: u64,
    /// Whether the device was opened with `SHADER_F16` (the F16 casts then use WGSL's `f16`).
    shader_f16: bool,
    /// Whether matmul uses the workgroup-tiled kernel (real GPUs) rather than the
    /// register-blocked one without barriers (software adapters, where barriers are slow).
    tiled_matmul: bool,
    /// Freed buffers for reuse.
    pool: Arc<Pool>,
}

impl Backend for WgpuBackend {
    type Storage = WgpuStorage;

    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn adam_step(
        &self,
        p: &mut WgpuStorage,
        g: &WgpuStorage,
        [m, v]: [&mut WgpuStorage; 2],
        h: &gflow_core::backend::AdamStep,
    ) -> Result<bool> {
        ops::adam_step(self, p, g, [m, v], h)
    }

    /// A `clear_buffer` on the device.
    fn zeros(&self, dtype: DType, len: usize) -> Result<WgpuStorage> {
        let s = self.new_storage(len, dtype)?;
        self.zero(&s)?;
        Ok(s)
    }

    fn sync(&self) -> Result<()> {
        self.flush()?;
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(drop)
            .map_err(device_error)
    }

    /// F32 only: 16-bit floats compute in f32 through core's `Resident` (cast on the device),
    /// I32, I64 and F64 arithmetic runs on the host copy.
    fn computes(&self, dtype: DType) -> bool {
        dtype == DType::F32
    }

    fn stores(&self, _dtype: DType) -> bool {
        true
    }

    /// From F32, F16, BF16 and I32 to every dtype (`convert.wgsl`); F64 and I64 on the host.
    fn casts(&self, from: DType) -> bool {
        matches!(from, DType::F32 | DType::F16 | DType::BF16 | DType::I32)
    }

    fn upload(&self, data: &HostData) -> Result<WgpuStorage> {
        let words;
        let mut padded;
        let bytes = if let HostData::Bool(v) = data {
            words = v.iter().map(|&b| u32::from(b != 0)).collect::<Vec<u32>>();
            bytemuck::cast_slice(&words)
        } else if !data.as_bytes().len().is_multiple_of(4) {
            // an odd number of 16-bit elements: the buffer's last word half-filled
            padded = data.as_bytes().to_vec();
            padded.resize(padded.len().div_ceil(4) * 4, 0);
            &padded[..]
        } else {
            data.as_bytes()
        };
        let s = self.new_storage(data.len(), data.dtype())?;
        if !bytes.is_empty() {
            // a queue write lands before the next submission's kernels: earlier ones first
            self.flush()?;
            self.scoped(|| self.queue.write_buffer(&s.buf, 0, bytes))?;
        }
        Ok(s)
    }

    fn download(&self, s: &WgpuStorage) -> Result<HostData> {
        let bytes = if s.dtype.is_half() {
            s.len * 2
        } else {
            storage_bytes(s.len, s.dtype)
        };
        let bytes = self.read_bytes(&s.buf, bytes)?;
        if s.dtype == DType::Bool {
            let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
            return Ok(HostData::Bool(
                words.iter().map(|&w| u8::from(w != 0)).collect(),
            ));
        }
        Ok(HostData::from_bytes(s.dtype, &bytes))
    }

    fn dtype(&self, s: &WgpuStorage) -> DType {
        s.dtype
    }

    fn len(&self, s: &WgpuStorage) -> usize {
        s.len
    }

    fn copy_boxes(
        &self,
        dtype: DType,
        len: usize,
        put: bool,
        copies: &[(&WgpuStorage, StridedCopy)],
    ) -> Result<WgpuStorage> {
        ops::copy_boxes(self, dtype, len, put, copies)
    }

    // Every other kernel of core's list: the function of its name in `ops`, one file per
    // operator family.
    gflow_core::kernel_table!(forward ops);
}

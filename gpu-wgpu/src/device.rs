//! The adapters wgpu finds and opening one as a [`WgpuBackend`]; error scopes and reads back.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use gflow_core::{DeviceInfo, DeviceKind, DeviceType, Error, Result};

use crate::pool::{POOL_BYTES, Pool};
use crate::{WgpuBackend, device_error};

/// The adapters this process can use, by ordinal: wgpu's adapters on Vulkan, Metal and DX12
/// (OpenGL only where none of those has one), discrete GPUs first, then integrated, virtual
/// and software ones, each in wgpu's order. `GFLOW_WGPU_FALLBACK=1` keeps only software
/// adapters. Enumerated once per process.
pub fn adapters() -> &'static [wgpu::Adapter] {
    static ADAPTERS: OnceLock<Vec<wgpu::Adapter>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
        let mut all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY));
        if all.is_empty() {
            all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::GL));
        }
        if std::env::var("GFLOW_WGPU_FALLBACK").is_ok_and(|v| v == "1") {
            all.retain(|a| a.get_info().device_type == wgpu::DeviceType::Cpu);
        }
        let order = |t: wgpu::DeviceType| match t {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 3,
            wgpu::DeviceType::Other => 4,
        };
        all.sort_by_key(|a| order(a.get_info().device_type));
        all
    })
}

/// [`adapters`] as core's device list (for `gflow::devices()`).
pub fn device_infos() -> Vec<DeviceInfo> {
    adapters()
        .iter()
        .enumerate()
        .map(|(ordinal, a)| {
            let info = a.get_info();
            DeviceInfo {
                device_type: DeviceType::Wgpu,
                ordinal,
                name: info.name,
                api: format!("{:?}", info.backend),
                kind: match info.device_type {
                    wgpu::DeviceType::DiscreteGpu => DeviceKind::Discrete,
                    wgpu::DeviceType::IntegratedGpu => DeviceKind::Integrated,
                    wgpu::DeviceType::VirtualGpu => DeviceKind::Virtual,
                    wgpu::DeviceType::Cpu => DeviceKind::Cpu,
                    wgpu::DeviceType::Other => DeviceKind::Other,
                },
                // wgpu does not report an adapter's memory.
                memory: None,
            }
        })
        .collect()
}

/// Kernels recorded before they are submitted together.
const BATCH: usize = 64;

impl WgpuBackend {
    /// The first adapter of [`adapters`] (`GFLOW_WGPU_FALLBACK=1` asks for a software one).
    ///
    /// # Errors
    /// `BackendUnavailable` when there is no adapter or it refuses a device.
    pub fn new() -> Result<WgpuBackend> {
        WgpuBackend::open(0)
    }

    /// Adapter `ordinal` of [`adapters`].
    ///
    /// # Errors
    /// `BackendUnavailable` naming `wgpu:ORDINAL` when there is no such adapter or it refuses
    /// a device.
    pub fn open(ordinal: usize) -> Result<WgpuBackend> {
        let unavailable = |reason: String| Error::BackendUnavailable {
            device: format!("wgpu:{ordinal}"),
            reason,
        };
        let all = adapters();
        let adapter = all.get(ordinal).ok_or_else(|| {
            unavailable(format!(
                "no adapter of ordinal {ordinal}: wgpu finds {} here",
                all.len()
            ))
        })?;
        let limits = adapter.limits();
        let shader_f16 = adapter.features().contains(wgpu::Features::SHADER_F16)
            && std::env::var("GFLOW_WGPU_F16").map_or(true, |v| v != "0");
        let features = if shader_f16 {
            wgpu::Features::SHADER_F16
        } else {
            wgpu::Features::empty()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("gflow"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| unavailable(format!("the adapter refused a device: {e}")))?;
        let info = adapter.get_info();
        Ok(WgpuBackend {
            device,
            queue,
            adapter: format!("{} ({:?})", info.name, info.backend),
            pipelines: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            max_binding: limits.max_storage_buffer_binding_size,
            max_buffer: limits.max_buffer_size,
            align: u64::from(limits.min_storage_buffer_offset_alignment),
            shader_f16,
            tiled_matmul: info.device_type != wgpu::DeviceType::Cpu,
            pool: Arc::new(Pool {
                free: Mutex::new(HashMap::new()),
                kept: AtomicU64::new(0),
                limit: POOL_BYTES,
            }),
        })
    }

    /// Chooses the matmul kernel: workgroup-tiled (the default on hardware adapters) or
    /// register-blocked without workgroup memory (the default on software ones).
    pub fn set_tiled_matmul(&mut self, tiled: bool) {
        self.tiled_matmul = tiled;
    }

    /// Lowers the storage-binding limit this backend works under (never above the adapter's,
    /// never below four offset alignments): every path for tensors past the limit then runs on
    /// small tensors, which is how the tests cover them all without 128 MiB allocations.
    pub fn set_binding_limit(&mut self, bytes: u64) {
        let adapter = self.device.limits().max_storage_buffer_binding_size;
        self.max_binding = bytes.clamp(4 * self.align, adapter) / 4 * 4;
    }

    /// Whether the device was opened with `SHADER_F16`: the adapter has it and
    /// `GFLOW_WGPU_F16` is not `0` (then the F16 casts use WGSL's `f16`).
    pub fn shader_f16(&self) -> bool {
        self.shader_f16
    }

    /// Turns the `SHADER_F16` casts off (or on again where the device was opened with the
    /// feature), so tests run both F16 paths on one adapter.
    pub fn set_shader_f16(&mut self, on: bool) {
        self.shader_f16 = on && self.device.features().contains(wgpu::Features::SHADER_F16);
    }

    /// Whether matmul uses the workgroup-tiled kernel.
    pub fn tiled_matmul(&self) -> bool {
        self.tiled_matmul
    }

    /// The adapter's name and API, for reports.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// The largest buffer one binding may hold, in bytes (kernels work on larger tensors in
    /// pieces).
    pub fn max_binding(&self) -> u64 {
        self.max_binding
    }

    /// Runs `f` inside validation and out-of-memory error scopes; an error becomes `Err`.
    /// Queues recorded work; it is submitted with the rest of a batch of [`BATCH`], or at the
    /// next [`WgpuBackend::flush`].
    pub(crate) fn submit(&self, work: wgpu::CommandBuffer) -> Result<()> {
        let full = {
            let mut pending = self.pending()?;
            pending.push(work);
            pending.len() >= BATCH
        };
        if full { self.flush() } else { Ok(()) }
    }

    /// Submits the queued work (before a read, a queue write or a wait). The queue stays locked
    /// until the submission is made: ranks on threads share the device, and another thread's
    /// later work must not be submitted before the work taken here.
    pub(crate) fn flush(&self) -> Result<()> {
        let mut pending = self.pending()?;
        if pending.is_empty() {
            return Ok(());
        }
        let work: Vec<wgpu::CommandBuffer> = pending.drain(..).collect();
        self.scoped(|| {
            self.queue.submit(work);
        })
    }

    fn pending(&self) -> Result<std::sync::MutexGuard<'_, Vec<wgpu::CommandBuffer>>> {
        self.pending
            .lock()
            .map_err(|_| Error::Internal("wgpu submission queue poisoned".into()))
    }

    pub(crate) fn scoped<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        match v.or(o) {
            Some(e) => Err(device_error(e)),
            None => Ok(out),
        }
    }

    /// The bytes of a buffer, through a mapped staging copy.
    pub(crate) fn read_bytes(&self, buf: &wgpu::Buffer, bytes: usize) -> Result<Vec<u8>> {
        if bytes == 0 {
            return Ok(vec![]);
        }
        let size = (bytes as u64).div_ceil(4) * 4;
        let mut staging_copy = None;
        let staging = self.scoped(|| {
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("download"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size);
            staging_copy = Some(enc.finish());
            staging
        })?;
        if let Some(copy) = staging_copy {
            self.submit(copy)?;
        }
        self.flush()?;
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(device_error)?;
        rx.recv()
            .map_err(|_| device_error("the download was dropped"))?
            .map_err(device_error)?;
        let view = staging.slice(..).get_mapped_range().map_err(device_error)?;
        let out = view[..bytes].to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }
}

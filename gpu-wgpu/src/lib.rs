//! gflow's wgpu backend: core's [`Backend`] as WGSL compute shaders (`shaders/`), on the adapters
//! wgpu finds, one per ordinal ([`adapters`]: Vulkan, Metal, DX12; lavapipe, Mesa's software
//! Vulkan, in CI).
//!
//! Arithmetic is f32 (WGSL has no portable f64 transcendentals); every dtype is stored, moved,
//! sliced, permuted, concatenated and gathered (as 32-bit words). Every dispatch runs inside a
//! wgpu error scope, so a validation or out-of-memory error is a [`gflow_core::Error::Device`],
//! never wgpu's default panic; no adapter is `BackendUnavailable`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use gflow_core::backend::{
    AFFINE_CODE, Backend, BinaryOp, KernelLang, MatmulDims, ReduceKind, UnaryOp, kernel_constants,
};
use gflow_core::shape::{StridedCopy, broadcast_strides, strides};
use gflow_core::{DType, DeviceInfo, DeviceKind, DeviceType, Error, HostData, Result};
use wgpu::util::DeviceExt;

const COMMON: &str = include_str!("../shaders/common.wgsl");

/// The kernels, by name.
const KERNELS: [(&str, &str); 8] = [
    ("unary", include_str!("../shaders/unary.wgsl")),
    ("binary", include_str!("../shaders/binary.wgsl")),
    ("reduce", include_str!("../shaders/reduce.wgsl")),
    ("softmax", include_str!("../shaders/softmax.wgsl")),
    ("matmul", include_str!("../shaders/matmul.wgsl")),
    ("matmul_tiled", include_str!("../shaders/matmul_tiled.wgsl")),
    ("strided", include_str!("../shaders/strided.wgsl")),
    ("rows", include_str!("../shaders/rows.wgsl")),
];

/// Bytes of freed buffers the pool keeps at most.
const POOL_BYTES: u64 = 512 << 20;
/// Threads per workgroup (every kernel's `@workgroup_size`).
const GROUP: u32 = 256;
/// Most workgroups along one dispatch dimension (WebGPU's guaranteed limit).
const MAX_GROUPS: u32 = 65535;
/// The bits of f32 -inf (the start of a max).
const NEG_INF: u32 = 0xff80_0000;

/// The bits of the value a reduction starts from (the sum's 0 is the shader's own).
fn reduce_start(op: ReduceKind) -> u32 {
    match op {
        ReduceKind::Min => f32::INFINITY.to_bits(),
        _ => NEG_INF,
    }
}
/// Most iterations a kernel's loops run in one invocation. lavapipe (llvmpipe) silently ends
/// an invocation's loops after 65535 iterations in all, so longer work is cut in pieces
/// (reductions in runs, long softmax lines and scatter index lists in passes, products over
/// long inner dims in chunks); on hardware the pieces cost little.
const LOOP_MAX: usize = 16384;

fn device_error(reason: impl std::fmt::Display) -> Error {
    Error::Device {
        device: "wgpu".into(),
        reason: reason.to_string(),
    }
}

/// A tensor's buffer on the device (back to the pool when dropped).
pub struct WgpuStorage {
    buf: wgpu::Buffer,
    len: usize,
    dtype: DType,
    pool: Arc<Pool>,
}

impl Drop for WgpuStorage {
    fn drop(&mut self) {
        self.pool.put(self.buf.clone());
    }
}

/// Freed device buffers kept for reuse, by size class: creating a buffer is a driver
/// allocation plus wgpu's zero-fill, reusing one is a lookup. At most `limit` bytes are kept.
struct Pool {
    free: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
    kept: AtomicU64,
    limit: u64,
}

impl Pool {
    fn take(&self, size: u64) -> Option<wgpu::Buffer> {
        let buf = self.free.lock().ok()?.get_mut(&size)?.pop()?;
        self.kept.fetch_sub(size, Ordering::Relaxed);
        Some(buf)
    }

    fn put(&self, buf: wgpu::Buffer) {
        let size = buf.size();
        if self.kept.load(Ordering::Relaxed) + size > self.limit {
            return;
        }
        if let Ok(mut free) = self.free.lock() {
            free.entry(size).or_default().push(buf);
            self.kept.fetch_add(size, Ordering::Relaxed);
        }
    }
}

/// The size class of a buffer of `bytes`: a power of two up to 4 KiB, above that the next
/// multiple of a quarter of the largest power of two below (at most 25 % unused), so freed
/// buffers fit later tensors of similar sizes.
fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(4).div_ceil(4) * 4;
    if b <= 4096 {
        return b.next_power_of_two();
    }
    let step = 1u64 << (63 - b.leading_zeros() - 2);
    b.div_ceil(step) * step
}

impl WgpuStorage {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The wgpu device, its queue, and the compiled kernels.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter: String,
    pipelines: Mutex<HashMap<&'static str, wgpu::ComputePipeline>>,
    max_binding: u64,
    max_buffer: u64,
    /// Alignment of a binding's offset into a buffer.
    align: u64,
    /// Whether matmul uses the workgroup-tiled kernel (real GPUs) rather than the
    /// register-blocked one without barriers (software adapters, where barriers are slow).
    tiled_matmul: bool,
    /// Freed buffers for reuse.
    pool: Arc<Pool>,
}

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
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("gflow"),
            required_features: wgpu::Features::empty(),
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
            max_binding: limits.max_storage_buffer_binding_size,
            max_buffer: limits.max_buffer_size,
            align: u64::from(limits.min_storage_buffer_offset_alignment),
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

    /// Whether matmul uses the workgroup-tiled kernel.
    pub fn tiled_matmul(&self) -> bool {
        self.tiled_matmul
    }

    /// The adapter's name and API, for reports.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// Waits until the device has finished all submitted work (for timing).
    ///
    /// # Errors
    /// `Device` when the device is lost.
    pub fn sync(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(drop)
            .map_err(device_error)
    }

    /// A device-to-device copy of `x`: the bandwidth peer of elementwise kernels.
    ///
    /// # Errors
    /// `Device` for allocation or validation failures.
    pub fn copy(&self, x: &WgpuStorage) -> Result<WgpuStorage> {
        let out = self.new_storage(x.len, x.dtype)?;
        let bytes = (x.len * x.dtype.size()) as u64;
        if bytes > 0 {
            self.scoped(|| {
                let mut enc = self
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                enc.copy_buffer_to_buffer(&x.buf, 0, &out.buf, 0, bytes.div_ceil(4) * 4);
                self.queue.submit([enc.finish()]);
            })?;
        }
        Ok(out)
    }

    /// The largest buffer one binding may hold, in bytes (kernels work on larger tensors in
    /// pieces).
    pub fn max_binding(&self) -> u64 {
        self.max_binding
    }

    /// Runs `f` inside validation and out-of-memory error scopes; an error becomes `Err`.
    fn scoped<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
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

    fn pipeline(&self, name: &'static str) -> Result<wgpu::ComputePipeline> {
        let mut cache = self
            .pipelines
            .lock()
            .map_err(|_| Error::Internal("wgpu pipeline cache poisoned".into()))?;
        if let Some(p) = cache.get(name) {
            return Ok(p.clone());
        }
        let body = KERNELS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, src)| *src)
            .ok_or_else(|| Error::Internal(format!("no wgpu kernel {name}")))?;
        let codes = kernel_constants(KernelLang::Wgsl);
        let source = format!("{codes}{COMMON}\n{body}");
        let p = self.scoped(|| {
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(name),
                    source: wgpu::ShaderSource::Wgsl(source.into()),
                });
            self.device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(name),
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                })
        })?;
        cache.insert(name, p.clone());
        Ok(p)
    }

    /// A storage buffer of at least `bytes` (at least 4: WebGPU has no empty bindings), from
    /// the pool when one of its size class is free. Kernels address only the elements they
    /// are told of, so a larger buffer is fine; one that must fit a binding still does.
    fn buffer(&self, bytes: usize) -> Result<wgpu::Buffer> {
        let exact = (bytes.max(4) as u64).div_ceil(4) * 4;
        if exact > self.max_buffer {
            return Err(device_error(format!(
                "a tensor of {exact} bytes exceeds this adapter's buffer limit of {} bytes",
                self.max_buffer
            )));
        }
        let class = size_class(exact);
        let size =
            if class > self.max_buffer || (class > self.max_binding && exact <= self.max_binding) {
                exact
            } else {
                class
            };
        if let Some(buf) = self.pool.take(size) {
            return Ok(buf);
        }
        self.scoped(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Bytes of freed buffers the pool holds for reuse (for tests and reports).
    pub fn pooled_bytes(&self) -> u64 {
        self.pool.kept.load(Ordering::Relaxed)
    }

    fn new_storage(&self, len: usize, dtype: DType) -> Result<WgpuStorage> {
        Ok(WgpuStorage {
            buf: self.buffer(len * dtype.size())?,
            len,
            dtype,
            pool: self.pool.clone(),
        })
    }

    /// Dispatches kernel `name` over `threads` threads with `params` and the buffers bound
    /// whole, in order after the parameters. A buffer past the binding limit is an error here:
    /// only the elementwise kernels bind in pieces ([`WgpuBackend::run_pieces`]).
    fn run(
        &self,
        name: &'static str,
        threads: usize,
        params: &[u32],
        buffers: &[&wgpu::Buffer],
    ) -> Result<()> {
        if let Some(b) = buffers.iter().find(|b| b.size() > self.max_binding) {
            return Err(device_error(format!(
                "{name}: a buffer of {} bytes exceeds this adapter's storage binding limit of {} \
                 bytes",
                b.size(),
                self.max_binding
            )));
        }
        let whole: Vec<wgpu::BufferBinding<'_>> = buffers
            .iter()
            .map(|b| wgpu::BufferBinding {
                buffer: b,
                offset: 0,
                size: None,
            })
            .collect();
        self.dispatch(name, threads, params, &whole)
    }

    /// An elementwise kernel over `n` elements of `elem` bytes, in pieces that each binding
    /// can hold: `params(piece_len)` gives each piece's parameters.
    fn run_pieces(
        &self,
        name: &'static str,
        n: usize,
        elem: usize,
        params: &dyn Fn(usize) -> Vec<u32>,
        buffers: &[&wgpu::Buffer],
    ) -> Result<()> {
        // the largest multiple of the offset alignment that fits a binding, in elements
        let piece_bytes = self.max_binding / self.align * self.align;
        let piece = (piece_bytes / elem as u64).max(1) as usize;
        let mut at = 0;
        while at < n {
            let len = piece.min(n - at);
            let bindings: Vec<wgpu::BufferBinding<'_>> = buffers
                .iter()
                .map(|b| wgpu::BufferBinding {
                    buffer: b,
                    offset: (at * elem) as u64,
                    size: std::num::NonZeroU64::new((len * elem).div_ceil(4) as u64 * 4),
                })
                .collect();
            self.dispatch(name, len, &params(len), &bindings)?;
            at += len;
        }
        Ok(())
    }

    /// Dispatches kernel `name` over `threads` threads with `params` and `bindings`.
    fn dispatch(
        &self,
        name: &'static str,
        threads: usize,
        params: &[u32],
        bindings: &[wgpu::BufferBinding<'_>],
    ) -> Result<()> {
        if threads == 0 {
            return Ok(());
        }
        let pipeline = self.pipeline(name)?;
        let groups = (threads as u64).div_ceil(u64::from(GROUP));
        let (gx, gy) = if groups <= u64::from(MAX_GROUPS) {
            (groups as u32, 1)
        } else {
            let gy = groups.div_ceil(u64::from(MAX_GROUPS));
            if gy > u64::from(MAX_GROUPS) {
                return Err(device_error(format!(
                    "{threads} threads is too many to dispatch"
                )));
            }
            (MAX_GROUPS, gy as u32)
        };
        self.scoped(|| {
            let params = self
                .device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("params"),
                    contents: bytemuck::cast_slice(params),
                    usage: wgpu::BufferUsages::STORAGE,
                });
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: params.as_entire_binding(),
            }];
            for (i, b) in bindings.iter().enumerate() {
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: wgpu::BindingResource::Buffer(b.clone()),
                });
            }
            let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(name),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(name) });
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(name),
                    timestamp_writes: None,
                });
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(gx, gy, 1);
            }
            self.queue.submit([enc.finish()]);
        })
    }

    /// `a * x + b` elementwise (the unary kernel's affine case).
    fn affine(&self, x: &WgpuStorage, a: f32, b: f32) -> Result<WgpuStorage> {
        let out = self.new_storage(x.len, x.dtype)?;
        let (a, b) = (a.to_bits(), b.to_bits());
        self.run_pieces(
            "unary",
            x.len,
            4,
            &|n| vec![n as u32, AFFINE_CODE, a, b],
            &[&x.buf, &out.buf],
        )?;
        Ok(out)
    }

    /// Reduces each row of the contiguous (rows, len) matrix `x` (for tensors past the binding
    /// limit). Rows longer than a binding go in chunks, each reduced in runs to partials that
    /// are reduced again per row; shorter ones as blocks of whole rows.
    fn reduce_matrix(
        &self,
        op: ReduceKind,
        x: &WgpuStorage,
        rows: usize,
        len: usize,
    ) -> Result<WgpuStorage> {
        let room = ((self.max_binding - self.align) / 4) as usize;
        if len <= room {
            return self.reduce(op, x, &[rows, len], &[1]);
        }
        let chunks = len.div_ceil(room);
        // runs per chunk; the last chunk's surplus runs are empty and give the identity
        let parts = room.div_ceil(LOOP_MAX);
        let per_row = chunks * parts;
        let partial = self.new_storage(rows * per_row, DType::F32)?;
        for row in 0..rows {
            for j in 0..chunks {
                let n = room.min(len - j * room);
                let (xb, x_base) = self.window(&x.buf, row * len + j * room, n, 4)?;
                let (pb, p_base) =
                    self.window(&partial.buf, row * per_row + j * parts, parts, 4)?;
                let n = n as u32;
                let p = [
                    parts as u32,
                    op.code(),
                    1,
                    n,
                    n,
                    1,
                    1,
                    reduce_start(op),
                    x_base,
                    p_base,
                    LOOP_MAX as u32,
                    parts as u32,
                ];
                self.dispatch("reduce", parts, &p, &[xb, pb])?;
            }
        }
        self.reduce(op, &partial, &[rows, per_row], &[1])
    }

    /// A product over an inner dim longer than a thread may loop (see [`LOOP_MAX`]) or than a
    /// binding holds: the sum of the products of `chunk`-long pieces of a's columns and b's
    /// rows.
    fn matmul_k_chunks(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        d: MatmulDims,
        chunk: usize,
    ) -> Result<WgpuStorage> {
        let (ab, bb) = (d.batch, if d.b_batched { d.batch } else { 1 });
        let out = [d.batch * d.m * d.n];
        let mut sum: Option<WgpuStorage> = None;
        for k0 in (0..d.k).step_by(chunk) {
            let kc = chunk.min(d.k - k0);
            let a_part = if d.a_trans {
                self.slice(a, &[ab, d.k, d.m], &[0, k0, 0], &[ab, kc, d.m])?
            } else {
                self.slice(a, &[ab, d.m, d.k], &[0, 0, k0], &[ab, d.m, kc])?
            };
            let b_part = if d.b_trans {
                self.slice(b, &[bb, d.n, d.k], &[0, 0, k0], &[bb, d.n, kc])?
            } else {
                self.slice(b, &[bb, d.k, d.n], &[0, k0, 0], &[bb, kc, d.n])?
            };
            let c = self.matmul(&a_part, &b_part, MatmulDims { k: kc, ..d })?;
            sum = Some(match sum {
                None => c,
                Some(s) => self.binary(BinaryOp::Add, &s, &out, &c, &out, &out)?,
            });
        }
        sum.ok_or_else(|| Error::Internal("a product in no chunks".into()))
    }

    /// (Log-)softmax over long lines, where one thread per line would loop too long: the
    /// line maxima, `x - max`, its exponentials and their line sums are separate kernels.
    fn softmax_in_passes(
        &self,
        x: &WgpuStorage,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<WgpuStorage> {
        let mut line = shape.to_vec();
        line[dim] = 1;
        let m = self.reduce(ReduceKind::Max, x, shape, &[dim])?;
        let xm = self.binary(BinaryOp::Sub, x, shape, &m, &line, shape)?;
        let e = self.unary(UnaryOp::Exp, &xm)?;
        let sum = self.reduce(ReduceKind::Sum, &e, shape, &[dim])?;
        if log {
            let ls = self.unary(UnaryOp::Log, &sum)?;
            self.binary(BinaryOp::Sub, &xm, shape, &ls, &line, shape)
        } else {
            self.binary(BinaryOp::Div, &e, shape, &sum, &line, shape)
        }
    }

    fn need_f32(&self, s: &WgpuStorage, op: &str) -> Result<()> {
        if s.dtype == DType::F32 {
            Ok(())
        } else {
            Err(device_error(format!(
                "{op}: wgpu kernels compute in f32, not {}",
                s.dtype
            )))
        }
    }

    /// The bytes of a buffer, through a mapped staging copy.
    fn read_bytes(&self, buf: &wgpu::Buffer, bytes: usize) -> Result<Vec<u8>> {
        if bytes == 0 {
            return Ok(vec![]);
        }
        let size = (bytes as u64).div_ceil(4) * 4;
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
            self.queue.submit([enc.finish()]);
            staging
        })?;
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

    /// `copy` between `x` and `out`: `x`'s box gathered into the contiguous `out` (`put`
    /// false), or the contiguous `x` scattered into `out`'s box (`put` true).
    fn strided(
        &self,
        x: &WgpuStorage,
        out: &WgpuStorage,
        copy: &StridedCopy,
        put: bool,
    ) -> Result<()> {
        let contiguous = (0, strides(&copy.extent));
        let strided = (copy.base, copy.strides.clone());
        let (from, to) = if put {
            (contiguous, strided)
        } else {
            (strided, contiguous)
        };
        self.copy_box(&copy.extent, x, &from, out, &to)
    }

    /// Copies the box `extent` from `x` (first element and strides `from`) to `out` (`to`).
    /// Past the binding limit the box is cut into blocks, halving the dim that spans most until
    /// both sides of a block fit a binding (a transpose of a large matrix is a few tiles).
    fn copy_box(
        &self,
        extent: &[usize],
        x: &WgpuStorage,
        from: &(usize, Vec<usize>),
        out: &WgpuStorage,
        to: &(usize, Vec<usize>),
    ) -> Result<()> {
        let n: usize = extent.iter().product();
        let elem = x.dtype.size();
        let params = |ext: &[usize], x_base: usize, out_base: usize| {
            let mut p = vec![
                ext.iter().product::<usize>() as u32,
                (elem / 4) as u32,
                ext.len() as u32,
                x_base as u32,
                out_base as u32,
            ];
            p.extend(ext.iter().chain(&from.1).chain(&to.1).map(|&d| d as u32));
            p
        };
        let fits = |s: &WgpuStorage| (s.len * elem) as u64 <= self.max_binding;
        if (fits(x) && fits(out)) || n == 0 {
            return self.run(
                "strided",
                n,
                &params(extent, from.0, to.0),
                &[&x.buf, &out.buf],
            );
        }
        let span = |b: &[usize], st: &[usize]| {
            1 + b.iter().zip(st).map(|(b, s)| (b - 1) * s).sum::<usize>()
        };
        let room = (self.max_binding - self.align) as usize / elem;
        let mut block = extent.to_vec();
        while span(&block, &from.1) > room || span(&block, &to.1) > room {
            let widest = (0..block.len())
                .max_by_key(|&d| (block[d] - 1) * from.1[d].max(to.1[d]))
                .ok_or_else(|| Error::Internal("a 0-d copy past the binding limit".into()))?;
            block[widest] = block[widest].div_ceil(2);
        }
        let counts: Vec<usize> = extent
            .iter()
            .zip(&block)
            .map(|(e, b)| e.div_ceil(*b))
            .collect();
        for tile in 0..counts.iter().product::<usize>() {
            let (mut rest, mut sub, mut x0, mut o0) = (tile, block.clone(), from.0, to.0);
            for d in (0..extent.len()).rev() {
                let start = rest % counts[d] * block[d];
                rest /= counts[d];
                sub[d] = block[d].min(extent[d] - start);
                x0 += start * from.1[d];
                o0 += start * to.1[d];
            }
            let (xb, x_base) = self.window(&x.buf, x0, span(&sub, &from.1), elem)?;
            let (ob, out_base) = self.window(&out.buf, o0, span(&sub, &to.1), elem)?;
            let p = params(&sub, x_base as usize, out_base as usize);
            self.dispatch("strided", sub.iter().product(), &p, &[xb, ob])?;
        }
        Ok(())
    }

    /// `len` elements of `elem` bytes of `buf` from element `start`, bound at the aligned
    /// offset at or below it: the binding and the element where the range starts in it.
    fn window<'b>(
        &self,
        buf: &'b wgpu::Buffer,
        start: usize,
        len: usize,
        elem: usize,
    ) -> Result<(wgpu::BufferBinding<'b>, u32)> {
        let from = (start * elem) as u64;
        let offset = from / self.align * self.align;
        let size = ((from - offset) + (len * elem) as u64).max(4).div_ceil(4) * 4;
        if size > self.max_binding {
            return Err(device_error(format!(
                "a piece of {size} bytes exceeds this adapter's storage binding limit of {} bytes",
                self.max_binding
            )));
        }
        let binding = wgpu::BufferBinding {
            buffer: buf,
            offset,
            size: std::num::NonZeroU64::new(size),
        };
        Ok((binding, ((from - offset) / elem as u64) as u32))
    }

    /// One matmul dispatch over bound (pieces of) a, b and c whose data start at `bases`; c's
    /// rows are `ldc` elements apart.
    fn matmul_piece(
        &self,
        d: MatmulDims,
        bases: [u32; 3],
        ldc: usize,
        bindings: &[wgpu::BufferBinding<'_>; 3],
    ) -> Result<()> {
        let (name, threads) = if self.tiled_matmul {
            // one workgroup per 64x64 tile of each product
            let tiles = d.batch * d.m.div_ceil(64) * d.n.div_ceil(64);
            ("matmul_tiled", tiles * GROUP as usize)
        } else {
            ("matmul", d.batch * d.m.div_ceil(4) * d.n.div_ceil(4))
        };
        let p = [
            d.batch as u32,
            d.m as u32,
            d.k as u32,
            d.n as u32,
            u32::from(d.b_batched),
            u32::from(d.a_trans),
            u32::from(d.b_trans),
            bases[0],
            bases[1],
            bases[2],
            ldc as u32,
        ];
        self.dispatch(name, threads, &p, bindings)
    }

    /// A product whose operands or result exceed one binding. A transposed `a` is made
    /// contiguous first, and so is a `b` too large for one binding unless it is stored
    /// transposed (its column blocks are then row blocks of the stored (n, k)). Per batch,
    /// tiles of (rows of a) x (columns of b) that each fit a binding, c written at row stride n.
    fn matmul_in_pieces(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        out: &WgpuStorage,
        d: MatmulDims,
    ) -> Result<()> {
        let transposed = |x: &WgpuStorage, shape: [usize; 3]| -> Result<WgpuStorage> {
            let t = self.new_storage(x.len, DType::F32)?;
            self.strided(x, &t, &StridedCopy::permute(&shape, &[0, 2, 1]), false)?;
            Ok(t)
        };
        if d.a_trans {
            let a = transposed(a, [d.batch, d.k, d.m])?;
            let d = MatmulDims {
                a_trans: false,
                ..d
            };
            return self.matmul_in_pieces(&a, b, out, d);
        }
        let room = ((self.max_binding - self.align) / 4) as usize;
        let b_len = d.k * d.n;
        if b_len > room && !d.b_trans {
            let batches = if d.b_batched { d.batch } else { 1 };
            let b = transposed(b, [batches, d.k, d.n])?;
            let d = MatmulDims { b_trans: true, ..d };
            return self.matmul_in_pieces(a, &b, out, d);
        }
        let cols = if b_len <= room {
            d.n.min(room)
        } else {
            room / d.k
        };
        // `matmul` chunks k to at most `room`, and c is not empty: rows and cols are >= 1
        let rows = (room / d.k.max(1)).min(room.saturating_sub(cols) / d.n.max(1) + 1);
        for bi in 0..d.batch {
            let b_start = if d.b_batched { bi * b_len } else { 0 };
            let mut j0 = 0;
            while j0 < d.n {
                let nb = cols.min(d.n - j0);
                let (b_bind, b_base) = if nb == d.n {
                    self.window(&b.buf, b_start, b_len, 4)?
                } else {
                    self.window(&b.buf, b_start + j0 * d.k, nb * d.k, 4)?
                };
                let mut i0 = 0;
                while i0 < d.m {
                    let r = rows.min(d.m - i0);
                    let first = bi * d.m + i0;
                    let (a_bind, a_base) = self.window(&a.buf, first * d.k, r * d.k, 4)?;
                    let c_span = (r - 1) * d.n + nb;
                    let (c_bind, c_base) = self.window(&out.buf, first * d.n + j0, c_span, 4)?;
                    let piece = MatmulDims {
                        batch: 1,
                        m: r,
                        n: nb,
                        b_batched: false,
                        ..d
                    };
                    self.matmul_piece(
                        piece,
                        [a_base, b_base, c_base],
                        d.n,
                        &[a_bind, b_bind.clone(), c_bind],
                    )?;
                    i0 += r;
                }
                j0 += nb;
            }
        }
        Ok(())
    }

    /// The row gather (`scatter` false: `data` is the table) or scatter-add (`data` holds the
    /// rows to add) over blocks of table rows and of indices that each fit a binding: every
    /// (row block, index block) pair is one dispatch; a scatter adds each later index block to
    /// what the earlier ones wrote.
    fn rows_blocks(
        &self,
        scatter: bool,
        data: &WgpuStorage,
        rows: usize,
        rw: usize,
        indices: &WgpuStorage,
        out: &WgpuStorage,
    ) -> Result<()> {
        let count = indices.len;
        if count * rw == 0 && !scatter || rows * rw == 0 {
            return Ok(());
        }
        let room = (self.max_binding - self.align) as usize / 4 / rw;
        if room == 0 {
            return Err(device_error(
                "gather/scatter rows: one row exceeds this adapter's storage binding limit",
            ));
        }
        // indices per block: what a binding holds of the rows and of the (8-byte) indices
        let idx_room = (self.max_binding - self.align) as usize / 8;
        let (table, list) = if scatter { (out, data) } else { (data, out) };
        let mut t0 = 0;
        while t0 < rows {
            let tb = room.min(rows - t0);
            let (table_bind, table_base) = self.window(&table.buf, t0 * rw, tb * rw, 4)?;
            let mut r0 = 0;
            loop {
                // a scatter thread loops over its index block: at most LOOP_MAX of them
                let most = if scatter { room.min(LOOP_MAX) } else { room };
                let ob = most.min(idx_room).min(count - r0);
                let (list_bind, list_base) = self.window(&list.buf, r0 * rw, ob * rw, 4)?;
                let (idx, idx_base) = self.window(&indices.buf, r0, ob, 8)?;
                let (src_base, out_base) = if scatter {
                    (list_base, table_base)
                } else {
                    (table_base, list_base)
                };
                let p = [
                    u32::from(scatter),
                    ob as u32,
                    rw as u32,
                    tb as u32,
                    t0 as u32,
                    idx_base,
                    src_base,
                    out_base,
                    u32::from(r0 > 0),
                ];
                let (threads, bindings) = if scatter {
                    (tb * rw, [list_bind, idx.clone(), table_bind.clone()])
                } else {
                    (ob * rw, [table_bind.clone(), idx.clone(), list_bind])
                };
                self.dispatch("rows", threads, &p, &bindings)?;
                r0 += ob;
                if r0 >= count {
                    break;
                }
            }
            t0 += tb;
        }
        Ok(())
    }

    /// Host-side check of gather/scatter indices (`0..rows`), as core's contract requires.
    fn check_indices(&self, indices: &WgpuStorage, rows: usize, op: &'static str) -> Result<()> {
        if indices.dtype != DType::I64 {
            return Err(Error::DTypeMismatch {
                expected: DType::I64,
                got: indices.dtype,
            });
        }
        let bytes = self.read_bytes(&indices.buf, indices.len * 8)?;
        for c in bytes.chunks_exact(8) {
            let i = i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            if i < 0 || i as usize >= rows {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("index {i} is outside 0..{rows}"),
                });
            }
        }
        Ok(())
    }
}

impl Backend for WgpuBackend {
    type Storage = WgpuStorage;

    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn computes(&self, dtype: DType) -> bool {
        dtype == DType::F32
    }

    fn upload(&self, data: &HostData) -> Result<WgpuStorage> {
        let bytes = data.as_bytes();
        let s = self.new_storage(data.len(), data.dtype())?;
        if !bytes.is_empty() {
            self.scoped(|| self.queue.write_buffer(&s.buf, 0, bytes))?;
        }
        Ok(s)
    }

    fn download(&self, s: &WgpuStorage) -> Result<HostData> {
        let bytes = self.read_bytes(&s.buf, s.len * s.dtype.size())?;
        Ok(HostData::from_bytes(s.dtype, &bytes))
    }

    fn unary(&self, op: UnaryOp, x: &WgpuStorage) -> Result<WgpuStorage> {
        self.need_f32(x, "unary")?;
        let out = self.new_storage(x.len, x.dtype)?;
        let code = op.code();
        self.run_pieces(
            "unary",
            x.len,
            4,
            &|n| vec![n as u32, code, 0, 0],
            &[&x.buf, &out.buf],
        )?;
        Ok(out)
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &WgpuStorage,
        a_shape: &[usize],
        b: &WgpuStorage,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<WgpuStorage> {
        self.need_f32(a, "binary")?;
        self.need_f32(b, "binary")?;
        let n: usize = out_shape.iter().product();
        let out = self.new_storage(n, DType::F32)?;
        let nd = out_shape.len();
        let aligned = |shape: &[usize]| -> Vec<u32> {
            broadcast_strides(shape, out_shape)
                .iter()
                .map(|&s| s as u32)
                .collect()
        };
        let code = op.code();
        if a_shape == out_shape && b_shape == out_shape {
            // no broadcasting: a flat elementwise op, which binds in pieces
            self.run_pieces(
                "binary",
                n,
                4,
                &|len| vec![len as u32, code, 1, len as u32, 1, 1, 0, 0, 0],
                &[&a.buf, &b.buf, &out.buf],
            )?;
            return Ok(out);
        }
        let (sa, sb) = (aligned(a_shape), aligned(b_shape));
        let params = |rows: usize, bases: [u32; 3]| {
            let mut p = vec![0, code, nd as u32];
            p.extend(out_shape.iter().map(|&d| d as u32));
            p[3] = rows as u32;
            p[0] = p[3..].iter().product();
            p.extend(sa.iter().chain(&sb).copied());
            p.extend(bases);
            p
        };
        let fits = |s: &WgpuStorage| (s.len * 4) as u64 <= self.max_binding;
        if n == 0 {
            return Ok(out);
        }
        if fits(a) && fits(b) && fits(&out) {
            let p = params(out_shape[0], [0; 3]);
            self.run("binary", n, &p, &[&a.buf, &b.buf, &out.buf])?;
            return Ok(out);
        }
        // Past the binding limit: blocks of the output's first dim, and of each input's unless
        // it is broadcast along it (then bound whole).
        let out_row = n / out_shape[0];
        let row = |s: &[u32]| if s[0] == 0 { 0 } else { s[0] as usize };
        let widest = out_row.max(row(&sa)).max(row(&sb)).max(1);
        let block = ((self.max_binding - self.align) as usize / 4 / widest).max(1);
        let mut i0 = 0;
        while i0 < out_shape[0] {
            let r = block.min(out_shape[0] - i0);
            // (first element, length) of an input's piece
            let piece = |x: &WgpuStorage, s: &[u32]| match row(s) {
                0 => (0, x.len),
                len => (i0 * len, r * len),
            };
            let ((a0, an), (b0, bn)) = (piece(a, &sa), piece(b, &sb));
            let (ab, a_base) = self.window(&a.buf, a0, an, 4)?;
            let (bb, b_base) = self.window(&b.buf, b0, bn, 4)?;
            let (ob, o_base) = self.window(&out.buf, i0 * out_row, r * out_row, 4)?;
            let p = params(r, [a_base, b_base, o_base]);
            self.dispatch("binary", r * out_row, &p, &[ab, bb, ob])?;
            i0 += r;
        }
        Ok(out)
    }

    fn scale(&self, x: &WgpuStorage, s: f64) -> Result<WgpuStorage> {
        self.need_f32(x, "scale")?;
        self.affine(x, s as f32, 0.0)
    }

    fn add_scalar(&self, x: &WgpuStorage, s: f64) -> Result<WgpuStorage> {
        self.need_f32(x, "add_scalar")?;
        self.affine(x, 1.0, s as f32)
    }

    fn gather_rows(
        &self,
        table: &WgpuStorage,
        rows: usize,
        row_len: usize,
        indices: &WgpuStorage,
    ) -> Result<WgpuStorage> {
        self.check_indices(indices, rows, "gather_rows")?;
        let out = self.new_storage(indices.len * row_len, table.dtype)?;
        let rw = row_len * table.dtype.size() / 4;
        self.rows_blocks(false, table, rows, rw, indices, &out)?;
        Ok(out)
    }

    fn scatter_add_rows(
        &self,
        src: &WgpuStorage,
        rows: usize,
        row_len: usize,
        indices: &WgpuStorage,
    ) -> Result<WgpuStorage> {
        self.need_f32(src, "scatter_add_rows")?;
        self.check_indices(indices, rows, "scatter_add_rows")?;
        let out = self.new_storage(rows * row_len, src.dtype)?;
        self.rows_blocks(true, src, rows, row_len, indices, &out)?;
        Ok(out)
    }

    fn reduce(
        &self,
        op: ReduceKind,
        x: &WgpuStorage,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<WgpuStorage> {
        self.need_f32(x, "reduce")?;
        let large = (x.len * 4) as u64 > self.max_binding;
        let n_out: usize = (0..shape.len())
            .map(|d| if dims.contains(&d) { 1 } else { shape[d] })
            .product();
        let count: usize = dims.iter().map(|&d| shape[d]).product();
        let x_row = x
            .len
            .checked_div(shape.first().copied().unwrap_or(1))
            .unwrap_or(0);
        if large && (dims.contains(&0) || (x_row * 4) as u64 > self.max_binding - self.align) {
            // The kept dims first and the reduced ones last: each row of that matrix reduced.
            let perm: Vec<usize> = (0..shape.len())
                .filter(|d| !dims.contains(d))
                .chain(dims.iter().copied())
                .collect();
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return self.reduce_matrix(op, x, n_out, count);
            }
            let moved = self.permute(x, shape, &perm)?;
            return self.reduce_matrix(op, &moved, n_out, count);
        }
        // Each output's elements in runs of at most LOOP_MAX; several runs leave partials,
        // reduced again below.
        let parts = count.div_ceil(LOOP_MAX).max(1);
        let part_len = count.div_ceil(parts);
        let out = self.new_storage(n_out * parts, DType::F32)?;
        let code = op.code();
        // `n` outputs of `shape` with its first dim cut to `lead`, bound at element bases
        let params = |lead: usize, n: usize, x_base: u32, out_base: u32| {
            let mut sh = shape.to_vec();
            if let Some(first) = sh.first_mut() {
                *first = lead;
            }
            let mut p = vec![(n * parts) as u32, code, sh.len() as u32, count as u32];
            p.extend(sh.iter().map(|&d| d as u32));
            p.extend((0..sh.len()).map(|d| u32::from(dims.contains(&d))));
            p.extend(strides(shape).iter().map(|&s| s as u32));
            p.extend([
                reduce_start(op),
                x_base,
                out_base,
                part_len as u32,
                parts as u32,
            ]);
            p
        };
        let finish = |out: WgpuStorage| {
            if parts == 1 {
                Ok(out)
            } else {
                self.reduce(op, &out, &[n_out, parts], &[1])
            }
        };
        if !large {
            let p = params(shape.first().copied().unwrap_or(1), n_out, 0, 0);
            self.run("reduce", n_out * parts, &p, &[&x.buf, &out.buf])?;
            return finish(out);
        }
        // Past the binding limit with the first dim kept: blocks of it, each a contiguous
        // piece of x and of out.
        let out_row = n_out / shape[0] * parts;
        let block = ((self.max_binding - self.align) as usize / 4 / x_row.max(1)).max(1);
        let mut i0 = 0;
        while i0 < shape[0] {
            let r = block.min(shape[0] - i0);
            let (xb, x_base) = self.window(&x.buf, i0 * x_row, r * x_row, 4)?;
            let (ob, out_base) = self.window(&out.buf, i0 * out_row, r * out_row, 4)?;
            let p = params(r, r * out_row / parts, x_base, out_base);
            self.dispatch("reduce", r * out_row, &p, &[xb, ob])?;
            i0 += r;
        }
        finish(out)
    }

    fn softmax(
        &self,
        x: &WgpuStorage,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<WgpuStorage> {
        self.need_f32(x, "softmax")?;
        let len = shape[dim];
        if len > LOOP_MAX / 2 {
            return self.softmax_in_passes(x, shape, dim, log);
        }
        let inner: usize = shape[dim + 1..].iter().product();
        let lines = x.len.checked_div(len).unwrap_or(0);
        let params = |lines: usize, x_base: u32, out_base: u32| {
            [
                lines as u32,
                len as u32,
                inner.max(1) as u32,
                u32::from(log),
                NEG_INF,
                x_base,
                out_base,
            ]
        };
        if (x.len * 4) as u64 <= self.max_binding {
            let out = self.new_storage(x.len, DType::F32)?;
            self.run("softmax", lines, &params(lines, 0, 0), &[&x.buf, &out.buf])?;
            return Ok(out);
        }
        // Past the binding limit: blocks of the dims before `dim`, each a contiguous piece;
        // where one such block is too large, `dim` is moved last first (and back after).
        let block_len = len * inner;
        let outer = x.len / block_len;
        let block = (self.max_binding - self.align) as usize / 4 / block_len;
        if block == 0 && inner > 1 {
            let perm: Vec<usize> = (0..shape.len())
                .filter(|&d| d != dim)
                .chain([dim])
                .collect();
            let moved_shape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
            let moved = self.permute(x, shape, &perm)?;
            let y = self.softmax(&moved, &moved_shape, shape.len() - 1, log)?;
            let mut back = vec![0; perm.len()];
            for (i, &d) in perm.iter().enumerate() {
                back[d] = i;
            }
            return self.permute(&y, &moved_shape, &back);
        }
        // lines of at most LOOP_MAX / 2 always fit: block >= 1 here
        let block = block.max(1);
        let out = self.new_storage(x.len, DType::F32)?;
        let mut o0 = 0;
        while o0 < outer {
            let r = block.min(outer - o0);
            let (xb, x_base) = self.window(&x.buf, o0 * block_len, r * block_len, 4)?;
            let (ob, out_base) = self.window(&out.buf, o0 * block_len, r * block_len, 4)?;
            let n = r * inner;
            self.dispatch("softmax", n, &params(n, x_base, out_base), &[xb, ob])?;
            o0 += r;
        }
        Ok(out)
    }

    fn matmul(&self, a: &WgpuStorage, b: &WgpuStorage, d: MatmulDims) -> Result<WgpuStorage> {
        self.need_f32(a, "matmul")?;
        self.need_f32(b, "matmul")?;
        let out = self.new_storage(d.batch * d.m * d.n, DType::F32)?;
        if out.len == 0 {
            return Ok(out);
        }
        // inner dims a thread may loop over, and whose one row of a binds
        let k_max = (2 * LOOP_MAX).min(((self.max_binding - self.align) / 4) as usize);
        if d.k > k_max {
            return self.matmul_k_chunks(a, b, d, k_max);
        }
        let bytes = |s: &WgpuStorage| (s.len * 4) as u64;
        if [bytes(a), bytes(b), bytes(&out)]
            .iter()
            .all(|&x| x <= self.max_binding)
        {
            let whole = [&a.buf, &b.buf, &out.buf].map(|buf| wgpu::BufferBinding {
                buffer: buf,
                offset: 0,
                size: None,
            });
            self.matmul_piece(d, [0, 0, 0], d.n, &whole)?;
        } else {
            self.matmul_in_pieces(a, b, &out, d)?;
        }
        Ok(out)
    }

    fn permute(&self, x: &WgpuStorage, shape: &[usize], perm: &[usize]) -> Result<WgpuStorage> {
        let out = self.new_storage(x.len, x.dtype)?;
        self.strided(x, &out, &StridedCopy::permute(shape, perm), false)?;
        Ok(out)
    }

    fn slice(
        &self,
        x: &WgpuStorage,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<WgpuStorage> {
        let out = self.new_storage(extent.iter().product(), x.dtype)?;
        self.strided(x, &out, &StridedCopy::slice(shape, start, extent), false)?;
        Ok(out)
    }

    fn cat(&self, xs: &[&WgpuStorage], shapes: &[&[usize]], dim: usize) -> Result<WgpuStorage> {
        if xs.is_empty() {
            return Err(Error::Internal("cat of no tensors".into()));
        }
        let (out_shape, copies) = StridedCopy::cat(shapes, dim);
        let dtype = xs[0].dtype;
        let out = self.new_storage(out_shape.iter().product(), dtype)?;
        for (x, copy) in xs.iter().zip(&copies) {
            self.strided(x, &out, copy, true)?;
        }
        Ok(out)
    }

    fn dtype(&self, s: &WgpuStorage) -> DType {
        s.dtype
    }
    fn len(&self, s: &WgpuStorage) -> usize {
        s.len
    }
}

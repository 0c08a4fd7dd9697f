//! Binding and dispatch: the compiled pipelines, buffers bound whole or in pieces under the
//! storage-binding limit, windows at aligned offsets, and one dispatch with its parameters.

use gflow_core::backend::{KernelLang, kernel_constants};
use gflow_core::{Error, Result};
use wgpu::util::DeviceExt;

use crate::{WgpuBackend, device_error};

const COMMON: &str = include_str!("../shaders/common.wgsl");

/// The kernels, by name.
const KERNELS: [(&str, &str); 26] = [
    (
        "unary",
        concat!(
            include_str!("../shaders/unary_ops.wgsl"),
            include_str!("../shaders/unary.wgsl")
        ),
    ),
    (
        "unary_mul",
        concat!(
            include_str!("../shaders/unary_ops.wgsl"),
            include_str!("../shaders/unary_mul.wgsl")
        ),
    ),
    ("binary", include_str!("../shaders/binary.wgsl")),
    ("reduce", include_str!("../shaders/reduce.wgsl")),
    ("softmax", include_str!("../shaders/softmax.wgsl")),
    ("matmul", include_str!("../shaders/matmul.wgsl")),
    ("matmul_tiled", include_str!("../shaders/matmul_tiled.wgsl")),
    ("strided", include_str!("../shaders/strided.wgsl")),
    ("rows", include_str!("../shaders/rows.wgsl")),
    ("triangle", include_str!("../shaders/triangle.wgsl")),
    ("arg_reduce", include_str!("../shaders/arg_reduce.wgsl")),
    ("argsort", include_str!("../shaders/argsort.wgsl")),
    ("cumsum", include_str!("../shaders/cumsum.wgsl")),
    ("where", include_str!("../shaders/where.wgsl")),
    ("gather_dim", include_str!("../shaders/gather_dim.wgsl")),
    ("convert", include_str!("../shaders/convert.wgsl")),
    ("convert_f16", include_str!("../shaders/convert_f16.wgsl")),
    ("halves", include_str!("../shaders/halves.wgsl")),
    ("strided16", include_str!("../shaders/strided16.wgsl")),
    ("adam", include_str!("../shaders/adam.wgsl")),
    ("norm", include_str!("../shaders/norm.wgsl")),
    ("norm_param", include_str!("../shaders/norm_param.wgsl")),
    ("sum_squares", include_str!("../shaders/sum_squares.wgsl")),
    (
        "attention",
        concat!(
            include_str!("../shaders/attention_common.wgsl"),
            include_str!("../shaders/attention.wgsl")
        ),
    ),
    (
        "attention_dq",
        concat!(
            include_str!("../shaders/attention_common.wgsl"),
            include_str!("../shaders/attention_dq.wgsl")
        ),
    ),
    (
        "attention_dkdv",
        concat!(
            include_str!("../shaders/attention_common.wgsl"),
            include_str!("../shaders/attention_dkdv.wgsl")
        ),
    ),
];

/// Threads per workgroup (every kernel's `@workgroup_size` but attention's 64, which runs
/// through [`WgpuBackend::dispatch_groups`]).
pub(crate) const GROUP: u32 = 256;
/// Most workgroups along one dispatch dimension (WebGPU's guaranteed limit).
const MAX_GROUPS: u32 = 65535;

impl WgpuBackend {
    pub(crate) fn pipeline(
        &self,
        name: &'static str,
    ) -> Result<(wgpu::ComputePipeline, wgpu::BindGroupLayout)> {
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
        // an `enable` directive must open the module
        let (enable, body) = match body.strip_prefix("enable f16;\n") {
            Some(rest) => ("enable f16;\n", rest),
            None => ("", body),
        };
        let source = format!("{enable}{codes}{COMMON}\n{body}");
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
        let entry = (p.clone(), p.get_bind_group_layout(0));
        cache.insert(name, entry.clone());
        Ok(entry)
    }

    /// Dispatches kernel `name` over `threads` threads with `params` and the buffers bound
    /// whole, in order after the parameters. A buffer past the binding limit is an error here:
    /// only the elementwise kernels bind in pieces ([`WgpuBackend::run_pieces`]).
    pub(crate) fn run(
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
    pub(crate) fn run_pieces(
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
    pub(crate) fn dispatch(
        &self,
        name: &'static str,
        threads: usize,
        params: &[u32],
        bindings: &[wgpu::BufferBinding<'_>],
    ) -> Result<()> {
        let groups = (threads as u64).div_ceil(u64::from(GROUP));
        self.dispatch_groups(name, groups, params, bindings)
    }

    /// Dispatches kernel `name` over `groups` workgroups of its own size (on a 2-D grid past
    /// 65535: a kernel numbers them `x + y * num_workgroups.x` and ignores those past its
    /// count) with `params` and `bindings`.
    pub(crate) fn dispatch_groups(
        &self,
        name: &'static str,
        groups: u64,
        params: &[u32],
        bindings: &[wgpu::BufferBinding<'_>],
    ) -> Result<()> {
        if groups == 0 {
            return Ok(());
        }
        let (pipeline, layout) = self.pipeline(name)?;
        let (gx, gy) = if groups <= u64::from(MAX_GROUPS) {
            (groups as u32, 1)
        } else {
            let gy = groups.div_ceil(u64::from(MAX_GROUPS));
            if gy > u64::from(MAX_GROUPS) {
                return Err(device_error(format!(
                    "{groups} workgroups is too many to dispatch"
                )));
            }
            (MAX_GROUPS, gy as u32)
        };
        let work = self.scoped(|| {
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
                layout: &layout,
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
            enc.finish()
        })?;
        self.submit(work)
    }

    /// `len` elements of `elem` bytes of `buf` from element `start`, bound at the aligned
    /// offset at or below it: the binding and the element where the range starts in it.
    pub(crate) fn window<'b>(
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
}

//! gflow's CUDA backend: core's [`Backend`] on cudarc, loaded at run time (it builds with no
//! CUDA toolkit and runs only where the driver is). Matrix products are cuBLAS (strided batched
//! GEMM, default math mode, so f32 is true f32 and never TF32); every other kernel is CUDA C++
//! in `kernels/gflow.cu`, compiled once per process by NVRTC for the device's architecture.
//!
//! Arithmetic is f32 and f64; every dtype is stored, moved, sliced, permuted, concatenated and
//! gathered. cudarc panics when a CUDA library is missing, so [`CudaBackend::new`] checks for
//! the driver, NVRTC and cuBLAS libraries before touching cudarc and returns
//! `BackendUnavailable` without them. Allocations go through the driver's stream-ordered memory
//! pool (`cuMemAllocAsync`), which keeps freed blocks for reuse: that is the buffer pool.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
    ValidAsZeroBits,
};
use gflow_core::backend::{
    AFFINE_CODE, Backend, BinaryOp, KernelLang, MatmulDims, ReduceKind, UnaryOp, kernel_constants,
};
use gflow_core::shape::{StridedCopy, broadcast_strides};
use gflow_core::{DType, DeviceInfo, DeviceKind, DeviceType, Error, HostData, Result};

/// The kernels' CUDA C++ source.
const SOURCE: &str = include_str!("../kernels/gflow.cu");
/// Threads per block (the source's `BLOCK`).
const BLOCK: u32 = 256;
/// Most blocks of one launch (kernels loop grid-stride over the rest).
const MAX_BLOCKS: usize = 1 << 16;
/// Elements one block of a row reduction should take at least before a row is cut in parts.
const PER_BLOCK: usize = 1 << 14;

fn device_error(reason: impl std::fmt::Display) -> Error {
    Error::Device {
        device: "cuda".into(),
        reason: reason.to_string(),
    }
}

/// A typed device buffer (at least one element long: the driver allocates no empty buffers).
enum Buf {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    I64(CudaSlice<i64>),
}

/// A tensor's buffer on the device.
pub struct CudaStorage {
    buf: Buf,
    len: usize,
}

impl CudaStorage {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn dtype(&self) -> DType {
        match self.buf {
            Buf::F32(_) => DType::F32,
            Buf::F64(_) => DType::F64,
            Buf::I64(_) => DType::I64,
        }
    }
}

/// Pushes a buffer of any dtype as a kernel argument (a device pointer).
macro_rules! arg_buf {
    ($builder:expr, $buf:expr) => {
        match $buf {
            Buf::F32(s) => $builder.arg(s),
            Buf::F64(s) => $builder.arg(s),
            Buf::I64(s) => $builder.arg(s),
        }
    };
}

/// An element type the float kernels compute in.
trait Float: DeviceRepr + ValidAsZeroBits + Copy + 'static {
    /// The kernels' name suffix.
    const SUFFIX: &'static str;
    const DTYPE: DType;
    fn of(s: &CudaStorage) -> Option<&CudaSlice<Self>>;
    fn wrap(buf: CudaSlice<Self>, len: usize) -> CudaStorage;
    fn from_f64(v: f64) -> Self;
}

/// `Float` for a type, its `Buf` variant and `DType`, and its kernels' suffix.
macro_rules! float_impl {
    ($t:ty, $variant:ident, $suffix:literal) => {
        impl Float for $t {
            const SUFFIX: &'static str = $suffix;
            const DTYPE: DType = DType::$variant;
            fn of(s: &CudaStorage) -> Option<&CudaSlice<$t>> {
                match &s.buf {
                    Buf::$variant(b) => Some(b),
                    _ => None,
                }
            }
            fn wrap(buf: CudaSlice<$t>, len: usize) -> CudaStorage {
                CudaStorage {
                    buf: Buf::$variant(buf),
                    len,
                }
            }
            fn from_f64(v: f64) -> $t {
                v as $t
            }
        }
    };
}
float_impl!(f32, F32, "f32");
float_impl!(f64, F64, "f64");

/// Runs `$body` with `$T` the float type of `$x`, or errs for a dtype without arithmetic.
macro_rules! by_float {
    ($x:expr, $op:literal, $T:ident => $body:expr) => {
        match $x.dtype() {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            other => Err(device_error(format!(
                "{}: CUDA kernels compute in f32 and f64, not {other}",
                $op
            ))),
        }
    };
}

/// The CUDA device 0 of this process, its stream, cuBLAS handle and compiled kernels.
pub struct CudaBackend {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    functions: HashMap<String, CudaFunction>,
    name: String,
}

/// The kernels `kernels/gflow.cu` defines.
const FUNCTIONS: [&str; 12] = [
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
];
/// The rest of the kernels (split only to keep lines short).
const MORE_FUNCTIONS: [&str; 8] = [
    "softmax_strided_f32",
    "softmax_strided_f64",
    "scatter_add_rows_f32",
    "scatter_add_rows_f64",
    "strided_w4",
    "strided_w8",
    "gather_rows_w4",
    "gather_rows_w8",
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

    fn open(ordinal: usize) -> Result<CudaBackend> {
        let ctx = CudaContext::new(ordinal).map_err(device_error)?;
        // One stream orders everything, so cudarc's per-buffer events are not needed.
        // SAFETY: no buffer exists yet and all work goes to the one stream below.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let (major, minor) = ctx.compute_capability().map_err(device_error)?;
        let source = format!("{}{SOURCE}", kernel_constants(KernelLang::Cuda));
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(
            source,
            cudarc::nvrtc::CompileOptions {
                options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
                ..Default::default()
            },
        )
        .map_err(|e| device_error(format!("NVRTC: {e:?}")))?;
        let module = ctx.load_module(ptx).map_err(device_error)?;
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

    /// Waits until the device has finished all submitted work (for timing).
    ///
    /// # Errors
    /// `Device` when the device reports an error.
    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize().map_err(device_error)
    }

    /// A device-to-device copy of `x`: the bandwidth peer of elementwise kernels.
    ///
    /// # Errors
    /// `Device` for allocation failures.
    pub fn copy(&self, x: &CudaStorage) -> Result<CudaStorage> {
        let s = &self.stream;
        let buf = match &x.buf {
            Buf::F32(b) => Buf::F32(s.clone_dtod(b).map_err(device_error)?),
            Buf::F64(b) => Buf::F64(s.clone_dtod(b).map_err(device_error)?),
            Buf::I64(b) => Buf::I64(s.clone_dtod(b).map_err(device_error)?),
        };
        Ok(CudaStorage { buf, len: x.len })
    }

    fn function(&self, name: &str) -> Result<&CudaFunction> {
        self.functions
            .get(name)
            .ok_or_else(|| Error::Internal(format!("no CUDA kernel {name}")))
    }

    /// An uninitialised buffer of `len` elements (the kernels write all of them).
    fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<CudaSlice<T>> {
        // SAFETY: every caller launches a kernel that writes all `len` elements before any read.
        unsafe { self.stream.alloc::<T>(len.max(1)) }.map_err(device_error)
    }

    fn alloc_like(&self, dtype: DType, len: usize) -> Result<CudaStorage> {
        let buf = match dtype {
            DType::F32 => Buf::F32(self.alloc(len)?),
            DType::F64 => Buf::F64(self.alloc(len)?),
            _ => Buf::I64(self.alloc(len)?),
        };
        Ok(CudaStorage { buf, len })
    }

    /// A small parameter array on the device (shapes and strides of the strided kernels).
    fn meta(&self, values: impl IntoIterator<Item = usize>) -> Result<CudaSlice<i64>> {
        let v: Vec<i64> = values.into_iter().map(|x| x as i64).collect();
        let v = if v.is_empty() { vec![0] } else { v };
        self.stream.clone_htod(&v).map_err(device_error)
    }

    fn float<'a, T: Float>(&self, s: &'a CudaStorage) -> Result<&'a CudaSlice<T>> {
        T::of(s).ok_or(Error::DTypeMismatch {
            expected: T::DTYPE,
            got: s.dtype(),
        })
    }

    fn unary_t<T: Float>(&self, code: i32, x: &CudaStorage, a: f64, b: f64) -> Result<CudaStorage> {
        let out = self.alloc::<T>(x.len)?;
        if x.len > 0 {
            let f = self.function(&format!("unary_{}", T::SUFFIX))?;
            let (n, a, b) = (x.len, T::from_f64(a), T::from_f64(b));
            let mut l = self.stream.launch_builder(f);
            l.arg(self.float::<T>(x)?)
                .arg(&out)
                .arg(&n)
                .arg(&code)
                .arg(&a)
                .arg(&b);
            // SAFETY: the arguments match unary_* (x, out of n elements, n, op, a, b).
            unsafe { l.launch(threads(n)) }.map_err(device_error)?;
        }
        Ok(T::wrap(out, x.len))
    }

    fn binary_t<T: Float>(
        &self,
        code: i32,
        a: &CudaStorage,
        a_shape: &[usize],
        b: &CudaStorage,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<CudaStorage> {
        let n: usize = out_shape.iter().product();
        let out = self.alloc::<T>(n)?;
        if n > 0 {
            let (x, y) = (self.float::<T>(a)?, self.float::<T>(b)?);
            if a_shape == out_shape && b_shape == out_shape {
                let f = self.function(&format!("binary_flat_{}", T::SUFFIX))?;
                let mut l = self.stream.launch_builder(f);
                l.arg(x).arg(y).arg(&out).arg(&n).arg(&code);
                // SAFETY: binary_flat_* takes (a, b, out of n elements, n, op).
                unsafe { l.launch(threads(n)) }.map_err(device_error)?;
            } else {
                let nd = out_shape.len() as i32;
                let meta = self.meta(
                    out_shape
                        .iter()
                        .copied()
                        .chain(broadcast_strides(a_shape, out_shape))
                        .chain(broadcast_strides(b_shape, out_shape)),
                )?;
                let f = self.function(&format!("binary_bcast_{}", T::SUFFIX))?;
                let mut l = self.stream.launch_builder(f);
                l.arg(x)
                    .arg(y)
                    .arg(&out)
                    .arg(&n)
                    .arg(&code)
                    .arg(&nd)
                    .arg(&meta);
                // SAFETY: binary_bcast_* takes (a, b, out, n, op, nd, meta of 3 * nd): the
                // strides address a and b inside their lengths.
                unsafe { l.launch(threads(n)) }.map_err(device_error)?;
            }
        }
        Ok(T::wrap(out, n))
    }

    /// `x` viewed as (rows, count), each row reduced; a long row is cut in parts that a second
    /// pass combines, so a full reduction uses the whole device.
    fn reduce_rows<T: Float>(
        &self,
        code: i32,
        x: &CudaSlice<T>,
        rows: usize,
        count: usize,
    ) -> Result<CudaSlice<T>> {
        let parts = if rows >= MAX_BLOCKS / 4 {
            1
        } else {
            (count / PER_BLOCK).clamp(1, MAX_BLOCKS / rows.max(1))
        };
        let out = self.alloc::<T>(rows * parts)?;
        if rows > 0 {
            let f = self.function(&format!("reduce_rows_{}", T::SUFFIX))?;
            let mut l = self.stream.launch_builder(f);
            l.arg(x)
                .arg(&out)
                .arg(&rows)
                .arg(&count)
                .arg(&parts)
                .arg(&code);
            // SAFETY: reduce_rows_* takes (x of rows * count, out of rows * parts, rows, count,
            // parts, op) and runs with BLOCK threads per block.
            unsafe { l.launch(blocks(rows * parts)) }.map_err(device_error)?;
        }
        if parts > 1 {
            return self.reduce_rows(code, &out, rows, parts);
        }
        Ok(out)
    }

    fn reduce_t<T: Float>(
        &self,
        code: i32,
        x: &CudaStorage,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<CudaStorage> {
        let n_out: usize = (0..shape.len())
            .filter(|d| !dims.contains(d))
            .map(|d| shape[d])
            .product();
        let (Some(&first), Some(&last)) = (dims.first(), dims.last()) else {
            // nothing reduced: the data as it is
            return self.copy(x);
        };
        if last - first + 1 == dims.len() {
            // the reduced dims are one block: (outer, count, inner)
            let outer: usize = shape[..first].iter().product();
            let count: usize = shape[first..=last].iter().product();
            let inner: usize = shape[last + 1..].iter().product();
            let xs = self.float::<T>(x)?;
            if inner == 1 {
                return Ok(T::wrap(self.reduce_rows(code, xs, outer, count)?, n_out));
            }
            let out = self.alloc::<T>(n_out)?;
            if n_out > 0 {
                let f = self.function(&format!("reduce_strided_{}", T::SUFFIX))?;
                let mut l = self.stream.launch_builder(f);
                l.arg(xs)
                    .arg(&out)
                    .arg(&outer)
                    .arg(&count)
                    .arg(&inner)
                    .arg(&code);
                // SAFETY: reduce_strided_* takes (x of outer * count * inner, out of
                // outer * inner, outer, count, inner, op).
                unsafe { l.launch(threads(n_out)) }.map_err(device_error)?;
            }
            return Ok(T::wrap(out, n_out));
        }
        // scattered dims: move them last, then reduce rows
        let perm: Vec<usize> = (0..shape.len())
            .filter(|d| !dims.contains(d))
            .chain(dims.iter().copied())
            .collect();
        let moved = self.permute(x, shape, &perm)?;
        let count = x.len.checked_div(n_out).unwrap_or(0);
        let out = self.reduce_rows(code, self.float::<T>(&moved)?, n_out, count)?;
        Ok(T::wrap(out, n_out))
    }

    fn softmax_t<T: Float>(
        &self,
        x: &CudaStorage,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<CudaStorage> {
        let out = self.alloc::<T>(x.len)?;
        let outer: usize = shape[..dim].iter().product();
        let len = shape[dim];
        let inner: usize = shape[dim + 1..].iter().product();
        let log = i32::from(log);
        if x.len > 0 {
            let xs = self.float::<T>(x)?;
            if inner == 1 {
                let f = self.function(&format!("softmax_rows_{}", T::SUFFIX))?;
                let mut l = self.stream.launch_builder(f);
                l.arg(xs).arg(&out).arg(&outer).arg(&len).arg(&log);
                // SAFETY: softmax_rows_* takes (x, out of outer * len, lines, len, log) and
                // runs with BLOCK threads per block.
                unsafe { l.launch(blocks(outer)) }.map_err(device_error)?;
            } else {
                let f = self.function(&format!("softmax_strided_{}", T::SUFFIX))?;
                let mut l = self.stream.launch_builder(f);
                l.arg(xs)
                    .arg(&out)
                    .arg(&outer)
                    .arg(&len)
                    .arg(&inner)
                    .arg(&log);
                // SAFETY: softmax_strided_* takes (x, out of outer * len * inner, outer, len,
                // inner, log).
                unsafe { l.launch(threads(outer * inner)) }.map_err(device_error)?;
            }
        }
        Ok(T::wrap(out, x.len))
    }

    fn matmul_t<T: Float>(
        &self,
        a: &CudaStorage,
        b: &CudaStorage,
        d: MatmulDims,
        one: T,
        zero: T,
    ) -> Result<CudaStorage>
    where
        CudaBlas: Gemm<T>,
    {
        let n_out = d.batch * d.m * d.n;
        if n_out == 0 || d.k == 0 {
            let out = self
                .stream
                .alloc_zeros::<T>(n_out.max(1))
                .map_err(device_error)?;
            return Ok(T::wrap(out, n_out));
        }
        let int = |v: usize| {
            i32::try_from(v).map_err(|_| {
                device_error(format!("matmul: size {v} exceeds cuBLAS's 32-bit range"))
            })
        };
        // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets B first. A row-major
        // (k, n) B read column-major is B^T with leading dimension n (no transpose needed);
        // B stored transposed, (n, k), is B with leading dimension k (transpose it).
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let cfg = StridedBatchedConfig {
            gemm: GemmConfig {
                transa: op(d.b_trans),
                transb: op(d.a_trans),
                m: int(d.n)?,
                n: int(d.m)?,
                k: int(d.k)?,
                alpha: one,
                lda: int(if d.b_trans { d.k } else { d.n })?,
                ldb: int(if d.a_trans { d.m } else { d.k })?,
                beta: zero,
                ldc: int(d.n)?,
            },
            batch_size: int(d.batch)?,
            stride_a: if d.b_batched { (d.k * d.n) as i64 } else { 0 },
            stride_b: (d.m * d.k) as i64,
            stride_c: (d.m * d.n) as i64,
        };
        let mut out = self.alloc::<T>(n_out)?;
        // SAFETY: the shapes above address a (batch * m * k), b ((1 or batch) * k * n) and
        // out (batch * m * n) inside their lengths.
        unsafe {
            self.blas
                .gemm_strided_batched(cfg, self.float::<T>(b)?, self.float::<T>(a)?, &mut out)
        }
        .map_err(device_error)?;
        Ok(T::wrap(out, n_out))
    }

    /// `copy` between `x` and `out`: `x`'s box gathered into the contiguous `out` (`put`
    /// false), or the contiguous `x` scattered into `out`'s box (`put` true).
    fn strided(
        &self,
        x: &CudaStorage,
        out: &CudaStorage,
        copy: &StridedCopy,
        put: bool,
    ) -> Result<()> {
        let (shape, base) = (&copy.extent, copy.base);
        let n: usize = shape.iter().product();
        if n == 0 {
            return Ok(());
        }
        let meta = self.meta(shape.iter().chain(&copy.strides).copied())?;
        let name = if x.dtype().size() == 4 {
            "strided_w4"
        } else {
            "strided_w8"
        };
        let (nd, put) = (shape.len() as i32, i32::from(put));
        let mut l = self.stream.launch_builder(self.function(name)?);
        arg_buf!(l, &x.buf);
        arg_buf!(l, &out.buf);
        l.arg(&n).arg(&nd).arg(&meta).arg(&base).arg(&put);
        // SAFETY: strided_w* takes (x, out, n, nd, meta of 2 * nd, base, put); core checked
        // that the box lies inside both buffers, whose words are this dtype's size.
        unsafe { l.launch(threads(n)) }.map_err(device_error)?;
        Ok(())
    }

    /// Host-side check of gather/scatter indices (`0..rows`), as core's contract requires.
    fn check_indices<'a>(
        &self,
        indices: &'a CudaStorage,
        rows: usize,
        op: &'static str,
    ) -> Result<&'a CudaSlice<i64>> {
        let Buf::I64(ix) = &indices.buf else {
            return Err(Error::DTypeMismatch {
                expected: DType::I64,
                got: indices.dtype(),
            });
        };
        let host = if indices.len == 0 {
            vec![]
        } else {
            self.stream
                .clone_dtoh(&ix.slice(..indices.len))
                .map_err(device_error)?
        };
        if let Some(i) = host.iter().find(|&&i| i < 0 || i as usize >= rows) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("index {i} is outside 0..{rows}"),
            });
        }
        Ok(ix)
    }

    fn scatter_add_t<T: Float>(
        &self,
        src: &CudaStorage,
        rows: usize,
        row_len: usize,
        indices: &CudaStorage,
    ) -> Result<CudaStorage> {
        let ix = self.check_indices(indices, rows, "scatter_add_rows")?;
        let out = self
            .stream
            .alloc_zeros::<T>((rows * row_len).max(1))
            .map_err(device_error)?;
        let n_idx = indices.len;
        if n_idx * row_len > 0 {
            let f = self.function(&format!("scatter_add_rows_{}", T::SUFFIX))?;
            let mut l = self.stream.launch_builder(f);
            l.arg(self.float::<T>(src)?)
                .arg(ix)
                .arg(&out)
                .arg(&n_idx)
                .arg(&row_len);
            // SAFETY: scatter_add_rows_* takes (src of n_idx * len, idx (checked in range), out
            // of rows * len, n_idx, len).
            unsafe { l.launch(threads(n_idx * row_len)) }.map_err(device_error)?;
        }
        Ok(T::wrap(out, rows * row_len))
    }
}

/// A launch of about one thread per element (grid-stride beyond `MAX_BLOCKS` blocks).
fn threads(n: usize) -> LaunchConfig {
    blocks(n.div_ceil(BLOCK as usize))
}

/// A launch of `n` blocks of `BLOCK` threads (at most `MAX_BLOCKS`; kernels loop over the rest).
fn blocks(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Backend for CudaBackend {
    type Storage = CudaStorage;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn computes(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::F64)
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
        };
        st.synchronize().map_err(device_error)?;
        Ok(data)
    }

    fn unary(&self, op: UnaryOp, x: &CudaStorage) -> Result<CudaStorage> {
        by_float!(x, "unary", T => self.unary_t::<T>(op.code() as i32, x, 0.0, 0.0))
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &CudaStorage,
        a_shape: &[usize],
        b: &CudaStorage,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<CudaStorage> {
        let code = op.code() as i32;
        by_float!(a, "binary", T => self.binary_t::<T>(code, a, a_shape, b, b_shape, out_shape))
    }

    fn scale(&self, x: &CudaStorage, s: f64) -> Result<CudaStorage> {
        by_float!(x, "scale", T => self.unary_t::<T>(AFFINE_CODE as i32, x, s, 0.0))
    }

    fn add_scalar(&self, x: &CudaStorage, s: f64) -> Result<CudaStorage> {
        by_float!(x, "add_scalar", T => self.unary_t::<T>(AFFINE_CODE as i32, x, 1.0, s))
    }

    fn gather_rows(
        &self,
        table: &CudaStorage,
        rows: usize,
        row_len: usize,
        indices: &CudaStorage,
    ) -> Result<CudaStorage> {
        let ix = self.check_indices(indices, rows, "gather_rows")?;
        let n_idx = indices.len;
        let out = self.alloc_like(table.dtype(), n_idx * row_len)?;
        if n_idx * row_len > 0 {
            let name = if table.dtype().size() == 4 {
                "gather_rows_w4"
            } else {
                "gather_rows_w8"
            };
            let mut l = self.stream.launch_builder(self.function(name)?);
            arg_buf!(l, &table.buf);
            l.arg(ix);
            arg_buf!(l, &out.buf);
            l.arg(&n_idx).arg(&row_len);
            // SAFETY: gather_rows_w* takes (table of rows * len, idx (checked in range), out of
            // n_idx * len, n_idx, len), in words of the dtype's size.
            unsafe { l.launch(threads(n_idx * row_len)) }.map_err(device_error)?;
        }
        Ok(out)
    }

    fn scatter_add_rows(
        &self,
        src: &CudaStorage,
        rows: usize,
        row_len: usize,
        indices: &CudaStorage,
    ) -> Result<CudaStorage> {
        by_float!(src, "scatter_add_rows", T => self.scatter_add_t::<T>(src, rows, row_len, indices))
    }

    fn reduce(
        &self,
        op: ReduceKind,
        x: &CudaStorage,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<CudaStorage> {
        by_float!(x, "reduce", T => self.reduce_t::<T>(op.code() as i32, x, shape, dims))
    }

    fn softmax(
        &self,
        x: &CudaStorage,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<CudaStorage> {
        by_float!(x, "softmax", T => self.softmax_t::<T>(x, shape, dim, log))
    }

    fn matmul(&self, a: &CudaStorage, b: &CudaStorage, d: MatmulDims) -> Result<CudaStorage> {
        match a.dtype() {
            DType::F32 => self.matmul_t::<f32>(a, b, d, 1.0, 0.0),
            DType::F64 => self.matmul_t::<f64>(a, b, d, 1.0, 0.0),
            other => Err(device_error(format!(
                "matmul: cuBLAS computes in f32 and f64, not {other}"
            ))),
        }
    }

    fn permute(&self, x: &CudaStorage, shape: &[usize], perm: &[usize]) -> Result<CudaStorage> {
        let out = self.alloc_like(x.dtype(), x.len)?;
        self.strided(x, &out, &StridedCopy::permute(shape, perm), false)?;
        Ok(out)
    }

    fn slice(
        &self,
        x: &CudaStorage,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<CudaStorage> {
        let out = self.alloc_like(x.dtype(), extent.iter().product())?;
        self.strided(x, &out, &StridedCopy::slice(shape, start, extent), false)?;
        Ok(out)
    }

    fn cat(&self, xs: &[&CudaStorage], shapes: &[&[usize]], dim: usize) -> Result<CudaStorage> {
        if xs.is_empty() {
            return Err(Error::Internal("cat of no tensors".into()));
        }
        let (out_shape, copies) = StridedCopy::cat(shapes, dim);
        let dtype = xs[0].dtype();
        let out = self.alloc_like(dtype, out_shape.iter().product())?;
        for (x, copy) in xs.iter().zip(&copies) {
            self.strided(x, &out, copy, true)?;
        }
        Ok(out)
    }

    fn dtype(&self, s: &CudaStorage) -> DType {
        s.dtype()
    }
    fn len(&self, s: &CudaStorage) -> usize {
        s.len
    }
}

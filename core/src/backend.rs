//! The `Backend` seam: device memory and the kernels operators need, on contiguous row-major
//! data. Core validates every shape, dtype and dimension before calling a backend (backends do
//! not validate); a backend reports only what nobody could foresee (out of memory, a lost
//! device, a kernel that fails to compile). The CPU backend (`crate::cpu`) is the reference; the
//! wgpu and CUDA backends implement the same trait, and one conformance suite runs on all.

use std::sync::{Arc, Mutex, OnceLock};

use crate::cpu::{CpuBackend, select};
use crate::device::DeviceInfo;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placement::DeviceType;
use crate::storage::{Buffer, DeviceBuffer, HostData};

/// Declares an enum of operations GPU kernels switch on: its number in kernels is its position
/// ([`UnaryOp::code`]), and [`kernel_constants`] writes every variant's number under a name
/// (`UNARY_GELU_ERF`, `REDUCE_MIN`) into the WGSL and CUDA sources, so kernels name cases and
/// the Rust enums stay their only definition.
macro_rules! kernel_ops {
    ($(#[$doc:meta])* pub enum $name:ident ($prefix:literal) {
        $($(#[$vdoc:meta])* $variant:ident,)*
    }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every operation, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// The prefix of the operations' names in kernel sources.
            const PREFIX: &'static str = $prefix;

            /// The operation's number in GPU kernels (its position in the enum).
            pub fn code(self) -> u32 {
                self as u32
            }
        }
    };
}

kernel_ops! {
    /// Elementwise functions of one tensor.
    pub enum UnaryOp ("UNARY") {
        /// `-x`.
        Neg,
        /// `e^x`.
        Exp,
        /// Natural logarithm.
        Log,
        /// Square root.
        Sqrt,
        /// `x * x`.
        Square,
        /// `max(x, 0)`.
        Relu,
        /// GELU, tanh approximation (PyTorch's `approximate="tanh"`).
        Gelu,
        /// `1 / (1 + e^-x)`.
        Sigmoid,
        /// Hyperbolic tangent.
        Tanh,
        /// `1` where `x > 0`, else `0` (the derivative of relu; masks).
        Step,
        /// The derivative of [`UnaryOp::Gelu`].
        GeluGrad,
        /// `|x|`.
        Abs,
        /// `1 / sqrt(x)`.
        Rsqrt,
        /// Sine.
        Sin,
        /// Cosine.
        Cos,
        /// SiLU (swish): `x * sigmoid(x)`.
        Silu,
        /// The error function.
        Erf,
        /// GELU, exact (erf) form: PyTorch's default.
        GeluErf,
        /// `-1`, `0` or `1` (the derivative of abs; `0` at `0`).
        Sign,
        /// The derivative of [`UnaryOp::Silu`].
        SiluGrad,
        /// The derivative of [`UnaryOp::GeluErf`].
        GeluErfGrad,
    }
}

kernel_ops! {
    /// Elementwise functions of two tensors (with NumPy broadcasting).
    pub enum BinaryOp ("BINARY") {
        /// `a + b`.
        Add,
        /// `a - b`.
        Sub,
        /// `a * b`.
        Mul,
        /// `a / b`.
        Div,
        /// `max(a, b)` (NaN if either is).
        Maximum,
        /// `min(a, b)` (NaN if either is).
        Minimum,
    }
}

kernel_ops! {
    /// Elementwise comparisons (with NumPy broadcasting); the result is Bool.
    pub enum CmpOp ("CMP") {
        /// `a == b`.
        Eq,
        /// `a != b`.
        Ne,
        /// `a < b`.
        Lt,
        /// `a <= b`.
        Le,
        /// `a > b`.
        Gt,
        /// `a >= b`.
        Ge,
    }
}

kernel_ops! {
    /// Reductions over dimensions.
    pub enum ReduceKind ("REDUCE") {
        /// Sum.
        Sum,
        /// Maximum.
        Max,
        /// Minimum.
        Min,
    }
}

/// The unary kernels' code of the affine map `a * x + b` (`scale`, `add_scalar`), past every
/// [`UnaryOp`]; kernels know it as `UNARY_AFFINE`.
pub const AFFINE_CODE: u32 = 99;

/// The language of a kernel source that [`kernel_constants`] writes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelLang {
    /// WGSL: `const UNARY_EXP: u32 = 1u;`.
    Wgsl,
    /// CUDA C++ (also the CPU emulation): `#define UNARY_EXP 1`.
    Cuda,
}

/// Every kernel operation's number under its name (`UNARY_GELU_ERF`, `BINARY_MAXIMUM`,
/// `CMP_LT`, `REDUCE_MIN`), as declarations of `lang`: the prelude of every GPU kernel source.
///
/// ```
/// use gflow_core::backend::{kernel_constants, KernelLang, ReduceKind};
/// let wgsl = kernel_constants(KernelLang::Wgsl);
/// assert!(wgsl.contains(&format!("const REDUCE_MIN: u32 = {}u;", ReduceKind::Min.code())));
/// assert!(kernel_constants(KernelLang::Cuda).contains("#define UNARY_GELU_ERF_GRAD "));
/// ```
pub fn kernel_constants(lang: KernelLang) -> String {
    fn write<T: Copy + std::fmt::Debug>(
        out: &mut String,
        lang: KernelLang,
        prefix: &str,
        all: &[T],
        code: impl Fn(T) -> u32,
    ) {
        for &op in all {
            let name = format!("{prefix}_{}", upper_snake(&format!("{op:?}")));
            let line = match lang {
                KernelLang::Wgsl => format!("const {name}: u32 = {}u;\n", code(op)),
                KernelLang::Cuda => format!("#define {name} {}\n", code(op)),
            };
            out.push_str(&line);
        }
    }
    let mut out = match lang {
        KernelLang::Wgsl => format!("const UNARY_AFFINE: u32 = {AFFINE_CODE}u;\n"),
        KernelLang::Cuda => format!("#define UNARY_AFFINE {AFFINE_CODE}\n"),
    };
    write(&mut out, lang, UnaryOp::PREFIX, UnaryOp::ALL, UnaryOp::code);
    write(
        &mut out,
        lang,
        BinaryOp::PREFIX,
        BinaryOp::ALL,
        BinaryOp::code,
    );
    write(&mut out, lang, CmpOp::PREFIX, CmpOp::ALL, CmpOp::code);
    write(
        &mut out,
        lang,
        ReduceKind::PREFIX,
        ReduceKind::ALL,
        ReduceKind::code,
    );
    out
}

/// `GeluErfGrad` as `GELU_ERF_GRAD`.
fn upper_snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Shapes of a (batched) matrix product: `batch` products of (m, k) x (k, n); `b` is shared by
/// all batches when `b_batched` is false. A transposed operand is stored as its transpose
/// ((k, m) for `a`, (n, k) for `b`) and read with swapped strides, so no copy is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulDims {
    /// Number of products.
    pub batch: usize,
    /// Rows of `a` and of the output.
    pub m: usize,
    /// Columns of `a`, rows of `b`.
    pub k: usize,
    /// Columns of `b` and of the output.
    pub n: usize,
    /// Whether `b` has one matrix per batch.
    pub b_batched: bool,
    /// Whether `a` is stored transposed, (k, m) per batch.
    pub a_trans: bool,
    /// Whether `b` is stored transposed, (n, k) per batch.
    pub b_trans: bool,
}

/// A device's memory and kernels. Inputs are contiguous and row-major; shapes are already valid.
pub trait Backend: Send + Sync {
    /// The backend's buffer type.
    type Storage: Send + Sync;

    /// A short name (`cpu`, `wgpu`, `cuda`).
    fn name(&self) -> &'static str;
    /// Whether the kernels compute in `dtype` (every backend stores and moves every dtype; a
    /// GPU may lack arithmetic in some, e.g. f64 in WGSL). Others give `Error::Device`.
    fn computes(&self, _dtype: DType) -> bool {
        true
    }
    /// Whether the device holds buffers of `dtype` (the round-1 set by default: F32, F64, I64);
    /// kernels on other dtypes run on the host copy.
    fn stores(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::F64 | DType::I64)
    }
    /// Copies host data to the device.
    fn upload(&self, data: &HostData) -> Result<Self::Storage>;
    /// Copies device data to the host.
    fn download(&self, s: &Self::Storage) -> Result<HostData>;
    /// `op(x)` elementwise.
    fn unary(&self, op: UnaryOp, x: &Self::Storage) -> Result<Self::Storage>;
    /// `op(a, b)` with `a` of shape `a_shape`, `b` of `b_shape`, broadcast to `out_shape` (the
    /// inputs' shapes are right-aligned with it).
    fn binary(
        &self,
        op: BinaryOp,
        a: &Self::Storage,
        a_shape: &[usize],
        b: &Self::Storage,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<Self::Storage>;
    /// `x * s` elementwise.
    fn scale(&self, x: &Self::Storage, s: f64) -> Result<Self::Storage>;
    /// `x + s` elementwise.
    fn add_scalar(&self, x: &Self::Storage, s: f64) -> Result<Self::Storage>;
    /// Rows of `table` (shape `(rows, row_len)`) picked by the integer `indices`: the output
    /// holds `indices.len()` rows. An index outside `0..rows` is an `InvalidArgument` error.
    fn gather_rows(
        &self,
        table: &Self::Storage,
        rows: usize,
        row_len: usize,
        indices: &Self::Storage,
    ) -> Result<Self::Storage>;
    /// The transpose of [`Backend::gather_rows`]: a `(rows, row_len)` table of zeros to which
    /// row `i` of `src` is added at row `indices[i]`.
    fn scatter_add_rows(
        &self,
        src: &Self::Storage,
        rows: usize,
        row_len: usize,
        indices: &Self::Storage,
    ) -> Result<Self::Storage>;
    /// Reduces `dims` (sorted, distinct) of `x` with `op`, keeping them as size-1 dimensions.
    fn reduce(
        &self,
        op: ReduceKind,
        x: &Self::Storage,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<Self::Storage>;
    /// (Log-)softmax over `dim`.
    fn softmax(
        &self,
        x: &Self::Storage,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<Self::Storage>;
    /// Batched matrix product.
    fn matmul(
        &self,
        a: &Self::Storage,
        b: &Self::Storage,
        dims: MatmulDims,
    ) -> Result<Self::Storage>;
    /// `x` of `shape` with its dimensions permuted (`out.shape[i] = shape[perm[i]]`).
    fn permute(&self, x: &Self::Storage, shape: &[usize], perm: &[usize]) -> Result<Self::Storage>;
    /// The sub-box of `x` starting at `start` with extent `extent`.
    fn slice(
        &self,
        x: &Self::Storage,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<Self::Storage>;
    /// Concatenates `xs` (with shapes `shapes`) along `dim`.
    fn cat(&self, xs: &[&Self::Storage], shapes: &[&[usize]], dim: usize) -> Result<Self::Storage>;
    /// The element type of a buffer.
    fn dtype(&self, s: &Self::Storage) -> DType;
    /// The number of elements of a buffer.
    fn len(&self, s: &Self::Storage) -> usize;
}

/// A backend's kernels on [`Buffer`]s, object-safe: what operators call. The CPU backend
/// computes on host data; a device backend is wrapped in [`Resident`], which keeps inputs and
/// results on the device so that a chain of operators never leaves it.
pub trait Kernels: Send + Sync {
    /// The backend's short name.
    fn name(&self) -> &'static str;
    /// See [`Backend::computes`].
    fn computes(&self, dtype: DType) -> bool;
    /// See [`Backend::unary`].
    fn unary(&self, op: UnaryOp, x: &Buffer) -> Result<Buffer>;
    /// See [`Backend::binary`].
    fn binary(
        &self,
        op: BinaryOp,
        a: &Buffer,
        a_shape: &[usize],
        b: &Buffer,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<Buffer>;
    /// See [`Backend::scale`].
    fn scale(&self, x: &Buffer, s: f64) -> Result<Buffer>;
    /// See [`Backend::add_scalar`].
    fn add_scalar(&self, x: &Buffer, s: f64) -> Result<Buffer>;
    /// See [`Backend::gather_rows`].
    fn gather_rows(
        &self,
        table: &Buffer,
        rows: usize,
        row_len: usize,
        indices: &Buffer,
    ) -> Result<Buffer>;
    /// See [`Backend::scatter_add_rows`].
    fn scatter_add_rows(
        &self,
        src: &Buffer,
        rows: usize,
        row_len: usize,
        indices: &Buffer,
    ) -> Result<Buffer>;
    /// See [`Backend::reduce`].
    fn reduce(&self, op: ReduceKind, x: &Buffer, shape: &[usize], dims: &[usize])
    -> Result<Buffer>;
    /// See [`Backend::softmax`].
    fn softmax(&self, x: &Buffer, shape: &[usize], dim: usize, log: bool) -> Result<Buffer>;
    /// See [`Backend::matmul`].
    fn matmul(&self, a: &Buffer, b: &Buffer, dims: MatmulDims) -> Result<Buffer>;
    /// See [`Backend::permute`].
    fn permute(&self, x: &Buffer, shape: &[usize], perm: &[usize]) -> Result<Buffer>;
    /// See [`Backend::slice`].
    fn slice(
        &self,
        x: &Buffer,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<Buffer>;
    /// See [`Backend::cat`].
    fn cat(&self, xs: &[&Buffer], shapes: &[&[usize]], dim: usize) -> Result<Buffer>;

    // Kernels below run on the host copy unless a backend has them natively (the CPU's
    // implementation in `cpu::select` is the reference for every backend).

    /// `x` cast to `dtype` (PyTorch's casts).
    fn cast(&self, x: &Buffer, dtype: DType) -> Result<Buffer> {
        Ok(select::cast(x.host()?, dtype).into())
    }
    /// `op(a, b)` with broadcasting, as Bool; `a` and `b` share a dtype.
    fn compare(
        &self,
        op: CmpOp,
        a: &Buffer,
        a_shape: &[usize],
        b: &Buffer,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<Buffer> {
        select::compare(op, a.host()?, a_shape, b.host()?, b_shape, out_shape).map(Buffer::from)
    }
    /// `cond ? a : b` with broadcasting over (cond, a, b); `cond` is Bool.
    fn select(
        &self,
        xs: [&Buffer; 3],
        shapes: [&[usize]; 3],
        out_shape: &[usize],
    ) -> Result<Buffer> {
        let hosts = [xs[0].host()?, xs[1].host()?, xs[2].host()?];
        select::select(hosts, shapes, out_shape).map(Buffer::from)
    }
    /// Rows of `cols` elements normalised: `(x - mean) / sqrt(var + eps)` when `center`
    /// (LayerNorm), `x / sqrt(mean(x^2) + eps)` otherwise (RMSNorm).
    fn norm(&self, x: &Buffer, cols: usize, eps: f64, center: bool) -> Result<Buffer> {
        crate::cpu::norm(x.host()?, cols, eps, center).map(Buffer::from)
    }
    /// The gradient of [`Kernels::norm`] for the output gradient `g`.
    fn norm_grad(
        &self,
        x: &Buffer,
        g: &Buffer,
        cols: usize,
        eps: f64,
        center: bool,
    ) -> Result<Buffer> {
        crate::cpu::norm_grad(x.host()?, g.host()?, cols, eps, center).map(Buffer::from)
    }
    /// The gradient of [`Kernels::softmax`] over `dim` from its output `y` and the output
    /// gradient `g` (log-softmax's when `log`).
    fn softmax_grad(
        &self,
        y: &Buffer,
        g: &Buffer,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<Buffer> {
        crate::cpu::softmax_grad(y.host()?, g.host()?, shape, dim, log).map(Buffer::from)
    }
    /// `x^e` elementwise.
    fn pow_scalar(&self, x: &Buffer, e: f64) -> Result<Buffer> {
        Ok(select::pow_scalar(x.host()?, e).into())
    }
    /// `x` clamped to `[lo, hi]`.
    fn clamp(&self, x: &Buffer, lo: Option<f64>, hi: Option<f64>) -> Result<Buffer> {
        Ok(select::clamp(x.host()?, lo, hi).into())
    }
    /// The lower (upper) triangle over the last two dims from diagonal `k`, the buffer's first
    /// element sitting at global (row, column) `origin`.
    fn triangle(
        &self,
        x: &Buffer,
        shape: &[usize],
        k: i64,
        upper: bool,
        origin: (usize, usize),
    ) -> Result<Buffer> {
        Ok(select::triangle(x.host()?, shape, k, upper, origin).into())
    }
    /// The (I64) index of the largest or smallest element along `dim` (lowest on ties).
    fn arg_reduce(&self, x: &Buffer, shape: &[usize], dim: usize, max: bool) -> Result<Buffer> {
        Ok(select::arg_reduce(x.host()?, shape, dim, max).into())
    }
    /// `torch.gather(x, dim, idx)`; indices checked by core.
    fn gather_dim(
        &self,
        x: &Buffer,
        x_shape: &[usize],
        dim: usize,
        idx: &Buffer,
        idx_shape: &[usize],
    ) -> Result<Buffer> {
        select::gather_dim(x.host()?, x_shape, dim, idx.host()?, idx_shape).map(Buffer::from)
    }
    /// `zeros(out_shape).scatter_add_(dim, idx, src)`; indices checked by core.
    fn scatter_add_dim(
        &self,
        src: &Buffer,
        out_shape: &[usize],
        dim: usize,
        idx: &Buffer,
        idx_shape: &[usize],
    ) -> Result<Buffer> {
        select::scatter_add_dim(src.host()?, out_shape, dim, idx.host()?, idx_shape)
            .map(Buffer::from)
    }
    /// Rows of a table holding global rows `start..start + rows`, picked by global indices;
    /// indices outside the range give zero rows (a table split over its rows).
    fn gather_rows_partial(
        &self,
        table: &Buffer,
        rows: usize,
        row_len: usize,
        idx: &Buffer,
        start: usize,
    ) -> Result<Buffer> {
        select::gather_rows_partial(table.host()?, rows, row_len, idx.host()?, start)
            .map(Buffer::from)
    }
}

/// A device [`Backend`] seen as [`Kernels`]: an input already on this device is used where it
/// is; a host input is uploaded and the upload kept in its buffer for the next kernel; results
/// stay on the device until the host reads them.
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
    fn input(&self, x: &Buffer) -> Result<Arc<dyn DeviceBuffer>> {
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
    fn holds(&self, xs: &[&Buffer]) -> bool {
        xs.iter().all(|x| self.backend.stores(x.dtype()))
    }

    /// Whether the device holds and computes every one of `xs`' dtypes (else the arithmetic
    /// runs on the host: integers on wgpu, 16-bit floats until the GPU kernels take them).
    fn computes_all(&self, xs: &[&Buffer]) -> bool {
        xs.iter()
            .all(|x| self.backend.stores(x.dtype()) && self.backend.computes(x.dtype()))
    }

    /// The backend's storage inside a buffer made by [`Resident::input`].
    fn storage(d: &Arc<dyn DeviceBuffer>) -> Result<&B::Storage> {
        d.as_any()
            .downcast_ref::<Held<B>>()
            .map(|h| &h.storage)
            .ok_or_else(|| Error::Internal("a device buffer of another backend".into()))
    }

    /// Runs `f` on the device copies of `xs` and keeps its result on the device.
    fn run(
        &self,
        xs: &[&Buffer],
        f: impl FnOnce(&B, &[&B::Storage]) -> Result<B::Storage>,
    ) -> Result<Buffer> {
        let held: Vec<Arc<dyn DeviceBuffer>> =
            xs.iter().map(|x| self.input(x)).collect::<Result<_>>()?;
        let storages: Vec<&B::Storage> = held.iter().map(Self::storage).collect::<Result<_>>()?;
        let out = f(&self.backend, &storages)?;
        let (dtype, len) = (self.backend.dtype(&out), self.backend.len(&out));
        Ok(Buffer::on_device(
            dtype,
            len,
            Arc::new(Held {
                backend: self.backend.clone(),
                label: self.label,
                storage: out,
            }),
        ))
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
}

impl<B: Backend + 'static> Kernels for Resident<B> {
    fn name(&self) -> &'static str {
        self.backend.name()
    }
    fn computes(&self, dtype: DType) -> bool {
        self.backend.computes(dtype)
    }
    fn unary(&self, op: UnaryOp, x: &Buffer) -> Result<Buffer> {
        if !self.computes_all(&[x]) {
            return Kernels::unary(&CpuBackend, op, x);
        }
        self.run(&[x], |b, s| b.unary(op, s[0]))
    }
    fn binary(
        &self,
        op: BinaryOp,
        a: &Buffer,
        a_shape: &[usize],
        b: &Buffer,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<Buffer> {
        if !self.computes_all(&[a, b]) {
            return Kernels::binary(&CpuBackend, op, a, a_shape, b, b_shape, out_shape);
        }
        self.run(&[a, b], |k, s| {
            k.binary(op, s[0], a_shape, s[1], b_shape, out_shape)
        })
    }
    fn scale(&self, x: &Buffer, f: f64) -> Result<Buffer> {
        if !self.computes_all(&[x]) {
            return Kernels::scale(&CpuBackend, x, f);
        }
        self.run(&[x], |b, s| b.scale(s[0], f))
    }
    fn add_scalar(&self, x: &Buffer, v: f64) -> Result<Buffer> {
        if !self.computes_all(&[x]) {
            return Kernels::add_scalar(&CpuBackend, x, v);
        }
        self.run(&[x], |b, s| b.add_scalar(s[0], v))
    }
    fn gather_rows(
        &self,
        table: &Buffer,
        rows: usize,
        row_len: usize,
        indices: &Buffer,
    ) -> Result<Buffer> {
        if !self.holds(&[table, indices]) {
            return Kernels::gather_rows(&CpuBackend, table, rows, row_len, indices);
        }
        self.run(&[table, indices], |b, s| {
            b.gather_rows(s[0], rows, row_len, s[1])
        })
    }
    fn scatter_add_rows(
        &self,
        src: &Buffer,
        rows: usize,
        row_len: usize,
        indices: &Buffer,
    ) -> Result<Buffer> {
        if !self.computes_all(&[src]) || !self.holds(&[indices]) {
            return Kernels::scatter_add_rows(&CpuBackend, src, rows, row_len, indices);
        }
        self.run(&[src, indices], |b, s| {
            b.scatter_add_rows(s[0], rows, row_len, s[1])
        })
    }
    fn reduce(
        &self,
        op: ReduceKind,
        x: &Buffer,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<Buffer> {
        if !self.computes_all(&[x]) {
            return Kernels::reduce(&CpuBackend, op, x, shape, dims);
        }
        self.run(&[x], |b, s| b.reduce(op, s[0], shape, dims))
    }
    fn softmax(&self, x: &Buffer, shape: &[usize], dim: usize, log: bool) -> Result<Buffer> {
        if !self.computes_all(&[x]) {
            return Kernels::softmax(&CpuBackend, x, shape, dim, log);
        }
        self.run(&[x], |b, s| b.softmax(s[0], shape, dim, log))
    }
    fn matmul(&self, a: &Buffer, b: &Buffer, dims: MatmulDims) -> Result<Buffer> {
        if !self.computes_all(&[a, b]) {
            return Kernels::matmul(&CpuBackend, a, b, dims);
        }
        self.run(&[a, b], |k, s| k.matmul(s[0], s[1], dims))
    }
    fn permute(&self, x: &Buffer, shape: &[usize], perm: &[usize]) -> Result<Buffer> {
        if !self.holds(&[x]) {
            return Kernels::permute(&CpuBackend, x, shape, perm);
        }
        self.run(&[x], |b, s| b.permute(s[0], shape, perm))
    }
    fn slice(
        &self,
        x: &Buffer,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<Buffer> {
        if !self.holds(&[x]) {
            return Kernels::slice(&CpuBackend, x, shape, start, extent);
        }
        self.run(&[x], |b, s| b.slice(s[0], shape, start, extent))
    }
    fn cat(&self, xs: &[&Buffer], shapes: &[&[usize]], dim: usize) -> Result<Buffer> {
        if !self.holds(xs) {
            return Kernels::cat(&CpuBackend, xs, shapes, dim);
        }
        self.run(xs, |b, s| b.cat(s, shapes, dim))
    }
}

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

/// A backend whose storage *is* host data (the CPU backend) computes on buffers' host copies.
impl<B: Backend<Storage = HostData>> Kernels for B {
    fn name(&self) -> &'static str {
        Backend::name(self)
    }
    fn computes(&self, dtype: DType) -> bool {
        Backend::computes(self, dtype)
    }
    fn unary(&self, op: UnaryOp, x: &Buffer) -> Result<Buffer> {
        Backend::unary(self, op, x.host()?).map(Buffer::from)
    }
    fn binary(
        &self,
        op: BinaryOp,
        a: &Buffer,
        a_shape: &[usize],
        b: &Buffer,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<Buffer> {
        Backend::binary(self, op, a.host()?, a_shape, b.host()?, b_shape, out_shape)
            .map(Buffer::from)
    }
    fn scale(&self, x: &Buffer, s: f64) -> Result<Buffer> {
        Backend::scale(self, x.host()?, s).map(Buffer::from)
    }
    fn add_scalar(&self, x: &Buffer, s: f64) -> Result<Buffer> {
        Backend::add_scalar(self, x.host()?, s).map(Buffer::from)
    }
    fn gather_rows(
        &self,
        table: &Buffer,
        rows: usize,
        row_len: usize,
        indices: &Buffer,
    ) -> Result<Buffer> {
        Backend::gather_rows(self, table.host()?, rows, row_len, indices.host()?).map(Buffer::from)
    }
    fn scatter_add_rows(
        &self,
        src: &Buffer,
        rows: usize,
        row_len: usize,
        indices: &Buffer,
    ) -> Result<Buffer> {
        Backend::scatter_add_rows(self, src.host()?, rows, row_len, indices.host()?)
            .map(Buffer::from)
    }
    fn reduce(
        &self,
        op: ReduceKind,
        x: &Buffer,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<Buffer> {
        Backend::reduce(self, op, x.host()?, shape, dims).map(Buffer::from)
    }
    fn softmax(&self, x: &Buffer, shape: &[usize], dim: usize, log: bool) -> Result<Buffer> {
        Backend::softmax(self, x.host()?, shape, dim, log).map(Buffer::from)
    }
    fn matmul(&self, a: &Buffer, b: &Buffer, dims: MatmulDims) -> Result<Buffer> {
        Backend::matmul(self, a.host()?, b.host()?, dims).map(Buffer::from)
    }
    fn permute(&self, x: &Buffer, shape: &[usize], perm: &[usize]) -> Result<Buffer> {
        Backend::permute(self, x.host()?, shape, perm).map(Buffer::from)
    }
    fn slice(
        &self,
        x: &Buffer,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<Buffer> {
        Backend::slice(self, x.host()?, shape, start, extent).map(Buffer::from)
    }
    fn cat(&self, xs: &[&Buffer], shapes: &[&[usize]], dim: usize) -> Result<Buffer> {
        let hosts: Vec<&HostData> = xs.iter().map(|x| x.host()).collect::<Result<_>>()?;
        Backend::cat(self, &hosts, shapes, dim).map(Buffer::from)
    }
}

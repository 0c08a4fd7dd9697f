//! The `Backend` seam: device memory and the kernels operators need, on contiguous row-major
//! data. Core validates every shape, dtype and dimension before calling a backend (backends do
//! not validate); a backend reports only what nobody could foresee (out of memory, a lost
//! device, a kernel that fails to compile). The CPU backend (`crate::cpu`) is the reference; the
//! wgpu and CUDA backends implement the same trait, and one conformance suite runs on all.

use std::sync::{Arc, Mutex};

use crate::cpu::CpuBackend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placement::DeviceType;
use crate::storage::HostData;

/// Elementwise functions of one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
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
}

/// Elementwise functions of two tensors (with NumPy broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// Reductions over dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Maximum.
    Max,
}

/// The number GPU kernels know an operation by (their `switch` cases): its position in its
/// enum, so the WGSL and CUDA kernels and the backends agree by construction.
macro_rules! kernel_code {
    ($($t:ty),*) => {$(
        impl $t {
            /// The operation's number in GPU kernels (its position in the enum).
            pub fn code(self) -> u32 {
                self as u32
            }
        }
    )*};
}
kernel_code!(UnaryOp, BinaryOp, ReduceKind);

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
}

/// A backend's kernels on host data, object-safe: what operators call. The CPU backend computes
/// on the host data itself; a device backend is wrapped in [`Staged`], which uploads the inputs,
/// runs the device kernel and downloads the result for every call (correct first: tensors that
/// stay resident on the device are the next step).
pub trait HostKernels: Send + Sync {
    /// The backend's short name.
    fn name(&self) -> &'static str;
    /// See [`Backend::computes`].
    fn computes(&self, dtype: DType) -> bool;
    /// See [`Backend::unary`].
    fn unary(&self, op: UnaryOp, x: &HostData) -> Result<HostData>;
    /// See [`Backend::binary`].
    fn binary(
        &self,
        op: BinaryOp,
        a: &HostData,
        a_shape: &[usize],
        b: &HostData,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<HostData>;
    /// See [`Backend::scale`].
    fn scale(&self, x: &HostData, s: f64) -> Result<HostData>;
    /// See [`Backend::add_scalar`].
    fn add_scalar(&self, x: &HostData, s: f64) -> Result<HostData>;
    /// See [`Backend::gather_rows`].
    fn gather_rows(
        &self,
        table: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData>;
    /// See [`Backend::scatter_add_rows`].
    fn scatter_add_rows(
        &self,
        src: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData>;
    /// See [`Backend::reduce`].
    fn reduce(
        &self,
        op: ReduceKind,
        x: &HostData,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<HostData>;
    /// See [`Backend::softmax`].
    fn softmax(&self, x: &HostData, shape: &[usize], dim: usize, log: bool) -> Result<HostData>;
    /// See [`Backend::matmul`].
    fn matmul(&self, a: &HostData, b: &HostData, dims: MatmulDims) -> Result<HostData>;
    /// See [`Backend::permute`].
    fn permute(&self, x: &HostData, shape: &[usize], perm: &[usize]) -> Result<HostData>;
    /// See [`Backend::slice`].
    fn slice(
        &self,
        x: &HostData,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<HostData>;
    /// See [`Backend::cat`].
    fn cat(&self, xs: &[&HostData], shapes: &[&[usize]], dim: usize) -> Result<HostData>;
}

/// A device [`Backend`] seen as [`HostKernels`]: each call uploads, computes and downloads.
pub struct Staged<B>(pub B);

impl<B: Backend> Staged<B> {
    fn up(&self, x: &HostData) -> Result<B::Storage> {
        self.0.upload(x)
    }
}

impl<B: Backend> HostKernels for Staged<B> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn computes(&self, dtype: DType) -> bool {
        self.0.computes(dtype)
    }
    fn unary(&self, op: UnaryOp, x: &HostData) -> Result<HostData> {
        self.0.download(&self.0.unary(op, &self.up(x)?)?)
    }
    fn binary(
        &self,
        op: BinaryOp,
        a: &HostData,
        a_shape: &[usize],
        b: &HostData,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<HostData> {
        let (a, b) = (self.up(a)?, self.up(b)?);
        self.0
            .download(&self.0.binary(op, &a, a_shape, &b, b_shape, out_shape)?)
    }
    fn scale(&self, x: &HostData, s: f64) -> Result<HostData> {
        self.0.download(&self.0.scale(&self.up(x)?, s)?)
    }
    fn add_scalar(&self, x: &HostData, s: f64) -> Result<HostData> {
        self.0.download(&self.0.add_scalar(&self.up(x)?, s)?)
    }
    fn gather_rows(
        &self,
        table: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData> {
        let (t, i) = (self.up(table)?, self.up(indices)?);
        self.0.download(&self.0.gather_rows(&t, rows, row_len, &i)?)
    }
    fn scatter_add_rows(
        &self,
        src: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData> {
        let (s, i) = (self.up(src)?, self.up(indices)?);
        self.0
            .download(&self.0.scatter_add_rows(&s, rows, row_len, &i)?)
    }
    fn reduce(
        &self,
        op: ReduceKind,
        x: &HostData,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<HostData> {
        self.0
            .download(&self.0.reduce(op, &self.up(x)?, shape, dims)?)
    }
    fn softmax(&self, x: &HostData, shape: &[usize], dim: usize, log: bool) -> Result<HostData> {
        self.0
            .download(&self.0.softmax(&self.up(x)?, shape, dim, log)?)
    }
    fn matmul(&self, a: &HostData, b: &HostData, dims: MatmulDims) -> Result<HostData> {
        let (a, b) = (self.up(a)?, self.up(b)?);
        self.0.download(&self.0.matmul(&a, &b, dims)?)
    }
    fn permute(&self, x: &HostData, shape: &[usize], perm: &[usize]) -> Result<HostData> {
        self.0.download(&self.0.permute(&self.up(x)?, shape, perm)?)
    }
    fn slice(
        &self,
        x: &HostData,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<HostData> {
        self.0
            .download(&self.0.slice(&self.up(x)?, shape, start, extent)?)
    }
    fn cat(&self, xs: &[&HostData], shapes: &[&[usize]], dim: usize) -> Result<HostData> {
        let up: Vec<B::Storage> = xs.iter().map(|x| self.up(x)).collect::<Result<_>>()?;
        let refs: Vec<&B::Storage> = up.iter().collect();
        self.0.download(&self.0.cat(&refs, shapes, dim)?)
    }
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

/// Makes a device's kernels (called once per process, on first use).
pub type BackendMaker = fn() -> Result<Arc<dyn HostKernels>>;

static MAKERS: Mutex<Vec<(DeviceType, BackendMaker)>> = Mutex::new(Vec::new());
/// A device's kernels once made, or why they could not be.
type Made = std::result::Result<Arc<dyn HostKernels>, String>;

static MADE: Mutex<Vec<(DeviceType, Made)>> = Mutex::new(Vec::new());

/// Registers the backend of a device type (the `gflow` crate registers the GPU backends it is
/// built with; core knows only the CPU).
pub fn register_backend(device: DeviceType, make: BackendMaker) {
    if let Ok(mut m) = MAKERS.lock()
        && !m.iter().any(|(d, _)| *d == device)
    {
        m.push((device, make));
    }
}

/// The kernels of `device` on this process, made on first use.
///
/// # Errors
/// `BackendUnavailable` when no backend is registered for it or it has no device here.
pub fn kernels(device: DeviceType) -> Result<Arc<dyn HostKernels>> {
    if device == DeviceType::Cpu {
        static CPU: std::sync::OnceLock<Arc<dyn HostKernels>> = std::sync::OnceLock::new();
        return Ok(CPU.get_or_init(|| Arc::new(CpuBackend)).clone());
    }
    let unavailable = |reason: String| Error::BackendUnavailable {
        device: device.to_string(),
        reason,
    };
    let mut made = MADE
        .lock()
        .map_err(|_| Error::Internal("backend registry poisoned".into()))?;
    if let Some((_, r)) = made.iter().find(|(d, _)| *d == device) {
        return r.clone().map_err(unavailable);
    }
    let maker = MAKERS
        .lock()
        .ok()
        .and_then(|m| m.iter().find(|(d, _)| *d == device).map(|(_, f)| *f));
    let r = match maker {
        None => Err(format!(
            "this program was built without a {device} backend (use the gflow crate, which registers it in init/run/simulate)"
        )),
        Some(make) => make().map_err(|e| e.to_string()),
    };
    made.push((device, r.clone()));
    r.map_err(unavailable)
}

/// A backend whose storage *is* host data (the CPU backend) computes on it directly.
impl<B: Backend<Storage = HostData>> HostKernels for B {
    fn name(&self) -> &'static str {
        Backend::name(self)
    }
    fn computes(&self, dtype: DType) -> bool {
        Backend::computes(self, dtype)
    }
    fn unary(&self, op: UnaryOp, x: &HostData) -> Result<HostData> {
        Backend::unary(self, op, x)
    }
    fn binary(
        &self,
        op: BinaryOp,
        a: &HostData,
        a_shape: &[usize],
        b: &HostData,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<HostData> {
        Backend::binary(self, op, a, a_shape, b, b_shape, out_shape)
    }
    fn scale(&self, x: &HostData, s: f64) -> Result<HostData> {
        Backend::scale(self, x, s)
    }
    fn add_scalar(&self, x: &HostData, s: f64) -> Result<HostData> {
        Backend::add_scalar(self, x, s)
    }
    fn gather_rows(
        &self,
        table: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData> {
        Backend::gather_rows(self, table, rows, row_len, indices)
    }
    fn scatter_add_rows(
        &self,
        src: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData> {
        Backend::scatter_add_rows(self, src, rows, row_len, indices)
    }
    fn reduce(
        &self,
        op: ReduceKind,
        x: &HostData,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<HostData> {
        Backend::reduce(self, op, x, shape, dims)
    }
    fn softmax(&self, x: &HostData, shape: &[usize], dim: usize, log: bool) -> Result<HostData> {
        Backend::softmax(self, x, shape, dim, log)
    }
    fn matmul(&self, a: &HostData, b: &HostData, dims: MatmulDims) -> Result<HostData> {
        Backend::matmul(self, a, b, dims)
    }
    fn permute(&self, x: &HostData, shape: &[usize], perm: &[usize]) -> Result<HostData> {
        Backend::permute(self, x, shape, perm)
    }
    fn slice(
        &self,
        x: &HostData,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<HostData> {
        Backend::slice(self, x, shape, start, extent)
    }
    fn cat(&self, xs: &[&HostData], shapes: &[&[usize]], dim: usize) -> Result<HostData> {
        Backend::cat(self, xs, shapes, dim)
    }
}

//! The `Backend` seam: device memory and the kernels operators need, on contiguous row-major
//! data. Core validates every shape, dtype and dimension before calling a backend (backends do
//! not validate); a backend reports only what nobody could foresee (out of memory, a lost
//! device, a kernel that fails to compile). The CPU backend (`crate::cpu`) is the reference; the
//! wgpu and CUDA backends implement the same trait, and one conformance suite runs on all.

use crate::dtype::DType;
use crate::error::Result;
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

//! The CPU backend: the reference and the embedded default. Storage is [`HostData`]; matrix
//! products go through the `gemm` crate (multithreaded); elementwise loops are simple slices
//! the compiler vectorises.

mod attention;
mod bgemm;
mod fast;
mod kernels;
pub(crate) mod select;
mod sgemm;

use std::borrow::Cow;

use crate::backend::{AttentionDims, Backend, BinaryOp, MatmulDims, ReduceKind, UnaryOp};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::shape::{StridedCopy, copy_region, numel, strides};
use crate::storage::HostData;

pub use kernels::Float;

/// The row indices in `indices` (I64), each checked against `rows`.
fn checked_rows(indices: &HostData, rows: usize) -> Result<Vec<usize>> {
    let v = select::indices(indices)?;
    kernels::row_indices(&v, rows).map_err(|bad| Error::InvalidArgument {
        op: "gather_rows",
        reason: format!("index {bad} is out of range for {rows} rows"),
    })
}

/// The CPU backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

/// Runs a float kernel on 16-bit data in f32, rounding the result once (PyTorch's CPU
/// "opmath"); other data runs as is.
fn via_f32(x: &HostData, f: impl FnOnce(&HostData) -> Result<HostData>) -> Result<HostData> {
    let dtype = x.dtype();
    if dtype.is_half() {
        Ok(f(&x.cast(DType::F32))?.cast(dtype))
    } else {
        f(x)
    }
}

/// Applies `f` elementwise to integer data (computed in i64, kept in the input's dtype).
fn int_map(x: &HostData, f: impl Fn(i64) -> i64) -> Option<HostData> {
    match x {
        HostData::I64(v) => Some(HostData::I64(v.iter().map(|&a| f(a)).collect())),
        HostData::I32(v) => Some(HostData::I32(
            v.iter().map(|&a| f(i64::from(a)) as i32).collect(),
        )),
        _ => None,
    }
}

/// The integer form of a unary op (those defined on integers).
fn int_unary(op: UnaryOp, x: &HostData) -> Result<HostData> {
    let f: fn(i64) -> i64 = match op {
        UnaryOp::Neg => i64::wrapping_neg,
        UnaryOp::Abs => i64::wrapping_abs,
        UnaryOp::Square => |a| a.wrapping_mul(a),
        UnaryOp::Relu => |a| a.max(0),
        UnaryOp::Sign | UnaryOp::Step => i64::signum,
        _ => {
            return Err(Error::DTypeMismatch {
                expected: DType::F32,
                got: x.dtype(),
            });
        }
    };
    let f = if op == UnaryOp::Step {
        |a: i64| i64::from(a > 0)
    } else {
        f
    };
    int_map(x, f).ok_or(Error::DTypeMismatch {
        expected: DType::F32,
        got: x.dtype(),
    })
}

/// `op(a, b)` on integers (wrapping, as PyTorch's), with broadcasting.
fn int_binary(
    op: BinaryOp,
    a: &HostData,
    a_shape: &[usize],
    b: &HostData,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<HostData> {
    let f = |x: i64, y: i64| match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Div => x.checked_div(y).unwrap_or(0),
        BinaryOp::Maximum => x.max(y),
        BinaryOp::Minimum => x.min(y),
        // By zero: 0 (callers check divisors first); i64::MIN by -1 wraps, as PyTorch's.
        BinaryOp::Fmod if y == 0 => 0,
        BinaryOp::Fmod => x.wrapping_rem(y),
        BinaryOp::Remainder if y == 0 => 0,
        BinaryOp::Remainder => {
            let r = x.wrapping_rem(y);
            if r != 0 && (r < 0) != (y < 0) {
                r + y
            } else {
                r
            }
        }
        BinaryOp::FloorDivide if y == 0 => 0,
        BinaryOp::FloorDivide => {
            let q = x.wrapping_div(y);
            if x.wrapping_rem(y) != 0 && (x < 0) != (y < 0) {
                q - 1
            } else {
                q
            }
        }
    };
    let (x, y) = (select::indices(a)?, select::indices(b)?);
    let mut out = vec![0i64; out_shape.iter().product()];
    select::for_each_broadcast(out_shape, &[a_shape, b_shape], |o, off| {
        out[o] = f(x[off[0]], y[off[1]]);
    });
    Ok(HostData::I64(out).into_dtype(a.dtype()))
}

/// A reduction of integer data (in i64, kept in the input's dtype).
fn int_reduce(op: ReduceKind, x: &HostData, shape: &[usize], dims: &[usize]) -> Result<HostData> {
    let mut cur = select::indices(x)?;
    let mut s = shape.to_vec();
    for &d in dims {
        let outer: usize = s[..d].iter().product();
        let inner: usize = s[d + 1..].iter().product();
        let len = s[d];
        let init = match op {
            ReduceKind::Sum => 0,
            ReduceKind::Max => i64::MIN,
            ReduceKind::Min => i64::MAX,
        };
        let mut out = vec![init; outer * inner];
        for o in 0..outer {
            for l in 0..len {
                for i in 0..inner {
                    let (acc, v) = (&mut out[o * inner + i], cur[(o * len + l) * inner + i]);
                    *acc = match op {
                        ReduceKind::Sum => acc.wrapping_add(v),
                        ReduceKind::Max => (*acc).max(v),
                        ReduceKind::Min => (*acc).min(v),
                    };
                }
            }
        }
        cur = out;
        s[d] = 1;
    }
    Ok(HostData::I64(cur).into_dtype(x.dtype()))
}

/// Applies `$body` to the float vector inside `$x` as `$v` (`$T` its element type); integer data
/// is an error for float kernels.
macro_rules! float_op {
    ($x:expr, $v:ident, $T:ident => $body:expr) => {
        match $x {
            HostData::F32($v) => {
                type $T = f32;
                Ok(HostData::F32($body))
            }
            HostData::F64($v) => {
                type $T = f64;
                Ok(HostData::F64($body))
            }
            other => Err(Error::DTypeMismatch {
                expected: DType::F32,
                got: other.dtype(),
            }),
        }
    };
}

/// The sum of the squares of `v` in f64 (gradient clipping's norm): eight partial sums, one
/// per vector lane, so that it vectorises; the same bits on every CPU.
pub(crate) fn squared_sum(v: &[f32]) -> f64 {
    kernels::squared_sum(v)
}

/// The sum of the squares of a float buffer's elements, added in f64 (`None` for integers
/// and Bool): gradient clipping's host part and [`sum_squares`]'.
pub(crate) fn float_squared_sum(x: &HostData) -> Option<f64> {
    let sq = |x: f64| x * x;
    Some(match x {
        HostData::F32(v) => squared_sum(v),
        HostData::F64(v) => v.iter().map(|&x| sq(x)).sum(),
        HostData::F16(v) => v.iter().map(|x| sq(x.to_f64())).sum(),
        HostData::BF16(v) => v.iter().map(|x| sq(x.to_f64())).sum(),
        _ => return None,
    })
}

/// The host kernel of [`crate::backend::Kernels::sum_squares`]: the sum of the squares of
/// `x`'s elements added in f64, as one element of `x`'s dtype.
pub(crate) fn sum_squares(x: &HostData) -> HostData {
    let sum = float_squared_sum(x).unwrap_or_else(|| x.to_f64_vec().iter().map(|v| v * v).sum());
    HostData::filled(x.dtype(), 1, sum)
}

/// The host kernel of [`crate::backend::Kernels::norm`]: [`norm`] with `params` the given ones
/// of (weight, bias), as `affine` says.
pub(crate) fn norm_affine(
    x: &HostData,
    params: &[&HostData],
    affine: [bool; 2],
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<HostData> {
    let mut given = params.iter().copied();
    let weight = if affine[0] { given.next() } else { None };
    let bias = if affine[1] { given.next() } else { None };
    norm(x, weight, bias, cols, eps, center)
}

/// Rows of `cols` elements of `x` normalised, then `* weight + bias` where given (see
/// `kernels::norm`). 16-bit floats compute in f32.
fn norm(
    x: &HostData,
    weight: Option<&HostData>,
    bias: Option<&HostData>,
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<HostData> {
    via_f32(x, |x| {
        float_op!(x, v, T => {
            let (w, b) = (weight.map(HostData::to_vec::<T>), bias.map(HostData::to_vec::<T>));
            let affine = kernels::Affine { weight: w.as_deref(), bias: b.as_deref() };
            kernels::norm::<T>(v, affine, cols, eps, center)
        })
    })
}

/// `$body` on two float operands of one dtype bound as slices `$a`, `$b` of element type `$T`
/// (16-bit floats computed in f32 and rounded back once): the host form of a backward kernel.
macro_rules! float_pair {
    ($x:expr, $y:expr, $a:ident, $b:ident, $T:ident => $body:expr) => {{
        let dtype = $x.dtype();
        let (x, y) = if dtype.is_half() {
            (
                std::borrow::Cow::Owned($x.cast(DType::F32)),
                std::borrow::Cow::Owned($y.cast(DType::F32)),
            )
        } else {
            (
                std::borrow::Cow::Borrowed($x),
                std::borrow::Cow::Borrowed($y),
            )
        };
        let out = match (&*x, &*y) {
            (HostData::F32($a), HostData::F32($b)) => {
                type $T = f32;
                HostData::F32($body)
            }
            (HostData::F64($a), HostData::F64($b)) => {
                type $T = f64;
                HostData::F64($body)
            }
            (a, b) => {
                return Err(Error::DTypeMismatch {
                    expected: a.dtype(),
                    got: b.dtype(),
                });
            }
        };
        Ok(if dtype.is_half() {
            out.cast(dtype)
        } else {
            out
        })
    }};
}

/// The gradients of [`norm`] for the output gradient `g` (same dtype as `x`) and the
/// affine's weight where there is one: the input's, then the parameters' `2 * cols` values (as
/// [`norm_param_grad`]'s), computed in one pass.
pub(crate) fn norm_grads(
    x: &HostData,
    g: &HostData,
    weight: Option<&HostData>,
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<HostData> {
    float_pair!(x, g, a, b, T => {
        let w = weight.map(HostData::to_vec::<T>);
        kernels::norm_grads::<T>(a, b, w.as_deref(), cols, eps, center)
    })
}

/// The affine's parameter gradients of [`norm`]: the weight's then the bias's, `2 * cols`
/// values in `x`'s dtype.
pub(crate) fn norm_param_grad(
    x: &HostData,
    g: &HostData,
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<HostData> {
    float_pair!(x, g, a, b, T => kernels::norm_param_grad::<T>(a, b, cols, eps, center))
}

/// The gradient of a (log-)softmax over `dim` from its output `y` and output gradient `g`
/// (same dtype): the host kernel of [`crate::backend::Kernels::softmax_grad`].
pub(crate) fn softmax_grad(
    y: &HostData,
    g: &HostData,
    shape: &[usize],
    dim: usize,
    log: bool,
) -> Result<HostData> {
    float_pair!(y, g, a, b, T => kernels::softmax_grad::<T>(a, b, shape, dim, log))
}

/// Runs `f32` (or `f64`) on float inputs of one dtype, 16-bit ones computed in f32 and rounded
/// once (as [`via_f32`]).
fn floats(
    xs: &[&HostData],
    f32: impl FnOnce(&[&[f32]]) -> Result<Vec<f32>>,
    f64: impl FnOnce(&[&[f64]]) -> Result<Vec<f64>>,
) -> Result<HostData> {
    let dtype = xs.first().map_or(DType::F32, |x| x.dtype());
    if let Some(x) = xs.iter().find(|x| x.dtype() != dtype) {
        return Err(Error::DTypeMismatch {
            expected: dtype,
            got: x.dtype(),
        });
    }
    let up: Vec<Cow<'_, HostData>> = xs
        .iter()
        .map(|&x| {
            if dtype.is_half() {
                Cow::Owned(x.cast(DType::F32))
            } else {
                Cow::Borrowed(x)
            }
        })
        .collect();
    /// Every input's elements, where `pick` finds them in all.
    fn all<'a, T>(
        up: &'a [Cow<'_, HostData>],
        pick: fn(&HostData) -> Option<&[T]>,
    ) -> Option<Vec<&'a [T]>> {
        up.iter().map(|x| pick(x)).collect()
    }
    if let Some(a) = all(&up, |x| match x {
        HostData::F32(v) => Some(v),
        _ => None,
    }) {
        let out = HostData::F32(f32(&a)?);
        return Ok(if dtype.is_half() {
            out.cast(dtype)
        } else {
            out
        });
    }
    let of64 = all(&up, |x| match x {
        HostData::F64(v) => Some(v),
        _ => None,
    });
    match of64 {
        Some(a) => Ok(HostData::F64(f64(&a)?)),
        None => Err(Error::DTypeMismatch {
            expected: DType::F32,
            got: dtype,
        }),
    }
}

/// `a b + bias` with the bias added to every row as the product is stored (one float
/// dtype, `bias` `d.n` long): the host kernel of [`crate::backend::Kernels::linear`].
pub(crate) fn linear(
    a: &HostData,
    b: &HostData,
    bias: &HostData,
    d: MatmulDims,
) -> Result<HostData> {
    if bias.len() != d.n {
        return Err(Error::Internal(format!(
            "a bias of {} elements for a product {} wide",
            bias.len(),
            d.n
        )));
    }
    floats(
        &[a, b, bias],
        |x| Ok(kernels::matmul_bias(x[0], x[1], Some(x[2]), d)),
        |x| Ok(kernels::matmul_bias(x[0], x[1], Some(x[2]), d)),
    )
}

/// Fused attention of `q`, `k`, `v` (one float dtype), followed by each row's log-sum-exp
/// when `save`: the host kernel of [`crate::backend::Kernels::attention`].
pub(crate) fn attention(
    q: &HostData,
    k: &HostData,
    v: &HostData,
    d: &AttentionDims,
    save: bool,
) -> Result<HostData> {
    floats(
        &[q, k, v],
        |x| attention::attention(x[0], x[1], x[2], d, save),
        |x| attention::attention(x[0], x[1], x[2], d, save),
    )
}

/// The gradients of [`attention`] for the output gradient `g`, given its output and
/// log-sum-exp, `dq`, `dk`, `dv` one after another: the host kernel of
/// [`crate::backend::Kernels::attention_grad`].
pub(crate) fn attention_grad(
    [q, k, v]: [&HostData; 3],
    g: &HostData,
    [out, lse]: [&HostData; 2],
    d: &AttentionDims,
) -> Result<HostData> {
    floats(
        &[q, k, v, g, out, lse],
        |x| attention::attention_grad([x[0], x[1], x[2]], x[3], [x[4], x[5]], d),
        |x| attention::attention_grad([x[0], x[1], x[2]], x[3], [x[4], x[5]], d),
    )
}

/// Fused self-attention of a packed (batch, seq, heads, 3, head_dim) `qkv`, `heads` per batch
/// row, followed by each row's log-sum-exp when `save`: the host kernel of
/// [`crate::backend::Kernels::attention_packed`].
pub(crate) fn attention_packed(
    qkv: &HostData,
    d: &AttentionDims,
    heads: usize,
    save: bool,
) -> Result<HostData> {
    floats(
        &[qkv],
        |x| attention::attention_packed(x[0], d, heads, save),
        |x| attention::attention_packed(x[0], d, heads, save),
    )
}

/// The gradient of [`attention_packed`] for the output gradient `g`, given its output and
/// log-sum-exp, in `qkv`'s layout: the host kernel of
/// [`crate::backend::Kernels::attention_packed_grad`].
pub(crate) fn attention_packed_grad(
    qkv: &HostData,
    g: &HostData,
    [out, lse]: [&HostData; 2],
    d: &AttentionDims,
    heads: usize,
) -> Result<HostData> {
    floats(
        &[qkv, g, out, lse],
        |x| attention::attention_packed_grad(x[0], x[1], [x[2], x[3]], d, heads),
        |x| attention::attention_packed_grad(x[0], x[1], [x[2], x[3]], d, heads),
    )
}

/// `g * op(x)` in one pass for `op` a derivative (see `kernels::unary_mul`), `g` of `x`'s
/// dtype: the host kernel of [`crate::backend::Kernels::unary_mul`].
pub(crate) fn unary_mul(op: UnaryOp, x: &HostData, g: &HostData) -> Result<HostData> {
    let fused = |n| Error::InvalidArgument {
        op: "unary_mul",
        reason: format!("no fused kernel for {n:?}"),
    };
    if x.len() != g.len() {
        return Err(Error::Internal(format!(
            "unary_mul of {} and {} elements",
            x.len(),
            g.len()
        )));
    }
    float_pair!(x, g, a, b, T => kernels::unary_mul::<T>(op, a, b).ok_or_else(|| fused(op))?)
}

impl Backend for CpuBackend {
    type Storage = HostData;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, data: &HostData) -> Result<HostData> {
        Ok(data.clone())
    }

    fn download(&self, s: &HostData) -> Result<HostData> {
        Ok(s.clone())
    }

    fn copy_boxes(
        &self,
        dtype: DType,
        len: usize,
        put: bool,
        copies: &[(&HostData, StridedCopy)],
    ) -> Result<HostData> {
        let elem = dtype.size();
        let mut out = HostData::filled(dtype, len, 0.0);
        let dst = out.as_bytes_mut();
        for (x, c) in copies {
            let (src, st) = (x.as_bytes(), strides(&c.extent));
            for i in 0..numel(&c.extent) {
                let at = c.base
                    + (0..st.len())
                        .map(|d| i / st[d] % c.extent[d] * c.strides[d])
                        .sum::<usize>();
                let (from, to) = if put { (i, at) } else { (at, i) };
                dst[to * elem..(to + 1) * elem]
                    .copy_from_slice(&src[from * elem..(from + 1) * elem]);
            }
        }
        Ok(out)
    }

    fn unary(&self, op: UnaryOp, x: &HostData) -> Result<HostData> {
        if x.dtype().is_int() {
            return int_unary(op, x);
        }
        via_f32(x, |x| float_op!(x, v, T => kernels::unary::<T>(op, v)))
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
        if a.dtype() == b.dtype() && a.dtype().is_int() {
            return int_binary(op, a, a_shape, b, b_shape, out_shape);
        }
        if a.dtype() == b.dtype() && a.dtype().is_half() {
            let (x, y) = (a.cast(DType::F32), b.cast(DType::F32));
            return Ok(self
                .binary(op, &x, a_shape, &y, b_shape, out_shape)?
                .cast(a.dtype()));
        }
        match (a, b) {
            (HostData::F32(x), HostData::F32(y)) => Ok(HostData::F32(kernels::binary(
                op, x, a_shape, y, b_shape, out_shape,
            ))),
            (HostData::F64(x), HostData::F64(y)) => Ok(HostData::F64(kernels::binary(
                op, x, a_shape, y, b_shape, out_shape,
            ))),
            (x, y) => Err(Error::DTypeMismatch {
                expected: x.dtype(),
                got: y.dtype(),
            }),
        }
    }

    fn scale(&self, x: &HostData, s: f64) -> Result<HostData> {
        via_f32(
            x,
            |x| float_op!(x, v, T => v.iter().map(|&e| e * <T as Element>::from_f64(s)).collect()),
        )
    }

    fn add_scalar(&self, x: &HostData, s: f64) -> Result<HostData> {
        via_f32(
            x,
            |x| float_op!(x, v, T => v.iter().map(|&e| e + <T as Element>::from_f64(s)).collect()),
        )
    }

    fn gather_rows(
        &self,
        table: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData> {
        let idx = checked_rows(indices, rows)?;
        let elem = table.dtype().size();
        let (src, w) = (table.as_bytes(), row_len * elem);
        let mut out = Vec::with_capacity(idx.len() * w);
        for i in idx {
            out.extend_from_slice(&src[i * w..(i + 1) * w]);
        }
        Ok(HostData::from_bytes(table.dtype(), &out))
    }

    fn scatter_add_rows(
        &self,
        src: &HostData,
        rows: usize,
        row_len: usize,
        indices: &HostData,
    ) -> Result<HostData> {
        let idx = checked_rows(indices, rows)?;
        via_f32(src, |src| {
            float_op!(src, v, T => {
                let mut out = vec![<T as Element>::from_f64(0.0); rows * row_len];
                for (r, &i) in idx.iter().enumerate() {
                    let dst = &mut out[i * row_len..(i + 1) * row_len];
                    for (d, &x) in dst.iter_mut().zip(&v[r * row_len..(r + 1) * row_len]) {
                        *d += x;
                    }
                }
                out
            })
        })
    }

    fn reduce(
        &self,
        op: ReduceKind,
        x: &HostData,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<HostData> {
        if x.dtype().is_int() {
            return int_reduce(op, x, shape, dims);
        }
        via_f32(
            x,
            |x| float_op!(x, v, T => kernels::reduce::<T>(op, v, shape, dims)),
        )
    }

    fn softmax(&self, x: &HostData, shape: &[usize], dim: usize, log: bool) -> Result<HostData> {
        via_f32(
            x,
            |x| float_op!(x, v, T => kernels::softmax::<T>(v, shape, dim, log)),
        )
    }

    fn matmul(&self, a: &HostData, b: &HostData, d: MatmulDims) -> Result<HostData> {
        if let (HostData::BF16(x), HostData::BF16(y)) = (a, b)
            && let Some(product) = kernels::matmul_bf16(x, y, d)
        {
            // f32 sums of exact bf16 products, rounded once.
            return Ok(HostData::BF16(product));
        }
        if a.dtype() == b.dtype() && a.dtype().is_half() {
            // Products of 16-bit floats accumulate in f32 and round once.
            let (x, y) = (a.cast(DType::F32), b.cast(DType::F32));
            return Ok(self.matmul(&x, &y, d)?.cast(a.dtype()));
        }
        match (a, b) {
            (HostData::F32(x), HostData::F32(y)) => Ok(HostData::F32(kernels::matmul(x, y, d))),
            (HostData::F64(x), HostData::F64(y)) => Ok(HostData::F64(kernels::matmul(x, y, d))),
            (HostData::I64(x), HostData::I64(y)) => Ok(HostData::I64(kernels::matmul_i64(x, y, d))),
            // I32 products wrap as i32 arithmetic does: the i64 product, truncated.
            (HostData::I32(_), HostData::I32(_)) => Ok(self
                .matmul(&a.cast(DType::I64), &b.cast(DType::I64), d)?
                .cast(DType::I32)),
            (x, y) => Err(Error::DTypeMismatch {
                expected: x.dtype(),
                got: y.dtype(),
            }),
        }
    }

    fn permute(&self, x: &HostData, shape: &[usize], perm: &[usize]) -> Result<HostData> {
        let elem = x.dtype().size();
        let mut out = HostData::filled(x.dtype(), x.len(), 0.0);
        kernels::permute_bytes(elem, x.as_bytes(), shape, perm, out.as_bytes_mut());
        Ok(out)
    }

    fn slice(
        &self,
        x: &HostData,
        shape: &[usize],
        start: &[usize],
        extent: &[usize],
    ) -> Result<HostData> {
        // Straight into the typed output (the zeros are written by the kernel as fresh pages).
        let mut out = HostData::filled(x.dtype(), numel(extent), 0.0);
        copy_region(
            x.dtype().size(),
            x.as_bytes(),
            shape,
            start,
            out.as_bytes_mut(),
            extent,
            &vec![0; extent.len()],
            extent,
        );
        Ok(out)
    }

    fn cat(&self, xs: &[&HostData], shapes: &[&[usize]], dim: usize) -> Result<HostData> {
        let dtype = xs.first().map_or(DType::F32, |x| x.dtype());
        if let Some(x) = xs.iter().find(|x| x.dtype() != dtype) {
            return Err(Error::DTypeMismatch {
                expected: dtype,
                got: x.dtype(),
            });
        }
        let mut out_shape = shapes.first().map(|s| s.to_vec()).unwrap_or_default();
        if let Some(d) = out_shape.get_mut(dim) {
            *d = shapes.iter().map(|s| s[dim]).sum();
        }
        let elem = dtype.size();
        let mut out = HostData::filled(dtype, numel(&out_shape), 0.0);
        let mut off = 0;
        for (x, s) in xs.iter().zip(shapes) {
            let mut at = vec![0; s.len()];
            at[dim] = off;
            copy_region(
                elem,
                x.as_bytes(),
                s,
                &vec![0; s.len()],
                out.as_bytes_mut(),
                &out_shape,
                &at,
                s,
            );
            off += s[dim];
        }
        Ok(out)
    }

    fn dtype(&self, s: &HostData) -> DType {
        s.dtype()
    }
    fn len(&self, s: &HostData) -> usize {
        s.len()
    }
}

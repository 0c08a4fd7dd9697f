//! The operators of `flow.Tensor`, each one line of a table: a new gflow operator is one more
//! line here (and in `gflow/_gflow.pyi`). Every operator is polymorphic as in gflow: local
//! inputs compute locally, global inputs globally (signatures and boxing chosen by gflow).

// pyo3's number-protocol glue (`__add__`, ...) expanded by this file's macro_rules trips
// edition 2024's unsafe_op_in_unsafe_fn lint inside pyo3's own generated code.
#![allow(unsafe_op_in_unsafe_fn)]

use gflow::{DType, NdSbp, Target, Tensor};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use std::sync::Arc;

use crate::tensor::{PyTensor, WriteBack, along, dim, op};

/// Where a scalar operand of `t` goes: `t`'s device, or `t`'s placement, broadcast.
pub fn target_like(t: &Tensor) -> Target {
    match t.placement() {
        Some(p) => Target::Global(p.clone(), NdSbp::broadcast(p.ndim())),
        None => Target::Local(t.device()),
    }
}

/// The other operand of a binary operator: a tensor, or a Python number made a 0-d tensor like
/// `like` (so it broadcasts against it).
pub fn operand(py: Python<'_>, like: &Tensor, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    if let Ok(t) = other.cast::<PyTensor>() {
        return Ok(t.get().get());
    }
    let v: f64 = other.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "an operand of a tensor must be a tensor or a number, got {}",
            other
                .get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    // As PyTorch's wrapped numbers: a Python bool is a Bool (the lowest category, so the
    // tensor's dtype stands), a Python float makes an integer or Bool tensor's result the
    // default float (F32), a Python int makes a Bool tensor's I64; otherwise the tensor's
    // dtype stands.
    let is_float = other.is_instance_of::<pyo3::types::PyFloat>();
    let is_bool = other.is_instance_of::<pyo3::types::PyBool>();
    let dtype = match like.dtype() {
        _ if is_bool => gflow::DType::Bool,
        d if is_float && !d.is_float() => gflow::DType::F32,
        gflow::DType::Bool if !is_float => gflow::DType::I64,
        d => d,
    };
    let target = target_like(like);
    if !is_bool && !dtype.is_float() && other.is_instance_of::<pyo3::types::PyInt>() {
        // An integer operand exactly (f64 would round above 2^53), wrapped to the dtype as
        // PyTorch wraps it (int32 + 2**40 adds 0; up to 2**64 - 1, as its uint64 bits); beyond
        // that an `OverflowError`, as PyTorch.
        let exact: i64 = match other.extract::<i64>() {
            Ok(v) => v,
            Err(e) => other.extract::<u64>().map(|v| v as i64).map_err(|_| e)?,
        };
        return crate::tensor::run(py, like.is_global(), move || {
            gflow::no_grad(|| Tensor::from_vec(vec![exact], &[], target)?.to_dtype(dtype))
        });
    }
    crate::tensor::run(py, like.is_global(), move || {
        gflow::no_grad(|| Tensor::full_dtype(&[], v, dtype, target))
    })
}

/// A 0-d tensor of `x`'s dtype, device and placement.
trait ScalarOf {
    /// `value` as such a tensor.
    fn scalar(&self, value: f64) -> gflow::Result<Tensor>;
}

impl ScalarOf for Tensor {
    fn scalar(&self, value: f64) -> gflow::Result<Tensor> {
        Tensor::full_dtype(&[], value, self.dtype(), target_like(self))
    }
}

/// `a / b` rounded as `mode` says (`"floor"`, `"trunc"`), or the remainder of `a / b` with
/// `mode` `"remainder"` (Python's `%`, PyTorch's `remainder`: the sign of `b`) or `"fmod"` (the
/// sign of `a`): PyTorch's dtypes. Floats use the exact remainder kernels (`1e8 % 3` is 1 in
/// f32); integers divide exactly in their own dtype (truncation is the floor, plus one where
/// the floor went below a quotient that has a remainder and a negative sign).
fn rounded_div(a: &Tensor, b: &Tensor, mode: &str) -> gflow::Result<Tensor> {
    let dtype =
        DType::result_type(&[(a.dtype(), a.ndim()), (b.dtype(), b.ndim())]).unwrap_or(DType::F32);
    let op = match mode {
        "fmod" => "fmod",
        "remainder" => "remainder",
        _ => "div",
    };
    if dtype == DType::Bool {
        return Err(gflow::Error::InvalidArgument {
            op,
            reason: "rounded division of Bool tensors is not supported".into(),
        });
    }
    let (x, y) = (a.to_dtype(dtype)?, b.to_dtype(dtype)?);
    if !dtype.is_float() {
        // as PyTorch: an integer division or remainder by zero is an error, not a value (a
        // collective check on a global divisor: every rank runs the same operators)
        let zeros = y.eq(&y.scalar(0.0)?)?.sum(Vec::<usize>::new(), false)?;
        if zeros.to_vec::<i64>()?.first().is_some_and(|&n| n > 0) {
            return Err(gflow::Error::InvalidArgument {
                op,
                reason: "ZeroDivisionError: integer division or remainder by zero".into(),
            });
        }
    }
    match mode {
        "trunc" if dtype.is_float() => x.div(&y)?.trunc(),
        "trunc" => {
            let zero = x.scalar(0.0)?;
            let negative = x.lt(&zero)?.ne(&y.lt(&zero)?)?;
            let inexact = x.fmod(&y)?.ne(&zero)?;
            let up = negative.mul(&inexact)?.to_dtype(dtype)?;
            x.floor_divide(&y)?.add(&up)
        }
        "floor" => x.floor_divide(&y),
        "fmod" => x.fmod(&y),
        _ => x.remainder(&y),
    }
}

/// `b * alpha` (`b` itself without `alpha`): the scaled operand of `add`/`sub`.
fn scaled(py: Python<'_>, b: Tensor, alpha: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
    let Some(alpha) = alpha else { return Ok(b) };
    let a = operand(py, &b, alpha)?;
    let global = a.is_global() || b.is_global();
    crate::tensor::run(py, global, move || b.mul(&a))
}

/// `op`'s product of `a` and `b`, which must both have `ndim` dims (`mm`: 2, `bmm`: 3).
fn product_of(
    py: Python<'_>,
    op: &'static str,
    ndim: usize,
    a: Tensor,
    b: Tensor,
) -> PyResult<PyTensor> {
    if a.ndim() != ndim || b.ndim() != ndim {
        return Err(crate::error::to_py(gflow::Error::ShapeMismatch {
            op,
            shapes: vec![a.shape().to_vec(), b.shape().to_vec()],
            reason: format!("{op}() needs two {ndim}-D tensors"),
        }));
    }
    binary(py, a, b, |a, b| a.matmul(b))
}

fn binary(
    py: Python<'_>,
    a: Tensor,
    b: Tensor,
    f: impl FnOnce(&Tensor, &Tensor) -> gflow::Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    let global = a.is_global() || b.is_global();
    op(py, global, move || f(&a, &b))
}

/// `-` as PyTorch's: refused when either operand is Bool (gflow's core refuses only two).
trait TorchSub {
    /// `self - other`, or `InvalidArgument` when either is Bool.
    fn torch_sub(&self, other: &Tensor) -> gflow::Result<Tensor>;
}

impl TorchSub for Tensor {
    fn torch_sub(&self, other: &Tensor) -> gflow::Result<Tensor> {
        if self.dtype() == DType::Bool || other.dtype() == DType::Bool {
            return Err(gflow::Error::InvalidArgument {
                op: "sub",
                reason: "Subtraction, the `-` operator, with a bool tensor is not supported. \
                         If you are trying to invert a mask, use the `~` or `logical_not()` \
                         operator instead."
                    .into(),
            });
        }
        self.sub(other)
    }
}

/// `-x`, `abs`, `relu` as PyTorch's: refused for a Bool tensor (gflow's core computes them
/// in I64).
trait TorchBoolRefusals {
    /// `-self`.
    fn torch_neg(&self) -> gflow::Result<Tensor>;
    /// `|self|`.
    fn torch_abs(&self) -> gflow::Result<Tensor>;
    /// `max(self, 0)`.
    fn torch_relu(&self) -> gflow::Result<Tensor>;
}

fn refuse_bool(t: &Tensor, op: &'static str, reason: &str) -> gflow::Result<()> {
    if t.dtype() == DType::Bool {
        return Err(gflow::Error::InvalidArgument {
            op,
            reason: reason.into(),
        });
    }
    Ok(())
}

/// `mean` as PyTorch's: only of floating-point tensors.
trait TorchMean {
    /// The mean over `dims`, or `InvalidArgument` for an integer or Bool tensor.
    fn torch_mean(&self, dims: Vec<usize>, keepdim: bool) -> gflow::Result<Tensor>;
}

impl TorchMean for Tensor {
    fn torch_mean(&self, dims: Vec<usize>, keepdim: bool) -> gflow::Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(gflow::Error::InvalidArgument {
                op: "mean",
                reason: format!(
                    "mean(): could not infer output dtype. Input dtype must be either a \
                     floating point or complex dtype. Got: {}",
                    self.dtype()
                ),
            });
        }
        self.mean(dims, keepdim)
    }
}

impl TorchBoolRefusals for Tensor {
    fn torch_neg(&self) -> gflow::Result<Tensor> {
        refuse_bool(
            self,
            "neg",
            "Negation, the `-` operator, on a bool tensor is not supported. If you are trying \
             to invert a mask, use the `~` or `logical_not()` operator instead.",
        )?;
        self.neg()
    }
    fn torch_abs(&self) -> gflow::Result<Tensor> {
        refuse_bool(self, "abs", "abs is not implemented for Bool tensors")?;
        self.abs()
    }
    fn torch_relu(&self) -> gflow::Result<Tensor> {
        refuse_bool(self, "relu", "Boolean inputs not supported for relu")?;
        self.relu()
    }
}

/// Tensor-tensor operators taking a tensor or a number: `name => method of gflow::Tensor`;
/// `reflected` ones take the operands the other way round (`2 - x`).
macro_rules! binary_ops {
    ($($(#[$doc:meta])* $py:ident => $rs:ident $(, reflected $rpy:ident)?;)*) => {
        #[pymethods]
        impl PyTensor {
            $(
                $(#[$doc])*
                fn $py(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                    let a = self.get();
                    let b = operand(py, &a, other)?;
                    binary(py, a, b, |a, b| a.$rs(b))
                }
                $(
                fn $rpy(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                    let a = self.get();
                    let b = operand(py, &a, other)?;
                    binary(py, b, a, |b, a| b.$rs(a))
                }
                )?
            )*
        }
    };
}

binary_ops! {
    /// `x + y` (broadcasting).
    __add__ => add, reflected __radd__;
    /// `x - y` (broadcasting).
    __sub__ => torch_sub, reflected __rsub__;
    /// `x * y` elementwise (broadcasting).
    __mul__ => mul, reflected __rmul__;
    /// `x / y` elementwise (broadcasting).
    __truediv__ => div, reflected __rtruediv__;
    /// `x.mul(y)`.
    mul => mul;
    /// Elementwise maximum (broadcasting).
    maximum => maximum;
    /// Elementwise minimum (broadcasting).
    minimum => minimum;
    /// `x == y` elementwise: a bool tensor.
    __eq__ => eq;
    /// `x != y` elementwise: a bool tensor.
    __ne__ => ne;
    /// `x < y` elementwise: a bool tensor.
    __lt__ => lt;
    /// `x <= y` elementwise: a bool tensor.
    __le__ => le;
    /// `x > y` elementwise: a bool tensor.
    __gt__ => gt;
    /// `x >= y` elementwise: a bool tensor.
    __ge__ => ge;
    /// `x.eq(y)`.
    eq => eq;
    /// `x.ne(y)`.
    ne => ne;
    /// `x.lt(y)`.
    lt => lt;
    /// `x.le(y)`.
    le => le;
    /// `x.gt(y)`.
    gt => gt;
    /// `x.ge(y)`.
    ge => ge;
}

/// Elementwise operators of one tensor: `name => method of gflow::Tensor`.
macro_rules! unary_ops {
    ($($(#[$doc:meta])* $py:ident => $rs:ident;)*) => {
        #[pymethods]
        impl PyTensor {
            $(
                $(#[$doc])*
                fn $py(&self, py: Python<'_>) -> PyResult<PyTensor> {
                    let t = self.get();
                    op(py, t.is_global(), move || t.$rs())
                }
            )*
        }
    };
}

unary_ops! {
    /// `-x`.
    __neg__ => torch_neg;
    /// `-x`.
    neg => torch_neg;
    /// `e^x`.
    exp => exp;
    /// Natural logarithm.
    log => log;
    /// Square root.
    sqrt => sqrt;
    /// `x * x`.
    square => square;
    /// `max(x, 0)`.
    relu => torch_relu;
    /// Logistic sigmoid.
    sigmoid => sigmoid;
    /// Hyperbolic tangent.
    tanh => tanh;
    /// Absolute value.
    abs => torch_abs;
    /// `1 / sqrt(x)`.
    rsqrt => rsqrt;
    /// Sine.
    sin => sin;
    /// Cosine.
    cos => cos;
    /// SiLU (`x * sigmoid(x)`).
    silu => silu;
    /// The error function.
    erf => erf;
    /// The largest integer not above each element (integers as they are).
    floor => floor;
    /// The smallest integer not below each element (integers as they are).
    ceil => ceil;
    /// Each element without its fraction (integers as they are).
    trunc => trunc;
    /// `-1`, `0` or `1` by each element's sign (`0` for NaN), in its dtype.
    sign => sign;
    /// `ln(1 + x)`, exact where `x` is tiny.
    log1p => log1p;
    /// `e^x - 1`, exact where `x` is tiny.
    expm1 => expm1;
}

#[pymethods]
impl PyTensor {
    /// `x.round(decimals=0)`: the nearest integer, halves to the even one (PyTorch's); with
    /// `decimals`, `round(x * 10^decimals) / 10^decimals`, as PyTorch computes it.
    #[pyo3(signature = (*, decimals = 0))]
    fn round(&self, py: Python<'_>, decimals: i32) -> PyResult<PyTensor> {
        let t = self.get();
        op(py, t.is_global(), move || {
            if decimals == 0 || !t.dtype().is_float() {
                return t.round();
            }
            // as PyTorch's kernel: x * 10^d rounded, / 10^d (for d < 0: x / 10^-d, * 10^-d)
            let scale =
                Tensor::full_dtype(&[], 10f64.powi(decimals.abs()), t.dtype(), target_like(&t))?;
            if decimals > 0 {
                t.mul(&scale)?.round()?.div(&scale)
            } else {
                t.div(&scale)?.round()?.mul(&scale)
            }
        })
    }
}

/// The dims of a reduction: `None` is every dim, an int one, a sequence several.
fn reduce_dims(d: Option<&Bound<'_, PyAny>>, ndim: usize) -> PyResult<Vec<usize>> {
    let Some(d) = d else { return Ok(vec![]) };
    let list: Vec<isize> = match d.extract::<isize>() {
        Ok(one) => vec![one],
        Err(_) => d.extract()?,
    };
    let dims: Vec<usize> = list
        .into_iter()
        .map(|x| dim(x, ndim.max(1)))
        .collect::<PyResult<_>>()?;
    // A 0-d tensor takes dim 0 (or -1) as its only "dim", as PyTorch: a reduction over all.
    Ok(if ndim == 0 { vec![] } else { dims })
}

/// A running reduction `f` (`cumsum`, `cumprod`) of `t` along `dim`, of `t` cast to `dtype`
/// first when given (PyTorch's `dtype=`).
fn running(
    py: Python<'_>,
    t: Tensor,
    dim: isize,
    dtype: Option<crate::tensor::PyDType>,
    f: fn(&Tensor, usize) -> gflow::Result<Tensor>,
) -> PyResult<PyTensor> {
    let d = self::dim(dim, t.ndim())?;
    op(py, t.is_global(), move || {
        along(&t, |t| match dtype {
            Some(dt) => f(&t.to_dtype(dt.inner)?, d)?.to_dtype(dt.inner),
            None => f(t, d),
        })
    })
}

/// `dim=`, or NumPy's `axis=` (PyTorch takes either name): the one given, if any.
fn dim_or_axis<'a, 'py>(
    dim: Option<&'a Bound<'py, PyAny>>,
    axis: Option<&'a Bound<'py, PyAny>>,
) -> PyResult<Option<&'a Bound<'py, PyAny>>> {
    match (dim, axis) {
        (Some(_), Some(_)) => Err(PyTypeError::new_err(
            "dim and axis name the same argument: give one of them",
        )),
        (d, a) => Ok(d.or(a)),
    }
}

/// Reductions over dims: `name => method of gflow::Tensor`.
macro_rules! reduce_ops {
    ($($(#[$doc:meta])* $py:ident => $rs:ident;)*) => {
        #[pymethods]
        impl PyTensor {
            $(
                $(#[$doc])*
                #[pyo3(signature = (dim = None, keepdim = false, *, axis = None))]
                fn $py(
                    &self,
                    py: Python<'_>,
                    dim: Option<&Bound<'_, PyAny>>,
                    keepdim: bool,
                    axis: Option<&Bound<'_, PyAny>>,
                ) -> PyResult<PyTensor> {
                    let t = self.get();
                    let dims = reduce_dims(dim_or_axis(dim, axis)?, t.ndim())?;
                    op(py, t.is_global(), move || t.$rs(dims, keepdim))
                }
            )*
        }
    };
}

reduce_ops! {
    /// Maximum over `dim` (values only; every dim when left out).
    amax => max;
    /// Minimum over `dim` (values only; every dim when left out).
    amin => min;
    /// `log(sum(exp(x)))` over `dim`, computed stably.
    logsumexp => logsumexp;
}

#[pymethods]
impl PyTensor {
    /// Sum over `dim` (an int or a tuple, also as `axis=`; every dim when left out), as
    /// PyTorch's: integers and Bool sum to int64, and `dtype=` casts the input to it first.
    #[pyo3(signature = (dim = None, keepdim = false, *, dtype = None, axis = None))]
    fn sum(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<crate::tensor::PyDType>,
        axis: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let dims = reduce_dims(dim_or_axis(dim, axis)?, t.ndim())?;
        op(py, t.is_global(), move || match dtype {
            Some(d) => t.to_dtype(d.inner)?.sum(dims, keepdim)?.to_dtype(d.inner),
            None => t.sum(dims, keepdim),
        })
    }

    /// Mean over `dim` (an int or a tuple, also as `axis=`; every dim when left out) of a float
    /// tensor, or of the input cast to the float `dtype=` first, as PyTorch's.
    #[pyo3(signature = (dim = None, keepdim = false, *, dtype = None, axis = None))]
    fn mean(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<crate::tensor::PyDType>,
        axis: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let dims = reduce_dims(dim_or_axis(dim, axis)?, t.ndim())?;
        if let Some(d) = dtype.filter(|d| !d.inner.is_float()) {
            return Err(crate::error::Also::DTypeNotImplemented.err(format!(
                "mean(): could not infer output dtype. Optional dtype must be either a floating \
                 point or complex dtype. Got: {}",
                d.name()
            )));
        }
        op(py, t.is_global(), move || match dtype {
            Some(d) => t.to_dtype(d.inner)?.torch_mean(dims, keepdim),
            None => t.torch_mean(dims, keepdim),
        })
    }
}

#[pymethods]
impl PyTensor {
    /// Variance over `dim` (every dim when left out), as PyTorch's: `correction` 1 (the
    /// unbiased estimate) unless `correction=` or `unbiased=False` says otherwise.
    #[pyo3(signature = (dim = None, unbiased = None, keepdim = false, *, correction = None))]
    fn var(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        unbiased: Option<bool>,
        keepdim: bool,
        correction: Option<f64>,
    ) -> PyResult<PyTensor> {
        self.spread(py, dim, unbiased, keepdim, correction, false)
    }

    /// Standard deviation over `dim`, as `var`'s square root.
    #[pyo3(signature = (dim = None, unbiased = None, keepdim = false, *, correction = None))]
    fn std(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        unbiased: Option<bool>,
        keepdim: bool,
        correction: Option<f64>,
    ) -> PyResult<PyTensor> {
        self.spread(py, dim, unbiased, keepdim, correction, true)
    }

    /// Cumulative sums along `dim` (PyTorch's `cumsum`): floats keep their dtype, integers and
    /// bool give int64, unless `dtype=` names the result's dtype (the input is cast to it
    /// first, as PyTorch does).
    #[pyo3(signature = (dim, *, dtype = None))]
    fn cumsum(
        &self,
        py: Python<'_>,
        dim: isize,
        dtype: Option<crate::tensor::PyDType>,
    ) -> PyResult<PyTensor> {
        running(py, self.get(), dim, dtype, Tensor::cumsum)
    }

    /// Running products along `dim` (PyTorch's `cumprod`): floats keep their dtype, integers
    /// and bool give int64, unless `dtype=` names the result's dtype (the input is cast first).
    #[pyo3(signature = (dim, *, dtype = None))]
    fn cumprod(
        &self,
        py: Python<'_>,
        dim: isize,
        dtype: Option<crate::tensor::PyDType>,
    ) -> PyResult<PyTensor> {
        running(py, self.get(), dim, dtype, Tensor::cumprod)
    }

    /// The product over `dim` (an int or a tuple; every dim when left out), as PyTorch's
    /// `prod`: integers and Bool give int64, 16-bit floats multiply in f32, and `dtype=` casts
    /// the input to it first; gradients exact also at zeros.
    #[pyo3(signature = (dim = None, keepdim = false, *, dtype = None))]
    fn prod(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<crate::tensor::PyDType>,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let dims = reduce_dims(dim, t.ndim())?;
        op(py, t.is_global(), move || match dtype {
            Some(d) => t.to_dtype(d.inner)?.prod(dims, keepdim)?.to_dtype(d.inner),
            None => t.prod(dims, keepdim),
        })
    }

    /// `x.topk(k, dim=-1, largest=True, sorted=True)`: the named tuple `(values, indices)` of
    /// the `k` largest (smallest) elements along `dim`, in order (ties: the lower index first;
    /// NaN above every number); gradients flow to the chosen elements.
    #[pyo3(signature = (k, dim = -1, largest = true, sorted = true))]
    fn topk<'py>(
        slf: &Bound<'py, Self>,
        k: usize,
        dim: isize,
        largest: bool,
        sorted: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        // unsorted results may come in any order: the sorted one is one of them
        let _ = sorted;
        let py = slf.py();
        let t = slf.get().get();
        let d = self::dim(dim, t.ndim())?;
        // as PyTorch, a 0-d tensor's k = 0 gives its element too (k > 1 is refused)
        let k = if t.ndim() == 0 { k.max(1) } else { k };
        let (values, indices) = crate::tensor::run(py, t.is_global(), move || {
            along(&t, |t| t.topk(k, d, largest))
        })?;
        crate::tensor::python_class(py, &TOPK, "topk_result")?
            .call1((PyTensor::new(values), PyTensor::new(indices)))
    }

    /// `x.sort(dim=-1, descending=False, stable=False)`: the named tuple `(values, indices)` of
    /// `x` sorted along `dim` (always stably: equal elements keep their order; NaN above every
    /// number), as `torch.sort`; gradients flow to where each value came from.
    #[pyo3(signature = (dim = -1, descending = false, stable = false))]
    fn sort<'py>(
        slf: &Bound<'py, Self>,
        dim: isize,
        descending: bool,
        stable: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        // the sort is stable either way; an unstable one may return any order of ties
        let _ = stable;
        let py = slf.py();
        let t = slf.get().get();
        let d = self::dim(dim, t.ndim())?;
        let (values, indices) = crate::tensor::run(py, t.is_global(), move || {
            along(&t, |t| t.sort(d, descending))
        })?;
        crate::tensor::python_class(py, &SORT, "sort_result")?
            .call1((PyTensor::new(values), PyTensor::new(indices)))
    }

    /// `x.argsort(dim=-1, descending=False, stable=False)`: the int64 positions that sort `x`
    /// along `dim` (stably), as `torch.argsort`.
    #[pyo3(signature = (dim = -1, descending = false, stable = false))]
    fn argsort(
        &self,
        py: Python<'_>,
        dim: isize,
        descending: bool,
        stable: bool,
    ) -> PyResult<PyTensor> {
        let _ = stable;
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        op(py, t.is_global(), move || {
            along(&t, |t| t.argsort(d, descending))
        })
    }

    /// `x.multinomial(num_samples, replacement=False)`: category indices (int64) drawn per row
    /// of the non-negative weights along the last dim, as `torch.multinomial`.
    #[pyo3(signature = (num_samples, replacement = false, *, generator = None))]
    fn multinomial(
        &self,
        py: Python<'_>,
        num_samples: usize,
        replacement: bool,
        generator: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        if generator.is_some_and(|g| !g.is_none()) {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "multinomial: generator= is not supported; seed with flow.manual_seed",
            ));
        }
        let t = self.get();
        op(py, t.is_global(), move || {
            t.multinomial(num_samples, replacement)
        })
    }
}

impl PyTensor {
    /// `var` or (`sqrt`) `std`; `x.var(False)` (PyTorch's `unbiased` first) is read as such.
    fn spread(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        unbiased: Option<bool>,
        keepdim: bool,
        correction: Option<f64>,
        sqrt: bool,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let (dim, unbiased) = match dim {
            Some(d) if d.is_instance_of::<pyo3::types::PyBool>() => (None, Some(d.extract()?)),
            d => (d, unbiased),
        };
        let dims = reduce_dims(dim, t.ndim())?;
        let c = correction.unwrap_or(if unbiased == Some(false) { 0.0 } else { 1.0 });
        op(py, t.is_global(), move || {
            if !t.dtype().is_float() {
                return Err(gflow::Error::InvalidArgument {
                    op: if sqrt { "std" } else { "var" },
                    reason: "std and var only support floating point dtypes".into(),
                });
            }
            if sqrt {
                t.std(dims, c, keepdim)
            } else {
                t.var(dims, c, keepdim)
            }
        })
    }
}

/// A shape (see [`int_args`]), one `-1` inferred from the element count.
fn shape_with_infer(raw: Vec<isize>, numel: usize) -> PyResult<Vec<usize>> {
    let known: usize = raw
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    let infer = |d: isize| -> PyResult<usize> {
        match d {
            -1 if known > 0 && numel.is_multiple_of(known) => Ok(numel / known),
            d if d >= 0 => Ok(d as usize),
            _ => Err(crate::error::to_py(gflow::Error::ShapeMismatch {
                op: "reshape",
                shapes: vec![vec![numel]],
                reason: format!("cannot infer the shape {raw:?}"),
            })),
        }
    };
    if raw.iter().filter(|&&d| d < 0).count() > 1 {
        return Err(crate::error::to_py(gflow::Error::ShapeMismatch {
            op: "reshape",
            shapes: vec![vec![numel]],
            reason: format!("only one dimension can be -1, got {raw:?}"),
        }));
    }
    raw.iter().map(|&d| infer(d)).collect()
}

/// The integers of a shape- or dims-taking method, as PyTorch takes them: variadic
/// (`x.reshape(2, 3)`), one sequence (`x.reshape((2, 3))`) or the one keyword `name`
/// (`x.reshape(shape=(2, 3))`); other keywords are a `TypeError` naming them.
pub(crate) fn int_args(
    args: &Bound<'_, PyTuple>,
    kw: Option<&Bound<'_, PyDict>>,
    name: &str,
) -> PyResult<Vec<isize>> {
    if let Some(kw) = kw.filter(|k| !k.is_empty()) {
        return match kw.get_item(name)? {
            Some(v) if kw.len() == 1 && args.is_empty() => v.extract(),
            _ => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "expected the {name} as arguments or as the one keyword `{name}=`, got keywords \
                 {:?}",
                kw.keys().iter().map(|k| k.to_string()).collect::<Vec<_>>()
            ))),
        };
    }
    if args.len() == 1 && args.get_item(0)?.extract::<isize>().is_err() {
        args.get_item(0)?.extract()
    } else {
        args.extract()
    }
}

impl PyTensor {
    /// `reshape` and `view` of the shape `raw` (see [`shape_with_infer`]).
    fn reshaped(&self, py: Python<'_>, raw: Vec<isize>) -> PyResult<PyTensor> {
        let t = self.get();
        let s = shape_with_infer(raw, t.numel())?;
        op(py, t.is_global(), move || t.reshape(&s))
    }
}

#[pymethods]
impl PyTensor {
    /// The same data in a new shape (`-1`: inferred): `x.reshape(2, 3)`, `x.reshape((2, 3))`
    /// or `x.reshape(shape=(2, 3))`.
    #[pyo3(signature = (*shape, **kw))]
    fn reshape<'py>(
        slf: &Bound<'py, Self>,
        shape: &Bound<'py, PyTuple>,
        kw: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let raw = int_args(shape, kw, "shape")?;
        let out = slf.get().reshaped(slf.py(), raw)?;
        PyTensor::reshaped_view(slf, out)
    }

    /// As `reshape` (the keyword is `size`, as PyTorch's `view`).
    #[pyo3(signature = (*shape, **kw))]
    fn view<'py>(
        slf: &Bound<'py, Self>,
        shape: &Bound<'py, PyTuple>,
        kw: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let raw = int_args(shape, kw, "size")?;
        let out = slf.get().reshaped(slf.py(), raw)?;
        PyTensor::reshaped_view(slf, out)
    }

    /// Dims `start..=end` merged into one.
    #[pyo3(signature = (start_dim = 0, end_dim = -1))]
    fn flatten<'py>(
        slf: &Bound<'py, Self>,
        start_dim: isize,
        end_dim: isize,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let out = slf.get().flattened(slf.py(), start_dim, end_dim)?;
        PyTensor::reshaped_view(slf, out)
    }

    /// A new dim of size 1 at `dim`.
    fn unsqueeze<'py>(slf: &Bound<'py, Self>, dim: isize) -> PyResult<Bound<'py, PyTensor>> {
        let out = slf.get().unsqueezed(slf.py(), dim)?;
        PyTensor::reshaped_view(slf, out)
    }

    /// Dims of size 1 removed (only those of `dim`, an int or a tuple of ints, when given).
    #[pyo3(signature = (dim = None))]
    fn squeeze<'py>(
        slf: &Bound<'py, Self>,
        dim: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let out = slf.get().squeezed(slf.py(), dim)?;
        PyTensor::reshaped_view(slf, out)
    }
}

impl PyTensor {
    /// [`flatten`](Self::flatten)'s value.
    fn flattened(&self, py: Python<'_>, start_dim: isize, end_dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let (s, e) = (dim(start_dim, t.ndim())?, dim(end_dim, t.ndim())?);
        if t.ndim() == 0 {
            // as PyTorch: a 0-d tensor flattens to one element of one dim
            return op(py, t.is_global(), move || t.reshape(&[1]));
        }
        if s > e {
            return Err(crate::error::to_py(gflow::Error::InvalidArgument {
                op: "flatten",
                reason: "flatten() has invalid args: start_dim cannot come after end_dim".into(),
            }));
        }
        let sh = t.shape();
        let mut out: Vec<usize> = sh[..s].to_vec();
        out.push(sh[s..=e.max(s)].iter().product());
        out.extend_from_slice(&sh[(e.max(s) + 1).min(sh.len())..]);
        op(py, t.is_global(), move || t.reshape(&out))
    }

    /// [`unsqueeze`](Self::unsqueeze)'s value.
    fn unsqueezed(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let d = self::dim(dim, t.ndim() + 1)?;
        let mut s = t.shape().to_vec();
        s.insert(d, 1);
        op(py, t.is_global(), move || t.reshape(&s))
    }

    /// [`squeeze`](Self::squeeze)'s value.
    fn squeezed(&self, py: Python<'_>, dim: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
        let t = self.get();
        let chosen: Option<Vec<usize>> = match dim {
            None => None,
            Some(d) => {
                let list: Vec<isize> = match d.extract::<isize>() {
                    Ok(one) => vec![one],
                    Err(_) => d.extract()?,
                };
                let dims = list
                    .iter()
                    .map(|&x| self::dim(x, t.ndim()))
                    .collect::<PyResult<Vec<_>>>()?;
                if let Some(i) = (1..dims.len()).find(|&i| dims[..i].contains(&dims[i])) {
                    return Err(crate::error::InvalidArgumentError::new_err(format!(
                        "squeeze: dim {} appears multiple times in the list of dims",
                        dims[i]
                    )));
                }
                Some(dims)
            }
        };
        let s: Vec<usize> = t
            .shape()
            .iter()
            .enumerate()
            .filter(|&(i, &n)| n != 1 || chosen.as_ref().is_some_and(|c| !c.contains(&i)))
            .map(|(_, &n)| n)
            .collect();
        op(py, t.is_global(), move || t.reshape(&s))
    }
}

#[pymethods]
impl PyTensor {
    /// Dims `dim0` and `dim1` swapped.
    fn transpose<'py>(
        slf: &Bound<'py, Self>,
        dim0: isize,
        dim1: isize,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let t = slf.get().get();
        let (a, b) = (dim(dim0, t.ndim())?, dim(dim1, t.ndim())?);
        // swapping two dims is its own inverse: it reads the view and writes it back
        let swap = move |x: &Tensor| along(x, |x| x.transpose(a, b));
        let out = op(slf.py(), t.is_global(), move || swap(&t))?;
        PyTensor::viewing(
            out,
            slf,
            Arc::new(move |base, v| swap(v)?.reshape(base.shape())),
            Arc::new(swap),
        )
    }

    /// `x.T`: the dims reversed (the transpose of a 2-D tensor; a 0-d or 1-D tensor is
    /// itself), as PyTorch.
    #[getter(T)]
    fn t_prop<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTensor>> {
        let t = slf.get().get();
        // reversing the dims is its own inverse: it reads the view and writes it back
        let reverse = |x: &Tensor| {
            let rev: Vec<usize> = (0..x.ndim()).rev().collect();
            x.permute(&rev)
        };
        let out = op(slf.py(), t.is_global(), move || reverse(&t))?;
        PyTensor::viewing(
            out,
            slf,
            Arc::new(move |b, v| reverse(v)?.reshape(b.shape())),
            Arc::new(reverse),
        )
    }

    /// The transpose of a 2-D tensor (a 0-d or 1-D tensor is itself, as PyTorch).
    fn t<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTensor>> {
        let t = slf.get().get();
        if t.ndim() > 2 {
            return Err(crate::error::to_py(gflow::Error::ShapeMismatch {
                op: "t",
                shapes: vec![t.shape().to_vec()],
                reason: "t() needs a tensor of at most 2 dims".into(),
            }));
        }
        // a transpose of at most 2 dims is its own inverse
        let flip = |x: &Tensor| match x.ndim() {
            2 => x.transpose(0, 1),
            _ => Ok(x.clone()),
        };
        let out = op(slf.py(), t.is_global(), move || flip(&t))?;
        PyTensor::viewing(out, slf, Arc::new(move |_, v| flip(v)), Arc::new(flip))
    }

    /// `x @ y`: matrix product as PyTorch's `matmul` (2-D, batched, and 1-D operands: a dot
    /// product, a vector-matrix or matrix-vector product).
    fn __matmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        binary(py, a, b, matmul_any)
    }

    fn __rmatmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        binary(py, b, a, matmul_any)
    }

    /// `x.matmul(y)`: as `x @ y`.
    fn matmul(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.__matmul__(py, other)
    }

    /// `x.mm(y)`: the product of two matrices.
    fn mm(&self, py: Python<'_>, other: &PyTensor) -> PyResult<PyTensor> {
        product_of(py, "mm", 2, self.get(), other.get())
    }

    /// `x.bmm(y)`: batched matrix product of two 3-D tensors.
    fn bmm(&self, py: Python<'_>, other: &PyTensor) -> PyResult<PyTensor> {
        product_of(py, "bmm", 3, self.get(), other.get())
    }

    /// `x.max()`: the largest element (a 0-d tensor); `x.max(dim, keepdim=False)`: the
    /// named tuple `(values, indices)` along `dim`; `x.max(other)`: the elementwise maximum.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn max<'py>(
        slf: &Bound<'py, Self>,
        dim: Option<&Bound<'py, PyAny>>,
        keepdim: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        extreme(slf, dim, keepdim, true)
    }

    /// `x.min()`: the smallest element (a 0-d tensor); `x.min(dim, keepdim=False)`: the
    /// named tuple `(values, indices)` along `dim`; `x.min(other)`: the elementwise minimum.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn min<'py>(
        slf: &Bound<'py, Self>,
        dim: Option<&Bound<'py, PyAny>>,
        keepdim: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        extreme(slf, dim, keepdim, false)
    }

    /// `length` elements of `dim` from `start` (negative counts from the end), as PyTorch's:
    /// a start outside `[-size, size]` is an `IndexError` (`flow.IndexOutOfRangeError`).
    fn narrow<'py>(
        slf: &Bound<'py, Self>,
        dim: isize,
        start: isize,
        length: isize,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let (py, t) = (slf.py(), slf.get().get());
        if t.ndim() == 0 {
            return Err(crate::error::InvalidArgumentError::new_err(
                "narrow() cannot be applied to a 0-dim tensor.",
            ));
        }
        let d = self::dim(dim, t.ndim())?;
        let size = t.shape()[d] as isize;
        if !(-size..=size).contains(&start) {
            return Err(crate::error::index_error(format!(
                "narrow: start out of range (expected to be in range of [{}, {size}], but got \
                 {start})",
                -size
            )));
        }
        let Ok(length) = usize::try_from(length) else {
            return Err(crate::error::InvalidArgumentError::new_err(
                "narrow(): length must be non-negative.",
            ));
        };
        let start = if start < 0 { start + size } else { start } as usize;
        let out = op(py, t.is_global(), move || t.narrow(d, start, length))?;
        let back: WriteBack = Arc::new(move |b, v| crate::index::assign_narrow(b, d, start, v));
        PyTensor::viewing(
            out,
            slf,
            back,
            Arc::new(move |b| b.narrow(d, start, length)),
        )
    }

    /// Size-1 dims repeated to `sizes` (`-1` keeps a dim); also `x.expand(size=(3, 4))`.
    #[pyo3(signature = (*sizes, **kw))]
    fn expand(
        &self,
        py: Python<'_>,
        sizes: &Bound<'_, PyTuple>,
        kw: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyTensor> {
        let raw = int_args(sizes, kw, "size")?;
        let t = self.get();
        let pad = raw.len().saturating_sub(t.ndim());
        let s: Vec<usize> = raw
            .iter()
            .enumerate()
            .map(|(i, &d)| match d {
                -1 if i >= pad => Ok(t.shape()[i - pad]),
                d if d >= 0 => Ok(d as usize),
                // as PyTorch: -1 keeps an existing dim only; other negative sizes are refused
                -1 => Err(crate::error::InvalidArgumentError::new_err(format!(
                    "expand: the expanded size of the tensor (-1) isn't allowed in a leading, \
                     non-existing dimension {i}"
                ))),
                d => Err(crate::error::InvalidArgumentError::new_err(format!(
                    "expand: the expanded size of the tensor ({d}) must be non-negative (-1 \
                     keeps an existing dimension)"
                ))),
            })
            .collect::<PyResult<_>>()?;
        op(py, t.is_global(), move || t.expand(&s))
    }

    /// Softmax over `dim`.
    fn softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        op(py, t.is_global(), move || along(&t, |t| t.softmax(d)))
    }

    /// Log-softmax over `dim`.
    fn log_softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        op(py, t.is_global(), move || along(&t, |t| t.log_softmax(d)))
    }

    /// `b ** x` for a number `b` (as `torch.pow(b, x)`: PyTorch's dtype for a Python number
    /// with a tensor, differentiable in `x`).
    fn __rpow__(
        &self,
        py: Python<'_>,
        base: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let b = operand(py, &t, base)?;
        binary(py, b, t, |b, t| b.pow_tensor(t))
    }

    /// `x.clone()`: a copy of the tensor (differentiable, in the tensor's own placement and
    /// SBP).
    #[pyo3(name = "clone")]
    pub fn clone_tensor(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = self.get();
        op(py, t.is_global(), move || t.where_cond(&t, &t))
    }

    /// The tensor itself: gflow's tensors are always contiguous.
    fn contiguous(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Whether the dtype is a floating-point type.
    fn is_floating_point(&self) -> bool {
        self.get().dtype().is_float()
    }

    /// Whether any element is non-zero (along `dim` when given), a bool tensor.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn any(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        self.count(py, dim, keepdim, true)
    }

    /// Whether every element is non-zero (along `dim` when given), a bool tensor.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn all(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        self.count(py, dim, keepdim, false)
    }

    /// `x ** e` for a number or a tensor `e` (`x.pow(e)`).
    fn __pow__(
        &self,
        py: Python<'_>,
        e: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.pow(py, e)
    }

    /// `x // y`: floor division (broadcasting), as PyTorch's (integers stay integers).
    fn __floordiv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        binary(py, a, b, |a, b| rounded_div(a, b, "floor"))
    }

    /// `y // x`.
    fn __rfloordiv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        binary(py, b, a, |b, a| rounded_div(b, a, "floor"))
    }

    /// `x % y`: the remainder with the divisor's sign (PyTorch's `remainder`).
    fn __mod__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.remainder(py, other)
    }

    /// `y % x`.
    fn __rmod__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        binary(py, b, a, |b, a| rounded_div(b, a, "remainder"))
    }

    /// `x - floor(x / y) * y` (broadcasting), computed exactly, as `torch.remainder`.
    fn remainder(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        binary(py, a, b, |a, b| rounded_div(a, b, "remainder"))
    }

    /// The remainder of `x / y` with the dividend's sign (C's `fmod`, broadcasting), computed
    /// exactly, as `torch.fmod`.
    fn fmod(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        binary(py, a, b, |a, b| rounded_div(a, b, "fmod"))
    }

    /// `x.div(y)`: true division, or with `rounding_mode` `"trunc"` / `"floor"` rounded (the
    /// operands' dtype kept), as PyTorch's.
    #[pyo3(signature = (other, *, rounding_mode = None))]
    fn div(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        rounding_mode: Option<&str>,
    ) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        match rounding_mode {
            None => binary(py, a, b, |a, b| a.div(b)),
            Some(m @ ("trunc" | "floor")) => {
                let m = m.to_string();
                binary(py, a, b, move |a, b| rounded_div(a, b, &m))
            }
            Some(other) => Err(PyValueError::new_err(format!(
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found \
                 '{other}'"
            ))),
        }
    }

    /// `x.add(y, alpha=a)`: `x + a * y` (broadcasting), as PyTorch's.
    #[pyo3(signature = (other, *, alpha = None))]
    fn add(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        alpha: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let a = self.get();
        let b = scaled(py, operand(py, &a, other)?, alpha)?;
        binary(py, a, b, |a, b| a.add(b))
    }

    /// `x.sub(y, alpha=a)`: `x - a * y` (broadcasting; refused for Bool operands, as
    /// PyTorch's).
    #[pyo3(signature = (other, *, alpha = None))]
    fn sub(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        alpha: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        // a Bool operand is refused as is (before `alpha` would promote it)
        let b = if a.dtype() == DType::Bool || b.dtype() == DType::Bool {
            b
        } else {
            scaled(py, b, alpha)?
        };
        binary(py, a, b, |a, b| a.torch_sub(b))
    }

    /// `x ** e` elementwise for a number or a tensor `e` (broadcasting), as `torch.pow`: a
    /// float tensor keeps its dtype with a number; an integer tensor stays integer with an
    /// integer exponent (a negative one is an error) and becomes F32 with a float one; with a
    /// tensor exponent the dtype is PyTorch's result type of the two.
    #[pyo3(signature = (exponent))]
    fn pow(&self, py: Python<'_>, exponent: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let e = exponent;
        let t = self.get();
        if let Ok(other) = e.cast::<PyTensor>() {
            return binary(py, t, other.get().get(), |a, b| a.pow_tensor(b));
        }
        let integral = !e.is_instance_of::<pyo3::types::PyFloat>();
        if t.dtype().is_float() || !integral {
            let v: f64 = e.extract().map_err(|_| {
                PyTypeError::new_err("pow takes a number or a tensor as the exponent")
            })?;
            return op(py, t.is_global(), move || t.pow(v));
        }
        let v: i64 = e
            .extract()
            .map_err(|_| PyTypeError::new_err("pow takes a number or a tensor as the exponent"))?;
        if v < 0 {
            return Err(PyValueError::new_err(
                "Integers to negative integer powers are not allowed.",
            ));
        }
        let b = operand(py, &t, e)?;
        binary(py, t, b, |a, b| a.pow_tensor(b))
    }
}

/// Both operands of a logical operator as Bool tensors (`x != 0`).
fn logical_operands(
    py: Python<'_>,
    a: Tensor,
    other: &Bound<'_, PyAny>,
) -> PyResult<(Tensor, Tensor)> {
    let b = operand(py, &a, other)?;
    let bool_of = |t: Tensor| {
        if t.dtype() == DType::Bool {
            Ok(t)
        } else {
            t.to_dtype(DType::Bool).map_err(crate::error::to_py)
        }
    };
    Ok((bool_of(a)?, bool_of(b)?))
}

/// A bitwise operator: `&`, `|`, `^`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bitwise {
    /// `&`.
    And,
    /// `|`.
    Or,
    /// `^`.
    Xor,
}

impl Bitwise {
    /// PyTorch's name of the operator's kernel.
    fn name(self) -> &'static str {
        match self {
            Bitwise::And => "bitwise_and",
            Bitwise::Or => "bitwise_or",
            Bitwise::Xor => "bitwise_xor",
        }
    }
}

/// The dtype of `a op b` for a bitwise `op`, as PyTorch's (its result type; a Python number
/// has been made a 0-d tensor by [`operand`]); a float one is PyTorch's `NotImplementedError`
/// (`flow.DTypeNotImplementedError`, also the `TypeError` gflow raised before).
pub(crate) fn bitwise_dtype(op: Bitwise, a: &Tensor, b: &Tensor) -> PyResult<DType> {
    let dtype =
        DType::result_type(&[(a.dtype(), a.ndim()), (b.dtype(), b.ndim())]).unwrap_or(DType::Bool);
    if dtype.is_float() {
        return Err(crate::error::Also::DTypeNotImplemented.err(format!(
            "\"{}\" not implemented for '{}' (bitwise operators take integer and Bool tensors)",
            op.name(),
            crate::tensor::PyDType { inner: dtype }.name()
        )));
    }
    Ok(dtype)
}

/// `a op b` bitwise (broadcasting) in `dtype` (from [`bitwise_dtype`]), as PyTorch's: gflow's
/// bitwise kernel (Bool operands logically).
pub(crate) fn bitwise(op: Bitwise, a: &Tensor, b: &Tensor, dtype: DType) -> gflow::Result<Tensor> {
    let (a, b) = (a.to_dtype(dtype)?, b.to_dtype(dtype)?);
    match op {
        Bitwise::And => a.bitwise_and(&b),
        Bitwise::Or => a.bitwise_or(&b),
        Bitwise::Xor => a.bitwise_xor(&b),
    }
}

impl PyTensor {
    /// `self op other` bitwise (see [`bitwise`]); `reflected`: `other op self`.
    fn bitwise_op(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        op: Bitwise,
        reflected: bool,
    ) -> PyResult<PyTensor> {
        let a = self.get();
        let b = operand(py, &a, other)?;
        let (a, b) = if reflected { (b, a) } else { (a, b) };
        let dtype = bitwise_dtype(op, &a, &b)?;
        binary(py, a, b, move |a, b| bitwise(op, a, b, dtype))
    }
}

#[pymethods]
impl PyTensor {
    /// `~x`: logical not of a Bool tensor, `-x - 1` (bitwise not) of an integer one.
    fn __invert__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = self.get();
        match t.dtype() {
            DType::Bool => self.logical_not(py),
            d if d.is_int() => op(py, t.is_global(), move || {
                Tensor::full_dtype(&[], -1.0, d, target_like(&t))?.sub(&t)
            }),
            d => Err(PyTypeError::new_err(format!(
                "~ needs a Bool or integer tensor, got {d}"
            ))),
        }
    }

    /// `x & y`: bitwise and of integer and Bool tensors (broadcasting, PyTorch's dtypes).
    fn __and__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::And, false)
    }

    /// `y & x`.
    fn __rand__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::And, true)
    }

    /// `x | y`: bitwise or of integer and Bool tensors.
    fn __or__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::Or, false)
    }

    /// `y | x`.
    fn __ror__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::Or, true)
    }

    /// `x ^ y`: bitwise exclusive or of integer and Bool tensors.
    fn __xor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::Xor, false)
    }

    /// `y ^ x`.
    fn __rxor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::Xor, true)
    }

    /// `x.bitwise_and(y)`: as `x & y`.
    fn bitwise_and(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::And, false)
    }

    /// `x.bitwise_or(y)`: as `x | y`.
    fn bitwise_or(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::Or, false)
    }

    /// `x.bitwise_xor(y)`: as `x ^ y`.
    fn bitwise_xor(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        self.bitwise_op(py, other, Bitwise::Xor, false)
    }

    /// `x.bitwise_not()`: as `~x`.
    fn bitwise_not(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.__invert__(py)
    }

    /// Whether each element is zero (False), a Bool tensor, as `torch.logical_not`.
    fn logical_not(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = self.get();
        op(py, t.is_global(), move || {
            t.eq(&Tensor::full_dtype(&[], 0.0, t.dtype(), target_like(&t))?)
        })
    }

    /// Elementwise `x != 0 and y != 0`, a Bool tensor (broadcasting).
    fn logical_and(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let (a, b) = logical_operands(py, self.get(), other)?;
        binary(py, a, b, |a, b| a.mul(b))
    }

    /// Elementwise `x != 0 or y != 0`, a Bool tensor (broadcasting).
    fn logical_or(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let (a, b) = logical_operands(py, self.get(), other)?;
        binary(py, a, b, |a, b| a.add(b))
    }

    /// Elementwise `(x != 0) != (y != 0)`, a Bool tensor (broadcasting).
    fn logical_xor(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let (a, b) = logical_operands(py, self.get(), other)?;
        binary(py, a, b, |a, b| a.ne(b))
    }
}

impl PyTensor {
    /// `any` (`nonzero`) or `all`: counts the non-zero (zero) elements and compares with 0.
    fn count(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        nonzero: bool,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let dims = reduce_dims(dim, t.ndim())?;
        op(py, t.is_global(), move || {
            gflow::no_grad(|| {
                let zero = Tensor::full_dtype(&[], 0.0, t.dtype(), target_like(&t))?;
                let hits = if nonzero { t.ne(&zero)? } else { t.eq(&zero)? };
                let n = hits.to_dtype(DType::F32)?.sum(dims, keepdim)?;
                let none = Tensor::full_dtype(&[], 0.0, DType::F32, target_like(&n))?;
                if nonzero { n.gt(&none) } else { n.eq(&none) }
            })
        })
    }
}

/// PyTorch's `matmul`: 1-D operands get a dim of size 1 for the product (in front of the
/// first, after the second) that is then dropped.
fn matmul_any(a: &Tensor, b: &Tensor) -> gflow::Result<Tensor> {
    let (na, nb) = (a.ndim(), b.ndim());
    if na >= 2 && nb >= 2 && (nb == 2 || a.shape()[..na - 2] == b.shape()[..nb - 2]) {
        return a.matmul(b);
    }
    let a2 = if na == 1 {
        a.reshape(&[1, a.shape()[0]])?
    } else {
        a.clone()
    };
    let b2 = if nb == 1 {
        b.reshape(&[b.shape()[0], 1])?
    } else {
        b.clone()
    };
    let (a2, b2) = broadcast_batches(a2, b2)?;
    let out = a2.matmul(&b2)?;
    if na >= 2 && nb >= 2 {
        return Ok(out);
    }
    let mut shape = out.shape().to_vec();
    if nb == 1 {
        shape.pop();
    }
    if na == 1 {
        let at = shape.len().saturating_sub(if nb == 1 { 1 } else { 2 });
        shape.remove(at);
    }
    out.reshape(&shape)
}

/// `a` and `b` (at least 2-D) expanded to one broadcast batch shape (their dims before the
/// last two, as PyTorch's `matmul`), unless `b` is a plain matrix (which the product takes as
/// is) or the batch shapes already agree.
fn broadcast_batches(a: Tensor, b: Tensor) -> gflow::Result<(Tensor, Tensor)> {
    let (na, nb) = (a.ndim(), b.ndim());
    if na < 2 || nb < 2 {
        // a 0-d operand: the product refuses it
        return Ok((a, b));
    }
    let (ba, bb) = (&a.shape()[..na - 2], &b.shape()[..nb - 2]);
    if nb == 2 || ba == bb {
        return Ok((a, b));
    }
    let n = ba.len().max(bb.len());
    let size = |s: &[usize], i: usize| {
        let pad = n - s.len();
        if i < pad { 1 } else { s[i - pad] }
    };
    let mut batch = Vec::with_capacity(n);
    for i in 0..n {
        let (x, y) = (size(ba, i), size(bb, i));
        if x != y && x != 1 && y != 1 {
            return Err(gflow::Error::ShapeMismatch {
                op: "matmul",
                shapes: vec![a.shape().to_vec(), b.shape().to_vec()],
                reason: "the batch dimensions do not broadcast".into(),
            });
        }
        batch.push(if x == 1 { y } else { x });
    }
    let full = |t: &Tensor| {
        let mut s = batch.clone();
        s.extend_from_slice(&t.shape()[t.ndim() - 2..]);
        t.expand(&s)
    };
    Ok((full(&a)?, full(&b)?))
}

/// `x.max(...)` / `x.min(...)` (`largest`: max): see [`PyTensor::max`].
fn extreme<'py>(
    slf: &Bound<'py, PyTensor>,
    dim: Option<&Bound<'py, PyAny>>,
    keepdim: bool,
    largest: bool,
) -> PyResult<Bound<'py, PyAny>> {
    static MAX: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static MIN: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let py = slf.py();
    let t = slf.get().get();
    let Some(dim) = dim else {
        let r = op(py, t.is_global(), move || {
            if largest {
                t.max(Vec::<usize>::new(), false)
            } else {
                t.min(Vec::<usize>::new(), false)
            }
        })?;
        return Ok(Bound::new(py, r)?.into_any());
    };
    if let Ok(other) = dim.cast::<PyTensor>() {
        let b = other.get().get();
        let r = binary(
            py,
            t,
            b,
            move |a, b| {
                if largest { a.maximum(b) } else { a.minimum(b) }
            },
        )?;
        return Ok(Bound::new(py, r)?.into_any());
    }
    let d: isize = dim.extract().map_err(|_| {
        PyTypeError::new_err(
            "max/min take one dim (an int) or a tensor; use amax/amin for several dims",
        )
    })?;
    let d = self::dim(d, t.ndim())?;
    let (values, indices) = crate::tensor::run(py, t.is_global(), move || {
        along(&t, |t| {
            // As PyTorch: the values are the elements at the indices, so the gradient goes to
            // that one element of each line (ties: the lowest index), not shared among ties.
            let idx = if largest {
                t.argmax(d, true)?
            } else {
                t.argmin(d, true)?
            };
            let values = t.gather(d, &idx)?;
            if keepdim {
                return Ok((values, idx));
            }
            let mut shape = t.shape().to_vec();
            shape.remove(d);
            Ok((values.reshape(&shape)?, idx.reshape(&shape)?))
        })
    })?;
    let (cell, name) = if largest {
        (&MAX, "max_result")
    } else {
        (&MIN, "min_result")
    };
    crate::tensor::python_class(py, cell, name)?
        .call1((PyTensor::new(values), PyTensor::new(indices)))
}

/// The named tuple class of `x.topk(...)`.
static TOPK: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static SORT: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The dim of `cat` / `stack`: `dim=`, or NumPy's `axis=` (PyTorch takes either name); 0 by
/// default.
fn join_dim(dim: Option<isize>, axis: Option<isize>) -> PyResult<isize> {
    match (dim, axis) {
        (Some(_), Some(_)) => Err(PyTypeError::new_err(
            "dim and axis name the same argument: give one of them",
        )),
        (d, a) => Ok(d.or(a).unwrap_or(0)),
    }
}

/// `flow.stack(tensors, dim)`: the tensors (of one shape) joined along a new dim `dim` (also
/// `axis=`).
#[pyfunction]
#[pyo3(signature = (tensors, dim = None, *, axis = None))]
pub fn stack(
    py: Python<'_>,
    tensors: Vec<PyRef<'_, PyTensor>>,
    dim: Option<isize>,
    axis: Option<isize>,
) -> PyResult<PyTensor> {
    let dim = join_dim(dim, axis)?;
    let ts: Vec<Tensor> = tensors.iter().map(|t| t.get()).collect();
    let ndim = ts.first().map_or(0, Tensor::ndim);
    let d = self::dim(dim, ndim + 1)?;
    let global = ts.iter().any(Tensor::is_global);
    op(py, global, move || Tensor::stack(&ts, d))
}

/// `flow.cat(tensors, dim)`: concatenation along `dim` (also `axis=`). As PyTorch's: no tensors
/// is a `ValueError` (`flow.InvalidValueError`), a 0-d tensor a `RuntimeError`.
#[pyfunction]
#[pyo3(signature = (tensors, dim = None, *, axis = None))]
pub fn cat(
    py: Python<'_>,
    tensors: Vec<PyRef<'_, PyTensor>>,
    dim: Option<isize>,
    axis: Option<isize>,
) -> PyResult<PyTensor> {
    let dim = join_dim(dim, axis)?;
    let mut ts: Vec<Tensor> = tensors.iter().map(|t| t.get()).collect();
    if ts.is_empty() {
        return Err(crate::error::Also::InvalidValue
            .err("torch.cat(): expected a non-empty list of Tensors (flow.cat got none)"));
    }
    if let Some(i) = ts.iter().position(|t| t.ndim() == 0) {
        return Err(crate::error::InvalidArgumentError::new_err(format!(
            "cat: zero-dimensional tensor (at position {i}) cannot be concatenated"
        )));
    }
    // As PyTorch: 1-D empty tensors are skipped beside tensors of another rank (the legacy
    // "empty" tensor), their dtype still taking part in the result's.
    if ts.iter().any(|t| t.ndim() != 1) {
        let dtype = ts.iter().map(Tensor::dtype).reduce(DType::promote);
        ts.retain(|t| t.shape() != [0]);
        if let (Some(dtype), Some(first)) = (dtype, ts.first_mut())
            && first.dtype() != dtype
        {
            *first = first.to_dtype(dtype).map_err(crate::error::to_py)?;
        }
    }
    let ndim = ts.first().map_or(1, Tensor::ndim);
    let d = self::dim(dim, ndim)?;
    let global = ts.iter().any(Tensor::is_global);
    op(py, global, move || Tensor::cat(&ts, d))
}

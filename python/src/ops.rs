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
use pyo3::types::{PyTuple, PyType};

use crate::tensor::{PyTensor, dim, op};

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
    let is_float = other.is_instance_of::<pyo3::types::PyFloat>();
    let dtype = match like.dtype() {
        d if is_float && !d.is_float() => gflow::DType::F32,
        d => d,
    };
    let target = target_like(like);
    crate::tensor::run(py, like.is_global(), move || {
        gflow::no_grad(|| Tensor::full_dtype(&[], v, dtype, target))
    })
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
    __sub__ => sub, reflected __rsub__;
    /// `x * y` elementwise (broadcasting).
    __mul__ => mul, reflected __rmul__;
    /// `x / y` elementwise (broadcasting).
    __truediv__ => div, reflected __rtruediv__;
    /// `x.add(y)`.
    add => add;
    /// `x.sub(y)`.
    sub => sub;
    /// `x.mul(y)`.
    mul => mul;
    /// `x.div(y)`.
    div => div;
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
    __neg__ => neg;
    /// `-x`.
    neg => neg;
    /// `e^x`.
    exp => exp;
    /// Natural logarithm.
    log => log;
    /// Square root.
    sqrt => sqrt;
    /// `x * x`.
    square => square;
    /// `max(x, 0)`.
    relu => relu;
    /// Logistic sigmoid.
    sigmoid => sigmoid;
    /// Hyperbolic tangent.
    tanh => tanh;
    /// Absolute value.
    abs => abs;
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
}

/// The dims of a reduction: `None` is every dim, an int one, a sequence several.
fn reduce_dims(d: Option<&Bound<'_, PyAny>>, ndim: usize) -> PyResult<Vec<usize>> {
    let Some(d) = d else { return Ok(vec![]) };
    let list: Vec<isize> = match d.extract::<isize>() {
        Ok(one) => vec![one],
        Err(_) => d.extract()?,
    };
    list.into_iter().map(|x| dim(x, ndim)).collect()
}

/// Reductions over dims: `name => method of gflow::Tensor`.
macro_rules! reduce_ops {
    ($($(#[$doc:meta])* $py:ident => $rs:ident;)*) => {
        #[pymethods]
        impl PyTensor {
            $(
                $(#[$doc])*
                #[pyo3(signature = (dim = None, keepdim = false))]
                fn $py(
                    &self,
                    py: Python<'_>,
                    dim: Option<&Bound<'_, PyAny>>,
                    keepdim: bool,
                ) -> PyResult<PyTensor> {
                    let t = self.get();
                    let dims = reduce_dims(dim, t.ndim())?;
                    op(py, t.is_global(), move || t.$rs(dims, keepdim))
                }
            )*
        }
    };
}

reduce_ops! {
    /// Sum over `dim` (an int or a tuple; every dim when left out).
    sum => sum;
    /// Mean over `dim` (an int or a tuple; every dim when left out).
    mean => mean;
    /// Maximum over `dim` (values only; every dim when left out).
    amax => max;
    /// Minimum over `dim` (values only; every dim when left out).
    amin => min;
    /// `log(sum(exp(x)))` over `dim`, computed stably.
    logsumexp => logsumexp;
}

/// A shape given as `f(2, -1)` or `f((2, -1))`, one `-1` inferred from the element count.
fn shape_with_infer(args: &Bound<'_, PyTuple>, numel: usize) -> PyResult<Vec<usize>> {
    let raw: Vec<isize> = if args.len() == 1 && args.get_item(0)?.extract::<isize>().is_err() {
        args.get_item(0)?.extract()?
    } else {
        args.extract()?
    };
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

#[pymethods]
impl PyTensor {
    /// The same data in a new shape (`-1`: inferred).
    #[pyo3(signature = (*shape))]
    fn reshape(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let t = self.get();
        let s = shape_with_infer(shape, t.numel())?;
        op(py, t.is_global(), move || t.reshape(&s))
    }

    /// As `reshape`.
    #[pyo3(signature = (*shape))]
    fn view(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        self.reshape(py, shape)
    }

    /// Dims `start..=end` merged into one.
    #[pyo3(signature = (start_dim = 0, end_dim = -1))]
    fn flatten(&self, py: Python<'_>, start_dim: isize, end_dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let (s, e) = (dim(start_dim, t.ndim())?, dim(end_dim, t.ndim())?);
        let sh = t.shape();
        let mut out: Vec<usize> = sh[..s].to_vec();
        out.push(sh[s..=e.max(s)].iter().product());
        out.extend_from_slice(&sh[(e.max(s) + 1).min(sh.len())..]);
        op(py, t.is_global(), move || t.reshape(&out))
    }

    /// A new dim of size 1 at `dim`.
    fn unsqueeze(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let d = self::dim(dim, t.ndim() + 1)?;
        let mut s = t.shape().to_vec();
        s.insert(d, 1);
        op(py, t.is_global(), move || t.reshape(&s))
    }

    /// Dims of size 1 removed (only `dim` when given).
    #[pyo3(signature = (dim = None))]
    fn squeeze(&self, py: Python<'_>, dim: Option<isize>) -> PyResult<PyTensor> {
        let t = self.get();
        let keep = match dim {
            Some(d) => {
                let d = self::dim(d, t.ndim())?;
                (0..t.ndim())
                    .map(|i| i != d || t.shape()[i] != 1)
                    .collect::<Vec<_>>()
            }
            None => t.shape().iter().map(|&n| n != 1).collect(),
        };
        let s: Vec<usize> = t
            .shape()
            .iter()
            .zip(keep)
            .filter(|(_, k)| *k)
            .map(|(n, _)| *n)
            .collect();
        op(py, t.is_global(), move || t.reshape(&s))
    }

    /// Dims `dim0` and `dim1` swapped.
    fn transpose(&self, py: Python<'_>, dim0: isize, dim1: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let (a, b) = (dim(dim0, t.ndim())?, dim(dim1, t.ndim())?);
        op(py, t.is_global(), move || t.transpose(a, b))
    }

    /// `x.T`: the dims reversed (the transpose of a 2-D tensor; a 0-d or 1-D tensor is
    /// itself), as PyTorch.
    #[getter(T)]
    fn t_prop(slf: &Bound<'_, Self>) -> PyResult<PyTensor> {
        let t = slf.get().get();
        let rev: Vec<usize> = (0..t.ndim()).rev().collect();
        match t.ndim() {
            0 | 1 => Ok(PyTensor::new(t)),
            2 => op(slf.py(), t.is_global(), move || t.transpose(0, 1)),
            _ => op(slf.py(), t.is_global(), move || t.permute(&rev)),
        }
    }

    /// The transpose of a 2-D tensor (a 0-d or 1-D tensor is itself, as PyTorch).
    fn t(slf: &Bound<'_, Self>) -> PyResult<PyTensor> {
        let t = slf.get().get();
        match t.ndim() {
            0 | 1 => Ok(PyTensor::new(t)),
            2 => op(slf.py(), t.is_global(), move || t.transpose(0, 1)),
            _ => Err(crate::error::to_py(gflow::Error::ShapeMismatch {
                op: "t",
                shapes: vec![t.shape().to_vec()],
                reason: "t() needs a tensor of at most 2 dims".into(),
            })),
        }
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

    /// `length` elements of `dim` from `start`.
    fn narrow(
        &self,
        py: Python<'_>,
        dim: isize,
        start: usize,
        length: usize,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        op(py, t.is_global(), move || t.narrow(d, start, length))
    }

    /// Size-1 dims repeated to `sizes` (`-1` keeps a dim).
    #[pyo3(signature = (*sizes))]
    fn expand(&self, py: Python<'_>, sizes: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let t = self.get();
        let raw: Vec<isize> = if sizes.len() == 1 && sizes.get_item(0)?.extract::<isize>().is_err()
        {
            sizes.get_item(0)?.extract()?
        } else {
            sizes.extract()?
        };
        let pad = raw.len().saturating_sub(t.ndim());
        let s: Vec<usize> = raw
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                if d < 0 && i >= pad {
                    t.shape()[i - pad]
                } else {
                    d.max(0) as usize
                }
            })
            .collect();
        op(py, t.is_global(), move || t.expand(&s))
    }

    /// Softmax over `dim`.
    fn softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        op(py, t.is_global(), move || t.softmax(d))
    }

    /// Log-softmax over `dim`.
    fn log_softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        op(py, t.is_global(), move || t.log_softmax(d))
    }

    /// `b ** x` for a number `b > 0`: `exp(x * ln b)` (an integer tensor with an integer base
    /// stays integer, rounded).
    fn __rpow__(
        &self,
        py: Python<'_>,
        base: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let b: f64 = base.extract()?;
        if b <= 0.0 || !b.is_finite() {
            return Err(PyValueError::new_err(format!(
                "number ** tensor needs a positive finite base, got {b}"
            )));
        }
        let int_base = !base.is_instance_of::<pyo3::types::PyFloat>();
        let t = self.get();
        let dtype = t.dtype();
        op(py, t.is_global(), move || {
            if dtype.is_float() {
                return t.mul_scalar(b.ln())?.exp();
            }
            let e = t.to_dtype(DType::F64)?.mul_scalar(b.ln())?.exp()?;
            if int_base && dtype != DType::Bool {
                e.add_scalar(0.5)?.to_dtype(dtype)
            } else {
                e.to_dtype(DType::F32)
            }
        })
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

    /// `x ** e` for a number `e` (`x.pow(e)`).
    fn __pow__(
        &self,
        py: Python<'_>,
        e: f64,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.pow(py, e)
    }

    /// `x ** e` elementwise for a number `e`.
    fn pow(&self, py: Python<'_>, e: f64) -> PyResult<PyTensor> {
        let t = self.get();
        op(py, t.is_global(), move || t.pow(e))
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
    if na >= 2 && nb >= 2 {
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
    let out = a2.matmul(&b2)?;
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
        Ok(if largest {
            (t.max(vec![d], keepdim)?, t.argmax(d, keepdim)?)
        } else {
            (t.min(vec![d], keepdim)?, t.argmin(d, keepdim)?)
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

/// `flow.stack(tensors, dim)`: the tensors (of one shape) joined along a new dim `dim`.
#[pyfunction]
#[pyo3(signature = (tensors, dim = 0))]
pub fn stack(py: Python<'_>, tensors: Vec<PyRef<'_, PyTensor>>, dim: isize) -> PyResult<PyTensor> {
    let ts: Vec<Tensor> = tensors.iter().map(|t| t.get()).collect();
    let ndim = ts.first().map_or(0, Tensor::ndim);
    let d = self::dim(dim, ndim + 1)?;
    let global = ts.iter().any(Tensor::is_global);
    op(py, global, move || Tensor::stack(&ts, d))
}

/// `flow.cat(tensors, dim)`: concatenation along `dim`.
#[pyfunction]
#[pyo3(signature = (tensors, dim = 0))]
pub fn cat(py: Python<'_>, tensors: Vec<PyRef<'_, PyTensor>>, dim: isize) -> PyResult<PyTensor> {
    let ts: Vec<Tensor> = tensors.iter().map(|t| t.get()).collect();
    let ndim = ts.first().map_or(1, Tensor::ndim);
    let d = self::dim(dim, ndim)?;
    let global = ts.iter().any(Tensor::is_global);
    op(py, global, move || Tensor::cat(&ts, d))
}

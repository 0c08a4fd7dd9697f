//! The round-2 operators of `flow.Tensor` that take more than tensors: selection (`where`,
//! `masked_fill`, `tril`/`triu`, `argmax`), layout (`permute`, `split`, `chunk`), indexing
//! (`gather`, `index_select`), `clamp`, `gelu(approximate=)` and dtype casts (`x.to(dtype)`,
//! `x.float()`, ...). Each is one gflow operator, local or global alike.

use gflow::{DType, Tensor};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::ops::operand;
use crate::tensor::{PyDType, PyTensor, along, dim, op, run};

/// The dims of `permute`/`flip` (see [`crate::ops::int_args`]), negative ones counted from the
/// end.
fn dims_arg(
    args: &Bound<'_, PyTuple>,
    kw: Option<&Bound<'_, pyo3::types::PyDict>>,
    ndim: usize,
) -> PyResult<Vec<usize>> {
    let raw = crate::ops::int_args(args, kw, "dims")?;
    raw.into_iter().map(|d| dim(d, ndim)).collect()
}

/// Several tensors as a Python tuple.
fn tuple(py: Python<'_>, ts: Vec<Tensor>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(py, ts.into_iter().map(PyTensor::new))
}

/// `flow.where(cond, x, y)`: `x` where `cond` is true, else `y` (numbers broadcast as 0-d
/// tensors).
#[pyfunction]
#[pyo3(name = "where", signature = (condition, input, other))]
pub fn where_(
    py: Python<'_>,
    condition: &PyTensor,
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    let (x, y) = (input, other);
    let c = condition.get();
    if c.dtype() != DType::Bool {
        return Err(crate::error::DTypeError::new_err(format!(
            "where expected condition to be a boolean tensor, but got a tensor with dtype {}",
            PyDType { inner: c.dtype() }.name()
        )));
    }
    let like = match (x.cast::<PyTensor>(), y.cast::<PyTensor>()) {
        (Ok(t), _) | (_, Ok(t)) => t.get().get(),
        // two Python numbers, as PyTorch: float32 if either is a float, bool if both are
        // bools, else int64
        _ => {
            let float = |v: &Bound<'_, PyAny>| v.is_instance_of::<pyo3::types::PyFloat>();
            let boolean = |v: &Bound<'_, PyAny>| v.is_instance_of::<pyo3::types::PyBool>();
            let dtype = if float(x) || float(y) {
                DType::F32
            } else if boolean(x) && boolean(y) {
                DType::Bool
            } else {
                DType::I64
            };
            c.to_dtype(dtype).map_err(crate::error::to_py)?
        }
    };
    let (a, b) = (operand(py, &like, x)?, operand(py, &like, y)?);
    let global = c.is_global() || a.is_global() || b.is_global();
    op(py, global, move || c.where_cond(&a, &b))
}

/// PyTorch's refusal of a mask that is not Bool (`masked_fill`, `masked_fill_`):
/// `flow.DTypeError`, a `RuntimeError` as PyTorch's.
pub(crate) fn check_bool_mask(mask: &Tensor) -> PyResult<()> {
    if mask.dtype() == DType::Bool {
        return Ok(());
    }
    Err(crate::error::DTypeError::new_err(format!(
        "masked_fill_ only supports boolean masks, but got mask with dtype {}",
        PyDType {
            inner: mask.dtype()
        }
        .name()
    )))
}

/// The bounds of `clamp` and `clamp_`: numbers, or tensors (a number beside a tensor made a
/// 0-d tensor) that broadcast.
pub(crate) enum Bounds {
    /// `Tensor::clamp`'s bounds.
    Numbers(Option<f64>, Option<f64>),
    /// `minimum(maximum(x, min), max)`, promoting as PyTorch.
    Tensors(Option<Tensor>, Option<Tensor>),
}

impl Bounds {
    /// The bounds `min` and `max` (either may be left out) for `t`.
    pub(crate) fn of(
        py: Python<'_>,
        t: &Tensor,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bounds> {
        let min = min.filter(|b| !b.is_none());
        let max = max.filter(|b| !b.is_none());
        let is_tensor =
            |b: Option<&Bound<'_, PyAny>>| b.is_some_and(|b| b.cast::<PyTensor>().is_ok());
        if is_tensor(min) || is_tensor(max) {
            let lo = min.map(|m| operand(py, t, m)).transpose()?;
            let hi = max.map(|m| operand(py, t, m)).transpose()?;
            return Ok(Bounds::Tensors(lo, hi));
        }
        let number = |b: Option<&Bound<'_, PyAny>>| -> PyResult<Option<f64>> {
            b.map(|b| {
                b.extract::<f64>()
                    .map_err(|_| PyTypeError::new_err("clamp bounds are numbers, tensors or None"))
            })
            .transpose()
        };
        Ok(Bounds::Numbers(number(min)?, number(max)?))
    }

    /// Whether a bound is a global tensor (the clamp is then a global operator).
    pub(crate) fn is_global(&self) -> bool {
        match self {
            Bounds::Numbers(..) => false,
            Bounds::Tensors(lo, hi) => lo.iter().chain(hi).any(Tensor::is_global),
        }
    }

    /// `t` limited to the bounds.
    pub(crate) fn apply(&self, t: &Tensor) -> gflow::Result<Tensor> {
        match self {
            Bounds::Numbers(lo, hi) => t.clamp(*lo, *hi),
            Bounds::Tensors(lo, hi) => {
                let t = match lo {
                    Some(lo) => t.maximum(lo)?,
                    None => t.clone(),
                };
                match hi {
                    Some(hi) => t.minimum(hi),
                    None => Ok(t),
                }
            }
        }
    }
}

#[pymethods]
impl PyTensor {
    /// GELU: the exact (erf) form by default, `approximate="tanh"` for the tanh form, as in
    /// PyTorch and OneFlow.
    #[pyo3(signature = (approximate = "none"))]
    fn gelu(&self, py: Python<'_>, approximate: &str) -> PyResult<PyTensor> {
        let t = self.get();
        match approximate {
            "none" => op(py, t.is_global(), move || t.gelu_erf()),
            "tanh" => op(py, t.is_global(), move || t.gelu()),
            other => Err(PyValueError::new_err(format!(
                "gelu: approximate must be \"none\" or \"tanh\", got {other:?}"
            ))),
        }
    }

    /// Index of the largest element along `dim` (of the flattened tensor when left out), int64.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn argmax(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.arg_reduce(py, dim, keepdim, true)
    }

    /// Index of the smallest element along `dim` (of the flattened tensor when left out), int64.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn argmin(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        self.arg_reduce(py, dim, keepdim, false)
    }

    /// `x.where(cond, y)` (PyTorch's method form): `x` where `cond`, else `y`.
    #[pyo3(name = "where")]
    fn where_method(
        slf: &Bound<'_, Self>,
        cond: &PyTensor,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        where_(slf.py(), cond, slf.as_any(), y)
    }

    /// `value` where `mask` (bool, broadcasting to this shape) is true.
    fn masked_fill(&self, py: Python<'_>, mask: &PyTensor, value: f64) -> PyResult<PyTensor> {
        let (t, m) = (self.get(), mask.get());
        check_bool_mask(&m)?;
        let global = t.is_global() || m.is_global();
        op(py, global, move || t.masked_fill(&m, value))
    }

    /// The lower triangle (elements with `col - row <= diagonal`) of the last two dims.
    #[pyo3(signature = (diagonal = 0))]
    fn tril(&self, py: Python<'_>, diagonal: i64) -> PyResult<PyTensor> {
        let t = self.get();
        op(py, t.is_global(), move || t.tril(diagonal))
    }

    /// The upper triangle (elements with `col - row >= diagonal`) of the last two dims.
    #[pyo3(signature = (diagonal = 0))]
    fn triu(&self, py: Python<'_>, diagonal: i64) -> PyResult<PyTensor> {
        let t = self.get();
        op(py, t.is_global(), move || t.triu(diagonal))
    }

    /// The elements reversed along `dims`: `x.flip(0, 1)`, `x.flip((0, 1))` or
    /// `x.flip(dims=(0, 1))`.
    #[pyo3(signature = (*dims, **kw))]
    fn flip(
        &self,
        py: Python<'_>,
        dims: &Bound<'_, PyTuple>,
        kw: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let d = dims_arg(dims, kw, t.ndim())?;
        op(py, t.is_global(), move || along(&t, |t| t.flip(&d)))
    }

    /// The tensor tiled: `x.repeat(2, 3)`, `x.repeat((2, 3))` or `x.repeat(repeats=(2, 3))`.
    #[pyo3(signature = (*repeats, **kw))]
    fn repeat(
        &self,
        py: Python<'_>,
        repeats: &Bound<'_, PyTuple>,
        kw: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<PyTensor> {
        let r = crate::ops::int_args(repeats, kw, "repeats")?
            .into_iter()
            .map(|n| {
                usize::try_from(n).map_err(|_| {
                    pyo3::exceptions::PyValueError::new_err(format!(
                        "repeat: repeats must be non-negative, got {n}"
                    ))
                })
            })
            .collect::<PyResult<Vec<usize>>>()?;
        let t = self.get();
        op(py, t.is_global(), move || t.repeat(&r))
    }

    /// The dims reordered: `x.permute(2, 0, 1)`, `x.permute((2, 0, 1))` or
    /// `x.permute(dims=(2, 0, 1))`.
    #[pyo3(signature = (*dims, **kw))]
    fn permute<'py>(
        slf: &Bound<'py, Self>,
        dims: &Bound<'py, PyTuple>,
        kw: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let t = slf.get().get();
        let p = dims_arg(dims, kw, t.ndim())?;
        // the write-back of the view: the inverse permutation
        let mut inverse = vec![0; p.len()];
        for (i, &d) in p.iter().enumerate() {
            inverse[d] = i;
        }
        let read = p.clone();
        let out = op(slf.py(), t.is_global(), move || t.permute(&p))?;
        let back: crate::tensor::WriteBack = std::sync::Arc::new(move |_, v| v.permute(&inverse));
        PyTensor::viewing(
            out,
            slf,
            back,
            std::sync::Arc::new(move |b| b.permute(&read)),
        )
    }

    /// Pieces of `split_size` along `dim` (the last one shorter), or pieces of the sizes of a
    /// list (`x.split([1, 2], dim=1)`, adding up to the dim's size), a tuple.
    #[pyo3(signature = (split_size_or_sections = None, dim = 0, *, split_size = None))]
    fn split<'py>(
        &self,
        py: Python<'py>,
        split_size_or_sections: Option<&Bound<'py, PyAny>>,
        dim: isize,
        split_size: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        // `split_size=` is `Tensor.split`'s keyword in PyTorch
        let Some(split_size_or_sections) = split_size_or_sections.or(split_size) else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "split() missing its split_size_or_sections argument",
            ));
        };
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        if let Ok(size) = split_size_or_sections.extract::<usize>() {
            return tuple(py, run(py, t.is_global(), move || t.split(size, d))?);
        }
        let sizes: Vec<usize> = split_size_or_sections.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "split takes a piece size (an int) or a list of piece sizes",
            )
        })?;
        let n = t.shape().get(d).copied().unwrap_or(0);
        if sizes.iter().sum::<usize>() != n {
            return Err(crate::error::to_py(gflow::Error::ShapeMismatch {
                op: "split",
                shapes: vec![t.shape().to_vec()],
                reason: format!("the sizes {sizes:?} do not add up to dim {d}'s size {n}"),
            }));
        }
        let pieces = run(py, t.is_global(), move || {
            let mut start = 0;
            sizes
                .iter()
                .map(|&len| {
                    let piece = t.narrow(d, start, len);
                    start += len;
                    piece
                })
                .collect::<gflow::Result<Vec<_>>>()
        })?;
        tuple(py, pieces)
    }

    /// `chunks` pieces along `dim` (as PyTorch: of size `ceil(n / chunks)`), a tuple.
    #[pyo3(signature = (chunks, dim = 0))]
    fn chunk<'py>(
        &self,
        py: Python<'py>,
        chunks: usize,
        dim: isize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let t = self.get();
        let d = self::dim(dim, t.ndim())?;
        tuple(py, run(py, t.is_global(), move || t.chunk(chunks, d))?)
    }

    /// `out[i][j] = x[index[i][j]][j]` for `dim == 0` (and so on): PyTorch's `gather`.
    /// A 0-d tensor takes a 0-d or 1-D index along dim 0 (or -1), as PyTorch: its element
    /// repeated to the index's shape.
    fn gather(&self, py: Python<'_>, dim: isize, index: &PyTensor) -> PyResult<PyTensor> {
        let (t, i) = (self.get(), index.get());
        let d = self::dim(dim, t.ndim())?;
        let global = t.is_global() || i.is_global();
        op(py, global, move || {
            if t.ndim() == 0 && i.ndim() <= 1 {
                let flat = i.reshape(&[i.numel()])?;
                return t.reshape(&[1])?.gather(0, &flat)?.reshape(i.shape());
            }
            t.gather(d, &i)
        })
    }

    /// `x` plus `src` scattered along `dim` by `index` (PyTorch's `scatter_add`:
    /// `out[index[i][j]][j] += src[i][j]` for `dim == 0`, and so on), differentiable in `x`
    /// and `src`.
    fn scatter_add(
        &self,
        py: Python<'_>,
        dim: isize,
        index: &PyTensor,
        src: &PyTensor,
    ) -> PyResult<PyTensor> {
        let (t, i, s) = (self.get(), index.get(), src.get());
        if s.dtype() != t.dtype() {
            return Err(crate::error::DTypeError::new_err(format!(
                "scatter(): Expected self.dtype to be equal to src.dtype (self is {}, src {})",
                PyDType { inner: t.dtype() }.name(),
                PyDType { inner: s.dtype() }.name()
            )));
        }
        let d = self::dim(dim, t.ndim())?;
        let global = t.is_global() || i.is_global() || s.is_global();
        op(py, global, move || {
            if t.ndim() == 0 {
                // a 0-d tensor (see `along`): its index and source as one dim too
                let (i, s) = (i.reshape(&[i.numel()])?, s.reshape(&[s.numel()])?);
                return along(&t, |t| t.scatter_add(d, &i, &s));
            }
            t.scatter_add(d, &i, &s)
        })
    }

    /// The entries of `dim` picked by the int64 (or int32) `index`: a vector (a 0-d index is
    /// one entry; more dims are PyTorch's `IndexError`, `flow.IndexShapeError`). A 0-d tensor
    /// takes one entry of its element, as PyTorch.
    fn index_select(&self, py: Python<'_>, dim: isize, index: &PyTensor) -> PyResult<PyTensor> {
        let (t, i) = (self.get(), index.get());
        if i.ndim() > 1 {
            return Err(crate::error::Also::IndexShape.err(format!(
                "index_select(): Index is supposed to be a vector, got shape {:?}",
                i.shape()
            )));
        }
        if t.ndim() == 0 && i.numel() != 1 {
            return Err(crate::error::to_py(gflow::Error::ShapeMismatch {
                op: "index_select",
                shapes: vec![vec![], i.shape().to_vec()],
                reason: format!(
                    "index_select(): Index to scalar can have only 1 value, got {} value(s)",
                    i.numel()
                ),
            }));
        }
        let d = self::dim(dim, t.ndim())?;
        let global = t.is_global() || i.is_global();
        op(py, global, move || {
            let i = if i.ndim() == 0 { i.reshape(&[1])? } else { i };
            along(&t, |t| t.index_select(d, &i))
        })
    }

    /// Values limited to `[min, max]` (either may be left out): numbers, or tensors that
    /// broadcast (then `minimum(maximum(x, min), max)`, promoting as PyTorch).
    #[pyo3(signature = (min = None, max = None))]
    fn clamp(
        &self,
        py: Python<'_>,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        let bounds = Bounds::of(py, &t, min, max)?;
        let global = t.is_global() || bounds.is_global();
        op(py, global, move || bounds.apply(&t))
    }

    /// As `clamp`.
    #[pyo3(signature = (min = None, max = None))]
    fn clip(
        &self,
        py: Python<'_>,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        self.clamp(py, min, max)
    }

    /// PyTorch's `to`: `x.to(dtype)`, `x.to(device)`, `x.to(device, dtype)`, `x.to(other)`
    /// (`other`'s dtype and device), with `dtype=` / `device=` keywords. A dtype converts the
    /// elements (as PyTorch casts); a device (a name or a `flow.device`) moves a local tensor
    /// (global tensors move with `to_global`). Nothing to change gives the tensor itself.
    #[pyo3(signature = (*args, dtype = None, device = None, non_blocking = false, copy = false))]
    fn to(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        dtype: Option<PyDType>,
        device: Option<&Bound<'_, PyAny>>,
        non_blocking: bool,
        copy: bool,
    ) -> PyResult<Py<PyTensor>> {
        let _ = non_blocking;
        let py = slf.py();
        let (mut dtype, mut device) = (
            dtype.map(|d| d.inner),
            match device {
                Some(d) => Some(crate::creation::parse_device(&d.str()?.to_string())?),
                None => None,
            },
        );
        for a in args.iter() {
            if let Ok(d) = a.extract::<PyDType>() {
                dtype = Some(d.inner);
            } else if let Ok(other) = a.cast::<PyTensor>() {
                let o = other.get().get();
                dtype = Some(o.dtype());
                device = Some(o.device());
            } else if a.extract::<bool>().is_ok() {
                // PyTorch's positional `non_blocking` / `copy` flags: nothing to do here.
            } else {
                device = Some(crate::creation::parse_device(&a.str()?.to_string())?);
            }
        }
        let t = slf.get().get();
        let moved = match device {
            Some(d) if d != t.device() => {
                if t.is_global() {
                    return Err(PyValueError::new_err(format!(
                        "to(): a global tensor moves to another device with to_global (a \
                         placement of type {d}), not to()"
                    )));
                }
                let t = t.clone();
                Some(op(py, false, move || t.to_device(d))?.get())
            }
            _ => None,
        };
        let t = moved.clone().unwrap_or(t);
        let cast = match dtype {
            Some(d) if d != t.dtype() => Some(op(py, t.is_global(), move || t.to_dtype(d))?),
            _ => None,
        };
        match (cast, moved) {
            (Some(c), _) => Py::new(py, c),
            (None, Some(m)) => Py::new(py, PyTensor::new(m)),
            (None, None) if copy => Py::new(py, slf.get().clone_tensor(py)?),
            (None, None) => Ok(slf.clone().unbind()),
        }
    }

    /// `x.cuda()`: `x.to("cuda")`, as OneFlow's and PyTorch's (the seeds write
    /// `flow.randn(2, 5).cuda()`); a typed error where this process has no CUDA device.
    #[pyo3(signature = (device = None, non_blocking = false))]
    fn cuda(
        slf: &Bound<'_, Self>,
        device: Option<&Bound<'_, PyAny>>,
        non_blocking: bool,
    ) -> PyResult<Py<PyTensor>> {
        let _ = (device, non_blocking);
        let args = PyTuple::new(slf.py(), ["cuda"])?;
        Self::to(slf, &args, None, None, false, false)
    }

    /// The tensor as float32.
    fn float(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.cast(py, DType::F32)
    }

    /// The tensor as float64.
    fn double(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.cast(py, DType::F64)
    }

    /// The tensor as float16.
    fn half(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.cast(py, DType::F16)
    }

    /// The tensor as bfloat16.
    fn bfloat16(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.cast(py, DType::BF16)
    }

    /// The tensor as int64.
    fn long(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.cast(py, DType::I64)
    }

    /// The tensor as int32.
    fn int(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.cast(py, DType::I32)
    }

    /// The tensor as bool (non-zero is true).
    fn bool(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.cast(py, DType::Bool)
    }

    /// Python's identity hash (`==` is elementwise, so tensors hash as objects, as in PyTorch).
    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }
}

impl PyTensor {
    fn cast(&self, py: Python<'_>, dtype: DType) -> PyResult<PyTensor> {
        let t = self.get();
        op(py, t.is_global(), move || t.to_dtype(dtype))
    }

    fn arg_reduce(
        &self,
        py: Python<'_>,
        dim: Option<isize>,
        keepdim: bool,
        largest: bool,
    ) -> PyResult<PyTensor> {
        let t = self.get();
        if t.dtype() == DType::Bool {
            // as PyTorch (x.max(dim) still takes Bool)
            let name = if largest { "argmax" } else { "argmin" };
            return Err(crate::error::to_py(gflow::Error::InvalidArgument {
                op: name,
                reason: format!("{name}(): does not support bool input"),
            }));
        }
        // Without a dim: of the flattened tensor, and with keepdim every dim kept as 1, as
        // PyTorch's.
        let (d, flat, kept) = match dim {
            Some(d) => (self::dim(d, t.ndim())?, false, keepdim),
            None => (0, true, false),
        };
        let keep: Option<Vec<usize>> = (flat && keepdim).then(|| vec![1; t.ndim()]);
        op(py, t.is_global(), move || {
            let x = if flat { t.reshape(&[t.numel()])? } else { t };
            let i = along(&x, |x| {
                if largest {
                    x.argmax(d, kept)
                } else {
                    x.argmin(d, kept)
                }
            })?;
            match keep {
                Some(shape) => i.reshape(&shape),
                None => Ok(i),
            }
        })
    }
}

//! `x[key]`: PyTorch's indexing with integers, slices (positive steps), `None`, `...` and one
//! 1-D integer index (a list, a NumPy array or an int64/int32 tensor), or a Bool mask; and
//! `x[key] = value` (in place, as the in-place operators). Each step is one
//! differentiable gflow operator (`narrow`, `squeeze`, `unsqueeze`, `index_select`), so indexing
//! works on local and global tensors alike (a global tensor keeps its placement, every rank
//! calls it) and gradients flow back to the indexed tensor.

use gflow::{DType, NdSbp, Target, Tensor};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyFloat, PyList, PySlice, PyTuple};

use crate::error::{Also, index_error, to_py};
use std::sync::Arc;

use crate::tensor::{PyTensor, ReadOut, WriteBack, op, to_numpy};

/// One operator of an indexing expression, on the dims of the tensor as it is by then.
#[derive(Clone)]
enum Step {
    /// A new dim of size 1 at this position (`None`).
    Unsqueeze(usize),
    /// Element `index` of `dim`, the dim dropped (an integer).
    Pick(usize, usize),
    /// `len` elements of `dim` from `start` (a slice of step 1).
    Narrow(usize, usize, usize),
    /// These entries of `dim` (a strided slice, or an index list).
    Take(usize, Vec<i64>),
}

/// `index` (negative counts from the end) into a dim of size `size`.
fn wrap(index: i64, size: usize) -> PyResult<usize> {
    let n = size as i64;
    let i = if index < 0 { index + n } else { index };
    if (0..n).contains(&i) {
        Ok(i as usize)
    } else {
        Err(to_py(gflow::Error::IndexOutOfRange {
            op: "[]",
            index,
            size,
        }))
    }
}

/// The integer entries of a list, a NumPy array or a tensor used as an index (`None`: `item`
/// is none of these); a 0-d one comes back as `Err(value)` (it indexes as an integer).
fn index_list(item: &Bound<'_, PyAny>) -> PyResult<Option<Result<Vec<i64>, i64>>> {
    let py = item.py();
    let array = if let Ok(t) = item.cast::<PyTensor>() {
        let t = t.get().get();
        if !matches!(t.dtype(), DType::I64 | DType::I32) {
            return Err(PyTypeError::new_err(format!(
                "a tensor used as an index must be int64 or int32, this one is {:?} (boolean \
                 masks are not supported: their result's shape depends on the values)",
                t.dtype()
            )));
        }
        to_numpy(py, &t)?
    } else if item.is_instance_of::<PyList>()
        || item.is_instance(&py.import("numpy")?.getattr("ndarray")?)?
    {
        py.import("numpy")?.call_method1("asarray", (item,))?
    } else {
        return Ok(None);
    };
    let kind: String = array.getattr("dtype")?.getattr("kind")?.extract()?;
    let ndim: usize = array.getattr("ndim")?.extract()?;
    let size: usize = array.getattr("size")?.extract()?;
    if !(kind == "i" || kind == "u" || size == 0) || ndim > 1 {
        return Err(PyTypeError::new_err(format!(
            "an index list must be 1-D integers, got a {ndim}-D array of NumPy kind {kind:?}"
        )));
    }
    let values = array.call_method1("astype", ("int64",))?;
    Ok(Some(if ndim == 0 {
        Err(values.call_method0("item")?.extract()?)
    } else {
        Ok(values.call_method0("tolist")?.extract()?)
    }))
}

/// An index item that is an integer (a Python or NumPy one), not a tensor: a tensor (an
/// integer by `__index__` too) indexes as a tensor, a 1-D one keeping its dim.
fn plain_int(item: &Bound<'_, PyAny>) -> Option<i64> {
    if item.is_instance_of::<PyTensor>() {
        return None;
    }
    item.extract().ok()
}

/// The operators of `x[key]` for a tensor of `shape`, and whether the result is a view of `x`
/// (PyTorch's basic indexing: no index list, whose result is a copy).
fn plan(key: &Bound<'_, PyAny>, shape: &[usize]) -> PyResult<(Vec<Step>, bool)> {
    let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    let is_ellipsis = |i: &Bound<'_, PyAny>| i.is_instance_of::<PyEllipsis>();
    if items.iter().filter(|i| is_ellipsis(i)).count() > 1 {
        return Err(index_error(
            "an index can only have a single ellipsis ('...')",
        ));
    }
    let consumed = items
        .iter()
        .filter(|i| !i.is_none() && !is_ellipsis(i))
        .count();
    if consumed > shape.len() {
        return Err(index_error(format!(
            "too many indices for a tensor of dimension {} ({consumed} given)",
            shape.len()
        )));
    }
    let mut shape = shape.to_vec();
    let (mut d, mut used, mut lists) = (0, 0, 0);
    let mut steps = vec![];
    for item in &items {
        if item.is_none() {
            steps.push(Step::Unsqueeze(d));
            shape.insert(d, 1);
            d += 1;
        } else if is_ellipsis(item) {
            // The dims that the items after it do not use.
            d = shape.len() - (consumed - used);
        } else if let Ok(s) = item.cast::<PySlice>() {
            used += 1;
            let n = shape[d];
            let ind = s.indices(n as isize)?;
            if ind.step <= 0 {
                return Err(PyValueError::new_err(
                    "slice step must be greater than zero (as PyTorch)",
                ));
            }
            let (start, len) = (ind.start as usize, ind.slicelength);
            if ind.step == 1 {
                if len != n {
                    steps.push(Step::Narrow(d, start, len));
                }
            } else {
                let picks = (0..len).map(|k| (start + k * ind.step as usize) as i64);
                steps.push(Step::Take(d, picks.collect()));
            }
            shape[d] = len;
            d += 1;
        } else if item.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(
                "a bool cannot index a tensor (boolean masks are not supported)",
            ));
        } else if item.is_instance_of::<PyFloat>() {
            return Err(Also::IndexType.err(
                "only integers, slices (`:`), ellipsis (`...`), None and integer or bool tensors \
                 are valid indices, not float",
            ));
        } else if let Some(i) = plain_int(item) {
            used += 1;
            steps.push(Step::Pick(d, wrap(i, shape[d])?));
            shape.remove(d);
        } else {
            used += 1;
            match index_list(item)? {
                Some(Err(i)) => {
                    steps.push(Step::Pick(d, wrap(i, shape[d])?));
                    shape.remove(d);
                }
                Some(Ok(list)) => {
                    lists += 1;
                    if lists > 1 {
                        return Err(PyTypeError::new_err(
                            "only one index list or index tensor per indexing expression is \
                             supported",
                        ));
                    }
                    let n = shape[d];
                    let list = list
                        .into_iter()
                        .map(|i| wrap(i, n).map(|i| i as i64))
                        .collect::<PyResult<Vec<_>>>()?;
                    shape[d] = list.len();
                    steps.push(Step::Take(d, list));
                    d += 1;
                }
                None => {
                    return Err(PyTypeError::new_err(format!(
                        "a tensor is indexed by integers, slices, None, ..., or integer lists \
                         and tensors, not {}",
                        item.get_type().name()?
                    )));
                }
            }
        }
    }
    Ok((steps, lists == 0))
}

/// Applies `steps` to `t`.
fn apply(t: Tensor, steps: Vec<Step>) -> gflow::Result<Tensor> {
    let mut t = t;
    for step in steps {
        t = match step {
            Step::Unsqueeze(d) => t.unsqueeze(d)?,
            Step::Pick(d, i) => t.narrow(d, i, 1)?.squeeze(d)?,
            Step::Narrow(d, start, len) => t.narrow(d, start, len)?,
            Step::Take(d, picks) => {
                let n = picks.len();
                let target = match t.placement() {
                    Some(p) => Target::Global(p.clone(), NdSbp::broadcast(p.ndim())),
                    None => Target::Local(t.device()),
                };
                t.index_select(d, &Tensor::from_vec(picks, &[n], target)?)?
            }
        };
    }
    Ok(t)
}

/// Where index tensors of `t` go: `t`'s device, or its placement, broadcast.
fn index_target(t: &Tensor) -> Target {
    match t.placement() {
        Some(p) => Target::Global(p.clone(), NdSbp::broadcast(p.ndim())),
        None => Target::Local(t.device()),
    }
}

/// The key as a Bool mask, when it is one: a Bool tensor or a NumPy bool array (at least 1-D).
fn bool_mask(py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<Tensor>> {
    let mask = if let Ok(t) = key.cast::<PyTensor>() {
        t.get().get()
    } else if key.is_instance(&py.import("numpy")?.getattr("ndarray")?)?
        && key.getattr("dtype")?.getattr("kind")?.extract::<String>()? == "b"
    {
        crate::creation::from_data(py, key, None, None, None)?
    } else {
        return Ok(None);
    };
    Ok((mask.dtype() == DType::Bool && mask.ndim() > 0).then_some(mask))
}

/// A mask must have the shape of `t`'s leading dims (PyTorch's `IndexError` otherwise).
fn check_mask(mask: &Tensor, t: &Tensor) -> PyResult<()> {
    if mask.ndim() <= t.ndim() && mask.shape() == &t.shape()[..mask.ndim()] {
        return Ok(());
    }
    Err(index_error(format!(
        "the shape of the mask {:?} does not match the shape of the indexed tensor {:?}",
        mask.shape(),
        t.shape()
    )))
}

/// The (row-major) positions of `mask`'s true elements over `t`'s leading dims: `x[mask]`'s
/// rows, whose number depends on the values (read on the host; for a global mask a
/// collective, as `numpy()`).
fn mask_rows(py: Python<'_>, mask: &Tensor, t: &Tensor) -> PyResult<Vec<i64>> {
    check_mask(mask, t)?;
    let host = to_numpy(py, mask)?;
    host.call_method0("ravel")?
        .call_method0("nonzero")?
        .get_item(0)?
        .call_method1("astype", ("int64",))?
        .call_method0("tolist")?
        .extract()
}

/// `t` with `v` in place of its elements `start..start + v.shape()[dim]` of `dim` (a narrowed
/// view's write-back).
pub(crate) fn assign_narrow(
    t: &Tensor,
    dim: usize,
    start: usize,
    v: &Tensor,
) -> gflow::Result<Tensor> {
    assign_at(t, vec![Step::Narrow(dim, start, v.shape()[dim])], v)
}

/// `t` with the elements `steps` select replaced by `v` (broadcast to the selection): the
/// selection's flat positions (`steps` applied to an I64 range) scatter `v` and a hit mask
/// into flat buffers, and `where` picks between them and `t`.
fn assign_at(t: &Tensor, steps: Vec<Step>, v: &Tensor) -> gflow::Result<Tensor> {
    let target = index_target(t);
    let n = t.numel();
    let sel = apply(
        Tensor::arange_dtype(n, DType::I64, target.clone())?.reshape(t.shape())?,
        steps,
    )?;
    let k = sel.numel();
    if k == 0 {
        return t.where_cond(t, t);
    }
    // Bool has no scatter-add: work in I64 and cast back
    let work = if t.dtype() == DType::Bool {
        DType::I64
    } else {
        t.dtype()
    };
    let mut v = v.to_dtype(work)?;
    if v.shape() != sel.shape() {
        if v.ndim() < sel.ndim() {
            let mut s = vec![1; sel.ndim() - v.ndim()];
            s.extend_from_slice(v.shape());
            v = v.reshape(&s)?;
        }
        v = v.expand(sel.shape())?;
    }
    let v = match (t.placement(), v.is_local()) {
        (Some(p), true) => v.to_global(p, NdSbp::broadcast(p.ndim()))?,
        _ => v,
    };
    let at = sel.reshape(&[k])?;
    let ones = Tensor::full_dtype(&[k], 1.0, DType::I64, target.clone())?;
    let hit = Tensor::full_dtype(&[n], 0.0, DType::I64, target.clone())?
        .scatter_add(0, &at, &ones)?
        .to_dtype(DType::Bool)?;
    let vals =
        Tensor::full_dtype(&[n], 0.0, work, target)?.scatter_add(0, &at, &v.reshape(&[k])?)?;
    hit.where_cond(&vals, &t.to_dtype(work)?.reshape(&[n])?)?
        .reshape(t.shape())?
        .to_dtype(t.dtype())
}

#[pymethods]
impl PyTensor {
    /// `x[key]`: integers (negative count from the end; out of range is
    /// `flow.IndexOutOfRangeError`, an `IndexError`), slices with positive steps, `None`, `...`,
    /// and one 1-D integer list / array / tensor; or a Bool mask (tensor or NumPy array) of the
    /// leading dims, selecting their true positions' rows (their number read on the host).
    /// Differentiable; on a global tensor every rank calls it.
    fn __getitem__<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let (py, t) = (slf.py(), slf.get().get());
        if let Some(mask) = bool_mask(py, key)? {
            let rows = mask_rows(py, &mask, &t)?;
            let lead = mask.ndim();
            let out = op(py, t.is_global(), move || {
                let mut shape = vec![t.shape()[..lead].iter().product()];
                shape.extend_from_slice(&t.shape()[lead..]);
                let n = rows.len();
                t.reshape(&shape)?
                    .index_select(0, &Tensor::from_vec(rows, &[n], index_target(&t))?)
            })?;
            return Bound::new(py, out);
        }
        let (steps, view) = plan(key, t.shape())?;
        let out = op(py, t.is_global(), {
            let steps = steps.clone();
            move || apply(t, steps)
        })?;
        if !view {
            return Bound::new(py, out);
        }
        // basic indexing gives a view: an in-place change of it reaches `x` and one of `x`
        // reaches it (as PyTorch's)
        let read_steps = steps.clone();
        let back: WriteBack = Arc::new(move |b, v| assign_at(b, steps.clone(), v));
        let read: ReadOut = Arc::new(move |b| apply(b.clone(), read_steps.clone()));
        PyTensor::viewing(out, slf, back, read)
    }

    /// `x[key] = value` in place (as the in-place operators: the same tensor, its gradient
    /// history extended): `key` as in `x[key]` (an index list without repeats), or a Bool mask
    /// of `x`'s leading dims; `value` a number or a tensor broadcasting to the selection, cast
    /// to `x`'s dtype. Differentiable in `value` and in the rest of `x`.
    fn __setitem__(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let py = slf.py();
        let t = slf.get().get();
        let v = crate::ops::operand(py, &t, value)?;
        let global = v.is_global();
        if let Some(mask) = bool_mask(py, key)? {
            check_mask(&mask, &t)?;
            return Self::update(slf, "__setitem__", global, move |t| {
                let mut shape = mask.shape().to_vec();
                shape.resize(t.ndim(), 1);
                let m = mask.reshape(&shape)?;
                let m = match (t.placement(), m.is_local()) {
                    (Some(p), true) => m.to_global(p, NdSbp::broadcast(p.ndim()))?,
                    _ => m,
                };
                m.where_cond(&v.to_dtype(t.dtype())?, t)
            })
            .map(drop);
        }
        let (steps, _) = plan(key, t.shape())?;
        for step in &steps {
            if let Step::Take(_, picks) = step {
                let mut seen = std::collections::HashSet::new();
                if !picks.iter().all(|p| seen.insert(*p)) {
                    return Err(PyValueError::new_err(
                        "an index list with repeated entries cannot be assigned to (which \
                         value would win is undefined)",
                    ));
                }
            }
        }
        Self::update(slf, "__setitem__", global, move |t| assign_at(t, steps, &v)).map(drop)
    }

    /// Iterates over the first dim (`x[0]`, `x[1]`, ...); a 0-d tensor is not iterable.
    fn __iter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let t = slf.get().get();
        let Some(&n) = t.shape().first() else {
            return Err(PyTypeError::new_err("iteration over a 0-d tensor"));
        };
        let rows = (0..n)
            .map(|i| {
                op(py, t.is_global(), || {
                    apply(t.clone(), vec![Step::Pick(0, i)])
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)?
            .into_any()
            .try_iter()
            .map(Bound::into_any)
    }
}

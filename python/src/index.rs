//! `x[key]`: PyTorch's indexing with integers, slices (positive steps), `None`, `...` and one
//! 1-D integer index (a list, a NumPy array or an int64/int32 tensor). Each step is one
//! differentiable gflow operator (`narrow`, `squeeze`, `unsqueeze`, `index_select`), so indexing
//! works on local and global tensors alike (a global tensor keeps its placement, every rank
//! calls it) and gradients flow back to the indexed tensor.

use gflow::{DType, NdSbp, Target, Tensor};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyList, PySlice, PyTuple};

use crate::error::{index_error, to_py};
use crate::tensor::{PyTensor, op, to_numpy};

/// One operator of an indexing expression, on the dims of the tensor as it is by then.
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

/// The operators of `x[key]` for a tensor of `shape`.
fn plan(key: &Bound<'_, PyAny>, shape: &[usize]) -> PyResult<Vec<Step>> {
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
        } else if let Ok(i) = item.extract::<i64>() {
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
    Ok(steps)
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

#[pymethods]
impl PyTensor {
    /// `x[key]`: integers (negative count from the end; out of range is
    /// `flow.IndexOutOfRangeError`, an `IndexError`), slices with positive steps, `None`, `...`,
    /// and one 1-D integer list / array / tensor. Differentiable; on a global tensor every rank
    /// calls it.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let t = self.get();
        let steps = plan(key, t.shape())?;
        op(py, t.is_global(), move || apply(t, steps))
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

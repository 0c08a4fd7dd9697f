//! `flow.placement` and `flow.sbp.*`: Python faces of [`gflow::Placement`] and [`gflow::Sbp`],
//! and the parsing of the forms OneFlow accepts (nested rank lists, `{node: ranks}`, ranges, one
//! SBP or a tuple of them).

use gflow::{NdSbp, Placement, Ranks, Sbp};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::error::IntoPy;

/// A device type and an n-d array of ranks: `flow.placement("cpu", [0, 1])`,
/// `flow.placement("cpu", [[0, 1], [2, 3]])`, `flow.placement("cpu", {0: range(2)})`.
#[pyclass(name = "placement", module = "gflow", frozen, eq, hash, from_py_object)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyPlacement {
    pub inner: Placement,
}

/// Flattens a (nested) sequence of ranks, returning the flat ranks and the array's shape.
fn nested(obj: &Bound<'_, PyAny>, out: &mut Vec<usize>) -> PyResult<Vec<usize>> {
    if let Ok(r) = obj.extract::<usize>() {
        out.push(r);
        return Ok(vec![]);
    }
    if let Ok(r) = obj.extract::<i64>() {
        return Err(crate::error::PlacementError::new_err(format!(
            "a placement's ranks are non-negative integers, got {r}"
        )));
    }
    let mut shape: Option<Vec<usize>> = None;
    let mut n = 0;
    for (row, item) in obj.try_iter()?.enumerate() {
        let s = nested(&item?, out)?;
        match &shape {
            None => shape = Some(s),
            Some(first) if *first != s => {
                return Err(crate::error::to_py(gflow::Error::RaggedRanks {
                    row,
                    expected: first.first().copied().unwrap_or(1),
                    got: s.first().copied().unwrap_or(1),
                }));
            }
            Some(_) => {}
        }
        n += 1;
    }
    let mut full = vec![n];
    full.extend(shape.unwrap_or_default());
    Ok(full)
}

/// The ranks of this node's process group: `LOCAL_WORLD_SIZE` (set by launchers), else the world.
fn procs_per_node() -> usize {
    std::env::var("LOCAL_WORLD_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| gflow::init().map_or(1, |e| e.world_size()))
}

/// The [`Ranks`] of any rank form OneFlow accepts.
pub fn parse_ranks(obj: &Bound<'_, PyAny>) -> PyResult<Ranks> {
    let mut flat = vec![];
    if let Ok(d) = obj.cast::<PyDict>() {
        // OneFlow's `{node: [device, ...]}`: rank = node * processes per node + device.
        let per_node = procs_per_node();
        let mut items: Vec<(usize, Bound<'_, PyAny>)> = d
            .iter()
            .map(|(k, v)| Ok((k.extract::<usize>()?, v)))
            .collect::<PyResult<_>>()?;
        items.sort_by_key(|(k, _)| *k);
        for (node, devices) in items {
            let mut local = vec![];
            nested(&devices, &mut local)?;
            flat.extend(local.into_iter().map(|d| node * per_node + d));
        }
        return Ranks::flat(flat).py();
    }
    let shape = nested(obj, &mut flat)?;
    let shape = if shape.is_empty() { vec![1] } else { shape };
    Ranks::nd(shape, flat).py()
}

#[pymethods]
impl PyPlacement {
    #[new]
    #[pyo3(signature = (r#type, ranks))]
    fn new(r#type: &str, ranks: &Bound<'_, PyAny>) -> PyResult<Self> {
        let ranks = parse_ranks(ranks)?;
        Ok(PyPlacement {
            inner: Placement::new(r#type, ranks).py()?,
        })
    }

    /// Every rank of the job on one axis, `flow.placement.all("cpu")` (OneFlow's): the placement
    /// of a tensor spread over the whole world.
    #[staticmethod]
    fn all(device_type: &str) -> PyResult<Self> {
        let world = gflow::init().py()?.world_size();
        Ok(PyPlacement {
            inner: Placement::new(device_type, (0..world).collect::<Vec<_>>()).py()?,
        })
    }

    /// The device type: `"cpu"`, `"cuda"`, `"wgpu"` or `"gpu"`.
    #[getter]
    fn r#type(&self) -> &'static str {
        self.inner.device_type().as_str()
    }

    /// The ranks as nested lists of the placement's shape.
    #[getter]
    fn ranks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let arr =
            numpy::PyArray1::from_vec(py, self.inner.ranks().iter().map(|&r| r as i64).collect());
        arr.call_method1("reshape", (self.inner.hierarchy().to_vec(),))
    }

    /// The shape of the rank array.
    #[getter]
    fn hierarchy(&self) -> Vec<usize> {
        self.inner.hierarchy().to_vec()
    }

    /// Whether `rank` is in the placement.
    fn contains(&self, rank: usize) -> bool {
        self.inner.contains(rank)
    }

    fn __repr__(&self) -> String {
        format!(
            "flow.placement(type=\"{}\", ranks={})",
            self.inner.device_type().as_str(),
            nested_repr(self.inner.ranks(), self.inner.hierarchy())
        )
    }
}

fn nested_repr(flat: &[usize], shape: &[usize]) -> String {
    match shape {
        [] | [_] => format!("{flat:?}"),
        [n, rest @ ..] => {
            let step = flat.len() / (*n).max(1);
            let rows: Vec<String> = flat
                .chunks(step.max(1))
                .map(|c| nested_repr(c, rest))
                .collect();
            format!("[{}]", rows.join(", "))
        }
    }
}

/// One SBP: `flow.sbp.split(0)`, `flow.sbp.broadcast`, `flow.sbp.partial_sum`, ...
#[pyclass(name = "sbp", module = "gflow.sbp", frozen, eq, hash, from_py_object)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PySbp {
    pub inner: Sbp,
}

#[pymethods]
impl PySbp {
    /// OneFlow also spells `flow.sbp.broadcast()`: calling an SBP gives itself.
    fn __call__(&self) -> Self {
        *self
    }

    fn __repr__(&self) -> String {
        format!("flow.sbp.{}", self.inner)
    }

    /// The split dimension (`None` unless a split).
    #[getter]
    fn dim(&self) -> Option<usize> {
        self.inner.split_dim()
    }
}

/// `flow.sbp.split(dim)`.
#[pyfunction]
#[pyo3(signature = (dim))]
pub fn split(dim: i64) -> PyResult<PySbp> {
    let dim = usize::try_from(dim).map_err(|_| {
        crate::error::SbpError::new_err(format!(
            "Split axis must not be negative, but got {dim}! (flow.sbp.split takes the \
             tensor's dim counted from 0)"
        ))
    })?;
    Ok(PySbp {
        inner: Sbp::split(dim),
    })
}

/// The SBP constants, for `flow.sbp`.
pub fn constants() -> [(&'static str, PySbp); 4] {
    [
        ("broadcast", Sbp::broadcast()),
        ("partial_sum", Sbp::partial_sum()),
        ("partial_min", Sbp::partial_min()),
        ("partial_max", Sbp::partial_max()),
    ]
    .map(|(n, s)| (n, PySbp { inner: s }))
}

/// One SBP, or a tuple/list of them (one per placement axis).
pub fn parse_sbp(obj: &Bound<'_, PyAny>) -> PyResult<NdSbp> {
    if let Ok(s) = obj.cast::<PySbp>() {
        return Ok(s.get().inner.into());
    }
    let mut v = vec![];
    for item in obj.try_iter().map_err(|_| not_sbp(obj))? {
        let item = item?;
        let s = item.cast::<PySbp>().map_err(|_| not_sbp(&item))?;
        v.push(s.get().inner);
    }
    Ok(v.into())
}

fn not_sbp(obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "sbp must be a flow.sbp value or a tuple of them, got {}",
        obj.repr().map_or_else(|_| "?".into(), |r| r.to_string())
    ))
}

/// An [`NdSbp`] as the tuple OneFlow gives (`x.sbp`).
pub fn sbp_tuple<'py>(py: Python<'py>, sbp: &NdSbp) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, sbp.as_slice().iter().map(|&s| PySbp { inner: s }))
}

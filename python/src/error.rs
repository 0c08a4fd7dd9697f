//! Every `gflow::Error` becomes a Python exception with the same message: `gflow.Error` and one
//! subclass per family of mistakes, so `except flow.PlacementError` catches what it names and
//! `except flow.Error` catches them all. `gflow.Error` is a `RuntimeError`, as the errors
//! PyTorch (and OneFlow) raise for the same mistakes, so `except RuntimeError` code ported from
//! them keeps working. Nothing a user passes crashes the interpreter.

use pyo3::exceptions::{PyIndexError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::{PyErr, create_exception};

create_exception!(
    gflow,
    Error,
    PyRuntimeError,
    "Base class of every error gflow reports (a `RuntimeError`, as PyTorch's)."
);
create_exception!(
    gflow,
    PlacementError,
    Error,
    "A malformed placement, or a rank outside one."
);
create_exception!(
    gflow,
    SbpError,
    Error,
    "An SBP that does not fit the placement or the shape."
);
create_exception!(
    gflow,
    ShapeError,
    Error,
    "Shapes that an operation cannot combine."
);
create_exception!(
    gflow,
    DTypeError,
    Error,
    "An element type an operation does not take."
);
create_exception!(
    gflow,
    DeviceError,
    Error,
    "A device that is unavailable or does not match."
);
create_exception!(
    gflow,
    CommunicationError,
    Error,
    "A collective failed (a peer died, timed out, or desynchronised)."
);
create_exception!(
    gflow,
    EnvironmentError,
    Error,
    "The job named by the environment cannot be joined."
);
create_exception!(
    gflow,
    CheckpointError,
    Error,
    "A checkpoint cannot be written or read."
);
create_exception!(
    gflow,
    InvalidArgumentError,
    Error,
    "An argument an operation cannot use."
);

/// A gflow exception class that is also an `IndexError` (bases `base` and `IndexError`), so
/// `except IndexError` works as in PyTorch; Python builds it (a class with two bases), once.
fn with_index_error<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    (name, doc): (&str, &str),
    base: Bound<'py, PyType>,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        let bases = PyTuple::new(py, [base, py.get_type::<PyIndexError>()])?;
        let attrs = PyDict::new(py);
        attrs.set_item("__doc__", doc)?;
        attrs.set_item("__module__", "gflow")?;
        let t = py.get_type::<PyType>().call1((name, bases, attrs))?;
        Ok::<_, PyErr>(t.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.bind(py))
}

/// `flow.IndexOutOfRangeError`: an index outside the indexed dimension (a `flow.Error`; also
/// an `IndexError`, so iteration by `x[i]` works as in PyTorch).
fn index_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let what = (
        "IndexOutOfRangeError",
        "An index outside the indexed dimension.",
    );
    with_index_error(py, &TYPE, what, py.get_type::<Error>())
}

/// `flow.DimOutOfRangeError`: a dimension outside the tensor's (a `flow.ShapeError`; also an
/// `IndexError`, which PyTorch raises for it).
fn dim_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let what = (
        "DimOutOfRangeError",
        "A dimension outside the tensor's dimensions.",
    );
    with_index_error(py, &TYPE, what, py.get_type::<ShapeError>())
}

/// An exception of a class built by [`with_index_error`] with `msg`.
fn raise(t: PyResult<&Bound<'_, PyType>>, msg: String) -> PyErr {
    match t {
        Ok(t) => PyErr::from_type(t.clone(), msg),
        Err(e) => e,
    }
}

/// A `flow.IndexOutOfRangeError` with `msg`.
pub fn index_error(msg: impl Into<String>) -> PyErr {
    Python::attach(|py| raise(index_error_type(py), msg.into()))
}

/// The Python exception of a gflow error: its family's class, the error's own message.
pub fn to_py(e: gflow::Error) -> PyErr {
    use gflow::Error as E;
    let msg = e.to_string();
    match e {
        E::EmptyPlacement
        | E::DuplicateRank { .. }
        | E::RaggedRanks { .. }
        | E::RanksShape { .. }
        | E::UnknownDeviceType { .. }
        | E::RankOutOfWorld { .. }
        | E::NotInPlacement { .. }
        | E::PlacementMismatch { .. } => PlacementError::new_err(msg),
        E::SbpAxesMismatch { .. } | E::SplitDimOutOfRange { .. } => SbpError::new_err(msg),
        E::DataShapeMismatch { .. }
        | E::ShapeOverflow { .. }
        | E::ShapeMismatch { .. }
        | E::LocalShapeMismatch { .. } => ShapeError::new_err(msg),
        E::DimOutOfRange { .. } => Python::attach(|py| raise(dim_error_type(py), msg)),
        E::DTypeMismatch { .. } | E::UnsupportedDType { .. } => DTypeError::new_err(msg),
        E::BackendUnavailable { .. } | E::Device { .. } | E::DeviceMismatch { .. } => {
            DeviceError::new_err(msg)
        }
        E::Comm(_) | E::RankPanicked { .. } => CommunicationError::new_err(msg),
        E::Environment { .. } => EnvironmentError::new_err(msg),
        E::Checkpoint { .. } => CheckpointError::new_err(msg),
        E::IndexOutOfRange { .. } => index_error(msg),
        E::InvalidArgument { .. } | E::WrongKind { .. } => InvalidArgumentError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// `Result<T, gflow::Error>` to `PyResult<T>`.
pub trait IntoPy<T> {
    /// The same value, or the error as its Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for gflow::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("PlacementError", py.get_type::<PlacementError>())?;
    m.add("SbpError", py.get_type::<SbpError>())?;
    m.add("ShapeError", py.get_type::<ShapeError>())?;
    m.add("DTypeError", py.get_type::<DTypeError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("CommunicationError", py.get_type::<CommunicationError>())?;
    m.add("EnvironmentError", py.get_type::<EnvironmentError>())?;
    m.add("CheckpointError", py.get_type::<CheckpointError>())?;
    m.add("IndexOutOfRangeError", index_error_type(py)?)?;
    m.add("DimOutOfRangeError", dim_error_type(py)?)?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    Ok(())
}

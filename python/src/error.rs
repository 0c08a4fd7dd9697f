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

/// A gflow exception class with several bases (a gflow class and Python's built-in ones, such
/// as `IndexError`), so `except` on any of them works as in PyTorch; Python builds it (a class
/// with several bases), once.
fn with_bases<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    (name, doc): (&str, &str),
    bases: Vec<Bound<'py, PyType>>,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        let bases = PyTuple::new(py, bases)?;
        let attrs = PyDict::new(py);
        attrs.set_item("__doc__", doc)?;
        attrs.set_item("__module__", "gflow")?;
        let t = py.get_type::<PyType>().call1((name, bases, attrs))?;
        Ok::<_, PyErr>(t.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.bind(py))
}

/// A gflow exception class that is also an `IndexError` (bases `base` and `IndexError`).
fn with_index_error<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    what: (&str, &str),
    base: Bound<'py, PyType>,
) -> PyResult<&'py Bound<'py, PyType>> {
    with_bases(py, cell, what, vec![base, py.get_type::<PyIndexError>()])
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

/// The exception classes of gflow that also are some of Python's built-in ones: PyTorch's type
/// for the mistake, and the type gflow raised for it before (so neither `except` breaks).
#[derive(Clone, Copy, Debug)]
pub enum Also {
    /// `flow.IndexShapeError`: an index tensor of a shape the operation cannot use (a
    /// `flow.ShapeError`; also an `IndexError`, which PyTorch raises for it).
    IndexShape,
    /// `flow.InvalidValueError`: an argument value an operation cannot use (a
    /// `flow.InvalidArgumentError`, so a `RuntimeError` as PyTorch's; also a `ValueError`).
    InvalidValue,
    /// `flow.IndexTypeError`: an index of a type that cannot index a tensor (an `IndexError`,
    /// as PyTorch's; also a `TypeError`).
    IndexType,
    /// `flow.DTypeNotImplementedError`: an operation without a kernel for the dtype (a
    /// `flow.DTypeError`; also a `NotImplementedError`, as PyTorch's, and a `TypeError`).
    DTypeNotImplemented,
}

impl Also {
    /// Every such class, in registration order.
    const ALL: [Also; 4] = [
        Also::IndexShape,
        Also::InvalidValue,
        Also::IndexType,
        Also::DTypeNotImplemented,
    ];

    /// The class's name in `gflow`.
    fn name(self) -> &'static str {
        match self {
            Also::IndexShape => "IndexShapeError",
            Also::InvalidValue => "InvalidValueError",
            Also::IndexType => "IndexTypeError",
            Also::DTypeNotImplemented => "DTypeNotImplementedError",
        }
    }

    /// The class (built once).
    fn class(self, py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
        use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
        static INDEX_SHAPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static INVALID_VALUE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static INDEX_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static DTYPE_NOT_IMPLEMENTED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        let (cell, doc, bases) = match self {
            Also::IndexShape => (
                &INDEX_SHAPE,
                "An index tensor of a shape the operation cannot use (also an IndexError).",
                vec![py.get_type::<ShapeError>(), py.get_type::<PyIndexError>()],
            ),
            Also::InvalidValue => (
                &INVALID_VALUE,
                "An argument value an operation cannot use (also a ValueError).",
                vec![
                    py.get_type::<InvalidArgumentError>(),
                    py.get_type::<PyValueError>(),
                ],
            ),
            Also::IndexType => (
                &INDEX_TYPE,
                "An index of a type that cannot index a tensor (an IndexError and a TypeError).",
                vec![py.get_type::<PyIndexError>(), py.get_type::<PyTypeError>()],
            ),
            Also::DTypeNotImplemented => (
                &DTYPE_NOT_IMPLEMENTED,
                "An operation without a kernel for the dtype (also a NotImplementedError and a \
                 TypeError).",
                vec![
                    py.get_type::<DTypeError>(),
                    py.get_type::<PyNotImplementedError>(),
                    py.get_type::<PyTypeError>(),
                ],
            ),
        };
        with_bases(py, cell, (self.name(), doc), bases)
    }

    /// An exception of this class with `msg`.
    pub fn err(self, msg: impl Into<String>) -> PyErr {
        Python::attach(|py| raise(self.class(py), msg.into()))
    }
}

/// An exception of a class built by [`with_bases`] with `msg`.
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
    for also in Also::ALL {
        m.add(also.name(), also.class(py)?)?;
    }
    Ok(())
}

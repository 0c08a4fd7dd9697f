//! `flow.Tensor`: a Python handle on a [`gflow::Tensor`] (local or global). The handle is
//! mutable in one way only: `t.data = other` makes it refer to other storage (what
//! `Module.to_global` does to parameters), so optimizers and modules holding the Python object
//! follow the conversion.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use gflow::{DType, Device, Tensor};
use numpy::PyArray1;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

use crate::error::IntoPy;
use crate::layout::{PyPlacement, sbp_tuple};

thread_local! {
    /// Depth of `with flow.no_grad():` blocks on this thread.
    static NO_GRAD: Cell<usize> = const { Cell::new(0) };
}

/// A local or global tensor.
#[pyclass(name = "Tensor", module = "gflow", subclass, frozen, weakref)]
pub struct PyTensor {
    inner: RwLock<Tensor>,
    /// The tensor whose `.grad` this handle was read from: an in-place operator on it gives
    /// that tensor a new gradient rather than writing into storage that backward may have
    /// shared between several leaves' gradients.
    grad_of: Option<Tensor>,
    /// A `.grad` handle follows that tensor's gradient (backward accumulating into it, an
    /// in-place operator on another handle of it) while live, as PyTorch's gradient, which
    /// accumulates in place; assigning `.grad` freezes it at its last value.
    live: AtomicBool,
    /// The live handle `.grad` returns (the same object each time, as PyTorch's), held weakly.
    grad_handle: Mutex<Option<Py<pyo3::types::PyWeakrefReference>>>,
    /// For a view (a basic index, `narrow`, `view`/`reshape`, a transpose or permutation): the
    /// tensor it was taken from, how its new value writes back there and how it reads itself
    /// from there, so that an in-place operator on the view changes that tensor and one on that
    /// tensor changes the view, as PyTorch's views do (gflow's storage has no strides: the view
    /// holds its own copy, kept in step through these).
    view_of: Option<View>,
    /// The views taken of this tensor, held weakly: refreshed after an in-place change of it.
    views: Mutex<Vec<Py<pyo3::types::PyWeakrefReference>>>,
}

/// A view's write-back: the base's new value from its current one and the view's new one.
pub type WriteBack = Arc<dyn Fn(&Tensor, &Tensor) -> gflow::Result<Tensor> + Send + Sync>;

/// A view's read: its value from its base's.
pub type ReadOut = Arc<dyn Fn(&Tensor) -> gflow::Result<Tensor> + Send + Sync>;

/// What ties a view to the tensor it was taken from (see [`PyTensor::viewing`]).
pub struct View {
    /// The tensor the view was taken from.
    pub base: Py<PyTensor>,
    /// The base's new value from its current one and the view's.
    pub back: WriteBack,
    /// The view's value from the base's.
    pub read: ReadOut,
}

impl PyTensor {
    /// Wraps a tensor.
    pub fn new(t: Tensor) -> PyTensor {
        PyTensor {
            inner: RwLock::new(t),
            grad_of: None,
            view_of: None,
            views: Mutex::default(),
            live: AtomicBool::new(false),
            grad_handle: Mutex::default(),
        }
    }

    /// `view` (a new tensor, `read(base)`) as a view of `base`: an in-place operator on it
    /// reaches `base` through `back`, and one on `base` reaches it through `read` (see
    /// [`PyTensor::view_of`]).
    pub fn viewing<'py>(
        view: PyTensor,
        base: &Bound<'py, PyTensor>,
        back: WriteBack,
        read: ReadOut,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let py = base.py();
        let v = Bound::new(
            py,
            PyTensor {
                inner: RwLock::new(view.get()),
                grad_of: None,
                view_of: Some(View {
                    base: base.clone().unbind(),
                    back,
                    read,
                }),
                views: Mutex::default(),
                live: AtomicBool::new(false),
                grad_handle: Mutex::default(),
            },
        )?;
        if base.get().get().is_global() {
            // a global base does not refresh its views (see `PyTensor::update`)
            return Ok(v);
        }
        let weak = pyo3::types::PyWeakrefReference::new(&v)?.unbind();
        let mut views = base.get().views.lock().unwrap_or_else(|p| p.into_inner());
        // drop the dead ones now and then, so a loop taking views keeps the list short
        if views.len() >= 32 && views.len().is_power_of_two() {
            views.retain(|w| w.bind(py).upgrade().is_some());
        }
        views.push(weak);
        Ok(v)
    }

    /// `out` as a view of `base` in another shape (`view`, `reshape`, `flatten`, `squeeze`,
    /// `unsqueeze`: the same elements): each reads and writes back by a reshape.
    pub fn reshaped_view<'py>(
        base: &Bound<'py, PyTensor>,
        out: PyTensor,
    ) -> PyResult<Bound<'py, PyTensor>> {
        let shape = out.get().shape().to_vec();
        PyTensor::viewing(
            out,
            base,
            Arc::new(|b, v| v.reshape(b.shape())),
            Arc::new(move |b| b.reshape(&shape)),
        )
    }

    /// The tensor this one is a view of, with its write-back and read (see
    /// [`PyTensor::viewing`]).
    pub fn view_of(&self) -> Option<&View> {
        self.view_of.as_ref()
    }

    /// The live views of this tensor (see [`PyTensor::viewing`]), the dead ones dropped.
    pub fn live_views<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyTensor>> {
        let mut views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        views.retain(|w| w.bind(py).upgrade().is_some());
        views
            .iter()
            .filter_map(|w| w.bind(py).upgrade()?.cast_into::<PyTensor>().ok())
            .collect()
    }

    /// The tensor whose gradient this live `.grad` handle is (see [`PyTensor::grad_of`]).
    pub fn grad_of(&self) -> Option<&Tensor> {
        self.grad_of
            .as_ref()
            .filter(|_| self.live.load(Ordering::Acquire))
    }

    /// The handle's tensor (a cheap clone); a live `.grad` handle's is that tensor's gradient
    /// now.
    pub fn get(&self) -> Tensor {
        if let Some(g) = self.grad_of().and_then(Tensor::grad) {
            return g;
        }
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops this `.grad` handle following its tensor's gradient: it keeps the last one.
    fn freeze(&self) {
        if self.live.load(Ordering::Acquire) {
            let now = self.get();
            self.set(now);
            self.live.store(false, Ordering::Release);
        }
    }

    /// Points this handle at `t`.
    pub fn set(&self, t: Tensor) {
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = t;
    }

    /// The value of a one-element tensor for `float(t)` and `int(t)` (a `ValueError` otherwise,
    /// as PyTorch's).
    fn scalar<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.get().numel() != 1 {
            return Err(PyValueError::new_err(
                "only one element tensors can be converted to Python scalars",
            ));
        }
        self.item(py)
    }
}

/// Runs one gflow operation from Python: without autograd recording inside `flow.no_grad()`,
/// and with the GIL released when `global` (a collective may wait on peers; other Python
/// threads run meanwhile, and the launcher's SIGTERM ends the process).
pub fn run<T: Send>(
    py: Python<'_>,
    global: bool,
    f: impl FnOnce() -> gflow::Result<T> + Send,
) -> PyResult<T> {
    let quiet = NO_GRAD.with(Cell::get) > 0;
    let call = move || if quiet { gflow::no_grad(f) } else { f() };
    if global { py.detach(call) } else { call() }.py()
}

/// [`run`] for an operation giving a tensor.
pub fn op(
    py: Python<'_>,
    global: bool,
    f: impl FnOnce() -> gflow::Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    run(py, global, f).map(PyTensor::new)
}

/// `with flow.no_grad():` (also a decorator, through the Python wrapper in `gflow`).
#[pyclass(name = "no_grad", module = "gflow")]
#[derive(Default)]
pub struct NoGrad;

#[pymethods]
impl NoGrad {
    #[new]
    fn new() -> Self {
        NoGrad
    }
    fn __enter__(&self) {
        NO_GRAD.with(|d| d.set(d.get() + 1));
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        NO_GRAD.with(|d| d.set(d.get().saturating_sub(1)));
        false
    }
}

/// Sets this thread's depth of `no_grad` scopes (0: operations are recorded) and returns the
/// depth before: what `flow.set_grad_enabled` and `flow.enable_grad` set and restore.
#[pyfunction]
pub fn _swap_grad_depth(depth: usize) -> usize {
    NO_GRAD.with(|d| d.replace(depth))
}

/// `backward(create_graph=True)` and `grad(create_graph=True)` are refused: gflow's backward
/// operators are not recorded, so there is no graph of the gradients.
fn refuse_create_graph(create_graph: bool) -> PyResult<()> {
    if create_graph {
        return Err(crate::error::InvalidArgumentError::new_err(
            "create_graph=True is not supported: gflow's backward is not recorded (no \
             higher-order gradients)",
        ));
    }
    Ok(())
}

/// A tensor or a sequence of tensors (PyTorch's `inputs=` and `outputs=`), as a list.
fn tensors_of(x: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    if let Ok(t) = x.cast::<PyTensor>() {
        return Ok(vec![t.get().get()]);
    }
    x.try_iter()?
        .map(|item| Ok(item?.cast::<PyTensor>()?.get().get()))
        .collect()
}

/// `torch.autograd.grad`: the gradients of `outputs` (seeded by `grad_outputs`, `None` for
/// ones of a one-element output) with respect to `inputs`, returned as a tuple; no tensor's
/// `.grad` changes. An unused input gives `None` with `allow_unused`, else an error. On global
/// tensors a collective.
#[pyfunction]
#[pyo3(signature = (outputs, inputs, grad_outputs = None, retain_graph = None, create_graph = false, allow_unused = None))]
pub fn grad<'py>(
    py: Python<'py>,
    outputs: &Bound<'py, PyAny>,
    inputs: &Bound<'py, PyAny>,
    grad_outputs: Option<&Bound<'py, PyAny>>,
    retain_graph: Option<bool>,
    create_graph: bool,
    allow_unused: Option<bool>,
) -> PyResult<Bound<'py, PyTuple>> {
    refuse_create_graph(create_graph)?;
    let outputs = tensors_of(outputs)?;
    let inputs = tensors_of(inputs)?;
    let seeds: Vec<Option<Tensor>> = match grad_outputs {
        None => vec![None; outputs.len()],
        Some(g) if g.cast::<PyTensor>().is_ok() => vec![Some(g.cast::<PyTensor>()?.get().get())],
        Some(g) => g
            .try_iter()?
            .map(|item| {
                let item = item?;
                if item.is_none() {
                    Ok(None)
                } else {
                    Ok(Some(item.cast::<PyTensor>()?.get().get()))
                }
            })
            .collect::<PyResult<_>>()?,
    };
    let global = outputs.iter().chain(&inputs).any(Tensor::is_global);
    let retain = retain_graph.unwrap_or(false);
    let unused = allow_unused.unwrap_or(false);
    let grads = run(py, global, move || {
        gflow::autograd::grad(&outputs, &seeds, &inputs, retain, unused)
    })?;
    let items = grads
        .into_iter()
        .map(|g| match g {
            Some(g) => Ok(Bound::new(py, PyTensor::new(g))?.into_any()),
            None => Ok(py.None().into_bound(py)),
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, items)
}

/// Whether operations on this thread are recorded for autograd.
#[pyfunction]
pub fn is_grad_enabled() -> bool {
    NO_GRAD.with(Cell::get) == 0 && gflow::is_grad_enabled()
}

/// A dtype: `flow.float32`, `flow.float64`, `flow.float16`, `flow.bfloat16`, `flow.int64`,
/// `flow.int32`, `flow.bool`.
#[pyclass(name = "dtype", module = "gflow", frozen, eq, hash, from_py_object)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDType {
    pub inner: DType,
}

impl PyDType {
    /// The NumPy (and PyTorch) name of the dtype.
    pub fn name(self) -> &'static str {
        match self.inner {
            DType::F64 => "float64",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I32 => "int32",
            DType::Bool => "bool",
            _ => "float32",
        }
    }
}

#[pymethods]
impl PyDType {
    fn __repr__(&self) -> String {
        format!("flow.{}", self.name())
    }
    /// Whether the dtype is a floating-point type.
    #[getter]
    fn is_floating_point(&self) -> bool {
        self.inner.is_float()
    }
}

/// The dtypes `gflow` exports, by name.
pub fn dtypes() -> [(&'static str, DType); 12] {
    [
        ("float32", DType::F32),
        ("float", DType::F32),
        ("float64", DType::F64),
        ("double", DType::F64),
        ("float16", DType::F16),
        ("half", DType::F16),
        ("bfloat16", DType::BF16),
        ("int64", DType::I64),
        ("long", DType::I64),
        ("int32", DType::I32),
        ("int", DType::I32),
        ("bool", DType::Bool),
    ]
}

/// A class of `gflow._pyapi`, looked up once.
pub fn python_class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
) -> PyResult<Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        Ok::<_, PyErr>(
            py.import("gflow._pyapi")?
                .getattr(name)?
                .cast_into::<PyType>()?
                .unbind(),
        )
    })
    .map(|t| t.bind(py).clone())
}

/// `shape` as a `flow.Size`.
pub fn size<'py>(py: Python<'py>, shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    static SIZE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    python_class(py, &SIZE, "Size")?.call1((PyTuple::new(py, shape)?,))
}

/// The whole logical value of `t` as a NumPy array of its dtype (bfloat16, which NumPy lacks,
/// as float32). A local CPU tensor's array views its storage (no copy, see [`crate::share`]);
/// otherwise (a global tensor's gathered value, a GPU tensor, bfloat16) the host copy gflow
/// makes is moved into the array, not copied again.
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    if let Some(view) = crate::share::view(py, t)? {
        return Ok(view);
    }
    let (t, shape) = match outside(py, t)? {
        Some(empty) => (empty, vec![0]),
        None => (t.clone(), t.shape().to_vec()),
    };
    let owned = t.clone();
    let host = run(py, t.is_global(), move || owned.to_host())?;
    let flat = match host {
        gflow::HostData::F32(v) => PyArray1::from_vec(py, v).into_any(),
        gflow::HostData::F64(v) => PyArray1::from_vec(py, v).into_any(),
        gflow::HostData::I64(v) => PyArray1::from_vec(py, v).into_any(),
        gflow::HostData::I32(v) => PyArray1::from_vec(py, v).into_any(),
        gflow::HostData::Bool(v) => PyArray1::from_vec(py, v)
            .into_any()
            .call_method1("view", ("bool",))?,
        gflow::HostData::F16(v) => PyArray1::from_vec(py, v.iter().map(|x| x.to_f32()).collect())
            .into_any()
            .call_method1("astype", ("float16",))?,
        other => PyArray1::from_vec(py, other.to_vec::<f32>()).into_any(),
    };
    flat.call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// On a rank outside a global tensor's placement, the empty local tensor OneFlow gives there
/// (so SPMD scripts run on every rank); `None` where this rank holds a component.
fn outside(py: Python<'_>, t: &Tensor) -> PyResult<Option<Tensor>> {
    let Some(p) = t.placement() else {
        return Ok(None);
    };
    let rank = run(py, false, || gflow::init().map(|e| e.rank()))?;
    if p.contains(rank) {
        return Ok(None);
    }
    let dtype = t.dtype();
    run(py, false, move || {
        Tensor::full_dtype(&[0], 0.0, dtype, gflow::Target::Local(Device::Cpu)).map(Some)
    })
}

/// Dimension `d` (negative counts from the end) of a tensor with `ndim` dimensions, as
/// PyTorch wraps dims: a 0-d tensor takes `0` and `-1` (its one element; see [`along`]).
pub fn dim(d: isize, ndim: usize) -> PyResult<usize> {
    let n = ndim.max(1) as isize;
    let i = if d < 0 { d + n } else { d };
    if (0..n).contains(&i) {
        Ok(i as usize)
    } else {
        Err(crate::error::to_py(gflow::Error::DimOutOfRange {
            op: "dim",
            dim: d.unsigned_abs(),
            ndim,
        }))
    }
}

/// What an operator along one dim returns, made 0-d again by [`along`].
pub trait AlongResult: Sized {
    /// The result of the operator on a tensor of one element of one dim, made 0-d.
    fn to_0d(self) -> gflow::Result<Self>;
}

impl AlongResult for Tensor {
    fn to_0d(self) -> gflow::Result<Self> {
        self.reshape(&[])
    }
}

impl AlongResult for (Tensor, Tensor) {
    fn to_0d(self) -> gflow::Result<Self> {
        Ok((self.0.reshape(&[])?, self.1.reshape(&[])?))
    }
}

/// `f(t)` for an operator along one dim (`softmax`, `cumsum`, `argmax`, `sort`, ...), as
/// PyTorch runs it on a 0-d tensor (whose dims `0` and `-1` name its element, see [`dim`]): on
/// `t` as one element of one dim, each result made 0-d again (differentiably). A tensor with
/// dims goes to `f` as it is.
pub fn along<R: AlongResult>(
    t: &Tensor,
    f: impl FnOnce(&Tensor) -> gflow::Result<R>,
) -> gflow::Result<R> {
    if t.ndim() > 0 {
        return f(t);
    }
    f(&t.reshape(&[1])?)?.to_0d()
}

/// PyTorch's refusal of `requires_grad=True` for a tensor of a `dtype` other than a float
/// (`flow.DTypeError`, a `RuntimeError` as PyTorch's), whichever way it is asked for.
pub fn check_requires_grad(dtype: DType, on: bool) -> PyResult<()> {
    if on && !dtype.is_float() {
        return Err(crate::error::DTypeError::new_err(format!(
            "only Tensors of floating point and complex dtype can require gradients (the \
             tensor is {})",
            PyDType { inner: dtype }.name()
        )));
    }
    Ok(())
}

#[pymethods]
impl PyTensor {
    /// `flow.Tensor(data)` (float32), `flow.Tensor(*shape)` or `flow.Tensor(flow.Size(...))`
    /// (zeros; `flow.Tensor()` has shape `[0]`), or `flow.Tensor(t)` (a new handle on `t`'s
    /// storage).
    #[new]
    #[pyo3(signature = (*args, dtype = None, placement = None, sbp = None, device = None, requires_grad = false))]
    fn py_new(
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        dtype: Option<PyDType>,
        placement: Option<PyPlacement>,
        sbp: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
        requires_grad: bool,
    ) -> PyResult<Self> {
        static SIZE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        let size_class = python_class(py, &SIZE, "Size")?;
        let first = args.get_item(0).ok();
        let t = match first {
            Some(a) if args.len() == 1 && a.cast::<PyTensor>().is_ok() => {
                let a = a.cast::<PyTensor>()?.get().get();
                a.detach()
            }
            // an integer (even a negative one, refused as a shape) is a size, as PyTorch's
            Some(a)
                if args.len() == 1
                    && a.extract::<isize>().is_err()
                    && !a.is_instance(&size_class)? =>
            {
                crate::creation::check_cpu(device)?;
                let dtype = dtype.map_or(DType::F32, |d| d.inner);
                crate::creation::from_data(py, &a, Some(dtype), placement.as_ref(), sbp)?
            }
            _ => {
                let shape = if args.is_empty() {
                    vec![0]
                } else {
                    crate::creation::shape_args(args)?
                };
                let target = crate::creation::target(placement.as_ref(), sbp, device)?;
                let dtype = dtype.map_or(DType::F32, |d| d.inner);
                run(py, false, || Tensor::full_dtype(&shape, 0.0, dtype, target))?
            }
        };
        check_requires_grad(t.dtype(), requires_grad)?;
        Ok(PyTensor::new(t.set_requires_grad(requires_grad)))
    }

    /// The logical (global) shape, a `flow.Size`.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        size(py, self.get().shape())
    }

    /// `x.size()` (the shape) or `x.size(dim)`.
    #[pyo3(signature = (dim = None))]
    fn size<'py>(&self, py: Python<'py>, dim: Option<isize>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.get();
        match dim {
            None => size(py, t.shape()),
            // as PyTorch: a 0-d tensor has no size to give (its dims 0 and -1 are for
            // operators along a dim)
            Some(d) if t.ndim() == 0 => Err(crate::error::to_py(gflow::Error::DimOutOfRange {
                op: "size",
                dim: d.unsigned_abs(),
                ndim: 0,
            })),
            Some(d) => Ok(t.shape()[self::dim(d, t.ndim())?]
                .into_pyobject(py)?
                .into_any()),
        }
    }

    /// Number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.get().ndim()
    }

    /// Number of dimensions.
    fn dim(&self) -> usize {
        self.get().ndim()
    }

    /// Number of logical elements.
    fn numel(&self) -> usize {
        self.get().numel()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.get()
            .shape()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d tensor"))
    }

    /// The element type.
    #[getter]
    fn dtype(&self) -> PyDType {
        PyDType {
            inner: self.get().dtype(),
        }
    }

    /// The SBP of a global tensor, one entry per placement axis (`None` for a local tensor).
    #[getter]
    fn sbp<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.get().sbp().map(|s| sbp_tuple(py, s)).transpose()
    }

    /// The placement of a global tensor (`None` for a local tensor).
    #[getter]
    fn placement(&self) -> Option<PyPlacement> {
        self.get()
            .placement()
            .map(|p| PyPlacement { inner: p.clone() })
    }

    /// Whether this is a global tensor.
    #[getter]
    fn is_global(&self) -> bool {
        self.get().is_global()
    }

    /// Whether this is a local tensor.
    #[getter]
    fn is_local(&self) -> bool {
        self.get().is_local()
    }

    /// The device of the tensor (of a global tensor's components): `flow.device("cpu", i)`,
    /// where `i` is this process's local rank (OneFlow's numbering of per-process devices).
    #[getter]
    fn device<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        static DEVICE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        let kind = self.get().device().device_type().as_str();
        let index = run(py, false, || gflow::init().map(|e| e.local_rank()))?;
        python_class(py, &DEVICE, "device")?.call1((kind, index))
    }

    /// `to_global(placement, sbp)`: a local tensor's components become a global tensor; a
    /// global tensor is converted (boxed) to the new layout. Either argument may be left out
    /// for a global tensor, keeping its own.
    ///
    /// OneFlow's keywords: `check_meta` (gflow always checks the ranks' shapes and dtypes),
    /// `copy` and `sync_data` are accepted; `grad_sbp` is refused (the gradient is boxed to this
    /// tensor's own layout); any other keyword is a `TypeError`, so a misspelt `placment=`
    /// cannot pass unseen.
    #[pyo3(signature = (placement = None, sbp = None, **kwargs))]
    fn to_global(
        &self,
        py: Python<'_>,
        placement: Option<PyPlacement>,
        sbp: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<PyTensor> {
        for (key, value) in kwargs.into_iter().flatten() {
            let key: String = key.extract()?;
            match key.as_str() {
                "check_meta" | "copy" | "sync_data" => {}
                "grad_sbp" if value.is_none() => {}
                "grad_sbp" => {
                    return Err(crate::error::InvalidArgumentError::new_err(
                        "to_global(grad_sbp=...) is not supported: the gradient is boxed to \
                         the input's own placement and SBP",
                    ));
                }
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "to_global() got an unexpected keyword argument '{other}'"
                    )));
                }
            }
        }
        let t = self.get();
        let placement = match (placement, t.placement()) {
            (Some(p), _) => p.inner,
            (None, Some(p)) => p.clone(),
            (None, None) => {
                return Err(PyValueError::new_err(
                    "to_global of a local tensor needs a placement",
                ));
            }
        };
        let sbp = match (sbp, t.sbp()) {
            (Some(s), _) => crate::layout::parse_sbp(s)?,
            (None, Some(s)) => s.clone(),
            (None, None) => gflow::NdSbp::broadcast(placement.ndim()),
        };
        op(py, true, move || t.to_global(&placement, sbp))
    }

    /// OneFlow's `local_to_global(placement, sbp)`: [`to_global`](Self::to_global) of a local
    /// tensor (a global one is a `TypeError`).
    #[pyo3(signature = (placement = None, sbp = None, **kwargs))]
    fn local_to_global(
        &self,
        py: Python<'_>,
        placement: Option<PyPlacement>,
        sbp: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<PyTensor> {
        if self.get().is_global() {
            return Err(PyTypeError::new_err(
                "local_to_global: the tensor is global already (use global_to_global)",
            ));
        }
        self.to_global(py, placement, sbp, kwargs)
    }

    /// OneFlow's `global_to_global(placement, sbp)`: [`to_global`](Self::to_global) of a global
    /// tensor (a local one is a `TypeError`); either argument left out keeps the tensor's own.
    #[pyo3(signature = (placement = None, sbp = None, **kwargs))]
    fn global_to_global(
        &self,
        py: Python<'_>,
        placement: Option<PyPlacement>,
        sbp: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<PyTensor> {
        if !self.get().is_global() {
            return Err(PyTypeError::new_err(
                "global_to_global: the tensor is local (use local_to_global)",
            ));
        }
        self.to_global(py, placement, sbp, kwargs)
    }

    /// This rank's component of a global tensor (a local tensor is returned as is; on a rank
    /// outside the placement an empty tensor, as OneFlow); `copy=True` (OneFlow's keyword) gives
    /// a copy that shares no storage with the component.
    #[pyo3(signature = (*, copy = false))]
    fn to_local(&self, py: Python<'_>, copy: bool) -> PyResult<PyTensor> {
        let t = self.get();
        if let Some(empty) = outside(py, &t)? {
            return Ok(PyTensor::new(empty));
        }
        let local = op(py, false, move || t.to_local())?;
        if copy {
            local.clone_tensor(py)
        } else {
            Ok(local)
        }
    }

    /// The whole logical value as a NumPy array (for a global tensor a collective on its
    /// placement, as OneFlow's `numpy()`; an empty array on a rank outside the placement).
    /// `force` is PyTorch's (which otherwise refuses a tensor that requires grad; gflow never
    /// does, so it changes nothing).
    #[pyo3(signature = (*, force = false))]
    fn numpy<'py>(&self, py: Python<'py>, force: bool) -> PyResult<Bound<'py, PyAny>> {
        let _ = force;
        to_numpy(py, &self.get())
    }

    /// The value as (nested) Python lists.
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_numpy(py, &self.get())?.call_method0("tolist")
    }

    /// The value of a one-element tensor as a Python number (another number of elements is a
    /// `RuntimeError`, as PyTorch's: `flow.InvalidValueError`, also a `ValueError`).
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.get();
        if t.numel() != 1 {
            return Err(crate::error::Also::InvalidValue.err(format!(
                "a Tensor with {} elements cannot be converted to Scalar (item() needs a \
                 one-element tensor, this one has shape {:?})",
                t.numel(),
                t.shape()
            )));
        }
        if outside(py, &t)?.is_some() {
            // the value lives on the placement's ranks only: NotInPlacement naming them
            return run(py, false, move || t.to_local().map(drop))
                .map(|()| py.None().into_bound(py));
        }
        to_numpy(py, &t)?.call_method0("item")
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.scalar(py)?.extract()
    }

    fn __int__(&self, py: Python<'_>) -> PyResult<i64> {
        self.scalar(py)?.call_method0("__int__")?.extract()
    }

    /// `operator.index(t)` of a one-element integer or Bool tensor, as PyTorch's (so
    /// `[10, 20][flow.tensor(1)]` works); other tensors are a `TypeError`.
    fn __index__(&self, py: Python<'_>) -> PyResult<i64> {
        let t = self.get();
        if t.numel() != 1 || t.dtype().is_float() {
            return Err(PyTypeError::new_err(
                "only integer tensors of a single element can be converted to an index",
            ));
        }
        self.item(py)?.call_method0("__int__")?.extract()
    }

    /// The truth of a one-element tensor (its value is not zero), as PyTorch; more or fewer
    /// elements are ambiguous (`RuntimeError`). For a global tensor a collective, as `item()`.
    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        match self.get().numel() {
            1 => self.item(py)?.is_truthy(),
            0 => Err(PyRuntimeError::new_err(
                "Boolean value of Tensor with no values is ambiguous",
            )),
            _ => Err(PyRuntimeError::new_err(
                "Boolean value of Tensor with more than one value is ambiguous",
            )),
        }
    }

    /// The tensor on this process's CPU (a local tensor on the CPU is returned as is).
    fn cpu(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().get();
        match t.device() {
            Device::Cpu => Ok(slf),
            d => Err(crate::error::to_py(gflow::Error::DeviceMismatch {
                op: "cpu",
                left: d.to_string(),
                right: "cpu".into(),
            })),
        }
    }

    /// Another Python object on this very tensor (history and all): what optimizers keep to
    /// notice that `t.data = ...` pointed a parameter elsewhere.
    fn _handle(&self) -> PyTensor {
        PyTensor::new(self.get())
    }

    /// Whether two Python objects refer to the very same gflow tensor.
    fn _same_as(&self, other: &PyTensor) -> bool {
        self.get().same_as(&other.get())
    }

    /// A new handle on the same storage, without autograd history.
    fn detach(&self) -> PyTensor {
        PyTensor::new(self.get().detach())
    }

    /// `x.detach_()`: this tensor (the same Python object) cut from its history, as PyTorch's:
    /// it becomes a leaf that does not require grad; returns it.
    fn detach_(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        let this = slf.get();
        this.set(this.get().detach());
        slf
    }

    /// The same storage without history; setting it points this handle at another tensor's
    /// storage (keeping this handle's `requires_grad`), as PyTorch's `param.data = ...`.
    #[getter]
    fn get_data(&self) -> PyTensor {
        PyTensor {
            inner: RwLock::new(self.get().detach()),
            grad_of: self.grad_of.clone(),
            view_of: None,
            views: Mutex::default(),
            live: AtomicBool::new(self.live.load(Ordering::Acquire)),
            grad_handle: Mutex::default(),
        }
    }

    #[setter]
    fn set_data(&self, other: &PyTensor) {
        let rg = self.get().requires_grad();
        self.set(other.get().detach().set_requires_grad(rg));
    }

    /// Whether gradients are computed for this tensor.
    #[getter]
    fn get_requires_grad(&self) -> bool {
        self.get().requires_grad()
    }

    #[setter]
    fn set_requires_grad(&self, on: bool) -> PyResult<()> {
        let t = self.get();
        check_requires_grad(t.dtype(), on)?;
        if !t.is_leaf() && !on {
            return Err(crate::error::InvalidArgumentError::new_err(
                "requires_grad can only be cleared on a leaf tensor; use detach()",
            ));
        }
        t.set_requires_grad(on);
        Ok(())
    }

    /// `x.requires_grad_(on)`: sets the flag and returns the tensor.
    #[pyo3(signature = (requires_grad = true))]
    fn requires_grad_(slf: Bound<'_, Self>, requires_grad: bool) -> PyResult<Bound<'_, Self>> {
        slf.get().set_requires_grad(requires_grad)?;
        Ok(slf)
    }

    /// Whether this tensor was made by the user rather than computed by a recorded operation.
    #[getter]
    fn is_leaf(&self) -> bool {
        let t = self.get();
        t.is_leaf()
    }

    /// `None` for a leaf (or a tensor not recorded for autograd), else an object standing for
    /// the recorded operation, as PyTorch's `grad_fn` (so `y.grad_fn is None` tells the two
    /// apart).
    #[getter]
    fn grad_fn<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        static GRAD_FN: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        let t = self.get();
        if t.is_leaf() || !t.requires_grad() {
            return Ok(None);
        }
        python_class(py, &GRAD_FN, "GradFn")?.call0().map(Some)
    }

    /// The accumulated gradient (same placement and SBP as the tensor), or `None`; for a
    /// non-leaf only after `retain_grad()`. The same object each time, which follows the
    /// gradient as backward accumulates into it (as PyTorch's, accumulated in place), until
    /// `.grad` is assigned.
    #[getter]
    fn get_grad<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyTensor>>> {
        let (py, this) = (slf.py(), slf.get());
        let t = this.get();
        let Some(g) = t.grad() else {
            return Ok(None);
        };
        let mut cached = this.grad_handle.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = cached
            .as_ref()
            .and_then(|w| w.bind(py).upgrade())
            .and_then(|h| h.cast_into::<PyTensor>().ok())
        {
            let owner = h.get().grad_of().cloned();
            if owner.is_some_and(|o| o.same_as(&t)) {
                return Ok(Some(h));
            }
            h.get().freeze();
        }
        let h = Bound::new(
            py,
            PyTensor {
                inner: RwLock::new(g),
                grad_of: Some(t),
                view_of: None,
                views: Mutex::default(),
                live: AtomicBool::new(true),
                grad_handle: Mutex::default(),
            },
        )?;
        *cached = Some(pyo3::types::PyWeakrefReference::new(&h)?.unbind());
        Ok(Some(h))
    }

    /// Replaces (or clears) the gradient; handles read from `.grad` before keep their value,
    /// as PyTorch's.
    #[setter]
    fn set_grad(&self, py: Python<'_>, grad: Option<&PyTensor>) {
        let new = grad.map(PyTensor::get);
        let old = self
            .grad_handle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = old
            .and_then(|w| w.bind(py).upgrade())
            .and_then(|h| h.cast_into::<PyTensor>().ok())
        {
            h.get().freeze();
        }
        self.get().set_grad(new);
    }

    /// Keeps this non-leaf tensor's gradient in `.grad` after `backward`, in the tensor's own
    /// placement and SBP (a leaf keeps its own anyway), as PyTorch's `retain_grad`.
    fn retain_grad(&self) -> PyResult<()> {
        self.get().retain_grad().py()
    }

    /// Whether `retain_grad()` was called on this non-leaf tensor (false for a leaf).
    #[getter]
    fn retains_grad(&self) -> bool {
        self.get().retains_grad()
    }

    /// Computes gradients of this tensor with respect to the leaves that require them
    /// (`gradient`: the seed, needed unless the tensor has one element), or with `inputs` only
    /// into those tensors (leaves or not), as PyTorch's. On global tensors a collective: every
    /// rank calls it.
    #[pyo3(signature = (gradient = None, retain_graph = None, create_graph = false, inputs = None))]
    fn backward(
        &self,
        py: Python<'_>,
        gradient: Option<&PyTensor>,
        retain_graph: Option<bool>,
        create_graph: bool,
        inputs: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        refuse_create_graph(create_graph)?;
        let t = self.get();
        let g = gradient.map(PyTensor::get);
        let inputs = inputs.map(tensors_of).transpose()?;
        let global = t.is_global();
        let retain = retain_graph.unwrap_or(false);
        run(py, global, move || match inputs {
            Some(inputs) => t.backward_inputs(g.as_ref(), &inputs, retain),
            None => t.backward_with_options(g.as_ref(), retain),
        })
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        static REPR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        let f = REPR.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("gflow._pyapi")?.getattr("tensor_repr")?.unbind())
        })?;
        f.bind(py).call1((slf,))?.extract()
    }
}

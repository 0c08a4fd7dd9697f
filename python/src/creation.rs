//! Creating tensors: `flow.randn(*shape, placement=, sbp=)`, `zeros`, `ones`, `full`,
//! `arange`, `linspace`, `randint`, `tensor(data)`, `from_numpy(array)`. Without a placement the tensor is local, on
//! this process's CPU.

use gflow::{DType, Device, Target, Tensor};
use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::layout::{PyPlacement, parse_sbp};
use crate::share::read_exact;
use crate::tensor::{PyDType, PyTensor, op, run};

/// A shape given as `f(2, 3)` or `f((2, 3))` / `f([2, 3])` / `f(flow.Size(...))`: integers
/// (not integers: a `TypeError`; a negative one: `flow.InvalidArgumentError`, a
/// `RuntimeError` as PyTorch's).
pub fn shape_args(args: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    if args.len() == 1 {
        let a = args.get_item(0)?;
        if a.extract::<isize>().is_err() {
            return shape_of(&a);
        }
    }
    shape_of(args.as_any())
}

/// A shape given as one sequence of integers (see [`shape_args`]).
pub fn shape_of(seq: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let raw: Vec<isize> = seq.extract().map_err(|_| {
        PyTypeError::new_err("a shape is non-negative integers, or one sequence of them")
    })?;
    if let Some(d) = raw.iter().find(|&&d| d < 0) {
        return Err(crate::error::InvalidArgumentError::new_err(format!(
            "Trying to create tensor with negative dimension {d}: {raw:?}"
        )));
    }
    Ok(raw.into_iter().map(|d| d as usize).collect())
}

/// Where a new tensor goes: local on `device` (a name such as `"cpu"` or `"cpu:0"`, or a
/// `flow.device`; the CPU by default), or global with `placement` and `sbp` (broadcast on every
/// axis when left out).
pub fn target(
    placement: Option<&PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<Target> {
    match (placement, sbp) {
        (Some(p), s) => {
            let sbp = match s {
                Some(s) => parse_sbp(s)?,
                None => gflow::NdSbp::broadcast(p.inner.ndim()),
            };
            Ok(Target::Global(p.inner.clone(), sbp))
        }
        (None, Some(_)) => Err(PyValueError::new_err("sbp= needs placement= as well")),
        (None, None) => Ok(Target::Local(match device {
            Some(d) => parse_device(&d.str()?.to_string())?,
            None => Device::Cpu,
        })),
    }
}

/// Runs the creation `f` for `target` (releasing the GIL; collective for a global target) and
/// marks the result `requires_grad` as asked.
fn create(
    py: Python<'_>,
    target: Target,
    requires_grad: bool,
    f: impl FnOnce(Target) -> gflow::Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    let global = matches!(target, Target::Global(..));
    let t = op(py, global, move || {
        let want = target.clone();
        in_layout(f(target)?, &want)
    })?;
    crate::tensor::check_requires_grad(t.get().dtype(), requires_grad)?;
    t.get().set_requires_grad(requires_grad);
    Ok(t)
}

/// `t` in the target's placement and SBP: a cast after distributing (`dtype=`) has no partial
/// signature and comes back split, where the caller asked for `partial_*` (OneFlow casts the
/// local data first, so its SBP is the one asked for).
fn in_layout(t: Tensor, target: &Target) -> gflow::Result<Tensor> {
    match target {
        Target::Global(p, nd) if t.sbp() != Some(nd) => t.to_global(p, nd.clone()),
        _ => Ok(t),
    }
}

/// Refuses a `device=` other than the CPU where data is copied in from the host.
pub fn check_cpu(device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match device {
        Some(d) if parse_device(&d.str()?.to_string())? != Device::Cpu => {
            Err(PyValueError::new_err(
                "a tensor made from data supports device=\"cpu\"; use placement= for other devices",
            ))
        }
        _ => Ok(()),
    }
}

/// The device named `name` (`"cpu"`, `"cuda:1"`, ...; the index is this process's own).
pub fn parse_device(name: &str) -> PyResult<Device> {
    let kind = name.split(':').next().unwrap_or(name);
    match kind {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda),
        "wgpu" => Ok(Device::Wgpu),
        _ => Err(crate::error::to_py(gflow::Error::UnknownDeviceType {
            name: name.into(),
        })),
    }
}

/// `data` (nested lists and tuples) with its one-element tensors replaced by their Python
/// numbers, and the dtype PyTorch's `torch.tensor` infers from the elements (each tensor's
/// dtype, Python bools Bool, ints int64, floats float32, promoted together); `None` when `data`
/// holds no tensor. A tensor of several elements is a `ValueError`, as PyTorch's.
fn tensor_scalars<'py>(
    data: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyAny>, Option<DType>)>> {
    use pyo3::types::{PyBool, PyFloat, PyInt, PyList};
    fn walk<'py>(
        x: &Bound<'py, PyAny>,
        found: &mut bool,
        dtype: &mut Option<DType>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = x.py();
        let mut meet = |d: DType| *dtype = Some(dtype.map_or(d, |e| e.promote(d)));
        if let Ok(t) = x.cast::<PyTensor>() {
            let t = t.get().get();
            if t.numel() != 1 {
                return Err(PyValueError::new_err(
                    "only one element tensors can be converted to Python scalars",
                ));
            }
            *found = true;
            meet(t.dtype());
            return x.call_method0("item");
        }
        if x.is_instance_of::<PyList>() || x.is_instance_of::<PyTuple>() {
            let items = x
                .try_iter()?
                .map(|i| walk(&i?, found, dtype))
                .collect::<PyResult<Vec<_>>>()?;
            return Ok(PyList::new(py, items)?.into_any());
        }
        if x.is_instance_of::<PyBool>() {
            meet(DType::Bool);
        } else if x.is_instance_of::<PyInt>() {
            meet(DType::I64);
        } else if x.is_instance_of::<PyFloat>() {
            meet(DType::F32);
        }
        Ok(x.clone())
    }
    let (mut found, mut dtype) = (false, None);
    let numbers = walk(data, &mut found, &mut dtype)?;
    Ok(found.then_some((numbers, dtype)))
}

/// A tensor holding `data` (a NumPy array, nested lists, a scalar): NumPy arrays keep their
/// dtype (float64, float32, float16, int64, int32, bool; other integer dtypes, which gflow
/// lacks, are a `TypeError` naming the dtype unless `dtype` is given); Python
/// floats become float32, integers int64 and booleans bool, as in PyTorch. `dtype` converts.
/// An array whose dtype is kept is copied once, straight into gflow's storage (see
/// [`crate::share`]); a local tensor keeps that copy, a global one each rank's box of it.
pub fn from_data(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<DType>,
    placement: Option<&PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let np = py.import("numpy")?;
    // NumPy arrays and NumPy scalars (`np.float64(2.0)`) keep their dtype, as in PyTorch.
    let is_ndarray = data.is_instance(&np.getattr("ndarray")?)?;
    let is_array = is_ndarray || data.is_instance(&np.getattr("generic")?)?;
    let arr = if is_ndarray {
        data.clone()
    } else {
        match np.call_method1("asarray", (data,)) {
            Ok(a) if a.getattr("dtype")?.getattr("kind")?.extract::<String>()? != "O" => a,
            made => {
                // one-element tensors among the numbers, as PyTorch takes them
                if let Some((numbers, inferred)) = tensor_scalars(data)? {
                    return from_data(py, &numbers, dtype.or(inferred), placement, sbp);
                }
                made?
            }
        }
    };
    let np_dtype = arr.getattr("dtype")?;
    let kind: String = np_dtype.getattr("kind")?.extract()?;
    let size: usize = np_dtype.getattr("itemsize")?.extract()?;
    if is_array && dtype.is_none() && (kind == "u" || (kind == "i" && size < 4)) {
        // PyTorch keeps uint8/int8/int16 (gflow has none of them): say so rather than change
        // the dtype behind the user's back; an explicit dtype= converts.
        let name: String = np_dtype.getattr("name")?.extract()?;
        return Err(PyTypeError::new_err(format!(
            "gflow has no {name} dtype (NumPy array of {name}); convert it first, e.g. \
             .astype(numpy.int64), or pass dtype=flow.int64 (or flow.int32, flow.float32)"
        )));
    }
    let natural = match (kind.as_str(), size, is_array) {
        ("f", 8, true) => DType::F64,
        ("f", 2, true) => DType::F16,
        ("f", _, _) => DType::F32,
        ("i", 4, true) => DType::I32,
        ("i" | "u", _, _) => DType::I64,
        ("b", _, _) => DType::Bool,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "cannot make a tensor of NumPy kind {kind:?} (from {})",
                data.get_type().name()?
            )));
        }
    };
    let want = dtype.unwrap_or(natural);
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let target = target(placement, sbp, None)?;
    let global = matches!(target, Target::Global(..));
    // The array's own elements, when gflow stores its dtype as is: one copy.
    if want == natural {
        type Build = Box<dyn FnOnce() -> gflow::Result<Tensor> + Send>;
        fn build<T: gflow::Element>(v: Vec<T>, shape: Vec<usize>, target: Target) -> Build {
            Box::new(move || Tensor::from_vec(v, &shape, target))
        }
        let (shape, target) = (shape.clone(), target.clone());
        let exact: Option<Build> = match want {
            DType::F32 => read_exact::<f32>(&arr)?.map(|v| build(v, shape, target)),
            DType::F64 => read_exact::<f64>(&arr)?.map(|v| build(v, shape, target)),
            DType::I64 => read_exact::<i64>(&arr)?.map(|v| build(v, shape, target)),
            DType::I32 => read_exact::<i32>(&arr)?.map(|v| build(v, shape, target)),
            // Same-size reinterpretations, collected in place (no second buffer).
            DType::F16 => read_exact::<u16>(&arr.call_method1("view", ("uint16",))?)?.map(|v| {
                let v: Vec<gflow::f16> = v.into_iter().map(gflow::f16::from_bits).collect();
                build(v, shape, target)
            }),
            DType::Bool => read_exact::<u8>(&arr.call_method1("view", ("uint8",))?)?.map(|v| {
                let v: Vec<bool> = v.into_iter().map(|b| b != 0).collect();
                build(v, shape, target)
            }),
            _ => None,
        };
        if let Some(f) = exact {
            return run(py, global, f);
        }
    }
    // Otherwise read in a type NumPy and gflow share (float64 for floats: exact for float16
    // and bfloat16's values), then cast to `want` in gflow.
    let arr = np.call_method1("ascontiguousarray", (arr,))?;
    macro_rules! build {
        ($t:ty, $np:literal) => {{
            let a = arr.call_method1("astype", ($np,))?;
            let v: Vec<$t> = a.cast::<PyArrayDyn<$t>>()?.to_vec()?;
            run(py, global, move || {
                gflow::no_grad(|| {
                    let t = Tensor::from_vec(v, &shape, target.clone())?.to_dtype(want)?;
                    in_layout(t, &target)
                })
            })
        }};
    }
    match want {
        DType::F32 => build!(f32, "float32"),
        DType::I64 => build!(i64, "int64"),
        DType::I32 => build!(i32, "int32"),
        _ if kind == "f" => build!(f64, "float64"),
        _ => build!(i64, "int64"),
    }
}

/// The shape given as PyTorch's `size=` keyword (`flow.ones(size=(2, 3))`), when it is; any
/// other keyword, or a shape given both ways, is a `TypeError` naming `func`.
fn size_keyword<'py>(
    func: &str,
    args: &Bound<'py, PyTuple>,
    kw: Option<&Bound<'py, pyo3::types::PyDict>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(kw) = kw else { return Ok(None) };
    for key in kw.keys() {
        let key: String = key.extract()?;
        if key != "size" {
            return Err(PyTypeError::new_err(format!(
                "{func}() got an unexpected keyword argument '{key}'"
            )));
        }
    }
    let size = kw.get_item("size")?;
    if size.is_some() && !args.is_empty() {
        return Err(PyTypeError::new_err(format!(
            "{func}() got the shape both positionally and as size="
        )));
    }
    Ok(size)
}

/// Keyword arguments shared by the creation functions.
macro_rules! creator {
    ($(#[$doc:meta])* $name:ident, |$shape:ident, $dtype:ident, $target:ident| $body:expr) => {
        $(#[$doc])*
        #[pyfunction]
        #[pyo3(signature = (*size, dtype = None, placement = None, sbp = None, device = None, requires_grad = false, **kw))]
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            py: Python<'_>,
            size: &Bound<'_, PyTuple>,
            dtype: Option<PyDType>,
            placement: Option<PyPlacement>,
            sbp: Option<&Bound<'_, PyAny>>,
            device: Option<&Bound<'_, PyAny>>,
            requires_grad: bool,
            kw: Option<&Bound<'_, pyo3::types::PyDict>>,
        ) -> PyResult<PyTensor> {
            let $shape = match size_keyword(stringify!($name), size, kw)? {
                Some(s) => shape_of(&s)?,
                None => shape_args(size)?,
            };
            let $dtype = dtype.map_or(DType::F32, |d| d.inner);
            let target = target(placement.as_ref(), sbp, device)?;
            create(py, target, requires_grad, move |$target| $body)
        }
    };
}

creator!(
    /// Standard normal values. Global: placement-invariant (the values depend on the seed and the
    /// index only, not on the placement or SBP).
    randn, |s, d, t| Tensor::randn_dtype(&s, d, t)
);
creator!(
    /// Uniform values in [0, 1).
    rand, |s, d, t| Tensor::rand_dtype(&s, d, t)
);
creator!(
    /// Zeros.
    zeros, |s, d, t| Tensor::full_dtype(&s, 0.0, d, t)
);
creator!(
    /// Ones.
    ones, |s, d, t| Tensor::full_dtype(&s, 1.0, d, t)
);
creator!(
    /// A tensor to be written over (gflow fills it with zeros).
    empty, |s, d, t| Tensor::full_dtype(&s, 0.0, d, t)
);

/// A tensor of `size` filled with `fill_value` (of its dtype, as PyTorch, unless `dtype`).
#[pyfunction]
#[pyo3(signature = (size, fill_value, dtype = None, placement = None, sbp = None, device = None, requires_grad = false))]
#[allow(clippy::too_many_arguments)]
pub fn full(
    py: Python<'_>,
    size: &Bound<'_, PyAny>,
    fill_value: &Bound<'_, PyAny>,
    dtype: Option<PyDType>,
    placement: Option<PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let value = fill_value;
    // as PyTorch: the dtype of the fill value when none is given (bool, int64, float32)
    let natural = if value.is_instance_of::<pyo3::types::PyBool>() {
        DType::Bool
    } else if value.is_instance_of::<pyo3::types::PyInt>() {
        DType::I64
    } else {
        DType::F32
    };
    let value: f64 = value
        .extract()
        .map_err(|_| PyTypeError::new_err("full: the fill value must be a number"))?;
    let size = match size.extract::<isize>() {
        Ok(n) => shape_of(PyTuple::new(py, [n])?.as_any())?,
        Err(_) => shape_of(size)?,
    };
    let dtype = dtype.map_or(natural, |d| d.inner);
    let target = target(placement.as_ref(), sbp, device)?;
    create(py, target, requires_grad, move |t| {
        Tensor::full_dtype(&size, value, dtype, t)
    })
}

/// `flow.arange(end)`, `flow.arange(start, end, step=1)`: `start, start + step, ...` up to
/// `end` (excluded), as PyTorch: int64 when every bound is an integer, else float32, unless
/// `dtype` says otherwise. Values are computed in float64 (exact for integers below 2^53).
#[pyfunction]
#[pyo3(signature = (start = None, end = None, step = None, *, dtype = None, placement = None, sbp = None, device = None, requires_grad = false))]
#[allow(clippy::too_many_arguments)]
pub fn arange(
    py: Python<'_>,
    start: Option<&Bound<'_, PyAny>>,
    end: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    dtype: Option<PyDType>,
    placement: Option<PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let number = |b: &Bound<'_, PyAny>| -> PyResult<(f64, bool)> {
        let integral = b.extract::<i64>().is_ok() && !b.is_instance_of::<pyo3::types::PyFloat>();
        let v = b
            .extract::<f64>()
            .map_err(|_| PyTypeError::new_err("arange: start, end and step must be numbers"))?;
        Ok((v, integral))
    };
    // `arange(end)`, `arange(start, end)`, or `arange(end=n)` as PyTorch's keyword
    let ((start, s_int), (end, e_int)) = match (start, end) {
        (Some(s), Some(e)) => (number(s)?, number(e)?),
        (Some(e), None) | (None, Some(e)) => ((0.0, true), number(e)?),
        (None, None) => {
            return Err(PyTypeError::new_err("arange() missing its end argument"));
        }
    };
    let (step, p_int) = match step {
        Some(s) => number(s)?,
        None => (1.0, true),
    };
    // PyTorch's checks, in its order and words (`flow.InvalidValueError`: a `RuntimeError` as
    // PyTorch's, also the `ValueError` gflow raised before)
    let bad = |msg: String| Err(crate::error::Also::InvalidValue.err(msg));
    if step == 0.0 {
        return bad("arange: step must be nonzero (a non-zero step is needed)".into());
    }
    if !start.is_finite() || !end.is_finite() || !step.is_finite() {
        return bad(format!(
            "arange: unsupported range: {start} -> {end} (step {step})"
        ));
    }
    if (step > 0.0 && end < start) || (step < 0.0 && end > start) {
        return bad(format!(
            "arange: upper bound and lower bound inconsistent with step sign (start={start}, \
             end={end}, step={step})"
        ));
    }
    let n = ((end - start) / step).ceil().max(0.0) as usize;
    let natural = if s_int && e_int && p_int {
        DType::I64
    } else {
        DType::F32
    };
    let dtype = dtype.map_or(natural, |d| d.inner);
    let target = target(placement.as_ref(), sbp, device)?;
    create(py, target, requires_grad, move |t| {
        gflow::no_grad(|| {
            let i = Tensor::arange_dtype(n, DType::F64, t)?;
            let v = if step == 1.0 { i } else { i.mul_scalar(step)? };
            let v = if start == 0.0 {
                v
            } else {
                v.add_scalar(start)?
            };
            v.to_dtype(dtype)
        })
    })
}

/// `flow.linspace(start, end, steps)`: `steps` evenly spaced values from `start` to `end`
/// inclusive, float32 unless `dtype` says otherwise (as PyTorch, which computes float32 results
/// in float32).
#[pyfunction]
#[pyo3(signature = (start, end, steps, *, dtype = None, placement = None, sbp = None, device = None, requires_grad = false))]
#[allow(clippy::too_many_arguments)]
pub fn linspace(
    py: Python<'_>,
    start: f64,
    end: f64,
    steps: i64,
    dtype: Option<PyDType>,
    placement: Option<PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let steps = usize::try_from(steps).map_err(|_| {
        crate::error::Also::InvalidValue.err(format!(
            "linspace: number of steps must be non-negative, got {steps}"
        ))
    })?;
    let dtype = dtype.map_or(DType::F32, |d| d.inner);
    let target = target(placement.as_ref(), sbp, device)?;
    create(py, target, requires_grad, move |t| {
        Tensor::linspace(start, end, steps, dtype, t)
    })
}

/// `flow.randint(high, size)` or `flow.randint(low, high, size)`: integers drawn uniformly
/// from `[low, high)` (`low` 0 by default), int64 unless `dtype` says otherwise; global ones are
/// placement-invariant, as `randn`.
#[pyfunction]
#[pyo3(signature = (*args, low = None, high = None, size = None, dtype = None, placement = None, sbp = None, device = None, requires_grad = false))]
#[allow(clippy::too_many_arguments)]
pub fn randint(
    py: Python<'_>,
    args: &Bound<'_, PyTuple>,
    low: Option<i64>,
    high: Option<i64>,
    size: Option<&Bound<'_, PyAny>>,
    dtype: Option<PyDType>,
    placement: Option<PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let usage = || {
        PyTypeError::new_err(
            "randint takes (high, size) or (low, high, size): integers and a shape, positionally \
             or as low=, high=, size=",
        )
    };
    let int = |i: usize| args.get_item(i)?.extract::<i64>().map_err(|_| usage());
    // a sequence of integers (a negative one refused as by `flow.zeros`)
    let sizes = |a: &Bound<'_, PyAny>| match a.extract::<Vec<isize>>() {
        Ok(_) => shape_of(a),
        Err(_) => Err(usage()),
    };
    let shape = |i: usize| sizes(&args.get_item(i)?);
    let (low, high, size) = match (args.len(), low, high, size) {
        (0, l, Some(h), Some(s)) => (l.unwrap_or(0), h, sizes(s)?),
        (1, l, None, Some(s)) => (l.unwrap_or(0), int(0)?, sizes(s)?),
        (2, None, None, None) => (0, int(0)?, shape(1)?),
        (2, None, None, Some(s)) => (int(0)?, int(1)?, sizes(s)?),
        (3, None, None, None) => (int(0)?, int(1)?, shape(2)?),
        _ => return Err(usage()),
    };
    let dtype = dtype.map_or(DType::I64, |d| d.inner);
    let target = target(placement.as_ref(), sbp, device)?;
    create(py, target, requires_grad, move |t| {
        gflow::no_grad(|| Tensor::randint(low, high, &size, t)?.to_dtype(dtype))
    })
}

/// `flow.randperm(n)`: a random permutation of `0..n`, int64 unless `dtype` says otherwise;
/// global ones are placement-invariant, as `randn`.
#[pyfunction]
#[pyo3(signature = (n, *, dtype = None, placement = None, sbp = None, device = None, requires_grad = false, generator = None))]
#[allow(clippy::too_many_arguments)]
pub fn randperm(
    py: Python<'_>,
    n: usize,
    dtype: Option<PyDType>,
    placement: Option<PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
    generator: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTensor> {
    if generator.is_some_and(|g| !g.is_none()) {
        return Err(PyTypeError::new_err(
            "randperm: generator= is not supported; seed with flow.manual_seed",
        ));
    }
    let dtype = dtype.map_or(DType::I64, |d| d.inner);
    let target = target(placement.as_ref(), sbp, device)?;
    create(py, target, requires_grad, move |t| {
        gflow::no_grad(|| Tensor::randperm(n, t)?.to_dtype(dtype))
    })
}

/// `flow.tensor(data)`: a tensor holding a copy of `data` (NumPy array, lists, scalar, tensor).
#[pyfunction]
#[pyo3(signature = (data, dtype = None, placement = None, sbp = None, device = None, requires_grad = false))]
pub fn tensor(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<PyDType>,
    placement: Option<PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    check_cpu(device)?;
    let data = match data.cast::<PyTensor>() {
        Ok(t) => crate::tensor::to_numpy(py, &t.get().get())?,
        Err(_) => data.clone(),
    };
    let dtype = dtype.map(|d| d.inner);
    if let Some(d) = dtype {
        // refused before the data is copied in
        crate::tensor::check_requires_grad(d, requires_grad)?;
    }
    if let Some(p) = placement.as_ref() {
        same_data_on_every_rank(py, &data, &p.inner)?;
    }
    let t = from_data(py, &data, dtype, placement.as_ref(), sbp)?;
    crate::tensor::check_requires_grad(t.dtype(), requires_grad)?;
    Ok(PyTensor::new(t.set_requires_grad(requires_grad)))
}

/// `flow.tensor` for gflow's own Python code, whose data is the same on every rank by
/// construction (a table of constants, values gathered from a global tensor): without the
/// digest collective of the user's `flow.tensor`, which would run on every call of a hot path
/// (a global convolution's window table each forward).
#[pyfunction]
#[pyo3(name = "_constant", signature = (data, dtype = None, placement = None, sbp = None, device = None))]
pub fn constant(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<PyDType>,
    placement: Option<PyPlacement>,
    sbp: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTensor> {
    check_cpu(device)?;
    let t = from_data(py, data, dtype.map(|d| d.inner), placement.as_ref(), sbp)?;
    Ok(PyTensor::new(t))
}

/// Refuses data that differs between the ranks of `placement` (a digest of 32 bytes per rank,
/// gathered among the placement's ranks only): a global tensor's data is its whole value on
/// every rank, and data that differs (an unseeded `np.random` draw, a rank's own batch) would
/// give a tensor whose value depends on the rank, as OneFlow's `DataConsistencyCheck`
/// refuses. Ranks outside the placement hold none of it and check nothing.
fn same_data_on_every_rank(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    placement: &gflow::Placement,
) -> PyResult<()> {
    use sha2::{Digest, Sha256};
    let members = placement.ranks().to_vec();
    let rank = run(py, false, || gflow::init().map(|e| e.rank()))?;
    let Some(me) = members.iter().position(|&r| r == rank) else {
        return Ok(());
    };
    if members.len() == 1 {
        return Ok(());
    }
    let np = py.import("numpy")?;
    let arr = np.call_method1("ascontiguousarray", (data,))?;
    let mut h = Sha256::new();
    h.update(arr.getattr("dtype")?.str()?.to_string().as_bytes());
    h.update(format!("{:?}", arr.getattr("shape")?).as_bytes());
    h.update(
        arr.call_method0("tobytes")?
            .cast::<pyo3::types::PyBytes>()?
            .as_bytes(),
    );
    // the whole value as this rank sees it: its own digest in its own part of a split
    let mut all = vec![0i64; 4 * members.len()];
    for (w, c) in all[4 * me..].iter_mut().zip(h.finalize().chunks_exact(8)) {
        *w = i64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
    }
    let n = members.len();
    let differs = run(py, true, move || {
        // the digests on the members' CPUs, whatever device the tensor is for
        let flat = gflow::Placement::new("cpu", members.clone())?;
        let all: Vec<i64> = Tensor::from_vec(all, &[4 * n], (&flat, gflow::Sbp::split(0)))?
            .to_global(&flat, gflow::Sbp::broadcast())?
            .to_local()?
            .to_vec()?;
        let of = |i: usize| &all[4 * i..4 * i + 4];
        Ok((1..n)
            .find(|&i| of(i) != of(0))
            .map(|i| (members[0], members[i])))
    })?;
    match differs {
        Some((a, b)) => Err(crate::error::Also::InvalidValue.err(format!(
            "flow.tensor with a placement: the data differs between ranks {a} and {b} (a \
             global tensor's data is its whole value, the same on every rank; seed NumPy, or \
             make each rank's part local and use to_global)"
        ))),
        None => Ok(()),
    }
}

//! NumPy arrays that view a tensor's storage without a copy, and tensors read from NumPy with
//! one copy.
//!
//! `Tensor.numpy()` of a local CPU tensor (a global tensor's `to_local()` component included)
//! is an array over the tensor's own host buffer: writes through either are seen by the other,
//! as PyTorch's `numpy()`. The array's base object is a [`Storage`] holding a handle on that
//! buffer, so the buffer outlives the tensor while an array uses it. gflow never moves a host
//! buffer that has such a handle: elementwise updates (optimizer steps) write in place,
//! `load_state_dict` (core `assign`) copies into it, `Tensor::become_tensor` only frees
//! storage nobody else holds, and boxing copies shared storage instead of taking it.
//!
//! NumPy and gflow do not share memory the other way: gflow's storage is a Rust `Vec` it owns,
//! so `flow.from_numpy(a)` / `flow.tensor(a)` copy `a`'s elements once, straight into that
//! `Vec` (no intermediate array when the dtype already fits).

use gflow::{DType, Device, HostData, Tensor};
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::error::IntoPy;

/// The base object of a NumPy array viewing a tensor's storage: keeps that storage alive.
#[pyclass(name = "_Storage", module = "gflow._gflow", frozen)]
pub struct Storage {
    _tensor: Tensor,
}

/// Where a host buffer's elements start, by the NumPy type that reads them (bool as bytes and
/// float16 as 16-bit words, reinterpreted by NumPy).
enum Raw {
    F32(*mut f32),
    F64(*mut f64),
    I64(*mut i64),
    I32(*mut i32),
    Bits16(*mut u16, &'static str),
    Bytes(*mut u8, &'static str),
}

/// An array over `t`'s host storage, or `None` where sharing is impossible or unsound: a
/// global tensor (its whole value is gathered, a new array), a tensor on a GPU (its data is in
/// device memory), or bfloat16 (NumPy has no such type).
pub fn view<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Option<Bound<'py, PyAny>>> {
    if t.is_global() || t.device() != Device::Cpu || t.dtype() == DType::BF16 {
        return Ok(None);
    }
    // A second handle on the same storage: it keeps the buffer alive and marks it shared.
    let keep = t.detach();
    let raw = keep
        .with_component_mut(|h| {
            // `as_mut_ptr` borrows no slice, so the pointer stays valid across later reads.
            Ok(match h {
                HostData::F32(v) => Some(Raw::F32(v.as_mut_ptr())),
                HostData::F64(v) => Some(Raw::F64(v.as_mut_ptr())),
                HostData::I64(v) => Some(Raw::I64(v.as_mut_ptr())),
                HostData::I32(v) => Some(Raw::I32(v.as_mut_ptr())),
                HostData::F16(v) => Some(Raw::Bits16(v.as_mut_ptr().cast(), "float16")),
                HostData::Bool(v) => Some(Raw::Bytes(v.as_mut_ptr(), "bool")),
                _ => None,
            })
        })
        .py()?
        .flatten();
    let Some(raw) = raw else {
        return Ok(None);
    };
    let shape = IxDyn(t.shape());
    let owner = Bound::new(py, Storage { _tensor: keep })?.into_any();
    // SAFETY: each pointer is the start of a live host buffer of `t.numel()` elements of its
    // type (the tensor's shape, row-major); `owner` holds a handle on that buffer, which gflow
    // neither frees nor reallocates while a second handle exists (module docs).
    let array = unsafe {
        match raw {
            Raw::F32(p) => wrap(p, shape, owner)?,
            Raw::F64(p) => wrap(p, shape, owner)?,
            Raw::I64(p) => wrap(p, shape, owner)?,
            Raw::I32(p) => wrap(p, shape, owner)?,
            Raw::Bits16(p, as_type) => wrap(p, shape, owner)?.call_method1("view", (as_type,))?,
            Raw::Bytes(p, as_type) => wrap(p, shape, owner)?.call_method1("view", (as_type,))?,
        }
    };
    Ok(Some(array))
}

/// A writable NumPy array over `shape` elements at `ptr`, its base object `owner`.
///
/// # Safety
/// `ptr` points at `shape`'s element count of initialised `T`s (row-major) that stay valid and
/// in place while `owner` lives.
unsafe fn wrap<'py, T: Element>(
    ptr: *mut T,
    shape: IxDyn,
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: as the caller promises; a Vec's pointer is non-null and aligned even when empty.
    let view = unsafe { ArrayViewD::from_shape_ptr(shape, ptr.cast_const()) };
    // SAFETY: `owner` keeps the buffer alive and unmoved (the caller's promise).
    Ok(unsafe { PyArrayDyn::borrow_from_array(&view, owner) }.into_any())
}

/// The elements of `array`, row-major, copied once into a `Vec` when its dtype is exactly
/// `T`'s (any strides); `None` for another dtype.
pub fn read_exact<T: Element + Copy>(array: &Bound<'_, PyAny>) -> PyResult<Option<Vec<T>>> {
    let Ok(a) = array.cast::<PyArrayDyn<T>>() else {
        return Ok(None);
    };
    let ro = a.try_readonly()?;
    Ok(Some(match ro.as_slice() {
        Ok(s) if a.is_c_contiguous() => s.to_vec(),
        _ => ro.as_array().iter().copied().collect(),
    }))
}

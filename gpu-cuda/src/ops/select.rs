//! Selection kernels: `where`, triangle masks (tril/triu) and arg-reductions (argmax/argmin).

use cudarc::driver::PushKernelArg;
use gflow_core::{DType, Error, Result};

use crate::launch::threads;
use crate::memory::{Buf, Float};
use crate::{CudaBackend, CudaStorage, device_error};

/// [`Backend::select`](gflow_core::backend::Backend::select) on this device (any dtype, as
/// words of its size).
pub(crate) fn select(
    c: &CudaBackend,
    [cond, a, b]: [&CudaStorage; 3],
    shapes: [&[usize]; 3],
    out_shape: &[usize],
) -> Result<CudaStorage> {
    let Buf::Bool(cs) = &cond.buf else {
        return Err(Error::DTypeMismatch {
            expected: DType::Bool,
            got: cond.dtype(),
        });
    };
    let n: usize = out_shape.iter().product();
    let out = c.alloc_like(a.dtype(), n)?;
    if n > 0 {
        let (nd, meta) = c.broadcast_meta(&shapes, out_shape)?;
        // SAFETY: where_* takes (cond, a, b, out of n elements, n, nd, meta of 4 * nd): the
        // strides address each input inside its length; a, b and out share the word size.
        unsafe {
            c.launch(&format!("where_{}", a.words()), threads(n), |l| {
                l.arg(cs);
                arg_buf!(l, &a.buf);
                arg_buf!(l, &b.buf);
                arg_buf!(l, &out.buf);
                l.arg(&n).arg(&nd).arg(&meta);
            })
        }?;
    }
    Ok(out)
}

/// [`Backend::triangle`](gflow_core::backend::Backend::triangle) on this device (any dtype, as
/// words of its size).
pub(crate) fn triangle(
    c: &CudaBackend,
    x: &CudaStorage,
    shape: &[usize],
    k: i64,
    upper: bool,
    origin: (usize, usize),
) -> Result<CudaStorage> {
    let out = c.alloc_like(x.dtype(), x.len)?;
    let n = x.len;
    if n == 0 {
        return Ok(out);
    }
    let d = shape.len();
    let (rows, cols) = (shape[d - 2], shape[d - 1]);
    let name = format!("triangle_{}", x.words());
    let upper = i32::from(upper);
    // SAFETY: triangle_w* takes (x of n words, out of n words, n, rows, cols, k, upper, origin
    // row, origin column); n > 0 elements means rows and cols are positive.
    unsafe {
        c.launch(&name, threads(n), |l| {
            arg_buf!(l, &x.buf);
            arg_buf!(l, &out.buf);
            l.arg(&n).arg(&rows).arg(&cols).arg(&k).arg(&upper);
            l.arg(&origin.0).arg(&origin.1);
        })
    }?;
    Ok(out)
}

/// [`Backend::arg_reduce`](gflow_core::backend::Backend::arg_reduce) on this device.
pub(crate) fn arg_reduce(
    c: &CudaBackend,
    x: &CudaStorage,
    shape: &[usize],
    dim: usize,
    max: bool,
) -> Result<CudaStorage> {
    by_float!(x, "arg_reduce", T => c.arg_reduce_t::<T>(x, shape, dim, max))
}

/// [`Backend::argsort`](gflow_core::backend::Backend::argsort) on this device: one thread per
/// element counts the elements before it in the order (O(len) each).
pub(crate) fn argsort(
    c: &CudaBackend,
    x: &CudaStorage,
    shape: &[usize],
    dim: usize,
    descending: bool,
) -> Result<CudaStorage> {
    by_float!(x, "argsort", T => c.argsort_t::<T>(x, shape, dim, descending))
}

/// [`Backend::cumsum`](gflow_core::backend::Backend::cumsum) on this device: one thread per
/// line.
pub(crate) fn cumsum(
    c: &CudaBackend,
    x: &CudaStorage,
    shape: &[usize],
    dim: usize,
) -> Result<CudaStorage> {
    by_float!(x, "cumsum", T => c.cumsum_t::<T>(x, shape, dim))
}

impl CudaBackend {
    fn cumsum_t<T: Float>(
        &self,
        x: &CudaStorage,
        shape: &[usize],
        dim: usize,
    ) -> Result<CudaStorage> {
        let n = x.len;
        let (outer, len) = (shape[..dim].iter().product::<usize>(), shape[dim]);
        let inner: usize = shape[dim + 1..].iter().product();
        let out = self
            .stream
            .alloc_zeros::<T>(n.max(1))
            .map_err(device_error)?;
        if n > 0 {
            let xs = self.float::<T>(x)?;
            // SAFETY: cumsum_* takes (x of outer * len * inner, out of as many, outer, len,
            // inner).
            unsafe {
                self.launch(
                    &format!("cumsum_{}", T::SUFFIX),
                    threads(outer * inner),
                    |l| {
                        l.arg(xs).arg(&out).arg(&outer).arg(&len).arg(&inner);
                    },
                )
            }?;
        }
        Ok(T::wrap(out, n))
    }

    fn argsort_t<T: Float>(
        &self,
        x: &CudaStorage,
        shape: &[usize],
        dim: usize,
        descending: bool,
    ) -> Result<CudaStorage> {
        let n = x.len;
        let (len, inner) = (shape[dim], shape[dim + 1..].iter().product::<usize>());
        let out = self
            .stream
            .alloc_zeros::<i64>(n.max(1))
            .map_err(device_error)?;
        if n > 0 {
            let xs = self.float::<T>(x)?;
            let desc = i32::from(descending);
            // SAFETY: argsort_* takes (x of n, out of n, n, len, inner, desc), n a multiple of
            // len * inner.
            unsafe {
                self.launch(&format!("argsort_{}", T::SUFFIX), threads(n), |l| {
                    l.arg(xs).arg(&out).arg(&n).arg(&len).arg(&inner).arg(&desc);
                })
            }?;
        }
        Ok(CudaStorage {
            buf: Buf::I64(out),
            len: n,
        })
    }

    fn arg_reduce_t<T: Float>(
        &self,
        x: &CudaStorage,
        shape: &[usize],
        dim: usize,
        max: bool,
    ) -> Result<CudaStorage> {
        let (outer, len) = (shape[..dim].iter().product::<usize>(), shape[dim]);
        let inner: usize = shape[dim + 1..].iter().product();
        // zeros: a line of no element has index 0 (as the host's)
        let out = self
            .stream
            .alloc_zeros::<i64>((outer * inner).max(1))
            .map_err(device_error)?;
        if outer * inner * len > 0 {
            let xs = self.float::<T>(x)?;
            let max = i32::from(max);
            // SAFETY: arg_reduce_* takes (x of outer * len * inner, out of outer * inner, outer,
            // len, inner, max).
            unsafe {
                self.launch(
                    &format!("arg_reduce_{}", T::SUFFIX),
                    threads(outer * inner),
                    |l| {
                        l.arg(xs)
                            .arg(&out)
                            .arg(&outer)
                            .arg(&len)
                            .arg(&inner)
                            .arg(&max);
                    },
                )
            }?;
        }
        Ok(CudaStorage {
            buf: Buf::I64(out),
            len: outer * inner,
        })
    }
}

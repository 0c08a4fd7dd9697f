//! Selection kernels: triangle masks (tril/triu) and arg-reductions (argmax/argmin).

use cudarc::driver::PushKernelArg;
use gflow_core::Result;

use crate::launch::threads;
use crate::memory::{Buf, Float};
use crate::{CudaBackend, CudaStorage, device_error};

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
    let name = if x.dtype().size() == 4 {
        "triangle_w4"
    } else {
        "triangle_w8"
    };
    let upper = i32::from(upper);
    // SAFETY: triangle_w* takes (x of n words, out of n words, n, rows, cols, k, upper, origin
    // row, origin column); n > 0 elements means rows and cols are positive.
    unsafe {
        c.launch(name, threads(n), |l| {
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

impl CudaBackend {
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
                        l.arg(xs).arg(&out).arg(&outer).arg(&len).arg(&inner).arg(&max);
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

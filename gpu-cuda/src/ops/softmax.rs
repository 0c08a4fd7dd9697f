//! (Log-)softmax over one dimension.

use cudarc::driver::PushKernelArg;
use gflow_core::Result;

use crate::launch::{blocks, threads};
use crate::memory::Float;
use crate::{CudaBackend, CudaStorage};

/// [`Backend::softmax`](gflow_core::backend::Backend::softmax) on this device.
pub(crate) fn softmax(
    c: &CudaBackend,
    x: &CudaStorage,
    shape: &[usize],
    dim: usize,
    log: bool,
) -> Result<CudaStorage> {
    by_float!(x, "softmax", T => c.softmax_t::<T>(x, shape, dim, log))
}

impl CudaBackend {
    pub(crate) fn softmax_t<T: Float>(
        &self,
        x: &CudaStorage,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<CudaStorage> {
        let out = self.alloc::<T>(x.len)?;
        let outer: usize = shape[..dim].iter().product();
        let len = shape[dim];
        let inner: usize = shape[dim + 1..].iter().product();
        let log = i32::from(log);
        if x.len > 0 {
            let xs = self.float::<T>(x)?;
            if inner == 1 {
                // SAFETY: softmax_rows_* takes (x, out of outer * len, lines, len, log) and
                // runs with BLOCK threads per block.
                unsafe {
                    self.launch(&format!("softmax_rows_{}", T::SUFFIX), blocks(outer), |l| {
                        l.arg(xs).arg(&out).arg(&outer).arg(&len).arg(&log);
                    })
                }?;
            } else {
                // SAFETY: softmax_strided_* takes (x, out of outer * len * inner, outer, len,
                // inner, log).
                unsafe {
                    self.launch(
                        &format!("softmax_strided_{}", T::SUFFIX),
                        threads(outer * inner),
                        |l| {
                            l.arg(xs)
                                .arg(&out)
                                .arg(&outer)
                                .arg(&len)
                                .arg(&inner)
                                .arg(&log);
                        },
                    )
                }?;
            }
        }
        Ok(T::wrap(out, x.len))
    }
}

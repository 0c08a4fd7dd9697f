//! Row gathers (embedding lookups) and scatter-adds.

use cudarc::driver::CudaSlice;
use cudarc::driver::PushKernelArg;
use gflow_core::{DType, Error, Result};

use crate::launch::threads;
use crate::memory::{Buf, Float};
use crate::{CudaBackend, CudaStorage, device_error};

/// [`Backend::gather_rows`](gflow_core::backend::Backend::gather_rows) on this device.
pub(crate) fn gather_rows(
    c: &CudaBackend,
    table: &CudaStorage,
    rows: usize,
    row_len: usize,
    indices: &CudaStorage,
) -> Result<CudaStorage> {
    let ix = c.check_indices(indices, rows, "gather_rows")?;
    let n_idx = indices.len;
    let out = c.alloc_like(table.dtype(), n_idx * row_len)?;
    if n_idx * row_len > 0 {
        let name = format!("gather_rows_{}", table.words());
        // SAFETY: gather_rows_w* takes (table of rows * len, idx (checked in range), out of
        // n_idx * len, n_idx, len), in words of the dtype's size.
        unsafe {
            c.launch(&name, threads(n_idx * row_len), |l| {
                arg_buf!(l, &table.buf);
                l.arg(ix);
                arg_buf!(l, &out.buf);
                l.arg(&n_idx).arg(&row_len);
            })
        }?;
    }
    Ok(out)
}

/// [`Backend::scatter_add_rows`](gflow_core::backend::Backend::scatter_add_rows) on this device.
pub(crate) fn scatter_add_rows(
    c: &CudaBackend,
    src: &CudaStorage,
    rows: usize,
    row_len: usize,
    indices: &CudaStorage,
) -> Result<CudaStorage> {
    by_float!(src, "scatter_add_rows", T => c.scatter_add_t::<T>(src, rows, row_len, indices))
}

impl CudaBackend {
    /// Host-side check of gather/scatter indices (`0..rows`), as core's contract requires.
    pub(crate) fn check_indices<'a>(
        &self,
        indices: &'a CudaStorage,
        rows: usize,
        op: &'static str,
    ) -> Result<&'a CudaSlice<i64>> {
        let Buf::I64(ix) = &indices.buf else {
            return Err(Error::DTypeMismatch {
                expected: DType::I64,
                got: indices.dtype(),
            });
        };
        let host = if indices.len == 0 {
            vec![]
        } else {
            self.stream
                .clone_dtoh(&ix.slice(..indices.len))
                .map_err(device_error)?
        };
        if let Some(i) = host.iter().find(|&&i| i < 0 || i as usize >= rows) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("index {i} is outside 0..{rows}"),
            });
        }
        Ok(ix)
    }

    pub(crate) fn scatter_add_t<T: Float>(
        &self,
        src: &CudaStorage,
        rows: usize,
        row_len: usize,
        indices: &CudaStorage,
    ) -> Result<CudaStorage> {
        let ix = self.check_indices(indices, rows, "scatter_add_rows")?;
        let out = self
            .stream
            .alloc_zeros::<T>((rows * row_len).max(1))
            .map_err(device_error)?;
        let n_idx = indices.len;
        if n_idx * row_len > 0 {
            let xs = self.float::<T>(src)?;
            // SAFETY: scatter_add_rows_* takes (src of n_idx * len, idx (checked in range), out
            // of rows * len, n_idx, len).
            unsafe {
                self.launch(
                    &format!("scatter_add_rows_{}", T::SUFFIX),
                    threads(n_idx * row_len),
                    |l| {
                        l.arg(xs).arg(ix).arg(&out).arg(&n_idx).arg(&row_len);
                    },
                )
            }?;
        }
        Ok(T::wrap(out, rows * row_len))
    }
}

//! Row gathers (embedding lookups, whole or from a piece of a table split over its rows) and
//! scatter-adds; `torch.gather` along a dim.

use cudarc::driver::PushKernelArg;
use gflow_core::Result;
use gflow_core::shape::strides;

use crate::launch::{Meta, threads};
use crate::memory::Float;
use crate::{CudaBackend, CudaStorage, device_error};

/// [`Backend::gather_rows`](gflow_core::backend::Backend::gather_rows) on this device.
pub(crate) fn gather_rows(
    c: &CudaBackend,
    table: &CudaStorage,
    rows: usize,
    row_len: usize,
    indices: &CudaStorage,
) -> Result<CudaStorage> {
    let mut keep = None;
    let ix = c.indices(indices, &mut keep)?;
    let n_idx = indices.len;
    let out = c.alloc_like(table.dtype(), n_idx * row_len)?;
    if n_idx * row_len > 0 {
        let name = format!("gather_rows_{}", table.words());
        // SAFETY: gather_rows_w* takes (table of rows * len, idx, out of n_idx * len, n_idx,
        // len, rows), in words of the dtype's size; an index outside 0..rows reads nothing.
        unsafe {
            c.launch(&name, threads(n_idx * row_len), |l| {
                arg_buf!(l, &table.buf);
                l.arg(ix);
                arg_buf!(l, &out.buf);
                l.arg(&n_idx).arg(&row_len).arg(&rows);
            })
        }?;
    }
    Ok(out)
}

/// [`Backend::gather_rows_partial`](gflow_core::backend::Backend::gather_rows_partial) on this
/// device.
pub(crate) fn gather_rows_partial(
    c: &CudaBackend,
    table: &CudaStorage,
    rows: usize,
    row_len: usize,
    idx: &CudaStorage,
    start: usize,
) -> Result<CudaStorage> {
    let mut keep = None;
    let ix = c.indices(idx, &mut keep)?;
    let n_idx = idx.len;
    let out = c.alloc_like(table.dtype(), n_idx * row_len)?;
    if n_idx * row_len > 0 {
        let start = start as i64;
        // SAFETY: gather_rows_partial_w* takes (table of rows * len, idx, out of n_idx * len,
        // n_idx, len, rows, start) in words of the dtype's size; only rows inside the table are
        // read.
        unsafe {
            c.launch(
                &format!("gather_rows_partial_{}", table.words()),
                threads(n_idx * row_len),
                |l| {
                    arg_buf!(l, &table.buf);
                    l.arg(ix);
                    arg_buf!(l, &out.buf);
                    l.arg(&n_idx).arg(&row_len).arg(&rows).arg(&start);
                },
            )
        }?;
    }
    Ok(out)
}

/// [`Backend::gather_dim`](gflow_core::backend::Backend::gather_dim) on this device.
pub(crate) fn gather_dim(
    c: &CudaBackend,
    x: &CudaStorage,
    x_shape: &[usize],
    dim: usize,
    idx: &CudaStorage,
    idx_shape: &[usize],
) -> Result<CudaStorage> {
    let mut keep = None;
    let ix = c.indices(idx, &mut keep)?;
    let n = idx.len;
    let out = c.alloc_like(x.dtype(), n)?;
    if n > 0 {
        let meta = Meta::new("gather", idx_shape.iter().copied().chain(strides(x_shape)))?;
        let (nd, d, dim_len) = (idx_shape.len() as i32, dim as i32, x_shape[dim]);
        // SAFETY: gather_dim_w* takes (x, idx, out of n elements, n, nd, dim, dim_len, meta of
        // 2 * nd); core checked idx's shape against x's, and indices outside 0..dim_len are
        // not read.
        unsafe {
            c.launch(&format!("gather_dim_{}", x.words()), threads(n), |l| {
                arg_buf!(l, &x.buf);
                l.arg(ix);
                arg_buf!(l, &out.buf);
                l.arg(&n).arg(&nd).arg(&d).arg(&dim_len).arg(&meta);
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
    pub(crate) fn scatter_add_t<T: Float>(
        &self,
        src: &CudaStorage,
        rows: usize,
        row_len: usize,
        indices: &CudaStorage,
    ) -> Result<CudaStorage> {
        let mut keep = None;
        let ix = self.indices(indices, &mut keep)?;
        let out = self
            .stream
            .alloc_zeros::<T>((rows * row_len).max(1))
            .map_err(device_error)?;
        let n_idx = indices.len;
        if n_idx * row_len > 0 {
            let xs = self.float::<T>(src)?;
            // SAFETY: scatter_add_rows_* takes (src of n_idx * len, idx, out of rows * len,
            // n_idx, len, rows); an index outside 0..rows writes nothing.
            unsafe {
                self.launch(
                    &format!("scatter_add_rows_{}", T::SUFFIX),
                    threads(n_idx * row_len),
                    |l| {
                        l.arg(xs)
                            .arg(ix)
                            .arg(&out)
                            .arg(&n_idx)
                            .arg(&row_len)
                            .arg(&rows);
                    },
                )
            }?;
        }
        Ok(T::wrap(out, rows * row_len))
    }
}

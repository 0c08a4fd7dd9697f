//! LayerNorm and RMSNorm, forward and backward, as core's host kernels compute them: a block per
//! row for the output and the input's gradient; the parameters' gradients as column sums over
//! parts of the rows, then summed over the parts.

use cudarc::driver::{CudaSlice, PushKernelArg};
use gflow_core::backend::ReduceKind;
use gflow_core::{Error, Result};

use crate::launch::{blocks, threads};
use crate::memory::Float;
use crate::{CudaBackend, CudaStorage};

/// Threads the parameters' column sums run on at least (parts of the rows times columns).
const WIDE: usize = 32768;

/// [`Backend::norm`](gflow_core::backend::Backend::norm) on this device.
pub(crate) fn norm(
    c: &CudaBackend,
    x: &CudaStorage,
    params: &[&CudaStorage],
    cols: usize,
    eps: f64,
    center: bool,
    affine: [bool; 2],
) -> Result<CudaStorage> {
    let mut given = params.iter().copied();
    let w = if affine[0] { given.next() } else { None };
    let b = if affine[1] { given.next() } else { None };
    by_float!(x, "norm", T => c.norm_t::<T>(x, [w, b], cols, eps, center))
}

/// [`Backend::norm_input_grad`](gflow_core::backend::Backend::norm_input_grad) on this device.
pub(crate) fn norm_input_grad(
    c: &CudaBackend,
    x: &CudaStorage,
    g: &CudaStorage,
    weight: &[&CudaStorage],
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<CudaStorage> {
    let w = weight.first().copied();
    by_float!(x, "norm_input_grad", T => c.norm_input_grad_t::<T>(x, g, w, cols, eps, center))
}

/// [`Backend::norm_param_grad`](gflow_core::backend::Backend::norm_param_grad) on this device.
pub(crate) fn norm_param_grad(
    c: &CudaBackend,
    x: &CudaStorage,
    g: &CudaStorage,
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<CudaStorage> {
    by_float!(x, "norm_param_grad", T => c.norm_param_grad_t::<T>(x, g, cols, eps, center))
}

/// `x`'s rows of `cols`, or an error for a length that is not whole rows.
fn rows_of(x: &CudaStorage, cols: usize, op: &str) -> Result<usize> {
    if cols == 0 || !x.len.is_multiple_of(cols) {
        return Err(Error::Internal(format!(
            "{op}: {} elements are not rows of {cols}",
            x.len
        )));
    }
    Ok(x.len / cols)
}

/// An error unless `b` holds `len` elements.
fn check_len(b: &CudaStorage, len: usize, what: &str) -> Result<()> {
    if b.len != len {
        return Err(Error::Internal(format!(
            "norm: {what} holds {} elements, not {len}",
            b.len
        )));
    }
    Ok(())
}

impl CudaBackend {
    /// A norm parameter's elements (`cols` of them) and whether it is given; an absent one is
    /// never read, so `stand_in` (x) takes its pointer.
    fn norm_param<'a, T: Float>(
        &self,
        p: Option<&'a CudaStorage>,
        cols: usize,
        stand_in: &'a CudaSlice<T>,
    ) -> Result<(&'a CudaSlice<T>, i32)> {
        match p {
            Some(p) => {
                check_len(p, cols, "a parameter")?;
                Ok((self.float::<T>(p)?, 1))
            }
            None => Ok((stand_in, 0)),
        }
    }

    fn norm_t<T: Float>(
        &self,
        x: &CudaStorage,
        [w, b]: [Option<&CudaStorage>; 2],
        cols: usize,
        eps: f64,
        center: bool,
    ) -> Result<CudaStorage> {
        let rows = rows_of(x, cols, "norm")?;
        let out = self.alloc::<T>(x.len)?;
        let xs = self.float::<T>(x)?;
        let (ws, has_w) = self.norm_param(w, cols, xs)?;
        let (bs, has_b) = self.norm_param(b, cols, xs)?;
        if rows > 0 {
            let (eps, center) = (T::from_f64(eps), i32::from(center));
            // SAFETY: norm_* takes (x, w, b, out of rows * cols, rows, cols, eps, center,
            // has_w, has_b) and runs with BLOCK threads per block; w and b (cols each) are
            // read only when given.
            unsafe {
                self.launch(&format!("norm_{}", T::SUFFIX), blocks(rows), |l| {
                    l.arg(xs)
                        .arg(ws)
                        .arg(bs)
                        .arg(&out)
                        .arg(&rows)
                        .arg(&cols)
                        .arg(&eps)
                        .arg(&center)
                        .arg(&has_w)
                        .arg(&has_b);
                })
            }?;
        }
        Ok(T::wrap(out, x.len))
    }

    fn norm_input_grad_t<T: Float>(
        &self,
        x: &CudaStorage,
        g: &CudaStorage,
        w: Option<&CudaStorage>,
        cols: usize,
        eps: f64,
        center: bool,
    ) -> Result<CudaStorage> {
        let rows = rows_of(x, cols, "norm_input_grad")?;
        check_len(g, x.len, "the output gradient")?;
        let out = self.alloc::<T>(x.len)?;
        let (xs, gs) = (self.float::<T>(x)?, self.float::<T>(g)?);
        let (ws, has_w) = self.norm_param(w, cols, xs)?;
        if rows > 0 {
            let (eps, center) = (T::from_f64(eps), i32::from(center));
            // SAFETY: norm_input_grad_* takes (x, g, w, dx of rows * cols, rows, cols, eps,
            // center, has_w) and runs with BLOCK threads per block; w is read only when given.
            unsafe {
                self.launch(
                    &format!("norm_input_grad_{}", T::SUFFIX),
                    blocks(rows),
                    |l| {
                        l.arg(xs)
                            .arg(gs)
                            .arg(ws)
                            .arg(&out)
                            .arg(&rows)
                            .arg(&cols)
                            .arg(&eps)
                            .arg(&center)
                            .arg(&has_w);
                    },
                )
            }?;
        }
        Ok(T::wrap(out, x.len))
    }

    fn norm_param_grad_t<T: Float>(
        &self,
        x: &CudaStorage,
        g: &CudaStorage,
        cols: usize,
        eps: f64,
        center: bool,
    ) -> Result<CudaStorage> {
        let rows = rows_of(x, cols, "norm_param_grad")?;
        check_len(g, x.len, "the output gradient")?;
        if rows == 0 {
            return self.alloc_dtype(T::DTYPE, 2 * cols, true);
        }
        let (xs, gs) = (self.float::<T>(x)?, self.float::<T>(g)?);
        let stats = self.alloc::<T>(2 * rows)?;
        let (eps, center) = (T::from_f64(eps), i32::from(center));
        // SAFETY: norm_stats_* takes (x of rows * cols, stats of 2 * rows, rows, cols, eps,
        // center) and runs with BLOCK threads per block.
        unsafe {
            self.launch(&format!("norm_stats_{}", T::SUFFIX), blocks(rows), |l| {
                l.arg(xs)
                    .arg(&stats)
                    .arg(&rows)
                    .arg(&cols)
                    .arg(&eps)
                    .arg(&center);
            })
        }?;
        let parts = WIDE.div_ceil(cols).clamp(1, rows);
        let part_len = rows.div_ceil(parts);
        let parts = rows.div_ceil(part_len);
        let partial = self.alloc::<T>(parts * 2 * cols)?;
        // SAFETY: norm_param_part_* takes (x, g of rows * cols, stats of 2 * rows, out of
        // parts * 2 * cols, rows, cols, parts, part_len); parts * part_len covers the rows.
        unsafe {
            self.launch(
                &format!("norm_param_part_{}", T::SUFFIX),
                threads(parts * cols),
                |l| {
                    l.arg(xs)
                        .arg(gs)
                        .arg(&stats)
                        .arg(&partial)
                        .arg(&rows)
                        .arg(&cols)
                        .arg(&parts)
                        .arg(&part_len);
                },
            )
        }?;
        let partial = T::wrap(partial, parts * 2 * cols);
        if parts == 1 {
            return Ok(partial);
        }
        self.reduce_t::<T>(
            ReduceKind::Sum.code() as i32,
            &partial,
            &[parts, 2 * cols],
            &[0],
        )
    }
}

//! Reductions over dimensions: rows (long rows in parts), a block of dims, scattered dims.

use cudarc::driver::PushKernelArg;
use gflow_core::Result;
use gflow_core::backend::{Backend, ReduceKind};

use cudarc::driver::CudaSlice;

use crate::launch::{MAX_BLOCKS, blocks, threads};
use crate::memory::Float;
use crate::{CudaBackend, CudaStorage};

/// Threads a strided reduction keeps busy at least: outputs with long runs get more, shorter
/// runs.
const WIDE: usize = 1 << 15;
/// The shortest run a thread is given when runs are cut for [`WIDE`].
const MIN_RUN: usize = 32;

/// Elements one block of a row reduction should take at least before a row is cut in parts.
const PER_BLOCK: usize = 1 << 14;

/// [`Backend::reduce`](gflow_core::backend::Backend::reduce) on this device.
pub(crate) fn reduce(
    c: &CudaBackend,
    op: ReduceKind,
    x: &CudaStorage,
    shape: &[usize],
    dims: &[usize],
) -> Result<CudaStorage> {
    by_float!(x, "reduce", T => c.reduce_t::<T>(op.code() as i32, x, shape, dims))
}

/// Blocks a sum of squares uses at most (their partial sums are then added by one block).
const SQUARE_BLOCKS: usize = 1024;

/// [`Backend::sum_squares`](gflow_core::backend::Backend::sum_squares) on this device: each
/// block's share of the squares summed, then the blocks' partial sums.
pub(crate) fn sum_squares(c: &CudaBackend, x: &CudaStorage) -> Result<CudaStorage> {
    by_float!(x, "sum_squares", T => c.sum_squares_t::<T>(x))
}

impl CudaBackend {
    fn sum_squares_t<T: Float>(&self, x: &CudaStorage) -> Result<CudaStorage> {
        let n = x.len;
        let parts = n.div_ceil(PER_BLOCK).clamp(1, SQUARE_BLOCKS);
        let partial = self.alloc::<T>(parts)?;
        let xs = self.float::<T>(x)?;
        // SAFETY: sum_squares_* takes (x of n elements, partial of one element per block, n)
        // and runs with BLOCK threads per block on `parts` blocks.
        unsafe {
            self.launch(&format!("sum_squares_{}", T::SUFFIX), blocks(parts), |l| {
                l.arg(xs).arg(&partial).arg(&n);
            })
        }?;
        let partial = T::wrap(partial, parts);
        if parts == 1 {
            return Ok(partial);
        }
        self.reduce_t::<T>(ReduceKind::Sum.code() as i32, &partial, &[parts], &[0])
    }

    /// `x` viewed as (rows, count), each row reduced; a long row is cut in parts that a second
    /// pass combines, so a full reduction uses the whole device.
    pub(crate) fn reduce_rows<T: Float>(
        &self,
        code: i32,
        x: &CudaSlice<T>,
        rows: usize,
        count: usize,
    ) -> Result<CudaSlice<T>> {
        let parts = if rows >= MAX_BLOCKS / 4 {
            1
        } else {
            (count / PER_BLOCK).clamp(1, MAX_BLOCKS / rows.max(1))
        };
        let out = self.alloc::<T>(rows * parts)?;
        if rows > 0 {
            // SAFETY: reduce_rows_* takes (x of rows * count, out of rows * parts, rows, count,
            // parts, op) and runs with BLOCK threads per block.
            unsafe {
                self.launch(
                    &format!("reduce_rows_{}", T::SUFFIX),
                    blocks(rows * parts),
                    |l| {
                        l.arg(x)
                            .arg(&out)
                            .arg(&rows)
                            .arg(&count)
                            .arg(&parts)
                            .arg(&code);
                    },
                )
            }?;
        }
        if parts > 1 {
            return self.reduce_rows(code, &out, rows, parts);
        }
        Ok(out)
    }

    /// `x` viewed as (outer, count, inner), reduced over count: one thread per output.
    fn reduce_strided<T: Float>(
        &self,
        code: i32,
        x: &CudaSlice<T>,
        outer: usize,
        count: usize,
        inner: usize,
    ) -> Result<CudaSlice<T>> {
        let n_out = outer * inner;
        let out = self.alloc::<T>(n_out)?;
        if n_out > 0 {
            // SAFETY: reduce_strided_* takes (x of outer * count * inner, out of
            // outer * inner, outer, count, inner, op).
            unsafe {
                self.launch(
                    &format!("reduce_strided_{}", T::SUFFIX),
                    threads(n_out),
                    |l| {
                        l.arg(x)
                            .arg(&out)
                            .arg(&outer)
                            .arg(&count)
                            .arg(&inner)
                            .arg(&code);
                    },
                )
            }?;
        }
        Ok(out)
    }

    pub(crate) fn reduce_t<T: Float>(
        &self,
        code: i32,
        x: &CudaStorage,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<CudaStorage> {
        let n_out: usize = (0..shape.len())
            .filter(|d| !dims.contains(d))
            .map(|d| shape[d])
            .product();
        let (Some(&first), Some(&last)) = (dims.first(), dims.last()) else {
            // nothing reduced: the data as it is
            return self.copy(x);
        };
        if last - first + 1 == dims.len() {
            // the reduced dims are one block: (outer, count, inner)
            let outer: usize = shape[..first].iter().product();
            let count: usize = shape[first..=last].iter().product();
            let inner: usize = shape[last + 1..].iter().product();
            let xs = self.float::<T>(x)?;
            if inner == 1 {
                return Ok(T::wrap(self.reduce_rows(code, xs, outer, count)?, n_out));
            }
            // Few outputs with long runs (a bias's gradient: 768 column sums of 2048 rows):
            // the runs cut into `p` parts, each its own output, then the parts reduced.
            let want = (WIDE / n_out.max(1)).min(count / MIN_RUN);
            let out = match (2..=want).rev().find(|p| count.is_multiple_of(*p)) {
                Some(p) => {
                    let partial = self.reduce_strided(code, xs, outer * p, count / p, inner)?;
                    self.reduce_strided(code, &partial, outer, p, inner)?
                }
                None => self.reduce_strided(code, xs, outer, count, inner)?,
            };
            return Ok(T::wrap(out, n_out));
        }
        // scattered dims: move them last, then reduce rows
        let perm: Vec<usize> = (0..shape.len())
            .filter(|d| !dims.contains(d))
            .chain(dims.iter().copied())
            .collect();
        let moved = self.permute(x, shape, &perm)?;
        let count = x.len.checked_div(n_out).unwrap_or(0);
        let out = self.reduce_rows(code, self.float::<T>(&moved)?, n_out, count)?;
        Ok(T::wrap(out, n_out))
    }
}

//! The one data-movement kernel, strided box copies (permute, slice and cat are made of it).

use cudarc::driver::PushKernelArg;
use gflow_core::shape::StridedCopy;
use gflow_core::{DType, Result};

use crate::launch::{Meta, merge_dims, threads};
use crate::{CudaBackend, CudaStorage};

/// The boxes of `copies` between their inputs and a new contiguous buffer (see
/// [`Backend::copy_boxes`](gflow_core::backend::Backend::copy_boxes)).
pub(crate) fn copy_boxes(
    c: &CudaBackend,
    dtype: DType,
    len: usize,
    put: bool,
    copies: &[(&CudaStorage, StridedCopy)],
) -> Result<CudaStorage> {
    let out = c.alloc_like(dtype, len)?;
    for (x, copy) in copies {
        c.strided(x, &out, copy, put)?;
    }
    Ok(out)
}

impl CudaBackend {
    /// `copy` between `x` and `out`: `x`'s box gathered into the contiguous `out` (`put`
    /// false), or the contiguous `x` scattered into `out`'s box (`put` true).
    pub(crate) fn strided(
        &self,
        x: &CudaStorage,
        out: &CudaStorage,
        copy: &StridedCopy,
        put: bool,
    ) -> Result<()> {
        let (shape, base) = (&copy.extent, copy.base);
        let n: usize = shape.iter().product();
        if n == 0 {
            return Ok(());
        }
        let (dims, steps) = merge_dims(shape, std::slice::from_ref(&copy.strides));
        let meta = Meta::new("strided copy", dims.iter().chain(&steps[0]).copied())?;
        let name = format!("strided_{}", x.words());
        let (nd, put) = (dims.len() as i32, i32::from(put));
        // SAFETY: strided_w* takes (x, out, n, nd, meta of 2 * nd, base, put); core checked
        // that the box lies inside both buffers, whose words are this dtype's size.
        unsafe {
            self.launch(&name, threads(n), |l| {
                arg_buf!(l, &x.buf);
                arg_buf!(l, &out.buf);
                l.arg(&n).arg(&nd).arg(&meta).arg(&base).arg(&put);
            })
        }?;
        Ok(())
    }
}

//! Casts between dtypes on the device by bits (`kernels/convert.cu`), and I32 indices widened
//! to the I64 the index kernels read.

use cudarc::driver::{CudaSlice, PushKernelArg};
use gflow_core::{DType, Error, Result};

use crate::launch::threads;
use crate::memory::Buf;
use crate::{CudaBackend, CudaStorage, device_error};

/// The dtypes [`cast`] takes to every dtype.
pub(crate) const CAST_SOURCES: [DType; 5] =
    [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32];

/// [`Backend::cast`](gflow_core::backend::Backend::cast) on this device: from a dtype of
/// [`CAST_SOURCES`] to any dtype, bit for bit the host's casts.
pub(crate) fn cast(c: &CudaBackend, x: &CudaStorage, dtype: DType) -> Result<CudaStorage> {
    let from = x.dtype();
    if from == dtype {
        return c.copy(x);
    }
    if !CAST_SOURCES.contains(&from) {
        return Err(device_error(format!(
            "cast: CUDA casts from {CAST_SOURCES:?}, not from {from}"
        )));
    }
    let out = c.alloc_like(dtype, x.len)?;
    let n = x.len;
    if n > 0 {
        let (f, t) = (from.code() as i32, dtype.code() as i32);
        // SAFETY: convert takes (x of n elements of dtype `from`, out of n elements of dtype
        // `to`, n, from, to); both buffers were made for those dtypes.
        unsafe {
            c.launch("convert", threads(n), |l| {
                arg_buf!(l, &x.buf);
                arg_buf!(l, &out.buf);
                l.arg(&n).arg(&f).arg(&t);
            })
        }?;
    }
    Ok(out)
}

impl CudaBackend {
    /// The device indices of an I64 or I32 `idx` (an I32 one cast on the device into `keep`).
    pub(crate) fn indices<'a>(
        &self,
        idx: &'a CudaStorage,
        keep: &'a mut Option<CudaStorage>,
    ) -> Result<&'a CudaSlice<i64>> {
        let wide = if idx.dtype() == DType::I32 {
            &*keep.insert(cast(self, idx, DType::I64)?)
        } else {
            idx
        };
        match &wide.buf {
            Buf::I64(ix) => Ok(ix),
            _ => Err(Error::DTypeMismatch {
                expected: DType::I64,
                got: idx.dtype(),
            }),
        }
    }
}

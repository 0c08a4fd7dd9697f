//! Matrix products on cuBLAS (strided batched GEMM).

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use gflow_core::backend::MatmulDims;
use gflow_core::{DType, Result};

use crate::memory::Float;
use crate::{CudaBackend, CudaStorage, device_error};

/// [`Backend::matmul`](gflow_core::backend::Backend::matmul) on this device.
pub(crate) fn matmul(
    c: &CudaBackend,
    a: &CudaStorage,
    b: &CudaStorage,
    d: MatmulDims,
) -> Result<CudaStorage> {
    match a.dtype() {
        DType::F32 => c.matmul_t::<f32>(a, b, d, 1.0, 0.0),
        DType::F64 => c.matmul_t::<f64>(a, b, d, 1.0, 0.0),
        other => Err(device_error(format!(
            "matmul: cuBLAS computes in f32 and f64, not {other}"
        ))),
    }
}

impl CudaBackend {
    pub(crate) fn matmul_t<T: Float>(
        &self,
        a: &CudaStorage,
        b: &CudaStorage,
        d: MatmulDims,
        one: T,
        zero: T,
    ) -> Result<CudaStorage>
    where
        CudaBlas: Gemm<T>,
    {
        let n_out = d.batch * d.m * d.n;
        if n_out == 0 || d.k == 0 {
            let out = self
                .stream
                .alloc_zeros::<T>(n_out.max(1))
                .map_err(device_error)?;
            return Ok(T::wrap(out, n_out));
        }
        let int = |v: usize| {
            i32::try_from(v).map_err(|_| {
                device_error(format!("matmul: size {v} exceeds cuBLAS's 32-bit range"))
            })
        };
        // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets B first. A row-major
        // (k, n) B read column-major is B^T with leading dimension n (no transpose needed);
        // B stored transposed, (n, k), is B with leading dimension k (transpose it).
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let cfg = StridedBatchedConfig {
            gemm: GemmConfig {
                transa: op(d.b_trans),
                transb: op(d.a_trans),
                m: int(d.n)?,
                n: int(d.m)?,
                k: int(d.k)?,
                alpha: one,
                lda: int(if d.b_trans { d.k } else { d.n })?,
                ldb: int(if d.a_trans { d.m } else { d.k })?,
                beta: zero,
                ldc: int(d.n)?,
            },
            batch_size: int(d.batch)?,
            stride_a: if d.b_batched { (d.k * d.n) as i64 } else { 0 },
            stride_b: (d.m * d.k) as i64,
            stride_c: (d.m * d.n) as i64,
        };
        let mut out = self.alloc::<T>(n_out)?;
        // SAFETY: the shapes above address a (batch * m * k), b ((1 or batch) * k * n) and
        // out (batch * m * n) inside their lengths.
        unsafe {
            self.blas
                .gemm_strided_batched(cfg, self.float::<T>(b)?, self.float::<T>(a)?, &mut out)
        }
        .map_err(device_error)?;
        Ok(T::wrap(out, n_out))
    }
}

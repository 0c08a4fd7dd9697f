//! Elementwise kernels: unary functions, the affine map (scale, add_scalar), binary functions
//! and comparisons with broadcasting.

use cudarc::driver::PushKernelArg;
use gflow_core::backend::{AFFINE_CODE, AdamStep, BinaryOp, CmpOp, UnaryOp};
use gflow_core::shape::broadcast_strides;
use gflow_core::{DType, Error, Result};

use crate::launch::{Meta, merge_dims, threads};
use crate::memory::{Buf, Float};
use crate::{CudaBackend, CudaStorage};

/// [`Backend::unary`](gflow_core::backend::Backend::unary) on this device.
pub(crate) fn unary(c: &CudaBackend, op: UnaryOp, x: &CudaStorage) -> Result<CudaStorage> {
    by_float!(x, "unary", T => c.unary_t::<T>(op.code() as i32, x, 0.0, 0.0))
}

/// [`Backend::binary`](gflow_core::backend::Backend::binary) on this device.
pub(crate) fn binary(
    c: &CudaBackend,
    op: BinaryOp,
    a: &CudaStorage,
    a_shape: &[usize],
    b: &CudaStorage,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<CudaStorage> {
    let code = op.code() as i32;
    by_float!(a, "binary", T => c.binary_t::<T>(code, a, a_shape, b, b_shape, out_shape))
}

/// [`Backend::adam_step`](gflow_core::backend::Backend::adam_step) on this device: one kernel
/// for f32 and f64 buffers of one length (`false` for others).
pub(crate) fn adam_step(
    c: &CudaBackend,
    p: &CudaStorage,
    g: &CudaStorage,
    moments: [&CudaStorage; 2],
    h: &AdamStep,
) -> Result<bool> {
    let [m, v] = moments;
    if [g, m, v]
        .iter()
        .any(|b| b.len != p.len || b.dtype() != p.dtype())
    {
        return Ok(false);
    }
    match p.dtype() {
        DType::F32 => c.adam_t::<f32>(p, g, moments, h),
        DType::F64 => c.adam_t::<f64>(p, g, moments, h),
        _ => Ok(false),
    }
}

/// [`Backend::compare`](gflow_core::backend::Backend::compare) on this device: a Bool word per
/// element.
pub(crate) fn compare(
    c: &CudaBackend,
    op: CmpOp,
    a: &CudaStorage,
    a_shape: &[usize],
    b: &CudaStorage,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<CudaStorage> {
    let code = op.code() as i32;
    by_float!(a, "compare", T => c.compare_t::<T>(code, [a, b], [a_shape, b_shape], out_shape))
}

/// [`Backend::unary_mul`](gflow_core::backend::Backend::unary_mul) on this device: `g *
/// op(x)` in one pass.
pub(crate) fn unary_mul(
    c: &CudaBackend,
    op: UnaryOp,
    x: &CudaStorage,
    g: &CudaStorage,
) -> Result<CudaStorage> {
    by_float!(x, "unary_mul", T => c.unary_mul_t::<T>(op.code() as i32, x, g))
}

/// [`Backend::scale`](gflow_core::backend::Backend::scale) on this device.
pub(crate) fn scale(c: &CudaBackend, x: &CudaStorage, s: f64) -> Result<CudaStorage> {
    by_float!(x, "scale", T => c.unary_t::<T>(AFFINE_CODE as i32, x, s, 0.0))
}

/// [`Backend::add_scalar`](gflow_core::backend::Backend::add_scalar) on this device.
pub(crate) fn add_scalar(c: &CudaBackend, x: &CudaStorage, s: f64) -> Result<CudaStorage> {
    by_float!(x, "add_scalar", T => c.unary_t::<T>(AFFINE_CODE as i32, x, 1.0, s))
}

impl CudaBackend {
    pub(crate) fn unary_t<T: Float>(
        &self,
        code: i32,
        x: &CudaStorage,
        a: f64,
        b: f64,
    ) -> Result<CudaStorage> {
        let out = self.alloc::<T>(x.len)?;
        if x.len > 0 {
            let (n, a, b) = (x.len, T::from_f64(a), T::from_f64(b));
            let xs = self.float::<T>(x)?;
            // SAFETY: the arguments match unary_* (x, out of n elements, n, op, a, b).
            unsafe {
                self.launch(&format!("unary_{}", T::SUFFIX), threads(n), |l| {
                    l.arg(xs).arg(&out).arg(&n).arg(&code).arg(&a).arg(&b);
                })
            }?;
        }
        Ok(T::wrap(out, x.len))
    }

    fn unary_mul_t<T: Float>(
        &self,
        code: i32,
        x: &CudaStorage,
        g: &CudaStorage,
    ) -> Result<CudaStorage> {
        if g.len != x.len {
            return Err(Error::Internal(format!(
                "unary_mul of {} and {} elements",
                x.len, g.len
            )));
        }
        let out = self.alloc::<T>(x.len)?;
        if x.len > 0 {
            let n = x.len;
            let (xs, gs) = (self.float::<T>(x)?, self.float::<T>(g)?);
            // SAFETY: unary_mul_* takes (x, g, out of n elements each, n, op).
            unsafe {
                self.launch(&format!("unary_mul_{}", T::SUFFIX), threads(n), |l| {
                    l.arg(xs).arg(gs).arg(&out).arg(&n).arg(&code);
                })
            }?;
        }
        Ok(T::wrap(out, x.len))
    }

    fn compare_t<T: Float>(
        &self,
        code: i32,
        [a, b]: [&CudaStorage; 2],
        shapes: [&[usize]; 2],
        out_shape: &[usize],
    ) -> Result<CudaStorage> {
        let n: usize = out_shape.iter().product();
        let out = self.alloc::<u32>(n)?;
        if n > 0 {
            let (x, y) = (self.float::<T>(a)?, self.float::<T>(b)?);
            let (nd, meta) = self.broadcast_meta(&shapes, out_shape)?;
            // SAFETY: compare_* takes (a, b, out of n words, n, op, nd, meta of 3 * nd): the
            // strides address a and b inside their lengths.
            unsafe {
                self.launch(&format!("compare_{}", T::SUFFIX), threads(n), |l| {
                    l.arg(x)
                        .arg(y)
                        .arg(&out)
                        .arg(&n)
                        .arg(&code)
                        .arg(&nd)
                        .arg(&meta);
                })
            }?;
        }
        Ok(CudaStorage {
            buf: Buf::Bool(out),
            len: n,
        })
    }

    fn adam_t<T: Float>(
        &self,
        p: &CudaStorage,
        g: &CudaStorage,
        [m, v]: [&CudaStorage; 2],
        h: &AdamStep,
    ) -> Result<bool> {
        let n = p.len;
        let (pb, gb) = (self.float::<T>(p)?, self.float::<T>(g)?);
        let (mb, vb) = (self.float::<T>(m)?, self.float::<T>(v)?);
        let k = h.constants().map(T::from_f64);
        let decoupled = i32::from(h.decoupled);
        if n > 0 {
            // SAFETY: adam_* takes (p, g, m, v of n elements each, n, ten T constants, int):
            // the caller checked the four lengths and dtypes.
            unsafe {
                self.launch(&format!("adam_{}", T::SUFFIX), threads(n), |l| {
                    l.arg(pb).arg(gb).arg(mb).arg(vb).arg(&n);
                    for x in &k {
                        l.arg(x);
                    }
                    l.arg(&decoupled);
                })
            }?;
        }
        Ok(true)
    }

    /// The broadcasting kernels' (nd, meta): `out_shape`, then each input's element strides
    /// along it (0 where it broadcasts), with the dims they all step over alike merged.
    pub(crate) fn broadcast_meta(
        &self,
        shapes: &[&[usize]],
        out_shape: &[usize],
    ) -> Result<(i32, Meta)> {
        let strides: Vec<Vec<usize>> = shapes
            .iter()
            .map(|s| broadcast_strides(s, out_shape))
            .collect();
        let (dims, steps) = merge_dims(out_shape, &strides);
        let meta = Meta::new(
            "broadcast",
            dims.iter().chain(steps.iter().flatten()).copied(),
        )?;
        Ok((dims.len() as i32, meta))
    }

    pub(crate) fn binary_t<T: Float>(
        &self,
        code: i32,
        a: &CudaStorage,
        a_shape: &[usize],
        b: &CudaStorage,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<CudaStorage> {
        let n: usize = out_shape.iter().product();
        let out = self.alloc::<T>(n)?;
        if n > 0 {
            let (x, y) = (self.float::<T>(a)?, self.float::<T>(b)?);
            if a_shape == out_shape && b_shape == out_shape {
                // SAFETY: binary_flat_* takes (a, b, out of n elements, n, op).
                unsafe {
                    self.launch(&format!("binary_flat_{}", T::SUFFIX), threads(n), |l| {
                        l.arg(x).arg(y).arg(&out).arg(&n).arg(&code);
                    })
                }?;
            } else {
                let (nd, meta) = self.broadcast_meta(&[a_shape, b_shape], out_shape)?;
                // SAFETY: binary_bcast_* takes (a, b, out, n, op, nd, meta of 3 * nd): the
                // strides address a and b inside their lengths.
                unsafe {
                    self.launch(&format!("binary_bcast_{}", T::SUFFIX), threads(n), |l| {
                        l.arg(x)
                            .arg(y)
                            .arg(&out)
                            .arg(&n)
                            .arg(&code)
                            .arg(&nd)
                            .arg(&meta);
                    })
                }?;
            }
        }
        Ok(T::wrap(out, n))
    }
}

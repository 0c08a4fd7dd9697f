//! Elementwise kernels: unary functions, the affine map (scale, add_scalar), binary functions
//! with broadcasting.

use gflow_core::backend::{AFFINE_CODE, BinaryOp, UnaryOp};
use gflow_core::shape::broadcast_strides;
use gflow_core::{DType, Result};

use crate::{WgpuBackend, WgpuStorage, device_error};

/// [`Backend::unary`](gflow_core::backend::Backend::unary) on this device.
pub(crate) fn unary(w: &WgpuBackend, op: UnaryOp, x: &WgpuStorage) -> Result<WgpuStorage> {
    w.need_f32(x, "unary")?;
    let out = w.new_storage(x.len, x.dtype)?;
    let code = op.code();
    w.run_pieces(
        "unary",
        x.len,
        4,
        &|n| vec![n as u32, code, 0, 0],
        &[&x.buf, &out.buf],
    )?;
    Ok(out)
}

/// [`Backend::binary`](gflow_core::backend::Backend::binary) on this device.
pub(crate) fn binary(
    w: &WgpuBackend,
    op: BinaryOp,
    a: &WgpuStorage,
    a_shape: &[usize],
    b: &WgpuStorage,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<WgpuStorage> {
    w.need_f32(a, "binary")?;
    w.need_f32(b, "binary")?;
    let n: usize = out_shape.iter().product();
    let out = w.new_storage(n, DType::F32)?;
    let nd = out_shape.len();
    let aligned = |shape: &[usize]| -> Vec<u32> {
        broadcast_strides(shape, out_shape)
            .iter()
            .map(|&s| s as u32)
            .collect()
    };
    let code = op.code();
    if a_shape == out_shape && b_shape == out_shape {
        // no broadcasting: a flat elementwise op, which binds in pieces
        w.run_pieces(
            "binary",
            n,
            4,
            &|len| vec![len as u32, code, 1, len as u32, 1, 1, 0, 0, 0],
            &[&a.buf, &b.buf, &out.buf],
        )?;
        return Ok(out);
    }
    let (sa, sb) = (aligned(a_shape), aligned(b_shape));
    let params = |rows: usize, bases: [u32; 3]| {
        let mut p = vec![0, code, nd as u32];
        p.extend(out_shape.iter().map(|&d| d as u32));
        p[3] = rows as u32;
        p[0] = p[3..].iter().product();
        p.extend(sa.iter().chain(&sb).copied());
        p.extend(bases);
        p
    };
    let fits = |s: &WgpuStorage| (s.len * 4) as u64 <= w.max_binding;
    if n == 0 {
        return Ok(out);
    }
    if fits(a) && fits(b) && fits(&out) {
        let p = params(out_shape[0], [0; 3]);
        w.run("binary", n, &p, &[&a.buf, &b.buf, &out.buf])?;
        return Ok(out);
    }
    // Past the binding limit: blocks of the output's first dim, and of each input's unless
    // it is broadcast along it (then bound whole).
    let out_row = n / out_shape[0];
    let row = |s: &[u32]| if s[0] == 0 { 0 } else { s[0] as usize };
    let widest = out_row.max(row(&sa)).max(row(&sb)).max(1);
    let block = ((w.max_binding - w.align) as usize / 4 / widest).max(1);
    let mut i0 = 0;
    while i0 < out_shape[0] {
        let r = block.min(out_shape[0] - i0);
        // (first element, length) of an input's piece
        let piece = |x: &WgpuStorage, s: &[u32]| match row(s) {
            0 => (0, x.len),
            len => (i0 * len, r * len),
        };
        let ((a0, an), (b0, bn)) = (piece(a, &sa), piece(b, &sb));
        let (ab, a_base) = w.window(&a.buf, a0, an, 4)?;
        let (bb, b_base) = w.window(&b.buf, b0, bn, 4)?;
        let (ob, o_base) = w.window(&out.buf, i0 * out_row, r * out_row, 4)?;
        let p = params(r, [a_base, b_base, o_base]);
        w.dispatch("binary", r * out_row, &p, &[ab, bb, ob])?;
        i0 += r;
    }
    Ok(out)
}

/// [`Backend::scale`](gflow_core::backend::Backend::scale) on this device.
pub(crate) fn scale(w: &WgpuBackend, x: &WgpuStorage, s: f64) -> Result<WgpuStorage> {
    w.need_f32(x, "scale")?;
    w.affine(x, s as f32, 0.0)
}

/// [`Backend::add_scalar`](gflow_core::backend::Backend::add_scalar) on this device.
pub(crate) fn add_scalar(w: &WgpuBackend, x: &WgpuStorage, s: f64) -> Result<WgpuStorage> {
    w.need_f32(x, "add_scalar")?;
    w.affine(x, 1.0, s as f32)
}

impl WgpuBackend {
    /// `a * x + b` elementwise (the unary kernel's affine case).
    pub(crate) fn affine(&self, x: &WgpuStorage, a: f32, b: f32) -> Result<WgpuStorage> {
        let out = self.new_storage(x.len, x.dtype)?;
        let (a, b) = (a.to_bits(), b.to_bits());
        self.run_pieces(
            "unary",
            x.len,
            4,
            &|n| vec![n as u32, AFFINE_CODE, a, b],
            &[&x.buf, &out.buf],
        )?;
        Ok(out)
    }

    pub(crate) fn need_f32(&self, s: &WgpuStorage, op: &str) -> Result<()> {
        if s.dtype == DType::F32 {
            Ok(())
        } else {
            Err(device_error(format!(
                "{op}: wgpu kernels compute in f32, not {}",
                s.dtype
            )))
        }
    }
}

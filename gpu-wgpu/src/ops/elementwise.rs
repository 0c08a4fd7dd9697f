//! Elementwise kernels: unary functions, the affine map (scale, add_scalar), binary functions
//! and comparisons with broadcasting.

use gflow_core::backend::{AFFINE_CODE, AdamStep, BinaryOp, CmpOp, UnaryOp};
use gflow_core::shape::broadcast_strides;
use gflow_core::{DType, Result};

use crate::{WgpuBackend, WgpuStorage, device_error, elem_bytes};

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

/// [`Backend::unary_mul`](gflow_core::backend::Backend::unary_mul) on this device: `g *
/// op(x)` in one pass, in pieces of a binding each.
pub(crate) fn unary_mul(
    w: &WgpuBackend,
    op: UnaryOp,
    x: &WgpuStorage,
    g: &WgpuStorage,
) -> Result<WgpuStorage> {
    w.need_f32(x, "unary_mul")?;
    w.need_f32(g, "unary_mul")?;
    if g.len != x.len {
        return Err(device_error(format!(
            "unary_mul of {} and {} elements",
            x.len, g.len
        )));
    }
    let out = w.new_storage(x.len, DType::F32)?;
    let code = op.code();
    w.run_pieces(
        "unary_mul",
        x.len,
        4,
        &|n| vec![n as u32, code],
        &[&x.buf, &g.buf, &out.buf],
    )?;
    Ok(out)
}

/// [`Backend::adam_step`](gflow_core::backend::Backend::adam_step) on this device: one kernel
/// for f32 buffers of one length (`false` for others), in pieces of a binding each.
pub(crate) fn adam_step(
    w: &WgpuBackend,
    p: &WgpuStorage,
    g: &WgpuStorage,
    [m, v]: [&WgpuStorage; 2],
    h: &AdamStep,
) -> Result<bool> {
    if [p, g, m, v]
        .iter()
        .any(|b| b.len != p.len || b.dtype != DType::F32)
    {
        return Ok(false);
    }
    let k = h.constants().map(|x| (x as f32).to_bits());
    let decoupled = u32::from(h.decoupled);
    w.run_pieces(
        "adam",
        p.len,
        4,
        &|n| [&[n as u32, decoupled][..], &k].concat(),
        &[&p.buf, &g.buf, &m.buf, &v.buf],
    )?;
    Ok(true)
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
    w.zip(op.code(), [a, b], [a_shape, b_shape], out_shape, DType::F32)
}

/// The binary kernel's code of comparison `CMP_x`: `CMP_BASE + CMP_x` (`binary.wgsl` has the
/// same constant), so comparisons share its broadcasting and pieces.
const CMP_BASE: u32 = 64;

/// [`Backend::compare`](gflow_core::backend::Backend::compare) on this device: a Bool word per
/// element (1.0's bits when true).
pub(crate) fn compare(
    w: &WgpuBackend,
    op: CmpOp,
    a: &WgpuStorage,
    a_shape: &[usize],
    b: &WgpuStorage,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<WgpuStorage> {
    w.need_f32(a, "compare")?;
    w.need_f32(b, "compare")?;
    let code = CMP_BASE + op.code();
    w.zip(code, [a, b], [a_shape, b_shape], out_shape, DType::Bool)
}

/// [`Backend::cast`](gflow_core::backend::Backend::cast) on this device: F32, F16, BF16 and I32
/// to any dtype, by `convert.wgsl`.
pub(crate) fn cast(w: &WgpuBackend, x: &WgpuStorage, dtype: DType) -> Result<WgpuStorage> {
    if x.dtype == dtype {
        return w.copy(x);
    }
    if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::I32) {
        return Err(device_error(format!("cast: wgpu casts no {}", x.dtype)));
    }
    w.convert(x, dtype)
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
    /// The binary kernel with op `code` on f32 `a` and `b` broadcast to `out_shape`, into a new
    /// buffer of `dtype` (F32, or Bool for comparisons).
    fn zip(
        &self,
        code: u32,
        [a, b]: [&WgpuStorage; 2],
        [a_shape, b_shape]: [&[usize]; 2],
        out_shape: &[usize],
        dtype: DType,
    ) -> Result<WgpuStorage> {
        let n: usize = out_shape.iter().product();
        let out = self.new_storage(n, dtype)?;
        if a_shape == out_shape && b_shape == out_shape {
            // no broadcasting: a flat elementwise op, which binds in pieces
            self.run_pieces(
                "binary",
                n,
                4,
                &|len| vec![len as u32, code, 1, len as u32, 1, 1, 0, 0, 0],
                &[&a.buf, &b.buf, &out.buf],
            )?;
        } else {
            self.broadcast(
                "binary",
                code,
                &[(a, a_shape), (b, b_shape)],
                &out,
                out_shape,
            )?;
        }
        Ok(out)
    }

    /// Runs the broadcasting kernel `name` over `out_shape` (one thread per element), its
    /// parameters: the element count, `head` (the op code, or words per element), the number of
    /// dims, `out_shape`, each input's element strides (0 along broadcast dims), then the first
    /// element of each input and of `out` in its binding. Past the binding limit it runs in
    /// blocks of the output's first dim, each input cut alike unless broadcast along it (then
    /// bound whole).
    pub(crate) fn broadcast(
        &self,
        name: &'static str,
        head: u32,
        inputs: &[(&WgpuStorage, &[usize])],
        out: &WgpuStorage,
        out_shape: &[usize],
    ) -> Result<()> {
        let n: usize = out_shape.iter().product();
        if n == 0 {
            return Ok(());
        }
        // a 0-d output is a 1-element row
        let shape: &[usize] = if out_shape.is_empty() {
            &[1]
        } else {
            out_shape
        };
        let strides: Vec<Vec<u32>> = inputs
            .iter()
            .map(|(_, s)| {
                let s: &[usize] = if s.is_empty() { &[1] } else { s };
                broadcast_strides(s, shape)
                    .iter()
                    .map(|&d| d as u32)
                    .collect()
            })
            .collect();
        let params = |rows: usize, bases: &[u32]| {
            let mut p = vec![0, head, shape.len() as u32];
            p.extend(shape.iter().map(|&d| d as u32));
            p[3] = rows as u32;
            p[0] = p[3..].iter().product();
            p.extend(strides.iter().flatten().chain(bases));
            p
        };
        let bytes = |s: &WgpuStorage| (s.len * elem_bytes(s.dtype)) as u64;
        if inputs.iter().all(|(x, _)| bytes(x) <= self.max_binding)
            && bytes(out) <= self.max_binding
        {
            let mut bufs: Vec<&wgpu::Buffer> = inputs.iter().map(|(x, _)| &x.buf).collect();
            bufs.push(&out.buf);
            let p = params(shape[0], &vec![0; inputs.len() + 1]);
            return self.run(name, n, &p, &bufs);
        }
        let out_row = n / shape[0];
        // each input's elements per output row (0: broadcast along the first dim)
        let rows: Vec<usize> = strides.iter().map(|s| s[0] as usize).collect();
        let widest = inputs
            .iter()
            .zip(&rows)
            .map(|((x, _), r)| r * elem_bytes(x.dtype))
            .fold(out_row * elem_bytes(out.dtype), usize::max)
            .max(1);
        let block = ((self.max_binding - self.align) as usize / widest).max(1);
        let mut i0 = 0;
        while i0 < shape[0] {
            let r = block.min(shape[0] - i0);
            let (mut bindings, mut bases) = (vec![], vec![]);
            for ((x, _), &row) in inputs.iter().zip(&rows) {
                let (start, len) = if row == 0 {
                    (0, x.len)
                } else {
                    (i0 * row, r * row)
                };
                let (b, base) = self.window(&x.buf, start, len, elem_bytes(x.dtype))?;
                bindings.push(b);
                bases.push(base);
            }
            let (ob, o_base) =
                self.window(&out.buf, i0 * out_row, r * out_row, elem_bytes(out.dtype))?;
            bindings.push(ob);
            bases.push(o_base);
            self.dispatch(name, r * out_row, &params(r, &bases), &bindings)?;
            i0 += r;
        }
        Ok(())
    }

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

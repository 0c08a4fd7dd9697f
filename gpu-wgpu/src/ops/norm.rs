//! LayerNorm and RMSNorm, forward and backward, as core's host kernels compute them: a
//! workgroup per row for the output, the input's gradient and the rows' statistics
//! (`shaders/norm.wgsl`); the parameters' gradients as column sums over parts of the rows
//! (`shaders/norm_param.wgsl`), then summed over the parts. Tensors past one binding's limit
//! run in blocks of rows; a single row past it is a `Device` error.

use gflow_core::backend::{Backend, ReduceKind};
use gflow_core::{DType, Error, Result};

use crate::bind::GROUP;
use crate::{LOOP_MAX, WgpuBackend, WgpuStorage, device_error};

/// Threads the parameters' column sums run on at least (parts of the rows times columns).
const WIDE: usize = 32768;

/// What one launch of `shaders/norm.wgsl` writes.
#[derive(Clone, Copy)]
enum Mode {
    /// The normalised rows, with the affine.
    Output = 0,
    /// The input's gradient.
    InputGrad = 1,
    /// Each row's mean and reciprocal standard deviation.
    Stats = 2,
}

impl Mode {
    /// Elements written per row of `cols`.
    fn per_row(self, cols: usize) -> usize {
        match self {
            Mode::Output | Mode::InputGrad => cols,
            Mode::Stats => 2,
        }
    }
}

/// One normalisation's shape and constants.
#[derive(Clone, Copy)]
struct Rows {
    rows: usize,
    cols: usize,
    eps: f64,
    center: bool,
}

/// [`Backend::norm`](gflow_core::backend::Backend::norm) on this device.
pub(crate) fn norm(
    w: &WgpuBackend,
    x: &WgpuStorage,
    params: &[&WgpuStorage],
    cols: usize,
    eps: f64,
    center: bool,
    affine: [bool; 2],
) -> Result<WgpuStorage> {
    let shape = w.norm_shape(x, None, cols, (eps, center), "norm")?;
    let mut given = params.iter().copied();
    let weight = if affine[0] { given.next() } else { None };
    let bias = if affine[1] { given.next() } else { None };
    let out = w.new_storage(x.len, DType::F32)?;
    w.norm_rows(Mode::Output, shape, [x, x], [weight, bias], &out)?;
    Ok(out)
}

/// [`Backend::norm_input_grad`](gflow_core::backend::Backend::norm_input_grad) on this device.
pub(crate) fn norm_input_grad(
    w: &WgpuBackend,
    x: &WgpuStorage,
    g: &WgpuStorage,
    weight: &[&WgpuStorage],
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<WgpuStorage> {
    let shape = w.norm_shape(x, Some(g), cols, (eps, center), "norm_input_grad")?;
    let weight = weight.first().copied();
    let out = w.new_storage(x.len, DType::F32)?;
    w.norm_rows(Mode::InputGrad, shape, [x, g], [weight, None], &out)?;
    Ok(out)
}

/// [`Backend::norm_param_grad`](gflow_core::backend::Backend::norm_param_grad) on this device.
pub(crate) fn norm_param_grad(
    w: &WgpuBackend,
    x: &WgpuStorage,
    g: &WgpuStorage,
    cols: usize,
    eps: f64,
    center: bool,
) -> Result<WgpuStorage> {
    let shape = w.norm_shape(x, Some(g), cols, (eps, center), "norm_param_grad")?;
    let rows = shape.rows;
    if rows == 0 {
        return w.zeros(DType::F32, 2 * cols);
    }
    let stats = w.new_storage(2 * rows, DType::F32)?;
    w.norm_rows(Mode::Stats, shape, [x, x], [None, None], &stats)?;
    // parts of at most LOOP_MAX rows, and of rows one binding holds, on at least WIDE threads
    let block = w.rows_per_binding(cols)?;
    let part_len = rows
        .div_ceil(WIDE.div_ceil(cols).clamp(1, rows))
        .min(LOOP_MAX)
        .min(block);
    let parts = rows.div_ceil(part_len);
    let dw = w.new_storage(parts * cols, DType::F32)?;
    let db = w.new_storage(parts * cols, DType::F32)?;
    // groups of whole parts whose rows fit one binding
    let group = (block / part_len).max(1);
    let mut p0 = 0;
    while p0 < parts {
        let n_parts = group.min(parts - p0);
        let r0 = p0 * part_len;
        let n_rows = (n_parts * part_len).min(rows - r0);
        let (xb, x_base) = w.window(&x.buf, r0 * cols, n_rows * cols, 4)?;
        let (gb, g_base) = w.window(&g.buf, r0 * cols, n_rows * cols, 4)?;
        let (sb, s_base) = w.window(&stats.buf, 2 * r0, 2 * n_rows, 4)?;
        let (wb, o_base) = w.window(&dw.buf, p0 * cols, n_parts * cols, 4)?;
        let (bb, _) = w.window(&db.buf, p0 * cols, n_parts * cols, 4)?;
        let params = [
            (n_parts * cols) as u32,
            n_rows as u32,
            cols as u32,
            part_len as u32,
            x_base,
            g_base,
            s_base,
            o_base,
        ];
        w.dispatch("norm_param", n_parts * cols, &params, &[xb, gb, sb, wb, bb])?;
        p0 += n_parts;
    }
    let (dw, db) = if parts == 1 {
        (dw, db)
    } else {
        let sum = |p: &WgpuStorage| w.reduce(ReduceKind::Sum, p, &[parts, cols], &[0]);
        (sum(&dw)?, sum(&db)?)
    };
    w.cat(&[&dw, &db], &[&[1, cols], &[1, cols]], 1)
}

impl WgpuBackend {
    /// The rows of `x` and its checks: f32, whole rows, and an output gradient `g` of `x`'s
    /// length where given (the parameters are checked where they are bound).
    fn norm_shape(
        &self,
        x: &WgpuStorage,
        g: Option<&WgpuStorage>,
        cols: usize,
        (eps, center): (f64, bool),
        op: &str,
    ) -> Result<Rows> {
        self.need_f32(x, op)?;
        if cols == 0 || !x.len.is_multiple_of(cols) {
            return Err(Error::Internal(format!(
                "{op}: {} elements are not rows of {cols}",
                x.len
            )));
        }
        if let Some(g) = g {
            self.need_f32(g, op)?;
            if g.len != x.len {
                return Err(Error::Internal(format!(
                    "{op}: the output gradient holds {} elements, not {}",
                    g.len, x.len
                )));
            }
        }
        Ok(Rows {
            rows: x.len / cols,
            cols,
            eps,
            center,
        })
    }

    /// Rows of `cols` f32 elements that one binding holds (at least one, else an error).
    fn rows_per_binding(&self, cols: usize) -> Result<usize> {
        let rows = (self.max_binding - self.align) as usize / 4 / cols.max(1);
        if rows == 0 {
            return Err(device_error(format!(
                "a normalised row of {cols} elements exceeds this adapter's storage binding \
                 limit of {} bytes",
                self.max_binding
            )));
        }
        Ok(rows)
    }

    /// `shaders/norm.wgsl` in `mode` over every row: `[x, g]` the rows read (`g` = `x` where
    /// the mode reads no gradient), `[w, b]` the parameters given, into `out`.
    fn norm_rows(
        &self,
        mode: Mode,
        shape: Rows,
        [x, g]: [&WgpuStorage; 2],
        [weight, bias]: [Option<&WgpuStorage>; 2],
        out: &WgpuStorage,
    ) -> Result<()> {
        let Rows {
            rows,
            cols,
            eps,
            center,
        } = shape;
        for p in [weight, bias].into_iter().flatten() {
            self.need_f32(p, "norm")?;
            if p.len != cols {
                return Err(Error::Internal(format!(
                    "norm: a parameter holds {} elements, not {cols}",
                    p.len
                )));
            }
        }
        let per_row = mode.per_row(cols);
        let block = self.rows_per_binding(cols)?;
        let mut r0 = 0;
        while r0 < rows {
            let n = block.min(rows - r0);
            let (xb, x_base) = self.window(&x.buf, r0 * cols, n * cols, 4)?;
            let (gb, g_base) = self.window(&g.buf, r0 * cols, n * cols, 4)?;
            let (ob, o_base) = self.window(&out.buf, r0 * per_row, n * per_row, 4)?;
            let wb = match weight {
                Some(p) => self.window(&p.buf, 0, cols, 4)?.0,
                None => xb.clone(),
            };
            let bb = match bias {
                Some(p) => self.window(&p.buf, 0, cols, 4)?.0,
                None => xb.clone(),
            };
            let params = [
                n as u32,
                cols as u32,
                mode as u32,
                u32::from(center),
                u32::from(weight.is_some()),
                u32::from(bias.is_some()),
                (eps as f32).to_bits(),
                x_base,
                g_base,
                o_base,
            ];
            self.dispatch("norm", n * GROUP as usize, &params, &[xb, gb, wb, bb, ob])?;
            r0 += n;
        }
        Ok(())
    }
}

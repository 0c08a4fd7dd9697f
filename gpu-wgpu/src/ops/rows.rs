//! Row gathers (embedding lookups, whole or from a piece of a table split over its rows) and
//! scatter-adds, in blocks of table rows and of indices; `torch.gather` along a dim.

use gflow_core::shape::strides;
use gflow_core::{DType, Error, Result};

use crate::{LOOP_MAX, WgpuBackend, WgpuStorage, device_error, elem_bytes};

/// [`Backend::gather_rows`](gflow_core::backend::Backend::gather_rows) on this device.
pub(crate) fn gather_rows(
    w: &WgpuBackend,
    table: &WgpuStorage,
    rows: usize,
    row_len: usize,
    indices: &WgpuStorage,
) -> Result<WgpuStorage> {
    if table.dtype.is_half() {
        return w.on_words(&[table], |t| gather_rows(w, t[0], rows, row_len, indices));
    }
    let mut keep = None;
    let indices = w.i64_indices(indices, &mut keep)?;
    w.need_i64(indices)?;
    let out = w.new_storage(indices.len * row_len, table.dtype)?;
    let rw = row_len * elem_bytes(table.dtype) / 4;
    w.rows_blocks(false, table, (0, rows), rw, indices, &out)?;
    Ok(out)
}

/// [`Backend::gather_rows_partial`](gflow_core::backend::Backend::gather_rows_partial) on this
/// device: the output starts as zeros, and the gather writes the rows this piece holds.
pub(crate) fn gather_rows_partial(
    w: &WgpuBackend,
    table: &WgpuStorage,
    rows: usize,
    row_len: usize,
    idx: &WgpuStorage,
    start: usize,
) -> Result<WgpuStorage> {
    if table.dtype.is_half() {
        return w.on_words(&[table], |t| {
            gather_rows_partial(w, t[0], rows, row_len, idx, start)
        });
    }
    let mut keep = None;
    let idx = w.i64_indices(idx, &mut keep)?;
    w.need_i64(idx)?;
    let out = w.new_storage(idx.len * row_len, table.dtype)?;
    w.zero(&out)?;
    let rw = row_len * elem_bytes(table.dtype) / 4;
    w.rows_blocks(false, table, (start, rows), rw, idx, &out)?;
    Ok(out)
}

/// [`Backend::gather_dim`](gflow_core::backend::Backend::gather_dim) on this device (any dtype
/// it holds, as words) into a zeroed output. Past the binding limit it runs in blocks of idx's
/// first dim with the matching rows of `x`; along dim 0, in (idx block, `x` block) pairs, each
/// writing the elements whose index falls in its block of `x`.
pub(crate) fn gather_dim(
    w: &WgpuBackend,
    x: &WgpuStorage,
    x_shape: &[usize],
    dim: usize,
    idx: &WgpuStorage,
    idx_shape: &[usize],
) -> Result<WgpuStorage> {
    if x.dtype.is_half() {
        return w.on_words(&[x], |x| gather_dim(w, x[0], x_shape, dim, idx, idx_shape));
    }
    let mut keep = None;
    let idx = w.i64_indices(idx, &mut keep)?;
    w.need_i64(idx)?;
    let out = w.new_storage(idx.len, x.dtype)?;
    if idx.len == 0 {
        return Ok(out);
    }
    w.zero(&out)?;
    let elem = elem_bytes(x.dtype);
    let x_strides = strides(x_shape);
    // (block rows, the indices [lo, hi) the bound x holds along dim, bases)
    let params = |rows: usize, (lo, hi): (usize, usize), bases: [u32; 3]| {
        let mut p = vec![0, (elem / 4) as u32, idx_shape.len() as u32, dim as u32];
        p.push(lo as u32);
        p.push(hi as u32);
        p.extend(idx_shape.iter().chain(&x_strides).map(|&d| d as u32));
        p[6] = rows as u32;
        p[0] = p[6..6 + idx_shape.len()].iter().product();
        p.extend(bases);
        p
    };
    // elements per row of the first dim: idx's and x's
    let (idx_row, x_row) = (idx.len / idx_shape[0], x_strides[0]);
    let room = (w.max_binding - w.align) as usize;
    let widest = (idx_row * 8).max(idx_row * elem).max(x_row * elem);
    // idx rows per block; along dim 0, x rows per block too (else x's rows follow idx's)
    let block = (room / if dim == 0 { idx_row * 8 } else { widest }).max(1);
    let x_block = if dim == 0 {
        (room / (x_row * elem).max(1)).max(1)
    } else {
        0
    };
    let mut i0 = 0;
    while i0 < idx_shape[0] {
        let r = block.min(idx_shape[0] - i0);
        let (ib, i_base) = w.window(&idx.buf, i0 * idx_row, r * idx_row, 8)?;
        let (ob, o_base) = w.window(&out.buf, i0 * idx_row, r * idx_row, elem)?;
        // x blocks: (first row, rows, the dim's index range it holds)
        let x_blocks: Vec<(usize, usize, (usize, usize))> = if dim == 0 {
            (0..x_shape[0])
                .step_by(x_block)
                .map(|t0| {
                    let tb = x_block.min(x_shape[0] - t0);
                    (t0, tb, (t0, t0 + tb))
                })
                .collect()
        } else {
            vec![(i0, r, (0, x_shape[dim]))]
        };
        for (t0, tb, range) in x_blocks {
            let (xb, x_base) = w.window(&x.buf, t0 * x_row, tb * x_row, elem)?;
            let p = params(r, range, [x_base, i_base, o_base]);
            w.dispatch("gather_dim", r * idx_row, &p, &[xb, ib.clone(), ob.clone()])?;
        }
        i0 += r;
    }
    Ok(out)
}

/// [`Backend::scatter_add_rows`](gflow_core::backend::Backend::scatter_add_rows) on this device.
pub(crate) fn scatter_add_rows(
    w: &WgpuBackend,
    src: &WgpuStorage,
    rows: usize,
    row_len: usize,
    indices: &WgpuStorage,
) -> Result<WgpuStorage> {
    w.need_f32(src, "scatter_add_rows")?;
    let mut keep = None;
    let indices = w.i64_indices(indices, &mut keep)?;
    w.need_i64(indices)?;
    let out = w.new_storage(rows * row_len, src.dtype)?;
    w.rows_blocks(true, src, (0, rows), row_len, indices, &out)?;
    Ok(out)
}

impl WgpuBackend {
    /// The row gather (`scatter` false: `data` is the table) or scatter-add (`data` holds the
    /// rows to add) over blocks of table rows and of indices that each fit a binding: every
    /// (row block, index block) pair is one dispatch; a scatter adds each later index block to
    /// what the earlier ones wrote. The table holds global rows `start..start + rows`; a
    /// gather leaves the output rows of indices outside them as they are.
    pub(crate) fn rows_blocks(
        &self,
        scatter: bool,
        data: &WgpuStorage,
        (start, rows): (usize, usize),
        rw: usize,
        indices: &WgpuStorage,
        out: &WgpuStorage,
    ) -> Result<()> {
        let count = indices.len;
        if count * rw == 0 && !scatter || rows * rw == 0 {
            return Ok(());
        }
        let room = (self.max_binding - self.align) as usize / 4 / rw;
        if room == 0 {
            return Err(device_error(
                "gather/scatter rows: one row exceeds this adapter's storage binding limit",
            ));
        }
        // indices per block: what a binding holds of the rows and of the (8-byte) indices
        let idx_room = (self.max_binding - self.align) as usize / 8;
        let (table, list) = if scatter { (out, data) } else { (data, out) };
        let mut t0 = 0;
        while t0 < rows {
            let tb = room.min(rows - t0);
            let (table_bind, table_base) = self.window(&table.buf, t0 * rw, tb * rw, 4)?;
            let mut r0 = 0;
            loop {
                // a scatter thread loops over its index block: at most LOOP_MAX of them
                let most = if scatter { room.min(LOOP_MAX) } else { room };
                let ob = most.min(idx_room).min(count - r0);
                let (list_bind, list_base) = self.window(&list.buf, r0 * rw, ob * rw, 4)?;
                let (idx, idx_base) = self.window(&indices.buf, r0, ob, 8)?;
                let (src_base, out_base) = if scatter {
                    (list_base, table_base)
                } else {
                    (table_base, list_base)
                };
                let p = [
                    u32::from(scatter),
                    ob as u32,
                    rw as u32,
                    tb as u32,
                    (start + t0) as u32,
                    idx_base,
                    src_base,
                    out_base,
                    u32::from(r0 > 0),
                ];
                let (threads, bindings) = if scatter {
                    (tb * rw, [list_bind, idx.clone(), table_bind.clone()])
                } else {
                    (ob * rw, [table_bind.clone(), idx.clone(), list_bind])
                };
                self.dispatch("rows", threads, &p, &bindings)?;
                r0 += ob;
                if r0 >= count {
                    break;
                }
            }
            t0 += tb;
        }
        Ok(())
    }

    /// Errs unless `idx` is I64 (the index kernels read its words).
    pub(crate) fn need_i64(&self, idx: &WgpuStorage) -> Result<()> {
        if idx.dtype == DType::I64 {
            Ok(())
        } else {
            Err(Error::DTypeMismatch {
                expected: DType::I64,
                got: idx.dtype,
            })
        }
    }

    /// Sets every byte of `s` to zero.
    pub(crate) fn zero(&self, s: &WgpuStorage) -> Result<()> {
        let clear = self.scoped(|| {
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            enc.clear_buffer(&s.buf, 0, None);
            enc.finish()
        })?;
        self.submit(clear)
    }
}

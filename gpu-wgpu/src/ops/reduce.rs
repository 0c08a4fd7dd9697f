//! Reductions over dimensions, and cumulative sums: in runs of at most `LOOP_MAX`, blocks of
//! rows past the binding limit, long rows in chunks.

use gflow_core::backend::{Backend, ReduceKind};
use gflow_core::shape::strides;
use gflow_core::{DType, Result};

use crate::{LOOP_MAX, NEG_INF, WgpuBackend, WgpuStorage, device_error};

/// Threads a reduction keeps busy at least: outputs with long runs get more, shorter runs.
const WIDE: usize = 1 << 15;
/// The shortest run a thread is given when runs are cut for [`WIDE`].
const MIN_RUN: usize = 128;

/// The bits of the value a reduction starts from (the sum's 0 is the shader's own).
fn reduce_start(op: ReduceKind) -> u32 {
    match op {
        ReduceKind::Min => f32::INFINITY.to_bits(),
        _ => NEG_INF,
    }
}
/// Elements one invocation of `shaders/sum_squares.wgsl` adds at most (few, so that a large
/// gradient runs on many workgroups).
const SQUARES_PER_THREAD: usize = 64;

/// [`Backend::sum_squares`](gflow_core::backend::Backend::sum_squares) on this device: per
/// piece of a binding, each workgroup's squares summed in the workgroup; then the
/// workgroups' partial sums.
pub(crate) fn sum_squares(w: &WgpuBackend, x: &WgpuStorage) -> Result<WgpuStorage> {
    w.need_f32(x, "sum_squares")?;
    if x.len == 0 {
        return w.zeros(DType::F32, 1);
    }
    let piece = ((w.max_binding - w.align) / 4) as usize;
    let group = crate::bind::GROUP as usize;
    let pieces: Vec<(usize, usize, usize)> = (0..x.len)
        .step_by(piece)
        .map(|at| {
            let n = piece.min(x.len - at);
            (at, n, n.div_ceil(group * SQUARES_PER_THREAD))
        })
        .collect();
    let parts: usize = pieces.iter().map(|p| p.2).sum();
    let partial = w.new_storage(parts, DType::F32)?;
    let mut first = 0;
    for (at, n, groups) in pieces {
        let (xb, x_base) = w.window(&x.buf, at, n, 4)?;
        let (pb, p_base) = w.window(&partial.buf, first, groups, 4)?;
        let threads = groups * group;
        let params = [n as u32, threads as u32, x_base, p_base];
        w.dispatch("sum_squares", threads, &params, &[xb, pb])?;
        first += groups;
    }
    if parts == 1 {
        return Ok(partial);
    }
    w.reduce(ReduceKind::Sum, &partial, &[parts], &[0])
}

/// [`Backend::reduce`](gflow_core::backend::Backend::reduce) on this device.
pub(crate) fn reduce(
    w: &WgpuBackend,
    op: ReduceKind,
    x: &WgpuStorage,
    shape: &[usize],
    dims: &[usize],
) -> Result<WgpuStorage> {
    w.need_f32(x, "reduce")?;
    let large = (x.len * 4) as u64 > w.max_binding;
    let n_out: usize = (0..shape.len())
        .map(|d| if dims.contains(&d) { 1 } else { shape[d] })
        .product();
    let count: usize = dims.iter().map(|&d| shape[d]).product();
    let x_row = x
        .len
        .checked_div(shape.first().copied().unwrap_or(1))
        .unwrap_or(0);
    if large && (dims.contains(&0) || (x_row * 4) as u64 > w.max_binding - w.align) {
        // The kept dims first and the reduced ones last: each row of that matrix reduced.
        let perm: Vec<usize> = (0..shape.len())
            .filter(|d| !dims.contains(d))
            .chain(dims.iter().copied())
            .collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return w.reduce_matrix(op, x, n_out, count);
        }
        let moved = w.permute(x, shape, &perm)?;
        return w.reduce_matrix(op, &moved, n_out, count);
    }
    // Each output's elements in runs of at most LOOP_MAX, and in more runs where there are too
    // few outputs to keep the device busy (a bias's gradient: 768 column sums of 2048 rows);
    // several runs leave partials, reduced again below.
    let parts = count
        .div_ceil(LOOP_MAX)
        .max((WIDE / n_out.max(1)).min(count / MIN_RUN))
        .max(1);
    let part_len = count.div_ceil(parts);
    let out = w.new_storage(n_out * parts, DType::F32)?;
    let code = op.code();
    // `n` outputs of `shape` with its first dim cut to `lead`, bound at element bases
    let params = |lead: usize, n: usize, x_base: u32, out_base: u32| {
        let mut sh = shape.to_vec();
        if let Some(first) = sh.first_mut() {
            *first = lead;
        }
        let mut p = vec![(n * parts) as u32, code, sh.len() as u32, count as u32];
        p.extend(sh.iter().map(|&d| d as u32));
        p.extend((0..sh.len()).map(|d| u32::from(dims.contains(&d))));
        p.extend(strides(shape).iter().map(|&s| s as u32));
        p.extend([
            reduce_start(op),
            x_base,
            out_base,
            part_len as u32,
            parts as u32,
        ]);
        p
    };
    let finish = |out: WgpuStorage| {
        if parts == 1 {
            Ok(out)
        } else {
            w.reduce(op, &out, &[n_out, parts], &[1])
        }
    };
    if !large {
        let p = params(shape.first().copied().unwrap_or(1), n_out, 0, 0);
        w.run("reduce", n_out * parts, &p, &[&x.buf, &out.buf])?;
        return finish(out);
    }
    // Past the binding limit with the first dim kept: blocks of it, each a contiguous
    // piece of x and of out.
    let out_row = n_out / shape[0] * parts;
    let block = ((w.max_binding - w.align) as usize / 4 / x_row.max(1)).max(1);
    let mut i0 = 0;
    while i0 < shape[0] {
        let r = block.min(shape[0] - i0);
        let (xb, x_base) = w.window(&x.buf, i0 * x_row, r * x_row, 4)?;
        let (ob, out_base) = w.window(&out.buf, i0 * out_row, r * out_row, 4)?;
        let p = params(r, r * out_row / parts, x_base, out_base);
        w.dispatch("reduce", r * out_row, &p, &[xb, ob])?;
        i0 += r;
    }
    finish(out)
}

impl WgpuBackend {
    /// Reduces each row of the contiguous (rows, len) matrix `x` (for tensors past the binding
    /// limit). Rows longer than a binding go in chunks, each reduced in runs to partials that
    /// are reduced again per row; shorter ones as blocks of whole rows.
    pub(crate) fn reduce_matrix(
        &self,
        op: ReduceKind,
        x: &WgpuStorage,
        rows: usize,
        len: usize,
    ) -> Result<WgpuStorage> {
        let room = ((self.max_binding - self.align) / 4) as usize;
        if len <= room {
            return self.reduce(op, x, &[rows, len], &[1]);
        }
        let chunks = len.div_ceil(room);
        // runs per chunk; the last chunk's surplus runs are empty and give the identity
        let parts = room.div_ceil(LOOP_MAX);
        let per_row = chunks * parts;
        let partial = self.new_storage(rows * per_row, DType::F32)?;
        for row in 0..rows {
            for j in 0..chunks {
                let n = room.min(len - j * room);
                let (xb, x_base) = self.window(&x.buf, row * len + j * room, n, 4)?;
                let (pb, p_base) =
                    self.window(&partial.buf, row * per_row + j * parts, parts, 4)?;
                let n = n as u32;
                let p = [
                    parts as u32,
                    op.code(),
                    1,
                    n,
                    n,
                    1,
                    1,
                    reduce_start(op),
                    x_base,
                    p_base,
                    LOOP_MAX as u32,
                    parts as u32,
                ];
                self.dispatch("reduce", parts, &p, &[xb, pb])?;
            }
        }
        self.reduce(op, &partial, &[rows, per_row], &[1])
    }
}

/// [`Backend::cumsum`](gflow_core::backend::Backend::cumsum) on this device: one thread per
/// line, in the passes of [`super::line_passes`], the running sums carried between them.
pub(crate) fn cumsum(
    w: &WgpuBackend,
    x: &WgpuStorage,
    shape: &[usize],
    dim: usize,
) -> Result<WgpuStorage> {
    w.need_f32(x, "cumsum")?;
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let out = w.new_storage(x.len, DType::F32)?;
    if x.len == 0 {
        return Ok(out);
    }
    let room = ((w.max_binding - w.align) / 4) as usize;
    if inner > room {
        return Err(device_error(
            "cumsum: one slice of the scanned dim exceeds this adapter's binding limit",
        ));
    }
    let lines = x.len / len;
    let acc = w.new_storage(lines, DType::F32)?;
    super::line_passes((lines / inner, len, inner), room, |o0, nb, lo, hi| {
        let span = ((nb - 1) * len + hi - lo) * inner;
        let (xb, x_base) = w.window(&x.buf, (o0 * len + lo) * inner, span, 4)?;
        let (ob, out_base) = w.window(&out.buf, (o0 * len + lo) * inner, span, 4)?;
        let (ab, a_base) = w.window(&acc.buf, o0 * inner, nb * inner, 4)?;
        let p = [
            (nb * inner) as u32,
            len as u32,
            inner as u32,
            lo as u32,
            hi as u32,
            x_base,
            out_base,
            a_base,
        ];
        w.dispatch("cumsum", nb * inner, &p, &[xb, ob, ab])
    })?;
    Ok(out)
}

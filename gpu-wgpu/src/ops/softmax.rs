//! (Log-)softmax over one dimension: one thread per line, blocks past the binding limit, long
//! lines in passes.

use gflow_core::backend::{Backend, BinaryOp, ReduceKind, UnaryOp};
use gflow_core::{DType, Result};

use crate::{LOOP_MAX, NEG_INF, WgpuBackend, WgpuStorage};

/// [`Backend::softmax`](gflow_core::backend::Backend::softmax) on this device.
pub(crate) fn softmax(
    w: &WgpuBackend,
    x: &WgpuStorage,
    shape: &[usize],
    dim: usize,
    log: bool,
) -> Result<WgpuStorage> {
    w.need_f32(x, "softmax")?;
    let len = shape[dim];
    if len > LOOP_MAX / 2 {
        return w.softmax_in_passes(x, shape, dim, log);
    }
    let inner: usize = shape[dim + 1..].iter().product();
    let lines = x.len.checked_div(len).unwrap_or(0);
    let params = |lines: usize, x_base: u32, out_base: u32| {
        [
            lines as u32,
            len as u32,
            inner.max(1) as u32,
            u32::from(log),
            NEG_INF,
            x_base,
            out_base,
        ]
    };
    if (x.len * 4) as u64 <= w.max_binding {
        let out = w.new_storage(x.len, DType::F32)?;
        w.run("softmax", lines, &params(lines, 0, 0), &[&x.buf, &out.buf])?;
        return Ok(out);
    }
    // Past the binding limit: blocks of the dims before `dim`, each a contiguous piece;
    // where one such block is too large, `dim` is moved last first (and back after).
    let block_len = len * inner;
    let outer = x.len / block_len;
    let block = (w.max_binding - w.align) as usize / 4 / block_len;
    if block == 0 && inner > 1 {
        let perm: Vec<usize> = (0..shape.len())
            .filter(|&d| d != dim)
            .chain([dim])
            .collect();
        let moved_shape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
        let moved = w.permute(x, shape, &perm)?;
        let y = w.softmax(&moved, &moved_shape, shape.len() - 1, log)?;
        let mut back = vec![0; perm.len()];
        for (i, &d) in perm.iter().enumerate() {
            back[d] = i;
        }
        return w.permute(&y, &moved_shape, &back);
    }
    // lines of at most LOOP_MAX / 2 always fit: block >= 1 here
    let block = block.max(1);
    let out = w.new_storage(x.len, DType::F32)?;
    let mut o0 = 0;
    while o0 < outer {
        let r = block.min(outer - o0);
        let (xb, x_base) = w.window(&x.buf, o0 * block_len, r * block_len, 4)?;
        let (ob, out_base) = w.window(&out.buf, o0 * block_len, r * block_len, 4)?;
        let n = r * inner;
        w.dispatch("softmax", n, &params(n, x_base, out_base), &[xb, ob])?;
        o0 += r;
    }
    Ok(out)
}

impl WgpuBackend {
    /// (Log-)softmax over long lines, where one thread per line would loop too long: the
    /// line maxima, `x - max`, its exponentials and their line sums are separate kernels.
    pub(crate) fn softmax_in_passes(
        &self,
        x: &WgpuStorage,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<WgpuStorage> {
        let mut line = shape.to_vec();
        line[dim] = 1;
        let m = self.reduce(ReduceKind::Max, x, shape, &[dim])?;
        let xm = self.binary(BinaryOp::Sub, x, shape, &m, &line, shape)?;
        let e = self.unary(UnaryOp::Exp, &xm)?;
        let sum = self.reduce(ReduceKind::Sum, &e, shape, &[dim])?;
        if log {
            let ls = self.unary(UnaryOp::Log, &sum)?;
            self.binary(BinaryOp::Sub, &xm, shape, &ls, &line, shape)
        } else {
            self.binary(BinaryOp::Div, &e, shape, &sum, &line, shape)
        }
    }
}

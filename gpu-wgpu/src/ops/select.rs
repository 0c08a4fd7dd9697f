//! Selection kernels: `where`, triangle masks (tril/triu), arg-reductions (argmax/argmin) and
//! sorting positions (argsort).

use gflow_core::backend::Backend;
use gflow_core::{DType, HostData, Result};

use crate::{LOOP_MAX, WgpuBackend, WgpuStorage, device_error, elem_bytes};

/// [`Backend::select`](gflow_core::backend::Backend::select) on this device (any dtype it
/// holds, as words).
pub(crate) fn select(
    w: &WgpuBackend,
    [cond, a, b]: [&WgpuStorage; 3],
    [c_shape, a_shape, b_shape]: [&[usize]; 3],
    out_shape: &[usize],
) -> Result<WgpuStorage> {
    if a.dtype.is_half() {
        return w.on_words(&[a, b], |ab| {
            select(
                w,
                [cond, ab[0], ab[1]],
                [c_shape, a_shape, b_shape],
                out_shape,
            )
        });
    }
    let out = w.new_storage(out_shape.iter().product(), a.dtype)?;
    let words = (elem_bytes(a.dtype) / 4) as u32;
    let inputs = [(cond, c_shape), (a, a_shape), (b, b_shape)];
    w.broadcast("where", words, &inputs, &out, out_shape)?;
    Ok(out)
}

/// [`Backend::triangle`](gflow_core::backend::Backend::triangle) on this device (any dtype it
/// holds, as words).
pub(crate) fn triangle(
    w: &WgpuBackend,
    x: &WgpuStorage,
    shape: &[usize],
    k: i64,
    upper: bool,
    origin: (usize, usize),
) -> Result<WgpuStorage> {
    if x.dtype.is_half() {
        return w.on_words(&[x], |x| triangle(w, x[0], shape, k, upper, origin));
    }
    let words = elem_bytes(x.dtype) / 4;
    let out = w.new_storage(x.len, x.dtype)?;
    let n = shape.len();
    let (rows, cols) = (shape[n - 2], shape[n - 1]);
    // past +-2^30 every element is on one side of the diagonal either way
    let k = k.clamp(-(1 << 30), 1 << 30) as i32;
    let total = x.len * words;
    let piece = ((w.max_binding - w.align) / 4) as usize;
    let mut first = 0;
    while first < total {
        let n = piece.min(total - first);
        let (xb, x_base) = w.window(&x.buf, first, n, 4)?;
        let (ob, out_base) = w.window(&out.buf, first, n, 4)?;
        let p = [
            n as u32,
            words as u32,
            rows as u32,
            cols as u32,
            k as u32,
            u32::from(upper),
            origin.0 as u32,
            origin.1 as u32,
            first as u32,
            x_base,
            out_base,
        ];
        w.dispatch("triangle", n, &p, &[xb, ob])?;
        first += n;
    }
    Ok(out)
}

/// [`Backend::arg_reduce`](gflow_core::backend::Backend::arg_reduce) on this device: one
/// thread per line, in the passes of [`super::line_passes`].
pub(crate) fn arg_reduce(
    w: &WgpuBackend,
    x: &WgpuStorage,
    shape: &[usize],
    dim: usize,
    max: bool,
) -> Result<WgpuStorage> {
    w.need_f32(x, "arg_reduce")?;
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let lines: usize = shape[..dim].iter().product::<usize>() * inner;
    if len * lines == 0 {
        // no element to compare: index 0 for every line (as the host's)
        return w.upload(&HostData::I64(vec![0; lines]));
    }
    let out = w.new_storage(lines, DType::I64)?;
    // f32 elements a binding holds past its alignment; a line's (index, value) and every
    // pass's slice of `inner` elements must fit
    let room = ((w.max_binding - w.align) / 4) as usize;
    if 2 * inner > room {
        return Err(device_error(
            "arg_reduce: one slice of the reduced dim exceeds this adapter's binding limit",
        ));
    }
    let best_val = w.new_storage(lines, DType::F32)?;
    // half the room: a line's index (8 bytes) is bound beside its elements
    super::line_passes((lines / inner, len, inner), room / 2, |o0, nb, lo, hi| {
        let span = ((nb - 1) * len + hi - lo) * inner;
        let (xb, x_base) = w.window(&x.buf, (o0 * len + lo) * inner, span, 4)?;
        let (ob, out_base) = w.window(&out.buf, o0 * inner, nb * inner, 8)?;
        let (vb, v_base) = w.window(&best_val.buf, o0 * inner, nb * inner, 4)?;
        let p = [
            (nb * inner) as u32,
            len as u32,
            inner as u32,
            lo as u32,
            hi as u32,
            u32::from(max),
            x_base,
            out_base,
            v_base,
        ];
        w.dispatch("arg_reduce", nb * inner, &p, &[xb, ob, vb])
    })?;
    Ok(out)
}

/// [`Backend::argsort`](gflow_core::backend::Backend::argsort) on this device: one thread per
/// element counts the elements before it in the order (O(len) each, in passes of at most
/// [`LOOP_MAX`]), over blocks of whole lines under the binding limit.
pub(crate) fn argsort(
    w: &WgpuBackend,
    x: &WgpuStorage,
    shape: &[usize],
    dim: usize,
    descending: bool,
) -> Result<WgpuStorage> {
    w.need_f32(x, "argsort")?;
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let out = w.new_storage(x.len, DType::I64)?;
    if x.len == 0 {
        return Ok(out);
    }
    // i64 elements a binding holds past its alignment: every block is whole outer rows
    let room = ((w.max_binding - w.align) / 8) as usize;
    let row = len * inner;
    if row > room {
        return Err(device_error(
            "argsort: one row of the sorted dim exceeds this adapter's binding limit",
        ));
    }
    let block = room / row;
    let outer = x.len / row;
    let cnt = w.new_storage(block.min(outer) * row, DType::I32)?;
    let mut o0 = 0;
    while o0 < outer {
        let nb = block.min(outer - o0);
        let n = nb * row;
        let (xb, x_base) = w.window(&x.buf, o0 * row, n, 4)?;
        let (ob, out_base) = w.window(&out.buf, o0 * row, n, 8)?;
        let (cb, c_base) = w.window(&cnt.buf, 0, n, 4)?;
        let mut lo = 0;
        while lo < len {
            let hi = (lo + LOOP_MAX).min(len);
            let p = [
                n as u32,
                len as u32,
                inner as u32,
                u32::from(descending),
                lo as u32,
                hi as u32,
                x_base,
                out_base,
                c_base,
                u32::from(hi == len),
            ];
            w.dispatch("argsort", n, &p, &[xb.clone(), ob.clone(), cb.clone()])?;
            lo = hi;
        }
        o0 += nb;
    }
    Ok(out)
}

//! The kernels, one file per operator family; each kernel of core's list is the function of
//! its name here (`kernel_table!(forward ops)` calls them).

mod attention;
mod convert;
mod copy;
mod elementwise;
mod matmul;
mod norm;
mod reduce;
mod rows;
mod select;
mod softmax;

pub(crate) use self::{
    attention::*, copy::*, elementwise::*, matmul::*, norm::*, reduce::*, rows::*, select::*,
    softmax::*,
};

/// The dispatches of a kernel with one thread per line of the middle dim of (outer, len,
/// inner) (arg-reductions, cumulative sums): `f(o0, nb, lo, hi)` for blocks of `nb` whole outer
/// rows from `o0`, over the indices `lo..hi` of a pass (at most `LOOP_MAX`, and at most `room`
/// elements bound: whole lines in a block when one pass covers them, else a row a block, the
/// lines' running values carried between passes by the kernel).
pub(crate) fn line_passes(
    (outer, len, inner): (usize, usize, usize),
    room: usize,
    mut f: impl FnMut(usize, usize, usize, usize) -> gflow_core::Result<()>,
) -> gflow_core::Result<()> {
    let chunk = crate::LOOP_MAX.min(len).min(room / inner);
    let block = if chunk == len {
        (room / (len * inner)).max(1)
    } else {
        1
    };
    let mut o0 = 0;
    while o0 < outer {
        let nb = block.min(outer - o0);
        let mut lo = 0;
        while lo < len {
            let hi = (lo + chunk).min(len);
            f(o0, nb, lo, hi)?;
            lo = hi;
        }
        o0 += nb;
    }
    Ok(())
}

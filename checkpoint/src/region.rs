//! Which box of a tensor a rank holds, writes and reads.

use std::ops::Range;

use gflow_core::shape::{Region, copy_region, full_region, intersect, region_shape, relative};
use gflow_core::{HostData, Tensor, env};

/// This rank's box of `t` (the whole shape for a local tensor), `None` off its placement.
pub fn my_box(t: &Tensor) -> Option<Region> {
    match t.dist() {
        None => Some(full_region(t.shape())),
        Some(d) => d
            .placement
            .index_of(env::current().rank())
            .map(|i| d.region_of_index(t.shape(), i)),
    }
}

/// Whether this rank writes its box of global tensor `t` (no partial SBP): it holds a
/// non-empty box that no rank earlier in the placement holds (so a broadcast box is written
/// once, by the first rank holding it).
pub fn writes(t: &Tensor) -> bool {
    let Some(d) = t.dist() else { return true };
    let Some(me) = d.placement.index_of(env::current().rank()) else {
        return false;
    };
    let mine = d.region_of_index(t.shape(), me);
    mine.iter().all(|r| !r.is_empty()) && (0..me).all(|i| d.region_of_index(t.shape(), i) != mine)
}

/// Copies from a stored chunk (`src`: the row-major bytes of box `chunk`) the part inside
/// `dst_box` into `dst` (the row-major bytes of `dst_box`); returns the elements copied.
pub fn copy_overlap(
    elem: usize,
    src: &[u8],
    chunk: &[Range<usize>],
    dst: &mut [u8],
    dst_box: &[Range<usize>],
) -> usize {
    let Some(common) = intersect(chunk, dst_box) else {
        return 0;
    };
    let extent = region_shape(&common);
    copy_region(
        elem,
        src,
        &region_shape(chunk),
        &relative(&common, chunk),
        dst,
        &region_shape(dst_box),
        &relative(&common, dst_box),
        &extent,
    );
    extent.iter().product()
}

/// Makes every byte of a Bool component 0 or 1 (a file may hold any nonzero byte for true).
pub fn normalize_bools(h: &mut HostData) {
    if let HostData::Bool(v) = h {
        v.iter_mut().for_each(|b| *b = u8::from(*b != 0));
    }
}

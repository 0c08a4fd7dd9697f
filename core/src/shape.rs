//! Shapes and boxes: element counts, row-major strides, and the strided region copy that every
//! slicing, concatenation and boxing step is made of.

use std::ops::Range;

use crate::error::{Error, Result};

/// A hyper-rectangle of a tensor: one index range per dimension.
pub type Region = Vec<Range<usize>>;

/// Number of elements of `shape`, or `ShapeOverflow` when the count overflows or passes what
/// one allocation can hold.
pub fn checked_numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_NUMEL)
        .ok_or_else(|| Error::ShapeOverflow {
            shape: shape.to_vec(),
        })
}

/// The most elements a tensor may have: a buffer of 8-byte elements (the widest dtype, and
/// the f64 some creations build first) stays within the `isize::MAX` bytes an allocation can
/// hold, so a shape past it is an error, never an allocator's capacity-overflow panic.
const MAX_NUMEL: usize = isize::MAX as usize / 8;

/// Number of elements of a shape already known not to overflow.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides of `shape` right-aligned to `out_shape`'s dims, 0 where the input broadcasts (size 1
/// or absent): how a broadcasting kernel addresses an input (every backend uses these).
pub fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let st = strides(shape);
    let pad = out_shape.len() - shape.len();
    (0..out_shape.len())
        .map(|i| {
            if i < pad || shape[i - pad] == 1 {
                0
            } else {
                st[i - pad]
            }
        })
        .collect()
}

/// One strided copy: the `extent` box of elements addressed by `strides` from element `base`
/// of a contiguous buffer. GPU backends express permute, slice and concatenation as such copies
/// (a gather into a contiguous output, or a scatter of a contiguous input), one kernel for all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StridedCopy {
    /// The box's shape (also the contiguous side's shape).
    pub extent: Vec<usize>,
    /// The strided side's element stride per dim.
    pub strides: Vec<usize>,
    /// The strided side's first element.
    pub base: usize,
}

impl StridedCopy {
    /// The gather making `shape` permuted by `perm` contiguous (`out.shape[i] = shape[perm[i]]`).
    pub fn permute(shape: &[usize], perm: &[usize]) -> StridedCopy {
        let st = strides(shape);
        StridedCopy {
            extent: perm.iter().map(|&p| shape[p]).collect(),
            strides: perm.iter().map(|&p| st[p]).collect(),
            base: 0,
        }
    }

    /// The gather of the box at `start` with `extent` out of `shape`.
    pub fn slice(shape: &[usize], start: &[usize], extent: &[usize]) -> StridedCopy {
        let st = strides(shape);
        StridedCopy {
            extent: extent.to_vec(),
            base: start.iter().zip(&st).map(|(a, b)| a * b).sum(),
            strides: st,
        }
    }

    /// The concatenation of `shapes` along `dim`: the output's shape and one scatter per input
    /// into it. `shapes` is not empty.
    pub fn cat(shapes: &[&[usize]], dim: usize) -> (Vec<usize>, Vec<StridedCopy>) {
        let mut out_shape = shapes.first().map_or_else(Vec::new, |s| s.to_vec());
        out_shape[dim] = shapes.iter().map(|s| s[dim]).sum();
        let st = strides(&out_shape);
        let mut at = 0;
        let copies = shapes
            .iter()
            .map(|shape| {
                let c = StridedCopy {
                    extent: shape.to_vec(),
                    strides: st.clone(),
                    base: at * st[dim],
                };
                at += shape[dim];
                c
            })
            .collect();
        (out_shape, copies)
    }
}

/// The extents of a region.
pub fn region_shape(region: &[Range<usize>]) -> Vec<usize> {
    region.iter().map(|r| r.len()).collect()
}

/// The whole of `shape` as a region.
pub fn full_region(shape: &[usize]) -> Region {
    shape.iter().map(|&d| 0..d).collect()
}

/// The intersection of two regions of the same rank, or `None` when it is empty.
pub fn intersect(a: &[Range<usize>], b: &[Range<usize>]) -> Option<Region> {
    let r: Region = a
        .iter()
        .zip(b)
        .map(|(x, y)| x.start.max(y.start)..x.end.min(y.end))
        .collect();
    if r.iter().any(|x| x.start >= x.end) {
        None
    } else {
        Some(r)
    }
}

/// `region` expressed relative to the origin of `outer` (which must contain it).
pub fn relative(region: &[Range<usize>], outer: &[Range<usize>]) -> Vec<usize> {
    region
        .iter()
        .zip(outer)
        .map(|(r, o)| r.start - o.start)
        .collect()
}

/// Calls `run(src_offset, dst_offset, len)` (in bytes) for each contiguous run of the box of
/// extent `extent` at `src_at` in an array of `src_shape` and at `dst_at` in one of `dst_shape`
/// (elements of `elem` bytes), in row-major order of the box. Trailing dimensions that both
/// arrays cover fully are merged, so a run is as long as the layouts allow.
fn for_each_run(
    elem: usize,
    (src_shape, src_at): (&[usize], &[usize]),
    (dst_shape, dst_at): (&[usize], &[usize]),
    extent: &[usize],
    mut run: impl FnMut(usize, usize, usize),
) {
    let nd = extent.len();
    if extent.contains(&0) {
        return;
    }
    if nd == 0 {
        run(0, 0, elem);
        return;
    }
    // Dimensions t.. are covered fully by the box in both arrays: one contiguous run per index of
    // dimensions ..t-1, running over dimension t-1 and all of t..
    let mut t = nd;
    while t > 1 && extent[t - 1] == src_shape[t - 1] && extent[t - 1] == dst_shape[t - 1] {
        t -= 1;
    }
    let run_dim = t - 1;
    let len = extent[run_dim..].iter().product::<usize>() * elem;
    let ss = strides(src_shape);
    let ds = strides(dst_shape);
    let mut idx = vec![0usize; run_dim];
    loop {
        let mut so = src_at[run_dim] * ss[run_dim];
        let mut d_o = dst_at[run_dim] * ds[run_dim];
        for d in 0..run_dim {
            so += (src_at[d] + idx[d]) * ss[d];
            d_o += (dst_at[d] + idx[d]) * ds[d];
        }
        run(so * elem, d_o * elem, len);
        // odometer over the outer dimensions
        let mut d = run_dim;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < extent[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Copies the box of extent `extent` from `src` (an array of `src_shape` elements of `elem` bytes)
/// at `src_at` into `dst` (of `dst_shape`) at `dst_at`. Trailing dimensions that both arrays cover
/// fully are merged, so the inner loop is one `memcpy` per contiguous run.
#[allow(clippy::too_many_arguments)]
pub fn copy_region(
    elem: usize,
    src: &[u8],
    src_shape: &[usize],
    src_at: &[usize],
    dst: &mut [u8],
    dst_shape: &[usize],
    dst_at: &[usize],
    extent: &[usize],
) {
    for_each_run(
        elem,
        (src_shape, src_at),
        (dst_shape, dst_at),
        extent,
        |so, d_o, len| dst[d_o..d_o + len].copy_from_slice(&src[so..so + len]),
    );
}

/// Copies `region` (absolute, within a tensor of `shape`) out of `src` into a new contiguous
/// buffer, written once run by run (the buffer's runs follow each other in the box's order, so
/// it is never zeroed first).
pub fn extract(elem: usize, src: &[u8], shape: &[usize], region: &[Range<usize>]) -> Vec<u8> {
    let ext = region_shape(region);
    let mut out = Vec::with_capacity(numel(&ext) * elem);
    let at: Vec<usize> = region.iter().map(|r| r.start).collect();
    for_each_run(
        elem,
        (shape, &at),
        (&ext, &vec![0; ext.len()]),
        &ext,
        |so, d_o, len| {
            debug_assert_eq!(d_o, out.len(), "runs in the box's order");
            out.extend_from_slice(&src[so..so + len]);
        },
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_bytes(v: &[i64]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn copy_region_matches_index_arithmetic() {
        // src 3x4x5 arange; copy box [1..3, 1..4, 2..5] into dst 2x3x3 at origin.
        let src: Vec<i64> = (0..60).collect();
        let mut dst = vec![0u8; 18 * 8];
        copy_region(
            8,
            &as_bytes(&src),
            &[3, 4, 5],
            &[1, 1, 2],
            &mut dst,
            &[2, 3, 3],
            &[0, 0, 0],
            &[2, 3, 3],
        );
        let got: Vec<i64> = bytemuck::pod_collect_to_vec(&dst);
        let mut want = vec![];
        for i in 1..3 {
            for j in 1..4 {
                for k in 2..5 {
                    want.push(i * 20 + j * 5 + k);
                }
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn copy_region_merges_full_trailing_dims_and_skips_empty() {
        let src: Vec<i64> = (0..24).collect();
        let got = extract(8, &as_bytes(&src), &[4, 3, 2], &[1..3, 0..3, 0..2]);
        assert_eq!(
            bytemuck::pod_collect_to_vec::<u8, i64>(&got),
            (6..18).collect::<Vec<_>>()
        );
        assert!(extract(8, &as_bytes(&src), &[4, 3, 2], &[1..1, 0..3, 0..2]).is_empty());
        let scalar = extract(8, &as_bytes(&[42]), &[], &[]);
        assert_eq!(bytemuck::pod_collect_to_vec::<u8, i64>(&scalar), vec![42]);
    }

    #[test]
    fn numel_overflow_is_an_error() {
        assert!(checked_numel(&[usize::MAX, 2]).is_err());
        assert_eq!(checked_numel(&[]).ok(), Some(1));
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
    }
}

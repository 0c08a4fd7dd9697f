//! The one data-movement kernel, strided box copies (permute, slice and cat are made of it),
//! in blocks past the binding limit.

use gflow_core::shape::{StridedCopy, strides};
use gflow_core::{DType, Error, Result};

use crate::{WgpuBackend, WgpuStorage, elem_bytes};

/// The boxes of `copies` between their inputs and a new contiguous buffer (see
/// [`Backend::copy_boxes`](gflow_core::backend::Backend::copy_boxes)).
pub(crate) fn copy_boxes(
    w: &WgpuBackend,
    dtype: DType,
    len: usize,
    put: bool,
    copies: &[(&WgpuStorage, StridedCopy)],
) -> Result<WgpuStorage> {
    if dtype.is_half() {
        return copy_halves(w, dtype, len, put, copies);
    }
    let out = w.new_storage(len, dtype)?;
    for (x, copy) in copies {
        w.strided(x, &out, copy, put)?;
    }
    Ok(out)
}

/// [`copy_boxes`] of 16-bit elements: a gather into the contiguous output that fits a binding
/// runs packed (`strided16.wgsl`, one thread per output word); pieces written into boxes of
/// the output (cat), and copies past the binding limit, run on the elements unpacked one per
/// word, so no two threads write halves of one word.
fn copy_halves(
    w: &WgpuBackend,
    dtype: DType,
    len: usize,
    put: bool,
    copies: &[(&WgpuStorage, StridedCopy)],
) -> Result<WgpuStorage> {
    let fits = |n: usize| (n.div_ceil(2) * 4) as u64 <= w.max_binding;
    if let [(x, copy)] = copies
        && !put
        && fits(x.len)
        && fits(len)
    {
        let out = w.new_storage(len, dtype)?;
        let n: usize = copy.extent.iter().product();
        let mut p = vec![n as u32, copy.extent.len() as u32, copy.base as u32, 0];
        p.extend(copy.extent.iter().chain(&copy.strides).map(|&d| d as u32));
        w.run("strided16", n.div_ceil(2), &p, &[&x.buf, &out.buf])?;
        return Ok(out);
    }
    let words = copies
        .iter()
        .map(|(x, _)| w.unpack16(x))
        .collect::<Result<Vec<_>>>()?;
    let copies: Vec<_> = words
        .iter()
        .zip(copies)
        .map(|(x, (_, c))| (x, c.clone()))
        .collect();
    let out = copy_boxes(w, DType::I32, len, put, &copies)?;
    w.pack16(&out, dtype)
}

impl WgpuBackend {
    /// `copy` between `x` and `out`: `x`'s box gathered into the contiguous `out` (`put`
    /// false), or the contiguous `x` scattered into `out`'s box (`put` true).
    pub(crate) fn strided(
        &self,
        x: &WgpuStorage,
        out: &WgpuStorage,
        copy: &StridedCopy,
        put: bool,
    ) -> Result<()> {
        let contiguous = (0, strides(&copy.extent));
        let strided = (copy.base, copy.strides.clone());
        let (from, to) = if put {
            (contiguous, strided)
        } else {
            (strided, contiguous)
        };
        self.copy_box(&copy.extent, x, &from, out, &to)
    }

    /// Copies the box `extent` from `x` (first element and strides `from`) to `out` (`to`).
    /// Past the binding limit the box is cut into blocks, halving the dim that spans most until
    /// both sides of a block fit a binding (a transpose of a large matrix is a few tiles).
    pub(crate) fn copy_box(
        &self,
        extent: &[usize],
        x: &WgpuStorage,
        from: &(usize, Vec<usize>),
        out: &WgpuStorage,
        to: &(usize, Vec<usize>),
    ) -> Result<()> {
        let n: usize = extent.iter().product();
        let elem = elem_bytes(x.dtype);
        let params = |ext: &[usize], x_base: usize, out_base: usize| {
            let mut p = vec![
                ext.iter().product::<usize>() as u32,
                (elem / 4) as u32,
                ext.len() as u32,
                x_base as u32,
                out_base as u32,
            ];
            p.extend(ext.iter().chain(&from.1).chain(&to.1).map(|&d| d as u32));
            p
        };
        let fits = |s: &WgpuStorage| (s.len * elem) as u64 <= self.max_binding;
        if (fits(x) && fits(out)) || n == 0 {
            return self.run(
                "strided",
                n,
                &params(extent, from.0, to.0),
                &[&x.buf, &out.buf],
            );
        }
        let span = |b: &[usize], st: &[usize]| {
            1 + b.iter().zip(st).map(|(b, s)| (b - 1) * s).sum::<usize>()
        };
        let room = (self.max_binding - self.align) as usize / elem;
        let mut block = extent.to_vec();
        while span(&block, &from.1) > room || span(&block, &to.1) > room {
            let widest = (0..block.len())
                .max_by_key(|&d| (block[d] - 1) * from.1[d].max(to.1[d]))
                .ok_or_else(|| Error::Internal("a 0-d copy past the binding limit".into()))?;
            block[widest] = block[widest].div_ceil(2);
        }
        let counts: Vec<usize> = extent
            .iter()
            .zip(&block)
            .map(|(e, b)| e.div_ceil(*b))
            .collect();
        for tile in 0..counts.iter().product::<usize>() {
            let (mut rest, mut sub, mut x0, mut o0) = (tile, block.clone(), from.0, to.0);
            for d in (0..extent.len()).rev() {
                let start = rest % counts[d] * block[d];
                rest /= counts[d];
                sub[d] = block[d].min(extent[d] - start);
                x0 += start * from.1[d];
                o0 += start * to.1[d];
            }
            let (xb, x_base) = self.window(&x.buf, x0, span(&sub, &from.1), elem)?;
            let (ob, out_base) = self.window(&out.buf, o0, span(&sub, &to.1), elem)?;
            let p = params(&sub, x_base as usize, out_base as usize);
            self.dispatch("strided", sub.iter().product(), &p, &[xb, ob])?;
        }
        Ok(())
    }
}

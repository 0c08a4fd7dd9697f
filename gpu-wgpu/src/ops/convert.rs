//! The 16-bit and i32 side of the device: casts by bits between F32, F16, BF16 and I32 (and
//! from them to F64, I64 and Bool), and 16-bit elements unpacked to one per word and packed
//! back, so the word kernels move them too.

use gflow_core::{DType, Result};

use crate::{WgpuBackend, WgpuStorage, elem_bytes};

impl WgpuBackend {
    /// `x` cast to `dtype` by `convert.wgsl` (`x` F32, F16, BF16 or I32), in pieces of an even
    /// number of elements that fit a binding. F16 <-> F32 use WGSL's `f16` where the device
    /// has `SHADER_F16`.
    pub(crate) fn convert(&self, x: &WgpuStorage, dtype: DType) -> Result<WgpuStorage> {
        let out = self.new_storage(x.len, dtype)?;
        let native = self.shader_f16
            && matches!(
                (x.dtype, dtype),
                (DType::F16, DType::F32) | (DType::F32, DType::F16)
            );
        let kernel = if native { "convert_f16" } else { "convert" };
        // elements per piece: even (a 16-bit piece starts on a word), at most 8 bytes each
        let piece = ((self.max_binding - self.align) / 8) as usize / 2 * 2;
        let mut first = 0;
        while first < x.len {
            let n = piece.min(x.len - first);
            let (xb, x_base) = self.window(&x.buf, first, n, width(x.dtype))?;
            let (ob, out_base) = self.window(&out.buf, first, n, width(dtype))?;
            let p = [
                n as u32,
                x.dtype.code() as u32,
                dtype.code() as u32,
                x_base,
                out_base,
            ];
            let threads = if dtype.is_half() { n.div_ceil(2) } else { n };
            self.dispatch(kernel, threads, &p, &[xb, ob])?;
            first += n;
        }
        Ok(out)
    }

    /// The 16-bit `x` one element per word (low half), as I32 words for the word kernels.
    pub(crate) fn unpack16(&self, x: &WgpuStorage) -> Result<WgpuStorage> {
        let out = self.new_storage(x.len, DType::I32)?;
        self.halves(x, &out, false)?;
        Ok(out)
    }

    /// Words of 16-bit elements (from [`WgpuBackend::unpack16`]) packed again as `dtype`.
    pub(crate) fn pack16(&self, words: &WgpuStorage, dtype: DType) -> Result<WgpuStorage> {
        let out = self.new_storage(words.len, dtype)?;
        self.halves(words, &out, true)?;
        Ok(out)
    }

    /// Runs a word kernel `f` on 16-bit `xs` unpacked, and packs its result as `xs[0]`'s dtype.
    pub(crate) fn on_words(
        &self,
        xs: &[&WgpuStorage],
        f: impl FnOnce(&[&WgpuStorage]) -> Result<WgpuStorage>,
    ) -> Result<WgpuStorage> {
        let dtype = xs.first().map_or(DType::F16, |x| x.dtype);
        let words = xs
            .iter()
            .map(|x| self.unpack16(x))
            .collect::<Result<Vec<_>>>()?;
        let out = f(&words.iter().collect::<Vec<_>>())?;
        self.pack16(&out, dtype)
    }

    /// `halves.wgsl` over `x` into `out`, in pieces of an even number of elements.
    fn halves(&self, x: &WgpuStorage, out: &WgpuStorage, pack: bool) -> Result<()> {
        let piece = ((self.max_binding - self.align) / 4) as usize / 2 * 2;
        let mut first = 0;
        while first < x.len {
            let n = piece.min(x.len - first);
            let (xb, x_base) = self.window(&x.buf, first, n, width(x.dtype))?;
            let (ob, out_base) = self.window(&out.buf, first, n, width(out.dtype))?;
            let p = [n as u32, u32::from(pack), x_base, out_base];
            let threads = if pack { n.div_ceil(2) } else { n };
            self.dispatch("halves", threads, &p, &[xb, ob])?;
            first += n;
        }
        Ok(())
    }

    /// `idx` as I64 indices (an I32 `idx` cast on the device into `keep`).
    pub(crate) fn i64_indices<'a>(
        &self,
        idx: &'a WgpuStorage,
        keep: &'a mut Option<WgpuStorage>,
    ) -> Result<&'a WgpuStorage> {
        if idx.dtype != DType::I32 {
            return Ok(idx);
        }
        Ok(keep.insert(self.convert(idx, DType::I64)?))
    }
}

/// Bytes of one element in a buffer of `dtype` (2 for the packed 16-bit floats).
pub(crate) fn width(dtype: DType) -> usize {
    if dtype.is_half() {
        2
    } else {
        elem_bytes(dtype)
    }
}

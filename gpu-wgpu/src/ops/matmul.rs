//! Matrix products: the tiled or register-blocked kernel, products in pieces past the binding
//! limit, long inner dims in chunks.

use gflow_core::backend::{Backend, BinaryOp, MatmulDims};
use gflow_core::shape::StridedCopy;
use gflow_core::{DType, Error, Result};

use crate::bind::GROUP;
use crate::{LOOP_MAX, WgpuBackend, WgpuStorage};

/// [`Backend::matmul`](gflow_core::backend::Backend::matmul) on this device.
pub(crate) fn matmul(
    w: &WgpuBackend,
    a: &WgpuStorage,
    b: &WgpuStorage,
    d: MatmulDims,
) -> Result<WgpuStorage> {
    w.need_f32(a, "matmul")?;
    w.need_f32(b, "matmul")?;
    let out = w.new_storage(d.batch * d.m * d.n, DType::F32)?;
    if out.len == 0 {
        return Ok(out);
    }
    // inner dims a thread may loop over, and whose one row of a binds
    let k_max = (2 * LOOP_MAX).min(((w.max_binding - w.align) / 4) as usize);
    if d.k > k_max {
        return w.matmul_k_chunks(a, b, d, k_max);
    }
    let bytes = |s: &WgpuStorage| (s.len * 4) as u64;
    if [bytes(a), bytes(b), bytes(&out)]
        .iter()
        .all(|&x| x <= w.max_binding)
    {
        let whole = [&a.buf, &b.buf, &out.buf].map(|buf| wgpu::BufferBinding {
            buffer: buf,
            offset: 0,
            size: None,
        });
        w.matmul_piece(d, [0, 0, 0], d.n, &whole)?;
    } else {
        w.matmul_in_pieces(a, b, &out, d)?;
    }
    Ok(out)
}

impl WgpuBackend {
    /// A product over an inner dim longer than a thread may loop (see [`LOOP_MAX`]) or than a
    /// binding holds: the sum of the products of `chunk`-long pieces of a's columns and b's
    /// rows.
    pub(crate) fn matmul_k_chunks(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        d: MatmulDims,
        chunk: usize,
    ) -> Result<WgpuStorage> {
        let (ab, bb) = (d.batch, if d.b_batched { d.batch } else { 1 });
        let out = [d.batch * d.m * d.n];
        let mut sum: Option<WgpuStorage> = None;
        for k0 in (0..d.k).step_by(chunk) {
            let kc = chunk.min(d.k - k0);
            let a_part = if d.a_trans {
                self.slice(a, &[ab, d.k, d.m], &[0, k0, 0], &[ab, kc, d.m])?
            } else {
                self.slice(a, &[ab, d.m, d.k], &[0, 0, k0], &[ab, d.m, kc])?
            };
            let b_part = if d.b_trans {
                self.slice(b, &[bb, d.n, d.k], &[0, 0, k0], &[bb, d.n, kc])?
            } else {
                self.slice(b, &[bb, d.k, d.n], &[0, k0, 0], &[bb, kc, d.n])?
            };
            let c = self.matmul(&a_part, &b_part, MatmulDims { k: kc, ..d })?;
            sum = Some(match sum {
                None => c,
                Some(s) => self.binary(BinaryOp::Add, &s, &out, &c, &out, &out)?,
            });
        }
        sum.ok_or_else(|| Error::Internal("a product in no chunks".into()))
    }

    /// One matmul dispatch over bound (pieces of) a, b and c whose data start at `bases`; c's
    /// rows are `ldc` elements apart.
    pub(crate) fn matmul_piece(
        &self,
        d: MatmulDims,
        bases: [u32; 3],
        ldc: usize,
        bindings: &[wgpu::BufferBinding<'_>; 3],
    ) -> Result<()> {
        let (name, threads) = if self.tiled_matmul {
            // one workgroup per 64x64 tile of each product
            let tiles = d.batch * d.m.div_ceil(64) * d.n.div_ceil(64);
            ("matmul_tiled", tiles * GROUP as usize)
        } else {
            ("matmul", d.batch * d.m.div_ceil(4) * d.n.div_ceil(4))
        };
        let p = [
            d.batch as u32,
            d.m as u32,
            d.k as u32,
            d.n as u32,
            u32::from(d.b_batched),
            u32::from(d.a_trans),
            u32::from(d.b_trans),
            bases[0],
            bases[1],
            bases[2],
            ldc as u32,
        ];
        self.dispatch(name, threads, &p, bindings)
    }

    /// A product whose operands or result exceed one binding. A transposed `a` is made
    /// contiguous first, and so is a `b` too large for one binding unless it is stored
    /// transposed (its column blocks are then row blocks of the stored (n, k)). Per batch,
    /// tiles of (rows of a) x (columns of b) that each fit a binding, c written at row stride n.
    pub(crate) fn matmul_in_pieces(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        out: &WgpuStorage,
        d: MatmulDims,
    ) -> Result<()> {
        let transposed = |x: &WgpuStorage, shape: [usize; 3]| -> Result<WgpuStorage> {
            let t = self.new_storage(x.len, DType::F32)?;
            self.strided(x, &t, &StridedCopy::permute(&shape, &[0, 2, 1]), false)?;
            Ok(t)
        };
        if d.a_trans {
            let a = transposed(a, [d.batch, d.k, d.m])?;
            let d = MatmulDims {
                a_trans: false,
                ..d
            };
            return self.matmul_in_pieces(&a, b, out, d);
        }
        let room = ((self.max_binding - self.align) / 4) as usize;
        let b_len = d.k * d.n;
        if b_len > room && !d.b_trans {
            let batches = if d.b_batched { d.batch } else { 1 };
            let b = transposed(b, [batches, d.k, d.n])?;
            let d = MatmulDims { b_trans: true, ..d };
            return self.matmul_in_pieces(a, &b, out, d);
        }
        let cols = if b_len <= room {
            d.n.min(room)
        } else {
            room / d.k
        };
        // `matmul` chunks k to at most `room`, and c is not empty: rows and cols are >= 1
        let rows = (room / d.k.max(1)).min(room.saturating_sub(cols) / d.n.max(1) + 1);
        for bi in 0..d.batch {
            let b_start = if d.b_batched { bi * b_len } else { 0 };
            let mut j0 = 0;
            while j0 < d.n {
                let nb = cols.min(d.n - j0);
                let (b_bind, b_base) = if nb == d.n {
                    self.window(&b.buf, b_start, b_len, 4)?
                } else {
                    self.window(&b.buf, b_start + j0 * d.k, nb * d.k, 4)?
                };
                let mut i0 = 0;
                while i0 < d.m {
                    let r = rows.min(d.m - i0);
                    let first = bi * d.m + i0;
                    let (a_bind, a_base) = self.window(&a.buf, first * d.k, r * d.k, 4)?;
                    let c_span = (r - 1) * d.n + nb;
                    let (c_bind, c_base) = self.window(&out.buf, first * d.n + j0, c_span, 4)?;
                    let piece = MatmulDims {
                        batch: 1,
                        m: r,
                        n: nb,
                        b_batched: false,
                        ..d
                    };
                    self.matmul_piece(
                        piece,
                        [a_base, b_base, c_base],
                        d.n,
                        &[a_bind, b_bind.clone(), c_bind],
                    )?;
                    i0 += r;
                }
                j0 += nb;
            }
        }
        Ok(())
    }
}

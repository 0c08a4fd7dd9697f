//! bf16 matrix products with AVX512-BF16's pair dot products (`vdpbf16ps`), on x86-64 CPUs that
//! have them (checked at run time; elsewhere bf16 products convert to f32 and run the f32
//! kernels). One instruction multiplies 16 pairs of bf16 by 16 pairs and adds both products to
//! 16 f32 sums, twice an f32 multiply-add's work: PyTorch's oneDNN reached 958 GFLOP/s with it
//! on two Zen 4 cores, where the conversion to f32 reached 292.
//!
//! `b` is packed once per product into [`NR`]-column panels of k-pairs (each 32-bit word holds
//! two consecutive k of one column), `a` row panel by row panel into [`MR`] rows of k-pairs, and
//! an MR x NR register tile of f32 sums (28 of the 32 vector registers) takes one broadcast pair
//! of `a` against two vectors of `b` per step. The sums are f32, rounded once to bf16 as each
//! tile is stored (PyTorch's rule for 16-bit products), so no f32 product is ever allocated. The
//! tile and rounding kernels have portable twins with the same arithmetic, so the packing and
//! tiling are tested on every CPU.

use rayon::prelude::*;

use super::sgemm::View;
use crate::dtype::bf16;

/// Rows of the register tile.
const MR: usize = 14;
/// Columns of the register tile (two 16-lane vectors).
const NR: usize = 32;

/// One tile: the MR x NR sums of a packed row panel (`kp` pairs) against a packed column panel.
type Tile = fn(usize, &[u32], &[u32], &mut [[f32; NR]; MR]);

/// Rounds f32 sums to bf16 (to nearest, ties to even; NaN stays NaN), as many as both hold.
type Round = fn(&[f32], &mut [bf16]);

/// Whether this CPU runs the pair dot products.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out` (m x n, row-major, every element written) = `a` (m x k) times `b` (k x n), summed in
/// f32 and rounded once; `false` (nothing written) where the CPU lacks AVX512-BF16. `threads`:
/// split the rows over rayon's threads.
pub(super) fn product(
    a: View<'_, bf16>,
    b: View<'_, bf16>,
    dims: (usize, usize, usize),
    out: &mut [bf16],
    threads: bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if available() {
        run(
            a,
            b,
            dims,
            out,
            threads,
            (simd::tile_checked, simd::round_checked),
        );
        return true;
    }
    let _ = (a, b, dims, out, threads);
    false
}

/// Two bf16 as one word: `lo` in the low half (the first of the pair).
fn pair(lo: bf16, hi: bf16) -> u32 {
    u32::from(lo.to_bits()) | (u32::from(hi.to_bits()) << 16)
}

/// Columns `c0..c0 + width` of `v` (k x n) as k-pairs: word `kk * width + c` holds rows 2kk and
/// 2kk + 1 of column c0 + c (zeros past the edges). `b`'s column panels, and `a`'s row panels as
/// column panels of its transpose.
fn pack(v: View<'_, bf16>, c0: usize, (n, k): (usize, usize), dst: &mut [u32], width: usize) {
    let cols = width.min(n - c0);
    if v.cs == 1 {
        // rows of contiguous columns (`b`): two row slices interleaved per word
        let row = |r: usize| &v.data[r * v.rs + c0..][..cols];
        for (kk, words) in dst.chunks_exact_mut(width).enumerate() {
            let (words, pad) = words.split_at_mut(cols);
            let lo = row(2 * kk);
            if 2 * kk + 1 < k {
                for ((w, &l), &h) in words.iter_mut().zip(lo).zip(row(2 * kk + 1)) {
                    *w = pair(l, h);
                }
            } else {
                for (w, &l) in words.iter_mut().zip(lo) {
                    *w = pair(l, bf16::ZERO);
                }
            }
            pad.fill(0);
        }
    } else if v.rs == 1 {
        // columns of contiguous rows (`a`'s rows, as its transpose's columns): each column's
        // consecutive pairs are its words
        let kp = k.div_ceil(2);
        for c in 0..width {
            if c >= cols {
                (0..kp).for_each(|kk| dst[kk * width + c] = 0);
                continue;
            }
            let mut pairs = v.data[(c0 + c) * v.cs..][..k].chunks_exact(2);
            for (kk, p) in pairs.by_ref().enumerate() {
                dst[kk * width + c] = pair(p[0], p[1]);
            }
            if let [last] = pairs.remainder() {
                dst[(kp - 1) * width + c] = pair(*last, bf16::ZERO);
            }
        }
    } else {
        for (kk, words) in dst.chunks_exact_mut(width).enumerate() {
            let r = 2 * kk;
            for (c, w) in words.iter_mut().enumerate() {
                *w = if c < cols {
                    let hi = if r + 1 < k {
                        v.at(r + 1, c0 + c)
                    } else {
                        bf16::ZERO
                    };
                    pair(v.at(r, c0 + c), hi)
                } else {
                    0
                };
            }
        }
    }
}

/// The product with `tile` computing each MR x NR block of the output and `round` storing it.
fn run(
    a: View<'_, bf16>,
    b: View<'_, bf16>,
    (m, n, k): (usize, usize, usize),
    out: &mut [bf16],
    threads: bool,
    (tile, round): (Tile, Round),
) {
    let kp = k.div_ceil(2);
    let panels = n.div_ceil(NR);
    let mut packed_b = vec![0u32; panels * kp * NR];
    let panel = |(p, dst): (usize, &mut [u32])| pack(b, p * NR, (n, k), dst, NR);
    if threads {
        packed_b.par_chunks_mut(kp * NR).enumerate().for_each(panel);
    } else {
        packed_b.chunks_mut(kp * NR).enumerate().for_each(panel);
    }
    let packed_b = &packed_b;
    let rows = |(rp, o): (usize, &mut [bf16]), packed_a: &mut Vec<u32>| {
        let r0 = rp * MR;
        packed_a.resize(kp * MR, 0);
        pack(a.t(), r0, (m, k), packed_a, MR);
        let mut sums = [[0f32; NR]; MR];
        for p in 0..panels {
            let c0 = p * NR;
            tile(
                kp,
                packed_a,
                &packed_b[p * kp * NR..(p + 1) * kp * NR],
                &mut sums,
            );
            let cols = NR.min(n - c0);
            for (row, s) in o.chunks_exact_mut(n).zip(&sums) {
                round(&s[..cols], &mut row[c0..c0 + cols]);
            }
        }
    };
    if threads {
        out[..m * n]
            .par_chunks_mut(MR * n)
            .enumerate()
            .for_each_init(Vec::new, |packed_a, x| rows(x, packed_a));
    } else {
        let mut packed_a = Vec::new();
        for x in out[..m * n].chunks_mut(MR * n).enumerate() {
            rows(x, &mut packed_a);
        }
    }
}

/// The rounding in portable code: `half`'s conversion, element by element.
#[cfg(test)]
fn round_portable(sums: &[f32], out: &mut [bf16]) {
    for (o, &s) in out.iter_mut().zip(sums) {
        *o = bf16::from_f32(s);
    }
}

/// The tile in portable code, in the instruction's order: per pair, the sum plus the first
/// product, plus the second (f32 products of bf16 are exact). `vdpbf16ps` also flushes
/// subnormal inputs and results to zero; products here keep them.
#[cfg(test)]
fn tile_portable(kp: usize, a: &[u32], b: &[u32], sums: &mut [[f32; NR]; MR]) {
    let lo = |w: u32| f32::from_bits(w << 16);
    let hi = |w: u32| f32::from_bits(w & 0xffff_0000);
    *sums = [[0.0; NR]; MR];
    for kk in 0..kp {
        for (i, row) in sums.iter_mut().enumerate() {
            let x = a[kk * MR + i];
            for (j, s) in row.iter_mut().enumerate() {
                let y = b[kk * NR + j];
                *s = (*s + lo(x) * lo(y)) + hi(x) * hi(y);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::{
        __m512, __m512bh, __m512i, _CMP_UNORD_Q, _mm256_storeu_si256, _mm512_add_epi32,
        _mm512_and_si512, _mm512_castsi512_ps, _mm512_cmp_ps_mask, _mm512_cvtepi32_epi16,
        _mm512_dpbf16_ps, _mm512_loadu_si512, _mm512_mask_blend_epi32, _mm512_or_si512,
        _mm512_set1_epi32, _mm512_setzero_ps, _mm512_srli_epi32, _mm512_storeu_ps,
    };

    use super::{MR, NR};
    use crate::dtype::bf16;

    /// [`round`] where `product` found AVX-512F.
    pub(super) fn round_checked(sums: &[f32], out: &mut [bf16]) {
        // SAFETY: only `product` passes this, after `available()` found AVX-512F.
        unsafe { round(sums, out) }
    }

    /// `half`'s rounding 16 lanes at a time: add 0x7fff plus the kept part's lowest bit and
    /// drop the low half (to nearest, ties to even), NaN's top half with its quiet bit set.
    #[target_feature(enable = "avx512f")]
    unsafe fn round(sums: &[f32], out: &mut [bf16]) {
        let len = sums.len().min(out.len());
        let full = len - len % 16;
        let (one, bias, quiet) = (
            _mm512_set1_epi32(1),
            _mm512_set1_epi32(0x7fff),
            _mm512_set1_epi32(0x40),
        );
        for i in (0..full).step_by(16) {
            // SAFETY: i + 16 <= len, within both slices; bf16 is 16 bits as the stored words.
            unsafe {
                let x = _mm512_loadu_si512(sums.as_ptr().add(i).cast());
                let top = _mm512_srli_epi32::<16>(x);
                let even = _mm512_add_epi32(bias, _mm512_and_si512(top, one));
                let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(x, even));
                let f = _mm512_castsi512_ps(x);
                let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(f, f);
                let bits = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(top, quiet));
                _mm256_storeu_si256(out.as_mut_ptr().add(i).cast(), _mm512_cvtepi32_epi16(bits));
            }
        }
        for (o, &s) in out[full..len].iter_mut().zip(&sums[full..len]) {
            *o = bf16::from_f32(s);
        }
    }

    /// [`tile`] behind the bounds its loads rely on.
    pub(super) fn tile_checked(kp: usize, a: &[u32], b: &[u32], sums: &mut [[f32; NR]; MR]) {
        assert!(
            a.len() >= kp * MR && b.len() >= kp * NR,
            "packed panels too short"
        );
        // SAFETY: `product` calls this only where `available()` found AVX-512F and
        // AVX512-BF16; the panels hold `kp` steps (checked above).
        unsafe { tile(kp, a, b, sums) }
    }

    /// The MR x NR sums in 28 registers: per k-pair, two vectors of `b` and one broadcast pair
    /// of `a` per row.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn tile(kp: usize, a: &[u32], b: &[u32], sums: &mut [[f32; NR]; MR]) {
        let mut acc: [[__m512; 2]; MR] = [[_mm512_setzero_ps(); 2]; MR];
        let (a, b) = (a.as_ptr(), b.as_ptr());
        for kk in 0..kp {
            // SAFETY: b holds kp * NR words and a kp * MR (checked by the caller); each load
            // reads 16 words of step kk's panel row.
            let (b0, b1) = unsafe {
                let p = b.add(kk * NR);
                (
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(p.cast())),
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(p.add(16).cast())),
                )
            };
            let at = a.wrapping_add(kk * MR);
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: word i < MR of step kk; a 512-bit vector of 16 words is 16 bf16
                // pairs, the same bits.
                let x = unsafe {
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(*at.add(i) as i32))
                };
                row[0] = _mm512_dpbf16_ps(row[0], x, b0);
                row[1] = _mm512_dpbf16_ps(row[1], x, b1);
            }
        }
        for (row, s) in acc.iter().zip(sums.iter_mut()) {
            // SAFETY: each row of sums holds NR = 32 floats, two stores of 16.
            unsafe {
                _mm512_storeu_ps(s.as_mut_ptr(), row[0]);
                _mm512_storeu_ps(s.as_mut_ptr().add(16), row[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf(v: &[f64]) -> Vec<bf16> {
        v.iter().map(|&x| bf16::from_f64(x)).collect()
    }

    /// The f64 product of the bf16 operands (exact products, one rounding at the end).
    fn reference(
        a: View<'_, bf16>,
        b: View<'_, bf16>,
        (m, n, k): (usize, usize, usize),
    ) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|l| a.at(i, l).to_f64() * b.at(l, j).to_f64())
                    .sum();
            }
        }
        out
    }

    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    /// Edges (m, n, k not multiples of the tile, k odd), transposed and gapped operands (each
    /// of the packing's three paths), the portable and vector kernels where the CPU has the
    /// instructions, threads or not: within f32 summation error of the f64 product plus one
    /// bf16 rounding, and the vector kernels equal to the portable ones bit for bit.
    #[test]
    fn products_equal_the_f64_product_at_every_edge() {
        let mut kernels: Vec<(&str, (Tile, Round))> =
            vec![("portable", (tile_portable, round_portable))];
        #[cfg(target_arch = "x86_64")]
        if available() {
            kernels.push(("avx512bf16", (simd::tile_checked, simd::round_checked)));
        } else {
            eprintln!(
                "!!! no AVX512-BF16 on this CPU: only the portable tile kernel is tested !!!"
            );
        }
        for (m, n, k) in [
            (1, 1, 1),
            (14, 32, 2),
            (15, 33, 3),
            (29, 70, 131),
            (3, 100, 64),
            (17, 40, 601),
        ] {
            let av = bf(&values(m * k, 1));
            let bv = bf(&values(k * n, 2));
            for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
                // A transposed operand is stored as its transpose's rows.
                let a = if a_t {
                    View::transposed(&av, m)
                } else {
                    View::rows(&av, 0, k)
                };
                let b = if b_t {
                    View::transposed(&bv, k)
                } else {
                    View::rows(&bv, 0, n)
                };
                // and every other element of a matrix twice as wide (neither stride 1)
                let wide_a = bf(&values(2 * m * k, 3));
                let gapped = View {
                    data: &wide_a,
                    rs: 2 * k,
                    cs: 2,
                };
                let a = if a_t && b_t { gapped } else { a };
                let want = reference(a, b, (m, n, k));
                let mut first: Option<Vec<bf16>> = None;
                for &(name, kernel) in &kernels {
                    for threads in [false, true] {
                        let mut out = vec![bf16::NAN; m * n];
                        run(a, b, (m, n, k), &mut out, threads, kernel);
                        for (i, (g, w)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                (g.to_f64() - w).abs() <= 1e-6 * k as f64 + w.abs() / 256.0,
                                "{name} {m}x{n}x{k} trans {a_t},{b_t} [{i}]: {g} vs {w}"
                            );
                        }
                        let first = first.get_or_insert_with(|| out.clone());
                        let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&out), bits(first), "{name} {m}x{n}x{k}");
                    }
                }
            }
        }
    }

    /// The vector rounding is `half`'s, bit for bit: ties both ways, the largest finite values
    /// (one rounds to inf), infinities, subnormals, signed zeros and NaNs with payloads, in every
    /// lane and in the scalar tail.
    #[test]
    fn vector_rounding_is_halfs() {
        let specials: Vec<f32> = [
            0x3f80_8000u32, // a tie, kept part even: down
            0x3f81_8000,    // a tie, kept part odd: up
            0x3f80_8001,
            0x3f80_7fff,
            0x7f7f_ffff, // rounds to inf
            0x7f7f_7fff,
            0x7f80_0000,
            0xff80_0000,
            0x0000_0001,
            0x8000_8000,
            0x0000_0000,
            0x8000_0000,
            0x7fc0_0000,
            0x7f80_0001, // a signalling NaN: half quietens it
            0xffc1_2345,
        ]
        .into_iter()
        .map(f32::from_bits)
        .chain(values(70, 4).into_iter().map(|v| (v * 1e3) as f32))
        .collect();
        let mut want = vec![bf16::ZERO; specials.len()];
        round_portable(&specials, &mut want);
        #[cfg(target_arch = "x86_64")]
        if available() {
            let mut got = vec![bf16::ZERO; specials.len()];
            simd::round_checked(&specials, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "[{i}] {:#x}",
                    specials[i].to_bits()
                );
            }
            return;
        }
        eprintln!("!!! no AVX512-BF16 on this CPU: the vector rounding is not tested !!!");
    }
}

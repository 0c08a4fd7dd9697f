//! `f32` matrix products with AVX-512, on x86-64 CPUs that have it (checked at run time; the
//! `gemm` crate's AVX2 kernels serve the others, and all other dtypes). `gemm` reaches AVX-512
//! only on a nightly compiler, which left half of these CPUs' multiply-add width unused (163
//! against NumPy's and PyTorch's 290-310 GFLOP/s at 2048^3 on two cores).
//!
//! BLIS's blocking: `b` packed in (KC, NC) blocks of NR-wide column panels, `a` in (MC, KC)
//! blocks of MR-tall row panels (or read in place where the product is at most 1024 wide and
//! `a` has contiguous rows, or contiguous columns that several threads read), and a register tile of MR x NR = 14 x 32 outputs (28 of
//! the 32 vector registers) updated by broadcast-multiply-adds, so each loaded element of `a`
//! and `b` serves 32 and 14 outputs. Each thread computes one region of the output whole,
//! packing its own blocks (a grid of near-equal regions, cut where the threads pack least).
//! [`Packed`] holds a right operand packed once for many products (attention's keys
//! and values).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512, _MM_HINT_T0, _mm_prefetch, _mm512_castpd_ps, _mm512_castps_pd, _mm512_fmadd_ps,
    _mm512_loadu_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_set1_ps,
    _mm512_setzero_ps, _mm512_shuffle_f32x4, _mm512_storeu_ps, _mm512_unpackhi_pd,
    _mm512_unpackhi_ps, _mm512_unpacklo_pd, _mm512_unpacklo_ps,
};

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::mem::MaybeUninit;

use rayon::prelude::*;

/// Rows of the register tile.
const MR: usize = 14;
/// Columns of the register tile (two 16-lane vectors).
const NR: usize = 32;
/// Depth of a packed block: a (KC, NR) panel of `b` is 32 KiB, inside L1.
const KC: usize = 256;
/// Rows of a packed block of `a` (168 x 256 x 4 B = 168 KiB, inside L2).
const MC: usize = MR * 12;
/// Columns of a packed block of `b`.
const NC: usize = NR * 64;
/// Products at most this wide read `a` in place rather than packing it (A/B on the GPT's
/// shapes: no slower from 128 to 1024 columns, while packing took 8 % of a step).
const DIRECT_N: usize = NR * 32;

/// A strided matrix operand: its data from the first element, row and column strides.
#[derive(Debug)]
pub(crate) struct View<'a, T> {
    /// The elements, from the matrix's first.
    pub data: &'a [T],
    /// Distance between rows.
    pub rs: usize,
    /// Distance between columns.
    pub cs: usize,
}

impl<T> Clone for View<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for View<'_, T> {}

impl<'a, T> View<'a, T> {
    /// Row-major rows of `cols` elements, from row `row` on.
    pub(crate) fn rows(data: &'a [T], row: usize, cols: usize) -> Self {
        View {
            data: data.get(row * cols..).unwrap_or(&[]),
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of row-major data with rows of `cols` elements.
    pub(crate) fn transposed(data: &'a [T], cols: usize) -> Self {
        View {
            data,
            rs: 1,
            cs: cols,
        }
    }

    /// Whether an `r x c` matrix under these strides lies inside the data.
    pub(crate) fn holds(&self, r: usize, c: usize) -> bool {
        r == 0 || c == 0 || (r - 1) * self.rs + (c - 1) * self.cs < self.data.len()
    }
}

impl<T: Copy> View<'_, T> {
    /// The element in row `r`, column `c`.
    pub(crate) fn at(&self, r: usize, c: usize) -> T {
        self.data[r * self.rs + c * self.cs]
    }

    /// The transposed matrix (the same data, strides swapped).
    pub(crate) fn t(self) -> Self {
        View {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// [`gemm`] where `T` is `f32` and the CPU has AVX-512F (`dst` written, or accumulated into
/// when `acc`, as there); false, touching nothing, where the caller must compute it.
pub(crate) fn product<T: 'static + Copy>(
    dst: &mut [MaybeUninit<T>],
    ld: usize,
    dims: (usize, usize, usize),
    (a, b): (View<'_, T>, View<'_, T>),
    (acc, beta): (bool, T),
    threads: bool,
) -> bool {
    let (Some(dst), Some(a), Some(b), Some(beta)) =
        (f32_slots(dst), f32_view(a), f32_view(b), f32_of(beta))
    else {
        return false;
    };
    gemm(dst, ld, dims, a, b, (acc, beta, None), threads);
    true
}

/// `dst = a b + bias` (the `n`-element `bias` added to every row, as a linear layer's) where
/// `T` is `f32` and the CPU has AVX-512F: the bias enters the register tile as it is stored,
/// so the output is written once, not written and then read and written again by an add;
/// false, touching nothing, where the caller must compute it.
pub(crate) fn product_bias<T: 'static + Copy>(
    dst: &mut [MaybeUninit<T>],
    ld: usize,
    dims: (usize, usize, usize),
    (a, b): (View<'_, T>, View<'_, T>),
    bias: &[T],
    threads: bool,
) -> bool {
    let (Some(dst), Some(a), Some(b), Some(bias)) = (
        f32_slots(dst),
        f32_view(a),
        f32_view(b),
        f32_view(View::rows(bias, 0, 1)),
    ) else {
        return false;
    };
    if bias.data.len() < dims.1 {
        return false;
    }
    gemm(dst, ld, dims, a, b, (false, 1.0, Some(bias.data)), threads);
    true
}

/// A (k, n) right operand packed once, whole, in NR-wide column panels of all its rows, for
/// many products against it or its leading rows and columns ([`product_packed`]: attention's
/// keys and values, a head at a time).
pub(crate) struct Packed {
    data: Vec<f32>,
    k: usize,
    n: usize,
}

impl Packed {
    /// `b` (k, n) packed; `None` where [`product_packed`] cannot run (`T` not `f32`, no
    /// AVX-512F) or `b` does not hold its matrix.
    pub(crate) fn new<T: 'static + Copy>(b: View<'_, T>, k: usize, n: usize) -> Option<Packed> {
        let b = f32_view(b)?;
        if !b.holds(k, n) {
            return None;
        }
        // a buffer this thread used before: a fresh one per head costs its page faults again
        let mut data = PACKED_POOL
            .with(|pool| pool.try_borrow_mut().ok().and_then(|mut p| p.pop()))
            .unwrap_or_default();
        // `pack_b` writes every element, so old contents need no zeroing first
        data.resize(k * n.next_multiple_of(NR), 0.0);
        pack_b(&mut data, b, (0, k), (0, n));
        Some(Packed { data, k, n })
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        let data = std::mem::take(&mut self.data);
        PACKED_POOL.with(|pool| {
            if let Ok(mut p) = pool.try_borrow_mut()
                && p.len() < POOLED
            {
                p.push(data);
            }
        });
    }
}

/// Buffers of dropped [`Packed`] operands a thread keeps for its next ones.
const POOLED: usize = 4;

/// `dst = [dst +] beta * a b` for an (m, k) `a` read in place and the leading (k, n) of the
/// packed `b`, with `dst` as in [`gemm`], on this thread; false, touching nothing, where it
/// cannot (`T` not `f32`, `a` with neither rows nor columns contiguous, or shapes that do not
/// fit), and the caller must compute it.
pub(crate) fn product_packed<T: 'static + Copy>(
    dst: &mut [MaybeUninit<T>],
    ld: usize,
    (m, n, k): (usize, usize, usize),
    (a, b): (View<'_, T>, &Packed),
    (acc, beta): (bool, T),
) -> bool {
    let (Some(dst), Some(a), Some(beta)) = (f32_slots(dst), f32_view(a), f32_of(beta)) else {
        return false;
    };
    let fits = m == 0 || n == 0 || ((m - 1) * ld + n <= dst.len() && n <= ld);
    if !fits || !a.holds(m, k) || (a.cs != 1 && a.rs != 1) || k > b.k || n > b.n {
        return false;
    }
    if m == 0 || n == 0 || k == 0 {
        // k == 0: a product of nothing; gemm writes the zeros
        gemm(dst, ld, (m, n, k), a, a, (acc, beta, None), false);
        return true;
    }
    let out = Out {
        ptr: dst.as_mut_ptr().cast::<f32>(),
        ld,
    };
    for j in (0..n).step_by(NR) {
        let w = NR.min(n - j);
        let panel = &b.data[(j / NR) * b.k * NR..(j / NR + 1) * b.k * NR];
        for i in (0..m).step_by(MR) {
            let h = MR.min(m - i);
            // SAFETY: `f32_view` said the CPU has AVX-512F; the h x w tile at (i, j) lies
            // inside dst (checked above); rows i .. i + h, columns 0 .. k of a lie inside a
            // (checked); the panel holds b.k >= k rows of NR elements.
            unsafe {
                let at = a.data.as_ptr().add(i * a.rs);
                let tile = (out.at(i, j), ld, h, w);
                kernel::<true>(k, (at, a.rs, a.cs), panel, tile, (Start::new(acc), beta));
            }
        }
    }
    true
}

/// `v` as `f32`s where `T` is `f32` and the CPU runs [`gemm`].
fn f32_view<T: 'static>(v: View<'_, T>) -> Option<View<'_, f32>> {
    if TypeId::of::<T>() != TypeId::of::<f32>() || !available() {
        return None;
    }
    // SAFETY: T is f32 (same TypeId): the same elements, length and layout.
    let data = unsafe { std::slice::from_raw_parts(v.data.as_ptr().cast::<f32>(), v.data.len()) };
    Some(View {
        data,
        rs: v.rs,
        cs: v.cs,
    })
}

/// `dst` as `f32` slots where `T` is `f32`.
fn f32_slots<T: 'static>(dst: &mut [MaybeUninit<T>]) -> Option<&mut [MaybeUninit<f32>]> {
    if TypeId::of::<T>() != TypeId::of::<f32>() {
        return None;
    }
    // SAFETY: T is f32 (same TypeId): the same slots, length and layout.
    Some(unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast(), dst.len()) })
}

/// `x` as an `f32` where `T` is `f32`.
fn f32_of<T: 'static + Copy>(x: T) -> Option<f32> {
    (&x as &dyn Any).downcast_ref::<f32>().copied()
}

/// Whether this CPU runs [`gemm`].
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The output's rows, shared by threads that write disjoint tiles of it.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    ld: usize,
}

// SAFETY: threads write disjoint tiles of the output (distinct rows or columns), and the
// borrow it was made from outlives every thread's use (rayon's scope returns first).
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

impl Out {
    /// The element at row `r`, column `c`.
    ///
    /// # Safety
    /// `(r, c)` lies inside the output.
    unsafe fn at(self, r: usize, c: usize) -> *mut f32 {
        // SAFETY: the caller's.
        unsafe { self.ptr.add(r * self.ld + c) }
    }
}

/// `dst = [dst +] beta * a b [+ bias]` for an (m, k) `a`, a (k, n) `b` and an (m, n) `dst`
/// with row stride `ld` (accumulating into it when `acc`, which must then be initialised;
/// written whole otherwise, with `bias`, at least `n` long, added to every row where given and
/// not `acc`); on all threads when `threads`. Computed plainly where an operand does not hold
/// its matrix or the CPU lacks AVX-512F (the callers check both first).
fn gemm(
    dst: &mut [MaybeUninit<f32>],
    ld: usize,
    (m, n, k): (usize, usize, usize),
    a: View<'_, f32>,
    b: View<'_, f32>,
    (acc, beta, bias): (bool, f32, Option<&[f32]>),
    threads: bool,
) {
    let bias = bias.filter(|_| !acc);
    let fits = m == 0 || n == 0 || ((m - 1) * ld + n <= dst.len() && n <= ld);
    let bias_fits = bias.is_none_or(|b| b.len() >= n);
    if !fits || !bias_fits || !a.holds(m, k) || !b.holds(k, n) || !available() {
        // unreachable from the callers, which check all of this; compute it plainly anyway
        plain(dst, ld, (m, n, k), a, b, (acc, beta));
        if let Some(bias) = bias {
            for r in dst.chunks_mut(ld).take(m) {
                for (d, &x) in r.iter_mut().zip(bias) {
                    // SAFETY: `plain` wrote the row's first n elements, which the zip ends at.
                    d.write(unsafe { d.assume_init_read() } + x);
                }
            }
        }
        return;
    }
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !acc {
            for r in dst.chunks_mut(ld).take(m) {
                match bias {
                    Some(bias) => {
                        for (d, &x) in r[..n].iter_mut().zip(bias) {
                            d.write(x);
                        }
                    }
                    None => r[..n].fill(MaybeUninit::new(0.0)),
                }
            }
        }
        return;
    }
    let out = Out {
        ptr: dst.as_mut_ptr().cast::<f32>(),
        ld,
    };
    // One region of the output per thread, each computed whole by its thread (packing its own
    // operands' blocks): one fork and join per product, no thread idle while another packs,
    // and regions equal to a register tile.
    let (tr, tc) = if threads {
        grid(rayon::current_num_threads(), m, n)
    } else {
        (1, 1)
    };
    let region = |t: usize| {
        let (rows, cols) = (
            share(m.div_ceil(MR), tr, t / tc, MR, m),
            share(n.div_ceil(NR), tc, t % tc, NR, n),
        );
        let a = View {
            data: &a.data[rows.start * a.rs..],
            ..a
        };
        let b = View {
            data: &b.data[cols.start * b.cs..],
            ..b
        };
        // SAFETY: the region lies inside the output (rows < m, columns < n).
        let out = Out {
            ptr: unsafe { out.at(rows.start, cols.start) },
            ld,
        };
        serial(
            out,
            (rows.len(), cols.len(), k),
            (a, tc > 1),
            b,
            (acc, beta, bias.map(|b| &b[cols.start..])),
        );
    };
    if tr * tc > 1 {
        (0..tr * tc).into_par_iter().for_each(region);
    } else {
        region(0);
    }
}

/// The (rows, columns) grid of regions that `threads` threads divide an (m, n) output into:
/// the factorisation whose regions have the fewest rows plus columns (the elements each thread
/// packs), with at least one register tile each; fewer threads where the output is smaller.
fn grid(threads: usize, m: usize, n: usize) -> (usize, usize) {
    let (pm, pn) = (m.div_ceil(MR), n.div_ceil(NR));
    (1..=threads.min(pm * pn))
        .rev()
        .flat_map(|t| (1..=t).filter(move |r| t % r == 0).map(move |r| (r, t / r)))
        .filter(|&(r, c)| r <= pm && c <= pn)
        .min_by_key(|&(r, c)| (usize::MAX / (r * c), m.div_ceil(r) + n.div_ceil(c)))
        .unwrap_or((1, 1))
}

/// Part `i` of `parts` near-equal shares of `panels` units of `unit` elements (the last one
/// ending at `len`), as an element range.
fn share(panels: usize, parts: usize, i: usize, unit: usize, len: usize) -> std::ops::Range<usize> {
    let (q, r) = (panels / parts, panels % parts);
    let start = i * q + i.min(r);
    let end = start + q + usize::from(i < r);
    (start * unit).min(len)..(end * unit).min(len)
}

/// [`gemm`] of one region on this thread: BLIS's loops over (NC column, KC depth) blocks of
/// `b`, packed, and MC-row blocks of `a`, packed or read in place (`shared`: other threads
/// read the same rows of `a`).
fn serial(
    out: Out,
    (m, n, k): (usize, usize, usize),
    (a, shared): (View<'_, f32>, bool),
    b: View<'_, f32>,
    (acc, beta, bias): (bool, f32, Option<&[f32]>),
) {
    if m == 0 || n == 0 {
        return;
    }
    // `a` read in place where it serves few column panels and its rows are contiguous
    // (packing it costs about what its products do for attention's (64, 256) x (256, 64), and
    // 8 % of a GPT step's products), or its columns are and other threads would pack the same
    // rows (a transposed `a` read in place touches twice the cache lines: packed, the GPT's
    // (2048, 256) x (256, 256) ran at 265 GFLOP/s, in place 225; each of two threads packing
    // all of (256, 2048), 215, in place 235).
    let direct = n <= DIRECT_N && (a.cs == 1 || (a.rs == 1 && shared));
    with_scratch(
        &B_SCRATCH,
        KC.min(k) * NC.min(n).next_multiple_of(NR),
        |bp| {
            for jc in (0..n).step_by(NC) {
                let nc = NC.min(n - jc);
                for pc in (0..k).step_by(KC) {
                    let kc = KC.min(k - pc);
                    pack_b(bp, b, (pc, kc), (jc, nc));
                    // the first block of the depth writes (or accumulates into) dst, the rest add
                    let load = acc || pc > 0;
                    let start = |j: usize| match bias {
                        Some(bias) if !load => Start::Row(bias[jc + j..].as_ptr()),
                        _ => Start::new(load),
                    };
                    for ic in (0..m).step_by(MC) {
                        let mc = MC.min(m - ic);
                        let run = |ap: &[f32]| {
                            for j in (0..nc).step_by(NR) {
                                let w = NR.min(nc - j);
                                let panel = &bp[(j / NR) * kc * NR..(j / NR + 1) * kc * NR];
                                for i in (0..mc).step_by(MR) {
                                    let h = MR.min(mc - i);
                                    // SAFETY: `available` said the CPU has AVX-512F; the tile of
                                    // h x w outputs at (ic + i, jc + j) lies inside the region
                                    // (checked by `gemm`); the B panel holds kc x NR packed
                                    // elements; A's rows are MR-tall packed panels of ap, or
                                    // (direct) rows ic + i .. ic + i + h, columns pc.. of a,
                                    // inside a.
                                    unsafe {
                                        let c = out.at(ic + i, jc + j);
                                        let tile = (c, out.ld, h, w);
                                        if direct {
                                            let at =
                                                a.data.as_ptr().add((ic + i) * a.rs + pc * a.cs);
                                            let a = (at, a.rs, a.cs);
                                            kernel::<true>(kc, a, panel, tile, (start(j), beta));
                                        } else {
                                            let a = (ap.as_ptr().add(i * kc), 1, MR);
                                            kernel::<false>(kc, a, panel, tile, (start(j), beta));
                                        }
                                    }
                                }
                            }
                        };
                        if direct {
                            run(&[]);
                        } else {
                            with_scratch(&A_SCRATCH, kc * mc.next_multiple_of(MR), |ap| {
                                pack_a(ap, a, (ic, mc), (pc, kc));
                                run(ap);
                            });
                        }
                    }
                }
            }
        },
    );
}

thread_local! {
    /// Each thread's packed block of `b` (the calling thread's) and of `a` (a tile's).
    static B_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static A_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Buffers for [`Packed`] operands (see [`POOLED`]).
    static PACKED_POOL: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// `f` on `len` elements of this thread's `scratch` (grown, never shrunk: packing writes every
/// element it reads, so its old contents do not matter), or on a new buffer where it is in use
/// (rayon ran another product on this thread while it waited).
fn with_scratch<R>(
    scratch: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    scratch.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0.0);
            }
            f(&mut v[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}

/// Packs rows `pc..pc + kc` and columns `jc..jc + nc` of `b` into NR-wide panels, each `kc`
/// rows of NR contiguous elements, zero past the last column.
fn pack_b(bp: &mut [f32], b: View<'_, f32>, (pc, kc): (usize, usize), (jc, nc): (usize, usize)) {
    for (p, panel) in bp.chunks_mut(kc * NR).take(nc.div_ceil(NR)).enumerate() {
        let j0 = jc + p * NR;
        let w = NR.min(jc + nc - j0);
        if b.rs == 1 && b.cs != 1 {
            // a transposed operand: each column is contiguous, read whole into its slots
            let mut cols: [&[f32]; NR] = [&[]; NR];
            for (j, col) in cols.iter_mut().enumerate().take(w) {
                *col = &b.data[(j0 + j) * b.cs + pc..][..kc];
            }
            pack_columns(panel, &cols[..w], kc);
            continue;
        }
        for (kk, row) in panel.chunks_mut(NR).enumerate() {
            let r = pc + kk;
            if b.cs == 1 {
                let at = r * b.rs + j0;
                copy_run(&mut row[..w], &b.data[at..at + w]);
            } else {
                for (j, e) in row[..w].iter_mut().enumerate() {
                    *e = b.at(r, j0 + j);
                }
            }
            row[w..].fill(0.0);
        }
    }
}

/// One NR-wide panel of `kc` rows from at most NR contiguous columns (`cols`, each at least
/// `kc` long): `panel[kk * NR + j] = cols[j][kk]`, zero past the last column. Sixteen columns
/// at a time go through a 16 x 16 transpose in registers (a GPT's forward `x Wᵀ` packed its
/// weights with one scalar store per element: 3 % of a step); the rest element by element.
fn pack_columns(panel: &mut [f32], cols: &[&[f32]], kc: usize) {
    let panel = &mut panel[..kc * NR];
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if available() && cols.len() <= NR && cols.iter().all(|c| c.len() >= kc) {
        for group in cols.chunks_exact(16) {
            // SAFETY: the CPU has AVX-512F; the group's 16 columns hold kc elements each (checked
            // above), the panel kc rows of NR, and done + 16 <= cols.len() <= NR.
            unsafe { transpose_columns(panel, group, kc, done) };
            done += 16;
        }
    }
    for (kk, row) in panel.chunks_mut(NR).enumerate() {
        for (j, col) in cols.iter().enumerate().skip(done) {
            row[j] = col[kk];
        }
        row[cols.len()..].fill(0.0);
    }
}

/// `panel[kk * NR + at + j] = cols[j][kk]` for 16 columns, 16 rows at a time through a
/// register transpose (the rows past the last multiple of 16 one by one).
///
/// # Safety
/// The CPU has AVX-512F; `cols` holds 16 columns of at least `kc` elements and the panel `kc`
/// rows of NR, with `at + 16 <= NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_columns(panel: &mut [f32], cols: &[&[f32]], kc: usize, at: usize) {
    let full = kc / 16 * 16;
    for k0 in (0..full).step_by(16) {
        // SAFETY: k0 + 16 <= kc, inside every column.
        let rows: [__m512; 16] =
            std::array::from_fn(|j| unsafe { _mm512_loadu_ps(cols[j].as_ptr().add(k0)) });
        for (i, v) in transpose16(rows).into_iter().enumerate() {
            // SAFETY: row k0 + i < kc of the panel, columns at..at + 16 <= NR.
            unsafe { _mm512_storeu_ps(panel.as_mut_ptr().add((k0 + i) * NR + at), v) };
        }
    }
    for kk in full..kc {
        for (j, col) in cols.iter().enumerate() {
            panel[kk * NR + at + j] = col[kk];
        }
    }
}

/// The transpose of a 16 x 16 block held as 16 row vectors: element pairs, then pairs of
/// pairs, then 128-bit lanes twice (four rounds of 16 shuffles).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_ps(); 16];
    let pd = _mm512_castps_pd;
    for b in (0..16).step_by(4) {
        u[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[b]), pd(t[b + 2])));
        u[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[b]), pd(t[b + 2])));
        u[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[b + 1]), pd(t[b + 3])));
        u[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[b + 1]), pd(t[b + 3])));
    }
    for b in [0, 8] {
        for i in 0..4 {
            t[b + i] = _mm512_shuffle_f32x4::<0x88>(u[b + i], u[b + 4 + i]);
            t[b + 4 + i] = _mm512_shuffle_f32x4::<0xdd>(u[b + i], u[b + 4 + i]);
        }
    }
    std::array::from_fn(|i| {
        if i < 8 {
            _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i])
        } else {
            _mm512_shuffle_f32x4::<0xdd>(t[i - 8], t[i])
        }
    })
}

/// Packs rows `ic..ic + mc` and columns `pc..pc + kc` of `a` into MR-tall panels, each `kc`
/// columns of MR contiguous elements, zero past the last row.
fn pack_a(ap: &mut [f32], a: View<'_, f32>, (ic, mc): (usize, usize), (pc, kc): (usize, usize)) {
    for (p, panel) in ap.chunks_mut(kc * MR).enumerate() {
        let i0 = ic + p * MR;
        let h = MR.min(ic + mc - i0);
        // column by column: MR reads (one per row's stream) to one contiguous write
        for (kk, col) in panel.chunks_mut(MR).enumerate() {
            if a.rs == 1 {
                // a transposed operand: the column's h elements are contiguous
                let at = i0 + (pc + kk) * a.cs;
                copy_run(&mut col[..h], &a.data[at..at + h]);
            } else {
                for (i, e) in col[..h].iter_mut().enumerate() {
                    *e = a.at(i0 + i, pc + kk);
                }
            }
            col[h..].fill(0.0);
        }
    }
}

/// `dst = src` for a packed panel's row or column: a whole one (NR or MR elements) as a copy
/// of constant size, a few vector moves rather than a `memcpy` call per row (the GPT's
/// weight-gradient products, which pack both operands: 208-247 -> 237-267 GFLOP/s).
#[inline(always)]
fn copy_run(dst: &mut [f32], src: &[f32]) {
    if let (Ok(d), Ok(s)) = (
        <&mut [f32; NR]>::try_from(&mut *dst),
        <&[f32; NR]>::try_from(src),
    ) {
        *d = *s;
    } else if let (Ok(d), Ok(s)) = (
        <&mut [f32; MR]>::try_from(&mut *dst),
        <&[f32; MR]>::try_from(src),
    ) {
        *d = *s;
    } else {
        dst.copy_from_slice(src);
    }
}

/// The register tile: `c = [c +] beta * a bp` over `kc` columns of `a` (MR rows) and rows
/// of `bp` (NR columns), storing the top-left `h x w` of the tile. `a` is `(first element, row
/// stride, column stride)`: a packed panel (1, MR) or, when `DIRECT`, `a` in place under any
/// strides (element (i, p) at `i * rs + p * cs`; rows past `h` read row `h - 1`).
///
/// # Safety
/// The CPU has AVX-512F; `a` holds `kc` columns of its MR (packed) or `h` (direct) rows, `bp`
/// `kc * NR` elements; `c` points at an `h x w` tile (row stride `ld`) of one allocation,
/// aliasing neither.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn kernel<const DIRECT: bool>(
    kc: usize,
    (a, rs, cs): (*const f32, usize, usize),
    bp: &[f32],
    (c, ld, h, w): (*mut f32, usize, usize, usize),
    (start, beta): (Start, f32),
) {
    // the tile's rows of c, fetched while the products run
    for i in 0..h {
        let row = c.wrapping_add(i * ld);
        _mm_prefetch::<_MM_HINT_T0>(row.cast::<i8>());
        _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(16).cast::<i8>());
    }
    let rows: [*const f32; MR] = std::array::from_fn(|i| {
        if DIRECT {
            a.wrapping_add(i.min(h.max(1) - 1) * rs)
        } else {
            a.wrapping_add(i)
        }
    });
    let step = if DIRECT { cs } else { MR };
    let mut t: [[__m512; 2]; MR] = [[_mm512_setzero_ps(); 2]; MR];
    let bp = bp.as_ptr();
    for p in 0..kc {
        // SAFETY: p < kc, so both loads lie inside the panel.
        let (b0, b1) = unsafe {
            (
                _mm512_loadu_ps(bp.add(p * NR)),
                _mm512_loadu_ps(bp.add(p * NR + 16)),
            )
        };
        for (ti, row) in t.iter_mut().zip(&rows) {
            // SAFETY: column p < kc of a row `a` holds.
            let ai = _mm512_set1_ps(unsafe { *row.add(p * step) });
            ti[0] = _mm512_fmadd_ps(ai, b0, ti[0]);
            ti[1] = _mm512_fmadd_ps(ai, b1, ti[1]);
        }
    }
    let bv = _mm512_set1_ps(beta);
    let lanes = |from: usize| -> u16 {
        let n = w.saturating_sub(from).min(16);
        if n == 16 { u16::MAX } else { (1u16 << n) - 1 }
    };
    let (m0, m1) = (lanes(0), lanes(16));
    // SAFETY: a bias row holds the tile's w columns (the caller's).
    let bias = match start {
        Start::Row(r) => unsafe {
            Some((
                _mm512_maskz_loadu_ps(m0, r),
                _mm512_maskz_loadu_ps(m1, r.add(16)),
            ))
        },
        _ => None,
    };
    let load = matches!(start, Start::Dst);
    for (i, ti) in t.iter().enumerate().take(h) {
        // SAFETY: row i < h of the tile, its first w <= NR elements inside dst.
        unsafe {
            let row = c.add(i * ld);
            let (c0, c1) = if load {
                (
                    _mm512_maskz_loadu_ps(m0, row),
                    _mm512_maskz_loadu_ps(m1, row.add(16)),
                )
            } else {
                bias.unwrap_or((_mm512_setzero_ps(), _mm512_setzero_ps()))
            };
            if w == NR {
                _mm512_storeu_ps(row, _mm512_fmadd_ps(ti[0], bv, c0));
                _mm512_storeu_ps(row.add(16), _mm512_fmadd_ps(ti[1], bv, c1));
            } else {
                _mm512_mask_storeu_ps(row, m0, _mm512_fmadd_ps(ti[0], bv, c0));
                if m1 != 0 {
                    _mm512_mask_storeu_ps(row.add(16), m1, _mm512_fmadd_ps(ti[1], bv, c1));
                }
            }
        }
    }
}

/// What a tile's products are added to as they are stored.
#[derive(Clone, Copy)]
enum Start {
    /// Nothing: the tile is written.
    Zero,
    /// The tile's values (accumulating, or a later block of the depth).
    Dst,
    /// A row vector (at the tile's first column) added to every row: a linear layer's bias.
    Row(*const f32),
}

impl Start {
    /// `Dst` when `load`, else `Zero`.
    fn new(load: bool) -> Start {
        if load { Start::Dst } else { Start::Zero }
    }
}

/// Stand-in for the non-x86 build, where [`available`] is false and nothing calls it.
///
/// # Safety
/// Never called.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn kernel<const DIRECT: bool>(
    _: usize,
    _: (*const f32, usize, usize),
    _: &[f32],
    _: (*mut f32, usize, usize, usize),
    _: (Start, f32),
) {
}

/// The product by its definition, in f64 sums: where [`gemm`]'s preconditions fail.
fn plain(
    dst: &mut [MaybeUninit<f32>],
    ld: usize,
    (m, n, k): (usize, usize, usize),
    a: View<'_, f32>,
    b: View<'_, f32>,
    (acc, beta): (bool, f32),
) {
    for i in 0..m {
        for j in 0..n {
            let Some(d) = dst.get_mut(i * ld + j) else {
                return;
            };
            let s: f64 = (0..k)
                .map(|p| {
                    let x = a.data.get(i * a.rs + p * a.cs).copied().unwrap_or(0.0);
                    let y = b.data.get(p * b.rs + j * b.cs).copied().unwrap_or(0.0);
                    f64::from(x) * f64::from(y)
                })
                .sum();
            let v = (f64::from(beta) * s) as f32;
            // SAFETY: with `acc` the caller initialised dst.
            d.write(if acc {
                (unsafe { d.assume_init_read() }) + v
            } else {
                v
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// A (rows, cols) operand over `v`: row-major, or stored as its transpose.
    fn operand(v: &[f32], (rows, cols): (usize, usize), transposed: bool) -> View<'_, f32> {
        if transposed {
            View::transposed(v, rows)
        } else {
            View::rows(v, 0, cols)
        }
    }

    /// `run` (a product into an output of row stride `ld`) against [`plain`] on the same
    /// initial output: within float tolerance, and nothing written past a row's `n` columns.
    fn agrees(
        (m, n, k): (usize, usize, usize),
        ld: usize,
        (a, b): (View<'_, f32>, View<'_, f32>),
        (acc, beta): (bool, f32),
        run: impl FnOnce(&mut [MaybeUninit<f32>]) -> bool,
        what: &str,
    ) {
        let init: Vec<MaybeUninit<f32>> =
            data(m * ld, 3).into_iter().map(MaybeUninit::new).collect();
        let (mut got, mut want) = (init.clone(), init);
        assert!(run(&mut got), "{what}: refused");
        plain(&mut want, ld, (m, n, k), a, b, (acc, beta));
        // SAFETY: both were initialised whole, and the products write only values
        let [got, want] = [got, want]
            .map(|v| unsafe { v.into_iter().map(|x| x.assume_init()).collect::<Vec<f32>>() });
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let tol = 1e-5 * (k as f32 + 1.0);
            assert!((g - w).abs() <= tol, "{what}: element {i}: {g} vs {w}");
            if i % ld >= n {
                assert_eq!(g, w, "{what}: wrote past a row");
            }
        }
    }

    #[test]
    fn matches_the_definition_at_edges_strides_and_accumulation() {
        if !available() {
            eprintln!("!!! no AVX-512F on this CPU: the AVX-512 f32 gemm is NOT tested !!!");
            return;
        }
        // tile, block and chunk edges: 1, MR +- 1, MC + 1, NR +- 1, KC + 1, NC + 3
        let shapes = [
            (1, 1, 1),
            (13, 31, 7),
            (15, 33, 257),
            (169, 257, 300),
            (30, 2051, 20),
            (200, 100, 40),
            (3, 5, 0),
        ];
        for (m, n, k) in shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for (acc, beta, threads) in
                    [(false, 1.0, true), (true, 0.5, false), (true, 0.5, true)]
                {
                    let (av, bv) = (data(m * k, 1), data(k * n, 2));
                    let ab = (operand(&av, (m, k), ta), operand(&bv, (k, n), tb));
                    // a wider row stride than n, with a sentinel past each row's n columns
                    let ld = n + 3;
                    let what = format!("({m}, {n}, {k}) ta {ta} tb {tb} acc {acc}");
                    agrees(
                        (m, n, k),
                        ld,
                        ab,
                        (acc, beta),
                        |out| product(out, ld, (m, n, k), ab, (acc, beta), threads),
                        &what,
                    );
                }
            }
        }
    }

    #[test]
    fn regions_of_three_and_four_threads_cover_the_output_once() {
        if !available() {
            eprintln!("!!! no AVX-512F on this CPU: the AVX-512 f32 gemm is NOT tested !!!");
            return;
        }
        for threads in [3, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            // regions of rows, of columns, and a 2 x 2 grid; a transposed a shared by threads
            for (m, n, k) in [(300, 40, 70), (20, 500, 70), (200, 200, 300), (15, 33, 9)] {
                for ta in [false, true] {
                    let (av, bv) = (data(m * k, 3), data(k * n, 4));
                    let ab = (operand(&av, (m, k), ta), operand(&bv, (k, n), false));
                    let what = format!("({m}, {n}, {k}) ta {ta} on {threads} threads");
                    agrees(
                        (m, n, k),
                        n,
                        ab,
                        (false, 1.0),
                        |out| pool.install(|| product(out, n, (m, n, k), ab, (false, 1.0), true)),
                        &what,
                    );
                }
            }
        }
    }

    /// The bias enters once per output element: with one depth block and several, partial
    /// tiles, regions of several threads, and no depth at all.
    #[test]
    fn a_bias_is_added_to_every_row_once() {
        if !available() {
            eprintln!("!!! no AVX-512F on this CPU: the AVX-512 f32 gemm is NOT tested !!!");
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (m, n, k) in [(13, 31, 7), (169, 257, 300), (30, 70, 600), (3, 5, 0)] {
            for ta in [false, true] {
                let (av, bv, bias) = (data(m * k, 3), data(k * n, 4), data(n, 5));
                let ab = (operand(&av, (m, k), ta), operand(&bv, (k, n), true));
                let mut got = vec![MaybeUninit::new(f32::NAN); m * n];
                let done = pool.install(|| product_bias(&mut got, n, (m, n, k), ab, &bias, true));
                assert!(done, "({m}, {n}, {k}) refused");
                let mut want = vec![MaybeUninit::new(0.0f32); m * n];
                plain(&mut want, n, (m, n, k), ab.0, ab.1, (false, 1.0));
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // SAFETY: both written whole.
                    let (g, w) = unsafe { (g.assume_init(), w.assume_init() + bias[i % n]) };
                    let tol = 1e-5 * (k as f32 + 1.0);
                    assert!(
                        (g - w).abs() <= tol,
                        "({m}, {n}, {k}) ta {ta} element {i}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn columns_pack_as_their_transpose() {
        // whole and partial 16-column groups, 16-row blocks with and without a tail
        for (w, kc) in [(32, 48), (17, 35), (16, 16), (15, 7), (1, 1), (32, 5)] {
            let data: Vec<Vec<f32>> = (0..w)
                .map(|j| (0..kc).map(|k| (j * 1000 + k) as f32).collect())
                .collect();
            let cols: Vec<&[f32]> = data.iter().map(Vec::as_slice).collect();
            let mut panel = vec![f32::NAN; kc * NR];
            pack_columns(&mut panel, &cols, kc);
            for kk in 0..kc {
                for j in 0..NR {
                    let want = if j < w { data[j][kk] } else { 0.0 };
                    assert_eq!(
                        panel[kk * NR + j],
                        want,
                        "w {w} kc {kc} row {kk} column {j}"
                    );
                }
            }
        }
    }

    #[test]
    fn grids_use_the_threads_on_whole_tiles_and_shares_partition() {
        // as many regions as threads where the output has the tiles, the fewest rows + columns
        assert_eq!(grid(2, 2048, 256), (2, 1));
        assert_eq!(grid(2, 256, 2048), (1, 2));
        assert_eq!(grid(4, 1024, 1024), (2, 2));
        assert_eq!(grid(4, MR, 10 * NR), (1, 4));
        assert_eq!(grid(8, MR, NR), (1, 1));
        assert_eq!(grid(3, 2 * MR, NR), (2, 1));
        for (panels, parts, unit, len) in [(19, 2, MR, 256), (8, 3, NR, 250), (5, 5, 1, 5)] {
            let shares: Vec<_> = (0..parts)
                .map(|i| share(panels, parts, i, unit, len))
                .collect();
            assert_eq!(shares[0].start, 0);
            assert_eq!(shares[parts - 1].end, len);
            for w in shares.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{shares:?}");
            }
            let sizes: Vec<usize> = shares.iter().map(|r| r.len().div_ceil(unit)).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1 && *lo > 0, "{shares:?}");
        }
    }

    #[test]
    fn packed_products_match_the_definition_on_leading_rows_and_columns() {
        if !available() {
            eprintln!("!!! no AVX-512F on this CPU: the packed f32 products are NOT tested !!!");
            return;
        }
        // b packed whole (70 x 100), used on its leading (k, n): full, partial panels, one row
        let (bk, bn) = (70, 100);
        let bv = data(bk * bn, 4);
        for tb in [false, true] {
            let b = operand(&bv, (bk, bn), tb);
            let packed = Packed::new(b, bk, bn).expect("f32 with AVX-512F packs");
            for (m, k, n) in [(15, 70, 100), (64, 33, 65), (1, 1, 1), (29, 0, 7)] {
                for ta in [false, true] {
                    let av = data(m * k, 5);
                    let a = operand(&av, (m, k), ta);
                    for (acc, beta) in [(false, 1.0), (true, 0.25)] {
                        let what = format!("({m}, {n}, {k}) ta {ta} tb {tb} acc {acc}");
                        agrees(
                            (m, n, k),
                            n + 1,
                            (a, b),
                            (acc, beta),
                            |out| product_packed(out, n + 1, (m, n, k), (a, &packed), (acc, beta)),
                            &what,
                        );
                    }
                }
            }
            // wider than packed: refused, untouched
            let mut slots = vec![MaybeUninit::new(0.0f32); 4 * (bn + 1)];
            let a = operand(&bv, (4, bk), false);
            let wide = (4, bn + 1, bk);
            assert!(!product_packed(
                &mut slots,
                bn + 1,
                wide,
                (a, &packed),
                (false, 1.0)
            ));
            // SAFETY: every slot was initialised to 0.0
            assert!(slots.iter().all(|x| unsafe { x.assume_init() } == 0.0));
        }
        assert!(Packed::new(View::rows(&[0.0f64; 4], 0, 2), 2, 2).is_none());
    }
}

//! CPU kernels, generic over the float type.

use std::mem::MaybeUninit;

use num_traits::Float as NumFloat;
use rayon::prelude::*;

use super::sgemm::{View, product, product_bias};
use crate::backend::{BinaryOp, MatmulDims, ReduceKind, UnaryOp};
use crate::dtype::{Element, bf16};
use crate::shape::{broadcast_strides, strides};

/// Float element types the CPU kernels run on.
pub trait Float: Element + NumFloat + Default + 'static {
    /// `e^x`: for `f32` the vectorizable approximation of `cpu::fast`, else the standard
    /// library's.
    fn exp_v(self) -> Self;

    /// `tanh(x)`, as [`Float::exp_v`].
    fn tanh_v(self) -> Self;

    /// `erf(x)`, as [`Float::exp_v`] (libm's for `f64`).
    fn erf_v(self) -> Self;

    /// The standard normal CDF `Phi(x)` and `e^(-x^2/2)`, for the exact GELU and its
    /// derivative: `Phi` accurate relative to its value also where it is tiny (`x` negative).
    fn normal_v(self) -> (Self, Self);

    /// The exact GELU `x Phi(x)`: for `f32` `cpu::fast`'s, fewer operations than through
    /// [`Float::normal_v`].
    fn gelu_erf_v(self) -> Self;

    /// `sum(d)`, or `sum(d^2)` when `square`, for `d = v - shift` over a row: the
    /// normalisations' statistics, in 32 interleaved partial sums (the portable form is this
    /// module's `sum_row`; `f32` on AVX-512 sums in registers, to the same bits).
    #[inline(always)]
    fn sum_row(row: &[Self], shift: Self, square: bool) -> Self {
        sum_row(row, shift, square)
    }

    /// `[sum(d^2), sum(h), sum(h * d), sum(d)]` for `d = x - shift` and `h = g * w` over rows
    /// of equal length, each summed as [`Float::sum_row`] (the portable form is this module's
    /// `h_sums`).
    #[inline(always)]
    fn h_sums(g: &[Self], w: &[Self], x: &[Self], shift: Self) -> [Self; 4] {
        h_sums(g, w, x, shift)
    }
}

macro_rules! float_impl {
    ($t:ty, $exp:expr, $tanh:expr, $erf:expr, $normal:expr, $gelu_erf:expr $(, $extra:item)*) => {
        impl Float for $t {
            #[inline(always)]
            fn exp_v(self) -> Self {
                $exp(self)
            }

            #[inline(always)]
            fn tanh_v(self) -> Self {
                $tanh(self)
            }

            #[inline(always)]
            fn erf_v(self) -> Self {
                $erf(self)
            }

            #[inline(always)]
            fn normal_v(self) -> (Self, Self) {
                $normal(self)
            }

            #[inline(always)]
            fn gelu_erf_v(self) -> Self {
                $gelu_erf(self)
            }

            $($extra)*
        }
    };
}
float_impl!(
    f32,
    super::fast::exp,
    super::fast::tanh,
    super::fast::erf,
    super::fast::normal,
    super::fast::gelu,
    #[inline(always)]
    fn sum_row(row: &[f32], shift: f32, square: bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { avx512::sum_row(row, shift, square) };
        }
        sum_row(row, shift, square)
    },
    #[inline(always)]
    fn h_sums(g: &[f32], w: &[f32], x: &[f32], shift: f32) -> [f32; 4] {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { avx512::h_sums(g, w, x, shift) };
        }
        h_sums(g, w, x, shift)
    }
);
float_impl!(f64, f64::exp, f64::tanh, libm::erf, normal_f64, |x: f64| x
    * normal_f64(x).0);

/// [`Float::normal_v`] for `f64`: `Phi(x) = erfc(-x / sqrt 2) / 2` from libm.
fn normal_f64(x: f64) -> (f64, f64) {
    (
        0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2),
        (-0.5 * x * x).exp(),
    )
}

/// Elementwise work of at least this many elements is split over the threads.
const PAR_MIN: usize = 1 << 15;
/// The smallest piece of elementwise work one thread takes.
const PAR_PIECE: usize = 1 << 13;

/// Runs `f` compiled for AVX-512 or AVX2 (with FMA) where the CPU has them, so the kernels'
/// loops take 16 or 8 `f32` lanes instead of SSE2's 4. The arithmetic is the same IEEE
/// operations in the same order either way (nothing is contracted into FMA implicitly;
/// `cpu::fast`'s explicit `mul_add`s are one instruction here, a correctly rounded library
/// call elsewhere; reductions keep their explicit partial sums), so results are bit-identical
/// on every x86-64 CPU. `f` must be `#[inline(always)]` for its body to be compiled so.
#[inline(always)]
pub(super) fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("fma") {
            #[target_feature(enable = "avx512f,fma")]
            fn avx512<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // SAFETY: the CPU has the features `avx512` is compiled for.
            return unsafe { avx512(f) };
        }
        if has!("avx2") && has!("fma") {
            #[target_feature(enable = "avx2,fma")]
            fn avx2<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // SAFETY: the CPU has the features `avx2` is compiled for.
            return unsafe { avx2(f) };
        }
    }
    f()
}

/// See [`super::squared_sum`].
pub(super) fn squared_sum(v: &[f32]) -> f64 {
    #[inline(always)]
    fn lanes(v: &[f32]) -> f64 {
        let mut acc = [0f64; 8];
        let chunks = v.chunks_exact(8);
        let tail = chunks.remainder();
        for c in chunks {
            for (a, &x) in acc.iter_mut().zip(c) {
                let x = f64::from(x);
                *a += x * x;
            }
        }
        for (a, &x) in acc.iter_mut().zip(tail) {
            let x = f64::from(x);
            *a += x * x;
        }
        acc.iter().sum()
    }
    wide(|| lanes(v))
}

/// `f` of every element, on several threads for large inputs (in pieces, each a plain loop
/// with `f` inlined, so it vectorizes). The output is written once, never zeroed first.
fn map<T: Float>(x: &[T], f: impl Fn(T) -> T + Sync + Send + Copy) -> Vec<T> {
    let run = |(o, i): (Slots<'_, T>, &[T])| {
        wide(
            #[inline(always)]
            move || {
                for (o, &v) in o.iter_mut().zip(i) {
                    o.write(f(v));
                }
            },
        )
    };
    written(x.len(), |out| {
        if x.len() < PAR_MIN {
            run((out, x));
        } else {
            out.par_chunks_mut(PAR_PIECE)
                .zip(x.par_chunks(PAR_PIECE))
                .for_each(run);
        }
    })
}

/// `f` of every pair of elements, as [`map`] (over the shorter operand's length).
fn zip_map<T: Float>(a: &[T], b: &[T], f: impl Fn(T, T) -> T + Sync + Send + Copy) -> Vec<T> {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let run = |((o, x), y): ((Slots<'_, T>, &[T]), &[T])| {
        wide(
            #[inline(always)]
            move || {
                for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                    o.write(f(x, y));
                }
            },
        )
    };
    written(n, |out| {
        if n < PAR_MIN {
            run(((out, a), b));
        } else {
            out.par_chunks_mut(PAR_PIECE)
                .zip(a.par_chunks(PAR_PIECE))
                .zip(b.par_chunks(PAR_PIECE))
                .for_each(run);
        }
    })
}

/// Output slots not yet written.
type Slots<'a, T> = &'a mut [MaybeUninit<T>];

/// A vector of `n` elements that `fill` writes in place, saving the zeroing pass (and its
/// page faults) of a `vec![0; n]` that would be overwritten anyway. `fill` is handed exactly
/// `n` uninitialised slots and must write every one: [`map`] and [`zip_map`] pair each slot
/// with one input element of slices of length `n`; [`matmul`] has gemm write every element;
/// [`rows_written`]'s kernels write each slot of their rows.
fn written<T: Float>(n: usize, fill: impl FnOnce(&mut [MaybeUninit<T>])) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    fill(&mut out.spare_capacity_mut()[..n]);
    // SAFETY: `fill` wrote all `n` slots (see above: the callers zip the `n` slots with `n`
    // input elements piece by piece, gemm writes each m x n block whole, the row kernels write
    // whole rows), so the first `n` are initialised.
    unsafe { out.set_len(n) };
    out
}

/// A vector of `n` elements written in rows of `row` elements, `f(row index, row slots)`, on
/// several threads when the rows' work (`work` elements read per row) is large; `f` must write
/// every slot of its row (see [`written`]) and should be `#[inline(always)]` (see [`wide`]).
/// `n` must be a multiple of `row` (every row whole). Writing straight into the new vector
/// saves the zeroing pass a `vec![0; n]` would cost.
fn rows_written<T: Float>(
    n: usize,
    row: usize,
    work: usize,
    f: impl Fn(usize, Slots<'_, T>) + Sync + Send,
) -> Vec<T> {
    written(n, |out| {
        if row == 0 {
            return;
        }
        let rows = out.len() / row;
        // rows from `first` on, in one piece compiled as wide as the CPU allows
        let run = |first: usize, piece: Slots<'_, T>| {
            wide(
                #[inline(always)]
                || {
                    for (i, r) in piece.chunks_mut(row).enumerate() {
                        f(first + i, r);
                    }
                },
            )
        };
        if rows * work < PAR_MIN || rows < 2 {
            run(0, out);
        } else {
            let per_piece = PAR_PIECE.div_ceil(work.max(1));
            out.par_chunks_mut(row * per_piece)
                .enumerate()
                .for_each(|(p, piece)| run(p * per_piece, piece));
        }
    })
}

/// Writes `g` of each element of `src` into `slots` (of `src`'s length) and returns them,
/// initialised, for a kernel that goes on working on its output row in place.
#[inline(always)]
fn init_map<'a, T: Float>(slots: Slots<'a, T>, src: &[T], g: impl Fn(T) -> T) -> &'a mut [T] {
    let n = slots.len().min(src.len());
    let slots = &mut slots[..n];
    for (o, &v) in slots.iter_mut().zip(src) {
        o.write(g(v));
    }
    // SAFETY: the loop wrote all `n` slots, and `MaybeUninit<T>` has `T`'s layout.
    unsafe { &mut *(std::ptr::from_mut::<[MaybeUninit<T>]>(slots) as *mut [T]) }
}

/// [`init_map`], also returning the sum of the values written, as [`sum_map`] sums them
/// (one pass over the row where a separate sum would take two).
#[inline(always)]
fn init_map_sum<'a, T: Float>(
    slots: Slots<'a, T>,
    src: &[T],
    g: impl Fn(T) -> T,
) -> (&'a mut [T], T) {
    let n = slots.len().min(src.len());
    let slots = &mut slots[..n];
    let mut lanes = [T::zero(); LANES];
    let mut oc = slots.chunks_exact_mut(LANES);
    let mut sc = src[..n].chunks_exact(LANES);
    for (o, c) in (&mut oc).zip(&mut sc) {
        for k in 0..LANES {
            let e = g(c[k]);
            o[k].write(e);
            lanes[k] = lanes[k] + e;
        }
    }
    let mut tail = T::zero();
    for (o, &v) in oc.into_remainder().iter_mut().zip(sc.remainder()) {
        let e = g(v);
        o.write(e);
        tail = tail + e;
    }
    // SAFETY: the loops wrote all `n` slots, and `MaybeUninit<T>` has `T`'s layout.
    let out = unsafe { &mut *(std::ptr::from_mut::<[MaybeUninit<T>]>(slots) as *mut [T]) };
    (out, combine(lanes, |a, b| a + b) + tail)
}

/// `sum(g(v))` over a row, in [`LANES`] interleaved partial sums combined pairwise.
#[inline(always)]
fn sum_map<T: Float>(row: &[T], g: impl Fn(T) -> T) -> T {
    let mut lanes = [T::zero(); LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            lanes[k] = lanes[k] + g(c[k]);
        }
    }
    rest.iter()
        .fold(combine(lanes, |a, b| a + b), |a, &v| a + g(v))
}

/// Combines a contiguous row with `f` in 8 interleaved partial results (so the loop
/// vectorizes), then those in order: `init` for an empty row. A row longer than [`CASCADE`]
/// is combined as its two halves (pairwise, as PyTorch's cascade sums), so a float sum's error
/// grows with the logarithm of its length rather than with the length.
#[inline(always)]
pub(super) fn fold_row<T: Float>(row: &[T], init: T, f: impl Fn(T, T) -> T + Copy) -> T {
    if row.len() > CASCADE {
        let mid = row.len() / 2 / 8 * 8;
        return f(
            fold_row(&row[..mid], init, f),
            fold_row(&row[mid..], init, f),
        );
    }
    let mut lanes = [init; 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            lanes[k] = f(lanes[k], c[k]);
        }
    }
    let mut acc = lanes.into_iter().fold(init, &f);
    for &v in rest {
        acc = f(acc, v);
    }
    acc
}

/// [`fold_row`] in [`LANES`] interleaved partial results, combined pairwise.
#[inline(always)]
pub(super) fn fold_wide<T: Float>(row: &[T], init: T, f: impl Fn(T, T) -> T) -> T {
    let mut lanes = [init; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            lanes[k] = f(lanes[k], c[k]);
        }
    }
    rest.iter().fold(combine(lanes, &f), |a, &v| f(a, v))
}

/// Interleaved partial sums of the normalisations' row sums: 32, two AVX-512 registers of
/// `f32` adding independently (with [`fold_row`]'s 8, one register's add latency bounded
/// LayerNorm's statistics passes, most of its forward). A fixed order, so the bits do not
/// depend on the CPU. (Attention's softmax keeps [`fold_row`]: its forward measured slower
/// with 32 lanes on rows of 256 and fewer.)
const LANES: usize = 32;

/// Interleaved partial sums of [`dot_row`]: 8 (softmax's backward on rows of 768 measured
/// 11.0-12.1 ms with 8 against 12.0-12.8 with 32; attention's backward the same either way).
const DOT_LANES: usize = 8;

/// Combines `N` partial results pairwise, halves first: log2(N) vector steps where one after
/// the other they would be N dependent operations.
#[inline(always)]
fn combine<T: Float, const N: usize>(mut lanes: [T; N], f: impl Fn(T, T) -> T) -> T {
    let mut n = N;
    while n > 1 {
        n /= 2;
        for k in 0..n {
            lanes[k] = f(lanes[k], lanes[k + n]);
        }
    }
    lanes[0]
}

/// `sum(g * (x - shift))` over two rows of equal length, in [`DOT_LANES`] interleaved partial
/// sums (the last partial chunk into the first lanes), then those pairwise ([`combine`]).
#[inline(always)]
pub(super) fn dot_row<T: Float>(g: &[T], x: &[T], shift: T) -> T {
    let mut lanes = [T::zero(); DOT_LANES];
    let (gc, xc) = (g.chunks_exact(DOT_LANES), x.chunks_exact(DOT_LANES));
    let (gr, xr) = (gc.remainder(), xc.remainder());
    for (g, x) in gc.zip(xc) {
        for k in 0..DOT_LANES {
            lanes[k] = lanes[k] + g[k] * (x[k] - shift);
        }
    }
    for ((l, &g), &x) in lanes.iter_mut().zip(gr).zip(xr) {
        *l = *l + g * (x - shift);
    }
    combine(lanes, |a, b| a + b)
}

pub(super) fn unary<T: Float>(op: UnaryOp, x: &[T]) -> Vec<T> {
    let one = T::one();
    // sqrt(2/pi) and the cubic coefficient of the tanh GELU.
    let (c, k) = (T::from_f64(0.797_884_560_802_865_4), T::from_f64(0.044_715));
    match op {
        UnaryOp::Neg => map(
            x,
            #[inline(always)]
            |v| -v,
        ),
        UnaryOp::Exp => map(x, T::exp_v),
        UnaryOp::Log => map(
            x,
            #[inline(always)]
            |v| v.ln(),
        ),
        UnaryOp::Sqrt => map(
            x,
            #[inline(always)]
            |v| v.sqrt(),
        ),
        UnaryOp::Square => map(
            x,
            #[inline(always)]
            |v| v * v,
        ),
        UnaryOp::Relu => map(
            x,
            #[inline(always)]
            // PyTorch's: NaN stays NaN, -0 stays -0
            |v| if v < T::zero() { T::zero() } else { v },
        ),
        // `0.5 x (1 + tanh(u)) = x sigmoid(2u)`: one exponential and one division, where
        // the tanh took both and a series for small arguments besides
        UnaryOp::Gelu => map(
            x,
            #[inline(always)]
            |v| v / (one + (-(c + c) * (v + k * v * v * v)).exp_v()),
        ),
        UnaryOp::Sigmoid => map(
            x,
            #[inline(always)]
            |v| one / (one + (-v).exp_v()),
        ),
        UnaryOp::Tanh => map(x, T::tanh_v),
        UnaryOp::Step => map(
            x,
            #[inline(always)]
            // relu's derivative as PyTorch's: 1 also at NaN (the gradient passes)
            |v| if v <= T::zero() { T::zero() } else { one },
        ),
        UnaryOp::Abs => map(
            x,
            #[inline(always)]
            |v| v.abs(),
        ),
        UnaryOp::Rsqrt => map(
            x,
            #[inline(always)]
            |v| one / v.sqrt(),
        ),
        UnaryOp::Sin => map(
            x,
            #[inline(always)]
            |v| v.sin(),
        ),
        UnaryOp::Cos => map(
            x,
            #[inline(always)]
            |v| v.cos(),
        ),
        UnaryOp::Silu => map(
            x,
            #[inline(always)]
            |v| v / (one + (-v).exp_v()),
        ),
        UnaryOp::Erf => map(x, T::erf_v),
        UnaryOp::GeluErf => map(x, T::gelu_erf_v),
        UnaryOp::Sign => map(
            x,
            #[inline(always)]
            |v| {
                if v > T::zero() {
                    one
                } else if v < T::zero() {
                    -one
                } else {
                    T::zero()
                }
            },
        ),
        UnaryOp::SiluGrad => map(x, silu_grad),
        UnaryOp::GeluErfGrad => map(x, gelu_erf_grad),
        UnaryOp::GeluGrad => map(x, gelu_grad),
        UnaryOp::Floor => map(
            x,
            #[inline(always)]
            |v| v.floor(),
        ),
        UnaryOp::Ceil => map(
            x,
            #[inline(always)]
            |v| v.ceil(),
        ),
        UnaryOp::Round => map(x, round_even),
        UnaryOp::Trunc => map(
            x,
            #[inline(always)]
            |v| v.trunc(),
        ),
        UnaryOp::Log1p => map(
            x,
            #[inline(always)]
            |v| v.ln_1p(),
        ),
        UnaryOp::Expm1 => map(
            x,
            #[inline(always)]
            |v| v.exp_m1(),
        ),
    }
}

/// The derivative of SiLU, `s (1 + x (1 - s))` with `s = sigmoid(x)`.
#[inline(always)]
fn silu_grad<T: Float>(v: T) -> T {
    let one = T::one();
    let s = one / (one + (-v).exp_v());
    s * (one + v * (one - s))
}

/// The derivative of the exact GELU, `Phi(x) + x phi(x)`.
#[inline(always)]
fn gelu_erf_grad<T: Float>(v: T) -> T {
    let (cdf, e) = v.normal_v();
    cdf + v * e * T::from_f64(0.398_942_280_401_432_7)
}

/// The derivative of the tanh GELU, `s + 2 x s (1 - s) u'` for `s = sigmoid(2u)` (as
/// `0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) u'`, with the one exponential of the sigmoid).
#[inline(always)]
fn gelu_grad<T: Float>(v: T) -> T {
    let (one, two, three) = (T::one(), T::from_f64(2.0), T::from_f64(3.0));
    let (c, k) = (T::from_f64(0.797_884_560_802_865_4), T::from_f64(0.044_715));
    let s = one / (one + (-two * c * (v + k * v * v * v)).exp_v());
    s + two * v * s * (one - s) * c * (one + three * k * v * v)
}

/// The nearest integer, ties to the even one (PyTorch's `round`; `Float::round` takes ties away
/// from zero): a tie `k + 1/2` is twice the rounded half of itself, which is exact.
#[inline(always)]
fn round_even<T: Float>(v: T) -> T {
    let r = v.round();
    if (r - v).abs() == T::from_f64(0.5) {
        (v / T::from_f64(2.0)).round() * T::from_f64(2.0)
    } else {
        r
    }
}

/// `g * op(x)` elementwise in one pass, for `op` a derivative (`GeluGrad`, `GeluErfGrad`,
/// `SiluGrad`): an activation's input gradient without storing the derivative first. `None`
/// for other ops.
pub(super) fn unary_mul<T: Float>(op: UnaryOp, x: &[T], g: &[T]) -> Option<Vec<T>> {
    Some(match op {
        UnaryOp::GeluGrad => zip_map(
            x,
            g,
            #[inline(always)]
            |v, g| g * gelu_grad(v),
        ),
        UnaryOp::GeluErfGrad => zip_map(
            x,
            g,
            #[inline(always)]
            |v, g| g * gelu_erf_grad(v),
        ),
        UnaryOp::SiluGrad => zip_map(
            x,
            g,
            #[inline(always)]
            |v, g| g * silu_grad(v),
        ),
        _ => return None,
    })
}

/// Checks integer row indices against `rows`.
pub(super) fn row_indices(indices: &[i64], rows: usize) -> Result<Vec<usize>, i64> {
    indices
        .iter()
        .map(|&i| usize::try_from(i).ok().filter(|&u| u < rows).ok_or(i))
        .collect()
}

fn apply<T: Float>(op: BinaryOp, a: T, b: T) -> T {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        // As PyTorch's CPU (its scalar path) and NumPy: of equal operands (-0.0 and 0.0) the
        // first.
        BinaryOp::Maximum => {
            if a.is_nan() || b.is_nan() {
                T::nan()
            } else if b > a {
                b
            } else {
                a
            }
        }
        BinaryOp::Minimum => {
            if a.is_nan() || b.is_nan() {
                T::nan()
            } else if b < a {
                b
            } else {
                a
            }
        }
        // Rust's float `%` is C's exact `fmod`.
        BinaryOp::Fmod => a % b,
        // PyTorch's CPU formulas (c10's div_floor_floating and remainder).
        BinaryOp::Remainder => {
            let r = a % b;
            if r != T::zero() && (b < T::zero()) != (r < T::zero()) {
                r + b
            } else {
                r
            }
        }
        BinaryOp::FloorDivide => {
            if b == T::zero() {
                return a / b;
            }
            let r = a % b;
            let mut q = (a - r) / b;
            if r != T::zero() && (b < T::zero()) != (r < T::zero()) {
                q = q - T::one();
            }
            if q == T::zero() {
                // zero with the quotient's sign
                return T::zero() * (a / b).signum();
            }
            let f = q.floor();
            if q - f > T::from(0.5).unwrap_or_else(T::zero) {
                f + T::one()
            } else {
                f
            }
        }
    }
}

pub(super) fn binary<T: Float>(
    op: BinaryOp,
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    out_shape: &[usize],
) -> Vec<T> {
    let shapes = (a_shape, b_shape, out_shape);
    // One loop per operation, so that each is inlined and vectorizes.
    match op {
        BinaryOp::Add => binary_with(
            #[inline(always)]
            |x: T, y: T| x + y,
            a,
            b,
            shapes,
        ),
        BinaryOp::Sub => binary_with(
            #[inline(always)]
            |x: T, y: T| x - y,
            a,
            b,
            shapes,
        ),
        BinaryOp::Mul => binary_with(
            #[inline(always)]
            |x: T, y: T| x * y,
            a,
            b,
            shapes,
        ),
        BinaryOp::Div => binary_with(
            #[inline(always)]
            |x: T, y: T| x / y,
            a,
            b,
            shapes,
        ),
        BinaryOp::Maximum
        | BinaryOp::Minimum
        | BinaryOp::Fmod
        | BinaryOp::Remainder
        | BinaryOp::FloorDivide => binary_with(
            #[inline(always)]
            |x: T, y: T| apply(op, x, y),
            a,
            b,
            shapes,
        ),
    }
}

/// [`binary`] with the operation `f`, over (a's, b's, the output's) shapes.
fn binary_with<T: Float>(
    f: impl Fn(T, T) -> T + Sync + Send + Copy,
    a: &[T],
    b: &[T],
    (a_shape, b_shape, out_shape): (&[usize], &[usize], &[usize]),
) -> Vec<T> {
    if a_shape == out_shape && b_shape == out_shape {
        return zip_map(a, b, f);
    }
    let n: usize = out_shape.iter().product();
    let (sa, sb) = (
        broadcast_strides(a_shape, out_shape),
        broadcast_strides(b_shape, out_shape),
    );
    let nd = out_shape.len();
    if n == 0 || nd == 0 {
        return (0..n).map(|_| f(a[0], b[0])).collect();
    }
    let last = nd - 1;
    let (row, la, lb) = (out_shape[last], sa[last], sb[last]);
    // The offsets of row i in a and b: its index over the leading dims, by their strides.
    let offsets = |mut i: usize| {
        let (mut oa, mut ob) = (0, 0);
        for d in (0..last).rev() {
            let k = i % out_shape[d];
            i /= out_shape[d];
            oa += k * sa[d];
            ob += k * sb[d];
        }
        (oa, ob)
    };
    rows_written(
        n,
        row,
        row,
        #[inline(always)]
        |i, r| {
            let (oa, ob) = offsets(i);
            match (la, lb) {
                (1, 1) => {
                    for ((o, &x), &y) in r.iter_mut().zip(&a[oa..oa + row]).zip(&b[ob..ob + row]) {
                        o.write(f(x, y));
                    }
                }
                (1, 0) => {
                    let y = b[ob];
                    for (o, &x) in r.iter_mut().zip(&a[oa..oa + row]) {
                        o.write(f(x, y));
                    }
                }
                (0, 1) => {
                    let x = a[oa];
                    for (o, &y) in r.iter_mut().zip(&b[ob..ob + row]) {
                        o.write(f(x, y));
                    }
                }
                // Both repeated along the row (an expand, a scalar's gradient): one value.
                (0, 0) => {
                    let v = f(a[oa], b[ob]);
                    for o in r.iter_mut() {
                        o.write(v);
                    }
                }
                _ => {
                    for (j, o) in r.iter_mut().enumerate() {
                        o.write(f(a[oa + j * la], b[ob + j * lb]));
                    }
                }
            }
        },
    )
}

/// Reduces one dimension of a (outer, len, inner) view.
fn reduce_dim<T: Float>(op: ReduceKind, x: &[T], outer: usize, len: usize, inner: usize) -> Vec<T> {
    let view = (outer, len, inner);
    match op {
        ReduceKind::Sum => reduce_dim_with(
            x,
            view,
            T::zero(),
            #[inline(always)]
            |a, v| a + v,
        ),
        ReduceKind::Max => reduce_dim_with(
            x,
            view,
            T::neg_infinity(),
            #[inline(always)]
            |a, v| if v > a || v.is_nan() { v } else { a },
        ),
        ReduceKind::Min => reduce_dim_with(
            x,
            view,
            T::infinity(),
            #[inline(always)]
            |a, v| if v < a || v.is_nan() { v } else { a },
        ),
    }
}

/// Elements of a long row reduced per piece, on several threads (see [`reduce_dim_with`]).
const ROW_PIECE: usize = 1 << 16;

/// The longest run [`fold_row`] combines in one pass of its 8 partial results (64 values
/// each): longer ones are combined from halves, which keeps float sums accurate (a sum's
/// rounding error then grows with the logarithm of its length, as PyTorch's cascade sums').
const CASCADE: usize = 512;

/// The most rows a reduction over an outer dim adds one after the other into its partial
/// results ([`fold_rows`]); more are combined from halves, as [`CASCADE`].
const CASCADE_ROWS: usize = 64;

/// Folds the rows (of `inner` elements) of `rows` with `f` into `acc`: at most
/// [`CASCADE_ROWS`] rows one after the other, more as two halves folded apart and then
/// together. `scratch` holds a right half's partial results at each level of halving (see
/// [`cascade_scratch`]), so the folding allocates nothing.
fn fold_rows<T: Float>(
    rows: &[T],
    inner: usize,
    f: impl Fn(T, T) -> T + Copy,
    acc: &mut [T],
    scratch: &mut [T],
) {
    let n = rows.len() / inner;
    if n <= CASCADE_ROWS {
        acc.copy_from_slice(&rows[..inner]);
        for row in rows[inner..].chunks_exact(inner) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = f(*a, v);
            }
        }
        return;
    }
    let mid = n / 2 * inner;
    let (right, deeper) = scratch.split_at_mut(inner);
    fold_rows(&rows[..mid], inner, f, acc, deeper);
    fold_rows(&rows[mid..], inner, f, right, deeper);
    for (a, &b) in acc.iter_mut().zip(right.iter()) {
        *a = f(*a, b);
    }
}

/// The scratch [`fold_rows`] needs for `len` rows of `inner` elements: one row per level of
/// halving.
fn cascade_scratch<T: Float>(len: usize, inner: usize) -> Vec<T> {
    let mut levels = 0;
    let mut n = len;
    while n > CASCADE_ROWS {
        n = n.div_ceil(2);
        levels += 1;
    }
    vec![T::zero(); levels * inner]
}

/// [`reduce_dim`] with the combining function `f` and its identity `init` (inlined, so each
/// reduction vectorizes). One long row is cut into fixed pieces reduced on several threads and
/// combined in order, so its bits do not depend on the number of threads.
fn reduce_dim_with<T: Float>(
    x: &[T],
    (outer, len, inner): (usize, usize, usize),
    init: T,
    f: impl Fn(T, T) -> T + Sync + Send + Copy,
) -> Vec<T> {
    if len == 0 {
        return vec![init; outer * inner];
    }
    if inner == 1 {
        if outer == 1 && len >= 2 * ROW_PIECE {
            let parts: Vec<T> = x
                .par_chunks(ROW_PIECE)
                .map(|c| {
                    wide(
                        #[inline(always)]
                        move || fold_row(c, init, f),
                    )
                })
                .collect();
            return vec![parts.into_iter().fold(init, f)];
        }
        // each output reduces one contiguous row
        return rows_written(
            outer,
            1,
            len,
            #[inline(always)]
            |o, r| {
                r[0].write(fold_row(&x[o * len..(o + 1) * len], init, f));
            },
        );
    }
    rows_written(
        outer * inner,
        inner,
        len * inner,
        #[inline(always)]
        |o, slots| {
            let rows = &x[o * len * inner..(o + 1) * len * inner];
            if len > CASCADE_ROWS {
                // halves folded on their own, then together (pairwise, for float sums)
                let mut acc = vec![init; inner];
                fold_rows(rows, inner, f, &mut acc, &mut cascade_scratch(len, inner));
                init_map(slots, &acc, |v| v);
                return;
            }
            let acc = init_map(slots, &rows[..inner], |v| f(init, v));
            for row in rows[inner..].chunks_exact(inner) {
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a = f(*a, v);
                }
            }
        },
    )
}

/// Reduces `dims` of `x` (kept as size 1); each run of adjacent dims is reduced as one.
pub(super) fn reduce<T: Float>(op: ReduceKind, x: &[T], shape: &[usize], dims: &[usize]) -> Vec<T> {
    let mut dims = dims.to_vec();
    dims.sort_unstable();
    dims.dedup();
    let mut s = shape.to_vec();
    let mut cur: Option<Vec<T>> = None;
    let mut i = 0;
    while i < dims.len() {
        let first = dims[i];
        while i + 1 < dims.len() && dims[i + 1] == dims[i] + 1 {
            i += 1;
        }
        let last = dims[i];
        let outer: usize = s[..first].iter().product();
        let len: usize = s[first..=last].iter().product();
        let inner: usize = s[last + 1..].iter().product();
        cur = Some(reduce_dim(
            op,
            cur.as_deref().unwrap_or(x),
            outer,
            len,
            inner,
        ));
        s[first..=last].iter_mut().for_each(|d| *d = 1);
        i += 1;
    }
    cur.unwrap_or_else(|| x.to_vec())
}

/// (Log-)softmax over `dim`. Contiguous rows (`dim` last): the max and the exps' sum in
/// [`LANES`] partial results (with 8, their dependency chains took a third of the forward);
/// softmax stores the exps in the output row as it sums them, then scales them; log-softmax
/// only sums them, then writes `(x - max) - ln sum` (PyTorch's order: `x - (max + ln sum)`
/// loses the low bits of large inputs).
pub(super) fn softmax<T: Float>(x: &[T], shape: &[usize], dim: usize, log: bool) -> Vec<T> {
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let max = |a: T, v: T| if v > a || v.is_nan() { v } else { a };
    if inner == 1 {
        return rows_written(
            x.len(),
            len,
            2 * len,
            #[inline(always)]
            |o, slots| {
                let row = &x[o * len..(o + 1) * len];
                prefetch_row(x, o + AHEAD, len);
                let m = fold_wide(row, T::neg_infinity(), max);
                if log {
                    let ln_sum = sum_map(row, |v| (v - m).exp_v()).ln();
                    init_map(slots, row, |v| (v - m) - ln_sum);
                } else {
                    // the exps in the output row, summed as they are written, then scaled
                    let (r, sum) = init_map_sum(slots, row, |v| (v - m).exp_v());
                    let inv = T::one() / sum;
                    for e in r.iter_mut() {
                        *e = *e * inv;
                    }
                }
            },
        );
    }
    rows_written(
        x.len(),
        len * inner,
        2 * len * inner,
        #[inline(always)]
        |o, slots| {
            let xb = &x[o * len * inner..(o + 1) * len * inner];
            let block = init_map(slots, xb, |v| v);
            for i in 0..inner {
                let m = (0..len).fold(T::neg_infinity(), |a, l| max(a, xb[l * inner + i]));
                let mut sum = T::zero();
                for l in 0..len {
                    let e = (xb[l * inner + i] - m).exp_v();
                    block[l * inner + i] = e;
                    sum = sum + e;
                }
                let ln_sum = sum.ln();
                for l in 0..len {
                    let at = l * inner + i;
                    block[at] = if log {
                        (xb[at] - m) - ln_sum
                    } else {
                        block[at] / sum
                    };
                }
            }
        },
    )
}

/// The gradient of [`softmax`] over `dim` from its output `y` and the output gradient `g`:
/// `y * (g - sum(g * y))`, or for the log-softmax `g - e^y * sum(g)`. One pass per row for the
/// sum and one for the result, rows on several threads.
pub(super) fn softmax_grad<T: Float>(
    y: &[T],
    g: &[T],
    shape: &[usize],
    dim: usize,
    log: bool,
) -> Vec<T> {
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let block = len * inner;
    if inner == 1 {
        // contiguous rows: the row sum in 8 partial results, then one pass
        return rows_written(
            y.len(),
            len,
            3 * len,
            #[inline(always)]
            |o, dx| {
                let (yr, gr) = (&y[o * len..(o + 1) * len], &g[o * len..(o + 1) * len]);
                prefetch_row(y, o + AHEAD, len);
                prefetch_row(g, o + AHEAD, len);
                if log {
                    let s = T::sum_row(gr, T::zero(), false);
                    for ((d, &yv), &gv) in dx.iter_mut().zip(yr).zip(gr) {
                        d.write(gv - yv.exp_v() * s);
                    }
                } else {
                    let s = dot_row(gr, yr, T::zero());
                    for ((d, &yv), &gv) in dx.iter_mut().zip(yr).zip(gr) {
                        d.write(yv * (gv - s));
                    }
                }
            },
        );
    }
    rows_written(
        y.len(),
        block,
        3 * block,
        #[inline(always)]
        |o, slots| {
            let (yb, gb) = (
                &y[o * block..(o + 1) * block],
                &g[o * block..(o + 1) * block],
            );
            let dx = init_map(slots, gb, |v| v);
            for i in 0..inner {
                let at = |l: usize| l * inner + i;
                let s = (0..len).fold(T::zero(), |a, l| {
                    if log {
                        a + gb[at(l)]
                    } else {
                        a + gb[at(l)] * yb[at(l)]
                    }
                });
                for l in 0..len {
                    let (yv, gv) = (yb[at(l)], gb[at(l)]);
                    dx[at(l)] = if log {
                        gv - yv.exp_v() * s
                    } else {
                        yv * (gv - s)
                    };
                }
            }
        },
    )
}

/// Integer products, as PyTorch's on the CPU: exact, wrapping on overflow (two's complement);
/// the layouts of [`matmul`]. Plain loops: integer products are for indices and counts, not
/// for the throughput the float kernels serve.
pub(super) fn matmul_i64(a: &[i64], b: &[i64], d: MatmulDims) -> Vec<i64> {
    let (batch, m, sa, sb) = operands(d);
    let MatmulDims {
        k, n, b_batched, ..
    } = d;
    let mut out = vec![0i64; batch * m * n];
    if m * n == 0 {
        return out;
    }
    for (i, oi) in out.chunks_mut(m * n).enumerate() {
        let (ai, bi) = views(a, b, i, (m, n, k), b_batched, (sa, sb));
        for (r, row) in oi.chunks_mut(n).enumerate() {
            for (c, o) in row.iter_mut().enumerate() {
                *o = (0..k).fold(0i64, |s, l| {
                    s.wrapping_add(ai.at(r, l).wrapping_mul(bi.at(l, c)))
                });
            }
        }
    }
    out
}

/// A product's operands as the kernels read them: (batch, m), where a batch against one
/// matrix (a linear layer on (B, T, D)) is one product of B·T rows, and the (row, column)
/// strides of the logical (m, k) and (k, n) operands.
fn operands(d: MatmulDims) -> (usize, usize, (usize, usize), (usize, usize)) {
    let MatmulDims {
        batch,
        m,
        k,
        n,
        b_batched,
        a_trans,
        b_trans,
    } = d;
    let (batch, m) = if !b_batched && !a_trans {
        (1, batch * m)
    } else {
        (batch, m)
    };
    let sa = if a_trans { (1, m) } else { (k, 1) };
    let sb = if b_trans { (1, k) } else { (n, 1) };
    (batch, m, sa, sb)
}

/// Product `i`'s operands as strided views (`a` one matrix per product, `b` one per product or
/// one for all), with `operands`' strides.
fn views<'a, T>(
    a: &'a [T],
    b: &'a [T],
    i: usize,
    (m, n, k): (usize, usize, usize),
    b_batched: bool,
    (sa, sb): ((usize, usize), (usize, usize)),
) -> (View<'a, T>, View<'a, T>) {
    let bi = if b_batched {
        &b[i * k * n..(i + 1) * k * n]
    } else {
        &b[..k * n]
    };
    (
        View {
            data: &a[i * m * k..(i + 1) * m * k],
            rs: sa.0,
            cs: sa.1,
        },
        View {
            data: bi,
            rs: sb.0,
            cs: sb.1,
        },
    )
}

/// bf16 products by AVX512-BF16's pair dot products ([`bgemm`](super::bgemm)): f32 sums
/// rounded once, where the CPU has the instructions and a product is large enough to pay for
/// packing; `None` otherwise (the caller converts to f32).
pub(super) fn matmul_bf16(a: &[bf16], b: &[bf16], d: MatmulDims) -> Option<Vec<bf16>> {
    let (batch, m, sa, sb) = operands(d);
    let MatmulDims {
        k, n, b_batched, ..
    } = d;
    let work = m * n * k;
    if work < WIDE_MIN || !super::bgemm::available() {
        return None;
    }
    let mut out = vec![bf16::ZERO; batch * m * n];
    for (i, o) in out.chunks_mut(m * n).enumerate() {
        let (ai, bi) = views(a, b, i, (m, n, k), b_batched, (sa, sb));
        super::bgemm::product(ai, bi, (m, n, k), o, work >= PARALLEL);
    }
    Some(out)
}

pub(super) fn matmul<T: Float>(a: &[T], b: &[T], d: MatmulDims) -> Vec<T> {
    matmul_bias(a, b, None, d)
}

/// [`matmul`] with `bias` (`n` elements, checked by the caller) added to every output row as
/// the product is stored: `x Wᵀ + b` of a linear layer in one pass over the output.
pub(super) fn matmul_bias<T: Float>(a: &[T], b: &[T], bias: Option<&[T]>, d: MatmulDims) -> Vec<T> {
    let (batch, m, sa, sb) = operands(d);
    let MatmulDims {
        k, n, b_batched, ..
    } = d;
    if m == 0 || n == 0 || k == 0 {
        return match bias {
            Some(bias) => bias[..n].repeat(batch * m),
            None => vec![T::zero(); batch * m * n],
        };
    }
    let work = m * n * k;
    let one = |i: usize, oi: &mut [MaybeUninit<T>], par: gemm::Parallelism| {
        let views = views(a, b, i, (m, n, k), b_batched, (sa, sb));
        let (ai, bi) = (views.0.data, views.1.data);
        let threads = matches!(par, gemm::Parallelism::Rayon(_));
        // Small products (attention's heads) stay with gemm, whose packing costs less there.
        if work >= WIDE_MIN {
            let done = match bias {
                Some(bias) => product_bias(oi, n, (m, n, k), views, bias, threads),
                None => product(oi, n, (m, n, k), views, (false, T::one()), threads),
            };
            if done {
                return;
            }
        }
        // gemm adds the product to the bias rows written first
        if let Some(bias) = bias {
            for r in oi.chunks_mut(n) {
                for (o, &x) in r.iter_mut().zip(bias) {
                    o.write(x);
                }
            }
        }
        // SAFETY: ai is m x k and bi is k x n under their strides, oi is m x n row-major, all
        // in bounds; the output does not alias the inputs. gemm writes every element of
        // oi = 1 * ai * bi and reads none (read_dst = false, so oi may be uninitialised) or,
        // with a bias, adds to the rows written above (read_dst = true).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                oi.as_mut_ptr().cast::<T>(),
                1,
                n as isize,
                bias.is_some(),
                ai.as_ptr(),
                sa.1 as isize,
                sa.0 as isize,
                bi.as_ptr(),
                sb.1 as isize,
                sb.0 as isize,
                T::one(),
                T::one(),
                false,
                false,
                false,
                par,
            );
        }
    };
    // The output is written whole by gemm: no zeroing pass first.
    written(batch * m * n, |out| {
        if batch > 1 && work < PARALLEL_ONE && batch * work >= PARALLEL {
            // Many small products (attention's heads): one per thread at a time, each on one
            // thread, rather than every small product split over all threads in turn.
            out.par_chunks_mut(m * n)
                .enumerate()
                .for_each(|(i, oi)| one(i, oi, gemm::Parallelism::None));
            return;
        }
        let par = if work >= PARALLEL {
            gemm::Parallelism::Rayon(0)
        } else {
            gemm::Parallelism::None
        };
        for (i, oi) in out.chunks_mut(m * n).enumerate() {
            one(i, oi, par);
        }
    })
}

/// Products of at least this many multiply-adds take the AVX-512 kernel where the CPU has it
/// (`sgemm`); below, packing its panels costs more than its wider multiply-adds save.
const WIDE_MIN: usize = 128 * 128 * 128;
/// Products of at least this many multiply-adds run on several threads. `gemm` threaded beats
/// `matrixmultiply` at every size from 128^3 on (2-core AVX2, quiet: 180-190 against 150-170
/// GFLOP/s at 1024^3 and at a GPT's (2048, 256) x (256, 768)), so it takes them all.
const PARALLEL: usize = 64 * 64 * 64;
/// A batch of products each below this many multiply-adds runs one product per thread (twice
/// the speed of threading each in turn for attention's (128, 32) x (32, 128) heads).
const PARALLEL_ONE: usize = 512 * 512 * 512;

/// `out = x` with dimensions permuted: `out.shape[i] = shape[perm[i]]`.
pub(super) fn permute_bytes(
    elem: usize,
    x: &[u8],
    shape: &[usize],
    perm: &[usize],
    out: &mut [u8],
) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    match elem {
        4 => permute_typed::<u32>(x, shape, perm, out),
        8 => permute_typed::<u64>(x, shape, perm, out),
        _ => permute_typed::<u8>(x, shape, perm, out),
    }
}

/// [`permute_bytes`] moving whole elements of type `E` (the byte buffers are reinterpreted,
/// or copied when unaligned); a `u8` element stands for one byte.
fn permute_typed<E: bytemuck::Pod + Send + Sync>(
    x: &[u8],
    shape: &[usize],
    perm: &[usize],
    out: &mut [u8],
) {
    let elem = std::mem::size_of::<E>();
    let scale = if elem == 1 {
        x.len() / shape.iter().product::<usize>().max(1)
    } else {
        1
    };
    if scale != 1 {
        // Element sizes other than 4 and 8 bytes: treat each byte of an element as an inner dim.
        let mut s = shape.to_vec();
        s.push(scale);
        let mut p = perm.to_vec();
        p.push(shape.len());
        return permute_typed::<u8>(x, &s, &p, out);
    }
    let (shape, perm) = fused(shape, perm);
    match (
        bytemuck::try_cast_slice::<u8, E>(x),
        bytemuck::try_cast_slice_mut::<u8, E>(out),
    ) {
        (Ok(src), Ok(dst)) => permute_into(src, &shape, &perm, dst),
        // Unaligned bytes: through aligned copies.
        _ => {
            let src: Vec<E> = bytemuck::pod_collect_to_vec(x);
            let mut dst = vec![E::zeroed(); src.len()];
            permute_into(&src, &shape, &perm, &mut dst);
            out.copy_from_slice(bytemuck::cast_slice(&dst));
        }
    }
}

/// The same permutation over fewer dims: size-1 dims dropped, and input dims that stay next to
/// each other in the output fused into one, so that (B, T, H, D) -> (B, H, T, D) moves runs of
/// D elements.
fn fused(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut renum = vec![0; shape.len()];
    let mut kept = vec![];
    for (d, &n) in shape.iter().enumerate() {
        if n != 1 {
            renum[d] = kept.len();
            kept.push(n);
        }
    }
    // Runs of consecutive input dims, in output order.
    let mut groups: Vec<Vec<usize>> = vec![];
    for p in perm.iter().filter(|&&p| shape[p] != 1).map(|&p| renum[p]) {
        match groups.last_mut() {
            Some(g) if g.last().is_some_and(|&l| l + 1 == p) => g.push(p),
            _ => groups.push(vec![p]),
        }
    }
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&i| groups[i][0]);
    let fused_shape = order
        .iter()
        .map(|&i| groups[i].iter().map(|&d| kept[d]).product())
        .collect();
    let mut fused_perm = vec![0; groups.len()];
    for (k, &i) in order.iter().enumerate() {
        fused_perm[i] = k;
    }
    (fused_shape, fused_perm)
}

/// `dst = src` permuted, in runs along the innermost output dim (copied whole when contiguous
/// in `src`), on several threads when large.
fn permute_into<E: bytemuck::Pod + Send + Sync>(
    src: &[E],
    shape: &[usize],
    perm: &[usize],
    dst: &mut [E],
) {
    let nd = shape.len();
    if nd == 0 {
        dst.copy_from_slice(src);
        return;
    }
    let st = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let src_st: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    let (inner, inner_st) = (out_shape[nd - 1], src_st[nd - 1]);
    if inner == 0 {
        return;
    }
    if nd >= 2 && inner_st != 1 && src_st[nd - 2] == 1 {
        return transpose_planes(src, &out_shape, &src_st, dst);
    }
    // Output rows from `first` on: the outer dims as a counter.
    let run = |first: usize, piece: &mut [E]| {
        let mut idx = vec![0usize; nd - 1];
        let mut r = first;
        for d in (0..nd - 1).rev() {
            idx[d] = r % out_shape[d];
            r /= out_shape[d];
        }
        for row in piece.chunks_mut(inner) {
            let base: usize = idx.iter().zip(&src_st).map(|(i, s)| i * s).sum();
            if inner_st == 1 {
                row.copy_from_slice(&src[base..base + inner]);
            } else {
                for (j, d) in row.iter_mut().enumerate() {
                    *d = src[base + j * inner_st];
                }
            }
            for d in (0..nd - 1).rev() {
                idx[d] += 1;
                if idx[d] < out_shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    };
    let rows_per_piece = (PAR_PIECE / inner).max(1);
    if dst.len() >= PAR_MIN {
        dst.par_chunks_mut(rows_per_piece * inner)
            .enumerate()
            .for_each(|(i, piece)| run(i * rows_per_piece, piece));
    } else {
        run(0, dst);
    }
}

/// Side of the tiles [`transpose_planes`] moves: a tile's source and destination lines
/// (16 of each, 64 bytes of `f32` per line) stay in the L1 cache while it is copied.
const TILE: usize = 16;

/// [`permute_into`] where the output's last two dims are a transposed plane of the source
/// (the source's contiguous dim is the output's second to last: `(B, L, C) -> (B, C, L)`, a
/// 2-D transpose, an im2col's windows moved behind the positions): each (rows x cols) output
/// plane copied in [`TILE`] x [`TILE`] tiles, reading runs of [`TILE`] contiguous source
/// elements, where copying output row by row reads one element per source line (a cache miss
/// each, once a plane's source outgrows the cache).
fn transpose_planes<E: bytemuck::Pod + Send + Sync>(
    src: &[E],
    out_shape: &[usize],
    src_st: &[usize],
    dst: &mut [E],
) {
    let nd = out_shape.len();
    let (rows, cols, col_st) = (out_shape[nd - 2], out_shape[nd - 1], src_st[nd - 1]);
    if rows == 0 {
        return;
    }
    // Output rows `first..` (rows of `cols` elements, counted over all planes) into `piece`.
    let run = |first: usize, piece: &mut [E]| {
        let n = piece.len() / cols;
        let mut r = 0;
        while r < n {
            let (plane, row) = ((first + r) / rows, (first + r) % rows);
            let block = TILE.min(rows - row).min(n - r);
            let mut base = row;
            let mut rest = plane;
            for d in (0..nd - 2).rev() {
                base += rest % out_shape[d] * src_st[d];
                rest /= out_shape[d];
            }
            let out = &mut piece[r * cols..(r + block) * cols];
            for c0 in (0..cols).step_by(TILE) {
                for c in c0..(c0 + TILE).min(cols) {
                    let from = &src[base + c * col_st..][..block];
                    for (t, &v) in from.iter().enumerate() {
                        out[t * cols + c] = v;
                    }
                }
            }
            r += block;
        }
    };
    // pieces of whole tiles of rows
    let rows_per_piece = (PAR_PIECE / cols).max(1).next_multiple_of(TILE);
    if dst.len() >= PAR_MIN {
        dst.par_chunks_mut(rows_per_piece * cols)
            .enumerate()
            .for_each(|(i, piece)| run(i * rows_per_piece, piece));
    } else {
        run(0, dst);
    }
}

/// Half of [`LANES`]: one AVX-512 register of `f32` partial sums.
const HALF: usize = LANES / 2;

/// [`Float::sum_row`]'s portable form: the partial sum `k` takes the elements `k` modulo
/// [`LANES`], then [`halves`] combines them; the last partial chunk is summed on its own and
/// added last.
#[inline(always)]
fn sum_row<T: Float>(row: &[T], shift: T, square: bool) -> T {
    let term = |v: T| {
        let d = v - shift;
        if square { d * d } else { d }
    };
    let (mut a, mut b) = ([T::zero(); HALF], [T::zero(); HALF]);
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        let (c0, c1) = c.split_at(HALF);
        for k in 0..HALF {
            a[k] = a[k] + term(c0[k]);
        }
        for k in 0..HALF {
            b[k] = b[k] + term(c1[k]);
        }
    }
    let tail = rest.iter().fold(T::zero(), |t, &v| t + term(v));
    halves(a, b) + tail
}

/// [`combine`]d sums of two halves of interleaved partial sums, `a[k] + b[k]` first.
#[inline(always)]
fn halves<T: Float>(mut a: [T; HALF], b: [T; HALF]) -> T {
    for k in 0..HALF {
        a[k] = a[k] + b[k];
    }
    combine(a, |a, b| a + b)
}

/// How many rows ahead the row kernels prefetch ([`prefetch_row`]).
const AHEAD: usize = 1;

/// Asks the CPU to bring the row `i` of `cols` elements of `data` (where there is one) into
/// its caches ahead of use: a row kernel reads a row in several short passes, and the hardware
/// prefetcher alone left it waiting on memory at the start of each.
#[inline(always)]
fn prefetch_row<T>(data: &[T], i: usize, cols: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(row) = data.get(i * cols..(i + 1) * cols) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        for line in row.chunks(64 / size_of::<T>().max(1)) {
            // SAFETY: a prefetch of a valid address has no effect on memory.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }
}

/// A row's mean when `center` (LayerNorm), else 0 (RMSNorm).
#[inline(always)]
fn row_mean<T: Float>(row: &[T], center: bool) -> T {
    if center {
        T::sum_row(row, T::zero(), false) / T::from_f64(row.len() as f64)
    } else {
        T::zero()
    }
}

/// `1 / sqrt(sum / n + eps)` for the sum of squares `sq` of a row of `n` elements.
#[inline(always)]
fn rstd<T: Float>(sq: T, n: usize, eps: T) -> T {
    T::one() / (sq / T::from_f64(n as f64) + eps).sqrt()
}

/// The mean and reciprocal standard deviation of a row: over `(x - mean)` when `center`
/// (LayerNorm's biased variance), over `x` itself otherwise (RMSNorm's mean square).
#[inline(always)]
fn row_stats<T: Float>(row: &[T], eps: T, center: bool) -> (T, T) {
    let mean = row_mean(row, center);
    let sq = T::sum_row(row, mean, true);
    (mean, rstd(sq, row.len(), eps))
}

/// The shift of a row's sums in the gradients' one pass: its first value when `center` (it lies
/// within a few standard deviations of the mean, so `sum(d^2) - sum(d)^2 / n` keeps the
/// variance's bits: the shifted-data algorithm, without a pass for the mean first), else 0.
#[inline(always)]
fn grad_shift<T: Float>(row: &[T], center: bool) -> T {
    match row.first() {
        Some(&v) if center => v,
        _ => T::zero(),
    }
}

/// The mean and reciprocal standard deviation of a row of `n` elements from the sums of
/// `d = x - shift` and of `d^2` ([`grad_shift`]); RMSNorm's (`center` false, `shift` 0) are 0
/// and the mean square's.
#[inline(always)]
fn shifted_stats<T: Float>([sq, sd]: [T; 2], shift: T, n: usize, eps: T, center: bool) -> (T, T) {
    if !center {
        return (T::zero(), rstd(sq, n, eps));
    }
    let dm = sd / T::from_f64(n as f64);
    (shift + dm, rstd((sq - sd * dm).max(T::zero()), n, eps))
}

/// The optional elementwise affine of a normalisation: `y * weight + bias` per column.
#[derive(Clone, Copy)]
pub(super) struct Affine<'a, T> {
    pub(super) weight: Option<&'a [T]>,
    pub(super) bias: Option<&'a [T]>,
}

/// Rows of `cols` elements normalised: `(x - mean) / sqrt(var + eps)` when `center`
/// (LayerNorm), `x / sqrt(mean(x^2) + eps)` otherwise (RMSNorm), then the affine. One pass for
/// the statistics and one for the output, rows on several threads.
pub(super) fn norm<T: Float>(
    x: &[T],
    affine: Affine<'_, T>,
    cols: usize,
    eps: f64,
    center: bool,
) -> Vec<T> {
    let eps = T::from_f64(eps);
    rows_written(
        x.len(),
        cols,
        2 * cols,
        #[inline(always)]
        |i, r| {
            let row = &x[i * cols..(i + 1) * cols];
            prefetch_row(x, i + AHEAD, cols);
            let (mean, rstd) = row_stats(row, eps, center);
            match (affine.weight, affine.bias) {
                (Some(w), Some(b)) => {
                    for (((o, &v), &w), &b) in r.iter_mut().zip(row).zip(w).zip(b) {
                        o.write((v - mean) * rstd * w + b);
                    }
                }
                (Some(w), None) => {
                    for ((o, &v), &w) in r.iter_mut().zip(row).zip(w) {
                        o.write((v - mean) * rstd * w);
                    }
                }
                (None, Some(b)) => {
                    for ((o, &v), &b) in r.iter_mut().zip(row).zip(b) {
                        o.write((v - mean) * rstd + b);
                    }
                }
                (None, None) => {
                    for (o, &v) in r.iter_mut().zip(row) {
                        o.write((v - mean) * rstd);
                    }
                }
            }
        },
    )
}

/// [`Float::h_sums`]'s portable form, each sum as [`sum_row`]'s.
#[inline(always)]
fn h_sums<T: Float>(g: &[T], w: &[T], x: &[T], shift: T) -> [T; 4] {
    let zero = [T::zero(); HALF];
    let ([mut q0, mut q1], [mut s0, mut s1], [mut p0, mut p1]) = ([zero; 2], [zero; 2], [zero; 2]);
    let [mut m0, mut m1] = [zero; 2];
    let (gc, wc, xc) = (
        g.chunks_exact(LANES),
        w.chunks_exact(LANES),
        x.chunks_exact(LANES),
    );
    let (gr, wr, xr) = (gc.remainder(), wc.remainder(), xc.remainder());
    let term = |g: T, w: T, x: T| {
        let (h, d) = (g * w, x - shift);
        (d * d, h, h * d, d)
    };
    for ((g, w), x) in gc.zip(wc).zip(xc) {
        let ((g0, g1), (w0, w1), (x0, x1)) = (g.split_at(HALF), w.split_at(HALF), x.split_at(HALF));
        for k in 0..HALF {
            let (q, s, p, m) = term(g0[k], w0[k], x0[k]);
            (q0[k], s0[k], p0[k], m0[k]) = (q0[k] + q, s0[k] + s, p0[k] + p, m0[k] + m);
        }
        for k in 0..HALF {
            let (q, s, p, m) = term(g1[k], w1[k], x1[k]);
            (q1[k], s1[k], p1[k], m1[k]) = (q1[k] + q, s1[k] + s, p1[k] + p, m1[k] + m);
        }
    }
    let mut tail = [T::zero(); 4];
    for ((&g, &w), &x) in gr.iter().zip(wr).zip(xr) {
        let (q, s, p, m) = term(g, w, x);
        tail = [tail[0] + q, tail[1] + s, tail[2] + p, tail[3] + m];
    }
    [
        halves(q0, q1) + tail[0],
        halves(s0, s1) + tail[1],
        halves(p0, p1) + tail[2],
        halves(m0, m1) + tail[3],
    ]
}

/// Rows per piece of [`norm_param_grad`]'s column sums.
const PARAM_ROWS: usize = 64;

/// The affine's parameter gradients of [`norm`]: `2 * cols` values, the weight's
/// `sum over rows of g * y` (y the normalised row) then the bias's `sum over rows of g`. Pieces
/// of [`PARAM_ROWS`] rows on several threads, combined in order (the same bits for any number
/// of threads).
pub(super) fn norm_param_grad<T: Float>(
    x: &[T],
    g: &[T],
    cols: usize,
    eps: f64,
    center: bool,
) -> Vec<T> {
    let eps = T::from_f64(eps);
    let rows = x.len().checked_div(cols).unwrap_or(0);
    let piece = |p: usize| -> Vec<T> {
        let mut acc = vec![T::zero(); 2 * cols];
        let (dw, db) = acc.split_at_mut(cols);
        wide(
            #[inline(always)]
            || {
                for i in p * PARAM_ROWS..((p + 1) * PARAM_ROWS).min(rows) {
                    let (row, grow) = (&x[i * cols..(i + 1) * cols], &g[i * cols..(i + 1) * cols]);
                    prefetch_row(x, i + AHEAD, cols);
                    prefetch_row(g, i + AHEAD, cols);
                    // the statistics as norm_grads finds them (the same bits)
                    let shift = grad_shift(row, center);
                    let [sq, _, _, sd] = T::h_sums(grow, grow, row, shift);
                    let (mean, rstd) = shifted_stats([sq, sd], shift, cols, eps, center);
                    for (((w, b), &v), &gv) in dw.iter_mut().zip(db.iter_mut()).zip(row).zip(grow) {
                        *w = *w + gv * ((v - mean) * rstd);
                        *b = *b + gv;
                    }
                }
            },
        );
        acc
    };
    let pieces = rows.div_ceil(PARAM_ROWS);
    let parts: Vec<Vec<T>> = if rows * cols < PAR_MIN {
        (0..pieces).map(piece).collect()
    } else {
        (0..pieces).into_par_iter().map(piece).collect()
    };
    let mut total = vec![T::zero(); 2 * cols];
    for part in parts {
        for (t, v) in total.iter_mut().zip(part) {
            *t = *t + v;
        }
    }
    total
}

/// The gradients of [`norm`] for the output gradient `g` and the affine's `weight`, in one pass
/// over `x` and `g`: the input's (`x`'s length), then the weight's and the bias's (`2 * cols`,
/// as [`norm_param_grad`], with its bits: column sums in pieces of [`PARAM_ROWS`] rows
/// combined in order). With `h = g * weight` and `y` the normalised row, `dx = rstd * (h -
/// mean(h) - y * mean(h * y))` when `center`, without the `mean(h)` term otherwise; per row
/// two passes over the row, in cache: the statistics with the sums of `h` and `h * (x -
/// mean)` (shifted, [`shifted_stats`]); `dx` and the column sums, in one loop over slices the
/// compiler knows the length of (with per-element bounds checks it did not vectorize: the
/// backward of (8, 1024, 768) took 2.2 ms, now 1.7). Each piece reads its rows from memory
/// once, where an input kernel and a parameter kernel would stream `x` and `g` twice.
pub(super) fn norm_grads<T: Float>(
    x: &[T],
    g: &[T],
    weight: Option<&[T]>,
    cols: usize,
    eps: f64,
    center: bool,
) -> Vec<T> {
    let rows = x.len().checked_div(cols).unwrap_or(0);
    let eps = T::from_f64(eps);
    let n = T::from_f64(cols as f64);
    let ones;
    let w = match weight {
        Some(w) => w,
        None => {
            ones = vec![T::one(); cols];
            &ones
        }
    };
    // rows `first..` of one piece: their `dx` into `out`, their column sums returned
    let piece = |first: usize, out: Slots<'_, T>| -> Vec<T> {
        let mut acc = vec![T::zero(); 2 * cols];
        let (dw, db) = acc.split_at_mut(cols);
        wide(
            #[inline(always)]
            || {
                for (j, r) in out.chunks_mut(cols).enumerate() {
                    let i = first + j;
                    let (row, grow) = (&x[i * cols..(i + 1) * cols], &g[i * cols..(i + 1) * cols]);
                    prefetch_row(x, i + AHEAD, cols);
                    prefetch_row(g, i + AHEAD, cols);
                    let shift = grad_shift(row, center);
                    let [sq, hs, hy, sd] = T::h_sums(grow, w, row, shift);
                    let (mean, rstd) = shifted_stats([sq, sd], shift, cols, eps, center);
                    // sum(h * (x - mean)) from the shifted sums
                    let hy = hy - (mean - shift) * hs;
                    let h_mean = if center { hs / n } else { T::zero() };
                    let hy_mean = hy * rstd / n;
                    // one pass for the row's dx and its share of the parameters' gradients
                    let (r, w, dw, db) =
                        (&mut r[..cols], &w[..cols], &mut dw[..cols], &mut db[..cols]);
                    let (row, grow) = (&row[..cols], &grow[..cols]);
                    for k in 0..cols {
                        let (v, gv) = ((row[k] - mean) * rstd, grow[k]);
                        r[k].write(rstd * (gv * w[k] - h_mean - v * hy_mean));
                        dw[k] = dw[k] + gv * v;
                        db[k] = db[k] + gv;
                    }
                }
            },
        );
        acc
    };
    // room for the parameters' gradients too, so that appending them moves nothing
    let mut out = Vec::with_capacity(rows * cols + 2 * cols);
    let slots = &mut out.spare_capacity_mut()[..rows * cols];
    let parts: Vec<Vec<T>> = if cols == 0 {
        vec![]
    } else if rows * cols < PAR_MIN {
        slots
            .chunks_mut(PARAM_ROWS * cols)
            .enumerate()
            .map(|(p, c)| piece(p * PARAM_ROWS, c))
            .collect()
    } else {
        slots
            .par_chunks_mut(PARAM_ROWS * cols)
            .enumerate()
            .map(|(p, c)| piece(p * PARAM_ROWS, c))
            .collect()
    };
    // SAFETY: the pieces cover the `rows * cols` slots and each writes every slot of its rows.
    unsafe { out.set_len(rows * cols) };
    let mut total = vec![T::zero(); 2 * cols];
    for part in parts {
        for (t, v) in total.iter_mut().zip(part) {
            *t = *t + v;
        }
    }
    out.extend(total);
    out
}

/// The `f32` row sums with AVX-512 intrinsics, where LLVM vectorised the portable loops into
/// 2-wide adds (LayerNorm's forward, 8192 rows of 768 from L2, 1 thread: 2.8 -> 1.65 ms; its
/// input gradient 2.7 -> 2.1, the parameters' 2.9 -> 1.9). Each `a` / `b`
/// register is the portable form's `a` / `b` array, added in the same order, so the bits are
/// those of [`sum_row`] and [`h_sums`].
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m512, _mm512_add_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps, _mm512_sub_ps,
    };

    use super::{HALF, LANES, combine};

    /// The two registers' lanes added, then [`combine`]d: the portable form's `halves`.
    #[target_feature(enable = "avx512f")]
    fn halves(a: __m512, b: __m512) -> f32 {
        let mut lanes = [0.0f32; HALF];
        // SAFETY: `lanes` holds the 16 `f32` one register stores.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), _mm512_add_ps(a, b)) };
        combine(lanes, |a, b| a + b)
    }

    /// The two halves of a chunk of [`LANES`] elements.
    #[target_feature(enable = "avx512f")]
    fn load(c: &[f32]) -> (__m512, __m512) {
        assert!(c.len() >= LANES);
        // SAFETY: `c` has at least 32 elements.
        unsafe {
            (
                _mm512_loadu_ps(c.as_ptr()),
                _mm512_loadu_ps(c.as_ptr().add(HALF)),
            )
        }
    }

    /// [`super::Float::sum_row`] for `f32`.
    #[target_feature(enable = "avx512f")]
    pub(super) fn sum_row(row: &[f32], shift: f32, square: bool) -> f32 {
        let s = _mm512_set1_ps(shift);
        let (mut a, mut b) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let chunks = row.chunks_exact(LANES);
        let rest = chunks.remainder();
        for c in chunks {
            let (u, v) = load(c);
            let (mut u, mut v) = (_mm512_sub_ps(u, s), _mm512_sub_ps(v, s));
            if square {
                (u, v) = (_mm512_mul_ps(u, u), _mm512_mul_ps(v, v));
            }
            (a, b) = (_mm512_add_ps(a, u), _mm512_add_ps(b, v));
        }
        let tail = rest.iter().fold(0.0, |t, &v| {
            let d = v - shift;
            t + if square { d * d } else { d }
        });
        halves(a, b) + tail
    }

    /// [`super::Float::h_sums`] for `f32`.
    #[target_feature(enable = "avx512f")]
    pub(super) fn h_sums(g: &[f32], w: &[f32], x: &[f32], shift: f32) -> [f32; 4] {
        let s = _mm512_set1_ps(shift);
        let zero = _mm512_setzero_ps();
        let ([mut q0, mut q1], [mut s0, mut s1], [mut p0, mut p1]) =
            ([zero; 2], [zero; 2], [zero; 2]);
        let [mut m0, mut m1] = [zero; 2];
        let (gc, wc, xc) = (
            g.chunks_exact(LANES),
            w.chunks_exact(LANES),
            x.chunks_exact(LANES),
        );
        let (gr, wr, xr) = (gc.remainder(), wc.remainder(), xc.remainder());
        for ((g, w), x) in gc.zip(wc).zip(xc) {
            let ((g0, g1), (w0, w1), (x0, x1)) = (load(g), load(w), load(x));
            let (h0, h1) = (_mm512_mul_ps(g0, w0), _mm512_mul_ps(g1, w1));
            let (d0, d1) = (_mm512_sub_ps(x0, s), _mm512_sub_ps(x1, s));
            q0 = _mm512_add_ps(q0, _mm512_mul_ps(d0, d0));
            q1 = _mm512_add_ps(q1, _mm512_mul_ps(d1, d1));
            s0 = _mm512_add_ps(s0, h0);
            s1 = _mm512_add_ps(s1, h1);
            p0 = _mm512_add_ps(p0, _mm512_mul_ps(h0, d0));
            p1 = _mm512_add_ps(p1, _mm512_mul_ps(h1, d1));
            m0 = _mm512_add_ps(m0, d0);
            m1 = _mm512_add_ps(m1, d1);
        }
        let mut tail = [0.0; 4];
        for ((&g, &w), &x) in gr.iter().zip(wr).zip(xr) {
            let (h, d) = (g * w, x - shift);
            tail = [tail[0] + d * d, tail[1] + h, tail[2] + h * d, tail[3] + d];
        }
        [
            halves(q0, q1) + tail[0],
            halves(s0, s1) + tail[1],
            halves(p0, p1) + tail[2],
            halves(m0, m1) + tail[3],
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_matches_naive_loops() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
        let got = matmul(
            &a,
            &b,
            MatmulDims {
                batch: 1,
                m,
                k,
                n,
                b_batched: false,
                a_trans: false,
                b_trans: false,
            },
        );
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                assert!((got[i * n + j] - want).abs() < 1e-12);
            }
        }
    }

    /// bf16 products by the pair dot products, batched (one `b` or one per product) and
    /// transposed, equal the f32 product of the same bf16 values within f32 summation error;
    /// too small a product, or a CPU without AVX512-BF16, leaves them to the f32 path (`None`).
    #[test]
    fn bf16_products_by_pair_dot_products_equal_the_f32_product() {
        let (batch, m, k, n) = (2, 130, 121, 140);
        let av: Vec<f32> = (0..batch * m * k)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let bv: Vec<f32> = (0..batch * k * n)
            .map(|i| (i as f32 * 0.11).cos())
            .collect();
        let a16: Vec<bf16> = av.iter().map(|&x| bf16::from_f32(x)).collect();
        let b16: Vec<bf16> = bv.iter().map(|&x| bf16::from_f32(x)).collect();
        let (a32, b32): (Vec<f32>, Vec<f32>) = (
            a16.iter().map(|x| x.to_f32()).collect(),
            b16.iter().map(|x| x.to_f32()).collect(),
        );
        let small = MatmulDims {
            batch: 1,
            m: 4,
            k: 4,
            n: 4,
            b_batched: false,
            a_trans: false,
            b_trans: false,
        };
        assert!(matmul_bf16(&a16, &b16, small).is_none());
        if !super::super::bgemm::available() {
            eprintln!("!!! no AVX512-BF16 on this CPU: bf16 products take the f32 path here !!!");
            return;
        }
        for (b_batched, a_trans, b_trans) in [
            (false, false, false),
            (true, false, false),
            (true, true, false),
            (false, false, true),
            (true, true, true),
        ] {
            let d = MatmulDims {
                batch,
                m,
                k,
                n,
                b_batched,
                a_trans,
                b_trans,
            };
            let got = matmul_bf16(&a16, &b16, d).expect("a large product on AVX512-BF16");
            let want = matmul(&a32, &b32, d);
            for (i, (g, w)) in got.iter().map(|g| g.to_f32()).zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-4 + w.abs() / 256.0,
                    "{d:?} [{i}]: {g} vs {w}"
                );
            }
        }
    }

    /// `x` permuted by plain index arithmetic, element by element.
    fn permuted_naive(x: &[u32], shape: &[usize], perm: &[usize]) -> Vec<u32> {
        let st = strides(shape);
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        (0..x.len())
            .map(|mut o| {
                let mut at = 0;
                for d in (0..perm.len()).rev() {
                    at += (o % out_shape[d]) * st[perm[d]];
                    o /= out_shape[d];
                }
                x[at]
            })
            .collect()
    }

    proptest::proptest! {
        /// Every permutation of shapes with size-1 dims and fusible runs, small and large (the
        /// threaded path), 1-, 2-, 4- and 8-byte elements, equals the element-by-element result.
        #[test]
        fn permute_matches_index_arithmetic(
            shape in proptest::collection::vec(1usize..7, 0..6),
            seed in 0u64..1000,
            big in proptest::bool::ANY,
            elem in proptest::sample::select(vec![1usize, 2, 4, 8]),
        ) {
            let mut shape = shape;
            if big && !shape.is_empty() {
                shape[0] *= 997;
            }
            let n: usize = shape.iter().product();
            let mut perm: Vec<usize> = (0..shape.len()).collect();
            let mut r = seed;
            for i in (1..perm.len()).rev() {
                r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                perm.swap(i, (r >> 33) as usize % (i + 1));
            }
            let x: Vec<u32> = (0..n as u32).collect();
            let want = permuted_naive(&x, &shape, &perm);
            // each element as `elem` bytes holding (a prefix of) its index
            let bytes = |v: &[u32]| -> Vec<u8> {
                v.iter().flat_map(|i| {
                    let b = u64::from(*i).to_le_bytes();
                    b[..elem].to_vec()
                }).collect()
            };
            let mut out = vec![0u8; n * elem];
            permute_bytes(elem, &bytes(&x), &shape, &perm, &mut out);
            proptest::prop_assert_eq!(out, bytes(&want));
        }
    }

    /// Deterministic values in [-3, 3), `n` of them.
    fn sample(n: usize, seed: usize) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104_729) % 6007) as f64 / 6007.0 * 6.0 - 3.0)
            .collect()
    }

    /// Rows of `cols` as naive f64 loops: softmax, log-softmax.
    fn softmax_naive(x: &[f64], cols: usize, log: bool) -> Vec<f64> {
        x.chunks(cols)
            .flat_map(|r| {
                let m = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
                r.iter()
                    .map(move |v| {
                        if log {
                            v - m - s.ln()
                        } else {
                            (v - m).exp() / s
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn close(got: &[f32], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= tol * (1.0 + w.abs()),
                "at {i}: {g} against {w}"
            );
        }
    }

    /// Enough rows for the threaded path, rows of odd length (vector remainders).
    const ROWS: usize = 301;
    const COLS: usize = 131;

    #[test]
    fn softmax_rows_and_their_gradients_match_naive_loops() {
        let x = sample(ROWS * COLS, 1);
        let g = sample(ROWS * COLS, 2);
        let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let gf: Vec<f32> = g.iter().map(|&v| v as f32).collect();
        for log in [false, true] {
            let y = softmax_naive(&x, COLS, log);
            let got = softmax(&xf, &[ROWS, COLS], 1, log);
            close(&got, &y, 1e-5);
            // dx = y (g - sum(g y)), log: g - e^y sum(g)
            let want: Vec<f64> = y
                .chunks(COLS)
                .zip(g.chunks(COLS))
                .flat_map(|(y, g)| {
                    let s: f64 = if log {
                        g.iter().sum()
                    } else {
                        g.iter().zip(y).map(|(a, b)| a * b).sum()
                    };
                    y.iter()
                        .zip(g)
                        .map(move |(&y, &g)| if log { g - y.exp() * s } else { y * (g - s) })
                        .collect::<Vec<_>>()
                })
                .collect();
            let yf: Vec<f32> = y.iter().map(|&v| v as f32).collect();
            close(&softmax_grad(&yf, &gf, &[ROWS, COLS], 1, log), &want, 1e-4);
            // over the middle dim of (ROWS, COLS, 1) and of (1, ROWS, COLS) transposed
            let t: Vec<f64> = (0..ROWS * COLS)
                .map(|i| x[(i % ROWS) * COLS + i / ROWS])
                .collect();
            let tf: Vec<f32> = t.iter().map(|&v| v as f32).collect();
            let got = softmax(&tf, &[COLS, ROWS], 0, log);
            let back: Vec<f32> = (0..ROWS * COLS)
                .map(|i| got[(i % COLS) * ROWS + i / COLS])
                .collect();
            close(&back, &y, 1e-5);
        }
    }

    #[test]
    fn avx512_row_sums_are_the_portable_ones_bit_for_bit() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            let f = |v: Vec<f64>| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
            let (x, g, w) = (f(sample(200, 7)), f(sample(200, 8)), f(sample(200, 9)));
            // lengths with and without whole chunks of 32, and with and without a tail
            for n in [0, 5, 31, 32, 33, 64, 77, 131, 200] {
                let (x, g, w) = (&x[..n], &g[..n], &w[..n]);
                for (shift, square) in [(0.0, false), (0.3, false), (0.3, true)] {
                    // SAFETY: the CPU has AVX-512F.
                    let fast = unsafe { avx512::sum_row(x, shift, square) };
                    assert_eq!(fast.to_bits(), sum_row(x, shift, square).to_bits(), "{n}");
                }
                // SAFETY: as above.
                let fast = unsafe { avx512::h_sums(g, w, x, 0.3) };
                let portable = h_sums(g, w, x, 0.3);
                let bits = |t: [f32; 4]| t.map(f32::to_bits);
                assert_eq!(bits(fast), bits(portable), "{n}");
            }
            return;
        }
        eprintln!("skipped: this CPU has no AVX-512F");
    }

    #[test]
    fn norms_and_their_gradients_match_naive_loops() {
        // widths below, at and between the kernels' 32 lanes and vector widths
        for cols in [COLS, 7, 32, 96] {
            norms_match_naive_loops(cols);
        }
    }

    fn norms_match_naive_loops(cols: usize) {
        let x = sample(ROWS * cols, 3);
        let g = sample(ROWS * cols, 4);
        let w: Vec<f64> = sample(cols, 5).iter().map(|v| v + 3.5).collect();
        let b = sample(cols, 6);
        let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        let (xf, gf, wf, bf) = (f(&x), f(&g), f(&w), f(&b));
        let n = cols as f64;
        for center in [false, true] {
            for (weight, bias) in [(false, false), (true, false), (true, true), (false, true)] {
                let mut y = vec![];
                let mut dx = vec![];
                let mut params = vec![0.0; 2 * cols];
                for (r, gr) in x.chunks(cols).zip(g.chunks(cols)) {
                    let mean = if center {
                        r.iter().sum::<f64>() / n
                    } else {
                        0.0
                    };
                    let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
                    let rstd = 1.0 / (var + 1e-5).sqrt();
                    let yn: Vec<f64> = r.iter().map(|v| (v - mean) * rstd).collect();
                    let h: Vec<f64> = (0..cols)
                        .map(|j| gr[j] * if weight { w[j] } else { 1.0 })
                        .collect();
                    let hm = if center {
                        h.iter().sum::<f64>() / n
                    } else {
                        0.0
                    };
                    let hy = h.iter().zip(&yn).map(|(a, b)| a * b).sum::<f64>() / n;
                    for j in 0..cols {
                        let wj = if weight { w[j] } else { 1.0 };
                        let bj = if bias { b[j] } else { 0.0 };
                        y.push(yn[j] * wj + bj);
                        dx.push(rstd * (h[j] - hm - yn[j] * hy));
                        params[j] += gr[j] * yn[j];
                        params[cols + j] += gr[j];
                    }
                }
                let affine = Affine {
                    weight: weight.then_some(&wf[..]),
                    bias: bias.then_some(&bf[..]),
                };
                close(&norm(&xf, affine, cols, 1e-5, center), &y, 1e-5);
                let wt = weight.then_some(&wf[..]);
                let mut both = norm_grads(&xf, &gf, wt, cols, 1e-5, center);
                let fused_params = both.split_off(dx.len());
                close(&both, &dx, 1e-4);
                close(&fused_params, &params, 1e-3);
                close(
                    &norm_param_grad(&xf, &gf, cols, 1e-5, center),
                    &params,
                    1e-3,
                );
            }
        }
    }

    /// The one-pass parameter gradients are [`norm_param_grad`]'s bit for bit, on one thread
    /// and on several (rows past `PAR_MIN`), with a partial last piece of rows; the input
    /// gradient's rows do not depend on how rows are cut into pieces.
    #[test]
    fn fused_norm_gradients_are_the_separate_kernels_bit_for_bit() {
        fn check<T: Float>(x: &[T], g: &[T], w: &[T], cols: usize) {
            for center in [false, true] {
                for wt in [None, Some(w)] {
                    let mut both = norm_grads(x, g, wt, cols, 1e-5, center);
                    let params = both.split_off(x.len());
                    let rows = x.len() / cols;
                    assert!(
                        params == norm_param_grad(x, g, cols, 1e-5, center),
                        "cols {cols}, rows {rows}, center {center}"
                    );
                    // the last row alone gives the same input gradient as in the whole
                    let last = x.len() - cols;
                    let alone = norm_grads(&x[last..], &g[last..], wt, cols, 1e-5, center);
                    assert!(alone[..cols] == both[last..], "cols {cols}, rows {rows}");
                }
            }
        }
        for (rows, cols) in [(3, 7), (130, 96), (700, 96)] {
            let (x, g) = (sample(rows * cols, 7), sample(rows * cols, 8));
            let w: Vec<f64> = sample(cols, 9).iter().map(|v| v + 2.0).collect();
            check(&x, &g, &w, cols);
            let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
            check(&f(&x), &f(&g), &f(&w), cols);
        }
    }

    #[test]
    fn unary_mul_is_g_times_the_derivative() {
        let n = PAR_MIN * 3 + 5;
        let x: Vec<f32> = sample(n, 7).iter().map(|&v| v as f32 * 2.0).collect();
        let g: Vec<f32> = sample(n, 8).iter().map(|&v| v as f32).collect();
        for op in [UnaryOp::GeluGrad, UnaryOp::GeluErfGrad, UnaryOp::SiluGrad] {
            let want: Vec<f32> = unary(op, &x).iter().zip(&g).map(|(d, g)| g * d).collect();
            assert_eq!(unary_mul(op, &x, &g), Some(want), "{op:?}");
        }
        assert_eq!(unary_mul(UnaryOp::Exp, &x, &g), None);
    }

    #[test]
    fn reductions_over_inner_and_outer_dims_match_naive_loops() {
        let x: Vec<f64> = sample(5 * 7 * 1031, 9);
        let at = |i: usize, j: usize, k: usize| x[(i * 7 + j) * 1031 + k];
        let sum1 = reduce(ReduceKind::Sum, &x, &[5, 7, 1031], &[1]);
        let max0 = reduce(ReduceKind::Max, &x, &[5, 7, 1031], &[0]);
        let sum2 = reduce(ReduceKind::Sum, &x, &[5, 7, 1031], &[2]);
        for i in 0..5 {
            for k in 0..1031 {
                let want: f64 = (0..7).map(|j| at(i, j, k)).sum();
                assert!((sum1[i * 1031 + k] - want).abs() < 1e-12);
            }
            for j in 0..7 {
                let want: f64 = (0..1031).map(|k| at(i, j, k)).sum();
                assert!((sum2[i * 7 + j] - want).abs() < 1e-9);
            }
        }
        for j in 0..7 {
            for k in 0..1031 {
                let want = (0..5)
                    .map(|i| at(i, j, k))
                    .fold(f64::NEG_INFINITY, f64::max);
                assert_eq!(max0[j * 1031 + k], want);
            }
        }
        assert_eq!(
            reduce(ReduceKind::Sum, &x[..0], &[2, 0, 3], &[1]),
            vec![0.0; 6]
        );
    }

    #[test]
    fn broadcasting_reduce_softmax_permute() {
        // (2,3) + (3,) and (2,1)
        let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(
            binary(
                BinaryOp::Add,
                &a,
                &[2, 3],
                &[10.0, 20.0, 30.0],
                &[3],
                &[2, 3]
            ),
            vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
        );
        assert_eq!(
            binary(BinaryOp::Mul, &a, &[2, 3], &[2.0, 0.0], &[2, 1], &[2, 3]),
            vec![2.0, 4.0, 6.0, 0.0, 0.0, 0.0]
        );
        // both operands repeated along the row: one value per row
        assert_eq!(
            binary(BinaryOp::Sub, &[5.0, 7.0], &[2, 1], &[1.0], &[1], &[2, 3]),
            vec![4.0, 4.0, 4.0, 6.0, 6.0, 6.0]
        );
        assert_eq!(reduce(ReduceKind::Sum, &a, &[2, 3], &[1]), vec![6.0, 15.0]);
        assert_eq!(reduce(ReduceKind::Max, &a, &[2, 3], &[0, 1]), vec![6.0]);
        let s = softmax(&a, &[2, 3], 1, false);
        assert!((s[0] + s[1] + s[2] - 1.0).abs() < 1e-12 && s[2] > s[1]);
        let ls = softmax(&a, &[2, 3], 0, true);
        assert!((ls[0] - (1.0f64 / (1.0 + 3f64.exp())).ln()).abs() < 1e-9);
        let mut out = vec![0u8; 48];
        permute_bytes(8, bytemuck::cast_slice(&a), &[2, 3], &[1, 0], &mut out);
        assert_eq!(
            bytemuck::pod_collect_to_vec::<u8, f64>(&out),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        assert_eq!(unary(UnaryOp::Relu, &[-1.0f32, 2.0]), vec![0.0, 2.0]);
        let g = unary(UnaryOp::Gelu, &[1.0f64])[0];
        assert!((g - 0.841_191_990_607_77).abs() < 1e-9, "{g}");
    }
}

//! Branch-free `f32` exp, tanh, erf and the normal CDF that the compiler vectorizes (libm's are
//! one scalar call per element): exp by range reduction to `[-ln2/2, ln2/2]` and a degree-6
//! minimax polynomial, within 1 ulp of the correctly rounded value over the normal range; tanh
//! from it, with an odd series near zero where `1 - 2 / (e^2x + 1)` would cancel; erf from
//! least-squares polynomial fits (an odd one below 1, `e^(-x^2)` times one in `1/x` above); the
//! normal CDF from one rational fit in `|x|` times `e^(-x^2/2)`. The polynomials are fused
//! multiply-adds (one rounding each: the same bits on every CPU, one instruction where the
//! kernels are compiled with FMA). `f64` keeps the standard library's and libm's.

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts, so `n * LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Adding and subtracting 1.5 * 2^23 rounds an `f32` of magnitude below 2^22 to an integer
/// (SSE2 has no vector rounding instruction; this is the usual trick).
const ROUND: f32 = 12_582_912.0;
/// Above this exp overflows `f32`; below `EXP_MIN` it is subnormal (returned as 0).
const EXP_MAX: f32 = 88.722_83;
const EXP_MIN: f32 = -87.336_55;

/// `e^r - 1 = r (1 + r P(r))` on `[-ln2/2, ln2/2]`: `P`'s coefficients from `r^0` up, a
/// minimax fit for relative error (4.0e-9 in f64 arithmetic with these `f32` values).
const EXP_POLY: [f32; 5] = [
    0.499_999_94,
    0.166_665_21,
    0.041_668_247,
    0.008_368_599,
    0.001_382_375_5,
];

/// `e^r` for `r` in `[-ln2/2, ln2/2]`, in Horner's form: six fused multiply-adds.
#[inline(always)]
fn exp_reduced(r: f32) -> f32 {
    let mut p = EXP_POLY[4];
    for &c in EXP_POLY[..4].iter().rev() {
        p = p.mul_add(r, c);
    }
    p.mul_add(r, 1.0).mul_add(r, 1.0)
}

/// `e^r` for `r = x - n ln 2` in `[-ln2/2, ln2/2]` (`n` the integer nearest `x log2 e`), with
/// ln 2 in two parts so that the reduction is exact.
#[inline(always)]
fn exp_poly(x: f32, n: f32) -> f32 {
    exp_reduced((-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x)))
}

/// `2^m` from `s = m + ROUND` for an integer-valued `m` in `[-126, 127]`: `s` holds `m` in its
/// low mantissa bits, so its bits minus ROUND's are m (a vector integer subtraction, where
/// `as i32` saturates element by element in scalar code).
#[inline(always)]
fn pow2(s: f32) -> f32 {
    let m = s.to_bits().wrapping_sub(ROUND.to_bits());
    f32::from_bits(m.wrapping_add(127) << 23)
}

/// `e^x`.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let n = (xc * LOG2E + ROUND) - ROUND;
    let y = exp_poly(xc, n);
    // n reaches 128 just below EXP_MAX, one past the largest exponent: scale by 2^127 and 2.
    let m = n.min(127.0);
    let v = y * pow2(m + ROUND) * (1.0 + (n - m));
    if x > EXP_MAX {
        f32::INFINITY
    } else if x < EXP_MIN {
        0.0
    } else {
        v
    }
}

/// `e^(-x^2/2)` (a NaN stays NaN; 0 where it would be subnormal), for the exact GELU: [`exp`]'s
/// reduction and polynomial without its overflow handling (the exponent is never positive),
/// `n` rounded from `x^2` by one fused multiply-add, `2^n` read off that rounding sum's bits, and
/// ln 2 as one `f32` (its rounding, 1.9e-9, times `n`: at most 3.4e-8 relative where the GELU
/// is above `-5`, below the rounding of `x^2` itself).
#[inline(always)]
fn gauss(x: f32) -> f32 {
    let sq = x * x;
    let xc = -0.5 * sq;
    // `n + ROUND`, `n` the integer nearest `xc log2 e` (`-0.5 LOG2E` is exact)
    let s = sq.mul_add(-0.5 * LOG2E, ROUND);
    let r = (-(s - ROUND)).mul_add(std::f32::consts::LN_2, xc);
    let e = exp_reduced(r) * pow2(s);
    if xc < EXP_MIN { 0.0 } else { e }
}

/// `tanh(x)`.
#[inline(always)]
pub(super) fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let x2 = x * x;
    // x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835: below 0.3 its error is under 1e-8 relative
    let series = x
        * (1.0
            + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0)))));
    let far = (1.0 - 2.0 / (exp(2.0 * a) + 1.0)).copysign(x);
    if a < 0.3 { series } else { far }
}

/// `erf(x) / x = P(x^2)` on `|x| < 1`, least-squares fitted (relative error 1.4e-9 in f64).
const ERF_SMALL: [f32; 7] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    -0.376_126_3,
    0.112_836_12,
    -0.026_854_806,
    0.005_190_049,
    -8.024_312e-4,
    7.898_066_5e-5,
];

/// `erfc(z) e^(z^2) z = R(1/z)` on `1 <= z <= 9.5`, least-squares fitted (relative error 4e-8 in
/// f64).
const ERFC_TAIL: [f32; 11] = [
    0.564_211_8,
    -7.643_314e-4,
    -0.271_012_75,
    -0.088_664_845,
    0.850_660_8,
    -1.242_241,
    0.810_850_4,
    -0.050_862_584,
    -0.295_667_08,
    0.191_487_67,
    -0.040_414_467,
];

/// `erf(x)` for `|x| < 1`.
#[inline(always)]
fn erf_small(x: f32) -> f32 {
    let s = x * x;
    let mut p = ERF_SMALL[6];
    for &c in ERF_SMALL[..6].iter().rev() {
        p = p.mul_add(s, c);
    }
    x * p
}

/// `erfc(z)` for `z >= 1` (0 once `e^(-z^2)` underflows).
#[inline(always)]
fn erfc_tail(z: f32) -> f32 {
    let u = 1.0 / z;
    let mut r = ERFC_TAIL[10];
    for &c in ERFC_TAIL[..10].iter().rev() {
        r = r.mul_add(u, c);
    }
    exp(-z * z) * u * r
}

/// `erf(x)`.
#[inline(always)]
pub(super) fn erf(x: f32) -> f32 {
    let a = x.abs();
    // a NaN takes the far branch and stays NaN
    let far = 1.0 - erfc_tail(if a < 1.0 { 1.0 } else { a });
    if a < 1.0 {
        erf_small(x)
    } else {
        far.copysign(x)
    }
}

/// `Q(a) e^(a^2/2) = P(a) / S(a)` on `a >= 0` (`Q` the standard normal upper tail): the
/// numerator's and denominator's coefficients from `a^0` up, all positive (Horner's form adds no
/// cancellation), fitted for relative error over `[0, 14]` (1.7e-8 in f64 arithmetic with these
/// `f32` values).
const TAIL_P: [f32; 5] = [
    0.5,
    0.442_185_97,
    0.186_085_25,
    0.041_581_996,
    0.004_252_800_7,
];
const TAIL_S: [f32; 6] = [
    1.0,
    1.682_256_9,
    1.214_412_7,
    0.476_979_8,
    0.104_235_776,
    0.010_660_1,
];

/// The standard normal CDF `Phi(x)` and `e^(-x^2/2)`, for the exact GELU `x Phi(x)` and its
/// derivative `Phi(x) + x e^(-x^2/2) / sqrt(2 pi)`: one division of two polynomials and one
/// exponential, the same for every `x` (the upper tail `Q(|x|) = P/S e^(-x^2/2)`, and
/// `Phi = 1 - Q` or `Q` by the sign), where `1 - erfc` with erf's two fits cost two of each.
///
/// Measured over every 7th `f32` in `[-14, 14]` against f64 (`x erfc(-x / sqrt 2) / 2`), the
/// GELU of [`gelu`]: largest absolute error 2.4e-7, relative error 2.5e-7 on `[0, inf)`,
/// 5.4e-7 on `[-3, 0)`, 7.8e-7 on `[-5, -3)`, 4.3e-6 on `[-14, -5)` (rounding of `x^2/2`
/// before the exponential, and ln 2's in [`gauss`]). PyTorch 2.15's vectorised GELU (`Vectorized<float>::erf`,
/// Abramowitz-Stegun 7.1.26, then `1 + erf`), measured the same way: absolute 1.2e-6,
/// relative 3.7e-7 on `[0, inf)`, 2.4e-4 on `[-3, 0)`, 0.29 on `[-5, -3)`, 1.0 below -5.49
/// (0 returned).
#[inline(always)]
pub(super) fn normal(x: f32) -> (f32, f32) {
    let (tr, e) = tail(x);
    let q = tr * e;
    (if x >= 0.0 { 1.0 - q } else { q }, e)
}

/// `Q(|x|) e^(x^2/2) = P/S` and `e^(-x^2/2)`: [`normal`]'s two factors of the upper tail.
#[inline(always)]
fn tail(x: f32) -> (f32, f32) {
    let a = clamped_abs(x);
    let mut p = TAIL_P[4];
    for &c in TAIL_P[..4].iter().rev() {
        p = p.mul_add(a, c);
    }
    let mut s = TAIL_S[5];
    for &c in TAIL_S[..5].iter().rev() {
        s = s.mul_add(a, c);
    }
    (p / s, gauss(x))
}

/// `|x|`, at most 16 (past which `Q` is 0), so that `x = inf` gives finite polynomials in
/// [`tail`] (not `inf / inf`) and `inf` in [`gelu`] (not `inf * 0`); a NaN stays NaN (not
/// `min`, which would turn it into 16).
#[inline(always)]
fn clamped_abs(x: f32) -> f32 {
    let a = x.abs();
    if a > 16.0 { 16.0 } else { a }
}

/// The exact GELU `x Phi(x)`, as `max(x, 0) - |x| Q(|x|)` with one fused multiply-add: for
/// `x < 0` the bits of `x * normal(x).0`, for `x >= 0` one rounding where `x (1 - Q)` takes
/// two; a clamp and the fused multiply-add take the place of the product, the subtraction and
/// the select on the sign. `inf` gives `inf`, `-inf` gives `-0`, a NaN stays NaN.
#[inline(always)]
pub(super) fn gelu(x: f32) -> f32 {
    let (tr, e) = tail(x);
    // `max(-0, x)` as one x86 `maxps` (`-0 > x ? -0 : x`: `x` for +0 and for a NaN)
    let pos = if -0.0 > x { -0.0 } else { x };
    (-clamped_abs(x)).mul_add(tr * e, pos)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// Units in the last place between `got` and the f64 truth rounded to f32.
    fn ulps(got: f32, truth: f64) -> u32 {
        let want = truth as f32;
        if got == want {
            return 0;
        }
        (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32
    }

    /// Every 97th f32 in the range (about 10^7 values across the exponents) plus the edges.
    fn sweep(lo: f32, hi: f32) -> impl Iterator<Item = f32> {
        let (a, b) = (lo.to_bits(), hi.to_bits());
        let pos = (0..=b).step_by(97).map(f32::from_bits);
        let neg = (0x8000_0000..=a.max(0x8000_0000))
            .step_by(97)
            .map(f32::from_bits);
        pos.chain(neg).filter(move |v| *v >= lo && *v <= hi)
    }

    #[test]
    fn exp_is_within_one_ulp_over_the_normal_range() {
        let worst = sweep(EXP_MIN, EXP_MAX)
            .map(|v| ulps(exp(v), f64::from(v).exp()))
            .max()
            .unwrap();
        assert!(worst <= 1, "{worst} ulp");
    }

    #[test]
    fn exp_edges_match_the_standard_library() {
        for v in [
            0.0f32, -0.0, 1.0, 88.0, 88.5, 88.72, 100.0, -87.0, -88.0, -200.0,
        ] {
            let (got, want) = (exp(v), (f64::from(v).exp()) as f32);
            assert!(
                got == want || ulps(got, f64::from(v).exp()) <= 2 || (want < 1.2e-38 && got == 0.0),
                "exp({v}) = {got}, want {want}"
            );
        }
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_is_accurate_everywhere() {
        for v in sweep(-20.0, 20.0) {
            let (got, want) = (tanh(v), f64::from(v).tanh());
            let err = (f64::from(got) - want).abs();
            assert!(
                err <= 2e-7 * want.abs().max(0.5),
                "tanh({v}) = {got}, want {want}"
            );
        }
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn erf_is_accurate_everywhere() {
        for v in sweep(-12.0, 12.0) {
            let (got, want) = (erf(v), libm::erf(f64::from(v)));
            let err = (f64::from(got) - want).abs();
            assert!(
                err <= 4e-7 * want.abs().max(1e-30),
                "erf({v}) = {got}, want {want}"
            );
        }
        assert!(erf(f32::NAN).is_nan());
        assert_eq!((erf(f32::INFINITY), erf(f32::NEG_INFINITY)), (1.0, -1.0));
    }

    /// The bounds of [`normal`]'s docs (measured there on a denser grid) for Phi and for
    /// [`gelu`], and at least PyTorch's accuracy: GELU absolute error 1.2e-6, relative 3.7e-7
    /// above 0 and 2.4e-4 on `[-3, 0)` (worse below).
    #[test]
    fn normal_cdf_and_gelu_are_accurate_everywhere() {
        for v in sweep(-14.0, 14.0) {
            let x = f64::from(v);
            let (cdf, e) = normal(v);
            let want = 0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2);
            // relative while Phi is a normal f32; once e^(-x^2/2) underflows, an absolute bound
            let bound = if want > 1e-37 { 4.4e-6 * want } else { 2e-38 };
            assert!(
                (f64::from(cdf) - want).abs() <= bound,
                "Phi({v}) = {cdf}, want {want}"
            );
            let want_e = (-0.5 * x * x).exp();
            let bound = if want_e > 1e-37 {
                4.4e-6 * want_e
            } else {
                2e-38
            };
            assert!(
                (f64::from(e) - want_e).abs() <= bound,
                "e({v}) = {e}, want {want_e}"
            );
            let (got, want) = (gelu(v), x * want);
            let err = (f64::from(got) - want).abs();
            let rel = if v >= -3.0 {
                5.6e-7
            } else if v >= -5.0 {
                8.1e-7
            } else {
                4.4e-6
            };
            assert!(
                err <= 2.5e-7 && (err <= rel * want.abs() || want.abs() < 1e-37),
                "gelu({v}) = {got}, want {want}"
            );
        }
        assert_eq!(normal(f32::INFINITY), (1.0, 0.0));
        assert_eq!(normal(f32::NEG_INFINITY), (0.0, 0.0));
        let (cdf, e) = normal(f32::NAN);
        assert!(cdf.is_nan() && e.is_nan());
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu(f32::NEG_INFINITY).to_bits(), (-0.0f32).to_bits());
        assert_eq!(gelu(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(gelu(0.0).to_bits(), 0);
        assert!(gelu(f32::NAN).is_nan());
    }
}

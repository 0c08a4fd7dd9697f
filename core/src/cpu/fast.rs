//! Branch-free `f32` exp, tanh, erf and erfc that the compiler vectorizes (libm's are one scalar call per
//! element): exp by range reduction to `[-ln2/2, ln2/2]` and Cephes' degree-6 polynomial, within
//! 2 ulp of the correctly rounded value over the normal range; tanh from it, with an odd series
//! near zero where `1 - 2 / (e^2x + 1)` would cancel; erf and erfc from least-squares polynomial
//! fits (an odd one below 1, `e^(-x^2)` times one in `1/x` above). The polynomials are fused
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

/// `e^x`.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let n = (xc * LOG2E + ROUND) - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, xc));
    let mut p = 1.987_569_1e-4_f32;
    p = p.mul_add(r, 1.398_2e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 0.166_666_65);
    p = p.mul_add(r, 0.5);
    let y = (p * r).mul_add(r, r) + 1.0;
    // n reaches 128 just below EXP_MAX, one past the largest exponent: scale by 2^127 and 2.
    let m = n.min(127.0);
    // m is an integer in [-126, 127]: m + ROUND holds it in its low mantissa bits, so its bits
    // minus ROUND's are m (a vector integer subtraction, where `as i32` saturates element by
    // element in scalar code).
    let k = (m + ROUND).to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(k.wrapping_add(127) << 23);
    let v = y * scale * (1.0 + (n - m));
    if x > EXP_MAX {
        f32::INFINITY
    } else if x < EXP_MIN {
        0.0
    } else {
        v
    }
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

/// `erfc(x) = 1 - erf(x)`, accurate relative to its value also where it is tiny (`x` large):
/// what the exact GELU's `x * erfc(-x / sqrt 2) / 2` needs for negative `x`.
#[inline(always)]
pub(super) fn erfc(x: f32) -> f32 {
    let a = x.abs();
    let tail = erfc_tail(if a < 1.0 { 1.0 } else { a });
    if x >= 1.0 {
        tail
    } else if x <= -1.0 {
        2.0 - tail
    } else {
        1.0 - erf_small(x)
    }
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
    fn exp_is_within_two_ulp_over_the_normal_range() {
        let worst = sweep(EXP_MIN, EXP_MAX)
            .map(|v| ulps(exp(v), f64::from(v).exp()))
            .max()
            .unwrap();
        assert!(worst <= 2, "{worst} ulp");
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
    fn erf_and_erfc_are_accurate_everywhere() {
        for v in sweep(-12.0, 12.0) {
            let (got, want) = (erf(v), libm::erf(f64::from(v)));
            let err = (f64::from(got) - want).abs();
            assert!(
                err <= 4e-7 * want.abs().max(1e-30),
                "erf({v}) = {got}, want {want}"
            );
            let (got, want) = (erfc(v), libm::erfc(f64::from(v)));
            let err = (f64::from(got) - want).abs();
            // relative also where erfc is tiny; once e^(-x^2) underflows f32, an absolute bound
            let bound = if want > 1e-37 { 4e-6 * want } else { 2e-38 };
            assert!(err <= bound, "erfc({v}) = {got}, want {want}");
        }
        assert!(erf(f32::NAN).is_nan() && erfc(f32::NAN).is_nan());
        assert_eq!((erf(f32::INFINITY), erf(f32::NEG_INFINITY)), (1.0, -1.0));
        assert_eq!((erfc(f32::INFINITY), erfc(f32::NEG_INFINITY)), (0.0, 2.0));
    }
}

// The unary operators, shared by `unary.wgsl` and `unary_mul.wgsl` (placed before either).
const SQRT_2_OVER_PI: f32 = 0.7978845608028654;

fn gelu_u(v: f32) -> f32 {
    return SQRT_2_OVER_PI * (v + 0.044715 * v * v * v);
}

const INV_SQRT_2: f32 = 0.7071067811865476;
const INV_SQRT_2PI: f32 = 0.3989422804014327;

// erf to about 1e-7: its Taylor series near 0 (relative accuracy where erf is small), else
// 1 - erfc by Numerical Recipes' Chebyshev fit (fractional error under 1.2e-7).
fn erf_f(v: f32) -> f32 {
    let z = abs(v);
    if z < 0.5 {
        let z2 = v * v;
        return 1.1283791670955126 * v * (1.0 + z2 * (-1.0 / 3.0 + z2 * (0.1 + z2 * (-1.0 / 42.0
            + z2 * (1.0 / 216.0 + z2 * (-1.0 / 1320.0))))));
    }
    let t = 1.0 / (1.0 + 0.5 * z);
    let e = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
    return select(e - 1.0, 1.0 - e, v >= 0.0);
}

// ln(1 + v) to f32 precision. Near 0 (where `log`'s error is absolute, 2^-21 in [0.5, 2], and
// 1 + v rounds) it is 2 atanh(s) with s = v / (2 + v), |s| <= 1/3, summed as its odd series.
fn log1p_f(v: f32) -> f32 {
    if v < -0.5 || v > 1.0 {
        return log(1.0 + v);
    }
    let s = v / (2.0 + v);
    let s2 = s * s;
    var p = 1.0 / 19.0;
    for (var k = 17.0; k > 0.0; k -= 2.0) {
        p = 1.0 / k + s2 * p;
    }
    return 2.0 * s * p;
}

// e^v - 1 to f32 precision: its Taylor series for |v| < 0.5 (no cancellation), else exp - 1.
fn expm1_f(v: f32) -> f32 {
    if abs(v) >= 0.5 {
        return exp(v) - 1.0;
    }
    var p = 1.0;
    for (var k = 11.0; k > 1.0; k -= 1.0) {
        p = 1.0 + v * p / k;
    }
    return v * p;
}

fn sigmoid_f(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

fn tanh_safe(v: f32) -> f32 {
    // tanh via exp with the argument clamped, so large |v| does not overflow to NaN
    let c = clamp(v, -15.0, 15.0);
    let e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}

// op(v) for a UNARY_* code; UNARY_AFFINE is a * v + b.
fn unary_value(op: u32, v: f32, a: f32, b: f32) -> f32 {
    var r: f32;
    switch op {
        case UNARY_NEG: { r = -v; }
        case UNARY_EXP: { r = exp(v); }
        case UNARY_LOG: { r = log(v); }
        case UNARY_SQRT: { r = sqrt(v); }
        case UNARY_SQUARE: { r = v * v; }
        // PyTorch's: NaN stays NaN and -0 stays -0 (by the bits: compilers may fold a compare
        // and select into a max, which drops NaN)
        case UNARY_RELU: { r = select(v, 0.0, order(v) < 0 && !is_nan(v)); }
        case UNARY_GELU: { r = 0.5 * v * (1.0 + tanh_safe(gelu_u(v))); }
        case UNARY_SIGMOID: { r = sigmoid_f(v); }
        case UNARY_TANH: { r = tanh_safe(v); }
        case UNARY_STEP: { r = select(0.0, 1.0, order(v) > 0 || is_nan(v)); }
        case UNARY_GELU_GRAD: {
            let u = gelu_u(v);
            let t = tanh_safe(u);
            r = 0.5 * (1.0 + t) + 0.5 * v * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v) * (1.0 - t * t);
        }
        case UNARY_ABS: { r = abs(v); }
        case UNARY_RSQRT: { r = 1.0 / sqrt(v); }
        case UNARY_SIN: { r = sin(v); }
        case UNARY_COS: { r = cos(v); }
        case UNARY_SILU: { r = v * sigmoid_f(v); }
        case UNARY_ERF: { r = erf_f(v); }
        case UNARY_GELU_ERF: { r = 0.5 * v * (1.0 + erf_f(v * INV_SQRT_2)); }
        case UNARY_SIGN: { r = sign(v); }
        case UNARY_SILU_GRAD: {
            let g = sigmoid_f(v);
            r = g * (1.0 + v * (1.0 - g));
        }
        case UNARY_GELU_ERF_GRAD: {
            r = 0.5 * (1.0 + erf_f(v * INV_SQRT_2)) + v * INV_SQRT_2PI * exp(-0.5 * v * v);
        }
        case UNARY_FLOOR: { r = floor(v); }
        case UNARY_CEIL: { r = ceil(v); }
        case UNARY_ROUND: { r = round(v); }
        case UNARY_TRUNC: { r = trunc(v); }
        case UNARY_LOG1P: { r = log1p_f(v); }
        case UNARY_EXPM1: { r = expm1_f(v); }
        default: { r = a * v + b; }
    }
    return r;
}

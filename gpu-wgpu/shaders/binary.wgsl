// out[i] = a[ia] op b[ib] with NumPy broadcasting. params: n, op (a BINARY_* code, or
// CMP_BASE + a CMP_* code: the comparison as 1.0 or 0.0, a Bool word), ndim, then out_shape[ndim],
// a_strides[ndim], b_strides[ndim] (element strides, 0 along broadcast dimensions), and the
// first element of a, b and out in their bindings (pieces of large tensors start anywhere).
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// The first comparison code (the backend's elementwise.rs has the same constant).
const CMP_BASE: u32 = 64u;

// Whether v is +-inf, by its bits (see is_nan).
fn is_inf(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) == 0x7f800000u;
}

// C's fmod, exact (WGSL's `%` is p - q * trunc(p / q), off by whole divisors once the quotient
// passes 2^24): subtract the divisor scaled by the largest power of two not above the rest,
// each subtraction exact (the rest is within twice the scaled divisor), until the rest is below
// the divisor: at most 280 steps for finite f32.
fn fmod_exact(p: f32, q: f32) -> f32 {
    if is_nan(p) || is_nan(q) || is_inf(p) || q == 0.0 {
        return bitcast<f32>(0x7fc00000u);
    }
    let aq = abs(q);
    var r = abs(p);
    if is_inf(q) || r < aq {
        return p;
    }
    for (var i = 0u; i < 300u && r >= aq; i++) {
        var t = ldexp(aq, frexp(r).exp - frexp(aq).exp);
        if t > r {
            t = t * 0.5;
        }
        r = r - t;
    }
    return select(r, -r, p < 0.0);
}

// The remainder with the divisor's sign (Python's `%`).
fn python_mod(p: f32, q: f32) -> f32 {
    let r = fmod_exact(p, q);
    return select(r, r + q, r != 0.0 && !is_nan(r) && (q < 0.0) != (r < 0.0));
}

// floor(p / q) from the exact remainder, as PyTorch's CPU; p / q (an infinity or NaN, made by
// bits: WGSL leaves division by zero unspecified) for a zero divisor.
fn floor_divide(p: f32, q: f32) -> f32 {
    let sign = (bitcast<u32>(p) ^ bitcast<u32>(q)) & 0x80000000u;
    if q == 0.0 {
        return select(bitcast<f32>(0x7f800000u | sign), bitcast<f32>(0x7fc00000u), p == 0.0 || is_nan(p));
    }
    let r = fmod_exact(p, q);
    if is_nan(r) {
        return r;
    }
    var div = (p - r) / q;
    if r != 0.0 && (q < 0.0) != (r < 0.0) {
        div = div - 1.0;
    }
    if div == 0.0 {
        return bitcast<f32>(sign);
    }
    let f = floor(div);
    return select(f, f + 1.0, div - f > 0.5);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    let nd = params[2];
    var rest = i;
    var ia = params[3u + 3u * nd];
    var ib = params[4u + 3u * nd];
    for (var d = nd; d > 0u; d--) {
        let size = params[3u + d - 1u];
        let c = rest % size;
        rest = rest / size;
        ia += c * params[3u + nd + d - 1u];
        ib += c * params[3u + 2u * nd + d - 1u];
    }
    let p = a[ia];
    let q = b[ib];
    var r: f32;
    let op = params[1];
    if op >= CMP_BASE {
        // NaN compares unequal to everything (by its bits: WGSL may assume no NaN)
        let nan = is_nan(p) || is_nan(q);
        var t: bool;
        switch op - CMP_BASE {
            case CMP_EQ: { t = !nan && p == q; }
            case CMP_NE: { t = nan || p != q; }
            case CMP_LT: { t = !nan && p < q; }
            case CMP_LE: { t = !nan && p <= q; }
            case CMP_GT: { t = !nan && p > q; }
            default: { t = !nan && p >= q; }
        }
        out[params[5u + 3u * nd] + i] = select(0.0, 1.0, t);
        return;
    }
    switch op {
        case BINARY_ADD: { r = p + q; }
        case BINARY_SUB: { r = p - q; }
        case BINARY_MUL: { r = p * q; }
        case BINARY_DIV: { r = p / q; }
        case BINARY_FMOD: { r = fmod_exact(p, q); }
        case BINARY_REMAINDER: { r = python_mod(p, q); }
        case BINARY_FLOOR_DIVIDE: { r = floor_divide(p, q); }
        // The CPU's: NaN if either is (tested by its bits), else the larger (smaller), p when
        // they are equal (maximum(-0, 0) is -0, maximum(0, -0) is 0, as PyTorch's CPU).
        case BINARY_MAXIMUM: { r = select(select(p, q, order(q) > order(p)), p + q, is_nan(p) || is_nan(q)); }
        default: { r = select(select(p, q, order(q) < order(p)), p + q, is_nan(p) || is_nan(q)); }
    }
    out[params[5u + 3u * nd] + i] = r;
}

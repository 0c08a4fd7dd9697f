// Casts from or to the 16-bit floats and i32, by bits (exact, and the same on every adapter:
// WGSL's own conversions may round either way or flush subnormals). params: n (elements of
// this piece), from, to (DTYPE_* codes), x base, out base (elements; even for a 16-bit out).
// 16-bit dtypes are packed two per word, element 2k in the low half; a 16-bit output is
// written one word (two elements) per thread, so no two threads share a word. Rounding is to
// nearest even, float to integer truncates (saturating, NaN 0), to Bool is x != 0 (NaN true),
// NaN stays NaN with its payload's high bits and the quiet bit set (the `half` crate's).
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn half_at(i: u32) -> u32 {
    return (x[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
}

fn f16_to_f32(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0x1fu {
        if m == 0u {
            return sign | 0x7f800000u;
        }
        return sign | 0x7fc00000u | (m << 13u);
    }
    if e == 0u {
        if m == 0u {
            return sign;
        }
        // subnormal m * 2^-24, normalised around its leading bit p
        let p = firstLeadingBit(m);
        return sign | ((p + 103u) << 23u) | (((m << (10u - p)) & 0x3ffu) << 13u);
    }
    return sign | ((e + 112u) << 23u) | (m << 13u);
}

fn bf16_to_f32(h: u32) -> u32 {
    if (h & 0x7fffu) > 0x7f80u {
        return (h | 0x40u) << 16u;
    }
    return h << 16u;
}

// Rounds `m` right by `s` bits (1..31), to nearest even.
fn round_shift(m: u32, s: u32) -> u32 {
    let rest = m & ((1u << s) - 1u);
    let half = 1u << (s - 1u);
    let q = m >> s;
    return q + select(0u, 1u, rest > half || (rest == half && (q & 1u) == 1u));
}

fn f32_to_f16(b: u32) -> u32 {
    let sign = (b >> 16u) & 0x8000u;
    let e = (b >> 23u) & 0xffu;
    let m = b & 0x7fffffu;
    if e == 0xffu {
        return sign | 0x7c00u | select(0x200u, 0u, m == 0u) | (m >> 13u);
    }
    let he = i32(e) - 112;
    if he >= 31 {
        return sign | 0x7c00u;
    }
    if he <= 0 {
        // a subnormal (or zero) half: the significand with its hidden bit, shifted
        let s = u32(14 - he);
        if s > 24u {
            return sign;
        }
        return sign | round_shift(m | 0x800000u, s);
    }
    // a carry out of the mantissa rounds into the exponent (and up to infinity)
    return sign | ((u32(he) << 10u) + round_shift(m, 13u));
}

fn f32_to_bf16(b: u32) -> u32 {
    if (b & 0x7fffffffu) > 0x7f800000u {
        return (b >> 16u) | 0x40u;
    }
    return (b >> 16u) + select(0u, 1u, (b & 0xffffu) > 0x8000u || ((b & 0xffffu) == 0x8000u && ((b >> 16u) & 1u) == 1u));
}

// The bits of the float nearest the integer v in a format of `man` mantissa bits, exponent
// bias `bias`, all-ones exponent `emax` and sign bit `sign_at` (f32, f16, bf16).
fn int_to_float(v: i32, man: u32, bias: u32, emax: u32, sign_at: u32) -> u32 {
    if v == 0 {
        return 0u;
    }
    let sign = select(0u, 1u << sign_at, v < 0);
    let a = select(u32(v), ~u32(v) + 1u, v < 0);
    var p = firstLeadingBit(a);
    var m: u32;
    if p <= man {
        m = a << (man - p);
    } else {
        m = round_shift(a, p - man);
        if (m >> (man + 1u)) != 0u {
            m = m >> 1u;
            p = p + 1u;
        }
    }
    if p + bias >= emax {
        return sign | (emax << man);
    }
    return sign | ((p + bias) << man) | (m & ((1u << man) - 1u));
}

// trunc of the f32 of bits b as i32, saturating, NaN 0.
fn f32_to_i32(b: u32) -> i32 {
    let v = bitcast<f32>(b);
    if (b & 0x7fffffffu) > 0x7f800000u {
        return 0;
    }
    if v >= 2147483648.0 {
        return 2147483647;
    }
    if v <= -2147483648.0 {
        return -2147483647 - 1;
    }
    return i32(trunc(v));
}

// (low, high) words of the f64 equal to the f32 of bits b.
fn f32_to_f64(b: u32) -> vec2<u32> {
    let sign = b & 0x80000000u;
    let e = (b >> 23u) & 0xffu;
    let m = b & 0x7fffffu;
    if e == 0xffu {
        return vec2<u32>(m << 29u, sign | 0x7ff00000u | (m >> 3u));
    }
    if e == 0u {
        if m == 0u {
            return vec2<u32>(0u, sign);
        }
        let p = firstLeadingBit(m);
        let mm = (m << (23u - p)) & 0x7fffffu;
        return vec2<u32>(mm << 29u, sign | ((p + 874u) << 20u) | (mm >> 3u));
    }
    return vec2<u32>(m << 29u, sign | ((e + 896u) << 20u) | (m >> 3u));
}

// (low, high) words of the f64 equal to the integer v (exact).
fn i32_to_f64(v: i32) -> vec2<u32> {
    if v == 0 {
        return vec2<u32>(0u, 0u);
    }
    let sign = select(0u, 0x80000000u, v < 0);
    let a = select(u32(v), ~u32(v) + 1u, v < 0);
    let p = firstLeadingBit(a);
    // the p bits below the leading one, at the top of the 52-bit fraction
    let f = a & ~(1u << p);
    var hi = 0u;
    var lo = 0u;
    if p > 20u {
        hi = f >> (p - 20u);
        lo = f << (52u - p);
    } else {
        hi = f << (20u - p);
    }
    return vec2<u32>(lo, sign | ((p + 1023u) << 20u) | hi);
}

// (low, high) words of the i64 trunc of the f32 of bits b, saturating, NaN 0.
fn f32_to_i64(b: u32) -> vec2<u32> {
    let v = bitcast<f32>(b);
    if (b & 0x7fffffffu) > 0x7f800000u {
        return vec2<u32>(0u, 0u);
    }
    if v >= 9.223372e18 {
        return vec2<u32>(0xffffffffu, 0x7fffffffu);
    }
    if v <= -9.223372e18 {
        return vec2<u32>(0u, 0x80000000u);
    }
    let t = trunc(abs(v));
    let hi = floor(t / 4294967296.0);
    let lo = t - hi * 4294967296.0;
    var w = vec2<u32>(u32(lo), u32(hi));
    if v < 0.0 {
        w = vec2<u32>(~w.x + 1u, ~w.y + select(0u, 1u, w.x == 0u));
    }
    return w;
}

// Element i of x: its f32 bits for a float source, its bits as an i32 for I32.
fn load(i: u32) -> u32 {
    let at = params[3] + i;
    switch params[1] {
        case DTYPE_F16: { return f16_to_f32(half_at(at)); }
        case DTYPE_BF16: { return bf16_to_f32(half_at(at)); }
        default: { return x[at]; }
    }
}

// Element i as a 16-bit float of dtype `to`.
fn half_of(i: u32, to: u32) -> u32 {
    var v = load(i);
    if params[1] == DTYPE_I32 {
        // through f32 (two roundings), as PyTorch casts integers to 16-bit floats
        v = int_to_float(bitcast<i32>(v), 23u, 127u, 255u, 31u);
    }
    if to == DTYPE_F16 {
        return f32_to_f16(v);
    }
    return f32_to_bf16(v);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    let n = params[0];
    let to = params[2];
    let int = params[1] == DTYPE_I32;
    if to == DTYPE_F16 || to == DTYPE_BF16 {
        let i = 2u * t;
        if i >= n {
            return;
        }
        var w = half_of(i, to);
        if i + 1u < n {
            w = w | (half_of(i + 1u, to) << 16u);
        }
        out[params[4] / 2u + t] = w;
        return;
    }
    if t >= n {
        return;
    }
    let v = load(t);
    let o = params[4] + t;
    switch to {
        case DTYPE_F32: {
            out[o] = select(v, int_to_float(bitcast<i32>(v), 23u, 127u, 255u, 31u), int);
        }
        case DTYPE_I32: {
            out[o] = select(bitcast<u32>(f32_to_i32(v)), v, int);
        }
        case DTYPE_F64: {
            let w = select(f32_to_f64(v), i32_to_f64(bitcast<i32>(v)), int);
            out[2u * o] = w.x;
            out[2u * o + 1u] = w.y;
        }
        case DTYPE_I64: {
            let s = select(0u, 0xffffffffu, bitcast<i32>(v) < 0);
            let w = select(f32_to_i64(v), vec2<u32>(v, s), int);
            out[2u * o] = w.x;
            out[2u * o + 1u] = w.y;
        }
        default: {
            out[o] = select(select(0u, 1u, (v & 0x7fffffffu) != 0u), select(0u, 1u, v != 0u), int);
        }
    }
}

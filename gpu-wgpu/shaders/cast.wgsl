// f32 cast to another dtype, one thread per element of a piece: params: n, to (0: f32, 1: f64,
// 2: i64, 3: Bool), x base, out base (elements). To f64 exactly (by bits: WGSL has no f64); to
// i64 truncated toward zero, saturating, NaN 0; to Bool x != 0 (NaN true), as PyTorch.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

// (low, high) words of the f64 equal to v.
fn to_f64(v: f32) -> vec2<u32> {
    let b = bitcast<u32>(v);
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
        // subnormal m * 2^-149: normalised around its leading bit p
        let p = firstLeadingBit(m);
        let mm = (m << (23u - p)) & 0x7fffffu;
        return vec2<u32>(mm << 29u, sign | ((p + 874u) << 20u) | (mm >> 3u));
    }
    return vec2<u32>(m << 29u, sign | ((e + 896u) << 20u) | (m >> 3u));
}

// (low, high) words of the i64 trunc(v), saturating, NaN 0.
fn to_i64(v: f32) -> vec2<u32> {
    let b = bitcast<u32>(v);
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
    // exact: t and its high part are integers of at most 24 significant bits
    let hi = floor(t / 4294967296.0);
    let lo = t - hi * 4294967296.0;
    var w = vec2<u32>(u32(lo), u32(hi));
    if v < 0.0 {
        // two's complement negation
        w = vec2<u32>(~w.x + 1u, ~w.y + select(0u, 1u, w.x == 0u));
    }
    return w;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    let v = x[params[2] + i];
    let o = params[3] + i;
    switch params[1] {
        case 0u: { out[o] = bitcast<u32>(v); }
        case 1u: { let w = to_f64(v); out[2u * o] = w.x; out[2u * o + 1u] = w.y; }
        case 2u: { let w = to_i64(v); out[2u * o] = w.x; out[2u * o + 1u] = w.y; }
        default: { out[o] = select(0u, 1u, (bitcast<u32>(v) & 0x7fffffffu) != 0u); }
    }
}

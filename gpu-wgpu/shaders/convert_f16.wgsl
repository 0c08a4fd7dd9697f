enable f16;
// convert.wgsl's F16 <-> F32 casts with the adapter's f16 (SHADER_F16): params as there. F16
// to F32 is `unpack2x16float`; F32 to F16 rounds with WGSL's `f16` conversion, then packs the
// (now exact) value. Infinity and NaN (quiet bit set, payload's high bits kept, as the host's)
// and values past the f16 range (infinity: WGSL leaves that conversion undefined) are by bits.
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

// The f16 bits of the f32 of bits b.
fn to_f16(b: u32) -> u32 {
    let sign = (b >> 16u) & 0x8000u;
    if (b & 0x7fffffffu) >= 0x7f800000u {
        let m = b & 0x7fffffu;
        return sign | 0x7c00u | select(0x200u, 0u, m == 0u) | (m >> 13u);
    }
    let v = bitcast<f32>(b);
    if abs(v) >= 65520.0 {
        return sign | 0x7c00u;
    }
    // f16(v) is 0 for tiny v: keep the sign of zero
    return (pack2x16float(vec2<f32>(f32(f16(v)), 0.0)) & 0x7fffu) | sign;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    let n = params[0];
    if params[2] == DTYPE_F16 {
        let i = 2u * t;
        if i >= n {
            return;
        }
        var w = to_f16(x[params[3] + i]);
        if i + 1u < n {
            w = w | (to_f16(x[params[3] + i + 1u]) << 16u);
        }
        out[params[4] / 2u + t] = w;
        return;
    }
    if t >= n {
        return;
    }
    let at = params[3] + t;
    out[params[4] + t] = bitcast<u32>(unpack2x16float(x[at >> 1u])[at & 1u]);
}

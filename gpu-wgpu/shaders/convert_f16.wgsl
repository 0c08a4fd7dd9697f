enable f16;
// convert.wgsl's F16 <-> F32 casts with WGSL's f16 (adapters with SHADER_F16): params as
// there. F16 to F32 is exact; F32 to F16 rounds to nearest even below the f16 range, gives
// infinity above it and keeps NaN a (quiet) NaN of the same sign and high payload bits.
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn to_f16(b: u32) -> f16 {
    let sign = (b >> 16u) & 0x8000u;
    if (b & 0x7fffffffu) >= 0x7f800000u {
        // infinity, or NaN with its quiet bit set and the payload's high bits kept
        let m = b & 0x7fffffu;
        let h = sign | 0x7c00u | select(0x200u, 0u, m == 0u) | (m >> 13u);
        return bitcast<vec2<f16>>(h).x;
    }
    let v = bitcast<f32>(b);
    // 65520 and above round to infinity (WGSL leaves out-of-range conversions undefined)
    if abs(v) >= 65520.0 {
        return bitcast<vec2<f16>>(sign | 0x7c00u).x;
    }
    return f16(v);
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
        let a = to_f16(x[params[3] + i]);
        var b = f16(0.0);
        if i + 1u < n {
            b = to_f16(x[params[3] + i + 1u]);
        }
        var w = bitcast<u32>(vec2<f16>(a, b));
        if i + 1u >= n {
            w = w & 0xffffu;
        }
        out[params[4] / 2u + t] = w;
        return;
    }
    if t >= n {
        return;
    }
    let at = params[3] + t;
    let h = bitcast<vec2<f16>>(x[at >> 1u]);
    out[params[4] + t] = bitcast<u32>(f32(select(h.x, h.y, (at & 1u) == 1u)));
}

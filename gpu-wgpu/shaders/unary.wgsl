// out[i] = op(x[i]); params: n, op (gflow's UnaryOp order), a, b (for the affine op: a * x + b,
// as f32 bits).
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const SQRT_2_OVER_PI: f32 = 0.7978845608028654;

fn gelu_u(v: f32) -> f32 {
    return SQRT_2_OVER_PI * (v + 0.044715 * v * v * v);
}

fn tanh_safe(v: f32) -> f32 {
    // tanh via exp with the argument clamped, so large |v| does not overflow to NaN
    let c = clamp(v, -15.0, 15.0);
    let e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    let v = x[i];
    var r: f32;
    switch params[1] {
        case 0u: { r = -v; }
        case 1u: { r = exp(v); }
        case 2u: { r = log(v); }
        case 3u: { r = sqrt(v); }
        case 4u: { r = v * v; }
        case 5u: { r = max(v, 0.0); }
        case 6u: { r = 0.5 * v * (1.0 + tanh_safe(gelu_u(v))); }
        case 7u: { r = 1.0 / (1.0 + exp(-v)); }
        case 8u: { r = tanh_safe(v); }
        case 9u: { r = select(0.0, 1.0, v > 0.0); }
        case 10u: {
            let u = gelu_u(v);
            let t = tanh_safe(u);
            r = 0.5 * (1.0 + t) + 0.5 * v * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v) * (1.0 - t * t);
        }
        default: { r = bitcast<f32>(params[2]) * v + bitcast<f32>(params[3]); }
    }
    out[i] = r;
}

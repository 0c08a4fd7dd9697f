// out[i] = op(x[i]); params: n, op (a UNARY_* code), a, b (for UNARY_AFFINE: a * x + b, as f32
// bits).
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    out[i] = unary_value(params[1], x[i], bitcast<f32>(params[2]), bitcast<f32>(params[3]));
}

// out[i] = grad[i] * op(x[i]) for op an activation's derivative (an activation's input
// gradient in one pass); params: n, op (a UNARY_* code).
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    out[i] = grad[i] * unary_value(params[1], x[i], 1.0, 0.0);
}

// One Adam or AdamW step in place (core's host update: the same operations in the same order);
// params: n, decoupled (0 or 1), then the f32 bits of lr, beta1, beta2, c1, c2, k1, k2, eps,
// weight_decay, shrink (gflow's AdamStep).
@group(0) @binding(1) var<storage, read_write> p: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;

fn k(i: u32) -> f32 {
    return bitcast<f32>(params[2u + i]);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    var gi = g[i];
    var pi = p[i];
    if params[1] != 0u {
        pi = pi * k(9u);
    } else {
        gi = gi + k(8u) * pi;
    }
    let mi = k(1u) * m[i] + k(3u) * gi;
    let vi = k(2u) * v[i] + k(4u) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - k(0u) * (mi * k(5u)) / (sqrt(vi * k(6u)) + k(7u));
}

// torch.where: out[i] = cond[ic] != 0 ? a[ia] : b[ib] with NumPy broadcasting over (cond, a,
// b); a, b and out hold `words` 32-bit words per element (any dtype), cond one word per Bool.
// params: n, words, ndim, then out_shape[ndim], the element strides of cond, a and b (ndim
// each, 0 along broadcast dims), and the first element of cond, a, b and out in their
// bindings (pieces of large tensors start anywhere).
@group(0) @binding(1) var<storage, read> cond: array<u32>;
@group(0) @binding(2) var<storage, read> a: array<u32>;
@group(0) @binding(3) var<storage, read> b: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    let nd = params[2];
    var rest = i;
    var ic = params[3u + 4u * nd];
    var ia = params[4u + 4u * nd];
    var ib = params[5u + 4u * nd];
    for (var d = nd; d > 0u; d--) {
        let size = params[3u + d - 1u];
        let c = rest % size;
        rest = rest / size;
        ic += c * params[3u + nd + d - 1u];
        ia += c * params[3u + 2u * nd + d - 1u];
        ib += c * params[3u + 3u * nd + d - 1u];
    }
    let words = params[1];
    let o = params[6u + 4u * nd] + i;
    let take = cond[ic] != 0u;
    for (var w = 0u; w < words; w++) {
        out[o * words + w] = select(b[ib * words + w], a[ia * words + w], take);
    }
}

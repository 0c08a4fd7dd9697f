// torch.gather along `dim`: out[o] = x at o's coordinates (in idx's shape) with dim's replaced
// by idx[o], zero where idx[o] is outside 0..dim_len; one thread per output element of
// `words` words. params: n, words, ndim, dim, dim_len, idx_shape[ndim], x_strides[ndim].
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = flat(gid, nwg);
    if o >= params[0] {
        return;
    }
    let words = params[1];
    let nd = params[2];
    let dim = params[3];
    // an i64 index is in range when its high word is 0 and its low word below dim_len
    let inside = idx[2u * o + 1u] == 0u && idx[2u * o] < params[4];
    let i = select(0u, idx[2u * o], inside);
    var rest = o;
    var off = 0u;
    for (var d = nd; d > 0u; d--) {
        let size = params[5u + d - 1u];
        let c = rest % size;
        rest = rest / size;
        off += select(c, i, d - 1u == dim) * params[5u + nd + d - 1u];
    }
    for (var w = 0u; w < words; w++) {
        out[o * words + w] = select(0u, x[off * words + w], inside);
    }
}

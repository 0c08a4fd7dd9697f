// torch.gather along `dim`: out[o] = x at o's coordinates (in idx's shape) with dim's replaced
// by idx[o], for the indices in [lo, hi) that the bound piece of x holds along dim (the
// output starts zeroed; others are left); one thread per output element of `words` words, on
// a block of idx's first dim (x's piece: the matching rows, or when dim is 0 the rows lo..hi).
// params: n, words, ndim, dim, lo, hi, idx_shape[ndim] (of the block), x_strides[ndim], then
// the first element of x, idx and out in their bindings.
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
    let at = params[7u + 2u * nd] + o;
    let lo = params[4];
    // an i64 index is in [lo, hi) when its high word is 0 and its low word is
    if idx[2u * at + 1u] != 0u || idx[2u * at] < lo || idx[2u * at] >= params[5] {
        return;
    }
    let i = idx[2u * at] - lo;
    var rest = o;
    var off = params[6u + 2u * nd];
    for (var d = nd; d > 0u; d--) {
        let size = params[6u + d - 1u];
        let c = rest % size;
        rest = rest / size;
        off += select(c, i, d - 1u == dim) * params[6u + nd + d - 1u];
    }
    for (var w = 0u; w < words; w++) {
        out[(params[8u + 2u * nd] + o) * words + w] = x[off * words + w];
    }
}

// 16-bit elements between their packed layout (two per word, element 2k in the low half) and
// one per word (in the low half, the high half zero), so the word kernels move them. params:
// n (elements of this piece), pack (1: words to packed, 0: packed to words), x base, out base
// (elements; even on the packed side). Packing writes one word (two elements) per thread.
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    let n = params[0];
    let xb = params[2];
    if params[1] == 0u {
        if t >= n {
            return;
        }
        let i = xb + t;
        out[params[3] + t] = (x[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
        return;
    }
    let i = 2u * t;
    if i >= n {
        return;
    }
    var w = x[xb + i] & 0xffffu;
    if i + 1u < n {
        w = w | (x[xb + i + 1u] << 16u);
    }
    out[params[3] / 2u + t] = w;
}

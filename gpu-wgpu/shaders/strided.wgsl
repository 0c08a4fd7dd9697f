// Strided copies of any dtype, as 32-bit words (wpe words per element). One thread per element of
// the contiguous side. params: n, wpe, ndim, base, put, contiguous base, then shape[ndim],
// strides[ndim] (in elements, of the strided side). put = 0: out[cb + e] = x[base + offset(e)]
// (slice, permute); put = 1: out[base + offset(e)] = x[cb + e] (placing one input of a
// concatenation). The bases let pieces of large tensors be bound at aligned offsets.
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if e >= params[0] {
        return;
    }
    let wpe = params[1];
    let nd = params[2];
    var rest = e;
    var off = params[3];
    for (var d = nd; d > 0u; d--) {
        let size = params[6u + d - 1u];
        off += (rest % size) * params[6u + nd + d - 1u];
        rest = rest / size;
    }
    let c = params[5] + e;
    for (var w = 0u; w < wpe; w++) {
        if params[4] == 0u {
            out[c * wpe + w] = x[off * wpe + w];
        } else {
            out[off * wpe + w] = x[c * wpe + w];
        }
    }
}

// strided.wgsl for 16-bit elements packed two per word: the box of x (first element x base,
// strides in elements) gathered into the contiguous out, one thread per output word (its two
// elements), so no two threads write one word. params: n, ndim, x base, out base (even),
// then extent[ndim], x strides[ndim].
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

// The 16 bits of box element e.
fn element(e: u32) -> u32 {
    let nd = params[1];
    var rest = e;
    var src = params[2];
    for (var d = nd; d > 0u; d--) {
        let size = params[4u + d - 1u];
        src += (rest % size) * params[4u + nd + d - 1u];
        rest = rest / size;
    }
    return (x[src >> 1u] >> ((src & 1u) * 16u)) & 0xffffu;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    let e = 2u * t;
    if e >= params[0] {
        return;
    }
    var w = element(e);
    if e + 1u < params[0] {
        w = w | (element(e + 1u) << 16u);
    }
    out[params[3] / 2u + t] = w;
}
